/**
 * What the service answers, as read-only typed values (parsed in `parse.ts`).
 *
 * Field names are the API's JSON keys in camelCase (`action_id` is
 * `actionId`); docs/api.md and the OpenAPI document describe them. Money
 * (`budget`, `spent`, `remaining`, `cost`) is an exact decimal string; other
 * numbers are numbers. A value the answer leaves out is `null`. Objects the
 * service writes freely (a denial `reason`, a tool's `input`, log records)
 * stay as parsed JSON, with the service's own keys.
 */

import type { DenialReason } from "./errors.js";

/** The words `Decision.decision` can be. */
export type DecisionKind = "allowed" | "denied" | "pending_approval";

/** Two signed log lines that prove an allowance (docs/receipts.md). */
export type Receipt = readonly [string, string];

/** The answer to an action request, an approval or a rejection. */
export interface Decision {
  readonly decision: DecisionKind;
  readonly actionId: string;
  /** Set when allowed: what was charged. */
  readonly cost: string | null;
  /** Set when allowed: the budget left. */
  readonly remaining: string | null;
  /** Set when denied: `{code, ...}`. */
  readonly reason: DenialReason | null;
  /** Set when allowed: for the tool's executor to check with `verifyReceipt`. */
  readonly receipt: Receipt | null;
  /** The operator's grant the allowance drew on, instead of an approval. */
  readonly grantId: string | null;
  /** The policy rule that decided it, when one did. */
  readonly rule: string | null;
}

/** What an action can be: `cancelled` once withdrawn. */
export type ActionStatus = "pending_approval" | "allowed" | "denied" | "completed" | "cancelled";

/** One action as the service holds it. */
export interface Action {
  readonly actionId: string;
  readonly tool: string;
  readonly input: unknown;
  readonly cost: string;
  readonly status: ActionStatus;
  /** `success`, `failure` or `harmful` once reported. */
  readonly outcome: string | null;
  /** Set when denied (code `approval_expired` when nobody decided in time) or cancelled. */
  readonly reason: DenialReason | null;
  readonly approvedBy: string | null;
  readonly note: string | null;
  /** Set once allowed. */
  readonly receipt: Receipt | null;
  readonly grantId: string | null;
}

/** The last record of a log: its `seq` (-1 for an empty log) and `hash`. */
export interface Head {
  readonly seq: number;
  readonly hash: string;
}

/** One scar: `severity` is `minor`, `moderate`, `severe` or `fatal`. */
export interface Scar {
  readonly seq: number;
  readonly severity: string;
  readonly reason: string;
  readonly actionId: string | null;
}

/** An agent's state, as the service rebuilds it from the agent's log. */
export interface AgentStatus {
  readonly agentId: string;
  readonly alive: boolean;
  readonly terminationReason: string | null;
  readonly budget: string;
  readonly spent: string;
  /** `budget - spent`; negative only when a new policy set a budget below what was spent. */
  readonly remaining: string;
  readonly scarScore: number;
  readonly scarLimit: number;
  readonly scars: readonly Scar[];
  readonly actionsAllowed: number;
  readonly actionsDenied: number;
  readonly actionsPending: number;
  readonly head: Head;
  readonly publicKey: string;
}

/** What a policy says about one tool. `maxCalls` null: no cap. */
export interface ToolRule {
  readonly cost: string;
  readonly requiresApproval: boolean;
  readonly maxCalls: number | null;
  /** null: the policy's own. */
  readonly approvalTimeoutSecs: number | null;
}

/** At most `maxActions` allowed actions within the trailing `windowSecs`. */
export interface RateLimit {
  readonly maxActions: number;
  readonly windowSecs: number;
}

/** An agent's policy in force, every default filled in. `default` null: other tools are denied. */
export interface Policy {
  readonly budget: string;
  readonly scarLimit: number;
  readonly tools: Readonly<Record<string, ToolRule>>;
  readonly default: ToolRule | null;
  readonly rateLimit: RateLimit | null;
  /** null: held actions wait for ever. */
  readonly approvalTimeoutSecs: number | null;
}

/** A new agent: its status and its token (`agt_<agent_id>.<mac>`). */
export interface CreatedAgent {
  readonly agent: AgentStatus;
  readonly token: string;
  readonly agentId: string;
}

/** The first bad record of a log: its 1-based `line`, its `seq` when readable, and why. */
export interface VerifyFailure {
  readonly line: number;
  readonly seq: number | null;
  readonly reason: string;
}

/** One agent of `listAgents`: `active` (with `status`) or `quarantined` (with `error` and `failure`). */
export interface AgentListEntry {
  readonly agentId: string;
  readonly state: string;
  readonly status: AgentStatus | null;
  readonly error: string | null;
  readonly failure: VerifyFailure | null;
}

/** What an operator decides on, and the `cost` approval would charge. */
export interface PendingAction {
  readonly actionId: string;
  readonly tool: string;
  readonly input: unknown;
  readonly cost: string;
}

/** An action waiting for approval: when it was requested (ISO 8601 UTC) and its record's `seq`. */
export interface PendingEntry {
  readonly requestedAt: string;
  readonly seq: number;
  readonly action: PendingAction;
}

/** A log record, exactly as the service wrote it (docs/records.md). */
export type LogRecord = Readonly<Record<string, unknown>>;

/** Records with `seq` after the page's `after`, and the log's head when read. */
export interface LogPage {
  readonly records: readonly LogRecord[];
  readonly head: Head;
}

/**
 * The operator a token names: `name` (what records carry as `by`), `id` (their
 * `by_id`: `oidc:<issuer>#<sub>`, `token:<token_id>` or `admin-token`), every
 * role held, highest first, and `via`: how they authenticated.
 */
export interface Me {
  readonly name: string;
  readonly id: string;
  readonly roles: readonly string[];
  readonly via: string;
}

/** The service's verification of a log: when `ok`, `publicKey` and `head`; else `failure`. */
export interface VerifyReport {
  readonly ok: boolean;
  readonly records: number;
  readonly publicKey: string | null;
  readonly head: Head | null;
  readonly failure: VerifyFailure | null;
}
