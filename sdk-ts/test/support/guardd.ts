/**
 * A real guardd for the tests: started on a free loopback port with a data
 * directory of its own, ready once `/readyz` answers, killed by PID after the
 * test file. guardd is the project's own, from the repository's `.venv`
 * (`make .venv/.installed-dev`), or the program named by `GUARDD`.
 */

import { type ChildProcess, spawn } from "node:child_process";
import { mkdtempSync, openSync, readFileSync, rmSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { fileURLToPath } from "node:url";

import { AdminClient, type CreatedAgent, GuardClient, type PolicyBody, Retry } from "../../src/index.js";

/** The repository's root: tests run from build/test/support/ under sdk-ts/. */
export const REPO = fileURLToPath(new URL("../../../../", import.meta.url));
export const SDK_DIR = join(REPO, "sdk-ts");
export const DATA = join(REPO, "tests", "data");

/** Fast retries: the tests exercise them, nobody needs to wait. */
export const FAST_RETRY = new Retry({ attempts: 4, baseDelay: 0.01, maxDelay: 0.05 });

export async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const address = server.address();
  await new Promise((resolve) => server.close(resolve));
  if (address === null || typeof address === "string") throw new Error("no port");
  return address.port;
}

export class Guardd {
  readonly dir: string;
  readonly dataDir: string;
  readonly port: number;
  readonly #process: ChildProcess;

  private constructor(dir: string, port: number, child: ChildProcess) {
    this.dir = dir;
    this.dataDir = join(dir, "guard-data");
    this.port = port;
    this.#process = child;
  }

  /** guardd with the environment less its GUARD_* and OTEL_* variables, plus `extraEnv`. */
  static async start(extraEnv: Readonly<Record<string, string>> = {}): Promise<Guardd> {
    const dir = mkdtempSync(join(tmpdir(), "guardd-ts-"));
    const port = await freePort();
    const program = process.env.GUARDD ?? join(REPO, ".venv", "bin", "guardd");
    const inherited = Object.entries(process.env).filter(([key]) => !key.startsWith("GUARD_") && !key.startsWith("OTEL_"));
    const env = { ...Object.fromEntries(inherited), ...extraEnv };
    const output = openSync(join(dir, "guardd.out"), "a");
    const child = spawn(program, ["--host", "127.0.0.1", "--port", String(port), "--data-dir", join(dir, "guard-data")], {
      env,
      stdio: ["ignore", output, output],
    });
    const guardd = new Guardd(dir, port, child);
    const exited = new Promise<number | null>((resolve) => child.once("exit", resolve));
    child.once("error", () => undefined); // a program that cannot start: reported below
    for (let tries = 0; tries < 400; tries++) {
      if (child.exitCode !== null || child.pid === undefined) {
        await exited.catch(() => null);
        throw new Error(`guardd (${program}) exited: ${guardd.output()}`);
      }
      try {
        if ((await fetch(`${guardd.url}/readyz`)).status === 200) return guardd;
      } catch {
        // not listening yet
      }
      await sleep(50);
    }
    guardd.kill();
    throw new Error(`guardd did not become ready within 20 s: ${guardd.output()}`);
  }

  get url(): string {
    return `http://127.0.0.1:${this.port}`;
  }

  get adminToken(): string {
    return readFileSync(join(this.dataDir, "keys", "admin.token"), "utf8").trim();
  }

  get publicKey(): string {
    return readFileSync(join(this.dataDir, "keys", "audit.pub"), "utf8").trim();
  }

  output(): string {
    try {
      return readFileSync(join(this.dir, "guardd.out"), "utf8");
    } catch {
      return "";
    }
  }

  /** SIGKILL by PID, then the temporary directory goes. */
  kill(): void {
    if (this.#process.exitCode === null && this.#process.pid !== undefined) this.#process.kill("SIGKILL");
    rmSync(this.dir, { recursive: true, force: true });
  }

  admin(): AdminClient {
    return new AdminClient({ token: this.adminToken, baseUrl: this.url, retry: FAST_RETRY });
  }

  connect(created: CreatedAgent, baseUrl = this.url): GuardClient {
    return new GuardClient({ token: created.token, baseUrl, retry: FAST_RETRY });
  }
}

let agentNumber = 0;

/** A policy with a free `search`, a `send_email` that needs approval, no default. */
export function policy(overrides: Record<string, unknown> = {}): PolicyBody {
  return {
    budget: 100,
    scar_limit: 10,
    tools: { search: { cost: 1 }, send_email: { cost: 5, requires_approval: true } },
    ...overrides,
  };
}

/** A new agent on `guardd` with `policy(overrides)`, under an ID of its own. */
export function newAgent(guardd: Guardd, overrides: Record<string, unknown> = {}): Promise<CreatedAgent> {
  agentNumber += 1;
  return guardd.admin().createAgent(`agent-${process.pid}-${agentNumber}`, policy(overrides));
}

/** Polls `check` until it gives a value (bounded: 400 tries, 25 ms apart). */
export async function eventually<T>(check: () => Promise<T | undefined | null | false>): Promise<T> {
  for (let tries = 0; tries < 400; tries++) {
    const value = await check();
    if (value) return value;
    await sleep(25);
  }
  throw new Error("the condition never held");
}
