/**
 * Retries are safe: a store whose first attempts fail (the response lost after the write, a
 * 503 with Retry-After, a 429 RATE_LIMITED) is retried with one Idempotency-Key, and exactly
 * one memory exists (counted in the database). Waits are recorded, never slept.
 */

import assert from "node:assert/strict";
import { test } from "node:test";

import { QuotaExceededError } from "@memoryhub/client";

import { countMemories, envelope, flakyProxy, newAgentKey, recordingHub } from "./support.js";

const JSON_ = { "Content-Type": "application/json" };
const UNAVAILABLE = [
  "status",
  503,
  { ...JSON_, "Retry-After": "7" },
  envelope("BACKEND_UNAVAILABLE", "down"),
];
const RATE_LIMITED = [
  "status",
  429,
  { ...JSON_, "Retry-After": "3" },
  envelope("RATE_LIMITED", "slow down"),
];

async function ownKey(): Promise<string> {
  return (await newAgentKey()).key;
}

test("a failing store is retried with one Idempotency-Key and stored once", async () => {
  const proxy = await flakyProxy(["forward_then_drop", UNAVAILABLE, RATE_LIMITED]);
  const { hub, sleeps } = recordingHub({ url: proxy.url, apiKey: await ownKey() });
  const text = `Met the customer in Porto ${crypto.randomUUID()}`;
  const result = await hub.store({ text, key: "met" });

  // Back-off after the dropped connection, then exactly the server's Retry-After each time.
  assert.deepEqual(sleeps, [500, 7000, 3000]);
  const posts = (await proxy.seen()).filter(([method]) => method === "POST");
  assert.equal(posts.length, 4);
  const keys = new Set(posts.map(([, , key]) => key));
  assert.equal(keys.size, 1);
  assert.match(String(posts[0]?.[2]), /^[0-9a-f]{32}$/);
  // The first attempt stored the memory; the last one was the replay of that response.
  assert.equal(await countMemories(text), 1);
  assert.deepEqual([result.message, result.version], ["Ok", 1]);
  assert.equal(result.memory.text, text);
});

test("an unkeyed store is not duplicated by lost responses", async () => {
  const proxy = await flakyProxy(["forward_then_drop", "forward_then_drop"]);
  const { hub, sleeps } = recordingHub({ url: proxy.url, apiKey: await ownKey() });
  const text = `No key, no dedup ${crypto.randomUUID()}`;
  const result = await hub.store({ text, dedup_policy: "insert" });
  assert.equal(await countMemories(text), 1);
  assert.equal(result.memory.text, text);
  assert.deepEqual(sleeps, [500, 1000]);
});

test("every POST method sends an Idempotency-Key, a fresh one per call; GETs send none", async () => {
  const proxy = await flakyProxy([]);
  const { hub } = recordingHub({ url: proxy.url, apiKey: await ownKey() });
  const stored = await hub.store({ text: "keyed calls" });
  await hub.confirm(stored.memory_id);
  await hub.search("keyed");
  await hub.hydrate();
  await hub.addMessages("t-1", [{ role: "user", content: "hello" }], { extract: "off" });
  await hub.extract("t-1");
  await hub.endThread("t-1");
  await hub.keys();
  await hub.store({ text: "my own key" }, { idempotencyKey: "my-key-1" });
  const seen = await proxy.seen();
  const posts = seen.filter(([method]) => method === "POST");
  assert.equal(posts.length, 8);
  const keys = posts.map(([, , key]) => key);
  assert.equal(keys.at(-1), "my-key-1");
  assert.ok(keys.slice(0, -1).every((key) => /^[0-9a-f]{32}$/.test(String(key))));
  assert.equal(new Set(keys).size, 8);
  assert.ok(seen.filter(([method]) => method !== "POST").every(([, , key]) => key === null));
});

test("Retry-After is capped and the back-off is exponential up to its cap", async () => {
  const longWait = [
    "status",
    503,
    { ...JSON_, "Retry-After": "3600" },
    envelope("BACKEND_UNAVAILABLE", "x"),
  ];
  const proxy = await flakyProxy([
    longWait,
    "forward_then_drop",
    "forward_then_drop",
    "forward_then_drop",
  ]);
  const { hub, sleeps } = recordingHub({
    url: proxy.url,
    apiKey: await ownKey(),
    maxRetries: 4,
    retry: { backoff: 250, maxBackoff: 1000, maxRetryAfter: 30_000, jitter: false },
  });
  assert.deepEqual(await hub.keys(), []);
  assert.deepEqual(sleeps, [30_000, 500, 1000, 1000]);
});

test("an HTTP-date Retry-After is honoured", async () => {
  const when = new Date(Date.now() + 40_000).toUTCString(); // within the 60 s cap
  const proxy = await flakyProxy([
    ["status", 503, { ...JSON_, "Retry-After": when }, envelope("BACKEND_UNAVAILABLE", "x")],
  ]);
  const { hub, sleeps } = recordingHub({ url: proxy.url, apiKey: await ownKey() });
  await hub.keys();
  assert.equal(sleeps.length, 1);
  assert.ok(sleeps[0]! > 30_000 && sleeps[0]! <= 40_000, `waited ${sleeps[0]}`);
});

test("full jitter stays within the back-off", async () => {
  const proxy = await flakyProxy(["forward_then_drop", "forward_then_drop", "forward_then_drop"]);
  const { hub, sleeps } = recordingHub({
    url: proxy.url,
    apiKey: await ownKey(),
    retry: { backoff: 1000, jitter: true },
  });
  await hub.keys();
  assert.equal(sleeps.length, 3);
  [1000, 2000, 4000].forEach((cap, i) => assert.ok(sleeps[i]! >= 0 && sleeps[i]! <= cap));
});

test("quota exceeded is not retried; a 429 without our envelope is", async () => {
  const quota = ["status", 429, JSON_, envelope("QUOTA_EXCEEDED", "full")];
  const proxy = await flakyProxy([quota]);
  const { hub, sleeps } = recordingHub({ url: proxy.url, apiKey: await ownKey() });
  await assert.rejects(hub.store({ text: "won't fit" }), QuotaExceededError);
  assert.deepEqual(sleeps, []);
  assert.equal((await proxy.seen()).length, 1);

  const foreign = await flakyProxy([["status", 429, { "Retry-After": "2" }, "Too Many Requests"]]);
  const other = recordingHub({ url: foreign.url, apiKey: await ownKey() });
  assert.deepEqual(await other.hub.keys(), []);
  assert.deepEqual(other.sleeps, [2000]);
});

test("maxRetries per call overrides the client's", async () => {
  const proxy = await flakyProxy([UNAVAILABLE, UNAVAILABLE]);
  const { hub, sleeps } = recordingHub({ url: proxy.url, apiKey: await ownKey(), maxRetries: 5 });
  await assert.rejects(hub.keys({}, { maxRetries: 1 }), {
    code: "BACKEND_UNAVAILABLE",
    status: 503,
  });
  assert.deepEqual(sleeps, [7000]);
});
