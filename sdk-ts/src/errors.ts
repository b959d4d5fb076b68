/**
 * Errors thrown by the client. The tree:
 *
 *     GuardError                        .status (HTTP status or null), .code, .message
 *     ├── GuardSetupError               no token or a bad address; .lookedAt lists every place looked at
 *     ├── ToolInputError (TypeError*)   a guarded tool's input is not JSON-safe; .argument names the place
 *     ├── TransportError                no answer after the retries; .url, the address tried
 *     ├── ActionDenied                  the service denied the action: .code, .reason, .actionId
 *     ├── ApprovalTimeout               no decision within approvalTimeout; .withdrawn
 *     ├── UnexpectedActionState         left pending_approval neither allowed nor denied
 *     ├── InvalidResponse               a 2xx answer that is not what the API describes
 *     ├── ReceiptError                  verifyReceipt refused a receipt; .reason says why
 *     └── APIError                      the service answered {error, code}; .resent
 *         ├── BadRequest                400 bad_request
 *         ├── Unauthorized              401 unauthorized
 *         ├── Forbidden                 403 forbidden
 *         ├── NotFound                  404 not_found
 *         │   └── UnknownAction         404 unknown_action
 *         ├── MethodNotAllowed          405 method_not_allowed
 *         ├── Conflict                  409, any code below
 *         │   ├── AgentExists           409 agent_exists
 *         │   ├── InvalidState          409 invalid_state
 *         │   ├── AlreadyTerminated     409 already_terminated
 *         │   └── IdempotencyConflict   409 idempotency_conflict
 *         ├── TooLarge                  413 too_large
 *         ├── InternalError             500 internal
 *         └── ServiceUnavailable        503, any code below (retried before it is thrown)
 *             ├── Quarantined           503 quarantined
 *             └── ReadOnly              503 read_only
 *
 * (*) JavaScript has single inheritance: ToolInputError is a GuardError whose
 * `name` is "ToolInputError"; it is thrown where calling the tool with a bad
 * argument would throw a TypeError.
 *
 * A code the client does not know is thrown as the class for its HTTP status
 * (Conflict, ServiceUnavailable) or as APIError itself, keeping the service's
 * code and message.
 */

export class GuardError extends Error {
  static readonly defaultCode: string = "error";
  readonly status: number | null;
  readonly code: string;

  constructor(message: string, options: { status?: number | null; code?: string | undefined } = {}) {
    super(message);
    this.name = new.target.name;
    this.status = options.status ?? null;
    this.code = options.code ?? (new.target as typeof GuardError).defaultCode;
  }
}

export class GuardSetupError extends GuardError {
  static override readonly defaultCode: string = "setup";
  readonly lookedAt: readonly string[];

  constructor(message: string, lookedAt: readonly string[] = []) {
    super(message);
    this.lookedAt = [...lookedAt];
  }
}

export class ToolInputError extends GuardError {
  static override readonly defaultCode: string = "tool_input";
  /** Where in the input the problem is, e.g. `input.to` or `input[2]`. */
  readonly argument: string;

  constructor(message: string, argument: string) {
    super(message);
    this.argument = argument;
  }
}

/** The request got no HTTP answer (refused, dropped, timed out); the message starts with `url`. */
export class TransportError extends GuardError {
  static override readonly defaultCode: string = "transport";
  readonly url: string;

  constructor(message: string, url: string, options: { cause?: unknown } = {}) {
    super(message);
    this.url = url;
    if (options.cause !== undefined) this.cause = options.cause;
  }
}

/** A denial reason as the service writes it: `{code, ...}`. */
export type DenialReason = { readonly code: string; readonly [field: string]: unknown };

/** The service denied the action; `reason` is the whole reason object. */
export class ActionDenied extends GuardError {
  static override readonly defaultCode: string = "denied";
  readonly actionId: string;
  readonly reason: DenialReason;

  constructor(actionId: string, reason: DenialReason) {
    const code = typeof reason.code === "string" ? reason.code : "denied";
    // The code is said once; the reason's other fields follow it.
    const details = Object.entries(reason)
      .filter(([key]) => key !== "code")
      .map(([key, value]) => `${key}=${typeof value === "string" ? JSON.stringify(value) : String(value)}`)
      .join(", ");
    super(`action ${actionId} denied: ${code}${details ? ` (${details})` : ""}`, { code });
    this.actionId = actionId;
    this.reason = reason;
  }
}

/** No operator decided within `approvalTimeout` seconds. `withdrawn`: `guarded`
 * cancelled the action on the service; otherwise it stays pending there. */
export class ApprovalTimeout extends GuardError {
  static override readonly defaultCode: string = "approval_timeout";
  readonly actionId: string;
  readonly timeout: number;
  readonly withdrawn: boolean;

  constructor(actionId: string, timeout: number, withdrawn = false) {
    super(
      withdrawn
        ? `action ${actionId} was not decided within ${timeout}s; it was cancelled on the service, ` +
            "so a late approval cannot charge for it"
        : `action ${actionId} is still pending approval after ${timeout}s; it stays pending on the service`,
    );
    this.actionId = actionId;
    this.timeout = timeout;
    this.withdrawn = withdrawn;
  }
}

/** An action left `pending_approval` in a state the tool cannot run from. */
export class UnexpectedActionState extends GuardError {
  static override readonly defaultCode: string = "unexpected_state";
  readonly actionId: string;
  readonly state: string;

  constructor(actionId: string, state: string) {
    super(`action ${actionId} is ${JSON.stringify(state)}, neither allowed nor denied`);
    this.actionId = actionId;
    this.state = state;
  }
}

/** A successful answer whose body is not what the API describes. */
export class InvalidResponse extends GuardError {
  static override readonly defaultCode: string = "invalid_response";
}

/** `verifyReceipt` refused a receipt; `reason` says why (docs/receipts.md lists them). */
export class ReceiptError extends GuardError {
  static override readonly defaultCode: string = "receipt";
  readonly reason: string;

  constructor(reason: string) {
    super(`receipt refused: ${reason}`);
    this.reason = reason;
  }
}

/** The service answered with an error body `{error, code}`. `resent` is true when
 * the request was sent again after an attempt whose answer was lost, so the
 * service may have acted on an earlier copy. */
export class APIError extends GuardError {
  static readonly httpStatus: number | null = null;
  readonly resent: boolean;

  constructor(message: string, options: { status?: number; code?: string; resent?: boolean } = {}) {
    super(message, {
      status: options.status ?? (new.target as typeof APIError).httpStatus,
      code: options.code,
    });
    this.resent = options.resent ?? false;
  }

  override toString(): string {
    return `${this.name}: ${this.status} ${this.code}: ${this.message}`;
  }
}

export class BadRequest extends APIError {
  static override readonly httpStatus: number | null = 400;
  static override readonly defaultCode: string = "bad_request";
}
export class Unauthorized extends APIError {
  static override readonly httpStatus: number | null = 401;
  static override readonly defaultCode: string = "unauthorized";
}
export class Forbidden extends APIError {
  static override readonly httpStatus: number | null = 403;
  static override readonly defaultCode: string = "forbidden";
}
export class NotFound extends APIError {
  static override readonly httpStatus: number | null = 404;
  static override readonly defaultCode: string = "not_found";
}
export class UnknownAction extends NotFound {
  static override readonly defaultCode: string = "unknown_action";
}
export class MethodNotAllowed extends APIError {
  static override readonly httpStatus: number | null = 405;
  static override readonly defaultCode: string = "method_not_allowed";
}
export class Conflict extends APIError {
  static override readonly httpStatus: number | null = 409;
  static override readonly defaultCode: string = "conflict";
}
export class AgentExists extends Conflict {
  static override readonly defaultCode: string = "agent_exists";
}
export class InvalidState extends Conflict {
  static override readonly defaultCode: string = "invalid_state";
}
export class AlreadyTerminated extends Conflict {
  static override readonly defaultCode: string = "already_terminated";
}
export class IdempotencyConflict extends Conflict {
  static override readonly defaultCode: string = "idempotency_conflict";
}
export class TooLarge extends APIError {
  static override readonly httpStatus: number | null = 413;
  static override readonly defaultCode: string = "too_large";
}
export class InternalError extends APIError {
  static override readonly httpStatus: number | null = 500;
  static override readonly defaultCode: string = "internal";
}
export class ServiceUnavailable extends APIError {
  static override readonly httpStatus: number | null = 503;
  static override readonly defaultCode: string = "unavailable";
}
export class Quarantined extends ServiceUnavailable {
  static override readonly defaultCode: string = "quarantined";
}
export class ReadOnly extends ServiceUnavailable {
  static override readonly defaultCode: string = "read_only";
}

type APIErrorClass = typeof APIError;

/** Every API code the service documents, and its class. */
export const ERRORS_BY_CODE: ReadonlyMap<string, APIErrorClass> = new Map(
  [
    BadRequest,
    Unauthorized,
    Forbidden,
    NotFound,
    UnknownAction,
    MethodNotAllowed,
    AgentExists,
    InvalidState,
    AlreadyTerminated,
    IdempotencyConflict,
    TooLarge,
    InternalError,
    Quarantined,
    ReadOnly,
  ].map((cls) => [cls.defaultCode, cls]),
);

/** The class for an HTTP status whose code this client does not know. */
export const ERRORS_BY_STATUS: ReadonlyMap<number, APIErrorClass> = new Map(
  [BadRequest, Unauthorized, Forbidden, NotFound, MethodNotAllowed, Conflict, TooLarge, InternalError, ServiceUnavailable].map(
    (cls) => [cls.httpStatus as number, cls],
  ),
);

/** The error for a non-2xx answer: by its `code`, else by its status. */
export function errorFromResponse(status: number, text: string, resent = false): APIError {
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch {
    body = undefined;
  }
  if (isRecord(body) && typeof body.code === "string") {
    const cls = ERRORS_BY_CODE.get(body.code) ?? ERRORS_BY_STATUS.get(status) ?? APIError;
    const message = typeof body.error === "string" && body.error ? body.error : body.code;
    return new cls(message, { status, code: body.code, resent });
  }
  const cls = ERRORS_BY_STATUS.get(status) ?? APIError;
  const shown = text.slice(0, 200).trim();
  const message = `HTTP ${status} without an error body${shown ? `: ${shown}` : ""}`;
  const code = cls === APIError ? `http_${status}` : cls.defaultCode;
  return new cls(message, { status, code, resent });
}

export function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}
