/**
 * Every request the clients make, built without I/O: the clients hand these
 * to their `Sender` and return what `parse` makes of the answer.
 */

import { randomUUID } from "node:crypto";

import { checkInput, type Money, moneyText, objectText } from "./json.js";
import type { Action, AgentListEntry, AgentStatus, CreatedAgent, Decision, LogPage, Me, PendingEntry, Policy, VerifyReport } from "./models.js";
import {
  parseAction,
  parseAgents,
  parseCreated,
  parseDecision,
  parseLogPage,
  parseMe,
  parsePending,
  parsePolicy,
  parsePublicKey,
  parseStatus,
  parseToken,
  parseVerifyReport,
} from "./parse.js";

/**
 * One HTTP request, ready to be sent as often as the retry policy allows.
 * `wait` is how long (seconds) the service may hold the answer (long-poll);
 * `resendable` says whether it may be sent again after an attempt the
 * service may have acted on.
 */
export interface Request<T> {
  readonly method: "GET" | "POST" | "PUT";
  readonly path: string;
  readonly parse: (body: unknown) => T;
  readonly params?: Readonly<Record<string, string>>;
  readonly body?: string;
  readonly headers?: Readonly<Record<string, string>>;
  readonly wait?: number;
  readonly resendable: boolean;
}

export const MAX_WAIT = 60; // seconds; the service's bound for ?wait=
export const MAX_LOG_LIMIT = 5000;
export const DEFAULT_LOG_LIMIT = 500;

/** What an outcome report may say; `harmful` only the admin may report. */
export type OutcomeStatus = "success" | "failure" | "harmful";

/** A policy as the service takes it (docs/api.md): plain JSON, money as numbers. */
export type PolicyBody = Readonly<Record<string, unknown>>;

const AGENT_TOKEN = /^agt_([A-Za-z0-9_-]{1,64})\.[A-Za-z0-9_-]+$/;

/** The agent ID inside an agent token `agt_<agent_id>.<mac>`, or null. */
export function agentIdFromToken(token: string): string | null {
  return AGENT_TOKEN.exec(token)?.[1] ?? null;
}

export function newIdempotencyKey(): string {
  return randomUUID().replaceAll("-", "");
}

function segment(value: string): string {
  return encodeURIComponent(value);
}

export function waitParam(wait: number): string {
  if (typeof wait !== "number" || !(wait > 0 && wait <= MAX_WAIT)) {
    throw new RangeError(`wait must be a number of seconds in (0, ${MAX_WAIT}], not ${String(wait)}`);
  }
  if (Number.isInteger(wait)) return String(wait);
  // Milliseconds are plenty; round up so a tiny wait never becomes 0.
  return String(Math.ceil(wait * 1000) / 1000);
}

export interface RequestActionOptions {
  /** What to charge, at least the policy's cost for the tool. */
  readonly cost?: Money | undefined;
  /** The key every retry of this request carries; a new one per call unless given. */
  readonly idempotencyKey?: string | undefined;
}

/** Requests on one agent's own endpoints (agent token, or admin). */
export class AgentRequests {
  readonly agentId: string;
  readonly path: string;

  constructor(agentId: string) {
    this.agentId = agentId;
    this.path = `/v1/agents/${segment(agentId)}`;
  }

  requestAction(tool: string, input: unknown = null, options: RequestActionOptions = {}): Request<Decision> {
    if (typeof tool !== "string" || !tool) throw new TypeError(`tool must be a non-empty string, not ${String(tool)}`);
    checkInput(tool, input);
    const cost = options.cost === undefined ? undefined : moneyText(options.cost, "cost");
    return {
      method: "POST",
      path: `${this.path}/actions`,
      parse: parseDecision,
      body: objectText({ tool, input }, { cost }),
      // One key for every attempt: the service decides and charges once.
      headers: { "Idempotency-Key": options.idempotencyKey ?? newIdempotencyKey() },
      resendable: true,
    };
  }

  getAction(actionId: string, wait?: number): Request<Action> {
    return {
      method: "GET",
      path: `${this.path}/actions/${segment(actionId)}`,
      parse: parseAction,
      ...(wait === undefined ? {} : { params: { wait: waitParam(wait) }, wait }),
      resendable: true,
    };
  }

  reportOutcome(actionId: string, status: OutcomeStatus, detail?: string): Request<AgentStatus> {
    // Resending is safe: a second copy gets 409 invalid_state, which the
    // client checks against the action's recorded outcome.
    return {
      method: "POST",
      path: `${this.path}/actions/${segment(actionId)}/outcome`,
      parse: parseStatus,
      body: objectText({ status, detail }),
      resendable: true,
    };
  }

  status(): Request<AgentStatus> {
    return { method: "GET", path: this.path, parse: parseStatus, resendable: true };
  }

  cancel(actionId: string, reason?: string): Request<Action> {
    // Resending is safe, as for outcomes: a second copy gets 409 invalid_state.
    return {
      method: "POST",
      path: `${this.path}/actions/${segment(actionId)}/cancel`,
      parse: parseAction,
      body: objectText({ reason }),
      resendable: true,
    };
  }

  policy(): Request<Policy> {
    return { method: "GET", path: `${this.path}/policy`, parse: parsePolicy, resendable: true };
  }
}

/** Requests only the admin token may make. */
export class AdminRequests {
  agent(agentId: string): AgentRequests {
    return new AgentRequests(agentId);
  }

  publicKey(): Request<string> {
    return { method: "GET", path: "/v1/public-key", parse: parsePublicKey, resendable: true };
  }

  createAgent(agentId: string, policy: PolicyBody): Request<CreatedAgent> {
    return {
      method: "POST",
      path: "/v1/agents",
      parse: parseCreated,
      body: objectText({ agent_id: agentId, policy }),
      resendable: false,
    };
  }

  listAgents(): Request<AgentListEntry[]> {
    return { method: "GET", path: "/v1/agents", parse: parseAgents, resendable: true };
  }

  reissueToken(agentId: string): Request<string> {
    return { method: "GET", path: `${this.agent(agentId).path}/token`, parse: parseToken, resendable: true };
  }

  setPolicy(agentId: string, policy: PolicyBody): Request<AgentStatus> {
    // Resending puts the same policy again: safe.
    return { method: "PUT", path: `${this.agent(agentId).path}/policy`, parse: parseStatus, body: JSON.stringify(policy), resendable: true };
  }

  listPending(agentId: string): Request<PendingEntry[]> {
    return { method: "GET", path: `${this.agent(agentId).path}/actions/pending`, parse: parsePending, resendable: true };
  }

  approve(agentId: string, actionId: string, approver: string, note?: string): Request<Decision> {
    return {
      method: "POST",
      path: `${this.agent(agentId).path}/actions/${segment(actionId)}/approve`,
      parse: parseDecision,
      body: objectText({ approver, note }),
      resendable: false,
    };
  }

  reject(agentId: string, actionId: string, approver: string, reason: string, scar?: string): Request<Decision> {
    return {
      method: "POST",
      path: `${this.agent(agentId).path}/actions/${segment(actionId)}/reject`,
      parse: parseDecision,
      body: objectText({ approver, reason, scar }),
      resendable: false,
    };
  }

  addScar(agentId: string, severity: string, reason: string, actionId?: string, by?: string): Request<AgentStatus> {
    return {
      method: "POST",
      path: `${this.agent(agentId).path}/scars`,
      parse: parseStatus,
      body: objectText({ severity, reason, action_id: actionId, by }),
      resendable: false,
    };
  }

  terminate(agentId: string, reason: string, by: string): Request<AgentStatus> {
    return {
      method: "POST",
      path: `${this.agent(agentId).path}/terminate`,
      parse: parseStatus,
      body: objectText({ reason, by }),
      resendable: false,
    };
  }

  logPage(agentId: string, after = -1, limit = DEFAULT_LOG_LIMIT): Request<LogPage> {
    if (!Number.isInteger(after) || after < -1) throw new RangeError(`after must be an integer >= -1, not ${String(after)}`);
    if (!Number.isInteger(limit) || limit < 1 || limit > MAX_LOG_LIMIT) {
      throw new RangeError(`limit must be an integer in [1, ${MAX_LOG_LIMIT}], not ${String(limit)}`);
    }
    return {
      method: "GET",
      path: `${this.agent(agentId).path}/log`,
      parse: parseLogPage,
      params: { after: String(after), limit: String(limit) },
      resendable: true,
    };
  }

  me(): Request<Me> {
    return { method: "GET", path: "/v1/me", parse: parseMe, resendable: true };
  }

  verify(agentId: string): Request<VerifyReport> {
    return { method: "GET", path: `${this.agent(agentId).path}/verify`, parse: parseVerifyReport, resendable: true };
  }
}
