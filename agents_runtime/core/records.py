"""The table of record kinds, and ``apply``: the fold of a record into state.

``KINDS`` holds one ``KindEntry`` for every ``Kind``, gathered from the
concept modules that declare them (``CONCEPTS``, the one list of them);
importing this module fails, naming the kind, if one has no entry.
Whatever needs to know a kind reads its entry: ``apply`` (its fold),
``behaviour.finish_interrupted`` (what follows it), ``audit replay`` and
``--policy`` (how it is described, which command starts with it, how one
command's records follow each other, what it decides), the webhooks (what it
announces).

``apply(state, record)`` is the only code that changes agent state. The
actor calls it on each record it has just sealed, and startup on each
verified record of a log, so the live state and the replayed state are the
same by construction.
"""

from __future__ import annotations

from typing import Any, Protocol

from agents_runtime.core import actions, agent, decisions, grants, scars, shadow, termination
from agents_runtime.core.entries import CommandEntry, Fold, KindEntry, kind_table
from agents_runtime.core.state import AgentState
from agents_runtime.log.kinds import table
from agents_runtime.log.record import Head


class Concept(Protocol):
    """A concept module: the entries of its record kinds and of its commands."""

    @property
    def KIND_ENTRIES(self) -> tuple[KindEntry, ...]: ...

    @property
    def COMMAND_ENTRIES(self) -> tuple[CommandEntry, ...]: ...


# Every concept module, once: both tables are built from this list.
CONCEPTS: tuple[Concept, ...] = (agent, actions, decisions, scars, termination, grants, shadow)

KINDS: dict[str, KindEntry] = kind_table(
    entry for concept in CONCEPTS for entry in concept.KIND_ENTRIES
)

# Looked up for every record folded: one dict keyed by the plain kind string.
_FOLD: dict[str, Fold] = table({entry.kind: entry.fold for entry in KINDS.values()})


def entry_of(kind: object) -> KindEntry | None:
    """The entry of ``kind`` (a record's ``kind`` as read: any JSON value),
    or None when no kind of ours has that name."""
    return KINDS.get(kind) if isinstance(kind, str) else None


def apply(state: AgentState, record: dict[str, Any]) -> AgentState:
    """Fold one verified record into ``state`` (in place) and return it."""
    kind = record["kind"]
    handler = _FOLD.get(kind)
    if handler is not None:
        handler(state, record)
    state.head = Head(record["seq"], record["hash"])
    state.last_ts = record["ts"]
    state.last_record = record
    return state
