/**
 * The client sends the caller's W3C trace context: guardd's spans become
 * children of the span current when a guarded tool runs. A real guardd
 * exports its spans to an OTLP/HTTP receiver (the Python tests' own,
 * decoding the protobuf) started by this test, which writes them to a file.
 */

import assert from "node:assert/strict";
import { type ChildProcess, spawn } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";

import { context, trace } from "@opentelemetry/api";
import { AsyncLocalStorageContextManager } from "@opentelemetry/context-async-hooks";
import { BasicTracerProvider } from "@opentelemetry/sdk-trace-base";

import type { GuardClient } from "../src/index.js";
import { traceHeaders } from "../src/trace.js";
import { eventually, Guardd, newAgent, REPO } from "./support/guardd.js";

interface ExportedSpan {
  readonly name: string;
  readonly trace_id: string;
  readonly span_id: string;
  readonly parent_span_id: string;
  readonly attributes: Readonly<Record<string, unknown>>;
  readonly links: readonly (readonly [string, string])[];
}

let dir: string;
let receiver: ChildProcess;
let guardd: Guardd;
const tracer = new BasicTracerProvider().getTracer("agent");

before(async () => {
  dir = mkdtempSync(join(tmpdir(), "otlp-ts-"));
  receiver = spawn(join(REPO, ".venv", "bin", "python"), ["-m", "tests.support.otlp", join(dir, "spans.jsonl")], {
    cwd: REPO,
    stdio: ["pipe", "pipe", "inherit"],
  });
  const port = await new Promise<string>((resolve, reject) => {
    receiver.stdout!.once("data", (chunk: Buffer) => resolve(chunk.toString().trim()));
    receiver.once("exit", (code) => reject(new Error(`the OTLP receiver exited with ${code}`)));
  });
  guardd = await Guardd.start({ OTEL_EXPORTER_OTLP_ENDPOINT: `http://127.0.0.1:${port}`, OTEL_BSP_SCHEDULE_DELAY: "20" });
  context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
});

after(async () => {
  context.disable();
  guardd?.kill();
  if (receiver !== undefined && receiver.exitCode === null) {
    const exited = new Promise((resolve) => receiver.once("exit", resolve));
    receiver.stdin?.end(); // it stops when its standard input closes
    await exited;
  }
  rmSync(dir, { recursive: true, force: true });
});

function spansOf(agentId: string): ExportedSpan[] {
  let text = "";
  try {
    text = readFileSync(join(dir, "spans.jsonl"), "utf8");
  } catch {
    return [];
  }
  return text
    .split("\n")
    .filter((line) => line)
    .map((line) => JSON.parse(line) as ExportedSpan)
    .filter((span) => span.attributes["gen_ai.agent.id"] === agentId);
}

async function search(client: GuardClient, query: string): Promise<string> {
  const tool = client.guarded(async (q: string) => `found ${q}`, { tool: "search" });
  return tool(query);
}

test("a guarded tool's decision and outcome spans are children of the caller's span", async () => {
  const created = await newAgent(guardd);
  const client = guardd.connect(created);
  const step = await tracer.startActiveSpan("model call", async (span) => {
    try {
      assert.equal(await search(client, "weather"), "found weather");
      return span.spanContext();
    } finally {
      span.end();
    }
  });
  const spans = await eventually(async () => {
    const found = spansOf(created.agentId);
    return found.length === 2 && found;
  });
  const decided = spans.find((s) => s.name === "apply_guardrail guardd")!;
  const reported = spans.find((s) => s.name === "report_outcome guardd")!;
  for (const span of [decided, reported]) {
    assert.deepEqual([span.trace_id, span.parent_span_id], [step.traceId, step.spanId]);
  }
  assert.equal(decided.attributes["gen_ai.tool.name"], "search");
  assert.deepEqual(reported.links, [[decided.trace_id, decided.span_id]]);
});

test("without a current span the decision span is a root", async () => {
  const created = await newAgent(guardd);
  const decision = await guardd.connect(created).requestAction("search", { q: "x" });
  const [span] = await eventually(async () => {
    const found = spansOf(created.agentId);
    return found.length === 1 && found;
  });
  assert.equal(span!.attributes["gen_ai.tool.call.id"], decision.actionId);
  assert.equal(span!.parent_span_id, "");
});

test("the trace headers are those of the active span, and none outside one", () => {
  assert.equal(traceHeaders(), undefined);
  const span = tracer.startSpan("step");
  const { traceId, spanId } = span.spanContext();
  context.with(trace.setSpan(context.active(), span), () => {
    assert.deepEqual(traceHeaders(), { traceparent: `00-${traceId}-${spanId}-01` });
  });
  span.end();
});
