/** AdminClient against a real guardd: every admin endpoint, and the agent's own reads. */

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import {
  AdminClient,
  AgentExists,
  AlreadyTerminated,
  BadRequest,
  Forbidden,
  GuardClient,
  InvalidState,
  Unauthorized,
  UnknownAction,
} from "../src/index.js";
import { Guardd, newAgent, policy } from "./support/guardd.js";

let guardd: Guardd;
let admin: AdminClient;

before(async () => {
  guardd = await Guardd.start();
  admin = guardd.admin();
});
after(() => guardd.kill());

describe("AdminClient", () => {
  test("createAgent returns the agent's status and token", async () => {
    const created = await admin.createAgent("mail-bot", policy({ budget: 12.5 }));
    assert.equal(created.agentId, "mail-bot");
    assert.ok(created.token.startsWith("agt_mail-bot."));
    const agent = created.agent;
    assert.deepEqual([agent.alive, agent.budget, agent.spent, agent.remaining], [true, "12.5", "0", "12.5"]);
    assert.deepEqual([agent.scars, agent.head.seq, agent.scarLimit], [[], 1, 10]);
    assert.equal(await admin.reissueToken("mail-bot"), created.token);
  });

  test("createAgent's errors are their own classes", async () => {
    await admin.createAgent("bot", policy());
    await assert.rejects(admin.createAgent("bot", policy()), (e: unknown) => e instanceof AgentExists && e.status === 409);
    await assert.rejects(admin.createAgent("no spaces allowed", policy()), (e: unknown) => e instanceof BadRequest && e.code === "bad_request");
    await assert.rejects(admin.createAgent("typo", policy({ tools: { t: { requires_aproval: true } } })), (e: unknown) => {
      return e instanceof BadRequest && /requires_aproval/.test(e.message);
    });
  });

  test("listAgents and agentStatus", async () => {
    const created = await newAgent(guardd);
    const entries = (await admin.listAgents()).filter((entry) => entry.agentId === created.agentId);
    assert.equal(entries.length, 1);
    const [entry] = entries;
    assert.deepEqual([entry?.state, entry?.error, entry?.failure], ["active", null, null]);
    assert.deepEqual(entry?.status, await admin.agentStatus(created.agentId));
  });

  test("the policy is read, typed, by the agent and the admin", async () => {
    const created = await newAgent(guardd);
    await admin.setPolicy(
      created.agentId,
      policy({ default: { cost: 0.25, max_calls: 3 }, rate_limit: { max_actions: 5, window_secs: 60 } }),
    );
    const own = await guardd.connect(created).policy();
    assert.deepEqual(own, await admin.policy(created.agentId));
    assert.deepEqual(own, {
      budget: "100",
      scarLimit: 10,
      tools: {
        search: { cost: "1", requiresApproval: false, maxCalls: null, approvalTimeoutSecs: null },
        send_email: { cost: "5", requiresApproval: true, maxCalls: null, approvalTimeoutSecs: null },
      },
      default: { cost: "0.25", requiresApproval: false, maxCalls: 3, approvalTimeoutSecs: null },
      rateLimit: { maxActions: 5, windowSecs: 60 },
      approvalTimeoutSecs: null,
    });
  });

  test("setPolicy replaces the policy of a live agent", async () => {
    const created = await newAgent(guardd);
    const status = await admin.setPolicy(created.agentId, policy({ budget: 0.5 }));
    assert.deepEqual([status.budget, status.remaining], ["0.5", "0.5"]);
    const decision = await admin.requestAction(created.agentId, "search");
    assert.deepEqual(decision.reason, { code: "insufficient_budget", cost: 1, remaining: 0.5 });
  });

  test("pending actions are approved and rejected", async () => {
    const { agentId } = await newAgent(guardd);
    const first = await admin.requestAction(agentId, "send_email", { to: "a@example.com" });
    const second = await admin.requestAction(agentId, "send_email", { to: "b@example.com" });
    assert.deepEqual([first.decision, second.decision], ["pending_approval", "pending_approval"]);
    const pending = await admin.listPending(agentId);
    assert.deepEqual(
      pending.map((entry) => entry.action),
      [
        { actionId: "act-1", tool: "send_email", input: { to: "a@example.com" }, cost: "5" },
        { actionId: "act-2", tool: "send_email", input: { to: "b@example.com" }, cost: "5" },
      ],
    );
    assert.ok(pending.every((entry) => Number.isInteger(entry.seq) && entry.requestedAt.endsWith("Z")));
    const approved = await admin.approve(agentId, "act-1", { approver: "alice", note: "fine" });
    assert.deepEqual([approved.decision, approved.cost, approved.remaining], ["allowed", "5", "95"]);
    const rejected = await admin.reject(agentId, "act-2", { approver: "alice", reason: "no", scar: "moderate" });
    assert.deepEqual(rejected.reason, { code: "rejected", by: "alice", reason: "no" });
    assert.deepEqual(await admin.listPending(agentId), []);
    await assert.rejects(admin.approve(agentId, "act-1", { approver: "alice" }), InvalidState);
    const action = await admin.getAction(agentId, "act-1", { wait: 5 }); // not pending: answers at once
    assert.deepEqual([action.status, action.approvedBy, action.note], ["allowed", "alice", "fine"]);
  });

  test("the agent and the admin cancel a pending action", async () => {
    const created = await newAgent(guardd);
    const client = guardd.connect(created);
    const held = await client.requestAction("send_email");
    const waiting = client.getAction(held.actionId, { wait: 30 });
    const cancelled = await client.cancel(held.actionId, "no longer needed");
    assert.equal((await waiting).status, "cancelled"); // the long-poll answers at once
    assert.deepEqual([cancelled.status, cancelled.reason], ["cancelled", { code: "cancelled", by: "agent", reason: "no longer needed" }]);
    await assert.rejects(client.cancel(held.actionId), InvalidState);
    const other = await client.requestAction("send_email");
    const byAdmin = await admin.cancel(created.agentId, other.actionId);
    assert.deepEqual(byAdmin.reason, { code: "cancelled", by: "admin" });
    const status = await client.status();
    assert.deepEqual([status.actionsPending, status.spent], [0, "0"]);
  });

  test("the admin reports harmful and adds scars", async () => {
    const { agentId } = await newAgent(guardd, { scar_limit: 100 });
    await admin.requestAction(agentId, "search");
    let status = await admin.reportOutcome(agentId, "act-1", "harmful", "leaked a secret");
    assert.equal(status.scarScore, 10);
    status = await admin.addScar(agentId, { severity: "minor", reason: "slow", actionId: "act-1", by: "carol" });
    assert.deepEqual(
      status.scars.map((scar) => [scar.severity, scar.actionId]),
      [
        ["severe", "act-1"],
        ["minor", "act-1"],
      ],
    );
    assert.equal((await admin.logPage(agentId)).records.at(-1)?.by, "carol");
    await assert.rejects(admin.addScar(agentId, { severity: "minor", reason: "x", actionId: "act-99" }), (e: unknown) => {
      return e instanceof UnknownAction && e.status === 404 && e.code === "unknown_action";
    });
  });

  test("terminate, and terminate again", async () => {
    const { agentId } = await newAgent(guardd);
    const status = await admin.terminate(agentId, { reason: "retired", by: "alice" });
    assert.deepEqual([status.alive, status.terminationReason], [false, "retired"]);
    await assert.rejects(admin.terminate(agentId, { reason: "again", by: "alice" }), (e: unknown) => {
      return e instanceof AlreadyTerminated && e.status === 409 && e.code === "already_terminated";
    });
  });

  test("log iterates over every record, page by page", async () => {
    const { agentId } = await newAgent(guardd);
    for (let i = 0; i < 4; i++) await admin.requestAction(agentId, "search");
    const whole = await admin.logPage(agentId, { limit: 5000 });
    const records = [];
    for await (const record of admin.log(agentId, { limit: 2 })) records.push(record);
    assert.deepEqual(records, whole.records);
    assert.deepEqual(
      records.map((r) => r.seq),
      [...Array(whole.head.seq + 1).keys()],
    );
    assert.deepEqual(
      records.slice(0, 2).map((r) => r.kind),
      ["genesis", "policy"],
    );
    const later = [];
    for await (const record of admin.log(agentId, { after: 3, limit: 3 })) later.push(record.seq);
    assert.deepEqual(later, [...Array(whole.head.seq - 3).keys()].map((i) => i + 4));
    assert.throws(() => admin.log(agentId, { limit: 0 }), /^RangeError: limit must be an integer in \[1, 5000\], not 0$/);
  });

  test("verify and publicKey", async () => {
    const { agentId } = await newAgent(guardd);
    const report = await admin.verify(agentId);
    assert.deepEqual([report.ok, report.failure], [true, null]);
    assert.equal(report.publicKey, await admin.publicKey());
    assert.equal(report.publicKey, guardd.publicKey);
    assert.deepEqual(report.head, (await admin.agentStatus(agentId)).head);
    assert.equal(report.records, (report.head?.seq ?? 0) + 1);
  });

  test("a wrong token is unauthorized, an agent token forbidden", async () => {
    const created = await newAgent(guardd);
    const stranger = new AdminClient({ token: "not-the-admin-token", baseUrl: guardd.url });
    await assert.rejects(stranger.listAgents(), (e: unknown) => e instanceof Unauthorized && e.status === 401 && e.code === "unauthorized");
    const agentAsAdmin = new AdminClient({ token: created.token, baseUrl: guardd.url });
    await assert.rejects(agentAsAdmin.listAgents(), Forbidden);
    const other = await newAgent(guardd);
    const wrong = new GuardClient({ token: created.token, agentId: other.agentId, baseUrl: guardd.url });
    await assert.rejects(wrong.status(), Forbidden);
  });

  test("me says who the token is: the admin token, or an operator token with its roles", async () => {
    assert.deepEqual(await admin.me(), { name: "admin", id: "admin-token", roles: ["admin", "approver", "viewer"], via: "admin_token" });
    const answer = await fetch(`${guardd.url}/v1/operators/tokens`, {
      method: "POST",
      headers: { Authorization: `Bearer ${guardd.adminToken}`, "Content-Type": "application/json" },
      body: JSON.stringify({ name: "release-bot", role: "approver" }),
    });
    assert.equal(answer.status, 201);
    const issued = (await answer.json()) as { token: string; token_id: string };
    const bot = new AdminClient({ token: issued.token, baseUrl: guardd.url });
    assert.deepEqual(await bot.me(), { name: "release-bot", id: `token:${issued.token_id}`, roles: ["approver", "viewer"], via: "operator_token" });
    const created = await newAgent(guardd);
    const agentAsOperator = new AdminClient({ token: created.token, baseUrl: guardd.url });
    await assert.rejects(agentAsOperator.me(), Forbidden);
  });
});
