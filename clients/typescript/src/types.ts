/**
 * The public request and result types, named for what they are and built only from the
 * generated `schema.ts` (the OpenAPI schema), so they follow the API field for field. Field
 * names are the REST names (snake_case), as the OpenAI and Stripe Node SDKs keep theirs.
 */

import type * as S from "./schema.js";

/** A memory as the API returns it (SPEC §4 `memory` object). */
export type Memory = S.Memory;
/** A hydrated memory and why it was loaded (`core`, `recent`, `archival_match`). */
export type HydrateEntry = S.HydrateEntry;
/** One search hit in the LLM-facing format. */
export type SearchHit = S.SearchHit;
/** A stored conversation and its extraction state. */
export type Thread = S.Thread;
/** A stored message of a thread (secret spans redacted). */
export type Message = S.Message;
/** A message to hand over (`role`, `content`, `name?`, `created_at?`). */
export type MessageInput = S.MessageInRequest;
/** An entity a memory mentions (`{name, type?}`). */
export type Mention = S.MentionRequest;

/** Acting for an end user: `subject_id` (SPEC §2 Subject). */
export interface SubjectOption {
  subject_id?: string | undefined;
}

/** `store()`: the body of `POST /api/v1/memories` (`text` or `data`, and optional fields). */
export type StoreFields = S.StoreRequestRequest;
/** `store()`'s answer: `memory_id`, `message`, `version`, `memory`, `near_duplicates`,
 * `previously_corrected`. */
export type StoreResult = S.StoreResponse;

/** `update()`: the fields to change (`PATCH`), `expected_version` for compare-and-set, and
 * `subject_id` to act for. */
export type UpdateFields = S.PatchedUpdateRequestRequest & SubjectOption;

/** `list()`'s filters (`limit` is the page size); `tag` may repeat (all must be present). */
export type ListFilters = Omit<S.MemoriesListQuery, "cursor" | "tag"> & {
  tag?: string | string[] | undefined;
};
/** `listPage()`: the filters and the cursor of the page to fetch. */
export type ListPageParams = ListFilters & { cursor?: string | null | undefined };

/** `keys()`'s filters. */
export type KeysFilters = S.KeysListQuery;

/** `forget()`: by `memory_id` or by `key` (one of them), with `reason`, `purge`,
 * `subject_id`. */
export type ForgetParams = S.MemoriesForgetQuery &
  ({ memory_id: string; key?: undefined } | { key: string; memory_id?: undefined });
/** `forget()`'s answer: `deleted` (false when it was already gone) and `memory_id`. */
export type ForgetResult = S.ForgetResponse;

/** `search()`'s fields besides `query`. */
export type SearchFields = Omit<S.SearchRequestRequest, "query">;
/** `search()`'s answer: `memories` (hits, best first) and `searchedAt`. */
export type SearchResult = S.SearchResponse;

/** `hydrate()`'s fields (`format: "markdown"` fills `markdown`). */
export type HydrateFields = S.HydrateRequestRequest;
/** `hydrate()`'s answer: `entries`, `bytes_used`, `budget_bytes`, `markdown`, `omitted`. */
export type HydrateResult = S.HydrateResponse;

/** `exportMarkdown()`'s filters. */
export type ExportFilters = S.ExportMarkdownQuery;

/** `addMessages()`'s fields besides the messages: `subject_id`, `extract`. */
export type AddMessagesFields = Omit<S.IngestRequestRequest, "messages">;
/** `addMessages()`'s answer (202): `accepted`, `duplicates`, `redacted`, `extraction`. */
export type IngestResult = S.IngestResponse;
/** `messages()`'s parameters (`limit` is the page size). */
export type MessagesParams = Omit<S.ThreadsMessagesListQuery, "cursor">;
/** `extract()`'s answer (202): the thread's `extraction` state. */
export type ExtractResult = S.ExtractResponse;
/** `endThread()`'s answer: `removed` (the thread's `conversation` memories). */
export type EndThreadResult = S.ThreadEndResponse;
/** `eraseSubject()`'s answer: what was erased. */
export type ErasureResult = S.ErasureResponse;
/** `whoami()`'s answer: the key's tenant, agent, scopes and bound subject. */
export type WhoAmI = S.WhoAmI;
