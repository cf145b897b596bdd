/**
 * The memory model through the client: the kind registry (`kinds`, `getKind`,
 * `putKind`, `deleteKind`, admin scope for writes), a schema violation as `InvalidInputError`
 * with its paths, a `single` kind's store answering `replaced`, user-scoped memories (`scope`,
 * search's `source: "user"`), hydrate's `archival` list and search's `context.lastConfirmedAt`.
 * Each test works in a tenant of its own: kinds are per tenant.
 */

import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { test } from "node:test";

import {
  ConflictError,
  InvalidInputError,
  MemoryHub,
  NotFoundError,
  ScopeDeniedError,
  type Kind,
  type StoreAction,
} from "@memoryhub/client";

import { SERVER_URL, newAgentKey } from "./support.js";

async function hubInNewTenant(scopes?: string[]): Promise<{ hub: MemoryHub; tenant: string }> {
  const tenant = `ts-${randomUUID().slice(0, 8)}`;
  const { key } = await newAgentKey({ tenant, ...(scopes ? { scopes } : {}) });
  return { hub: new MemoryHub({ url: SERVER_URL, apiKey: key }), tenant };
}

const INVOICE_SCHEMA = {
  type: "object",
  properties: { amount: { type: "number" }, currency: { type: "string", minLength: 3 } },
  required: ["amount"],
};

test("kinds, getKind, putKind and deleteKind", async () => {
  const { hub } = await hubInNewTenant();
  const names = (await hub.kinds()).map((kind) => kind.name);
  assert.deepEqual(names, ["AgentInstructions", "InteractionLog", "UserProfile", "fact"]);

  const profile = await hub.getKind("UserProfile");
  assert.deepEqual(
    [profile.name, profile.cardinality, profile.memory_type, profile.tool],
    ["UserProfile", "single", "semantic", "create_user_profile"],
  );
  await assert.rejects(hub.getKind("NoSuchKind"), NotFoundError);

  const invoice: Kind = await hub.putKind("Invoice", {
    cardinality: "multiple",
    memory_type: "episodic",
    description: "An invoice the customer received.",
    schema: INVOICE_SCHEMA,
  });
  assert.deepEqual(
    [
      invoice.name,
      invoice.cardinality,
      invoice.memory_type,
      invoice.tool,
      invoice.default_category,
    ],
    ["Invoice", "multiple", "episodic", "create_invoice", null],
  );
  assert.deepEqual(invoice.schema, INVOICE_SCHEMA);
  assert.ok(!Number.isNaN(Date.parse(invoice.created_at)));
  assert.deepEqual(await hub.getKind("Invoice"), invoice);

  // The whole definition each time: an omitted field takes its default again.
  const redefined = await hub.putKind("Invoice", {
    schema: INVOICE_SCHEMA,
    default_category: "archival",
  });
  assert.deepEqual(
    [redefined.memory_type, redefined.description, redefined.default_category],
    ["semantic", "", "archival"],
  );
  assert.equal(redefined.created_at, invoice.created_at);

  await assert.rejects(hub.putKind("Bad", { schema: { type: "string" } }), (error: unknown) => {
    assert.ok(error instanceof InvalidInputError);
    assert.equal(error.field, "schema");
    return true;
  });

  const stored = await hub.store({ text: "Invoice 7", kind: "Invoice", data: { amount: 10 } });
  await assert.rejects(hub.deleteKind("Invoice"), (error: unknown) => {
    assert.ok(error instanceof ConflictError);
    assert.deepEqual([error.status, error.details], [409, { count: 1 }]);
    return true;
  });
  // A schema the stored data no longer satisfies is refused, naming the memory.
  await assert.rejects(
    hub.putKind("Invoice", { schema: { ...INVOICE_SCHEMA, required: ["amount", "currency"] } }),
    (error: unknown) => {
      assert.ok(error instanceof ConflictError);
      assert.deepEqual(error.details.memory_ids, [stored.memory_id]);
      return true;
    },
  );
  await hub.forget({ memory_id: stored.memory_id });
  assert.deepEqual(await hub.deleteKind("Invoice"), { ok: true, deleted: true });
  assert.ok(!(await hub.kinds()).some((kind) => kind.name === "Invoice"));
  await assert.rejects(hub.deleteKind("Invoice"), NotFoundError);
});

test("a schema violation is InvalidInputError with details.errors paths", async () => {
  const { hub } = await hubInNewTenant();
  await hub.putKind("Invoice", { schema: INVOICE_SCHEMA });
  await assert.rejects(
    hub.store({ text: "Invoice 8", kind: "Invoice", data: { amount: "ten", currency: "E" } }),
    (error: unknown) => {
      assert.ok(error instanceof InvalidInputError);
      assert.deepEqual([error.status, error.code, error.field], [400, "INVALID_INPUT", "data"]);
      const errors = error.details.errors as Array<{ path: string; message: string }>;
      assert.deepEqual(
        errors.map((e) => e.path),
        ["/amount", "/currency"],
      );
      assert.ok(errors.every((e) => typeof e.message === "string" && e.message.length > 0));
      return true;
    },
  );
  await assert.rejects(
    hub.store({ text: "Invoice 9", kind: "Invoice", data: {} }),
    (error: unknown) => {
      assert.ok(error instanceof InvalidInputError);
      assert.deepEqual(error.details.errors, [
        { path: "/amount", message: "'amount' is a required property" },
      ]);
      return true;
    },
  );
});

test("reading kinds needs read, writing them admin", async () => {
  const { tenant } = await hubInNewTenant();
  const { key } = await newAgentKey({ tenant, scopes: ["read", "write"] });
  const hub = new MemoryHub({ url: SERVER_URL, apiKey: key });
  assert.equal((await hub.kinds()).length, 4);
  assert.equal((await hub.getKind("fact")).cardinality, "multiple");
  await assert.rejects(hub.putKind("Invoice", { schema: INVOICE_SCHEMA }), ScopeDeniedError);
  await assert.rejects(hub.deleteKind("UserProfile"), ScopeDeniedError);
  const writer = new MemoryHub({
    url: SERVER_URL,
    apiKey: (await newAgentKey({ tenant, scopes: ["write"] })).key,
  });
  await assert.rejects(writer.kinds(), ScopeDeniedError);
});

test("a single kind replaces its record; user scope; archival list; lastConfirmedAt", async () => {
  const { hub, tenant } = await hubInNewTenant();
  const actions: StoreAction[] = [];
  const first = await hub.store({ kind: "UserProfile", subject_id: "u-9", data: { name: "Ann" } });
  const second = await hub.store({
    kind: "UserProfile",
    subject_id: "u-9",
    data: { name: "Anna", city: "Porto" },
  });
  actions.push(first.action, second.action);
  assert.deepEqual(actions, ["created", "replaced"]);
  assert.deepEqual(
    [second.memory_id, second.version, second.message],
    [first.memory_id, 2, "Updated"],
  );
  assert.deepEqual(second.memory.data, { name: "Anna", city: "Porto" });
  const keyed = await hub.store({ text: "Likes tea", key: "drink", subject_id: "u-9" });
  const rekeyed = await hub.store({ text: "Likes green tea", key: "drink", subject_id: "u-9" });
  assert.deepEqual([keyed.action, rekeyed.action], ["created", "updated"]);

  // A user-scoped memory is the subject's across every agent of the tenant.
  const shared = await hub.store({
    text: "Is allergic to peanuts",
    scope: "user",
    subject_id: "u-9",
  });
  assert.deepEqual(
    [shared.memory.scope, shared.memory.agent, first.memory.scope],
    ["user", null, "agent"],
  );
  const { key } = await newAgentKey({ tenant });
  const other = new MemoryHub({ url: SERVER_URL, apiKey: key });
  const found = await other.search("peanuts allergic", { subject_id: "u-9", mode: "keyword" });
  assert.deepEqual(
    found.memories.map((hit) => [hit.id, hit.source]),
    [[shared.memory_id, "user"]],
  );
  assert.equal(found.memories[0]?.context.lastConfirmedAt, shared.memory.last_confirmed_at);
  assert.deepEqual((await other.search("peanuts allergic", { mode: "keyword" })).memories, []);

  await hub.store({ text: "Visited the Lisbon office in 2021.", category: "archival" });
  const hydrated = await hub.hydrate({
    archival_mode: "auto",
    query: "Lisbon office",
    budget_bytes: 1,
  });
  assert.deepEqual(hydrated.entries, []);
  assert.equal(hydrated.archival.length, 1);
  const match = hydrated.archival[0]!;
  assert.deepEqual(
    [match.category, match.text],
    ["archival", "Visited the Lisbon office in 2021."],
  );
  assert.ok(match.score > 0 && match.score <= 1);
  assert.deepEqual((await hub.hydrate({ budget_bytes: 1 })).archival, []); // tool_only by default
});
