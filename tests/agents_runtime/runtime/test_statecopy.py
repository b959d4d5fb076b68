"""The copy a rebuild starts from shares what only grows or never changes
with the state it copies, and restores the state as it was when copied.
(At every cut point of generated logs: tests/agents_runtime/core/test_state_machine.py.)"""

from __future__ import annotations

from array import array

import attrs

from agents_runtime.core.idempotency import KeyFilter, KeyRun
from agents_runtime.core.state import AgentState, Evicted, Scar
from agents_runtime.runtime.statecopy import copy_state, restore


def _evicted() -> Evicted:
    return Evicted(
        to=array("q", [5]),
        kept_from=array("q", [9]),
        at=array("q", [11]),
        late_actions=array("q", [2, 3]),
        late_seqs=array("q", [12, 14]),
        scars=array("q", [4]),
    )


def _state() -> AgentState:
    state = AgentState("agent-1")
    state.evicted = _evicted()
    state.old_keys = (KeyRun(array("Q", [7]), array("q", [1]), array("d", [1.5]), 1.5),)
    state.key_filters = (KeyFilter(bytearray(8), 4, 1, 1.5),)
    state.scars = [Scar(3, "minor", "slow", None), Scar(4, "severe", "leaked", "act-2")]
    return state


def test_a_restored_copy_holds_the_evicted_entries_as_they_were_when_copied() -> None:
    state = _state()
    copy = copy_state(state)
    assert state.evicted is not None
    state.evicted.late_actions.append(4)  # the live state folds on
    state.evicted.late_seqs.append(20)
    state.evicted.scars.append(21)

    restored = restore(copy)

    assert restored.evicted == _evicted()
    assert list(state.evicted.late_actions) == [2, 3, 4]  # the live state's, untouched
    restored.evicted.late_actions.append(9)  # nor touched by the restored state's fold
    assert list(state.evicted.late_actions) == [2, 3, 4]


def test_a_copy_shares_the_runs_of_old_keys_and_copies_the_filters() -> None:
    state = _state()
    restored = restore(copy_state(state))
    assert restored == state
    assert restored.old_keys is state.old_keys  # a run never changes once built
    assert restored.key_filters[0].bits is not state.key_filters[0].bits  # a filter's do


def test_a_copy_keeps_the_scars_of_its_moment_in_a_list_of_its_own() -> None:
    state = _state()
    copy = copy_state(state)
    state.scars.append(Scar(9, "minor", "late", None))
    del state.scars[0]  # as the live state's evictions do

    restored = restore(copy)

    assert [s.seq for s in restored.scars] == [3, 4]
    assert restored.scars[1] is copy.scars[1]  # frozen: shared
    restored.scars.append(Scar(10, "minor", "again", None))
    assert [s.seq for s in restore(copy).scars] == [3, 4]


def test_a_copy_of_a_state_without_evictions_restores_none() -> None:
    state = AgentState("agent-1")
    restored = restore(copy_state(state))
    assert restored == state
    assert restored.evicted is None


def test_every_part_of_evicted_is_an_array_the_copy_can_take_a_prefix_of() -> None:
    # A field of another kind (a count, a dict) would not be restored by
    # taking a prefix: the copy would have to pickle it.
    for field in attrs.fields(Evicted):
        assert isinstance(getattr(Evicted(), field.name), array), field.name
