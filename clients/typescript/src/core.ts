/**
 * The transport every method goes through: one request to an operation of the schema (its
 * method and path from `OPERATIONS`), with the API key, a timeout and the caller's
 * `AbortSignal` per attempt, the retry rule, and an `Idempotency-Key` on every POST.
 *
 * Retried, as in the Python client: connection errors and timeouts, `429 RATE_LIMITED` and
 * `503` (never `429 QUOTA_EXCEEDED`: waiting does not relieve a quota). The wait is the
 * server's `Retry-After` when it sends one (at most `maxRetryAfter`), else exponential
 * back-off `backoff * 2 ** attempt` capped at `maxBackoff`, with full jitter unless
 * `jitter: false`. Every POST carries an `Idempotency-Key`, the same on each attempt of one
 * call, so a retried write happens once.
 */

import {
  MemoryHubAbortError,
  MemoryHubConnectionError,
  MemoryHubError,
  MemoryHubTimeoutError,
  errorFromResponse,
  isRecord,
  knownCode,
  parseRetryAfter,
} from "./errors.js";
import { OPERATIONS, type OperationId, type Operations } from "./schema.js";
import { VERSION } from "./version.js";

/** `fetch` as the client calls it (the platform's, or one you pass). */
export type FetchLike = (input: string, init: RequestInit) => Promise<Response>;

/** Waits `ms` milliseconds; rejects when `signal` aborts. Injectable for tests. */
export type Sleep = (ms: number, signal?: AbortSignal) => Promise<void>;

/** How long to wait before trying again. All durations in milliseconds. */
export interface RetryPolicy {
  /** The first back-off, doubled on each attempt. Default 500. */
  backoff: number;
  /** The longest back-off. Default 8000. */
  maxBackoff: number;
  /** The longest `Retry-After` honoured (a longer one is cut to this). Default 60000. */
  maxRetryAfter: number;
  /** Full jitter: wait a random time up to the back-off. Default true. */
  jitter: boolean;
}

export const DEFAULT_RETRY: Readonly<RetryPolicy> = Object.freeze({
  backoff: 500,
  maxBackoff: 8000,
  maxRetryAfter: 60_000,
  jitter: true,
});

/** Options of one call (the last argument of every method). */
export interface RequestOptions {
  /** Abort the call (also while it waits to retry): it rejects with `MemoryHubAbortError`. */
  signal?: AbortSignal | undefined;
  /** Milliseconds each attempt may take (default: the client's `timeout`). */
  timeout?: number | undefined;
  /** Attempts after the first (default: the client's `maxRetries`). */
  maxRetries?: number | undefined;
  /** The `Idempotency-Key` of a POST (default: a fresh one per call, kept across retries). */
  idempotencyKey?: string | undefined;
  /** Extra request headers. */
  headers?: Record<string, string> | undefined;
}

export interface TransportConfig {
  url: string;
  apiKey: string;
  timeout: number;
  maxRetries: number;
  retry: RetryPolicy;
  fetch: FetchLike;
  sleep: Sleep;
  headers: Record<string, string>;
}

type Query = Record<string, unknown>;

export interface Call<K extends OperationId> {
  path?: Record<string, string>;
  query?: Operations[K]["query"];
  body?: Operations[K]["body"];
}

/** A fresh idempotency key: 128 random bits as hex (`crypto.getRandomValues` works in every
 * runtime, `randomUUID` only in secure browser contexts). */
export function newIdempotencyKey(): string {
  const bytes = new Uint8Array(16);
  globalThis.crypto.getRandomValues(bytes);
  return Array.from(bytes, (byte) => byte.toString(16).padStart(2, "0")).join("");
}

export const defaultSleep: Sleep = (ms, signal) =>
  new Promise((resolve, reject) => {
    if (signal?.aborted) {
      // The signal's own reason, any value: Transport.wait() turns an abort into a
      // MemoryHubAbortError with that reason as its cause.
      // eslint-disable-next-line @typescript-eslint/prefer-promise-reject-errors
      reject(signal.reason);
      return;
    }
    const onAbort = () => {
      clearTimeout(timer);
      // eslint-disable-next-line @typescript-eslint/prefer-promise-reject-errors
      reject(signal?.reason);
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    signal?.addEventListener("abort", onAbort, { once: true });
  });

/** A path template (`/api/v1/memories/{memory_id}`) with each `{name}` as one URL segment
 * (`/` and `%` in a key or thread id included). */
export function fillPath(template: string, values: Record<string, string> = {}): string {
  return template.replace(/\{([^}]+)\}/g, (_, name: string) => {
    const value = values[name];
    if (value === undefined) throw new TypeError(`missing path parameter ${name}`);
    return encodeURIComponent(value);
  });
}

/** A query string: undefined and null left out, booleans as `true`/`false`, arrays repeated. */
export function queryString(query: Query | undefined): string {
  const params = new URLSearchParams();
  for (const [name, value] of Object.entries(query ?? {})) {
    for (const item of Array.isArray(value) ? value : [value]) {
      if (item === undefined || item === null) continue;
      params.append(name, String(item));
    }
  }
  const text = params.toString();
  return text ? `?${text}` : "";
}

/** Milliseconds to wait before attempt `attempt + 1`, or null: do not retry. `status` and
 * `headers` are absent after a connection error or timeout. */
export function retryDelay(
  policy: RetryPolicy,
  attempt: number,
  maxRetries: number,
  answer?: { status: number; headers: Headers; body: string },
): number | null {
  if (attempt >= maxRetries) return null;
  if (answer) {
    if (!retryable(answer.status, answer.body)) return null;
    const retryAfter = parseRetryAfter(answer.headers.get("Retry-After"));
    if (retryAfter !== null) return Math.min(retryAfter * 1000, policy.maxRetryAfter);
  }
  const wait = Math.min(policy.backoff * 2 ** attempt, policy.maxBackoff);
  return policy.jitter ? Math.random() * wait : wait;
}

function retryable(status: number, body: string): boolean {
  if (status === 503) return true;
  if (status !== 429) return false;
  let code: unknown;
  try {
    const parsed: unknown = JSON.parse(body);
    code = isRecord(parsed) && isRecord(parsed.error) ? parsed.error.code : undefined;
  } catch {
    return true; // a 429 from something in front of MemoryHub: a rate limit
  }
  return code === "RATE_LIMITED" || typeof code !== "string" || !knownCode(code);
}

/** One attempt's signal: aborts on the caller's signal or after `timeout` ms. */
function attemptSignal(caller: AbortSignal | undefined, timeout: number) {
  const controller = new AbortController();
  let timedOut = false;
  const onAbort = () => controller.abort(caller?.reason);
  caller?.addEventListener("abort", onAbort, { once: true });
  const timer = setTimeout(() => {
    timedOut = true;
    controller.abort(new MemoryHubTimeoutError(`No answer within ${timeout} ms`));
  }, timeout);
  return {
    signal: controller.signal,
    timedOut: () => timedOut,
    done: () => {
      clearTimeout(timer);
      caller?.removeEventListener("abort", onAbort);
    },
  };
}

function aborted(signal: AbortSignal): MemoryHubAbortError {
  return new MemoryHubAbortError("The request was aborted", { cause: signal.reason });
}

export class Transport {
  constructor(readonly config: TransportConfig) {}

  /** Sends one call to operation `op` and returns its parsed answer (JSON, or the text of a
   * non-JSON answer such as `export.md`). */
  async send<K extends OperationId>(
    op: K,
    call: Call<K>,
    options: RequestOptions = {},
  ): Promise<Operations[K]["response"]> {
    const { method, path } = OPERATIONS[op];
    const url = `${this.config.url}${fillPath(path, call.path)}${queryString(call.query as Query)}`;
    const headers: Record<string, string> = {
      Accept: "application/json",
      "User-Agent": `memoryhub-client-ts/${VERSION}`,
      ...this.config.headers,
      Authorization: `Bearer ${this.config.apiKey}`,
      ...options.headers,
    };
    if (method === "POST") {
      // Made once per call, so every retry of it carries the same key.
      headers["Idempotency-Key"] = options.idempotencyKey ?? newIdempotencyKey();
    }
    let body: string | undefined;
    if (call.body !== undefined) {
      headers["Content-Type"] = "application/json";
      body = JSON.stringify(call.body);
    }
    const timeout = options.timeout ?? this.config.timeout;
    const maxRetries = options.maxRetries ?? this.config.maxRetries;
    const caller = options.signal;

    for (let attempt = 0; ; attempt++) {
      if (caller?.aborted) throw aborted(caller);
      const attempted = await this.attempt(url, { method, headers, body }, caller, timeout);
      if ("error" in attempted) {
        if (caller?.aborted) throw aborted(caller);
        const wait = retryDelay(this.config.retry, attempt, maxRetries);
        if (wait === null) {
          const tries = `${attempt + 1} attempt${attempt ? "s" : ""}`;
          const cause = { cause: attempted.error };
          throw attempted.timedOut
            ? new MemoryHubTimeoutError(
                `No answer from MemoryHub within ${timeout} ms (${tries})`,
                cause,
              )
            : new MemoryHubConnectionError(`No answer from MemoryHub after ${tries}`, cause);
        }
        await this.wait(wait, caller);
        continue;
      }
      const { response, text } = attempted;
      if (response.ok) return parse(response, text) as Operations[K]["response"];
      const answer = { status: response.status, headers: response.headers, body: text };
      const wait = retryDelay(this.config.retry, attempt, maxRetries, answer);
      if (wait === null) throw errorFromResponse(response.status, response.headers, text);
      await this.wait(wait, caller);
    }
  }

  /** One attempt: the response and its whole body, or the error that stopped it (and whether
   * that was the timeout). The attempt's timer and listener are gone when it returns. */
  private async attempt(
    url: string,
    request: { method: string; headers: Record<string, string>; body: string | undefined },
    caller: AbortSignal | undefined,
    timeout: number,
  ): Promise<{ response: Response; text: string } | { error: unknown; timedOut: boolean }> {
    const attemptAbort = attemptSignal(caller, timeout);
    try {
      const init: RequestInit = {
        method: request.method,
        headers: request.headers,
        signal: attemptAbort.signal,
      };
      if (request.body !== undefined) init.body = request.body;
      const response = await this.config.fetch(url, init);
      const text = await response.text(); // inside the timeout: a stalled body times out too
      return { response, text };
    } catch (error) {
      return { error, timedOut: attemptAbort.timedOut() };
    } finally {
      attemptAbort.done();
    }
  }

  private async wait(ms: number, signal: AbortSignal | undefined): Promise<void> {
    try {
      await this.config.sleep(ms, signal);
    } catch (error) {
      if (signal?.aborted) throw aborted(signal);
      throw error;
    }
  }
}

function parse(response: Response, text: string): unknown {
  const type = response.headers.get("Content-Type") ?? "";
  if (!type.includes("json")) return text;
  try {
    return JSON.parse(text);
  } catch (error) {
    throw new MemoryHubError(`HTTP ${response.status} with a body that is not JSON`, {
      status: response.status,
      headers: response.headers,
      cause: error,
    });
  }
}
