"""Errors raised by client_sdk.

The tree::

    GuardError                          .status (HTTP status or None), .code, .message
    ├── GuardSetupError                 no token or a bad address; lists every place looked at
    ├── ToolInputError (TypeError)      a guarded tool's argument is not JSON-safe; names it
    ├── TransportError                  the service could not be reached, after the retries;
    │                                   .url, the address tried
    ├── ActionDenied                    the service denied the action: .code, .reason, .action_id
    ├── ApprovalTimeout                 no decision within approval_timeout; still pending
    ├── UnexpectedActionState           the action left pending_approval but was not allowed
    │                                   or denied (e.g. completed by an operator already)
    ├── InvalidResponse                 a 2xx answer that is not what the API describes
    ├── ReceiptError (ValueError)       verify_receipt refused a receipt: .reason says why
    └── APIError                        the service answered {error, code}; .resent
        ├── BadRequest                  400 bad_request
        ├── Unauthorized                401 unauthorized
        ├── Forbidden                   403 forbidden
        ├── NotFound                    404 not_found
        │   └── UnknownAction           404 unknown_action
        ├── MethodNotAllowed            405 method_not_allowed
        ├── Conflict                    409, any code below
        │   ├── AgentExists             409 agent_exists
        │   ├── InvalidState            409 invalid_state
        │   ├── AlreadyTerminated       409 already_terminated
        │   └── IdempotencyConflict     409 idempotency_conflict
        ├── TooLarge                    413 too_large
        ├── InternalError               500 internal
        └── ServiceUnavailable          503, any code below (retried before it is raised)
            ├── Quarantined             503 quarantined
            └── ReadOnly                503 read_only

A code the client does not know is raised as the class for its HTTP status
(``Conflict``, ``ServiceUnavailable``) or as ``APIError`` itself, keeping the
server's code and message.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any, ClassVar


class GuardError(Exception):
    """Base of every error this package raises on purpose."""

    default_code: ClassVar[str] = "error"

    def __init__(self, message: str, *, status: int | None = None, code: str | None = None):
        super().__init__(message)
        self.message = message
        self.status = status
        self.code = code or self.default_code

    def __reduce__(self) -> tuple[Any, ...]:
        # Subclasses take other constructor arguments: pickle the state instead,
        # so errors survive a trip through multiprocessing or concurrent.futures.
        return (_restore, (type(self), self.args, self.__dict__))


def _restore(cls: type[GuardError], args: tuple[Any, ...], state: dict[str, Any]) -> GuardError:
    error = cls.__new__(cls, *args)
    error.args = args
    error.__dict__.update(state)
    return error


class GuardSetupError(GuardError):
    """Something the client needs (a token, the address) is missing or malformed."""

    default_code = "setup"

    def __init__(self, message: str, *, looked_at: list[str] | None = None) -> None:
        super().__init__(message)
        self.looked_at = list(looked_at or [])


class ToolInputError(GuardError, TypeError):
    """A guarded tool was called with an argument that cannot be sent as JSON."""

    default_code = "tool_input"

    def __init__(self, message: str, *, argument: str) -> None:
        super().__init__(message)
        self.argument = argument


class TransportError(GuardError):
    """The request did not get an HTTP answer (connection refused, dropped, timed out).

    ``url`` is the service address that was tried; the message starts with it.
    """

    default_code = "transport"

    def __init__(self, message: str, *, url: str | None = None) -> None:
        super().__init__(message)
        self.url = url


class ActionDenied(GuardError):
    """The service denied the action; ``reason`` is the whole reason object."""

    default_code = "denied"

    def __init__(self, action_id: str, reason: dict[str, Any]) -> None:
        code = str(reason.get("code", "denied"))
        # The code is said once; the reason's other fields follow it, numbers
        # as the service wrote them (5, not Decimal('5')).
        details = ", ".join(f"{k}={_shown(v)}" for k, v in reason.items() if k != "code")
        message = f"action {action_id} denied: {code}" + (f" ({details})" if details else "")
        super().__init__(message, code=code)
        self.action_id = action_id
        self.reason = reason


def _shown(value: Any) -> str:
    if isinstance(value, Decimal | int) and not isinstance(value, bool):
        return str(value)
    return repr(value)


class ApprovalTimeout(GuardError):
    """No operator decided within ``approval_timeout``. ``withdrawn``: ``guarded``
    cancelled the action on the service; otherwise it stays pending there."""

    default_code = "approval_timeout"

    def __init__(self, action_id: str, timeout: float, *, withdrawn: bool = False) -> None:
        if withdrawn:
            message = (
                f"action {action_id} was not decided within {timeout:g}s; it was cancelled "
                "on the service, so a late approval cannot charge for it"
            )
        else:
            message = (
                f"action {action_id} is still pending approval after {timeout:g}s; "
                "it stays pending on the service"
            )
        super().__init__(message)
        self.action_id = action_id
        self.timeout = timeout
        self.withdrawn = withdrawn


class UnexpectedActionState(GuardError):
    """An action left ``pending_approval`` in a state the tool cannot run from."""

    default_code = "unexpected_state"

    def __init__(self, action_id: str, state: str) -> None:
        super().__init__(f"action {action_id} is {state!r}, neither allowed nor denied")
        self.action_id = action_id
        self.state = state


class InvalidResponse(GuardError):
    """A successful answer whose body is not what the API describes."""

    default_code = "invalid_response"


class ReceiptError(GuardError, ValueError):
    """``verify_receipt`` refused a decision receipt; ``reason`` says why
    (``signature does not verify``, ``receipt is for another input``, ...)."""

    default_code = "receipt"

    def __init__(self, reason: str) -> None:
        super().__init__(f"receipt refused: {reason}")
        self.reason = reason


class APIError(GuardError):
    """The service answered with an error body ``{error, code}``.

    ``resent`` is true when the request was sent again after an attempt whose
    answer was lost, so the service may have acted on an earlier copy.
    """

    http_status: ClassVar[int | None] = None

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        code: str | None = None,
        resent: bool = False,
    ) -> None:
        super().__init__(message, status=status or self.http_status, code=code)
        self.resent = resent

    def __str__(self) -> str:
        return f"{self.status} {self.code}: {self.message}"


class BadRequest(APIError):
    http_status = 400
    default_code = "bad_request"


class Unauthorized(APIError):
    http_status = 401
    default_code = "unauthorized"


class Forbidden(APIError):
    http_status = 403
    default_code = "forbidden"


class NotFound(APIError):
    http_status = 404
    default_code = "not_found"


class UnknownAction(NotFound):
    default_code = "unknown_action"


class MethodNotAllowed(APIError):
    http_status = 405
    default_code = "method_not_allowed"


class Conflict(APIError):
    http_status = 409
    default_code = "conflict"


class AgentExists(Conflict):
    default_code = "agent_exists"


class InvalidState(Conflict):
    default_code = "invalid_state"


class AlreadyTerminated(Conflict):
    default_code = "already_terminated"


class IdempotencyConflict(Conflict):
    default_code = "idempotency_conflict"


class TooLarge(APIError):
    http_status = 413
    default_code = "too_large"


class InternalError(APIError):
    http_status = 500
    default_code = "internal"


class ServiceUnavailable(APIError):
    http_status = 503
    default_code = "unavailable"


class Quarantined(ServiceUnavailable):
    default_code = "quarantined"


class ReadOnly(ServiceUnavailable):
    default_code = "read_only"


#: Every API code the service documents, mapped to its exception class.
ERRORS_BY_CODE: dict[str, type[APIError]] = {
    cls.default_code: cls
    for cls in (
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
    )
}

#: The class for an HTTP status whose code is unknown to this client.
ERRORS_BY_STATUS: dict[int, type[APIError]] = {
    400: BadRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    405: MethodNotAllowed,
    409: Conflict,
    413: TooLarge,
    500: InternalError,
    503: ServiceUnavailable,
}
