/** Every method of `MemoryHub` against a live server, and the list walk over 300 memories. */

import assert from "node:assert/strict";
import { test } from "node:test";

import { MemoryHub, NotFoundError, PageIterator, type Memory } from "@memoryhub/client";

import { SERVER_URL, newAgentKey } from "./support.js";

async function freshHub(scopes?: string[]): Promise<MemoryHub> {
  const { key } = await newAgentKey(scopes ? { scopes } : {});
  return new MemoryHub({ url: SERVER_URL, apiKey: key });
}

test("store, get, recall, update, confirm, keys and forget", async () => {
  const hub = await freshHub();
  const first = await hub.store({
    text: "Prefers answers in French",
    key: "pref/language",
    subject_id: "u-42",
    tags: ["Profile"],
    data: { lang: "fr" },
  });
  assert.equal(first.ok, true);
  assert.equal(first.message, "Ok");
  assert.equal(first.version, 1);
  assert.equal(first.memory.id, first.memory_id);
  assert.deepEqual(first.memory.tags, ["profile"]);
  assert.deepEqual(first.memory.data, { lang: "fr" });
  assert.equal(first.memory.subject_id, "u-42");
  assert.ok(!Number.isNaN(Date.parse(first.memory.created_at)));

  const again = await hub.store({
    text: "Prefers answers in German",
    key: "pref/language",
    subject_id: "u-42",
  });
  assert.deepEqual(
    [again.message, again.version, again.memory_id],
    ["Updated", 2, first.memory_id],
  );

  const got = await hub.get(first.memory_id, { subject_id: "u-42" });
  assert.deepEqual(
    [got.id, got.text, got.version, got.subject_id],
    [first.memory_id, "Prefers answers in German", 2, "u-42"],
  );
  assert.equal((await hub.recall("pref/language", { subject_id: "u-42" }))?.id, first.memory_id);
  assert.equal(await hub.recall("pref/language"), null); // without the subject: subject-less only
  assert.equal(await hub.recall("no/such/key", { subject_id: "u-42" }), null);

  const changed = await hub.update(first.memory_id, {
    subject_id: "u-42",
    expected_version: 2,
    importance: 0.9,
  });
  assert.deepEqual([changed.version, changed.importance], [3, 0.9]);
  const expiring = await hub.update(first.memory_id, { subject_id: "u-42", ttl: "1h" });
  assert.notEqual(expiring.expires_at, null);
  const forever = await hub.update(first.memory_id, { subject_id: "u-42", expires_at: null }); // null clears
  assert.equal(forever.expires_at, null);
  const confirmed = await hub.confirm(first.memory_id, { subject_id: "u-42" });
  assert.equal(confirmed.version, forever.version + 1);
  assert.ok(Date.parse(confirmed.last_confirmed_at) >= Date.parse(forever.last_confirmed_at));

  assert.deepEqual(await hub.keys({ subject_id: "u-42" }), ["pref/language"]);
  assert.deepEqual(await hub.keys({ subject_id: "u-42", key_prefix: "pref/" }), ["pref/language"]);
  assert.deepEqual(await hub.keys({ subject_id: "u-42", key_prefix: "pref_" }), []);

  const gone = await hub.forget({
    key: "pref/language",
    subject_id: "u-42",
    reason: "moved to Spain",
  });
  assert.deepEqual(gone, { ok: true, deleted: true, memory_id: first.memory_id });
  await assert.rejects(hub.get(first.memory_id, { subject_id: "u-42" }), NotFoundError);
  const twice = await hub.forget({ memory_id: first.memory_id, subject_id: "u-42" });
  assert.equal(twice.deleted, false);
  await assert.rejects(
    // @ts-expect-error: one of memory_id and key, never both
    hub.forget({ memory_id: first.memory_id, key: "pref/language" }),
    /memory_id or key/,
  );
});

test("a key with slashes, percent signs, ? and # is one path segment", async () => {
  const hub = await freshHub();
  const key = "team/eu%20west/näme?x=1#frag";
  const stored = await hub.store({ text: "Odd key", key });
  assert.equal((await hub.recall(key))?.id, stored.memory_id);
  assert.deepEqual((await hub.forget({ key })).memory_id, stored.memory_id);
});

test("purge needs the admin scope and erases", async () => {
  const hub = await freshHub();
  const stored = await hub.store({ text: "Erase me completely", key: "erase.me" });
  const purged = await hub.forget({ memory_id: stored.memory_id, purge: true });
  assert.equal(purged.deleted, true);
  assert.deepEqual(await hub.keys(), []);
});

test("search, hydrate and exportMarkdown", async () => {
  const hub = await freshHub();
  await hub.store({
    text: "The customer runs PostgreSQL 18 in Frankfurt",
    key: "infra.db",
    category: "core",
  });
  await hub.store({ text: "Deploys happen on Tuesdays", category: "daily", tags: ["ops"] });

  const found = await hub.search("PostgreSQL Frankfurt", { mode: "keyword", limit: 5 });
  assert.equal(found.success, true);
  assert.ok(!Number.isNaN(Date.parse(found.searchedAt)));
  const top = found.memories[0];
  assert.ok(top);
  assert.equal(top.key, "infra.db");
  assert.equal(top.data.text, "The customer runs PostgreSQL 18 in Frankfurt");
  assert.ok(top.quality.relevance > 0 && top.quality.relevance <= 1);
  assert.equal(top.context.isLatest, true);
  assert.equal(top.source, "own");
  assert.equal((await hub.search("PostgreSQL", { key_prefix: "other." })).memories.length, 0);
  const tagged = await hub.search("Deploys", { tags: ["ops"], categories: ["daily"] });
  assert.deepEqual(
    tagged.memories.map((hit) => hit.data.text),
    ["Deploys happen on Tuesdays"],
  );

  const hydrated = await hub.hydrate({ format: "markdown", explain: true });
  assert.deepEqual(
    hydrated.entries.map((entry) => [entry.reason, entry.text]),
    [
      ["core", "The customer runs PostgreSQL 18 in Frankfurt"],
      ["recent", "Deploys happen on Tuesdays"],
    ],
  );
  assert.equal(
    hydrated.bytes_used,
    hydrated.entries.reduce((sum, entry) => sum + entry.size_bytes, 0),
  );
  assert.deepEqual(hydrated.omitted, []);
  assert.match(hydrated.markdown ?? "", /The customer runs PostgreSQL 18 in Frankfurt/);
  assert.match(hydrated.markdown ?? "", /Deploys happen on Tuesdays/);
  assert.equal((await hub.hydrate()).markdown, undefined); // only when asked for
  const small = await hub.hydrate({ budget_bytes: 10 });
  assert.deepEqual([small.entries.length, small.budget_bytes], [0, 10]);

  const exported = await hub.exportMarkdown({ category: "core" });
  assert.equal(typeof exported, "string");
  assert.ok(exported.startsWith("#"));
  assert.match(exported, /infra\.db/);
  assert.doesNotMatch(exported, /Deploys happen on Tuesdays/);
});

test("conversations: addMessages, getThread, messages, extract, endThread, eraseSubject", async () => {
  const hub = await freshHub();
  const messages = [
    { role: "user" as const, content: "I moved to Lisbon", created_at: "2025-01-01T10:00:00Z" },
    { role: "assistant" as const, content: "Noted!", created_at: "2025-01-01T10:00:05Z" },
  ];
  const added = await hub.addMessages("run/1", messages, { subject_id: "u-7", extract: "off" });
  assert.deepEqual(
    [added.thread_id, added.accepted, added.duplicates, added.redacted],
    ["run/1", 2, 0, 0],
  );
  assert.equal((await hub.addMessages("run/1", messages, { subject_id: "u-7" })).duplicates, 2);

  const thread = await hub.getThread("run/1", { subject_id: "u-7" });
  assert.deepEqual(
    [thread.thread_id, thread.subject_id, thread.message_count],
    ["run/1", "u-7", 2],
  );
  assert.notEqual(thread.last_message_at, null);
  assert.equal(thread.ended_at, null);

  const walked = await hub.messages("run/1", { subject_id: "u-7", limit: 1 }).toArray();
  assert.deepEqual(
    walked.map((m) => [m.seq, m.role, m.content]),
    [
      [1, "user", "I moved to Lisbon"],
      [2, "assistant", "Noted!"],
    ],
  );
  const pages = [];
  for await (const page of hub.messages("run/1", { subject_id: "u-7", limit: 1 }).pages())
    pages.push(page);
  assert.deepEqual(
    pages.map((page) => [page.items.length, page.next_cursor === null]),
    [
      [1, false],
      [1, true],
    ],
  );

  const extracted = await hub.extract("run/1", { subject_id: "u-7" });
  assert.equal(extracted.thread_id, "run/1");
  assert.equal(extracted.extraction.state, "disabled"); // no LLM configured in the suite

  await hub.store({
    text: "Scratch for this run",
    category: "conversation",
    thread_id: "run/1",
    subject_id: "u-7",
  });
  const ended = await hub.endThread("run/1", { subject_id: "u-7" });
  assert.equal(ended.removed, 1);

  await hub.store({ text: "Lives in Lisbon", subject_id: "u-7" });
  const erased = await hub.eraseSubject("u-7", { purge: true });
  assert.deepEqual(
    [erased.subject_id, erased.purged, erased.threads, erased.messages],
    ["u-7", true, 1, 2],
  );
  assert.ok(erased.memories >= 1);
  assert.deepEqual(await hub.list({ subject_id: "u-7" }).toArray(), []);
});

test("whoami", async () => {
  const { key, agent, tenant } = await newAgentKey({ scopes: ["read", "write"] });
  const me = await new MemoryHub({ url: SERVER_URL, apiKey: key }).whoami();
  assert.deepEqual(
    [me.tenant, me.agent, me.scopes, me.subject_id],
    [tenant, agent, ["read", "write"], null],
  );
});

test("list walks the cursor over 300 memories, each exactly once, newest first", async () => {
  const hub = await freshHub();
  const stored: string[] = [];
  for (let start = 0; start < 300; start += 20) {
    const batch = Array.from({ length: 20 }, (_, j) => start + j);
    const results = await Promise.all(
      batch.map((i) =>
        hub.store({
          text: `bulk memory ${String(i).padStart(3, "0")}`,
          key: `bulk/${String(i).padStart(3, "0")}`,
          tags: i % 2 ? ["bulk"] : [],
          dedup_policy: "insert",
        }),
      ),
    );
    stored.push(...results.map((r) => r.memory_id));
  }

  const iterator = hub.list({ limit: 200 });
  assert.ok(iterator instanceof PageIterator);
  const walked: Memory[] = [];
  for await (const memory of iterator) walked.push(memory);
  assert.equal(walked.length, 300);
  assert.deepEqual(walked.map((m) => m.id).sort(), [...stored].sort());
  const updated = walked.map((m) => Date.parse(m.updated_at));
  assert.deepEqual(
    updated,
    [...updated].sort((a, b) => b - a),
  );

  const pageSizes = [];
  for await (const page of hub.list({ limit: 120 }).pages()) pageSizes.push(page.items.length);
  assert.deepEqual(pageSizes, [120, 120, 60]);

  const tagged = await hub.list({ tag: "bulk", key_prefix: "bulk/2", limit: 7 }).toArray();
  assert.deepEqual(
    tagged.map((m) => m.key).sort(),
    Array.from({ length: 50 }, (_, j) => `bulk/${200 + 2 * j + 1}`),
  );
  const both = await hub.list({ tag: ["bulk", "nothing-has-this"] }).toArray();
  assert.deepEqual(both, []);

  const first = await hub.listPage({ limit: 5 });
  assert.equal(first.items.length, 5);
  assert.ok(first.next_cursor);
  const second = await hub.listPage({ limit: 5, cursor: first.next_cursor });
  assert.equal(second.items.length, 5);
  assert.ok(second.items.every((m) => !first.items.some((f) => f.id === m.id)));
});

test("apiIndex: every operation of the schema, the docs, no key needed", async () => {
  const index = await new MemoryHub({ url: SERVER_URL, apiKey: "mh_not_a_key" }).apiIndex();
  // Every field the schema declares (ApiIndexResponse), and no other.
  assert.deepEqual(Object.keys(index).sort(), [
    "authentication",
    "docs",
    "endpoints",
    "mcp",
    "name",
    "ok",
    "schema",
    "version",
  ]);
  assert.deepEqual([index.ok, index.version], [true, "v1"]);
  assert.deepEqual(
    [index.docs, index.schema, index.mcp],
    [`${SERVER_URL}/api/docs/`, `${SERVER_URL}/api/schema/`, `${SERVER_URL}/mcp`],
  );
  assert.match(index.authentication, /Bearer/);
  const schema = (await (await fetch(`${SERVER_URL}/api/schema/?format=json`)).json()) as {
    paths: Record<string, Record<string, unknown>>;
  };
  const operations = Object.entries(schema.paths)
    .filter(([path]) => path.startsWith("/api/v1/") && path !== "/api/v1/")
    .flatMap(([path, item]) =>
      Object.keys(item)
        .filter((method) => ["get", "post", "put", "patch", "delete"].includes(method))
        .map((method) => `${method.toUpperCase()} ${path}`),
    );
  assert.deepEqual(index.endpoints.map((e) => `${e.method} ${e.path}`).sort(), operations.sort());
  const events = index.endpoints.find((e) => e.path === "/api/v1/events");
  assert.deepEqual(events, {
    method: "GET",
    path: "/api/v1/events",
    summary: "Events (a change feed)",
  });
});

test("the client reads its URL and key from the environment by default", async () => {
  const hub = new MemoryHub();
  assert.equal(hub.url, process.env.MEMORYHUB_URL);
  assert.equal((await hub.whoami()).ok, true);
  const saved = process.env.MEMORYHUB_API_KEY;
  delete process.env.MEMORYHUB_API_KEY;
  try {
    assert.throws(() => new MemoryHub(), /MEMORYHUB_API_KEY/);
  } finally {
    process.env.MEMORYHUB_API_KEY = saved;
  }
});
