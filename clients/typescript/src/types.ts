/**
 * The public request and result types, named for what they are and built from the generated
 * `schema.ts` (the OpenAPI schema), so they follow the API field for field. Field names are the
 * REST names (snake_case), as the OpenAI and Stripe Node SDKs keep theirs.
 */

import type * as S from "./schema.js";

/** A memory as the API returns it (its `memory` object). */
export type Memory = S.Memory;
/** Whose a memory is: `agent` (its agent's) or `user` (its subject's, across
 * every agent of the tenant). */
export type MemoryScope = S.Memory["scope"];
/** A hydrated memory and why it was loaded (`core`, `recent`). */
export type HydrateEntry = S.HydrateEntry;
/** An archival memory matching hydrate's `query` (`archival_mode: "auto"`), with its `score`;
 * outside the byte budget. */
export type ArchivalMatch = S.ArchivalMatch;
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

/** Acting for an end user: `subject_id`, the end user's id. */
export interface SubjectOption {
  subject_id?: string | undefined;
}

/** `store()`: the body of `POST /api/v1/memories` (`text` or `data`, and optional fields). */
export type StoreFields = S.StoreRequestRequest;
/** `store()`'s answer: `memory_id`, `message`, `action`, `version`, `memory`,
 * `near_duplicates`, `previously_corrected`. */
export type StoreResult = S.StoreResponse;
/** What a store did: `created`, `updated` (a keyed upsert), `replaced` (a `single` kind's one
 * record took the new text and data) or `skipped` (`Already remembered`). */
export type StoreAction = S.StoreResponse["action"];

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
/** `hydrate()`'s answer: `entries`, `archival`, `bytes_used`, `budget_bytes`, `markdown`,
 * `omitted`. */
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

// --- kinds -----------------------------------------------------------------------------------

/** A kind of the tenant's registry: `cardinality`, `memory_type`, `description`, the JSON
 * Schema of `data`, `default_category` and the MCP `tool` that stores it. */
export type Kind = S.Kind;
/** `putKind()`: the whole definition (an omitted field takes its default). */
export type KindFields = S.KindRequestRequest;
/** `deleteKind()`'s answer. */
export type KindDeleted = S.KindDeleted;

// --- events and webhooks -----------------------------------------------------------------------

/** One event of the change feed (also a webhook delivery's body): `id` (monotonic), `type`,
 * `tenant`, `agent`, `subject_id`, `memory_id`, `version`, `occurred_at`, `data`. */
export type Event = S.Event;
/** An event's `type`: `memory.created`, `memory.updated`, `memory.forgotten`… */
export type EventType = S.Event["type"];
/** `events()`'s filters (`limit` is the page size, 1–1000). */
export type EventsFilters = Omit<S.EventsListQuery, "after" | "types"> & {
  /** Only these types (default: every type). */
  types?: EventType | EventType[] | undefined;
};
/** `events()` and `eventsPage()`: the filters and the cursor to read after (a `next_cursor`;
 * none: from the oldest event kept). */
export type EventsParams = EventsFilters & { after?: string | null | undefined };
/** A webhook endpoint of the tenant (its secret is never shown again). */
export type Webhook = S.Webhook;
/** `createWebhook()`: `url` (https:// and a public address), `events` (default: every type),
 * `description`. */
export type CreateWebhookFields = Omit<S.WebhookCreateRequest, "events"> & {
  events?: EventType[] | undefined;
};
/** `createWebhook()`'s answer: the `webhook` and its signing `secret`, shown this once. */
export type WebhookCreated = S.WebhookCreatedResponse;
/** `deleteWebhook()`'s answer. */
export type WebhookDeleted = S.WebhookDeletedResponse;

// --- the index ---------------------------------------------------------------------------------

/** One operation in `apiIndex()`'s table of contents. */
export type ApiEndpoint = S.ApiIndexEndpoint;
/** `apiIndex()`'s answer (`GET /api/v1/`, no key needed): the endpoints, how to authenticate,
 * and the URLs of the docs, the OpenAPI schema and the MCP endpoint. */
export type ApiIndex = S.ApiIndexResponse;
