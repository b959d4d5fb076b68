/**
 * The Vercel AI SDK adapter (`ai`, versions 6 and 7): guarded tools whose
 * held calls surface as the SDK's own tool approval requests.
 *
 * `guardTools(client, tools)` wraps each tool of a tool set:
 *
 * - `needsApproval` asks the guard when the model calls the tool. A call the
 *   guard holds for an operator needs approval, so `generateText` and
 *   `streamText` stop with a `tool-approval-request` for it, as for any tool
 *   that needs approval; an allowed call runs at once; a denied one is not
 *   held (its `execute` throws the denial, which the SDK hands the model as
 *   the tool's error). A tool whose own `needsApproval` asks the user keeps
 *   doing so, and the guard is asked only once the user consented.
 * - `execute` asks again with the same `Idempotency-Key`, made from the SDK's
 *   tool call ID, so the service answers the first decision and charges once
 *   (no state is kept between the two: the approval may come back in another
 *   request, even another process). A held call waits for the operator's
 *   decision (long-poll, `approvalTimeout`), then runs and reports its
 *   outcome like `guarded`, or throws ActionDenied.
 *
 * The app's approval is thus the user's consent, and guardd's the operator's:
 * a held call runs only with both. `withdrawDeclined` withdraws the guard's
 * held actions that the user declined. With AI SDK 7, `guardToolApproval()`
 * passed as `generateText`'s `toolApproval` also turns a denial into the
 * SDK's own `denied` status, so the model sees `execution-denied` with the
 * guard's reason rather than a tool error.
 *
 * Nothing here imports `ai`: tools are matched by shape, so one adapter
 * serves both versions.
 */

import { createHash } from "node:crypto";

import type { GuardClient } from "./clients.js";
import { ActionDenied, InvalidState } from "./errors.js";
import { awaitDecision, inAction, reportFailure, runAndReport } from "./guarded.js";
import { type Money, moneyText } from "./json.js";
import type { Decision } from "./models.js";

/** What the AI SDK passes a tool's `needsApproval` and `execute`. */
export interface ToolCallOptions {
  readonly toolCallId: string;
  readonly abortSignal?: AbortSignal | undefined;
}

type NeedsApproval = boolean | ((input: never, options: never) => boolean | PromiseLike<boolean>);

/** An AI SDK tool, as far as the adapter needs to know it. */
export interface ToolLike {
  // any: the SDK's own signatures vary with each tool's types.
  readonly execute?: ((input: any, options: any) => unknown) | undefined;
  readonly needsApproval?: NeedsApproval | undefined;
}

export interface GuardToolsOptions {
  /** What to charge per tool name, at least the policy's cost. */
  readonly cost?: Readonly<Record<string, Money>>;
  /** Seconds `execute` waits for the operator at most; without it, as long as the service holds the action. */
  readonly approvalTimeout?: number;
  /** Leave the action pending, rather than withdraw it, when the wait is given up. */
  readonly keepPending?: boolean;
}

const GUARDED = Symbol.for("guardd-client/ai.guarded");

/** How one tool is guarded, kept on its wrapped tool. */
interface Guarded {
  readonly client: GuardClient;
  readonly name: string;
  readonly cost: string | undefined;
  readonly own: NeedsApproval | undefined;
}

/** The `Idempotency-Key` of a tool call: its ID as it is when it fits the header's rules. */
export function idempotencyKey(toolCallId: string): string {
  return /^[\x20-\x7e]{1,120}$/.test(toolCallId)
    ? `ai-sdk/${toolCallId}`
    : `ai-sdk/sha256:${createHash("sha256").update(toolCallId).digest("hex")}`;
}

function ask(guarded: Guarded, input: unknown, toolCallId: string): Promise<Decision> {
  return guarded.client.requestAction(guarded.name, input, { cost: guarded.cost, idempotencyKey: idempotencyKey(toolCallId) });
}

async function ownApproval(guarded: Guarded, input: unknown, options: unknown): Promise<boolean> {
  const own = guarded.own;
  if (typeof own === "function") return Boolean(await (own as (i: unknown, o: unknown) => boolean | PromiseLike<boolean>)(input, options));
  return own ?? false;
}

function isAsyncGeneratorFunction(fn: unknown): boolean {
  return Object.prototype.toString.call(fn) === "[object AsyncGeneratorFunction]";
}

/**
 * `tools`, each guarded: the same tool set, for `generateText`, `streamText`
 * or an agent. Every tool must have `execute` (a tool the app runs itself
 * never reaches the adapter). A tool's own `needsApproval` is kept: when it
 * asks the user, the guard is asked only once they consented (by `execute`),
 * so a call the user declines is never asked for, nor charged.
 */
export function guardTools<TOOLS extends Readonly<Record<string, ToolLike>>>(
  client: GuardClient,
  tools: TOOLS,
  options: GuardToolsOptions = {},
): TOOLS {
  const wrapped: Record<string, unknown> = {};
  for (const [name, tool] of Object.entries(tools)) {
    const execute = tool.execute;
    if (typeof execute !== "function") {
      throw new TypeError(`tool ${JSON.stringify(name)} has no execute: guardTools guards the tools it runs`);
    }
    const cost = options.cost?.[name];
    const guarded: Guarded = {
      client,
      name,
      cost: cost === undefined ? undefined : moneyText(cost, `cost of ${name}`),
      own: tool.needsApproval,
    };
    const rules = (signal: AbortSignal | undefined) => ({
      approvalTimeout: options.approvalTimeout,
      keepPending: options.keepPending ?? false,
      signal,
    });
    const start = async (input: unknown, call: ToolCallOptions) => {
      const decision = await ask(guarded, input, call.toolCallId);
      const { actionId, receipt } = await awaitDecision(client, decision, rules(call.abortSignal));
      return { actionId, tool: name, input, receipt };
    };
    wrapped[name] = {
      ...tool,
      [GUARDED]: guarded,
      needsApproval: async (input: unknown, call: ToolCallOptions): Promise<boolean> => {
        // The user first, when the tool asks them anyway: the guard is asked once they
        // consented, by execute, so a call they decline is never charged.
        if (await ownApproval(guarded, input, call)) return true;
        return (await ask(guarded, input, call.toolCallId)).decision === "pending_approval";
      },
      execute: isAsyncGeneratorFunction(execute)
        ? async function* (input: unknown, call: ToolCallOptions): AsyncGenerator<unknown, void, undefined> {
            const action = await start(input, call);
            // Each output is handed on as it comes; the outcome is reported once the stream ends.
            const iterator = inAction(action, () => (execute(input, call) as AsyncIterable<unknown>)[Symbol.asyncIterator]());
            for (;;) {
              let next: IteratorResult<unknown>;
              try {
                next = await inAction(action, () => iterator.next());
              } catch (error) {
                await reportFailure(client, action.actionId, error);
                throw error;
              }
              if (next.done) break;
              yield next.value;
            }
            await client.reportOutcome(action.actionId, "success");
          }
        : async (input: unknown, call: ToolCallOptions): Promise<unknown> => {
            const action = await start(input, call);
            return runAndReport(client, action, () => execute(input, call));
          },
    };
  }
  return wrapped as TOOLS;
}

function guardedOf(tool: unknown): Guarded | undefined {
  return typeof tool === "object" && tool !== null ? (tool as { [GUARDED]?: Guarded })[GUARDED] : undefined;
}

/** AI SDK 7's tool approval statuses the adapter gives. */
export type ToolApprovalStatus =
  | { type: "not-applicable" }
  | { type: "user-approval"; reason?: string }
  | { type: "denied"; reason: string };

interface ToolApprovalCall {
  readonly toolCall: { readonly toolCallId: string; readonly toolName: string; readonly input: unknown };
  readonly tools?: Readonly<Record<string, unknown>> | undefined;
  readonly messages?: unknown;
}

/**
 * For AI SDK 7's `toolApproval` option of `generateText` and `streamText`,
 * with tools from `guardTools`: a call the guard denies is `denied` with the
 * guard's reason (the SDK answers the model `execution-denied`, and the tool
 * never runs); a held one asks the user (`user-approval`, naming the action);
 * an allowed one needs no approval. A guarded tool whose own `needsApproval`
 * asks the user, and a tool that is not guarded, keep their own rule.
 */
export function guardToolApproval(): (call: ToolApprovalCall) => Promise<ToolApprovalStatus> {
  return async ({ toolCall, tools, messages }) => {
    const tool = tools?.[toolCall.toolName];
    const guarded = guardedOf(tool);
    const options = { toolCallId: toolCall.toolCallId, messages };
    if (guarded === undefined) {
      const own = (tool as ToolLike | undefined)?.needsApproval;
      const needs = typeof own === "function" ? await (own as (i: unknown, o: unknown) => unknown)(toolCall.input, options) : own;
      return needs ? { type: "user-approval" } : { type: "not-applicable" };
    }
    if (await ownApproval(guarded, toolCall.input, options)) return { type: "user-approval" };
    const decision = await ask(guarded, toolCall.input, toolCall.toolCallId);
    let status: string = decision.decision;
    let reason = decision.reason;
    if (status === "pending_approval") {
      // Asked again once the user approved: the operator may have decided since.
      const action = await guarded.client.getAction(decision.actionId);
      status = action.status;
      reason = action.reason;
      if (status === "pending_approval") {
        return { type: "user-approval", reason: `held by the guard for an operator's approval (action ${decision.actionId})` };
      }
    }
    if (status === "denied" || status === "cancelled") {
      return { type: "denied", reason: new ActionDenied(decision.actionId, reason ?? { code: status }).message };
    }
    return { type: "not-applicable" };
  };
}

interface MessageLike {
  readonly role: string;
  readonly content: unknown;
}

interface Part {
  readonly type?: unknown;
  readonly approvalId?: unknown;
  readonly toolCallId?: unknown;
  readonly toolName?: unknown;
  readonly input?: unknown;
  readonly approved?: unknown;
  readonly reason?: unknown;
}

function parts(message: MessageLike | undefined): Part[] {
  return message && Array.isArray(message.content) ? (message.content as Part[]) : [];
}

/**
 * Withdraws (cancels on the service) the held action of every guarded tool
 * call whose approval the user declined in the last message of `messages`:
 * the SDK answers the model `execution-denied` and never runs the tool, so
 * the guard must not keep it pending for an operator. Call it with the
 * messages about to go to `generateText` or `streamText`. Returns the
 * action IDs withdrawn; one an operator decided meanwhile is left as it is.
 */
export async function withdrawDeclined(
  tools: Readonly<Record<string, unknown>>,
  messages: readonly MessageLike[],
): Promise<string[]> {
  const last = messages.at(-1);
  if (last?.role !== "tool") return [];
  const requests = new Map<unknown, unknown>();
  const calls = new Map<unknown, Part>();
  for (const message of messages) {
    if (message.role !== "assistant") continue;
    for (const part of parts(message)) {
      if (part.type === "tool-approval-request") requests.set(part.approvalId, part.toolCallId);
      if (part.type === "tool-call") calls.set(part.toolCallId, part);
    }
  }
  const withdrawn: string[] = [];
  for (const part of parts(last)) {
    if (part.type !== "tool-approval-response" || part.approved !== false) continue;
    const call = calls.get(requests.get(part.approvalId));
    const guarded = call && typeof call.toolName === "string" ? guardedOf(tools[call.toolName]) : undefined;
    if (call === undefined || guarded === undefined) continue;
    // A tool that asks the user itself asks the guard only once they consented: nothing to withdraw.
    if (await ownApproval(guarded, call.input, { toolCallId: call.toolCallId, messages })) continue;
    const decision = await ask(guarded, call.input, String(call.toolCallId));
    if (decision.decision !== "pending_approval") continue;
    const why = `declined in the app${typeof part.reason === "string" && part.reason ? `: ${part.reason}` : ""}`;
    try {
      await guarded.client.cancel(decision.actionId, why);
      withdrawn.push(decision.actionId);
    } catch (error) {
      if (!(error instanceof InvalidState)) throw error;
    }
  }
  return withdrawn;
}
