/** docs/sdk-ts.md: its examples are the files of examples/ and run as the page
 * says against a real guardd, and it names every export and every method. */

import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";

import { MockLanguageModelV3 } from "ai/test";

import * as adapter from "../src/ai.js";
import * as api from "../src/index.js";
import { Guardd, newAgent, REPO, SDK_DIR } from "./support/guardd.js";

const DOC = readFileSync(join(REPO, "docs", "sdk-ts.md"), "utf8");
const EXAMPLES = join(SDK_DIR, "examples");
const BUILT = join(SDK_DIR, "build", "examples");

let guardd: Guardd;

before(async () => {
  guardd = await Guardd.start();
});
after(() => guardd.kill());

function example(name: string): string {
  return readFileSync(join(EXAMPLES, name), "utf8");
}

describe("docs/sdk-ts.md", () => {
  for (const name of ["guarded-tool.ts", "ai-sdk.ts"]) {
    test(`shows examples/${name} as it is`, () => {
      assert.ok(DOC.includes("```ts\n" + example(name) + "```\n"), `docs/sdk-ts.md does not show examples/${name} as it is`);
    });
  }

  test("shows a guarded tool in 20 lines", () => {
    assert.ok(example("guarded-tool.ts").trimEnd().split("\n").length <= 20);
  });

  test("the guarded tool runs when allowed and says why not when denied", async () => {
    const run = async (tools: Record<string, unknown>) => {
      const created = await newAgent(guardd, { tools });
      const env = { ...process.env, GUARD_URL: guardd.url, GUARD_AGENT_TOKEN: created.token };
      return execFileSync(process.execPath, [join(BUILT, "guarded-tool.js")], { env, encoding: "utf8", cwd: guardd.dir });
    };
    assert.equal(await run({ send_invoice: { cost: 1 } }), "invoice of 12.5 sent to ops@example.com\nsent\n");
    assert.equal(await run({}), "not sent: tool_not_allowed\n");
  });

  test("the AI SDK example holds the call for the user and the operator, then runs it", async () => {
    const created = await newAgent(guardd, { tools: { send_email: { cost: 1, requires_approval: true } } });
    process.env.GUARD_URL = guardd.url;
    process.env.GUARD_AGENT_TOKEN = created.token;
    const { turn } = (await import(join(BUILT, "ai-sdk.js"))) as typeof import("../examples/ai-sdk.js");
    const usage = { inputTokens: { total: 1, noCache: 1, cacheRead: 0, cacheWrite: 0 }, outputTokens: { total: 1, text: 1, reasoning: 0 } };
    const model = new MockLanguageModelV3({
      doGenerate: async ({ prompt }) =>
        prompt.at(-1)?.role === "tool"
          ? { content: [{ type: "text", text: "sent" }], finishReason: { unified: "stop", raw: "stop" }, usage, warnings: [] }
          : {
              content: [{ type: "tool-call", toolCallId: "call-1", toolName: "send_email", input: '{"to":"ops@example.com","body":"hi"}' }],
              finishReason: { unified: "tool-calls", raw: "tool_calls" },
              usage,
              warnings: [],
            },
    });
    const first = await turn(model, [{ role: "user", content: "tell ops" }]);
    assert.equal(first.approvals.length, 1);
    await guardd.admin().approve(created.agentId, "act-1", { approver: "alice" });
    const answer = { type: "tool-approval-response" as const, approvalId: first.approvals[0]!.approvalId, approved: true };
    const second = await turn(model, [...first.messages, { role: "tool", content: [answer] }]);
    assert.equal(second.approvals.length, 0);
    const action = await guardd.admin().getAction(created.agentId, "act-1");
    assert.deepEqual([action.status, action.outcome, action.input], ["completed", "success", { to: "ops@example.com", body: "hi" }]);
  });

  test("names every export of the package and of its AI SDK adapter", () => {
    const names = [...Object.keys(api), ...Object.keys(adapter)];
    const missing = names.filter((name) => !DOC.includes(`\`${name}\``) && !DOC.includes(`\`${name}(`));
    assert.deepEqual(missing, []);
  });

  test("lists every method of both clients", () => {
    for (const cls of [api.GuardClient, api.AdminClient]) {
      const methods = Object.getOwnPropertyNames(cls.prototype).filter(
        (name) => name !== "constructor" && typeof Object.getOwnPropertyDescriptor(cls.prototype, name)?.value === "function",
      );
      const missing = methods.filter((name) => !DOC.includes(`| \`${name}(`));
      assert.deepEqual(missing, [], `${cls.name}'s methods missing from docs/sdk-ts.md`);
    }
  });
});
