/**
 * What the Node tests share: the live server they run against and its control server (both
 * given by tests/clients/test_typescript.py, which runs each test file), fresh agents and
 * keys, and clients whose waits between retries are recorded instead of slept.
 */

import { randomUUID } from "node:crypto";
import { dirname, resolve } from "node:path";
import { fileURLToPath } from "node:url";

import { MemoryHub, type ClientOptions } from "@memoryhub/client";

function required(name: string): string {
  const value = process.env[name];
  if (!value) {
    throw new Error(
      `${name} is not set: these tests run against a live server; run them with ` +
        "`pytest tests/clients/test_typescript.py` from the repository root",
    );
  }
  return value;
}

export const SERVER_URL = required("MEMORYHUB_URL");
export const KEY = required("MEMORYHUB_API_KEY");
const CONTROL = required("MEMORYHUB_TEST_CONTROL");

/** The package's directory and the repository's (compiled tests live in .test-build/test/). */
export const PACKAGE = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..");
export const REPO = resolve(PACKAGE, "..", "..");

/** A call to the control server (tests/support/harness_control.py). */
export async function control<T = Record<string, unknown>>(
  path: string,
  body?: Record<string, unknown>,
): Promise<T> {
  const response = await fetch(`${CONTROL}${path}`, {
    method: body === undefined ? "GET" : "POST",
    headers: { "Content-Type": "application/json" },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
  const answer = (await response.json()) as T & { error?: string };
  if (!response.ok) throw new Error(`control ${path}: ${answer.error ?? response.status}`);
  return answer;
}

export interface NewKey {
  key: string;
  agent: string;
  tenant: string;
}

/** A key of a new agent of its own (so each test sees only its own memories), in tenant `acme`
 * unless `tenant` names another (made if missing). */
export function newAgentKey(
  options: {
    scopes?: string[];
    policy?: Record<string, unknown>;
    subject_id?: string;
    agent?: string;
    tenant?: string;
  } = {},
): Promise<NewKey> {
  const agent = options.agent ?? `ts-${randomUUID().slice(0, 8)}`;
  return control<NewKey>("/key", { ...options, agent });
}

/** How many memories hold exactly this text (any status), read from the database. */
export async function countMemories(text: string): Promise<number> {
  return (await control<{ count: number }>("/count", { text })).count;
}

/** Runs `body` with server settings changed (`rate_limit_per_minute`, `embedder`, `outage`,
 * `webhook_allow_insecure`),
 * and sets them back after it. */
export async function withServerSettings<T>(
  settings: Record<string, unknown>,
  body: () => T | Promise<T>,
): Promise<T> {
  const previous = await control("/settings", settings);
  try {
    return await body();
  } finally {
    await control("/settings", previous);
  }
}

export interface Proxy {
  url: string;
  seen(): Promise<Array<[string, string, string | null]>>;
}

/** A flaky proxy in front of the live server (steps: "forward_then_drop", or
 * ["status", code, headers, body]). */
export async function flakyProxy(plan: unknown[]): Promise<Proxy> {
  const { id, url } = await control<{ id: number; url: string }>("/proxy", { plan });
  return {
    url,
    seen: async () =>
      (await control<{ seen: Array<[string, string, string | null]> }>(`/proxy/${id}`)).seen,
  };
}

/** A MemoryHub error envelope, as the server writes it. */
export function envelope(code: string, message: string): string {
  return JSON.stringify({ ok: false, error: { code, message, details: {} } });
}

/** A client on the live server (or `url`) whose waits are recorded in `sleeps` (ms). */
export function recordingHub(options: ClientOptions = {}): { hub: MemoryHub; sleeps: number[] } {
  const sleeps: number[] = [];
  const hub = new MemoryHub({
    url: SERVER_URL,
    apiKey: KEY,
    retry: { jitter: false },
    sleep: (ms) => {
      sleeps.push(ms);
      return Promise.resolve();
    },
    ...options,
  });
  return { hub, sleeps };
}

/** Built at run time, so no token-shaped literal sits in the repository. */
export function githubToken(): string {
  const letters = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";
  let token = "ghp_";
  for (let i = 0; i < 36; i++) token += letters[(i * 7 + 3) % letters.length];
  return token;
}
