/** `MemoryHub`: one method per endpoint of the agent API (docs/api.md). */

import {
  DEFAULT_RETRY,
  Transport,
  defaultSleep,
  type FetchLike,
  type RequestOptions,
  type RetryPolicy,
  type Sleep,
} from "./core.js";
import { FeedIterator, PageIterator, type FeedPage, type Page } from "./pagination.js";
import type {
  AddMessagesFields,
  ApiIndex,
  CreateWebhookFields,
  EndThreadResult,
  ErasureResult,
  Event,
  EventsParams,
  ExportFilters,
  ExtractResult,
  ForgetParams,
  ForgetResult,
  HydrateFields,
  HydrateResult,
  IngestResult,
  KeysFilters,
  Kind,
  KindDeleted,
  KindFields,
  ListFilters,
  ListPageParams,
  Memory,
  Message,
  MessageInput,
  MessagesParams,
  SearchFields,
  SearchResult,
  StoreFields,
  StoreResult,
  SubjectOption,
  Thread,
  UpdateFields,
  Webhook,
  WebhookCreated,
  WebhookDeleted,
  WhoAmI,
} from "./types.js";

export const DEFAULT_URL = "http://127.0.0.1:8000";
/** The page size `events()` asks for when given no `limit` (the API's own default). */
export const EVENTS_PAGE_SIZE = 100;

export interface ClientOptions {
  /** The server's base URL. Default: `MEMORYHUB_URL`, else `http://127.0.0.1:8000`. */
  url?: string | undefined;
  /** An agent's API key (`mh_…`). Default: `MEMORYHUB_API_KEY`. */
  apiKey?: string | undefined;
  /** Milliseconds each attempt of a call may take. Default 10000. */
  timeout?: number | undefined;
  /** Attempts after the first, for connection errors, timeouts, 429 RATE_LIMITED and 503.
   * Default 3; 0 turns retries off. */
  maxRetries?: number | undefined;
  /** How long to wait between attempts (milliseconds). */
  retry?: Partial<RetryPolicy> | undefined;
  /** The `fetch` to use. Default: the platform's. */
  fetch?: FetchLike | undefined;
  /** Headers sent with every request. */
  defaultHeaders?: Record<string, string> | undefined;
  /** How to wait between attempts (tests record the waits instead of waiting). */
  sleep?: Sleep | undefined;
}

function environment(name: string): string | undefined {
  // `process` exists on Node, Bun and Deno, not in browsers; Deno without --allow-env throws.
  try {
    const process = (globalThis as { process?: { env?: Record<string, string | undefined> } })
      .process;
    return process?.env?.[name] || undefined;
  } catch {
    return undefined;
  }
}

/**
 * A MemoryHub agent API client.
 *
 *     const hub = new MemoryHub({ url: "http://127.0.0.1:8000", apiKey: "mh_…" });
 *     await hub.store({ text: "Prefers answers in French", key: "pref.language" });
 *
 * Errors throw the `MemoryHubError` subclass of their code. Every method takes
 * `RequestOptions` last (`signal`, `timeout`, `maxRetries`, `idempotencyKey`, `headers`).
 */
export class MemoryHub {
  readonly url: string;
  readonly #transport: Transport;

  constructor(options: ClientOptions = {}) {
    const url = (options.url ?? environment("MEMORYHUB_URL") ?? DEFAULT_URL).replace(/\/+$/, "");
    const apiKey = options.apiKey ?? environment("MEMORYHUB_API_KEY");
    if (!apiKey) {
      throw new TypeError("MemoryHub needs an API key: pass { apiKey } or set MEMORYHUB_API_KEY");
    }
    // Typed as possibly missing: DOM's types declare a global fetch, some runtimes lack one.
    const fetchImpl: FetchLike | undefined = options.fetch ?? globalThis.fetch;
    if (!fetchImpl) throw new TypeError("No fetch on this platform: pass { fetch }");
    this.url = url;
    this.#transport = new Transport({
      url,
      apiKey,
      timeout: options.timeout ?? 10_000,
      maxRetries: options.maxRetries ?? 3,
      retry: { ...DEFAULT_RETRY, ...options.retry },
      fetch: (input, init) => fetchImpl(input, init),
      sleep: options.sleep ?? defaultSleep,
      headers: { ...options.defaultHeaders },
    });
  }

  // --- memories ---------------------------------------------------------------------------

  /** Store a memory (`POST /memories`): a keyed upsert with `key`, compare-and-set with
   * `expected_version`, dedup by `dedup_policy` without a key. */
  store(fields: StoreFields, options?: RequestOptions): Promise<StoreResult> {
    return this.#transport.send("memories_store", { body: fields }, options);
  }

  /** One memory by id; `NotFoundError` when it does not exist or is not visible. */
  async get(
    memoryId: string,
    params: SubjectOption = {},
    options?: RequestOptions,
  ): Promise<Memory> {
    const path = { memory_id: memoryId };
    const body = await this.#transport.send("memories_get", { path, query: params }, options);
    return body.memory;
  }

  /** The live memory stored under `key`, or null. */
  async recall(
    key: string,
    params: SubjectOption = {},
    options?: RequestOptions,
  ): Promise<Memory | null> {
    const body = await this.#transport.send(
      "memories_recall",
      { path: { key }, query: params },
      options,
    );
    return body.memory;
  }

  /** Every visible memory matching the filters, newest `updated_at` first, as an async
   * iterator that walks the cursor page by page (`limit` is the page size). */
  list(filters: ListFilters = {}, options?: RequestOptions): PageIterator<Memory> {
    return new PageIterator((cursor) => this.listPage({ ...filters, cursor }, options));
  }

  /** One page of `GET /memories` (`items`, `next_cursor`). */
  async listPage(params: ListPageParams = {}, options?: RequestOptions): Promise<Page<Memory>> {
    const { cursor, tag, ...filters } = params;
    const query = {
      ...filters,
      cursor: cursor ?? undefined,
      tag: typeof tag === "string" ? [tag] : tag,
    };
    const body = await this.#transport.send("memories_list", { query }, options);
    return { items: body.memories, next_cursor: body.next_cursor };
  }

  /** The sorted distinct keys of the visible live memories. */
  async keys(filters: KeysFilters = {}, options?: RequestOptions): Promise<string[]> {
    const body = await this.#transport.send("keys_list", { query: filters }, options);
    return body.keys;
  }

  /** Change the given fields (`PATCH /memories/{id}`); `expected_version` makes it
   * compare-and-set (`ConflictError.currentVersion`); `expires_at: null` clears the expiry. */
  async update(memoryId: string, fields: UpdateFields, options?: RequestOptions): Promise<Memory> {
    const { subject_id, ...body } = fields;
    const call = { path: { memory_id: memoryId }, query: { subject_id }, body };
    const answer = await this.#transport.send("memories_update", call, options);
    return answer.memory;
  }

  /** Re-confirm a fact: `last_confirmed_at` becomes now. */
  async confirm(
    memoryId: string,
    params: SubjectOption = {},
    options?: RequestOptions,
  ): Promise<Memory> {
    const path = { memory_id: memoryId };
    const body = await this.#transport.send("memories_confirm", { path, query: params }, options);
    return body.memory;
  }

  /** Forget by `memory_id` or by `key`: tombstoned with `reason`; `purge: true` erases
   * (admin scope). `deleted` is false when it was already gone. */
  async forget(params: ForgetParams, options?: RequestOptions): Promise<ForgetResult> {
    const { memory_id, key, ...query } = params;
    if (memory_id !== undefined && key === undefined) {
      return this.#transport.send("memories_forget", { path: { memory_id }, query }, options);
    }
    if (key !== undefined && memory_id === undefined) {
      return this.#transport.send("memories_forget_by_key", { path: { key }, query }, options);
    }
    throw new TypeError("forget() takes memory_id or key (one of them)");
  }

  /** Ranked hits in the LLM-facing format (`POST /search`): `memories`, `searchedAt`. */
  search(
    query: string,
    fields: SearchFields = {},
    options?: RequestOptions,
  ): Promise<SearchResult> {
    return this.#transport.send("search", { body: { ...fields, query } }, options);
  }

  /** What to load at the start of a run (`POST /hydrate`); `format: "markdown"` fills
   * `markdown`. */
  hydrate(fields: HydrateFields = {}, options?: RequestOptions): Promise<HydrateResult> {
    return this.#transport.send("hydrate", { body: fields }, options);
  }

  /** The agent's live memories as one Markdown document (`GET /export.md`). */
  exportMarkdown(filters: ExportFilters = {}, options?: RequestOptions): Promise<string> {
    return this.#transport.send("export_markdown", { query: filters }, options);
  }

  // --- conversations ----------------------------------------------------------------------

  /** Hand over messages (1–100; `{role, content, name?, created_at?}`); a message the thread
   * holds already is counted in `duplicates`, so resending a conversation is safe. */
  addMessages(
    threadId: string,
    messages: MessageInput[],
    fields: AddMessagesFields = {},
    options?: RequestOptions,
  ): Promise<IngestResult> {
    const call = { path: { thread_id: threadId }, body: { ...fields, messages } };
    return this.#transport.send("threads_messages_add", call, options);
  }

  /** The thread and its extraction state. */
  async getThread(
    threadId: string,
    params: SubjectOption = {},
    options?: RequestOptions,
  ): Promise<Thread> {
    const call = { path: { thread_id: threadId }, query: params };
    const body = await this.#transport.send("threads_get", call, options);
    return body.thread;
  }

  /** Every message of the thread in `seq` order, page by page as you iterate. */
  messages(
    threadId: string,
    params: MessagesParams = {},
    options?: RequestOptions,
  ): PageIterator<Message> {
    return new PageIterator(async (cursor) => {
      const call = {
        path: { thread_id: threadId },
        query: { ...params, cursor: cursor ?? undefined },
      };
      const body = await this.#transport.send("threads_messages_list", call, options);
      return { items: body.messages, next_cursor: body.next_cursor };
    });
  }

  /** Queue an extraction of the thread now (202). */
  extract(
    threadId: string,
    params: SubjectOption = {},
    options?: RequestOptions,
  ): Promise<ExtractResult> {
    const call = { path: { thread_id: threadId }, query: params };
    return this.#transport.send("threads_extract", call, options);
  }

  /** End a run: its `conversation` memories are removed (`removed`), after a last extraction. */
  endThread(
    threadId: string,
    params: SubjectOption = {},
    options?: RequestOptions,
  ): Promise<EndThreadResult> {
    const call = { path: { thread_id: threadId }, query: params };
    return this.#transport.send("threads_end", call, options);
  }

  /** Erase an end user (admin scope): tombstone their memories and delete their messages, or
   * with `purge: true` purge everything of theirs. */
  eraseSubject(
    subjectId: string,
    params: { purge?: boolean | undefined } = {},
    options?: RequestOptions,
  ): Promise<ErasureResult> {
    const call = { path: { subject_id: subjectId }, query: params };
    return this.#transport.send("subjects_erase", call, options);
  }

  // --- kinds --------------------------------------------------------------------------------

  /** The tenant's kinds, by name (a kind not listed is a free label, stored as `fact`). */
  async kinds(options?: RequestOptions): Promise<Kind[]> {
    return (await this.#transport.send("kinds_list", {}, options)).kinds;
  }

  /** One kind by name; `NotFoundError` for a name the tenant has not registered. */
  async getKind(name: string, options?: RequestOptions): Promise<Kind> {
    return (await this.#transport.send("kinds_get", { path: { name } }, options)).kind;
  }

  /** Define or redefine a kind (admin scope): the whole definition, an omitted field taking
   * its default. `ConflictError` when live memories of the kind would break it
   * (`details.memory_ids`); `InvalidInputError` for a schema that is not a JSON Schema of an
   * object. */
  async putKind(name: string, fields: KindFields = {}, options?: RequestOptions): Promise<Kind> {
    return (await this.#transport.send("kinds_put", { path: { name }, body: fields }, options))
      .kind;
  }

  /** Delete a kind (admin scope): its name becomes a free label. `ConflictError` while live
   * memories use it (`details.count`). */
  deleteKind(name: string, options?: RequestOptions): Promise<KindDeleted> {
    return this.#transport.send("kinds_delete", { path: { name } }, options);
  }

  // --- events and webhooks ------------------------------------------------------------------

  /** The change feed from `after` to the present, oldest first, as an async iterator that
   * follows the cursor page by page (`limit` is the page size, default 100); its `cursor` is
   * where to poll from next. The same visibility as reads: the agent's own, the workspace's
   * and (with `include_shared`, default true) its shared agents' events, of no subject or of
   * `subject_id`. */
  events(params: EventsParams = {}, options?: RequestOptions): FeedIterator<Event> {
    const { after, ...filters } = params;
    const limit = filters.limit ?? EVENTS_PAGE_SIZE;
    const fetchPage = (cursor: string | null) =>
      this.eventsPage({ ...filters, limit, after: cursor }, options);
    return new FeedIterator(fetchPage, after ?? null, limit);
  }

  /** One page of `GET /events` (`items`, `next_cursor`: also on an empty page, to poll again
   * from). */
  async eventsPage(params: EventsParams = {}, options?: RequestOptions): Promise<FeedPage<Event>> {
    const { after, types, ...filters } = params;
    const query = {
      ...filters,
      after: after ?? undefined,
      types: Array.isArray(types) ? types.join(",") || undefined : types,
    };
    const body = await this.#transport.send("events_list", { query }, options);
    return { items: body.events, next_cursor: body.next_cursor };
  }

  /** The tenant's webhook endpoints (admin scope); their secrets are never shown again. */
  async webhooks(options?: RequestOptions): Promise<Webhook[]> {
    return (await this.#transport.send("webhooks_list", {}, options)).webhooks;
  }

  /** Add a webhook endpoint (admin scope): `url` must be https:// with a public address
   * (`InvalidInputError` on `url` otherwise). The answer's `secret` is shown this once: each
   * delivery is signed `MemoryHub-Signature: t=<unix>,v1=<hex HMAC-SHA256 of "t.body">`. */
  createWebhook(fields: CreateWebhookFields, options?: RequestOptions): Promise<WebhookCreated> {
    return this.#transport.send("webhooks_create", { body: fields }, options);
  }

  /** Delete a webhook endpoint and its delivery log (admin scope); `NotFoundError` when the
   * tenant has none of that id. */
  deleteWebhook(webhookId: string, options?: RequestOptions): Promise<WebhookDeleted> {
    return this.#transport.send("webhooks_delete", { path: { webhook_id: webhookId } }, options);
  }

  // --- about the API and the key ------------------------------------------------------------

  /** The API's table of contents (`GET /api/v1/`, no key needed): every endpoint with its
   * method and summary, and where the docs, the OpenAPI schema and MCP are. */
  async apiIndex(options?: RequestOptions): Promise<ApiIndex> {
    return this.#transport.send("api_index", {}, options);
  }

  /** The key's tenant, agent, scopes and bound subject. */
  whoami(options?: RequestOptions): Promise<WhoAmI> {
    return this.#transport.send("whoami", {}, options);
  }
}
