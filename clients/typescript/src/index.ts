/**
 * `@memoryhub/client`: the TypeScript client for MemoryHub's agent API.
 *
 *     import { MemoryHub } from "@memoryhub/client";
 *
 *     const hub = new MemoryHub({ url: "http://127.0.0.1:8000", apiKey: process.env.MEMORYHUB_API_KEY });
 *     await hub.store({ text: "Prefers answers in French", key: "pref.language", subject_id: "u-42" });
 *     console.log((await hub.hydrate({ subject_id: "u-42", format: "markdown" })).markdown);
 *
 * No runtime dependencies: it needs only the platform's `fetch` (Node ≥ 20, Deno, Bun,
 * browsers). Vercel AI SDK tools live in `@memoryhub/client/ai`.
 */

export { MemoryHub, DEFAULT_URL, EVENTS_PAGE_SIZE, type ClientOptions } from "./client.js";
export {
  DEFAULT_RETRY,
  type FetchLike,
  type RequestOptions,
  type RetryPolicy,
  type Sleep,
} from "./core.js";
export {
  BackendUnavailableError,
  ConflictError,
  DatabaseError,
  EmbeddingError,
  ERRORS_BY_CODE,
  IdempotencyMismatchError,
  InvalidInputError,
  MemoryHubAbortError,
  MemoryHubConnectionError,
  MemoryHubError,
  MemoryHubTimeoutError,
  NotFoundError,
  PayloadTooLargeError,
  QuotaExceededError,
  RateLimitedError,
  ScopeDeniedError,
  SecretRejectedError,
  UnauthenticatedError,
  type ErrorDetails,
} from "./errors.js";
export { FeedIterator, PageIterator, type FeedPage, type Page } from "./pagination.js";
export type * from "./types.js";
/** Every declaration of the OpenAPI schema, as generated (`Schema.Memory`, `Schema.Operations`…). */
export type * as Schema from "./schema.js";
export { VERSION } from "./version.js";
