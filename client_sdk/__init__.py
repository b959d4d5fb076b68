"""Python client for Agent Action Guard: ask before you act.

``GuardClient`` / ``AsyncGuardClient`` are an agent's connection (agent token),
``AdminClient`` / ``AsyncAdminClient`` an operator's (admin token). Wrap a tool
with ``client.guarded`` so every call asks the service first, waits while an
operator decides, and reports its outcome.
"""

from client_sdk._admin import AdminClient, AsyncAdminClient
from client_sdk._client import AsyncGuardClient, AsyncGuardDecorator, GuardClient
from client_sdk._models import Action, CreatedAgent, Decision
from client_sdk._retry import Retry
from client_sdk.errors import (
    ActionDenied,
    AgentExists,
    AlreadyTerminated,
    APIError,
    ApprovalTimeout,
    BadRequest,
    Conflict,
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
    ServiceUnavailable,
    TooLarge,
    ToolInputError,
    TransportError,
    Unauthorized,
    UnexpectedActionState,
    UnknownAction,
)

__all__ = [
    "APIError",
    "Action",
    "ActionDenied",
    "AdminClient",
    "AgentExists",
    "AlreadyTerminated",
    "ApprovalTimeout",
    "AsyncAdminClient",
    "AsyncGuardClient",
    "AsyncGuardDecorator",
    "BadRequest",
    "Conflict",
    "CreatedAgent",
    "Decision",
    "Forbidden",
    "GuardClient",
    "GuardError",
    "GuardSetupError",
    "IdempotencyConflict",
    "InternalError",
    "InvalidResponse",
    "InvalidState",
    "MethodNotAllowed",
    "NotFound",
    "Quarantined",
    "ReadOnly",
    "Retry",
    "ServiceUnavailable",
    "TooLarge",
    "ToolInputError",
    "TransportError",
    "Unauthorized",
    "UnexpectedActionState",
    "UnknownAction",
]
