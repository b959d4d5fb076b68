"""The copy of an agent's state that the next rebuild starts from.

On a store other nodes write too, an actor that loses a race has run its
state ahead of the log (it folded a batch the store refused): it goes back
to the state its previous rebuild reached and folds the rows written since.
That state must be copied when it is reached, since the live state moves on
from it. On a long history most of its bytes are in two parts that need no
copy:

- the arrays of ``Evicted`` (where the actions that left memory are), which
  only ever grow: the copy keeps them with their lengths, and a restore
  takes each one's first ``length`` entries;
- the runs of old idempotency keys (``KeyRun``), which never change once
  built (a merge builds a new run): the copy keeps the same tuple;
- the latest scars, each frozen: the copy keeps a list of the same ones.

The rest is pickled, as a whole copy would be. On a million-record history
this halves the copy and the restore together (docs/benchmarks.md, "The
rebuild's copy"), and ``tests/agents_runtime/core/test_state_machine.py``
checks at every cut point of every generated log that a restore equals a
whole copy taken at the same moment, the live state having moved on.
"""

from __future__ import annotations

import pickle

import attrs

from agents_runtime.core.idempotency import KeyRun
from agents_runtime.core.state import AgentState, Evicted, Scar
from agents_runtime.log.record import Head

_PICKLE = pickle.HIGHEST_PROTOCOL
_GROWING = tuple(field.name for field in attrs.fields(Evicted))


@attrs.frozen
class StateCopy:
    """An agent's state at ``head``, to be restored once."""

    head: Head
    rest: bytes  # the state but for the parts below, pickled
    evicted: Evicted | None  # shared with the state copied, which appends to it
    lengths: tuple[int, ...]  # of ``evicted``'s arrays (``_GROWING``) when copied
    old_keys: tuple[KeyRun, ...]  # shared: no run changes
    scars: list[Scar]  # a list of its own, of the same (frozen) scars


def copy_state(state: AgentState) -> StateCopy:
    evicted = state.evicted
    rest = pickle.dumps(attrs.evolve(state, evicted=None, old_keys=(), scars=[]), _PICKLE)
    lengths = () if evicted is None else tuple(len(getattr(evicted, n)) for n in _GROWING)
    return StateCopy(state.head, rest, evicted, lengths, state.old_keys, list(state.scars))


def restore(copy: StateCopy) -> AgentState:
    """A state equal to the one copied, as it was then; sharing nothing
    that can change with the state it was copied from."""
    state: AgentState = pickle.loads(copy.rest)  # noqa: S301 (our own actor's copy)
    evicted = copy.evicted
    if evicted is not None:
        state.evicted = Evicted(
            **{n: getattr(evicted, n)[:k] for n, k in zip(_GROWING, copy.lengths, strict=True)}
        )
    state.old_keys = copy.old_keys
    state.scars = list(copy.scars)
    return state


__all__ = ["StateCopy", "copy_state", "restore"]
