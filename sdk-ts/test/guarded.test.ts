/** `guarded` on a real guardd: allow, fail, deny, approve, reject, time out, withdraw. */

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import {
  ActionDenied,
  type AdminClient,
  ApprovalTimeout,
  currentAction,
  Forbidden,
  GuardClient,
  GuardError,
  InvalidState,
  ToolInputError,
  verifyReceipt,
} from "../src/index.js";
import { eventually, Guardd, newAgent } from "./support/guardd.js";

let guardd: Guardd;
let admin: AdminClient;

before(async () => {
  guardd = await Guardd.start();
  admin = guardd.admin();
});
after(() => guardd.kill());

/** An operator: waits for the agent's first pending action and decides it. */
async function decideWhenPending(agentId: string, reject = false): Promise<void> {
  const [entry] = await eventually(async () => {
    const pending = await admin.listPending(agentId);
    return pending.length > 0 && pending;
  });
  const actionId = entry!.action.actionId;
  if (reject) await admin.reject(agentId, actionId, { approver: "alice", reason: "not today" });
  else await admin.approve(agentId, actionId, { approver: "alice", note: "looks fine" });
}

function never(): never {
  throw new Error("the tool ran");
}

describe("guarded", () => {
  test("an allowed tool runs once and reports success", async () => {
    const created = await newAgent(guardd);
    const client = guardd.connect(created);
    const calls: string[] = [];
    const search = client.guarded(async function search(args: { query: string; limit: number }) {
      calls.push(args.query);
      return [`${args.query} result`];
    });
    assert.equal(search.name, "search");
    assert.deepEqual(await search({ query: "guard rails", limit: 10 }), ["guard rails result"]);
    assert.deepEqual(calls, ["guard rails"]);
    const action = await client.getAction("act-1");
    assert.deepEqual(
      [action.tool, action.input, action.status, action.outcome],
      ["search", { query: "guard rails", limit: 10 }, "completed", "success"],
    );
    const status = await admin.agentStatus(created.agentId);
    assert.equal(status.spent, "1");
    assert.deepEqual(status.scars, []);
  });

  test("a tool's error reports failure and is thrown again, the very same object", async () => {
    const created = await newAgent(guardd);
    const client = guardd.connect(created);
    const boom = new RangeError("the search index is down");
    const search = client.guarded(
      () => {
        throw boom;
      },
      { tool: "search" },
    );
    await assert.rejects(search(), (error) => error === boom);
    const action = await client.getAction("act-1");
    assert.deepEqual([action.status, action.outcome], ["completed", "failure"]);
    const status = await admin.agentStatus(created.agentId);
    assert.deepEqual(
      status.scars.map((scar) => scar.severity),
      ["minor"],
    );
  });

  const denials: [string, Record<string, unknown>, string[], string, Record<string, unknown>][] = [
    ["tool_not_allowed", {}, [], "delete_db", { code: "tool_not_allowed", tool: "delete_db" }],
    [
      "tool_call_limit",
      { tools: { search: { cost: 1, max_calls: 1 } } },
      ["search"],
      "search",
      { code: "tool_call_limit", tool: "search", max_calls: 1 },
    ],
    [
      "rate_limited",
      { rate_limit: { max_actions: 1, window_secs: 60 } },
      ["search"],
      "search",
      { code: "rate_limited", max_actions: 1, window_secs: 60 },
    ],
    [
      "insufficient_budget",
      { budget: 3, tools: { search: { cost: 2 } } },
      ["search"],
      "search",
      { code: "insufficient_budget", cost: 2, remaining: 1 },
    ],
  ];
  for (const [name, overrides, before, tool, reason] of denials) {
    test(`a denied tool (${name}) throws ActionDenied with the reason and never runs`, async () => {
      const client = guardd.connect(await newAgent(guardd, overrides));
      for (const earlier of before) assert.equal((await client.requestAction(earlier)).decision, "allowed");
      const error = await client.guarded(never, { tool })().catch((e: unknown) => e);
      assert.ok(error instanceof ActionDenied);
      assert.ok(error instanceof GuardError);
      assert.deepEqual([error.code, error.reason, error.actionId], [reason.code, reason, `act-${before.length + 1}`]);
    });
  }

  test("a terminated agent's tool throws ActionDenied terminated", async () => {
    const created = await newAgent(guardd);
    const client = guardd.connect(created);
    await admin.terminate(created.agentId, { reason: "operator stop", by: "alice" });
    const error = await client.guarded(never, { tool: "search" })().catch((e: unknown) => e);
    assert.ok(error instanceof ActionDenied);
    assert.deepEqual(error.reason, { code: "terminated", reason: "operator stop" });
    assert.equal(error.message, 'action act-1 denied: terminated (reason="operator stop")');
  });

  test("a held tool waits until an operator approves it, then runs", async () => {
    const created = await newAgent(guardd);
    const client = guardd.connect(created);
    const sent: string[] = [];
    const sendEmail = client.guarded(
      (to: string, body: string) => {
        sent.push(`${to}: ${body}`);
        return "queued";
      },
      { tool: "send_email" },
    );
    const [result] = await Promise.all([sendEmail("ops@example.com", "hi"), decideWhenPending(created.agentId)]);
    assert.equal(result, "queued");
    assert.deepEqual(sent, ["ops@example.com: hi"]);
    const action = await client.getAction("act-1");
    assert.deepEqual(action.input, ["ops@example.com", "hi"]);
    assert.deepEqual(
      [action.status, action.outcome, action.approvedBy, action.note],
      ["completed", "success", "alice", "looks fine"],
    );
    assert.equal((await client.status()).spent, "5");
  });

  test("a held tool an operator rejects throws ActionDenied rejected", async () => {
    const created = await newAgent(guardd);
    const client = guardd.connect(created);
    const [error] = await Promise.all([
      client.guarded(never, { tool: "send_email" })().catch((e: unknown) => e),
      decideWhenPending(created.agentId, true),
    ]);
    assert.ok(error instanceof ActionDenied);
    assert.deepEqual([error.code, error.actionId], ["rejected", "act-1"]);
    assert.deepEqual(error.reason, { code: "rejected", by: "alice", reason: "not today" });
  });

  test("an approval after termination throws the re-run checks' denial", async () => {
    const created = await newAgent(guardd);
    const client = guardd.connect(created);
    const operate = async () => {
      const [entry] = await eventually(async () => {
        const pending = await admin.listPending(created.agentId);
        return pending.length > 0 && pending;
      });
      await admin.terminate(created.agentId, { reason: "incident", by: "alice" });
      return admin.approve(created.agentId, entry!.action.actionId, { approver: "alice" });
    };
    const [error, approval] = await Promise.all([client.guarded(never, { tool: "send_email" })().catch((e: unknown) => e), operate()]);
    assert.ok(error instanceof ActionDenied);
    assert.deepEqual(error.reason, { code: "terminated", reason: "incident" });
    assert.equal(approval.decision, "denied");
    assert.deepEqual(approval.reason, error.reason);
  });

  test("no decision within approvalTimeout throws ApprovalTimeout and withdraws the action", async () => {
    const created = await newAgent(guardd);
    const client = guardd.connect(created);
    const error = await client.guarded(never, { tool: "send_email", approvalTimeout: 0.5 })().catch((e: unknown) => e);
    assert.ok(error instanceof ApprovalTimeout);
    assert.ok(!(error instanceof ActionDenied));
    assert.deepEqual([error.actionId, error.code, error.withdrawn], ["act-1", "approval_timeout", true]);
    assert.match(error.message, /cancelled on the service/);
    const action = await admin.getAction(created.agentId, "act-1");
    assert.equal(action.status, "cancelled");
    assert.deepEqual(action.reason, { code: "cancelled", by: "agent", reason: "guarded: no decision within approvalTimeout" });
    assert.deepEqual(await admin.listPending(created.agentId), []);
    // A late approval cannot charge for the call that did not run.
    await assert.rejects(admin.approve(created.agentId, "act-1", { approver: "alice" }), (e: unknown) => {
      return e instanceof InvalidState && /was cancelled by agent/.test(e.message);
    });
    assert.equal((await admin.agentStatus(created.agentId)).spent, "0");
  });

  test("keepPending leaves the action pending after the timeout", async () => {
    const created = await newAgent(guardd);
    const client = guardd.connect(created);
    const tool = client.guarded(never, { tool: "send_email", approvalTimeout: 0.3, keepPending: true });
    const error = await tool().catch((e: unknown) => e);
    assert.ok(error instanceof ApprovalTimeout);
    assert.equal(error.withdrawn, false);
    assert.match(error.message, /it stays pending on the service$/);
    assert.deepEqual(
      (await admin.listPending(created.agentId)).map((entry) => entry.action.actionId),
      ["act-1"],
    );
  });

  test("aborting the signal while waiting withdraws the action and throws the signal's reason", async () => {
    const created = await newAgent(guardd);
    const client = guardd.connect(created);
    const controller = new AbortController();
    const stop = new Error("the user closed the page");
    const waiting = client.guarded(never, { tool: "send_email", signal: controller.signal })();
    await eventually(async () => (await admin.listPending(created.agentId)).length > 0);
    controller.abort(stop);
    await assert.rejects(waiting, (error) => error === stop);
    const action = await admin.getAction(created.agentId, "act-1");
    assert.deepEqual([action.status, action.reason?.reason], ["cancelled", "guarded: the waiting call was aborted"]);
  });

  test("an approval the service expires throws ActionDenied approval_expired", async () => {
    const client = guardd.connect(await newAgent(guardd, { approval_timeout_secs: 0.5 }));
    const error = await client.guarded(never, { tool: "send_email" })().catch((e: unknown) => e);
    assert.ok(error instanceof ActionDenied);
    assert.deepEqual(error.reason, { code: "approval_expired", timeout_secs: 0.5 });
  });

  test("the tool name, cost and input given as options are used", async () => {
    const created = await newAgent(guardd, { tools: { web_search: { cost: 1 } } });
    const client = guardd.connect(created);
    const lookup = client.guarded((query: string, page: number) => `${query}@${page}`, {
      tool: "web_search",
      cost: "2.5",
      input: (query, page) => ({ query, page }),
    });
    assert.equal(await lookup("q", 2), "q@2");
    const action = await client.getAction("act-1");
    assert.deepEqual([action.tool, action.cost, action.input], ["web_search", "2.5", { query: "q", page: 2 }]);
    assert.equal((await admin.agentStatus(created.agentId)).remaining, "97.5");
  });

  test("an input that is not JSON-safe fails before anything is asked", async () => {
    const client = guardd.connect(await newAgent(guardd));
    const search = client.guarded((_query: { q: string; tags: unknown }) => never(), { tool: "search" });
    await assert.rejects(search({ q: "x", tags: new Set(["a"]) }), (error: unknown) => {
      assert.ok(error instanceof ToolInputError);
      assert.equal(error.message, 'input of tool "search" is not JSON-safe: input.tags is a Set, which JSON cannot carry as it is');
      assert.equal(error.argument, "input.tags");
      return true;
    });
    await assert.rejects(search({ q: "\ud800", tags: null }), /input\.q holds a lone surrogate/);
    await assert.rejects(search({ q: "x", tags: [2 ** 60] }), /input\.tags\[0\] is an integer beyond 2\^53-1/);
    await assert.rejects(search({ q: "x", tags: [Number.NaN] }), /input\.tags\[0\] is NaN, not a finite number/);
    assert.equal((await client.status()).actionsAllowed, 0);
    assert.equal((await client.requestAction("search")).actionId, "act-1");
  });

  test("a tool without a name needs the tool option", () => {
    const client = new GuardClient({ token: "agt_x.y", baseUrl: "http://127.0.0.1:1" });
    assert.throws(() => client.guarded(() => 1), /the function has no name; pass guarded\(fn, \{ tool: \.\.\. \}\)/);
  });

  test("the tool sees its action and receipt through currentAction()", async () => {
    const created = await newAgent(guardd);
    const client = guardd.connect(created);
    const publicKey = await admin.publicKey();
    assert.equal(currentAction(), undefined);
    const search = client.guarded(
      async (args: { query: string }) => {
        await Promise.resolve(); // still known after an await
        const action = currentAction();
        assert.ok(action?.receipt);
        return verifyReceipt(action.receipt, publicKey, {
          agentId: created.agentId,
          tool: "search",
          input: args,
          maxAgeSecs: 60,
        });
      },
      { tool: "search" },
    );
    assert.equal(await search({ query: "x" }), "act-1");
    assert.equal(currentAction(), undefined);
  });

  test("an agent reporting harmful is forbidden, and a second outcome is invalid_state", async () => {
    const client = guardd.connect(await newAgent(guardd));
    const decision = await client.requestAction("search", { q: 1 });
    assert.deepEqual([decision.decision, decision.cost, decision.remaining], ["allowed", "1", "99"]);
    await assert.rejects(client.reportOutcome(decision.actionId, "harmful"), (error: unknown) => {
      return error instanceof Forbidden && error.status === 403 && error.code === "forbidden";
    });
    await client.reportOutcome(decision.actionId, "success");
    await assert.rejects(client.reportOutcome(decision.actionId, "failure"), InvalidState);
  });

  test("exact money: ten tenths spend a budget of one", async () => {
    const client = guardd.connect(await newAgent(guardd, { budget: 1, tools: { search: { cost: 0 } } }));
    for (let i = 0; i < 10; i++) {
      assert.equal((await client.requestAction("search", null, { cost: i % 2 ? "0.1" : 0.1 })).decision, "allowed");
    }
    const status = await client.status();
    assert.deepEqual([status.spent, status.remaining, status.alive], ["1", "0", false]);
  });

  test("money at the edges of the service's range comes back as the exact decimal", async () => {
    const client = guardd.connect(await newAgent(guardd, { budget: 999999999.999999, tools: { search: { cost: 0.000001 } } }));
    const decision = await client.requestAction("search", null, { cost: "123456789.123457" });
    assert.deepEqual([decision.cost, decision.remaining], ["123456789.123457", "876543210.876542"]);
    const policy = await client.policy();
    assert.deepEqual([policy.budget, policy.tools.search?.cost], ["999999999.999999", "0.000001"]);
  });
});
