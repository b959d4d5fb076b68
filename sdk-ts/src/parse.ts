/**
 * Answers to typed values: every field checked against the API's shapes, so a
 * body that is not what the API describes is an InvalidResponse naming the
 * field, never a value with holes in it.
 */

import { type DenialReason, InvalidResponse, isRecord } from "./errors.js";
import { moneyFromJson } from "./json.js";
import type {
  Action,
  ActionStatus,
  AgentListEntry,
  AgentStatus,
  CreatedAgent,
  Decision,
  DecisionKind,
  Head,
  LogPage,
  LogRecord,
  Me,
  PendingEntry,
  Policy,
  Receipt,
  Scar,
  ToolRule,
  VerifyFailure,
  VerifyReport,
} from "./models.js";

type Body = Record<string, unknown>;

function object(body: unknown, what = "the answer"): Body {
  if (!isRecord(body)) throw new InvalidResponse(`expected a JSON object as ${what}, got ${typeName(body)}`);
  return body;
}

function typeName(value: unknown): string {
  return value === null ? "null" : Array.isArray(value) ? "an array" : typeof value;
}

function str(body: Body, key: string): string {
  const value = body[key];
  if (typeof value !== "string") throw new InvalidResponse(`expected a string ${JSON.stringify(key)}, got ${typeName(value)}`);
  return value;
}

function optStr(body: Body, key: string): string | null {
  return body[key] == null ? null : str(body, key);
}

function int(body: Body, key: string): number {
  const value = body[key];
  if (!Number.isInteger(value)) throw new InvalidResponse(`expected an integer ${JSON.stringify(key)}, got ${JSON.stringify(value)}`);
  return value as number;
}

function optInt(body: Body, key: string): number | null {
  return body[key] == null ? null : int(body, key);
}

function num(body: Body, key: string): number {
  const value = body[key];
  if (typeof value !== "number") throw new InvalidResponse(`expected a number ${JSON.stringify(key)}, got ${JSON.stringify(value)}`);
  return value;
}

function optNum(body: Body, key: string): number | null {
  return body[key] == null ? null : num(body, key);
}

function money(body: Body, key: string): string {
  return moneyFromJson(num(body, key));
}

function optMoney(body: Body, key: string): string | null {
  return body[key] == null ? null : money(body, key);
}

function bool(body: Body, key: string): boolean {
  const value = body[key];
  if (typeof value !== "boolean") throw new InvalidResponse(`expected true or false as ${JSON.stringify(key)}, got ${JSON.stringify(value)}`);
  return value;
}

function list(body: Body, key: string): Body[] {
  const items = body[key];
  if (!Array.isArray(items) || !items.every(isRecord)) {
    throw new InvalidResponse(`expected a list of objects under ${JSON.stringify(key)}`);
  }
  return items;
}

function reason(body: Body): DenialReason | null {
  const value = body.reason;
  if (value == null) return null;
  if (!isRecord(value) || typeof value.code !== "string") {
    throw new InvalidResponse(`"reason" should be an object with a code, got ${JSON.stringify(value)}`);
  }
  return value as DenialReason;
}

function receipt(body: Body): Receipt | null {
  const value = body.receipt;
  if (value == null) return null;
  if (!Array.isArray(value) || value.length !== 2 || !value.every((line) => typeof line === "string")) {
    throw new InvalidResponse(`"receipt" should be a list of two record lines, got ${JSON.stringify(value)}`);
  }
  return [value[0] as string, value[1] as string];
}

const DECISIONS: ReadonlySet<string> = new Set<DecisionKind>(["allowed", "denied", "pending_approval"]);
const STATUSES: ReadonlySet<string> = new Set<ActionStatus>(["pending_approval", "allowed", "denied", "completed", "cancelled"]);

export function parseHead(body: unknown): Head {
  const obj = object(body, '"head"');
  return { seq: int(obj, "seq"), hash: str(obj, "hash") };
}

function parseScar(obj: Body): Scar {
  return { seq: int(obj, "seq"), severity: str(obj, "severity"), reason: str(obj, "reason"), actionId: optStr(obj, "action_id") };
}

export function parseStatus(body: unknown): AgentStatus {
  const obj = object(body);
  return {
    agentId: str(obj, "agent_id"),
    alive: bool(obj, "alive"),
    terminationReason: optStr(obj, "termination_reason"),
    budget: money(obj, "budget"),
    spent: money(obj, "spent"),
    remaining: money(obj, "remaining"),
    scarScore: int(obj, "scar_score"),
    scarLimit: num(obj, "scar_limit"),
    scars: list(obj, "scars").map(parseScar),
    actionsAllowed: int(obj, "actions_allowed"),
    actionsDenied: int(obj, "actions_denied"),
    actionsPending: int(obj, "actions_pending"),
    head: parseHead(obj.head),
    publicKey: str(obj, "public_key"),
  };
}

function parseToolRule(body: unknown): ToolRule {
  const obj = object(body, "a tool rule");
  return {
    cost: money(obj, "cost"),
    requiresApproval: bool(obj, "requires_approval"),
    maxCalls: optInt(obj, "max_calls"),
    approvalTimeoutSecs: optNum(obj, "approval_timeout_secs"),
  };
}

export function parsePolicy(body: unknown): Policy {
  const obj = object(body);
  const tools = object(obj.tools, '"tools"');
  const rate = obj.rate_limit == null ? null : object(obj.rate_limit, '"rate_limit"');
  return {
    budget: money(obj, "budget"),
    scarLimit: num(obj, "scar_limit"),
    tools: Object.fromEntries(Object.entries(tools).map(([name, rule]) => [name, parseToolRule(rule)])),
    default: obj.default == null ? null : parseToolRule(obj.default),
    rateLimit: rate === null ? null : { maxActions: int(rate, "max_actions"), windowSecs: num(rate, "window_secs") },
    approvalTimeoutSecs: optNum(obj, "approval_timeout_secs"),
  };
}

function parseFailure(body: unknown): VerifyFailure {
  const obj = object(body, '"failure"');
  return { line: int(obj, "line"), seq: optInt(obj, "seq"), reason: str(obj, "reason") };
}

function parseAgentEntry(obj: Body): AgentListEntry {
  return {
    agentId: str(obj, "agent_id"),
    state: str(obj, "state"),
    status: obj.status == null ? null : parseStatus(obj.status),
    error: optStr(obj, "error"),
    failure: obj.failure == null ? null : parseFailure(obj.failure),
  };
}

function parsePendingEntry(obj: Body): PendingEntry {
  const action = object(obj.action, '"action"');
  return {
    requestedAt: str(obj, "requested_at"),
    seq: int(obj, "seq"),
    action: { actionId: str(action, "action_id"), tool: str(action, "tool"), input: action.input ?? null, cost: money(action, "cost") },
  };
}

export function parseDecision(body: unknown): Decision {
  const obj = object(body);
  const decision = str(obj, "decision");
  if (!DECISIONS.has(decision)) throw new InvalidResponse(`unknown decision ${JSON.stringify(decision)}`);
  return {
    decision: decision as DecisionKind,
    actionId: str(obj, "action_id"),
    cost: optMoney(obj, "cost"),
    remaining: optMoney(obj, "remaining"),
    reason: reason(obj),
    receipt: receipt(obj),
    grantId: optStr(obj, "grant_id"),
    rule: optStr(obj, "rule"),
  };
}

export function parseAction(body: unknown): Action {
  const obj = object(body);
  const status = str(obj, "status");
  if (!STATUSES.has(status)) throw new InvalidResponse(`unknown action status ${JSON.stringify(status)}`);
  return {
    actionId: str(obj, "action_id"),
    tool: str(obj, "tool"),
    input: obj.input ?? null,
    cost: obj.cost == null ? "0" : money(obj, "cost"),
    status: status as ActionStatus,
    outcome: optStr(obj, "outcome"),
    reason: reason(obj),
    approvedBy: optStr(obj, "approved_by"),
    note: optStr(obj, "note"),
    receipt: receipt(obj),
    grantId: optStr(obj, "grant_id"),
  };
}

export function parseCreated(body: unknown): CreatedAgent {
  const obj = object(body);
  const agent = parseStatus(obj.agent);
  return { agent, token: str(obj, "token"), agentId: agent.agentId };
}

export function parseToken(body: unknown): string {
  return str(object(body), "token");
}

export function parsePublicKey(body: unknown): string {
  return str(object(body), "public_key");
}

export function parseAgents(body: unknown): AgentListEntry[] {
  return list(object(body), "agents").map(parseAgentEntry);
}

export function parsePending(body: unknown): PendingEntry[] {
  return list(object(body), "pending").map(parsePendingEntry);
}

export function parseLogPage(body: unknown): LogPage {
  const obj = object(body);
  return { records: list(obj, "records") as LogRecord[], head: parseHead(obj.head) };
}

export function parseVerifyReport(body: unknown): VerifyReport {
  const obj = object(body);
  return {
    ok: bool(obj, "ok"),
    records: int(obj, "records"),
    publicKey: optStr(obj, "public_key"),
    head: obj.head == null ? null : parseHead(obj.head),
    failure: obj.failure == null ? null : parseFailure(obj.failure),
  };
}

export function parseMe(body: unknown): Me {
  const obj = object(body);
  const roles = obj.roles;
  if (!Array.isArray(roles) || !roles.every((role) => typeof role === "string")) {
    throw new InvalidResponse('expected a list of strings under "roles"');
  }
  return { name: str(obj, "name"), id: str(obj, "id"), roles: roles as string[], via: str(obj, "via") };
}

/** The `after` for the page following `page`, or null when it was the last. */
export function nextLogAfter(page: LogPage): number | null {
  const last = page.records.at(-1);
  if (last === undefined) return null;
  const seq = last.seq;
  if (!Number.isInteger(seq)) throw new InvalidResponse(`a log record's "seq" should be an integer, got ${JSON.stringify(seq)}`);
  return (seq as number) >= page.head.seq ? null : (seq as number);
}
