/**
 * The change feed and webhooks through the client: `events()` follows the cursor to
 * the present and says where to poll from next, `eventsPage()` is one page; filters by type and
 * subject; the read scope. `webhooks()`, `createWebhook()` and `deleteWebhook()` need the admin
 * scope; the SSRF guard's refusal is an `InvalidInputError` on `url`; another tenant's webhook
 * is a 404. Each test works in a tenant of its own, so the feed holds only its events.
 */

import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { test } from "node:test";

import {
  FeedIterator,
  InvalidInputError,
  MemoryHub,
  NotFoundError,
  ScopeDeniedError,
  type Event,
  type EventType,
  type FeedPage,
} from "@memoryhub/client";

import { SERVER_URL, newAgentKey, withServerSettings } from "./support.js";

async function hubInTenant(
  tenant: string,
  scopes?: string[],
): Promise<{ hub: MemoryHub; agent: string }> {
  const { key, agent } = await newAgentKey({ tenant, ...(scopes ? { scopes } : {}) });
  return { hub: new MemoryHub({ url: SERVER_URL, apiKey: key }), agent };
}

const newTenant = () => `ts-${randomUUID().slice(0, 8)}`;
const summary = (events: Event[]) =>
  events.map((event) => [event.type, event.memory_id, event.version]);

test("events() follows the cursor to the present and says where to poll from", async () => {
  const tenant = newTenant();
  const { hub, agent } = await hubInTenant(tenant);
  const stored = [];
  for (let i = 0; i < 5; i++)
    stored.push(await hub.store({ text: `event fact ${i}`, dedup_policy: "insert" }));

  const feed = hub.events({ limit: 2 });
  assert.ok(feed instanceof FeedIterator);
  assert.equal(feed.cursor, null); // nothing fetched before iterating
  const pages: FeedPage<Event>[] = [];
  for await (const page of feed.pages()) pages.push(page);
  assert.deepEqual(
    pages.map((page) => page.items.length),
    [2, 2, 1],
  );
  const events = pages.flatMap((page) => page.items);
  assert.deepEqual(
    summary(events),
    stored.map((s) => ["memory.created", s.memory_id, 1]),
  );
  const first = events[0]!;
  assert.deepEqual([first.tenant, first.agent, first.subject_id], [tenant, agent, null]);
  assert.equal(first.data.text, "event fact 0");
  assert.ok(!Number.isNaN(Date.parse(first.occurred_at)));
  assert.deepEqual(
    events.map((event) => event.id),
    [...events.map((event) => event.id)].sort((a, b) => a - b),
  );
  assert.equal(feed.cursor, pages.at(-1)!.next_cursor);
  assert.deepEqual(summary(await hub.events().toArray()), summary(events)); // each walk starts over

  // Caught up: one empty page, with a cursor to poll again from.
  const empty = await hub.eventsPage({ after: feed.cursor });
  assert.deepEqual(empty, { items: [], next_cursor: feed.cursor });

  const later = await hub.store({ text: "a later fact" });
  await hub.update(later.memory_id, { importance: 0.9 });
  const resumed = hub.events({ after: feed.cursor });
  assert.deepEqual(summary(await resumed.toArray()), [
    ["memory.created", later.memory_id, 1],
    ["memory.updated", later.memory_id, 2],
  ]);
  assert.notEqual(resumed.cursor, feed.cursor);
  assert.deepEqual(await hub.eventsPage({ after: resumed.cursor }), {
    items: [],
    next_cursor: resumed.cursor,
  });

  const updated = await hub.events({ types: ["memory.updated"] }).toArray();
  assert.deepEqual(summary(updated), [["memory.updated", later.memory_id, 2]]);
  assert.deepEqual(
    summary(await hub.events({ types: "memory.updated" }).toArray()),
    summary(updated),
  );
  const both = await hub.events({ types: ["memory.updated", "memory.created"] }).toArray();
  assert.equal(both.length, 7);
  assert.deepEqual(await hub.events({ types: ["memory.forgotten"] }).toArray(), []);
});

// TODO(merge with branch ev): GET /api/v1/events with a subject answers 500 on main today
// (visible_q's user part filters on `scope`, a column events do not have yet: FieldError).
test("events() for a subject: its events and the subject-less ones, never another subject's", async () => {
  const { hub } = await hubInTenant(newTenant());
  const plain = await hub.store({ text: "no subject" });
  const mine = await hub.store({ text: "about u-1", subject_id: "u-1" });
  await hub.update(mine.memory_id, { importance: 0.9, subject_id: "u-1" });
  await hub.store({ text: "about u-2", subject_id: "u-2" });
  const profile = await hub.store({ text: "u-1 everywhere", subject_id: "u-1", scope: "user" });
  assert.deepEqual(summary(await hub.events({ subject_id: "u-1" }).toArray()), [
    ["memory.created", plain.memory_id, 1],
    ["memory.created", mine.memory_id, 1],
    ["memory.updated", mine.memory_id, 2],
    ["memory.created", profile.memory_id, 1],
  ]);
  assert.deepEqual(summary(await hub.events().toArray()), [["memory.created", plain.memory_id, 1]]);
});

test("a walk stopped inside a page resumes at that page (at least once, never skipped)", async () => {
  const { hub } = await hubInTenant(newTenant());
  const stored = [];
  for (let i = 0; i < 4; i++)
    stored.push(await hub.store({ text: `resume fact ${i}`, dedup_policy: "insert" }));
  const firstPage = await hub.eventsPage({ limit: 2 });

  const partial = hub.events({ limit: 2 });
  for await (const event of partial) {
    if (event.memory_id === stored[2]!.memory_id) break; // the first item of the second page
  }
  assert.equal(partial.cursor, firstPage.next_cursor);
  const rest = await hub.events({ after: partial.cursor }).toArray();
  assert.deepEqual(
    rest.map((event) => event.memory_id),
    [stored[2]!.memory_id, stored[3]!.memory_id],
  );
});

test("events: the visibility of reads, the read scope, refused input", async () => {
  const tenant = newTenant();
  const { hub } = await hubInTenant(tenant);
  const own = await hub.store({ text: "only mine" });
  const shared = await hub.store({ text: "for every agent", category: "workspace" });
  assert.deepEqual(
    (await hub.events().toArray()).map((event) => event.memory_id),
    [own.memory_id, shared.memory_id],
  );
  const { hub: colleague } = await hubInTenant(tenant);
  assert.deepEqual(
    (await colleague.events().toArray()).map((event) => event.memory_id),
    [shared.memory_id],
  );
  const { hub: stranger } = await hubInTenant(newTenant());
  assert.deepEqual(await stranger.events().toArray(), []);

  const { hub: writer } = await hubInTenant(tenant, ["write"]);
  await assert.rejects(writer.events().toArray(), ScopeDeniedError);
  await assert.rejects(
    // The cast is needed (tsc rejects the bare literal); the rule misreads the union's array.
    // eslint-disable-next-line @typescript-eslint/no-unnecessary-type-assertion
    hub.events({ types: ["memory.exploded" as EventType] }).toArray(),
    (error: unknown) => {
      assert.ok(error instanceof InvalidInputError);
      assert.equal(error.field, "types");
      return true;
    },
  );
  await assert.rejects(hub.eventsPage({ after: "not-a-cursor" }), (error: unknown) => {
    assert.ok(error instanceof InvalidInputError);
    assert.equal(error.field, "after");
    return true;
  });
});

test("webhooks: create (secret once), list, delete, with the admin scope", async () => {
  const tenant = newTenant();
  const { hub } = await hubInTenant(tenant);
  const { hub: member } = await hubInTenant(tenant, ["read", "write"]);
  await assert.rejects(member.webhooks(), ScopeDeniedError);
  await assert.rejects(
    member.createWebhook({ url: "https://hooks.example.com/memoryhub" }),
    ScopeDeniedError,
  );
  await assert.rejects(member.deleteWebhook("whk_anything"), ScopeDeniedError);

  // The SSRF guard: https only, and never a loopback, private or link-local address.
  for (const url of ["http://hooks.example.com/memoryhub", "https://127.0.0.1/memoryhub"]) {
    await assert.rejects(hub.createWebhook({ url }), (error: unknown) => {
      assert.ok(error instanceof InvalidInputError, url);
      assert.equal(error.field, "url");
      return true;
    });
  }
  assert.deepEqual(await hub.webhooks(), []);

  await withServerSettings({ webhook_allow_insecure: true }, async () => {
    await assert.rejects(
      hub.createWebhook({
        url: "http://127.0.0.1:9/hook",
        events: ["memory.exploded" as EventType],
      }),
      (error: unknown) => error instanceof InvalidInputError && error.field === "events",
    );
    const created = await hub.createWebhook({
      url: "http://127.0.0.1:9/hook",
      events: ["memory.created", "memory.forgotten"],
      description: "cache invalidation",
    });
    assert.equal(created.ok, true);
    assert.ok(created.secret.length >= 32);
    const webhook = created.webhook;
    assert.deepEqual(
      [
        webhook.url,
        webhook.events,
        webhook.description,
        webhook.enabled,
        webhook.failing_since,
        webhook.disabled_at,
      ],
      [
        "http://127.0.0.1:9/hook",
        ["memory.created", "memory.forgotten"],
        "cache invalidation",
        true,
        null,
        null,
      ],
    );
    const everything = await hub.createWebhook({ url: "http://127.0.0.1:9/all" });
    assert.deepEqual(everything.webhook.events, []); // every type
    assert.notEqual(everything.secret, created.secret);

    const listed = await hub.webhooks();
    assert.deepEqual(
      listed.map((hook) => hook.id).sort(),
      [webhook.id, everything.webhook.id].sort(),
    );
    assert.deepEqual(
      listed.find((hook) => hook.id === webhook.id),
      webhook,
    );
    assert.ok(listed.every((hook) => !("secret" in hook)));

    // Another tenant's webhook is a 404, exactly like a missing one.
    const { hub: stranger } = await hubInTenant(newTenant());
    await assert.rejects(stranger.deleteWebhook(webhook.id), NotFoundError);
    assert.deepEqual(await stranger.webhooks(), []);

    assert.deepEqual(await hub.deleteWebhook(webhook.id), { ok: true, deleted: true });
    await assert.rejects(hub.deleteWebhook(webhook.id), NotFoundError);
    assert.deepEqual(
      (await hub.webhooks()).map((hook) => hook.id),
      [everything.webhook.id],
    );
    await hub.deleteWebhook(everything.webhook.id);
  });
});
