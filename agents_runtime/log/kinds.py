"""Record kinds: the one list of what a line of an agent's log can be.

``Kind`` is a ``StrEnum``: a member *is* its ``kind`` string, so it goes into
a record as it is (canonical JSON writes it as the plain string, byte for
byte), compares equal to the string read back from a file, and hashes like
it. Code names kinds only through this enum; the wire keeps the strings.

Two costs to mind on hot paths, both measured: ``Kind.X`` is an attribute
lookup on the enum class, paid on every call, so a function run per record
compares against a module-level alias (``_GENESIS = Kind.GENESIS``); and a
dict keyed by members loses the exact-``str`` lookup path, so tables looked
up per record are built with ``table``, which keys them by the plain values.
A member cannot be a key of a dict that is written as JSON: orjson takes only
exact ``str`` keys (``tests/agents_runtime/log/test_kinds.py`` pins both).

Adding a record kind (and the command that writes it):

1. Add a member to ``Kind`` below; its value is the ``kind`` on the wire.
2. In the concept module of ``agents_runtime/core/`` it belongs to (or a new
   one, listed once in ``records.CONCEPTS``), declare the command (a frozen
   attrs subclass of ``entries.Command``) with its ``CommandEntry`` (its
   handler: a generator that yields the record, or a view; what it
   ``reads``), and the kind's ``KindEntry``: its fold, what finishing a
   command cut short after it writes, the command ``audit replay`` rebuilds
   from it, how it follows the record before it within one command, its
   description, what webhooks announce and what ``--policy`` does with it.
   Every part is a required argument, and ``records.KINDS`` and
   ``behaviour.COMMANDS`` refuse to build without an entry for every kind
   and command: the service does not start until the new ones are complete
   (``tests/agents_runtime/core/test_entries.py`` names the gap).
3. Document it in ``docs/records.md``: a ``## `<kind>` `` section with its
   fields, when it is written, what folding it does and the module that
   declares it, and its row in the table of commands.
   ``tests/agents_runtime/log/test_kinds.py`` fails until the section is
   there, and the OpenAPI document lists it by itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import TypeVar

T = TypeVar("T")


class Kind(StrEnum):
    """The ``kind`` of a log record (docs/records.md has each one's fields)."""

    GENESIS = "genesis"
    POLICY = "policy"
    ACTION_REQUESTED = "action_requested"
    APPROVAL_REQUIRED = "approval_required"
    ACTION_ALLOWED = "action_allowed"
    ACTION_DENIED = "action_denied"
    ACTION_REJECTED = "action_rejected"
    APPROVAL_EXPIRED = "approval_expired"
    ACTION_CANCELLED = "action_cancelled"
    OUTCOME = "outcome"
    SCAR = "scar"
    TERMINATED = "terminated"
    GRANT_ISSUED = "grant_issued"
    GRANT_REVOKED = "grant_revoked"
    APPROVAL_RECORDED = "approval_recorded"
    SHADOW_SET = "shadow_set"
    SHADOW_CLEARED = "shadow_cleared"


def table(handlers: Mapping[Kind, T], *, complete: bool = True) -> dict[str, T]:
    """``handlers`` keyed by the plain kind strings, for lookups by the
    ``kind`` of a record. With ``complete`` (a fold, say), every kind must
    have an entry, so a kind added without its handler fails at import."""
    if complete:
        missing = [kind.value for kind in Kind if kind not in handlers]
        if missing:
            raise ValueError(f"no handler for record kinds {missing}")
    return {Kind(kind).value: handler for kind, handler in handlers.items()}
