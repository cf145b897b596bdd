/**
 * The client is kept in line with the API by the schema, not by hand: `src/schema.ts` must be
 * what the generator makes of the live server's OpenAPI schema (a field the API adds and the
 * client lacks fails here), and every operation of the schema must be reached by a method.
 */

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { resolve } from "node:path";
import { test } from "node:test";

import { MemoryHub, VERSION, type FetchLike } from "@memoryhub/client";

import { SCHEMA_FILE, render, type OpenApi } from "../scripts/generate-schema.js";
import { PACKAGE, SERVER_URL, newAgentKey, withServerSettings } from "./support.js";

async function liveSchema(): Promise<OpenApi> {
  const response = await fetch(`${SERVER_URL}/api/schema/?format=json`);
  assert.equal(response.status, 200);
  return (await response.json()) as OpenApi;
}

function operationsOf(schema: OpenApi): Array<{ id: string; method: string; path: string }> {
  return Object.entries(schema.paths).flatMap(([path, item]) =>
    Object.entries(item)
      .filter(([method]) => ["get", "post", "put", "patch", "delete"].includes(method))
      .map(([method, operation]) => ({
        id: (operation as { operationId: string }).operationId,
        method: method.toUpperCase(),
        path,
      })),
  );
}

/** The lines that differ between two texts (a longest-common-subsequence diff), each with
 * the declaration it belongs to: `+` only in `expected`, `-` only in `actual`. */
function changedLines(actual: string, expected: string): string[] {
  const a = actual.split("\n");
  const b = expected.split("\n");
  const common: number[][] = Array.from({ length: a.length + 1 }, () =>
    new Array<number>(b.length + 1).fill(0),
  );
  for (let i = a.length - 1; i >= 0; i--) {
    for (let j = b.length - 1; j >= 0; j--) {
      common[i]![j] =
        a[i] === b[j]
          ? common[i + 1]![j + 1]! + 1
          : Math.max(common[i + 1]![j]!, common[i]![j + 1]!);
    }
  }
  const out: string[] = [];
  let declaration = "";
  const note = (sign: string, line: string) =>
    out.push(`${sign} ${line.trim()}${declaration ? `   (${declaration})` : ""}`);
  let i = 0;
  let j = 0;
  while (i < a.length || j < b.length) {
    const line = a[i] ?? b[j] ?? "";
    const head = /^export (?:interface|type|const) (\w+)/.exec(line);
    if (head) declaration = head[1]!;
    if (i < a.length && j < b.length && a[i] === b[j]) {
      i++;
      j++;
    } else if (j < b.length && (i >= a.length || common[i]![j + 1]! >= common[i + 1]![j]!)) {
      note("+", b[j++]!);
    } else {
      note("-", a[i++]!);
    }
  }
  return out;
}

test("src/schema.ts is the live API's OpenAPI schema, as generated", async () => {
  const changes = changedLines(readFileSync(SCHEMA_FILE, "utf8"), render(await liveSchema()));
  assert.deepEqual(
    changes,
    [],
    "src/schema.ts differs from the API's schema (+ the API has, - the client has): run " +
      "`npm run generate` in clients/typescript and give the client's methods what changed",
  );
});

test("a field the API adds, or an operation, changes the generated file", async () => {
  const schema = await liveSchema();
  const before = render(schema);
  const memory = schema.components?.schemas?.Memory as { properties: Record<string, unknown> };
  memory.properties.probe_field = { type: "string", nullable: true };
  const withField = render(schema);
  assert.deepEqual(changedLines(before, withField), ["+ probe_field?: string | null;   (Memory)"]);

  schema.paths["/api/v1/kinds"] = { get: { operationId: "kinds_list", responses: {} } };
  assert.match(render(schema), /kinds_list: \{ method: "GET", path: "\/api\/v1\/kinds" \}/);
});

test("every operation of the API is reached by a method of the client", async () => {
  const seen: Array<{ method: string; path: string }> = [];
  const recording: FetchLike = (input, init) => {
    seen.push({ method: init.method ?? "GET", path: new URL(input).pathname });
    return fetch(input, init);
  };
  const { key } = await newAgentKey();
  const hub = new MemoryHub({ url: SERVER_URL, apiKey: key, fetch: recording });

  const stored = await hub.store({ text: "reach every operation", key: "reach" });
  await hub.get(stored.memory_id);
  await hub.recall("reach");
  await hub.list().toArray();
  await hub.keys();
  await hub.update(stored.memory_id, { importance: 0.7 });
  await hub.confirm(stored.memory_id);
  await hub.search("reach");
  await hub.hydrate();
  await hub.exportMarkdown();
  await hub.forget({ key: "reach" });
  const other = await hub.store({ text: "forget me by id" });
  await hub.forget({ memory_id: other.memory_id });
  await hub.addMessages("reach/1", [{ role: "user", content: "hi" }], { extract: "off" });
  await hub.getThread("reach/1");
  await hub.messages("reach/1").toArray();
  await hub.extract("reach/1");
  await hub.endThread("reach/1");
  await hub.eraseSubject("nobody");
  await hub.whoami();
  await hub.apiIndex();
  await hub.events().toArray();
  await hub.kinds();
  await hub.getKind("fact");
  await hub.putKind("Reach", { schema: { type: "object" } });
  await hub.deleteKind("Reach");
  await withServerSettings({ webhook_allow_insecure: true }, async () => {
    const created = await hub.createWebhook({ url: "http://127.0.0.1:9/reach" });
    await hub.webhooks();
    await hub.deleteWebhook(created.webhook.id);
  });

  const reached = (operation: { method: string; path: string }) => {
    const pattern = new RegExp(`^${operation.path.replace(/\{[^}]+\}/g, "[^/]+")}$`);
    return seen.some((call) => call.method === operation.method && pattern.test(call.path));
  };
  const missing = operationsOf(await liveSchema()).filter((operation) => !reached(operation));
  assert.deepEqual(missing, [], "operations of the API without a client method");
});

test("VERSION is package.json's", () => {
  const pkg = JSON.parse(readFileSync(resolve(PACKAGE, "package.json"), "utf8")) as {
    version: string;
  };
  assert.equal(VERSION, pkg.version);
});
