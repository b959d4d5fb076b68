/** Where the clients find the address and the tokens, and what they say when they cannot. */

import assert from "node:assert/strict";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, beforeEach, describe, test } from "node:test";

import { AdminClient, GuardClient, GuardSetupError, Unauthorized } from "../src/index.js";
import { Guardd } from "./support/guardd.js";

const AGENT_TOKEN = "agt_mail-bot.c2VjcmV0LW1hYw";

let cwd: string;
const home = process.cwd();
const saved = { ...process.env };

/** An empty working directory, and no GUARD_* variable in the environment. */
beforeEach(() => {
  cwd = mkdtempSync(join(tmpdir(), "guard-config-"));
  for (const name of Object.keys(process.env)) if (name.startsWith("GUARD_")) delete process.env[name];
  process.chdir(cwd);
});
afterEach(() => {
  process.chdir(home);
  for (const name of Object.keys(process.env)) if (!(name in saved)) delete process.env[name];
  Object.assign(process.env, saved);
  rmSync(cwd, { recursive: true, force: true });
});

function writeTokenFile(dataDir: string, token: string): void {
  mkdirSync(join(dataDir, "keys"), { recursive: true });
  writeFileSync(join(dataDir, "keys", "admin.token"), `${token}\n`);
}

describe("the admin token", () => {
  test("from the environment wins over .env and the token file", () => {
    process.env.GUARD_ADMIN_TOKEN = "from-env";
    writeFileSync(join(cwd, ".env"), "GUARD_ADMIN_TOKEN=from-dotenv\n");
    writeTokenFile(join(cwd, "guard-data"), "from-file");
    assert.equal(new AdminClient().tokenSource, "environment variable GUARD_ADMIN_TOKEN");
  });

  test("from .env wins over the token file", () => {
    writeFileSync(join(cwd, ".env"), "# operator settings\nGUARD_ADMIN_TOKEN='from-dotenv'\n");
    writeTokenFile(join(cwd, "guard-data"), "from-file");
    assert.equal(new AdminClient().tokenSource, `GUARD_ADMIN_TOKEN in ${join(cwd, ".env")}`);
  });

  test("from the token file in the default data directory, or GUARD_DATA_DIR's", () => {
    writeTokenFile(join(cwd, "guard-data"), "from-file");
    assert.equal(new AdminClient().tokenSource, join(cwd, "guard-data", "keys", "admin.token"));
    writeTokenFile(join(cwd, "custom"), "from-custom");
    process.env.GUARD_DATA_DIR = "custom";
    assert.equal(new AdminClient().tokenSource, join(cwd, "custom", "keys", "admin.token"));
  });

  test("empty values count as unset", () => {
    process.env.GUARD_ADMIN_TOKEN = "";
    writeFileSync(join(cwd, ".env"), "GUARD_ADMIN_TOKEN=\n");
    writeTokenFile(join(cwd, "guard-data"), "from-file");
    assert.equal(new AdminClient().tokenSource, join(cwd, "guard-data", "keys", "admin.token"));
  });

  test("missing, every place looked at is listed", () => {
    const expected =
      "no admin token found. Looked at:\n" +
      "  - the token option: not given\n" +
      "  - environment variable GUARD_ADMIN_TOKEN: not set\n" +
      `  - ${join(cwd, ".env")}: no such file\n` +
      `  - ${join(cwd, "guard-data", "keys", "admin.token")} (data directory from the default ./guard-data): no such file\n` +
      "Set GUARD_ADMIN_TOKEN, put it in .env, or set GUARD_DATA_DIR to the service's data directory.";
    assert.throws(
      () => new AdminClient(),
      (error: unknown) => {
        assert.ok(error instanceof GuardSetupError);
        assert.deepEqual([error.message, error.code, error.lookedAt.length], [expected, "setup", 4]);
        return true;
      },
    );
  });

  test("missing, what each place held is said", () => {
    process.env.GUARD_ADMIN_TOKEN = "  ";
    writeFileSync(join(cwd, ".env"), "GUARD_DATA_DIR=custom\n");
    writeTokenFile(join(cwd, "custom"), "");
    assert.throws(
      () => new AdminClient(),
      (error: unknown) => {
        assert.ok(error instanceof GuardSetupError);
        assert.deepEqual(error.lookedAt, [
          "the token option: not given",
          "environment variable GUARD_ADMIN_TOKEN: empty",
          `${join(cwd, ".env")}: no GUARD_ADMIN_TOKEN`,
          `${join(cwd, "custom", "keys", "admin.token")} (data directory from GUARD_DATA_DIR in ${join(cwd, ".env")}): empty`,
        ]);
        return true;
      },
    );
  });
});

describe("the address", () => {
  const cases: [string, string | null, string | null, string | undefined, string][] = [
    ["the default", null, null, undefined, "http://127.0.0.1:9200"],
    [".env", null, "http://10.0.0.2:9300/", undefined, "http://10.0.0.2:9300"],
    ["the environment over .env", "http://env:1", "http://dotenv:2", undefined, "http://env:1"],
    ["the option over all", "http://env:1", "http://dotenv:2", "https://arg:3/", "https://arg:3"],
  ];
  for (const [name, env, dotenv, option, expected] of cases) {
    test(`comes from ${name}`, () => {
      if (env) process.env.GUARD_URL = env;
      if (dotenv) writeFileSync(join(cwd, ".env"), `GUARD_URL=${dotenv}\n`);
      assert.equal(new AdminClient({ token: "t", ...(option ? { baseUrl: option } : {}) }).baseUrl, expected);
    });
  }

  test("that is not http is a setup error", () => {
    process.env.GUARD_URL = "127.0.0.1:9200";
    assert.throws(() => new AdminClient({ token: "t" }), {
      name: "GuardSetupError",
      message: 'the service address from environment variable GUARD_URL is not an http:// or https:// URL: "127.0.0.1:9200"',
    });
  });
});

describe("the agent token", () => {
  test("from the environment wins over .env and gives the agent ID", () => {
    process.env.GUARD_AGENT_TOKEN = AGENT_TOKEN;
    writeFileSync(join(cwd, ".env"), "GUARD_AGENT_TOKEN=agt_other.bWFj\n");
    const client = new GuardClient();
    assert.deepEqual([client.agentId, client.tokenSource], ["mail-bot", "environment variable GUARD_AGENT_TOKEN"]);
  });

  test("from .env", () => {
    writeFileSync(join(cwd, ".env"), `GUARD_AGENT_TOKEN=${AGENT_TOKEN}\n`);
    assert.equal(new GuardClient().agentId, "mail-bot");
  });

  test("the token and agentId options win", () => {
    process.env.GUARD_AGENT_TOKEN = "agt_other.bWFj";
    const client = new GuardClient({ token: AGENT_TOKEN, agentId: "explicit" });
    assert.deepEqual([client.agentId, client.tokenSource], ["explicit", "the token option"]);
  });

  test("missing, every place looked at is listed", () => {
    writeFileSync(join(cwd, ".env"), "GUARD_URL=http://127.0.0.1:9300\n");
    assert.throws(() => new GuardClient(), {
      name: "GuardSetupError",
      message:
        "no agent token found. Looked at:\n" +
        "  - the token option: not given\n" +
        "  - environment variable GUARD_AGENT_TOKEN: not set\n" +
        `  - ${join(cwd, ".env")}: no GUARD_AGENT_TOKEN\n` +
        "Pass the token returned when the agent was created, or set GUARD_AGENT_TOKEN.",
    });
  });

  test("one without an agent ID needs the agentId option", () => {
    assert.throws(() => new GuardClient({ token: "opaque-token" }), {
      name: "GuardSetupError",
      message: "no agent ID: the agent token from the token option is not of the form agt_<agent_id>.<mac>, and no agentId option was given",
    });
    assert.equal(new GuardClient({ token: "opaque-token", agentId: "bot" }).agentId, "bot");
  });
});

describe("against a real guardd", () => {
  test("with nothing configured but GUARD_URL and GUARD_DATA_DIR, the token found first is the one sent", async () => {
    const guardd = await Guardd.start();
    try {
      process.env.GUARD_URL = guardd.url;
      process.env.GUARD_DATA_DIR = guardd.dataDir;
      const fromFile = new AdminClient();
      assert.equal(fromFile.tokenSource, join(guardd.dataDir, "keys", "admin.token"));
      assert.deepEqual(await fromFile.listAgents(), []);
      writeFileSync(join(cwd, ".env"), "GUARD_ADMIN_TOKEN=wrong\n");
      await assert.rejects(new AdminClient().listAgents(), Unauthorized);
      const created = await fromFile.createAgent("env-bot", { budget: 1, scar_limit: 1, tools: {} });
      process.env.GUARD_AGENT_TOKEN = created.token;
      assert.equal((await new GuardClient().status()).agentId, "env-bot");
    } finally {
      guardd.kill();
    }
  });
});
