/**
 * Every error code of the API reaches the caller as its own class, with `code`, `status`,
 * `details` (and `currentVersion`, `retryAfter`, `rule`, `field` where they apply), each
 * provoked on the live server where it can be; and the client's own errors: no answer
 * (connection refused), a timeout, the caller's abort, and a body that is not MemoryHub's.
 */

import assert from "node:assert/strict";
import { createServer, type Server } from "node:http";
import { createServer as createNetServer } from "node:net";
import { after, before, test } from "node:test";

import {
  BackendUnavailableError,
  ConflictError,
  DatabaseError,
  EmbeddingError,
  ERRORS_BY_CODE,
  IdempotencyMismatchError,
  InvalidInputError,
  MemoryHub,
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
} from "@memoryhub/client";

import {
  SERVER_URL,
  envelope,
  flakyProxy,
  githubToken,
  newAgentKey,
  recordingHub,
  withServerSettings,
} from "./support.js";

/** Runs `call`, expects it to reject with exactly `cls`, and returns the error. */
async function rejectsWith<E extends MemoryHubError>(
  call: Promise<unknown>,
  cls: abstract new (...args: never[]) => E,
): Promise<E> {
  try {
    await call;
  } catch (error) {
    assert.ok(error instanceof cls, `expected ${cls.name}, got ${String(error)}`);
    assert.equal(Object.getPrototypeOf(error), cls.prototype, `expected exactly ${cls.name}`);
    assert.ok(error instanceof MemoryHubError && error instanceof Error);
    return error;
  }
  assert.fail(`expected ${cls.name}, nothing was thrown`);
}

async function ownKey(options: Parameters<typeof newAgentKey>[0] = {}): Promise<string> {
  return (await newAgentKey(options)).key;
}

test("one class per API error code, each a MemoryHubError named as its class", () => {
  assert.deepEqual(Object.keys(ERRORS_BY_CODE).sort(), [
    "BACKEND_UNAVAILABLE",
    "CONFLICT",
    "DATABASE_ERROR",
    "EMBEDDING_ERROR",
    "IDEMPOTENCY_MISMATCH",
    "INVALID_INPUT",
    "NOT_FOUND",
    "PAYLOAD_TOO_LARGE",
    "QUOTA_EXCEEDED",
    "RATE_LIMITED",
    "SCOPE_DENIED",
    "SECRET_REJECTED",
    "UNAUTHENTICATED",
  ]);
  for (const [code, cls] of Object.entries(ERRORS_BY_CODE)) {
    const error = new cls("x");
    assert.ok(error instanceof MemoryHubError);
    assert.equal(error.code, code);
    assert.equal(error.name, cls.name);
  }
});

test("client errors: invalid input, unauthenticated, scope, not found, conflict, too large, idempotency, secret", async () => {
  const { hub } = recordingHub({ apiKey: await ownKey() });

  const invalid = await rejectsWith(hub.store({ tags: ["ok"] }), InvalidInputError); // neither text nor data
  assert.deepEqual([invalid.status, invalid.code, invalid.field], [400, "INVALID_INPUT", "text"]);
  assert.ok(invalid.headers instanceof Headers);

  const unauthenticated = await rejectsWith(
    recordingHub({ apiKey: `mh_${"x".repeat(40)}` }).hub.keys(),
    UnauthenticatedError,
  );
  assert.equal(unauthenticated.status, 401);

  const readOnly = recordingHub({ apiKey: await ownKey({ scopes: ["read"] }) }).hub;
  const denied = await rejectsWith(readOnly.store({ text: "a fact" }), ScopeDeniedError);
  assert.equal(denied.status, 403);

  const missing = await rejectsWith(hub.get("mem_01JAAAAAAAAAAAAAAAAAAAAAAA"), NotFoundError);
  assert.deepEqual([missing.status, missing.code], [404, "NOT_FOUND"]);

  await hub.store({ text: "v1", key: "cas" });
  const conflict = await rejectsWith(
    hub.store({ text: "v2", key: "cas", expected_version: 5 }),
    ConflictError,
  );
  assert.deepEqual([conflict.status, conflict.currentVersion], [409, 1]);
  const createOnly = await rejectsWith(
    hub.store({ text: "v2", key: "cas", expected_version: 0 }),
    ConflictError,
  );
  assert.equal(createOnly.status, 409);

  const tooLarge = await rejectsWith(
    hub.store({ text: "x".repeat(2_000_000) }),
    PayloadTooLargeError,
  );
  assert.equal(tooLarge.status, 413);

  const idempotencyKey = crypto.randomUUID();
  await hub.store({ text: "first body" }, { idempotencyKey });
  const mismatch = await rejectsWith(
    hub.store({ text: "another body" }, { idempotencyKey }),
    IdempotencyMismatchError,
  );
  assert.equal(mismatch.status, 422);

  const token = githubToken();
  const secret = await rejectsWith(
    hub.store({ text: `the token is ${token}` }),
    SecretRejectedError,
  );
  assert.equal(secret.status, 422);
  assert.ok(secret.rule);
  assert.equal(secret.field, "text");
  assert.ok(!secret.message.includes(token) && !JSON.stringify(secret.details).includes(token));
});

test("a replayed idempotency key answers the first response exactly, and stores once", async () => {
  const { hub } = recordingHub({ apiKey: await ownKey() });
  const idempotencyKey = crypto.randomUUID();
  const first = await hub.store(
    { text: "stored once", dedup_policy: "insert" },
    { idempotencyKey },
  );
  const replay = await hub.store(
    { text: "stored once", dedup_policy: "insert" },
    { idempotencyKey },
  );
  assert.deepEqual(replay, first);
  assert.equal((await hub.list().toArray()).length, 1);
});

test("quota exceeded is not retried; rate limited carries Retry-After", async () => {
  const quota = recordingHub({ apiKey: await ownKey({ policy: { entry_cap: 0 } }) });
  const full = await rejectsWith(quota.hub.store({ text: "nothing fits" }), QuotaExceededError);
  assert.deepEqual([full.status, full.details], [429, { entry_cap: 0 }]);
  assert.deepEqual(quota.sleeps, []);

  const limited = recordingHub({ apiKey: await ownKey(), maxRetries: 0 });
  await withServerSettings({ rate_limit_per_minute: 1 }, async () => {
    await limited.hub.keys();
    const error = await rejectsWith(limited.hub.keys(), RateLimitedError);
    assert.equal(error.status, 429);
    assert.ok(error.retryAfter !== null && error.retryAfter > 0);
  });
  assert.deepEqual(limited.sleeps, []); // maxRetries 0: thrown at once
});

test("embedding error", async () => {
  const { hub } = recordingHub({ apiKey: await ownKey() });
  await withServerSettings({ embedder: "no-such-embedder" }, async () => {
    const error = await rejectsWith(hub.store({ text: "needs an embedding" }), EmbeddingError);
    assert.deepEqual([error.status, error.details], [502, { embedder: "no-such-embedder" }]);
  });
  assert.equal((await hub.store({ text: "embedded again" })).message, "Ok");
});

test("backend unavailable: retried after the server's Retry-After, then thrown", async () => {
  // The server's own outage answer (its middleware, while the watcher says the database is down).
  const { hub, sleeps } = recordingHub({ apiKey: await ownKey(), maxRetries: 2 });
  await withServerSettings({ outage: true }, async () => {
    const error = await rejectsWith(hub.keys(), BackendUnavailableError);
    assert.deepEqual([error.status, error.retryAfter], [503, 5]);
  });
  assert.deepEqual(sleeps, [5000, 5000]);
});

test("database error (the server's envelope, through a proxy): not retried", async () => {
  // A 500 DATABASE_ERROR cannot be provoked from outside without breaking PostgreSQL, so the
  // proxy answers the server's envelope for it; what is tested is the client's mapping.
  const proxy = await flakyProxy([
    [
      "status",
      500,
      { "Content-Type": "application/json" },
      envelope("DATABASE_ERROR", "Database error"),
    ],
  ]);
  const { hub, sleeps } = recordingHub({ url: proxy.url });
  const error = await rejectsWith(hub.keys(), DatabaseError);
  assert.deepEqual([error.status, error.code], [500, "DATABASE_ERROR"]);
  assert.deepEqual(sleeps, []);
});

test("an answer that is not MemoryHub's envelope is the base class, with its status", async () => {
  const proxy = await flakyProxy([
    ["status", 502, { "Content-Type": "text/html" }, "<html>Bad gateway</html>"],
  ]);
  const error = await rejectsWith(recordingHub({ url: proxy.url }).hub.keys(), MemoryHubError);
  assert.deepEqual([error.status, error.code], [502, "UNEXPECTED_RESPONSE"]);

  const unknown = await flakyProxy([
    [
      "status",
      418,
      { "Content-Type": "application/json" },
      envelope("NEW_CODE", "from a newer server"),
    ],
  ]);
  const newer = await rejectsWith(recordingHub({ url: unknown.url }).hub.keys(), MemoryHubError);
  assert.deepEqual(
    [newer.status, newer.code, newer.message],
    [418, "NEW_CODE", "from a newer server"],
  );

  // A code that names an Object.prototype member is still just an unknown code.
  const odd = await flakyProxy([
    ["status", 400, { "Content-Type": "application/json" }, envelope("constructor", "odd")],
  ]);
  const oddError = await rejectsWith(recordingHub({ url: odd.url }).hub.keys(), MemoryHubError);
  assert.deepEqual([oddError.status, oddError.code], [400, "constructor"]);
});

async function freePort(): Promise<number> {
  const server = createNetServer();
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const address = server.address();
  await new Promise((resolve) => server.close(resolve));
  assert.ok(address && typeof address === "object");
  return address.port;
}

test("no answer: a connection error after the retries, each after an exponential back-off", async () => {
  const { hub, sleeps } = recordingHub({
    url: `http://127.0.0.1:${await freePort()}`,
    maxRetries: 2,
  });
  const error = await rejectsWith(hub.keys(), MemoryHubConnectionError);
  assert.deepEqual([error.status, error.code], [undefined, "CONNECTION_ERROR"]);
  assert.ok(error.cause !== undefined);
  assert.deepEqual(sleeps, [500, 1000]);
});

// A loopback server that accepts requests and never answers them.
let silent: Server;
let silentUrl: string;
before(async () => {
  silent = createServer(() => {});
  await new Promise<void>((resolve) => silent.listen(0, "127.0.0.1", resolve));
  const address = silent.address();
  assert.ok(address && typeof address === "object");
  silentUrl = `http://127.0.0.1:${address.port}`;
});
after(() => {
  silent.closeAllConnections();
  silent.close();
});

test("a timeout per attempt: retried like a lost connection, then MemoryHubTimeoutError", async () => {
  const { hub, sleeps } = recordingHub({ url: silentUrl, timeout: 100, maxRetries: 1 });
  const started = Date.now();
  const error = await rejectsWith(hub.keys(), MemoryHubTimeoutError);
  assert.ok(error instanceof MemoryHubConnectionError);
  assert.deepEqual([error.code, error.status], ["TIMEOUT", undefined]);
  assert.deepEqual(sleeps, [500]);
  assert.ok(Date.now() - started < 5000);

  // A per-call timeout overrides the client's.
  const patient = recordingHub({ url: silentUrl, timeout: 60_000, maxRetries: 0 }).hub;
  await rejectsWith(patient.keys({}, { timeout: 50 }), MemoryHubTimeoutError);
});

test("the caller's AbortSignal aborts the request at once and is never retried", async () => {
  const { hub, sleeps } = recordingHub({ url: silentUrl, timeout: 60_000 });
  const controller = new AbortController();
  const pending = hub.keys({}, { signal: controller.signal });
  setTimeout(() => controller.abort(new Error("user gave up")), 20);
  const error = await rejectsWith(pending, MemoryHubAbortError);
  assert.equal(error.code, "ABORTED");
  assert.match(String((error.cause as Error).message), /user gave up/);
  assert.deepEqual(sleeps, []);

  const already = AbortSignal.abort();
  await rejectsWith(
    new MemoryHub({ url: SERVER_URL }).keys({}, { signal: already }),
    MemoryHubAbortError,
  );
});

test("an abort during the wait before a retry stops the retries", async () => {
  const controller = new AbortController();
  const hub = new MemoryHub({
    url: `http://127.0.0.1:${await freePort()}`,
    retry: { backoff: 60_000, jitter: false },
  });
  const pending = hub.keys({}, { signal: controller.signal });
  setTimeout(() => controller.abort(), 50);
  const started = Date.now();
  await rejectsWith(pending, MemoryHubAbortError);
  assert.ok(Date.now() - started < 5000, "the 60 s back-off was cut short");
});
