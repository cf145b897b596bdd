/**
 * The package as a user gets it: `npm pack`, installed into a clean directory (no network:
 * a tarball with no dependencies), imported from Node's ESM; and the guide's first TypeScript
 * program, compiled in strict mode against the installed declarations and run there as
 * written.
 */

import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { after, before, test } from "node:test";

import { MemoryHub } from "@memoryhub/client";

import { compileProgram, guideBlock, runProgram } from "./guide.js";
import { PACKAGE, SERVER_URL, newAgentKey } from "./support.js";

interface PackResult {
  filename: string;
  files: Array<{ path: string }>;
}

let work: string;
let app: string;
let packed: PackResult;

function npm(args: string[], cwd: string): string {
  return execFileSync("npm", args, {
    cwd,
    encoding: "utf8",
    env: { ...process.env, npm_config_update_notifier: "false" },
  });
}

before(() => {
  work = mkdtempSync(join(tmpdir(), "memoryhub-ts-"));
  // dist/ is built already (the suite builds before testing); pack exactly that.
  packed = (
    JSON.parse(
      npm(["pack", "--json", "--ignore-scripts", "--pack-destination", work], PACKAGE),
    ) as PackResult[]
  )[0]!;
  app = join(work, "app");
  execFileSync("mkdir", [app]);
  writeFileSync(
    join(app, "package.json"),
    JSON.stringify({ name: "app", private: true, type: "module" }),
  );
  npm(["install", "--offline", "--no-audit", "--no-fund", join(work, packed.filename)], app);
});

after(() => rmSync(work, { recursive: true, force: true }));

test("the tarball holds the build, its declarations and the guide, nothing of the tests", () => {
  const files = packed.files.map((file) => file.path).sort();
  for (const needed of [
    "package.json",
    "README.md",
    "dist/index.js",
    "dist/index.d.ts",
    "dist/ai.js",
    "dist/ai.d.ts",
  ]) {
    assert.ok(files.includes(needed), `${needed} is packed`);
  }
  assert.deepEqual(
    files.filter(
      (file) => !/^(dist|src)\//.test(file) && !["package.json", "README.md"].includes(file),
    ),
    [],
  );
  assert.ok(files.every((file) => !file.includes(".test") && !file.startsWith("scripts/")));
});

test("it installs with no dependencies and imports in Node's ESM", async () => {
  const installed = JSON.parse(
    readFileSync(join(app, "node_modules", "@memoryhub", "client", "package.json"), "utf8"),
  ) as { dependencies?: unknown };
  assert.equal(installed.dependencies, undefined);
  // ai and zod are optional peers of the ./ai entry point: not installed for the core client.
  assert.ok(
    !existsSync(join(app, "node_modules", "ai")) && !existsSync(join(app, "node_modules", "zod")),
  );

  const { key, agent } = await newAgentKey({ scopes: ["read"] });
  writeFileSync(
    join(app, "check.mjs"),
    [
      'import * as client from "@memoryhub/client";',
      "const hub = new client.MemoryHub({ url: process.env.MEMORYHUB_URL, apiKey: process.env.MEMORYHUB_API_KEY });",
      "const me = await hub.whoami();",
      "console.log(JSON.stringify({ agent: me.agent, version: client.VERSION, exports: Object.keys(client).sort() }));",
      'try { await import("@memoryhub/client/ai"); console.log("ai: imported"); }',
      "catch (error) { console.log(`ai: ${error.code}`); }",
    ].join("\n"),
  );
  const out = runProgram("check.mjs", {
    cwd: app,
    env: { ...process.env, MEMORYHUB_URL: SERVER_URL, MEMORYHUB_API_KEY: key },
  })
    .trim()
    .split("\n");
  const summary = JSON.parse(out[0]!) as { agent: string; version: string; exports: string[] };
  assert.equal(summary.agent, agent);
  assert.equal(
    summary.version,
    (JSON.parse(readFileSync(resolve(PACKAGE, "package.json"), "utf8")) as { version: string })
      .version,
  );
  for (const name of [
    "MemoryHub",
    "MemoryHubError",
    "ConflictError",
    "RateLimitedError",
    "PageIterator",
  ]) {
    assert.ok(summary.exports.includes(name), `${name} is exported`);
  }
  // Without its peers the ./ai entry point fails to load; the core client did not need them.
  assert.equal(out[1], "ai: ERR_MODULE_NOT_FOUND");
});

test("the guide's TypeScript program compiles strictly against the installed package and runs as written", async () => {
  const block = guideBlock("typescript-example");
  assert.equal(block.lang, "ts");
  const source = join(app, "example.ts");
  writeFileSync(source, block.code);
  const program = compileProgram(source);

  const { key } = await newAgentKey();
  const out = runProgram(program, {
    cwd: app,
    env: { ...process.env, MEMORYHUB_URL: SERVER_URL, MEMORYHUB_API_KEY: key },
  });
  const lines = out.trim().split("\n");
  assert.equal(lines[0], "Ok 1");
  assert.ok(
    lines.some((line) => line.includes("Prefers answers in French")),
    "hydrate's Markdown was printed",
  );
  assert.equal(
    lines.filter((line) => line === "Prefers answers in French").length,
    1,
    "the search hit",
  );
  assert.ok(lines.includes("pref.language 1"), "the list walk");
  assert.equal(lines.at(-1), "changed meanwhile, now at version 1");

  const memory = await new MemoryHub({ url: SERVER_URL, apiKey: key }).recall("pref.language", {
    subject_id: "alice",
  });
  assert.deepEqual(
    [memory?.text, memory?.version, memory?.tags],
    ["Prefers answers in French", 1, ["preference"]],
  );
});
