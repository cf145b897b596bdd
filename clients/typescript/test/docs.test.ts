/**
 * The guide's integrations, run as written against the live server: each documented MCP
 * configuration (Claude Code's `claude mcp add`, Claude Desktop's mcp-remote entry, the
 * streamable-HTTP JSON of Cursor and `.mcp.json`) gives the URL and headers that drive the
 * official MCP TypeScript SDK's `StreamableHTTPClientTransport`; the Vercel AI SDK program is
 * compiled and run with a scripted model; the kinds and change-feed programs are compiled and
 * run, and print what the guide says they print.
 */

import assert from "node:assert/strict";
import { mkdirSync, writeFileSync } from "node:fs";
import { resolve } from "node:path";
import { test } from "node:test";

import { MemoryHub } from "@memoryhub/client";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

import {
  KEY_PLACEHOLDER,
  claudeCodeEndpoint,
  compileProgram,
  guideBlock,
  mcpRemoteEndpoint,
  onLiveServer,
  runProgram,
  type McpEndpoint,
} from "./guide.js";
import { PACKAGE, SERVER_URL, newAgentKey, withServerSettings } from "./support.js";

// The memory tools, and one per kind with a schema (a new tenant's: UserProfile).
const TOOLS = [
  "create_user_profile",
  "memory_forget",
  "memory_hydrate",
  "memory_ingest",
  "memory_keys",
  "memory_list",
  "memory_recall",
  "memory_search",
  "memory_store",
  "memory_update",
];

/** Connects as an MCP client would, lists the tools, stores a fact; returns the tool names. */
async function storeOverMcp(
  endpoint: McpEndpoint,
  fact: { text: string; key: string },
): Promise<string[]> {
  const client = new Client({ name: "memoryhub-guide-test", version: "1.0.0" });
  const transport = new StreamableHTTPClientTransport(new URL(endpoint.url), {
    requestInit: { headers: endpoint.headers },
  });
  await client.connect(transport);
  try {
    const { tools } = await client.listTools();
    const result = await client.callTool({ name: "memory_store", arguments: fact });
    assert.notEqual(result.isError, true, JSON.stringify(result.content));
    return tools.map((tool) => tool.name).sort();
  } finally {
    await client.close();
  }
}

/** A documented configuration drives MCP with a fresh key: the fact lands in that agent's memory. */
async function assertConfigurationWorks(endpointFor: (key: string) => McpEndpoint): Promise<void> {
  const { key } = await newAgentKey({ scopes: ["read", "write"] });
  const endpoint = onLiveServer(endpointFor(key), SERVER_URL);
  assert.equal(new URL(endpoint.url).pathname, "/mcp");
  assert.deepEqual(endpoint.headers, { Authorization: `Bearer ${key}` });

  const fact = { text: `Configured through the guide ${crypto.randomUUID()}`, key: "guide.mcp" };
  assert.deepEqual(await storeOverMcp(endpoint, fact), TOOLS);
  const stored = await new MemoryHub({ url: SERVER_URL, apiKey: key }).recall("guide.mcp");
  assert.equal(stored?.text, fact.text);

  // The header is what authenticates: the same URL without it is refused before any tool.
  await assert.rejects(
    storeOverMcp({ url: endpoint.url, headers: {} }, fact),
    (error: { code?: unknown; message: string }) =>
      error.code === 401 && /UNAUTHENTICATED/.test(error.message),
  );
}

/** A JSON configuration with the documented placeholder replaced by `key`. */
function jsonConfiguration(
  name: string,
  key: string,
): { mcpServers: Record<string, Record<string, unknown>> } {
  const block = guideBlock(name);
  assert.equal(block.lang, "json");
  assert.ok(
    block.code.includes(KEY_PLACEHOLDER),
    `the ${name} block shows the key as ${KEY_PLACEHOLDER}`,
  );
  return JSON.parse(block.code.replaceAll(KEY_PLACEHOLDER, key)) as {
    mcpServers: Record<string, Record<string, unknown>>;
  };
}

test("Claude Code: the documented `claude mcp add` command's URL and header", async () => {
  const block = guideBlock("claude-code");
  assert.equal(block.lang, "sh");
  await assertConfigurationWorks((key) => claudeCodeEndpoint(block.code, { MEMORYHUB_KEY: key }));
});

test("Claude Desktop: the documented mcp-remote entry's URL and header", async () => {
  await assertConfigurationWorks((key) => {
    const server = jsonConfiguration("claude-desktop", key).mcpServers.memoryhub;
    assert.ok(server, "the entry is named memoryhub");
    return mcpRemoteEndpoint(
      server as { command: string; args: string[]; env?: Record<string, string> },
    );
  });
});

test("Cursor and .mcp.json: the documented streamable-HTTP entry's URL and headers", async () => {
  await assertConfigurationWorks((key) => {
    const server = jsonConfiguration("http-json", key).mcpServers.memoryhub as {
      type: string;
      url: string;
      headers: Record<string, string>;
    };
    assert.equal(server.type, "http");
    return { url: server.url, headers: server.headers };
  });
});

test("the Vercel AI SDK program runs as written (with a scripted model)", async () => {
  const block = guideBlock("ai-sdk");
  assert.equal(block.lang, "ts");
  // Under the package, so `@memoryhub/client` resolves to this build and `ai` to its copy.
  const dir = resolve(PACKAGE, ".test-build", "guide");
  mkdirSync(dir, { recursive: true });
  const source = resolve(dir, "ai-sdk.ts");
  writeFileSync(source, block.code);
  const program = compileProgram(source);

  const { key } = await newAgentKey();
  const out = runProgram(program, {
    cwd: dir,
    env: { ...process.env, MEMORYHUB_URL: SERVER_URL, MEMORYHUB_API_KEY: key },
    nodeArgs: ["--import", resolve(PACKAGE, ".test-build", "test", "scripted-provider.js")],
  });
  assert.deepEqual(out.trim().split("\n"), [
    "called memory_hydrate",
    "called memory_store",
    "called memory_store",
    "Try a vegetarian tasca in Lisbon tonight.",
  ]);
  const hub = new MemoryHub({ url: SERVER_URL, apiKey: key });
  assert.equal((await hub.recall("diet", { subject_id: "alice" }))?.text, "Alice is vegetarian");
  assert.equal(
    (await hub.recall("home.city", { subject_id: "alice" }))?.text,
    "Alice lives in Lisbon",
  );
  assert.equal(await hub.recall("diet"), null); // stored for alice, as memoryTools was told
});

/** A guide block compiled in strict mode under the package (so `@memoryhub/client` is this
 * build) and run with `env`; returns the lines it printed. */
function runGuideBlock(name: string, env: Record<string, string>): string[] {
  const block = guideBlock(name);
  assert.equal(block.lang, "ts");
  const dir = resolve(PACKAGE, ".test-build", "guide");
  mkdirSync(dir, { recursive: true });
  const source = resolve(dir, `${name}.ts`);
  writeFileSync(source, block.code);
  const out = runProgram(compileProgram(source), {
    cwd: dir,
    env: { ...process.env, MEMORYHUB_URL: SERVER_URL, ...env },
  });
  return out.trim().split("\n");
}

/** What the guide shows a block printing: a `// …` comment at the end of a line that calls
 * `console.log`, or on the lines right after one (a line of output each). */
function documentedOutput(name: string): string[] {
  const shown: string[] = [];
  let afterOutput = false;
  for (const line of guideBlock(name).code.split("\n")) {
    const comment = /^\s*\/\/ (.*)$/.exec(line);
    if (comment && afterOutput) {
      shown.push(comment[1]!);
      continue;
    }
    afterOutput = line.includes("console.log(");
    const inline = afterOutput ? /\); \/\/ (.*)$/.exec(line) : null;
    if (inline) shown.push(inline[1]!);
  }
  return shown;
}

test("the kinds program runs as written and prints what the guide shows", async () => {
  const { key } = await newAgentKey({ tenant: `ts-${crypto.randomUUID().slice(0, 8)}` });
  const lines = runGuideBlock("typescript-kinds", { MEMORYHUB_API_KEY: key });
  assert.deepEqual(lines, [
    "AgentInstructions, InteractionLog, Invoice, UserProfile, fact",
    '[{"path":"/amount","message":"\'ten\' is not of type \'number\'"}]',
    "created replaced true 2",
    "user null",
  ]);
  assert.deepEqual(lines, documentedOutput("typescript-kinds"));
  const hub = new MemoryHub({ url: SERVER_URL, apiKey: key });
  assert.equal((await hub.getKind("Invoice")).memory_type, "episodic");
  assert.deepEqual(
    (await hub.list({ subject_id: "alice", kind: "UserProfile" }).toArray()).map((m) => m.data),
    [{ city: "Lisbon" }],
  );
});

test("the change-feed program runs as written and prints what the guide shows", async () => {
  const { key } = await newAgentKey({ tenant: `ts-${crypto.randomUUID().slice(0, 8)}` });
  const lines = await withServerSettings({ webhook_allow_insecure: true }, () =>
    runGuideBlock("typescript-events", {
      MEMORYHUB_API_KEY: key,
      WEBHOOK_URL: "http://127.0.0.1:9/hook",
    }),
  );
  assert.deepEqual(lines, [
    "memory.created 1 Ships on Fridays",
    "memory.updated 2 Ships on Thursdays",
    "memory.forgotten false",
    "search index 3 true",
  ]);
  assert.deepEqual(lines, documentedOutput("typescript-events"));
  const hub = new MemoryHub({ url: SERVER_URL, apiKey: key });
  assert.deepEqual(await hub.webhooks(), []); // the program deleted what it created
});
