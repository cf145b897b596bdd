/**
 * The documented integrations, read from the guide as a user would copy them: fenced blocks
 * marked `<!-- tested: NAME -->`, and what an MCP client makes of each documented
 * configuration (the URL it calls and the headers it sends).
 */

import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { dirname, resolve } from "node:path";

import { PACKAGE, REPO } from "./support.js";

/** The documents whose blocks the suite runs (the one place to change when they move): the
 * README's first TypeScript program and MCP setup, the integrations guide's other recipes. */
export const GUIDES = [resolve(REPO, "README.md"), resolve(REPO, "docs", "integrations.md")];

/** Where the documented configurations point: the server `make run` serves. */
export const DOCUMENTED_ORIGIN = "http://127.0.0.1:8000";
/** The documented stand-in for a key in the JSON configurations. */
export const KEY_PLACEHOLDER = "mh_…your key…";

/** The fenced block after `<!-- tested: NAME -->`, with its info string: the marker appears
 * exactly once in all the documents together. */
export function guideBlock(name: string): { lang: string; code: string } {
  const marker = `<!-- tested: ${name} -->`;
  const found = GUIDES.flatMap((path) => {
    const text = readFileSync(path, "utf8");
    const hits = text.split(marker).length - 1;
    return Array.from({ length: hits }, () => ({ path, text }));
  });
  assert.equal(found.length, 1, `${marker} appears ${found.length} times in ${GUIDES.join(", ")}`);
  const { path, text } = found[0]!;
  const match = /^\s*```([\w-]*)\n([\s\S]*?)\n```/.exec(
    text.slice(text.indexOf(marker) + marker.length),
  );
  assert.ok(match, `no fenced block right after ${marker} in ${path}`);
  return { lang: match[1] ?? "", code: match[2] ?? "" };
}

/** An MCP connection as a client would make it from a documented configuration. */
export interface McpEndpoint {
  url: string;
  headers: Record<string, string>;
}

/** The words of a POSIX shell command line: quotes, backslashes, `$VAR` and `${VAR}` from
 * `env` (an unset variable is an error here, as a test of the documentation). */
export function shellWords(line: string, env: Record<string, string>): string[] {
  const words: string[] = [];
  let word: string | null = null;
  let i = 0;
  const expand = (): string => {
    const braced = /^\$\{([A-Za-z_][A-Za-z0-9_]*)\}/.exec(line.slice(i));
    const bare = /^\$([A-Za-z_][A-Za-z0-9_]*)/.exec(line.slice(i));
    const found = braced ?? bare;
    if (!found) {
      i += 1;
      return "$";
    }
    const name = found[1]!;
    assert.ok(name in env, `the command uses $${name}, which the guide does not set`);
    i += found[0].length;
    return env[name]!;
  };
  while (i < line.length) {
    const c = line[i]!;
    if (/\s/.test(c)) {
      if (word !== null) words.push(word);
      word = null;
      i += 1;
    } else if (c === "#" && word === null) {
      break; // a comment
    } else if (c === "'") {
      const end = line.indexOf("'", i + 1);
      assert.ok(end > i, "unclosed ' in the command");
      word = (word ?? "") + line.slice(i + 1, end);
      i = end + 1;
    } else if (c === '"') {
      word ??= "";
      i += 1;
      while (i < line.length && line[i] !== '"') {
        if (line[i] === "\\" && /["\\$`]/.test(line[i + 1] ?? "")) {
          word += line[i + 1];
          i += 2;
        } else if (line[i] === "$") {
          word += expand();
        } else {
          word += line[i];
          i += 1;
        }
      }
      assert.ok(i < line.length, 'unclosed " in the command');
      i += 1;
    } else if (c === "\\") {
      word = (word ?? "") + (line[i + 1] ?? "");
      i += 2;
    } else if (c === "$") {
      word = (word ?? "") + expand();
    } else {
      word = (word ?? "") + c;
      i += 1;
    }
  }
  if (word !== null) words.push(word);
  return words;
}

/** `claude mcp add …` from a shell block: the variables its `export` lines set are taken
 * from `env` (what the user exported), the command's words are read as Claude Code reads
 * them. */
export function claudeCodeEndpoint(block: string, env: Record<string, string>): McpEndpoint {
  const lines = block.replace(/\\\n/g, " ").split("\n");
  const exported = lines
    .map((line) => /^export ([A-Za-z_][A-Za-z0-9_]*)=/.exec(line.trim())?.[1])
    .filter((name): name is string => name !== undefined);
  const known = Object.fromEntries(
    exported.filter((name) => name in env).map((name) => [name, env[name]!]),
  );
  const commands = lines.filter((line) => line.trim().startsWith("claude mcp add"));
  assert.equal(commands.length, 1, "the block has one `claude mcp add` command");
  const words = shellWords(commands[0]!, known).slice(3);
  const headers: Record<string, string> = {};
  const positional: string[] = [];
  let transport = "stdio";
  for (let i = 0; i < words.length; i++) {
    const word = words[i]!;
    const [flag, inline] =
      word.startsWith("--") && word.includes("=") ? word.split(/=(.*)/s) : [word, undefined];
    const value = () => inline ?? words[++i] ?? assert.fail(`${flag} without a value`);
    if (flag === "--transport" || flag === "-t") transport = value();
    else if (flag === "--scope" || flag === "-s") value();
    else if (flag === "--header" || flag === "-H") {
      const header = /^([^:]+):\s*(.*)$/.exec(value());
      assert.ok(header, "a header is `Name: value`");
      headers[header[1]!.trim()] = header[2]!;
    } else if (flag?.startsWith("-")) assert.fail(`an option the test does not know: ${flag}`);
    else positional.push(word);
  }
  assert.equal(transport, "http", "Claude Code reaches MemoryHub over streamable HTTP");
  assert.equal(positional.length, 2, "claude mcp add … <name> <url>");
  return { url: positional[1]!, headers };
}

/** A Claude Desktop server entry that runs `mcp-remote`: the URL it calls and the headers it
 * sends, by mcp-remote's rules (`--header Name:value`, `${VAR}` from the entry's `env`;
 * plain http only for localhost and 127.0.0.1 unless `--allow-http`). */
export function mcpRemoteEndpoint(server: {
  command: string;
  args: string[];
  env?: Record<string, string>;
}): McpEndpoint {
  assert.equal(server.command, "npx");
  const start = server.args.findIndex((arg) => /^mcp-remote(@.+)?$/.test(arg));
  assert.ok(start >= 0, "the entry runs mcp-remote");
  const args = server.args.slice(start + 1);
  const headers: Record<string, string> = {};
  let url: string | undefined;
  for (let i = 0; i < args.length; i++) {
    const arg = args[i]!;
    if (arg === "--header") {
      const header = /^([A-Za-z0-9_-]+):\s*(.*)$/.exec(args[++i] ?? "");
      assert.ok(header, "mcp-remote ignores a header that is not `Name:value`");
      headers[header[1]!] = header[2]!.replace(/\$\{([^}]+)\}/g, (_, name: string) => {
        const value = server.env?.[name];
        assert.ok(value !== undefined, `the header uses \${${name}}, which env does not set`);
        return value;
      });
    } else if (!url && /^https?:\/\//.test(arg)) {
      url = arg;
    }
  }
  assert.ok(url, "mcp-remote is given the server's URL");
  const parsed = new URL(url);
  const local = parsed.hostname === "localhost" || parsed.hostname === "127.0.0.1";
  assert.ok(
    parsed.protocol === "https:" || local || args.includes("--allow-http"),
    "mcp-remote refuses this http URL",
  );
  return { url, headers };
}

/** A documented endpoint moved to the live server: same path, the test server's origin. */
export function onLiveServer(endpoint: McpEndpoint, serverUrl: string): McpEndpoint {
  assert.ok(
    endpoint.url.startsWith(`${DOCUMENTED_ORIGIN}/`),
    `the documented URL ${endpoint.url} is not on ${DOCUMENTED_ORIGIN}`,
  );
  return { ...endpoint, url: serverUrl + endpoint.url.slice(DOCUMENTED_ORIGIN.length) };
}

/** The package's TypeScript compiler: guide programs are compiled in strict mode, as a user's
 * project would, against the declarations the package ships. */
const TSC = resolve(PACKAGE, "node_modules", "typescript", "bin", "tsc");

/** Compiles `file` (a .ts program, in a directory under an ESM package) next to itself and
 * returns the .js path. */
export function compileProgram(file: string): string {
  const compiled = spawnSync(
    process.execPath,
    [
      TSC,
      "--strict",
      "--target",
      "es2022",
      "--module",
      "nodenext",
      "--moduleResolution",
      "nodenext",
      "--skipLibCheck",
      "--types",
      "node",
      "--typeRoots",
      resolve(PACKAGE, "node_modules", "@types"),
      "--rootDir",
      dirname(file),
      "--outDir",
      dirname(file),
      file,
    ],
    { encoding: "utf8" },
  );
  assert.equal(compiled.status, 0, `tsc ${file}:\n${compiled.stdout}${compiled.stderr}`);
  return file.replace(/\.ts$/, ".js");
}

/** Runs a compiled program with Node and returns what it printed; it must exit 0. */
export function runProgram(
  file: string,
  options: { cwd: string; env: Record<string, string | undefined>; nodeArgs?: string[] },
): string {
  const ran = spawnSync(process.execPath, [...(options.nodeArgs ?? []), file], {
    cwd: options.cwd,
    env: options.env,
    encoding: "utf8",
    timeout: 120_000,
  });
  assert.equal(ran.status, 0, `node ${file} exited ${ran.status}:\n${ran.stdout}${ran.stderr}`);
  return ran.stdout;
}
