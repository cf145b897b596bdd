/**
 * MemoryHub as tools for the Vercel AI SDK (`ai`, with `zod` input schemas):
 *
 *     import { generateText, stepCountIs } from "ai";
 *     import { MemoryHub } from "@memoryhub/client";
 *     import { memoryTools } from "@memoryhub/client/ai";
 *
 *     const tools = memoryTools(new MemoryHub(), { subjectId: "u-42" });
 *     await generateText({ model, tools, stopWhen: stepCountIs(5), prompt: "…" });
 *
 * `memory_store`, `memory_search` and `memory_hydrate`, named as the MCP tools. Each returns
 * what a model should read: the store's outcome (id, Ok | Updated | Already remembered,
 * near-duplicates, previously corrected facts), the search hits in MemoryHub's LLM-facing
 * format, and the hydrated memory as Markdown. An error the server answers (invalid input, a
 * secret, a conflict…) comes back as `{ok: false, error: {code, message}}` for the model to
 * read and act on; no answer at all (connection, timeout, abort) throws, as any tool failure.
 *
 * `ai` and `zod` are peer dependencies of this entry point only: `@memoryhub/client` itself
 * imports nothing.
 */

import { tool } from "ai";
import { z } from "zod";

import type { MemoryHub } from "./client.js";
import { MemoryHubError } from "./errors.js";
import type { NearDuplicate, PreviouslyCorrected, SearchHit } from "./schema.js";

export interface MemoryToolsOptions {
  /** The end user the agent serves: every call acts for this subject (the model cannot pick
   * another). Without it, the tools read and write the agent's subject-less memories. */
  subjectId?: string | undefined;
  /** This run's thread: stores may use `category: "conversation"` and hydrate loads the
   * thread's conversation memories. */
  threadId?: string | undefined;
}

/** An error the server answered, as the model reads it. */
export interface ToolError {
  ok: false;
  error: { code: string; message: string; details: Record<string, unknown> };
}

export interface StoreToolResult {
  ok: true;
  memory_id: string;
  /** `Ok` (stored), `Updated` (a keyed fact changed) or `Already remembered`. */
  message: string;
  version: number;
  near_duplicates?: NearDuplicate[];
  previously_corrected?: PreviouslyCorrected[];
}

export interface SearchToolResult {
  ok: true;
  searchedAt: string;
  memories: SearchHit[];
}

export interface HydrateToolResult {
  ok: true;
  /** The memory to keep in mind, as Markdown. */
  markdown: string;
  entries: number;
}

const STORE_DESCRIPTION =
  "Remember one distilled fact about the user or the task, in one or two sentences. Use a " +
  "stable `key` for a fact that changes over time (storing the key again updates it in " +
  "place). Category: `core` for what must always be loaded (default), `daily` for short-lived " +
  "notes, `archival` for detail to find later by search, `workspace` to share with every " +
  "agent. Never include secrets. The answer says whether it was stored (Ok), updated " +
  "(Updated) or already known (Already remembered), lists near-duplicates, and lists facts " +
  "that were corrected before (check them before re-adding).";

const SEARCH_DESCRIPTION =
  "Search the memory by meaning and words. Use it when you need a fact that is not in the " +
  "memory you loaded, including archival detail. Hits carry relevance, confidence, when, and " +
  "whether the memory is the latest version of its key.";

const HYDRATE_DESCRIPTION =
  "Load the memory at the start of a task: core facts first, then the most recent notes, as " +
  "Markdown to keep in mind. Pass a query (what the task is about) to add matching archival " +
  "memories.";

async function answer<T>(call: () => Promise<T>): Promise<T | ToolError> {
  try {
    return await call();
  } catch (error) {
    // The server answered: the model can read the error and act on it. No answer: throw.
    if (error instanceof MemoryHubError && error.status !== undefined) {
      return {
        ok: false,
        error: { code: error.code, message: error.message, details: error.details },
      };
    }
    throw error;
  }
}

/** `memory_store`, `memory_search` and `memory_hydrate` as AI SDK tools on `client`. */
export function memoryTools(client: MemoryHub, options: MemoryToolsOptions = {}) {
  const subject_id = options.subjectId;
  const thread_id = options.threadId;

  return {
    memory_store: tool({
      description: STORE_DESCRIPTION,
      inputSchema: z.object({
        text: z.string().min(1).describe("The fact, in one or two sentences"),
        key: z
          .string()
          .min(1)
          .optional()
          .describe("Stable key for a fact that changes over time, e.g. user.city"),
        category: z
          .string()
          .optional()
          .describe("core (default), daily, archival, workspace, or conversation (this run only)"),
        tags: z.array(z.string()).max(32).optional().describe("Short labels, e.g. preference"),
        importance: z.number().min(0).max(1).optional().describe("0 to 1; default 0.5"),
        ttl: z.string().optional().describe("Lifetime such as 30m, 24h or 7d; default: none"),
      }),
      execute: (input, { abortSignal }): Promise<StoreToolResult | ToolError> =>
        answer(async () => {
          const stored = await client.store(
            { ...input, subject_id, thread_id },
            { signal: abortSignal },
          );
          const result: StoreToolResult = {
            ok: true,
            memory_id: stored.memory_id,
            message: stored.message,
            version: stored.version,
          };
          if (stored.near_duplicates?.length) result.near_duplicates = stored.near_duplicates;
          if (stored.previously_corrected?.length) {
            result.previously_corrected = stored.previously_corrected;
          }
          return result;
        }),
    }),

    memory_search: tool({
      description: SEARCH_DESCRIPTION,
      inputSchema: z.object({
        query: z.string().min(1).describe("What to look for"),
        limit: z.number().int().min(1).max(50).optional().describe("Most hits; default 10"),
        category: z.string().optional().describe("Only this category"),
        tags: z.array(z.string()).optional().describe("Only memories with all of these tags"),
      }),
      execute: ({ query, ...fields }, { abortSignal }): Promise<SearchToolResult | ToolError> =>
        answer(async () => {
          const found = await client.search(
            query,
            { ...fields, subject_id, thread_id },
            { signal: abortSignal },
          );
          return { ok: true, searchedAt: found.searchedAt, memories: found.memories };
        }),
    }),

    memory_hydrate: tool({
      description: HYDRATE_DESCRIPTION,
      inputSchema: z.object({
        query: z
          .string()
          .min(1)
          .optional()
          .describe("What the task is about: matching archival memories are added"),
      }),
      execute: ({ query }, { abortSignal }): Promise<HydrateToolResult | ToolError> =>
        answer(async () => {
          const hydrated = await client.hydrate(
            {
              subject_id,
              thread_id,
              format: "markdown",
              ...(query ? { query, archival_mode: "auto" as const } : {}),
            },
            { signal: abortSignal },
          );
          return {
            ok: true,
            markdown: hydrated.markdown ?? "",
            entries: hydrated.entries.length,
          };
        }),
    }),
  };
}
