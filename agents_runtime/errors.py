"""Errors raised by agents_runtime.

The tree::

    GuardError
    ├── CanonicalError (ValueError)        a value RFC 8785 cannot write, or a line that is not JSON
    ├── PolicyError (ValueError)           a policy that breaks the schema; message names the key
    ├── RequestError (ValueError)          a command argument that is out of range or malformed
    ├── VerificationError                  a log record that fails verification (carries a Failure)
    ├── PasskeyError (ValueError)          a passkey assertion that does not prove its approval
    ├── StoreError                         a store that cannot be opened (its driver missing, ...)
    ├── KeyFileError                       a key file that is missing, malformed or too open
    ├── DataDirError                       the data dir is not usable: not a directory, locked
    ├── LogWriteError (OSError)            a write or fsync of a log failed; the agent is fenced
    └── AgentError                         a command refused by an agent, with an API code
        ├── NotFound                       no such agent            (not_found)
        ├── UnknownAction                  no such action           (unknown_action)
        ├── InvalidState                   wrong state for the step (invalid_state)
        ├── AlreadyTerminated              terminate twice          (already_terminated)
        ├── Forbidden                      caller's role may not do this (forbidden)
        ├── IdempotencyConflict            same key, other body     (idempotency_conflict)
        ├── AgentExists                    agent ID taken           (agent_exists)
        ├── ReadOnly                       no signing key           (read_only)
        ├── Quarantined                    log failed verification  (quarantined)
        ├── AgentUnavailable               fenced after a write failure (internal)
        ├── StoreUnavailable               a shared store is unreachable; try again (unavailable)
        ├── LogReadError                   a record of its log cannot be read back (internal)
        └── ShuttingDown                   guardd is stopping; try again (unavailable)
"""

from __future__ import annotations

from typing import Any, ClassVar

import attrs


class GuardError(Exception):
    """Base of every error this package raises on purpose."""


class CanonicalError(GuardError, ValueError):
    pass


class PolicyError(GuardError, ValueError):
    pass


class RequestError(GuardError, ValueError):
    pass


class KeyFileError(GuardError):
    pass


class PasskeyError(GuardError, ValueError):
    """A passkey assertion that does not prove the approval it is given for;
    the message names what failed (``passkey signature does not verify``)."""


class DataDirError(GuardError):
    pass


class LogWriteError(GuardError, OSError):
    pass


class StoreError(GuardError):
    """A store that cannot be opened as asked: its driver is not installed,
    or what names it is not a store. The message says what to do."""


@attrs.frozen
class Failure:
    """The first thing wrong with a log: where, and why in a fixed phrase
    (agents_runtime.log.verify lists the phrases). Defined here, beside the
    error that carries it, so that this module imports nothing of ours."""

    line: int  # 1-based line of the file or slice
    seq: int | None  # seq of the bad record, when it could be read
    reason: str

    def to_json(self) -> dict[str, Any]:
        return {"line": self.line, "seq": self.seq, "reason": self.reason}


class VerificationError(GuardError):
    def __init__(self, failure: Failure) -> None:
        super().__init__(f"line {failure.line} (seq {failure.seq}): {failure.reason}")
        self.failure = failure


class AgentError(GuardError):
    code: ClassVar[str] = "internal"


class NotFound(AgentError):
    code = "not_found"


class UnknownAction(AgentError):
    code = "unknown_action"


class InvalidState(AgentError):
    code = "invalid_state"


class AlreadyTerminated(AgentError):
    code = "already_terminated"


class Forbidden(AgentError):
    code = "forbidden"


class IdempotencyConflict(AgentError):
    code = "idempotency_conflict"


class AgentExists(AgentError):
    code = "agent_exists"


class ReadOnly(AgentError):
    code = "read_only"


class Quarantined(AgentError):
    code = "quarantined"


class AgentUnavailable(AgentError):
    code = "internal"


class StoreUnavailable(AgentError):
    """A shared store (PostgreSQL) could not be read or written just now;
    nothing was answered from a stale state and nothing was left half done:
    a client may retry (503)."""

    code = "unavailable"


class LogReadError(AgentError):
    """A record the agent's log held when it was loaded or written cannot be
    read back: the file changed under a running guardd (500)."""

    code = "internal"


class ShuttingDown(AgentError):
    """The service is stopping: a client may retry once it is back (503)."""

    code = "unavailable"
