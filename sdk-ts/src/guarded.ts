/**
 * `guarded(fn)`: ask the service, wait for approval, run, report.
 *
 * 1. the call's input (its single argument, or the array of its arguments,
 *    or what the `input` option makes of them) is checked JSON-safe;
 * 2. the action is requested; while it is `pending_approval` it is
 *    long-polled (`approvalTimeout` seconds at most, then ApprovalTimeout).
 *    A wait that ends without a decision (the timeout, the `signal` aborted)
 *    withdraws the action (`cancel`) unless `keepPending`: the tool will not
 *    run, so a late approval must not charge for it;
 * 3. denied, at request time or when an operator decided: ActionDenied;
 * 4. allowed: the tool runs, with `currentAction()` giving its action ID and
 *    receipt; then `success` is reported, or `failure` and the tool's own
 *    error is thrown again, the very same object.
 *
 * A report that fails after the tool threw is a process warning, and the
 * tool's error is thrown all the same: it is the one the caller needs.
 */

import { AsyncLocalStorage } from "node:async_hooks";

import { ActionDenied, APIError, ApprovalTimeout, GuardError, InvalidState, UnexpectedActionState } from "./errors.js";
import { checkInput, type Money, moneyText } from "./json.js";
import type { Action, AgentStatus, Decision, Receipt } from "./models.js";
import { MAX_WAIT, type OutcomeStatus, type RequestActionOptions } from "./requests.js";

export const MAX_DETAIL = 1000; // characters of the error text sent with a failure outcome
const WITHDRAW_WITHIN = 10; // seconds a cancel may take once the wait was given up
export const WHY_TIMEOUT = "guarded: no decision within approvalTimeout";
export const WHY_ABORTED = "guarded: the waiting call was aborted";

/** What `guarded` needs of a client: an agent's own action endpoints. */
export interface ActionsClient {
  requestAction(tool: string, input?: unknown, options?: RequestActionOptions): Promise<Decision>;
  getAction(actionId: string, options?: { wait?: number; signal?: AbortSignal }): Promise<Action>;
  reportOutcome(actionId: string, status: OutcomeStatus, detail?: string): Promise<AgentStatus>;
  cancel(actionId: string, reason?: string, options?: { signal?: AbortSignal }): Promise<Action>;
}

export interface GuardedOptions<A extends unknown[] = unknown[]> {
  /** The tool's name in the policy; the function's own name by default. */
  readonly tool?: string;
  /** What to charge, at least the policy's cost for the tool. */
  readonly cost?: Money;
  /** Seconds to wait for an operator at most; without it, as long as the service holds the action. */
  readonly approvalTimeout?: number;
  /** Leave the action pending, rather than withdraw it, when the wait is given up. */
  readonly keepPending?: boolean;
  /** The action's input from the call's arguments; by default the single argument, else the array of them. */
  readonly input?: (...args: A) => unknown;
  /** Aborting it gives up a wait for approval (the action is withdrawn unless `keepPending`). */
  readonly signal?: AbortSignal;
}

/** The guarded call running now, as `currentAction()` tells the tool. */
export interface CurrentAction {
  readonly actionId: string;
  readonly tool: string;
  readonly input: unknown;
  /** For the tool, or the service it calls, to check with `verifyReceipt`. */
  readonly receipt: Receipt | null;
}

const running = new AsyncLocalStorage<CurrentAction>();

/** Inside a tool that `guarded` runs: its action and receipt; undefined elsewhere. */
export function currentAction(): CurrentAction | undefined {
  return running.getStore();
}

/** A tool, its name and how it is guarded, checked once when it is wrapped. */
export class ToolSpec<A extends unknown[], R> {
  readonly fn: (...args: A) => R;
  readonly name: string;
  readonly cost: string | undefined;
  readonly approvalTimeout: number | undefined;
  readonly keepPending: boolean;
  readonly signal: AbortSignal | undefined;
  readonly #input: ((...args: A) => unknown) | undefined;

  constructor(fn: (...args: A) => R, options: GuardedOptions<A>) {
    if (typeof fn !== "function") throw new TypeError(`guarded() needs a function, not ${String(fn)}`);
    const name = options.tool ?? fn.name;
    if (typeof name !== "string" || !name) throw new TypeError("the function has no name; pass guarded(fn, { tool: ... })");
    const timeout = options.approvalTimeout;
    if (timeout !== undefined && !(typeof timeout === "number" && timeout >= 0)) {
      throw new RangeError(`approvalTimeout must be >= 0 seconds, not ${String(timeout)}`);
    }
    this.fn = fn;
    this.name = name;
    this.cost = options.cost === undefined ? undefined : moneyText(options.cost, "cost");
    this.approvalTimeout = timeout;
    this.keepPending = options.keepPending ?? false;
    this.signal = options.signal;
    this.#input = options.input;
  }

  /** The action's input for a call with `args`, checked before anything is sent. */
  input(args: A): unknown {
    const input = this.#input ? this.#input(...args) : args.length === 1 ? args[0] : args;
    checkInput(this.name, input);
    return input;
  }
}

/** What `guarded` returns: the tool with the same arguments, always async. */
export type GuardedFunction<A extends unknown[], R> = (...args: A) => Promise<Awaited<R>>;

export function guard<A extends unknown[], R>(client: ActionsClient, spec: ToolSpec<A, R>): GuardedFunction<A, R> {
  const guardedTool = async (...args: A): Promise<Awaited<R>> => {
    const input = spec.input(args);
    const decision = await client.requestAction(spec.name, input, { cost: spec.cost });
    const { actionId, receipt } = await awaitDecision(client, decision, spec);
    return runAndReport(client, { actionId, tool: spec.name, input, receipt }, () => spec.fn(...args));
  };
  Object.defineProperty(guardedTool, "name", { value: spec.name });
  return guardedTool;
}

/** How a held action is waited for. */
export interface WaitRules {
  readonly approvalTimeout: number | undefined;
  readonly keepPending: boolean;
  readonly signal: AbortSignal | undefined;
}

/** The allowed action's ID and receipt, once decided; throws when it is not allowed. */
export async function awaitDecision(
  client: ActionsClient,
  decision: Decision,
  rules: WaitRules,
): Promise<{ actionId: string; receipt: Receipt | null }> {
  if (decision.decision === "denied") throw new ActionDenied(decision.actionId, decision.reason ?? { code: "denied" });
  if (decision.decision === "allowed") return { actionId: decision.actionId, receipt: decision.receipt };
  try {
    const action = await poll(client, decision.actionId, rules);
    return { actionId: settle(action), receipt: action.receipt };
  } catch (error) {
    if (error instanceof ApprovalTimeout) {
      if (rules.keepPending) throw error;
      await withdraw(client, decision.actionId, WHY_TIMEOUT);
      throw new ApprovalTimeout(error.actionId, error.timeout, true);
    }
    if (rules.signal?.aborted && !rules.keepPending) await withdraw(client, decision.actionId, WHY_ABORTED);
    throw error;
  }
}

async function poll(client: ActionsClient, actionId: string, rules: WaitRules): Promise<Action> {
  const deadline = rules.approvalTimeout === undefined ? null : performance.now() / 1000 + rules.approvalTimeout;
  for (;;) {
    const left = deadline === null ? MAX_WAIT : deadline - performance.now() / 1000;
    if (left <= 0) throw new ApprovalTimeout(actionId, rules.approvalTimeout as number);
    const action = await client.getAction(actionId, {
      wait: Math.min(MAX_WAIT, left),
      ...(rules.signal ? { signal: rules.signal } : {}),
    });
    if (action.status !== "pending_approval") return action;
  }
}

/** The action ID of an action that left `pending_approval` allowed; throws otherwise. */
export function settle(action: Action): string {
  if (action.status === "allowed") return action.actionId;
  if (action.status === "denied" || action.status === "cancelled") {
    // denied: by an operator, a re-run check, or approval_expired;
    // cancelled: withdrawn by someone else (the admin) meanwhile.
    throw new ActionDenied(action.actionId, action.reason ?? { code: action.status });
  }
  throw new UnexpectedActionState(action.actionId, action.status);
}

/** Cancels a held action whose wait was given up; a failure is only a warning. */
export async function withdraw(client: ActionsClient, actionId: string, why: string): Promise<void> {
  try {
    await client.cancel(actionId, why, { signal: AbortSignal.timeout(WITHDRAW_WITHIN * 1000) });
  } catch (error) {
    if (!(error instanceof GuardError) && !(error instanceof Error && error.name === "TimeoutError")) throw error;
    // Decided in the meantime (approved as the wait ended, say): the tool does
    // not run all the same; the service's message says who decided what.
    const more = error instanceof InvalidState ? "" : "; it may stay pending";
    warn(`could not withdraw action ${actionId}${more}: ${said(error)}`, "GUARD_WITHDRAW_FAILED");
  }
}

/** Runs an allowed tool as `action`, then reports its outcome. */
export async function runAndReport<R>(client: ActionsClient, action: CurrentAction, run: () => R): Promise<Awaited<R>> {
  let result: Awaited<R>;
  try {
    result = await inAction(action, async () => await run());
  } catch (error) {
    await reportFailure(client, action.actionId, error);
    throw error;
  }
  await client.reportOutcome(action.actionId, "success");
  return result;
}

/** `run()` with `currentAction()` giving `action`. */
export function inAction<T>(action: CurrentAction, run: () => T): T {
  return running.run(action, run);
}

/** Reports that the tool of `actionId` failed with `error`; a report lost is only a warning. */
export async function reportFailure(client: ActionsClient, actionId: string, error: unknown): Promise<void> {
  try {
    await client.reportOutcome(actionId, "failure", failureDetail(error));
  } catch (lost) {
    if (!(lost instanceof GuardError)) throw lost;
    warn(`could not report the failure of action ${actionId}: ${said(lost)}`, "GUARD_LOST_REPORT");
  }
}

export function failureDetail(error: unknown): string {
  const text = error instanceof Error ? `${error.name}: ${error.message}` : `thrown: ${String(error)}`;
  return text.slice(0, MAX_DETAIL);
}

/** An error in a warning's words: an answer's status and code, then its message. */
function said(error: Error): string {
  return error instanceof APIError ? `${error.status} ${error.code}: ${error.message}` : error.message;
}

function warn(message: string, code: string): void {
  process.emitWarning(message, { type: "GuardWarning", code });
}
