/**
 * One error class per MemoryHub error code, as in the Python client: each
 * carries the body's `code`, `message` and `details`, the HTTP `status` and the response
 * `headers`. Errors raised without an answer from the server (connection failure, timeout,
 * the caller's abort) have no `status`.
 */

/** The `details` object of an error body (which field, which rule, the current version…). */
export type ErrorDetails = Record<string, unknown>;

export interface MemoryHubErrorInit {
  code?: string;
  status?: number | undefined;
  details?: ErrorDetails | undefined;
  headers?: Headers | undefined;
  cause?: unknown;
}

/**
 * Base of every error the client throws. `code` is the API's error code (or a client-side one:
 * `CONNECTION_ERROR`, `TIMEOUT`, `ABORTED`, `UNEXPECTED_RESPONSE`), `status` the HTTP status
 * (undefined when no response arrived), `details` the error's details object.
 */
export class MemoryHubError extends Error {
  static readonly code: string = "UNEXPECTED_RESPONSE";
  readonly code: string;
  readonly status: number | undefined;
  readonly details: ErrorDetails;
  readonly headers: Headers | undefined;

  constructor(message: string, init: MemoryHubErrorInit = {}) {
    super(message, init.cause === undefined ? undefined : { cause: init.cause });
    this.name = new.target.name;
    this.code = init.code ?? new.target.code;
    this.status = init.status;
    this.details = init.details ?? {};
    this.headers = init.headers;
  }

  /** The input field the error names, when it names one (`details.field`). */
  get field(): string | undefined {
    const value = this.details.field;
    return typeof value === "string" ? value : undefined;
  }
}

/** 400: validation failed (the field is named in `details`); malformed JSON. */
export class InvalidInputError extends MemoryHubError {
  static override readonly code = "INVALID_INPUT";
}

/** 401: missing, malformed, revoked or expired key. */
export class UnauthenticatedError extends MemoryHubError {
  static override readonly code = "UNAUTHENTICATED";
}

/** 403: the key lacks the scope, or names another subject than it is bound to. */
export class ScopeDeniedError extends MemoryHubError {
  static override readonly code = "SCOPE_DENIED";
}

/** 404: no such memory (or thread) visible to this key. */
export class NotFoundError extends MemoryHubError {
  static override readonly code = "NOT_FOUND";
}

/** 409: compare-and-set failed, or a create-only key exists. */
export class ConflictError extends MemoryHubError {
  static override readonly code = "CONFLICT";

  /** The memory's version now (null when a create-only key simply exists). */
  get currentVersion(): number | null {
    const value = this.details.current_version;
    return typeof value === "number" ? value : null;
  }
}

/** 413: the body is over the server's limit. */
export class PayloadTooLargeError extends MemoryHubError {
  static override readonly code = "PAYLOAD_TOO_LARGE";
}

/** 422: the same `Idempotency-Key` was reused with a different body. */
export class IdempotencyMismatchError extends MemoryHubError {
  static override readonly code = "IDEMPOTENCY_MISMATCH";
}

/** 422: a secret-shaped value was found; nothing was stored and the value is never echoed. */
export class SecretRejectedError extends MemoryHubError {
  static override readonly code = "SECRET_REJECTED";

  /** The secret rule that matched. */
  get rule(): string | undefined {
    const value = this.details.rule;
    return typeof value === "string" ? value : undefined;
  }
}

/** 429: a tenant or agent quota that eviction may not relieve (never retried). */
export class QuotaExceededError extends MemoryHubError {
  static override readonly code = "QUOTA_EXCEEDED";
}

/** 429: too many requests; retried after `Retry-After` until the retries are used up. */
export class RateLimitedError extends MemoryHubError {
  static override readonly code = "RATE_LIMITED";

  /** Seconds the server asked to wait (`Retry-After`), when it said. */
  get retryAfter(): number | null {
    return parseRetryAfter(this.headers?.get("Retry-After") ?? null);
  }
}

/** 502: the embedding backend failed; nothing was written. */
export class EmbeddingError extends MemoryHubError {
  static override readonly code = "EMBEDDING_ERROR";
}

/** 503: the database is unreachable; retried after `Retry-After` until the retries are used up. */
export class BackendUnavailableError extends MemoryHubError {
  static override readonly code = "BACKEND_UNAVAILABLE";

  /** Seconds the server asked to wait (`Retry-After`), when it said. */
  get retryAfter(): number | null {
    return parseRetryAfter(this.headers?.get("Retry-After") ?? null);
  }
}

/** 500: any other database failure. */
export class DatabaseError extends MemoryHubError {
  static override readonly code = "DATABASE_ERROR";
}

/**
 * No answer: the connection failed on every attempt. `cause` is the last `fetch` error.
 */
export class MemoryHubConnectionError extends MemoryHubError {
  static override readonly code: string = "CONNECTION_ERROR";
}

/** No answer within the call's `timeout`, on every attempt. */
export class MemoryHubTimeoutError extends MemoryHubConnectionError {
  static override readonly code = "TIMEOUT";
}

/** The caller's `AbortSignal` fired; `cause` is its reason. Never retried. */
export class MemoryHubAbortError extends MemoryHubError {
  static override readonly code = "ABORTED";
}

type ErrorClass = (new (message: string, init?: MemoryHubErrorInit) => MemoryHubError) & {
  readonly code: string;
};

/** The class of each API error code. */
export const ERRORS_BY_CODE: Readonly<Record<string, ErrorClass>> = Object.freeze(
  Object.fromEntries(
    [
      InvalidInputError,
      UnauthenticatedError,
      ScopeDeniedError,
      NotFoundError,
      ConflictError,
      PayloadTooLargeError,
      IdempotencyMismatchError,
      SecretRejectedError,
      QuotaExceededError,
      RateLimitedError,
      EmbeddingError,
      BackendUnavailableError,
      DatabaseError,
    ].map((cls) => [cls.code, cls]),
  ),
);

/** Whether `code` is one of the API's error codes. */
export function knownCode(code: string): boolean {
  return Object.hasOwn(ERRORS_BY_CODE, code);
}

/** `Retry-After` in seconds (MemoryHub sends delta-seconds; an HTTP date is honoured too). */
export function parseRetryAfter(value: string | null, now: number = Date.now()): number | null {
  if (!value) return null;
  const trimmed = value.trim();
  if (/^\d+(\.\d+)?$/.test(trimmed)) return Number(trimmed);
  const when = Date.parse(trimmed);
  if (Number.isNaN(when)) return null;
  return Math.max((when - now) / 1000, 0);
}

/** The error for a non-2xx answer: the class of its code, or the base class when the body is
 * not MemoryHub's envelope (a proxy's HTML page, say). */
export function errorFromResponse(status: number, headers: Headers, body: string): MemoryHubError {
  let envelope: unknown;
  try {
    envelope = JSON.parse(body);
  } catch {
    envelope = undefined;
  }
  const error = isRecord(envelope) ? envelope.error : undefined;
  if (!isRecord(error) || typeof error.code !== "string") {
    return new MemoryHubError(`HTTP ${status} without a MemoryHub error body`, { status, headers });
  }
  const code = error.code;
  const message = typeof error.message === "string" && error.message ? error.message : code;
  const details = isRecord(error.details) ? error.details : {};
  const cls: ErrorClass = knownCode(code) ? ERRORS_BY_CODE[code]! : MemoryHubError;
  return new cls(message, { code, status, details, headers });
}

export function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}
