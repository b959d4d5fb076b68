/**
 * Where the clients find the service's address and their tokens; the first
 * found wins, as in the Python client:
 *
 * - address: the `baseUrl` option, `GUARD_URL` in the environment, then in
 *   `./.env`, else `http://127.0.0.1:9200`;
 * - admin token: the `token` option, `GUARD_ADMIN_TOKEN` in the environment,
 *   then in `./.env`, then the file `keys/admin.token` of the data directory
 *   (`GUARD_DATA_DIR` from the environment, then `./.env`, else `./guard-data`);
 * - agent token: the `token` option, `GUARD_AGENT_TOKEN` in the environment,
 *   then in `./.env`.
 *
 * `.env` is read with Node's own `util.parseEnv`: `process.env` is never
 * changed. Empty values count as unset.
 */

import { readFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { parseEnv } from "node:util";

import { GuardSetupError } from "./errors.js";

export const DEFAULT_URL = "http://127.0.0.1:9200";
const DEFAULT_DATA_DIR = "guard-data";

/** A setting's value and where it came from, e.g. `environment variable GUARD_URL`. */
export interface Found {
  readonly value: string;
  readonly source: string;
}

export class Discovery {
  readonly environ: Readonly<Record<string, string | undefined>>;
  readonly cwd: string;
  #dotenv: Record<string, string | undefined> | null | undefined;

  constructor(environ: Readonly<Record<string, string | undefined>> = process.env, cwd: string = process.cwd()) {
    this.environ = environ;
    this.cwd = cwd;
  }

  get dotenvPath(): string {
    return join(this.cwd, ".env");
  }

  /** The `.env` file's values, or null when there is no such file. */
  get dotenv(): Record<string, string | undefined> | null {
    if (this.#dotenv === undefined) {
      let text: string | null;
      try {
        text = readFileSync(this.dotenvPath, "utf8");
      } catch {
        text = null;
      }
      this.#dotenv = text === null ? null : (parseEnv(text) as Record<string, string | undefined>);
    }
    return this.#dotenv;
  }

  #variable(name: string, looked: string[]): Found | null {
    let value = (this.environ[name] ?? "").trim();
    if (value) return { value, source: `environment variable ${name}` };
    looked.push(`environment variable ${name}: ${name in this.environ ? "empty" : "not set"}`);
    const dotenv = this.dotenv;
    if (dotenv === null) {
      looked.push(`${this.dotenvPath}: no such file`);
      return null;
    }
    value = (dotenv[name] ?? "").trim();
    if (value) return { value, source: `${name} in ${this.dotenvPath}` };
    looked.push(`${this.dotenvPath}: ${name in dotenv ? "empty" : "no"} ${name}`);
    return null;
  }

  baseUrl(explicit?: string): Found {
    const found: Found = explicit
      ? { value: explicit, source: "the baseUrl option" }
      : (this.#variable("GUARD_URL", []) ?? { value: DEFAULT_URL, source: "the default" });
    let url: URL | null;
    try {
      url = new URL(found.value);
    } catch {
      url = null;
    }
    if (url === null || !["http:", "https:"].includes(url.protocol) || !url.hostname) {
      throw new GuardSetupError(
        `the service address from ${found.source} is not an http:// or https:// URL: ${JSON.stringify(found.value)}`,
        [found.source],
      );
    }
    return { value: found.value.replace(/\/+$/, ""), source: found.source };
  }

  dataDir(): Found {
    const found = this.#variable("GUARD_DATA_DIR", []);
    if (found === null) return { value: join(this.cwd, DEFAULT_DATA_DIR), source: `the default ./${DEFAULT_DATA_DIR}` };
    return { value: resolve(this.cwd, found.value), source: found.source };
  }

  adminToken(explicit?: string): Found {
    if (explicit) return { value: explicit.trim(), source: "the token option" };
    const looked = ["the token option: not given"];
    const found = this.#variable("GUARD_ADMIN_TOKEN", looked);
    if (found) return found;
    const dataDir = this.dataDir();
    const path = join(dataDir.value, "keys", "admin.token");
    const where = `${path} (data directory from ${dataDir.source})`;
    try {
      const token = readFileSync(path, "utf8").trim();
      if (token) return { value: token, source: path };
      looked.push(`${where}: empty`);
    } catch (error) {
      const code = (error as { code?: string }).code;
      looked.push(`${where}: ${code === "ENOENT" ? "no such file" : `unreadable (${code ?? String(error)})`}`);
    }
    throw new GuardSetupError(
      missing("admin token", looked, "Set GUARD_ADMIN_TOKEN, put it in .env, or set GUARD_DATA_DIR to the service's data directory."),
      looked,
    );
  }

  agentToken(explicit?: string): Found {
    if (explicit) return { value: explicit.trim(), source: "the token option" };
    const looked = ["the token option: not given"];
    const found = this.#variable("GUARD_AGENT_TOKEN", looked);
    if (found) return found;
    throw new GuardSetupError(
      missing("agent token", looked, "Pass the token returned when the agent was created, or set GUARD_AGENT_TOKEN."),
      looked,
    );
  }
}

function missing(what: string, looked: readonly string[], hint: string): string {
  return `no ${what} found. Looked at:${looked.map((place) => `\n  - ${place}`).join("")}\n${hint}`;
}
