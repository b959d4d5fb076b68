/**
 * The clients: `GuardClient` for one agent's own actions, `AdminClient` for
 * an operator. Each method builds its request in `requests.ts`, sends it with
 * the `Sender` and returns a typed value (`models.ts`).
 */

import { Discovery, type Found } from "./config.js";
import { GuardSetupError, InvalidState } from "./errors.js";
import { type ActionsClient, guard, type GuardedFunction, type GuardedOptions, ToolSpec } from "./guarded.js";
import type {
  Action,
  AgentListEntry,
  AgentStatus,
  CreatedAgent,
  Decision,
  LogPage,
  LogRecord,
  Me,
  PendingEntry,
  Policy,
  VerifyReport,
} from "./models.js";
import { nextLogAfter } from "./parse.js";
import {
  AdminRequests,
  AgentRequests,
  agentIdFromToken,
  DEFAULT_LOG_LIMIT,
  type OutcomeStatus,
  type PolicyBody,
  type RequestActionOptions,
} from "./requests.js";
import { Retry, type RetryOptions } from "./retry.js";
import { Sender } from "./sender.js";

export const DEFAULT_TIMEOUT = 30; // seconds

export interface ClientOptions {
  /** The token; else found as docs/sdk-ts.md, "Configuration", says. */
  readonly token?: string;
  /** The service's address; else `GUARD_URL`, else `http://127.0.0.1:9200`. */
  readonly baseUrl?: string;
  /** Seconds to wait for an answer (a long-poll's `wait` is added). */
  readonly timeout?: number;
  readonly retry?: Retry | RetryOptions;
}

export interface GuardClientOptions extends ClientOptions {
  /** The agent; read from its token by default. */
  readonly agentId?: string;
}

/** Options of a call that may be given up: aborting `signal` throws its reason. */
export interface CallOptions {
  readonly signal?: AbortSignal;
}

export interface GetActionOptions extends CallOptions {
  /** Seconds (0 < wait <= 60) the service may hold the answer while the action is pending. */
  readonly wait?: number;
}

abstract class Connection {
  readonly baseUrl: string;
  /** Where the token was found, e.g. `environment variable GUARD_AGENT_TOKEN`. */
  readonly tokenSource: string;
  readonly timeout: number;
  readonly retry: Retry;
  protected readonly sender: Sender;

  protected constructor(url: Found, token: Found, options: ClientOptions) {
    const timeout = options.timeout ?? DEFAULT_TIMEOUT;
    if (!(typeof timeout === "number" && timeout > 0)) throw new RangeError(`timeout must be a number of seconds > 0, not ${String(timeout)}`);
    this.baseUrl = url.value;
    this.tokenSource = token.source;
    this.timeout = timeout;
    this.retry = options.retry instanceof Retry ? options.retry : new Retry(options.retry);
    this.sender = new Sender(this.baseUrl, token.value, timeout, this.retry);
  }
}

/** An agent's connection to the guard service. */
export class GuardClient extends Connection implements ActionsClient {
  readonly #requests: AgentRequests;

  constructor(options: GuardClientOptions = {}) {
    const discovery = new Discovery();
    const url = discovery.baseUrl(options.baseUrl);
    const token = discovery.agentToken(options.token);
    const agentId = options.agentId ?? agentIdFromToken(token.value);
    if (!agentId) {
      throw new GuardSetupError(
        `no agent ID: the agent token from ${token.source} is not of the form agt_<agent_id>.<mac>, and no agentId option was given`,
        ["the agentId option: not given", token.source],
      );
    }
    super(url, token, options);
    this.#requests = new AgentRequests(agentId);
  }

  get agentId(): string {
    return this.#requests.agentId;
  }

  /** Asks to run `tool`. Every retry of this call carries one `Idempotency-Key`
   * (a new one per call unless given), so the service decides and charges once. */
  requestAction(tool: string, input: unknown = null, options: RequestActionOptions = {}): Promise<Decision> {
    return this.sender.send(this.#requests.requestAction(tool, input, options));
  }

  /** The action; with `wait`, the service answers as soon as it leaves `pending_approval`. */
  getAction(actionId: string, options: GetActionOptions = {}): Promise<Action> {
    return this.sender.send(this.#requests.getAction(actionId, options.wait), options.signal);
  }

  /** Reports `success` or `failure` of an allowed action; returns the agent's status. */
  reportOutcome(actionId: string, status: OutcomeStatus, detail?: string): Promise<AgentStatus> {
    return reportOutcome(this.sender, this.#requests, actionId, status, detail);
  }

  /** The agent's status: budget, `spent`, `remaining`, scars, counters. */
  status(): Promise<AgentStatus> {
    return this.sender.send(this.#requests.status());
  }

  /** The agent's policy in force, every default filled in. */
  policy(): Promise<Policy> {
    return this.sender.send(this.#requests.policy());
  }

  /** Withdraws a pending action: never charged, and a late approval is refused.
   * InvalidState if it is no longer pending. */
  cancel(actionId: string, reason?: string, options: CallOptions = {}): Promise<Action> {
    return cancel(this.sender, this.#requests, actionId, reason, options.signal);
  }

  /** The tool, wrapped: each call asks first, waits for approval, runs and reports
   * (see `guarded.ts`). Throws ActionDenied on a denial and ApprovalTimeout after
   * `approvalTimeout` seconds pending. */
  guarded<A extends unknown[], R>(fn: (...args: A) => R, options: GuardedOptions<A> = {}): GuardedFunction<A, R> {
    return guard(this, new ToolSpec(fn, options));
  }
}

/** An operator's connection: every admin endpoint, and the agent endpoints on any agent. */
export class AdminClient extends Connection {
  readonly #requests = new AdminRequests();

  constructor(options: ClientOptions = {}) {
    const discovery = new Discovery();
    const url = discovery.baseUrl(options.baseUrl);
    super(url, discovery.adminToken(options.token), options);
  }

  /** The hex Ed25519 key that signs every log. */
  publicKey(): Promise<string> {
    return this.sender.send(this.#requests.publicKey());
  }

  /** Creates an agent; returns its status and its token. */
  createAgent(agentId: string, policy: PolicyBody): Promise<CreatedAgent> {
    return this.sender.send(this.#requests.createAgent(agentId, policy));
  }

  /** Every agent, active (with its `status`) or quarantined (with `error`). */
  listAgents(): Promise<AgentListEntry[]> {
    return this.sender.send(this.#requests.listAgents());
  }

  reissueToken(agentId: string): Promise<string> {
    return this.sender.send(this.#requests.reissueToken(agentId));
  }

  agentStatus(agentId: string): Promise<AgentStatus> {
    return this.sender.send(this.#requests.agent(agentId).status());
  }

  /** The agent's policy in force, every default filled in. */
  policy(agentId: string): Promise<Policy> {
    return this.sender.send(this.#requests.agent(agentId).policy());
  }

  /** Replaces a live agent's policy; returns the agent's status. */
  setPolicy(agentId: string, policy: PolicyBody): Promise<AgentStatus> {
    return this.sender.send(this.#requests.setPolicy(agentId, policy));
  }

  requestAction(agentId: string, tool: string, input: unknown = null, options: RequestActionOptions = {}): Promise<Decision> {
    return this.sender.send(this.#requests.agent(agentId).requestAction(tool, input, options));
  }

  getAction(agentId: string, actionId: string, options: GetActionOptions = {}): Promise<Action> {
    return this.sender.send(this.#requests.agent(agentId).getAction(actionId, options.wait), options.signal);
  }

  /** Reports `success`, `failure` or `harmful`; returns the agent's status. */
  reportOutcome(agentId: string, actionId: string, status: OutcomeStatus, detail?: string): Promise<AgentStatus> {
    return reportOutcome(this.sender, this.#requests.agent(agentId), actionId, status, detail);
  }

  /** Actions waiting for approval, oldest first. */
  listPending(agentId: string): Promise<PendingEntry[]> {
    return this.sender.send(this.#requests.listPending(agentId));
  }

  /** Withdraws a pending action on the agent's behalf (`by: admin` in the log). */
  cancel(agentId: string, actionId: string, reason?: string, options: CallOptions = {}): Promise<Action> {
    return cancel(this.sender, this.#requests.agent(agentId), actionId, reason, options.signal);
  }

  /** Approves a pending action; the checks run again, so the answer may be a denial. */
  approve(agentId: string, actionId: string, options: { approver: string; note?: string }): Promise<Decision> {
    return this.sender.send(this.#requests.approve(agentId, actionId, options.approver, options.note));
  }

  /** Rejects a pending action: a denial with code `rejected`; `scar` is a severity. */
  reject(agentId: string, actionId: string, options: { approver: string; reason: string; scar?: string }): Promise<Decision> {
    return this.sender.send(this.#requests.reject(agentId, actionId, options.approver, options.reason, options.scar));
  }

  /** Scars the agent; `by` (the operator) is logged in the `scar` record. */
  addScar(agentId: string, options: { severity: string; reason: string; actionId?: string; by?: string }): Promise<AgentStatus> {
    return this.sender.send(this.#requests.addScar(agentId, options.severity, options.reason, options.actionId, options.by));
  }

  /** Terminates the agent, for good. */
  terminate(agentId: string, options: { reason: string; by: string }): Promise<AgentStatus> {
    return this.sender.send(this.#requests.terminate(agentId, options.reason, options.by));
  }

  /** One page: records with `seq` > `after` (at most `limit`, 1 to 5000) and the head. */
  logPage(agentId: string, options: { after?: number; limit?: number } = {}): Promise<LogPage> {
    return this.sender.send(this.#requests.logPage(agentId, options.after, options.limit));
  }

  /** Every record with `seq` > `after`, pages of `limit` fetched as the loop goes. */
  log(agentId: string, options: { after?: number; limit?: number } = {}): AsyncGenerator<LogRecord, void, undefined> {
    const { after = -1, limit = DEFAULT_LOG_LIMIT } = options;
    this.#requests.logPage(agentId, after, limit); // bad options fail here, not at the first page
    return this.#log(agentId, after, limit);
  }

  async *#log(agentId: string, after: number, limit: number): AsyncGenerator<LogRecord, void, undefined> {
    let cursor: number | null = after;
    while (cursor !== null) {
      const page = await this.logPage(agentId, { after: cursor, limit });
      yield* page.records;
      cursor = nextLogAfter(page);
    }
  }

  /** The service's verification of the agent's log. */
  verify(agentId: string): Promise<VerifyReport> {
    return this.sender.send(this.#requests.verify(agentId));
  }

  /** Who this client's token is to the service: its name, `by_id`, roles and `via`. */
  me(): Promise<Me> {
    return this.sender.send(this.#requests.me());
  }
}

// ---- what both clients do on an agent's actions, beyond one request ----------

async function reportOutcome(
  sender: Sender,
  requests: AgentRequests,
  actionId: string,
  status: OutcomeStatus,
  detail: string | undefined,
): Promise<AgentStatus> {
  try {
    return await sender.send(requests.reportOutcome(actionId, status, detail));
  } catch (error) {
    // A resent report whose first copy was recorded: that outcome stands.
    if (!(error instanceof InvalidState && error.resent)) throw error;
    const recorded = await sender.send(requests.getAction(actionId));
    if (recorded.outcome !== status) throw error;
    return sender.send(requests.status());
  }
}

async function cancel(
  sender: Sender,
  requests: AgentRequests,
  actionId: string,
  reason: string | undefined,
  signal: AbortSignal | undefined,
): Promise<Action> {
  try {
    return await sender.send(requests.cancel(actionId, reason), signal);
  } catch (error) {
    // A resent cancel whose first copy was recorded: it stands.
    if (error instanceof InvalidState && error.resent) {
      const action = await sender.send(requests.getAction(actionId), signal);
      if (action.status === "cancelled") return action;
    }
    throw error;
  }
}
