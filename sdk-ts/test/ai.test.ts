/**
 * The AI SDK adapter, driven by the SDK's own mock language model (`ai/test`)
 * against a real guardd, with AI SDK 6 (`ai`) and AI SDK 7 (installed for the
 * tests as `ai-7`): a held call surfaces as the SDK's tool approval request,
 * and runs only once the operator approved it in guardd.
 */

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import * as ai6 from "ai";
import * as ai6test from "ai/test";
import * as ai7 from "ai-7";
import * as ai7test from "ai-7/test";

import { guardToolApproval, guardTools, idempotencyKey, withdrawDeclined } from "../src/ai.js";
import { type AdminClient, currentAction, GuardClient, verifyReceipt } from "../src/index.js";
import { eventually, Guardd, newAgent } from "./support/guardd.js";

// The two SDKs' functions, used alike: their option types differ in details
// the adapter does not touch, so the tests hold them loosely typed.
type Loose = any;

interface Sdk {
  readonly name: string;
  readonly generateText: (options: Loose) => Promise<Loose>;
  readonly streamText: (options: Loose) => Loose;
  readonly tool: (definition: Loose) => Loose;
  readonly jsonSchema: (schema: Loose) => Loose;
  readonly mockModel: (options: Loose) => Loose;
  readonly v7: boolean;
}

const SDKS: Sdk[] = [
  {
    name: "AI SDK 6",
    generateText: ai6.generateText as Loose,
    streamText: ai6.streamText as Loose,
    tool: ai6.tool as Loose,
    jsonSchema: ai6.jsonSchema as Loose,
    mockModel: (options) => new ai6test.MockLanguageModelV3(options),
    v7: false,
  },
  {
    name: "AI SDK 7",
    generateText: ai7.generateText as Loose,
    streamText: ai7.streamText as Loose,
    tool: ai7.tool as Loose,
    jsonSchema: ai7.jsonSchema as Loose,
    mockModel: (options) => new ai7test.MockLanguageModelV4(options),
    v7: true,
  },
];

const USAGE = {
  inputTokens: { total: 1, noCache: 1, cacheRead: 0, cacheWrite: 0 },
  outputTokens: { total: 1, text: 1, reasoning: 0 },
};

let calls = 0;

interface Scripted {
  readonly model: Loose;
  readonly toolCallId: string;
  /** What the model was told of the tool's call, once it was: the tool result parts. */
  readonly told: Loose[];
}

/** A model that calls `tool` with `input` first, and says "done" once it has a tool result. */
function scripted(sdk: Sdk, toolName: string, input: unknown): Scripted {
  calls += 1;
  const toolCallId = `call-${process.pid}-${calls}`;
  const told: Loose[] = [];
  const tell = (prompt: { role: string; content: Loose }[]) => {
    const last = prompt.at(-1);
    if (last?.role === "tool") told.push(...last.content.filter((part: Loose) => part.type === "tool-result"));
    return last?.role === "tool";
  };
  const model = sdk.mockModel({
    doGenerate: async (options: { prompt: { role: string; content: Loose }[] }) =>
      tell(options.prompt)
        ? { content: [{ type: "text", text: "done" }], finishReason: { unified: "stop", raw: "stop" }, usage: USAGE, warnings: [] }
        : {
            content: [{ type: "tool-call", toolCallId, toolName, input: JSON.stringify(input) }],
            finishReason: { unified: "tool-calls", raw: "tool_calls" },
            usage: USAGE,
            warnings: [],
          },
    doStream: async (options: { prompt: { role: string; content: Loose }[] }) => {
      const done = tell(options.prompt);
      const chunks: Loose[] = done
        ? [
            { type: "text-start", id: "t" },
            { type: "text-delta", id: "t", delta: "done" },
            { type: "text-end", id: "t" },
            { type: "finish", finishReason: { unified: "stop", raw: "stop" }, usage: USAGE },
          ]
        : [
            { type: "tool-call", toolCallId, toolName, input: JSON.stringify(input) },
            { type: "finish", finishReason: { unified: "tool-calls", raw: "tool_calls" }, usage: USAGE },
          ];
      return { stream: ReadableStream.from(chunks) };
    },
  });
  return { model, toolCallId, told };
}

const SCHEMA = { type: "object", properties: { to: { type: "string" }, q: { type: "string" } } };
const PROMPT = [{ role: "user", content: "go" }];

let guardd: Guardd;
let admin: AdminClient;

before(async () => {
  guardd = await Guardd.start();
  admin = guardd.admin();
});
after(() => guardd.kill());

/** The messages that answer the approval request of `first`, approved or not. */
function answered(first: Loose, approved: boolean, reason?: string): Loose[] {
  const request = first.content.find((part: { type: string }) => part.type === "tool-approval-request");
  assert.ok(request, "the first call ended without a tool approval request");
  return [
    ...PROMPT,
    ...first.response.messages,
    { role: "tool", content: [{ type: "tool-approval-response", approvalId: request.approvalId, approved, reason }] },
  ];
}

function parts(result: Loose, type: string): Loose[] {
  return result.content.filter((part: { type: string }) => part.type === type);
}

for (const sdk of SDKS) {
  describe(sdk.name, () => {
    const ran: unknown[] = [];
    const tools = (client: GuardClient, options = {}) =>
      guardTools(
        client,
        {
          search: sdk.tool({
            inputSchema: sdk.jsonSchema(SCHEMA),
            execute: async (input: { q: string }) => {
              ran.push(input);
              return `results for ${input.q}`;
            },
          }),
          send_email: sdk.tool({
            inputSchema: sdk.jsonSchema(SCHEMA),
            execute: async (input: { to: string }) => {
              ran.push(input);
              return `sent to ${input.to}`;
            },
          }),
          delete_db: sdk.tool({ inputSchema: sdk.jsonSchema(SCHEMA), execute: async () => ran.push("deleted") }),
        },
        options,
      );

    test("an allowed call runs at once, reported, with no approval asked", async () => {
      const created = await newAgent(guardd);
      const client = guardd.connect(created);
      const { model, toolCallId } = scripted(sdk, "search", { q: "trains" });
      ran.length = 0;
      const result = await sdk.generateText({ model, tools: tools(client), messages: PROMPT });
      assert.deepEqual(parts(result, "tool-approval-request"), []);
      assert.deepEqual(
        parts(result, "tool-result").map((part) => part.output),
        ["results for trains"],
      );
      assert.deepEqual(ran, [{ q: "trains" }]);
      const action = await client.getAction("act-1");
      assert.deepEqual([action.tool, action.input, action.status, action.outcome], ["search", { q: "trains" }, "completed", "success"]);
      // needsApproval and execute asked with one key: one action, charged once
      const status = await client.status();
      assert.deepEqual([status.actionsAllowed, status.spent], [1, "1"]);
      const requested = (await admin.logPage(created.agentId)).records.filter((r) => r.kind === "action_requested");
      assert.deepEqual(
        requested.map((r) => r.idempotency_key),
        [idempotencyKey(toolCallId)],
      );
    });

    test("a denied call never runs: the model is told the guard's reason", async () => {
      const client = guardd.connect(await newAgent(guardd));
      const { model } = scripted(sdk, "delete_db", {});
      ran.length = 0;
      const result = await sdk.generateText({ model, tools: tools(client), messages: PROMPT });
      assert.deepEqual(parts(result, "tool-approval-request"), []);
      const [error] = parts(result, "tool-error");
      assert.equal(error.error.name, "ActionDenied");
      assert.equal(error.error.message, 'action act-1 denied: tool_not_allowed (tool="delete_db")');
      assert.deepEqual(ran, []);
    });

    test("a held call surfaces as the SDK's approval request, and runs once the operator approved", async () => {
      const created = await newAgent(guardd);
      const client = guardd.connect(created);
      const guarded = tools(client);
      const { model, toolCallId } = scripted(sdk, "send_email", { to: "ops@example.com" });
      ran.length = 0;
      const first = await sdk.generateText({ model, tools: guarded, messages: PROMPT });
      const [request] = parts(first, "tool-approval-request");
      assert.equal(request.toolCall.toolCallId, toolCallId);
      assert.deepEqual(ran, []);
      const [pending] = await admin.listPending(created.agentId);
      assert.deepEqual([pending?.action.tool, pending?.action.input], ["send_email", { to: "ops@example.com" }]);
      // The user consents in the app; the operator approves in guardd meanwhile.
      const operator = (async () => {
        await eventually(async () => (await admin.listPending(created.agentId)).length > 0);
        await admin.approve(created.agentId, "act-1", { approver: "alice" });
      })();
      const [second] = await Promise.all([sdk.generateText({ model, tools: guarded, messages: answered(first, true) }), operator]);
      assert.equal(second.text, "done");
      assert.deepEqual(ran, [{ to: "ops@example.com" }]);
      const action = await client.getAction("act-1");
      assert.deepEqual([action.status, action.outcome, action.approvedBy], ["completed", "success", "alice"]);
      assert.deepEqual([(await client.status()).spent, (await client.status()).actionsAllowed], ["5", 1]);
    });

    test("a held call the operator rejects does not run", async () => {
      const created = await newAgent(guardd);
      const client = guardd.connect(created);
      const guarded = tools(client);
      const { model, told } = scripted(sdk, "send_email", { to: "eve@example.com" });
      ran.length = 0;
      const first = await sdk.generateText({ model, tools: guarded, messages: PROMPT });
      await admin.reject(created.agentId, "act-1", { approver: "alice", reason: "not to eve" });
      await sdk.generateText({ model, tools: guarded, messages: answered(first, true) });
      assert.deepEqual(ran, []);
      // The model reads the error as the SDK writes it: AI SDK 7 names the error's class first.
      const [result] = told;
      assert.equal(result.output.type, "error-text");
      assert.match(result.output.value, /^(ActionDenied: )?action act-1 denied: rejected \(by="alice", reason="not to eve"\)$/);
    });

    test("a held call the user declines in the app is withdrawn from the operator's queue", async () => {
      const created = await newAgent(guardd);
      const client = guardd.connect(created);
      const guarded = tools(client);
      const { model } = scripted(sdk, "send_email", { to: "ops@example.com" });
      ran.length = 0;
      const first = await sdk.generateText({ model, tools: guarded, messages: PROMPT });
      const messages = answered(first, false, "I changed my mind");
      assert.deepEqual(await withdrawDeclined(guarded, messages), ["act-1"]);
      const second = await sdk.generateText({ model, tools: guarded, messages });
      assert.equal(second.text, "done");
      assert.deepEqual(ran, []);
      const action = await admin.getAction(created.agentId, "act-1");
      assert.deepEqual([action.status, action.reason], ["cancelled", { code: "cancelled", by: "agent", reason: "declined in the app: I changed my mind" }]);
      assert.deepEqual(await withdrawDeclined(guarded, messages), [], "withdrawn once");
    });

    test("a held call nobody decides within approvalTimeout is withdrawn, and the model told", async () => {
      const created = await newAgent(guardd);
      const client = guardd.connect(created);
      const guarded = tools(client, { approvalTimeout: 0.3 });
      const { model, told } = scripted(sdk, "send_email", { to: "ops@example.com" });
      const first = await sdk.generateText({ model, tools: guarded, messages: PROMPT });
      await sdk.generateText({ model, tools: guarded, messages: answered(first, true) });
      const [result] = told;
      assert.equal(result.output.type, "error-text");
      assert.match(result.output.value, /^(ApprovalTimeout: )?action act-1 was not decided within 0\.3s; it was cancelled on the service/);
      assert.equal((await admin.getAction(created.agentId, "act-1")).status, "cancelled");
    });

    test("a tool's own needsApproval asks the user first, and the guard only once they consented", async () => {
      const created = await newAgent(guardd);
      const client = guardd.connect(created);
      const guarded = guardTools(client, {
        search: sdk.tool({ inputSchema: sdk.jsonSchema(SCHEMA), needsApproval: true, execute: async (input: { q: string }) => `found ${input.q}` }),
      });
      const declined = scripted(sdk, "search", { q: "secrets" });
      const first = await sdk.generateText({ model: declined.model, tools: guarded, messages: PROMPT });
      assert.equal(parts(first, "tool-approval-request").length, 1);
      assert.deepEqual(await withdrawDeclined(guarded, answered(first, false)), []);
      assert.equal((await client.status()).actionsAllowed, 0, "the guard was not asked");
      const approved = scripted(sdk, "search", { q: "trains" });
      const again = await sdk.generateText({ model: approved.model, tools: guarded, messages: PROMPT });
      await sdk.generateText({ model: approved.model, tools: guarded, messages: answered(again, true) });
      assert.deepEqual(
        approved.told.map((part) => part.output),
        [{ type: "text", value: "found trains" }],
      );
      const action = await client.getAction("act-1");
      assert.deepEqual([action.input, action.status, action.outcome], [{ q: "trains" }, "completed", "success"]);
    });

    test("the SDK's abort signal gives the wait up and withdraws the action", async () => {
      const created = await newAgent(guardd);
      const client = guardd.connect(created);
      const guarded = tools(client);
      const { model } = scripted(sdk, "send_email", { to: "ops@example.com" });
      const first = await sdk.generateText({ model, tools: guarded, messages: PROMPT });
      const controller = new AbortController();
      ran.length = 0;
      const waiting = sdk.generateText({ model, tools: guarded, messages: answered(first, true), abortSignal: controller.signal });
      controller.abort(new Error("the user left"));
      // The SDK ends the call, or hands the model the tool's error: either way, nothing ran.
      await waiting.catch(() => undefined);
      const action = await admin.getAction(created.agentId, "act-1");
      assert.deepEqual([action.status, action.reason?.reason], ["cancelled", "guarded: the waiting call was aborted"]);
      assert.deepEqual(ran, []);
    });

    test("the tool reads its receipt, and a streaming tool reports once its stream ends", async () => {
      const created = await newAgent(guardd);
      const client = guardd.connect(created);
      const publicKey = await admin.publicKey();
      const guarded = guardTools(client, {
        search: sdk.tool({
          inputSchema: sdk.jsonSchema(SCHEMA),
          async *execute(input: { q: string }) {
            yield "searching";
            const action = currentAction();
            yield verifyReceipt(action?.receipt, publicKey, { agentId: created.agentId, tool: "search", input, maxAgeSecs: 60 });
          },
        }),
      });
      const { model } = scripted(sdk, "search", { q: "x" });
      const result = sdk.streamText({ model, tools: guarded, messages: PROMPT });
      const outputs: unknown[] = [];
      for await (const part of result.fullStream) if (part.type === "tool-result" && !part.preliminary) outputs.push(part.output);
      assert.deepEqual(outputs, ["act-1"]);
      assert.equal((await client.getAction("act-1")).outcome, "success");
    });

    if (sdk.v7) {
      test("with guardToolApproval, a denial is the SDK's own execution-denied, with the guard's reason", async () => {
        const client = guardd.connect(await newAgent(guardd));
        const { model, told } = scripted(sdk, "delete_db", {});
        ran.length = 0;
        await sdk.generateText({ model, tools: tools(client), messages: PROMPT, toolApproval: guardToolApproval(), stopWhen: ai7.isStepCount(2) });
        assert.deepEqual(
          told.map((part) => part.output),
          [{ type: "execution-denied", reason: 'action act-1 denied: tool_not_allowed (tool="delete_db")' }],
        );
        assert.deepEqual(ran, []);
      });

      test("with guardToolApproval, a held call names its action, and a rejection meanwhile is a denial", async () => {
        const created = await newAgent(guardd);
        const client = guardd.connect(created);
        const guarded = tools(client);
        const { model, told } = scripted(sdk, "send_email", { to: "ops@example.com" });
        const first = await sdk.generateText({ model, tools: guarded, messages: PROMPT, toolApproval: guardToolApproval() });
        const [request] = parts(first, "tool-approval-request");
        assert.equal(request.reason, "held by the guard for an operator's approval (action act-1)");
        await admin.reject(created.agentId, "act-1", { approver: "alice", reason: "no" });
        await sdk.generateText({ model, tools: guarded, messages: answered(first, true), toolApproval: guardToolApproval() });
        assert.deepEqual(
          told.map((part) => part.output),
          [{ type: "execution-denied", reason: 'action act-1 denied: rejected (by="alice", reason="no")' }],
        );
      });
    }
  });
}

describe("guardTools", () => {
  test("refuses a tool without execute, which it could not guard", () => {
    const client = new GuardClient({ token: "agt_x.y", baseUrl: "http://127.0.0.1:1" });
    assert.throws(() => guardTools(client, { ask_user: { needsApproval: true } }), {
      name: "TypeError",
      message: 'tool "ask_user" has no execute: guardTools guards the tools it runs',
    });
  });

  test("makes each call's Idempotency-Key from its tool call ID", () => {
    assert.equal(idempotencyKey("call_abc"), "ai-sdk/call_abc");
    assert.match(idempotencyKey("é".repeat(3)), /^ai-sdk\/sha256:[0-9a-f]{64}$/);
    assert.match(idempotencyKey("x".repeat(121)), /^ai-sdk\/sha256:[0-9a-f]{64}$/);
  });
});
