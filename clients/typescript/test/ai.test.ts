/**
 * `memoryTools(client, {subjectId})` with the Vercel AI SDK: a scripted model (the SDK's own
 * `MockLanguageModelV3`, no network) calls hydrate, store, search, then a store the server
 * refuses, and the test checks what reached MemoryHub and what the model was given to read.
 */

import assert from "node:assert/strict";
import { test } from "node:test";

import { MemoryHub } from "@memoryhub/client";
import { memoryTools } from "@memoryhub/client/ai";
import { generateText, stepCountIs, type Tool } from "ai";
import { MockLanguageModelV3 } from "ai/test";

import { SERVER_URL, githubToken, newAgentKey } from "./support.js";

const USAGE = {
  inputTokens: { total: 10, noCache: 10, cacheRead: undefined, cacheWrite: undefined },
  outputTokens: { total: 5, text: 5, reasoning: undefined },
};

/** One model turn that calls a tool. */
function callTool(id: string, toolName: string, input: unknown) {
  return {
    content: [
      { type: "tool-call" as const, toolCallId: id, toolName, input: JSON.stringify(input) },
    ],
    finishReason: { unified: "tool-calls" as const, raw: "tool_calls" },
    usage: USAGE,
    warnings: [],
  };
}

/** What the model was given back for a tool call, from the prompt of a later turn. */
function toolOutput(prompt: unknown[], toolCallId: string): unknown {
  for (const message of prompt as Array<{ role: string; content: unknown }>) {
    if (message.role !== "tool" || !Array.isArray(message.content)) continue;
    for (const part of message.content as Array<{ toolCallId: string; output: unknown }>) {
      if (part.toolCallId === toolCallId) return part.output;
    }
  }
  assert.fail(`no tool result for ${toolCallId} in the prompt`);
}

test("a scripted model hydrates, stores and searches for its user through memoryTools", async () => {
  const { key } = await newAgentKey();
  const hub = new MemoryHub({ url: SERVER_URL, apiKey: key });
  await hub.store({
    text: "Alice is allergic to peanuts",
    key: "health.allergy",
    subject_id: "alice",
  });
  await hub.store({ text: "Bob loves peanut butter", subject_id: "bob" });
  const token = githubToken();

  const model = new MockLanguageModelV3({
    doGenerate: [
      callTool("c1", "memory_hydrate", {}),
      callTool("c2", "memory_store", {
        text: "Alice prefers metric units",
        key: "pref.units",
        tags: ["preference"],
      }),
      callTool("c3", "memory_search", { query: "peanuts", limit: 3 }),
      callTool("c4", "memory_store", { text: `Alice's token is ${token}` }),
      {
        content: [{ type: "text" as const, text: "Noted: metric units, and no peanuts." }],
        finishReason: { unified: "stop" as const, raw: "stop" },
        usage: USAGE,
        warnings: [],
      },
    ],
  });

  const result = await generateText({
    model,
    tools: memoryTools(hub, { subjectId: "alice" }),
    stopWhen: stepCountIs(10),
    prompt: "I prefer metric units. What do you remember about me?",
  });
  assert.equal(result.text, "Noted: metric units, and no peanuts.");
  assert.equal(result.steps.length, 5);

  // The model was offered the three tools, and no subject_id to choose: the user is fixed.
  const offered = model.doGenerateCalls[0]!.tools ?? [];
  assert.deepEqual(offered.map((tool) => tool.name).sort(), [
    "memory_hydrate",
    "memory_search",
    "memory_store",
  ]);
  for (const tool of offered) {
    assert.ok(tool.type === "function" && tool.description && tool.description.length > 40);
    assert.doesNotMatch(JSON.stringify(tool.inputSchema), /subject_id/);
  }

  // What reached MemoryHub: the new fact, for Alice only.
  const stored = await hub.recall("pref.units", { subject_id: "alice" });
  assert.equal(stored?.text, "Alice prefers metric units");
  assert.deepEqual(stored?.tags, ["preference"]);
  assert.equal(await hub.recall("pref.units"), null);
  assert.equal(await hub.recall("pref.units", { subject_id: "bob" }), null);

  // What the model read after each call.
  const calls = model.doGenerateCalls;
  const hydrated = toolOutput(calls[1]!.prompt, "c1") as {
    type: string;
    value: { ok: true; markdown: string };
  };
  assert.equal(hydrated.type, "json");
  assert.equal(hydrated.value.ok, true);
  assert.match(hydrated.value.markdown, /Alice is allergic to peanuts/);
  assert.doesNotMatch(hydrated.value.markdown, /Bob/);

  const storeAnswer = toolOutput(calls[2]!.prompt, "c2") as { value: Record<string, unknown> };
  assert.deepEqual(storeAnswer.value, {
    ok: true,
    memory_id: stored?.id,
    message: "Ok",
    version: 1,
  });

  const searchAnswer = toolOutput(calls[3]!.prompt, "c3") as {
    value: {
      ok: true;
      memories: Array<{ data: { text: string }; quality: { relevance: number } }>;
    };
  };
  const texts = searchAnswer.value.memories.map((hit) => hit.data.text);
  assert.equal(texts[0], "Alice is allergic to peanuts");
  assert.ok(!texts.includes("Bob loves peanut butter"));

  // A refused store comes back as an error the model reads; the secret is not echoed.
  const refused = toolOutput(calls[4]!.prompt, "c4") as {
    value: { ok: false; error: { code: string } };
  };
  assert.equal(refused.value.ok, false);
  assert.equal(refused.value.error.code, "SECRET_REJECTED");
  assert.ok(!JSON.stringify(refused).includes(token));
  assert.equal((await hub.list({ subject_id: "alice" }).toArray()).length, 2);
});

/** A tool's answer to one call, outside a model loop. */
async function run<I, O>(tool: Tool<I, O>, input: I): Promise<O> {
  assert.ok(tool.execute);
  const output = await tool.execute(input, { toolCallId: "t", messages: [] });
  assert.ok(!(typeof output === "object" && output !== null && Symbol.asyncIterator in output));
  return output;
}

test("without a subject the tools use the agent's own memories; a thread adds its own", async () => {
  const { key } = await newAgentKey();
  const hub = new MemoryHub({ url: SERVER_URL, apiKey: key });
  const tools = memoryTools(hub, { threadId: "run-9" });
  const stored = await run(tools.memory_store, {
    text: "This run is about the Lisbon office",
    category: "conversation",
  });
  assert.ok("memory_id" in stored);
  const memory = await hub.get(stored.memory_id);
  assert.deepEqual(
    [memory.subject_id, memory.thread_id, memory.category],
    [null, "run-9", "conversation"],
  );

  const hydrated = await run(tools.memory_hydrate, {});
  assert.ok(hydrated.ok && hydrated.markdown.includes("Lisbon office") && hydrated.entries === 1);
  const elsewhere = await run(memoryTools(hub).memory_hydrate, {});
  assert.ok(elsewhere.ok && !elsewhere.markdown.includes("Lisbon office"));

  const invalid = await run(tools.memory_store, { text: "x", category: "Not A Category!" });
  assert.deepEqual([invalid.ok, !invalid.ok && invalid.error.code], [false, "INVALID_INPUT"]);
});
