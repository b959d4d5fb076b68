/**
 * The TypeScript client of Agent Action Guard (docs/sdk-ts.md).
 *
 * Every public name is exported here, and only here; the AI SDK adapter is
 * the subpath `guardd-client/ai`.
 */

export {
  AdminClient,
  type CallOptions,
  type ClientOptions,
  DEFAULT_TIMEOUT,
  type GetActionOptions,
  GuardClient,
  type GuardClientOptions,
} from "./clients.js";
export {
  ActionDenied,
  AgentExists,
  AlreadyTerminated,
  APIError,
  ApprovalTimeout,
  BadRequest,
  Conflict,
  type DenialReason,
  Forbidden,
  GuardError,
  GuardSetupError,
  IdempotencyConflict,
  InternalError,
  InvalidResponse,
  InvalidState,
  MethodNotAllowed,
  NotFound,
  Quarantined,
  ReadOnly,
  ReceiptError,
  ServiceUnavailable,
  ToolInputError,
  TooLarge,
  TransportError,
  Unauthorized,
  UnexpectedActionState,
  UnknownAction,
} from "./errors.js";
export { type CurrentAction, currentAction, type GuardedFunction, type GuardedOptions } from "./guarded.js";
export type { Money } from "./json.js";
export type {
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
  PendingAction,
  PendingEntry,
  Policy,
  RateLimit,
  Receipt,
  Scar,
  ToolRule,
  VerifyFailure,
  VerifyReport,
} from "./models.js";
export { verifyReceipt, type VerifyReceiptOptions } from "./receipt.js";
export type { OutcomeStatus, PolicyBody, RequestActionOptions } from "./requests.js";
export { Retry, type RetryOptions } from "./retry.js";
