/** `verifyReceipt`: the shared vectors of tests/data/receipts/ (the Python client
 * checks the same file), and receipts a real guardd hands out, every one of
 * whose bytes matters. */

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";

import { type AdminClient, type Decision, ReceiptError, verifyReceipt } from "../src/index.js";
import { formatG, hasDuplicateKey } from "../src/receipt.js";
import { DATA, Guardd, newAgent } from "./support/guardd.js";

interface Vector {
  readonly name: string;
  readonly receipt: unknown;
  readonly public_key: string;
  readonly agent_id: string;
  readonly tool: string;
  readonly input: unknown;
  readonly max_age_secs: number;
  readonly now: number;
  readonly action_id?: string;
  readonly reason?: string;
}

const VECTORS = (JSON.parse(readFileSync(join(DATA, "receipts", "vectors.json"), "utf8")) as { vectors: Vector[] }).vectors;

function answer(vector: Vector): { action_id: string } | { reason: string } {
  try {
    return {
      action_id: verifyReceipt(vector.receipt, vector.public_key, {
        agentId: vector.agent_id,
        tool: vector.tool,
        input: vector.input,
        maxAgeSecs: vector.max_age_secs,
        now: new Date(vector.now * 1000),
      }),
    };
  } catch (error) {
    if (error instanceof ReceiptError) return { reason: error.reason };
    throw error;
  }
}

describe("the shared receipt vectors", () => {
  test("hold accepted and refused receipts", () => {
    assert.ok(VECTORS.filter((v) => v.action_id).length >= 5);
    assert.ok(VECTORS.filter((v) => v.reason).length >= 40);
  });
  for (const vector of VECTORS) {
    test(vector.name, () => {
      const expected = vector.action_id === undefined ? { reason: vector.reason } : { action_id: vector.action_id };
      assert.deepEqual(answer(vector), expected);
    });
  }
});

describe("the words of a refusal", () => {
  test("a maximum age is written as Python's format(x, 'g') writes it", () => {
    const cases: [number, string][] = [
      [60, "60"],
      [0.5, "0.5"],
      [100000, "100000"],
      [1e6, "1e+06"],
      [123456789, "1.23457e+08"],
      [1e-5, "1e-05"],
      [0.0001, "0.0001"],
      [2.5e-7, "2.5e-07"],
      [999999.5, "1e+06"],
      [0, "0"],
    ];
    assert.deepEqual(
      cases.map(([value]) => formatG(value)),
      cases.map(([, text]) => text),
    );
  });

  test("two equal keys are found wherever they are, escapes read", () => {
    assert.equal(hasDuplicateKey('{"a":1,"b":{"a":2}}'), false);
    assert.equal(hasDuplicateKey('[{"a":1},{"a":1}]'), false);
    assert.equal(hasDuplicateKey('{"a":1,"b":[{"c":"\\"a\\":","c":2}]}'), true);
    assert.equal(hasDuplicateKey('{"a" : 1, "\\u0061": 2}'), true);
    assert.equal(hasDuplicateKey('{"x":"{\\"a\\":1,\\"a\\":2}"}'), false);
  });
});

describe("receipts from a real guardd", () => {
  let guardd: Guardd;
  let admin: AdminClient;
  let publicKey: string;
  const INPUT = { to: "ops@example.com", amount: 12.5, tags: ["é", "😀"], n: 3 };

  before(async () => {
    guardd = await Guardd.start();
    admin = guardd.admin();
    publicKey = await admin.publicKey();
  });
  after(() => guardd.kill());

  async function allowed(): Promise<{ agentId: string; decision: Decision }> {
    const created = await newAgent(guardd);
    const decision = await guardd.connect(created).requestAction("search", INPUT);
    assert.equal(decision.decision, "allowed");
    return { agentId: created.agentId, decision };
  }

  test("a good receipt is accepted and names its action, however the input is written", async () => {
    const { agentId, decision } = await allowed();
    const check = (input: unknown) => verifyReceipt(decision.receipt, publicKey, { agentId, tool: "search", input, maxAgeSecs: 300 });
    assert.equal(check(INPUT), decision.actionId);
    assert.equal(check({ n: 3.0, tags: ["é", "😀"], amount: 12.5, to: "ops@example.com", cc: undefined }), "act-1");
  });

  test("the receipt is the two lines of the log", async () => {
    const { agentId, decision } = await allowed();
    const log = readFileSync(join(guardd.dataDir, "agents", `${agentId}.jsonl`), "utf8");
    assert.deepEqual(decision.receipt, log.split("\n").slice(2, 4));
  });

  test("an approved action's receipt pairs its original request, and the action view carries it", async () => {
    const created = await newAgent(guardd);
    const client = guardd.connect(created);
    const held = await client.requestAction("send_email", INPUT);
    assert.deepEqual([held.decision, held.receipt], ["pending_approval", null]);
    await client.requestAction("search", {}); // a record between the request and the approval
    const approved = await admin.approve(created.agentId, held.actionId, { approver: "alice" });
    assert.ok(approved.receipt);
    assert.equal((JSON.parse(approved.receipt[0]) as { seq: number }).seq, 2);
    const got = verifyReceipt(approved.receipt, publicKey, { agentId: created.agentId, tool: "send_email", input: INPUT, maxAgeSecs: 60 });
    assert.equal(got, held.actionId);
    assert.deepEqual((await client.getAction(held.actionId)).receipt, approved.receipt);
  });

  test("denied and pending decisions carry no receipt", async () => {
    const client = guardd.connect(await newAgent(guardd));
    assert.equal((await client.requestAction("send_email", {})).receipt, null);
    assert.equal((await client.requestAction("unknown", {})).receipt, null);
    assert.equal((await client.getAction("act-2")).receipt, null);
  });

  test("any single-byte change to either line is refused", async () => {
    const { agentId, decision } = await allowed();
    const lines = decision.receipt as readonly [string, string];
    let refusals = 0;
    for (const which of [0, 1]) {
      const line = lines[which] as string;
      for (let at = 0; at < line.length; at++) {
        // Another character in its place: a letter for a letter or digit, else a digit.
        const old = line[at] as string;
        const replacement = /[0-9a-z]/i.test(old) ? (old === "a" ? "b" : "a") : old === "1" ? "2" : "1";
        const changed = [...lines];
        changed[which] = line.slice(0, at) + replacement + line.slice(at + 1);
        assert.throws(
          () => verifyReceipt(changed, publicKey, { agentId, tool: "search", input: INPUT, maxAgeSecs: 300 }),
          ReceiptError,
          `byte ${at} of line ${which + 1} changed to ${replacement} was not refused`,
        );
        refusals += 1;
      }
    }
    assert.equal(refusals, lines[0].length + lines[1].length);
  });

  test("an input that is not JSON cannot be checked", async () => {
    const { agentId, decision } = await allowed();
    for (const input of [{ n: Number.NaN }, { n: 10n }, undefined, { s: "\ud800" }]) {
      assert.throws(
        () => verifyReceipt(decision.receipt, publicKey, { agentId, tool: "search", input, maxAgeSecs: 300 }),
        (error: unknown) => error instanceof ReceiptError && error.reason.startsWith("input cannot be written as canonical JSON: "),
      );
    }
  });

  test("a malformed key or maximum age is the caller's RangeError", async () => {
    const { agentId, decision } = await allowed();
    const options = { agentId, tool: "search", input: INPUT, maxAgeSecs: 300 };
    assert.throws(() => verifyReceipt(decision.receipt, publicKey.toUpperCase(), options), {
      name: "RangeError",
      message: "publicKey must be 64 lowercase hex characters (GET /v1/public-key)",
    });
    assert.throws(() => verifyReceipt(decision.receipt, publicKey, { ...options, maxAgeSecs: -1 }), {
      name: "RangeError",
      message: "maxAgeSecs must be a number >= 0, not -1",
    });
  });
});
