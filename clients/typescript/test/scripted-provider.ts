/**
 * Loaded with `node --import` before the guide's AI SDK program: makes the AI SDK's default
 * provider (what a model id such as "openai/gpt-4.1" resolves through) a scripted model, so
 * the program runs as written without a network. The script: load the memory, store two
 * facts about the user, answer.
 */

import { MockLanguageModelV3, MockProviderV3 } from "ai/test";

const usage = {
  inputTokens: { total: 10, noCache: 10, cacheRead: undefined, cacheWrite: undefined },
  outputTokens: { total: 5, text: 5, reasoning: undefined },
};

function toolCalls(...calls: Array<[string, unknown]>) {
  return {
    content: calls.map(([toolName, input], i) => ({
      type: "tool-call" as const,
      toolCallId: `${toolName}-${i}`,
      toolName,
      input: JSON.stringify(input),
    })),
    finishReason: { unified: "tool-calls" as const, raw: "tool_calls" },
    usage,
    warnings: [],
  };
}

export const SCRIPTED_MODEL_ID = "openai/gpt-4.1";

const model = new MockLanguageModelV3({
  doGenerate: [
    toolCalls(["memory_hydrate", {}]),
    toolCalls(
      ["memory_store", { text: "Alice is vegetarian", key: "diet", tags: ["preference"] }],
      ["memory_store", { text: "Alice lives in Lisbon", key: "home.city" }],
    ),
    {
      content: [{ type: "text" as const, text: "Try a vegetarian tasca in Lisbon tonight." }],
      finishReason: { unified: "stop" as const, raw: "stop" },
      usage,
      warnings: [],
    },
  ],
});

globalThis.AI_SDK_DEFAULT_PROVIDER = new MockProviderV3({
  languageModels: { [SCRIPTED_MODEL_ID]: model },
});
