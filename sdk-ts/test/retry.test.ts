/** Retries through a loopback proxy that loses answers or plays an overloaded gateway. */

import assert from "node:assert/strict";
import { once } from "node:events";
import { after, before, describe, test } from "node:test";

import {
  AdminClient,
  type AdminClient as Admin,
  ApprovalTimeout,
  GuardClient,
  Retry,
  ServiceUnavailable,
  TransportError,
  UnknownAction,
} from "../src/index.js";
import { FAST_RETRY, freePort, Guardd, newAgent } from "./support/guardd.js";
import { Proxy, type Step } from "./support/proxy.js";

let guardd: Guardd;
let admin: Admin;

before(async () => {
  guardd = await Guardd.start();
  admin = guardd.admin();
});
after(() => guardd.kill());

async function withProxy<T>(plan: Step[], run: (proxy: Proxy) => Promise<T>): Promise<T> {
  const proxy = await new Proxy(guardd.port, plan).start();
  try {
    return await run(proxy);
  } finally {
    await proxy.stop();
  }
}

describe("retries", () => {
  test("a lost answer to an action request is retried with the same key and charged once", async () => {
    const created = await newAgent(guardd, { tools: { search: { cost: 3 } } });
    await withProxy(["drop"], async (proxy) => {
      const client = guardd.connect(created, proxy.url);
      const decision = await client.requestAction("search", { q: "x" });
      assert.deepEqual(
        [decision.decision, decision.actionId, decision.cost, decision.remaining],
        ["allowed", "act-1", "3", "97"],
      );
      const path = `/v1/agents/${created.agentId}/actions`;
      assert.deepEqual(
        proxy.requests.map((r) => [r.method, r.path]),
        [
          ["POST", path],
          ["POST", path],
        ],
      );
      assert.equal(new Set(proxy.requests.map((r) => r.headers["idempotency-key"])).size, 1);
      assert.equal(proxy.requests[0]?.body, proxy.requests[1]?.body);
    });
    const status = await admin.agentStatus(created.agentId);
    assert.deepEqual([status.spent, status.actionsAllowed], ["3", 1]);
  });

  test("a guarded tool survives lost answers to its request and its outcome", async () => {
    const created = await newAgent(guardd, { tools: { search: { cost: 2 } } });
    let calls = 0;
    // 1: action request, answer lost; 2: its retry; 3: outcome, answer lost; 4: its retry
    // (409 invalid_state, the first copy was recorded); 5: the client reads the action.
    await withProxy(["drop", "forward", "drop"], async (proxy) => {
      const client = guardd.connect(created, proxy.url);
      const search = client.guarded(
        () => {
          calls += 1;
          return "done";
        },
        { tool: "search" },
      );
      assert.equal(await search(), "done");
      assert.deepEqual(
        proxy.requests.slice(0, 5).map((r) => r.path.split("?")[0]?.split("/").at(-1)),
        ["actions", "actions", "outcome", "outcome", "act-1"],
      );
    });
    assert.equal(calls, 1);
    const status = await admin.agentStatus(created.agentId);
    assert.deepEqual([status.spent, status.scars], ["2", []]);
    const action = await admin.getAction(created.agentId, "act-1");
    assert.deepEqual([action.status, action.outcome], ["completed", "success"]);
  });

  test("a lost answer to a cancel is resent and counts as delivered", async () => {
    const created = await newAgent(guardd);
    const held = await guardd.connect(created).requestAction("send_email");
    await withProxy(["drop"], async (proxy) => {
      const action = await guardd.connect(created, proxy.url).cancel(held.actionId, "changed my mind");
      assert.equal(action.status, "cancelled");
      assert.deepEqual(
        proxy.requests.map((r) => r.path.split("/").at(-1)),
        ["cancel", "cancel", held.actionId],
      );
    });
  });

  test("a timed-out wait whose cancel answer is lost still withdraws the action", async () => {
    const created = await newAgent(guardd);
    // 1: request (held); 2: long-poll; 3: cancel, answer lost; 4: its retry; 5: read back
    await withProxy(["forward", "forward", "drop"], async (proxy) => {
      const tool = guardd.connect(created, proxy.url).guarded(() => 1, { tool: "send_email", approvalTimeout: 0.2 });
      const error = await tool().catch((e: unknown) => e);
      assert.ok(error instanceof ApprovalTimeout && error.withdrawn);
    });
    assert.equal((await admin.getAction(created.agentId, "act-1")).status, "cancelled");
  });

  test("503 is retried until the service answers", async () => {
    const created = await newAgent(guardd);
    await withProxy(["unavailable", "unavailable"], async (proxy) => {
      assert.equal((await guardd.connect(created, proxy.url).requestAction("search")).decision, "allowed");
      assert.equal(proxy.requests.length, 3);
    });
    assert.equal((await admin.agentStatus(created.agentId)).spent, "1");
  });

  test("503 after the last attempt is thrown", async () => {
    const created = await newAgent(guardd);
    await withProxy(Array<Step>(5).fill("unavailable"), async (proxy) => {
      const client = new GuardClient({ token: created.token, baseUrl: proxy.url, retry: { attempts: 2, baseDelay: 0.01 } });
      await assert.rejects(client.status(), (error: unknown) => {
        assert.ok(error instanceof ServiceUnavailable);
        assert.deepEqual([error.status, error.code, error.message], [503, "overload", "gateway is overloaded"]);
        return true;
      });
      assert.equal(proxy.requests.length, 2);
    });
  });

  test("4xx is never retried", async () => {
    const created = await newAgent(guardd);
    await withProxy([], async (proxy) => {
      await assert.rejects(guardd.connect(created, proxy.url).getAction("act-404"), (error: unknown) => {
        return error instanceof UnknownAction && error.status === 404 && error.code === "unknown_action";
      });
      assert.equal(proxy.requests.length, 1);
    });
  });

  test("a request that must not repeat is not resent after a lost answer", async () => {
    const created = await newAgent(guardd);
    await withProxy(["drop"], async (proxy) => {
      const viaProxy = new AdminClient({ token: guardd.adminToken, baseUrl: proxy.url, retry: FAST_RETRY });
      const error = await viaProxy.addScar(created.agentId, { severity: "moderate", reason: "spam" }).catch((e: unknown) => e);
      assert.ok(error instanceof TransportError);
      assert.equal(error.url, proxy.url);
      assert.match(
        error.message,
        new RegExp(
          `^no answer from guardd at ${proxy.url}: .+ \\(POST /v1/agents/\\S+/scars, 1 attempt; the service may have received the request\\)$`,
        ),
      );
      // The service did act once, and only once.
      assert.equal((await viaProxy.agentStatus(created.agentId)).scarScore, 3);
      assert.equal(proxy.requests.length, 2);
    });
  });

  test("connection refused is retried, then thrown naming the address tried", async () => {
    const url = `http://127.0.0.1:${await freePort()}`;
    const client = new GuardClient({ token: "agt_a.bWFj", baseUrl: url, retry: new Retry({ attempts: 3, baseDelay: 0.01 }) });
    await assert.rejects(client.status(), (error: unknown) => {
      assert.ok(error instanceof TransportError);
      assert.equal(error.message, `cannot reach guardd at ${url}: connection refused (GET /v1/agents/a, 3 attempts)`);
      assert.equal(error.url, url);
      return true;
    });
  });

  test("a port fetch will not use is named as the reason, and nothing was sent", async () => {
    const client = new GuardClient({ token: "agt_a.bWFj", baseUrl: "http://127.0.0.1:6000", retry: { attempts: 2, baseDelay: 0.01 } });
    await assert.rejects(client.status(), {
      name: "TransportError",
      message: "cannot reach guardd at http://127.0.0.1:6000: fetch refuses to connect to this port (GET /v1/agents/a, 2 attempts)",
    });
  });

  test("no answer within the timeout names the address and the wait", async () => {
    const { createServer } = await import("node:net");
    const silent = createServer(() => undefined).listen(0, "127.0.0.1");
    await once(silent, "listening");
    const address = silent.address();
    assert.ok(address && typeof address !== "string");
    const url = `http://127.0.0.1:${address.port}`;
    try {
      const client = new GuardClient({ token: "agt_a.bWFj", baseUrl: url, timeout: 0.2, retry: { attempts: 1 } });
      await assert.rejects(client.status(), {
        name: "TransportError",
        message: `no answer from guardd at ${url}: no answer within 0.2s (GET /v1/agents/a, 1 attempt; the service may have received the request)`,
      });
    } finally {
      silent.close();
      silent.unref();
    }
  });

  test("a tool's error is thrown even when its failure report cannot be delivered", async () => {
    const created = await newAgent(guardd);
    const boom = new Error("disk full");
    const warnings: Error[] = [];
    const onWarning = (warning: Error) => warnings.push(warning);
    process.on("warning", onWarning);
    try {
      await withProxy(["forward", "unavailable", "unavailable"], async (proxy) => {
        const client = new GuardClient({ token: created.token, baseUrl: proxy.url, retry: { attempts: 2, baseDelay: 0.01 } });
        const tool = client.guarded(
          () => {
            throw boom;
          },
          { tool: "search" },
        );
        await assert.rejects(tool(), (error) => error === boom);
      });
      await new Promise((resolve) => setImmediate(resolve)); // warnings are emitted on the next tick
    } finally {
      process.off("warning", onWarning);
    }
    assert.deepEqual(
      warnings.map((w) => [w.name, w.message]),
      [["GuardWarning", "could not report the failure of action act-1: 503 overload: gateway is overloaded"]],
    );
    assert.equal((await admin.getAction(created.agentId, "act-1")).status, "allowed");
  });
});
