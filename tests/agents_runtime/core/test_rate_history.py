"""Allowed times: memory keeps those a rate window in force reaches; a
window that reaches further is counted exactly once the times the trim let
go are put back from the records."""

from __future__ import annotations

from array import array
from bisect import bisect_right
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from agents_runtime.core.checks import decide
from agents_runtime.core.rate_history import (
    TRIM_SHARE,
    RateGap,
    allowed_times_in,
    rate_gap,
    reach,
    restore_allowed_times,
    trim_allowed_times,
)
from agents_runtime.core.state import AgentState, Shadow, parse_ts
from agents_runtime.log.record import timestamp_micros
from tests.agents_runtime.support import T0, policy

NOW = T0 + 10_000


def _state(times: list[float], **policy_keys: Any) -> AgentState:
    state = AgentState("a", policy=policy(tools={"t": {"cost": 0}}, **policy_keys))
    state.allowed_times = array("d", times)
    return state


def _rate(max_actions: int, window_secs: int) -> dict[str, int]:
    return {"max_actions": max_actions, "window_secs": window_secs}


def _allowed(seq: int, at: float) -> dict[str, Any]:
    return {"kind": "action_allowed", "seq": seq, "ts": timestamp_micros(round(at * 1e6))}


def test_the_trim_keeps_the_times_the_window_in_force_reaches_and_the_check_is_unchanged() -> None:
    state = _state([NOW - 500, NOW - 61, NOW - 60, NOW - 30, NOW - 1], rate_limit=_rate(2, 60))
    before = decide(state, "t", None, NOW)
    assert before.reason is not None
    assert before.reason["code"] == "rate_limited"
    trim_allowed_times(state, NOW, 41)
    assert list(state.allowed_times) == [NOW - 30, NOW - 1]
    assert (state.rate_known_since, state.rate_known_seq) == (NOW - 60, 41)
    assert decide(state, "t", None, NOW) == before


def test_with_no_rate_window_in_force_no_allowed_time_stays() -> None:
    state = _state([NOW - 5, NOW - 1, NOW])
    assert reach(state) == 0
    trim_allowed_times(state, NOW, 7)
    assert list(state.allowed_times) == []
    assert rate_gap(state, NOW + 1) is None  # nothing in force counts anything


def test_a_shadow_policy_with_a_longer_window_keeps_its_reach() -> None:
    state = _state([NOW - 500, NOW - 200, NOW - 1], rate_limit=_rate(5, 60))
    candidate = policy(tools={"t": {}}, rate_limit=_rate(5, 300))
    state.shadow = Shadow(candidate, since="2026-01-01T00:00:00.000000Z")
    assert reach(state) == 300
    trim_allowed_times(state, NOW, 9)
    assert list(state.allowed_times) == [NOW - 200, NOW - 1]


def test_a_few_times_past_reach_wait_for_more_before_the_array_is_cut() -> None:
    state = _state([NOW - 61] + [NOW - 1] * TRIM_SHARE, rate_limit=_rate(100, 60))
    trim_allowed_times(state, NOW, 5)  # one of nine past the window: kept for now
    assert len(state.allowed_times) == TRIM_SHARE + 1
    assert state.rate_known_since is None
    assert decide(state, "t", None, NOW).decision == "allowed"


def test_nothing_is_trimmed_nothing_is_missing() -> None:
    state = _state([NOW - 500], rate_limit=_rate(5, 60))
    trim_allowed_times(state, NOW - 1000, 3)  # every time is inside the window then
    assert list(state.allowed_times) == [NOW - 500]
    assert state.rate_known_since is None
    assert rate_gap(state, NOW) is None


def test_a_window_widened_after_a_trim_is_a_gap_until_its_times_are_put_back() -> None:
    times = [NOW - 3000, NOW - 2000, NOW - 1500, NOW - 90, NOW - 30, NOW - 1]
    untrimmed = _state(times, rate_limit=_rate(4, 3600))
    state = _state(times, rate_limit=_rate(100, 60))
    trim_allowed_times(state, NOW, 50)
    assert list(state.allowed_times) == [NOW - 30, NOW - 1]
    assert rate_gap(state, NOW) is None
    state.policy = untrimmed.policy  # a policy that counts an hour back
    gap = rate_gap(state, NOW)
    assert gap == RateGap(since=NOW - 3600, upto=NOW - 60, upto_seq=50)
    assert decide(state, "t", None, NOW).decision == "allowed"  # 2 of 4 in memory: wrong
    log = [_allowed(10 * i, t) for i, t in enumerate(times[:4], 1)]
    log.insert(2, {"kind": "action_requested", "seq": 25, "ts": log[1]["ts"]})
    found = allowed_times_in(log, gap)
    assert found == [NOW - 3000, NOW - 2000, NOW - 1500, NOW - 90]
    restore_allowed_times(state, gap, found)
    assert list(state.allowed_times) == times
    assert state.rate_known_since == NOW - 3600
    assert rate_gap(state, NOW) is None
    assert decide(state, "t", None, NOW) == decide(untrimmed, "t", None, NOW)
    assert decide(state, "t", None, NOW).reason == {
        "code": "rate_limited",
        "max_actions": 4,
        "window_secs": 3600,
    }


def test_only_the_gap_is_read_back_not_what_memory_holds_nor_what_no_window_reaches() -> None:
    gap = RateGap(since=NOW - 100, upto=NOW - 10, upto_seq=9)
    log = [_allowed(1, NOW - 200), _allowed(2, NOW - 100), _allowed(3, NOW - 50)]
    log += [_allowed(4, NOW - 10), _allowed(5, NOW - 5)]
    assert allowed_times_in(log, gap) == [NOW - 50, NOW - 10]


# -- any history -------------------------------------------------------------------

WINDOWS = st.sampled_from([None, 1, 10, 60, 600])
STEPS = st.lists(
    st.one_of(
        # Time passes (whole seconds, so that calls fall on window edges too),
        # then an allowed call.
        st.tuples(st.just("call"), st.integers(0, 40)),
        st.tuples(st.just("window"), WINDOWS),  # a new policy (None: no rate window)
        st.tuples(st.just("trim"), st.none()),  # the fold trims, wherever it may
    ),
    max_size=120,
)


def _with_window(window: int | None) -> Any:
    rate = None if window is None else _rate(1_000, window)
    return policy(tools={"t": {"cost": 0}}, rate_limit=rate)


@given(STEPS)
def test_trims_and_read_backs_count_what_keeping_every_time_counts(steps: list[Any]) -> None:
    state = AgentState("a", policy=_with_window(60))
    log: list[dict[str, Any]] = []  # the agent's action_allowed records
    every: list[float] = []  # what a state that never trims would hold
    now = NOW
    for step, value in steps:
        if step == "window":
            state.policy = _with_window(value)
            continue
        if step == "trim":
            trim_allowed_times(state, now, len(log) - 1)
            past = bisect_right(state.allowed_times, now - reach(state))
            assert past == 0 or past * TRIM_SHARE < len(state.allowed_times)
            continue
        now += value
        # What the actor does before each command, then the check's count.
        gap = rate_gap(state, now)
        if gap is not None:
            older = [r for r in log if r["seq"] <= gap.upto_seq]
            restore_allowed_times(state, gap, allowed_times_in(older, gap))
            assert rate_gap(state, now) is None
        limit = state.policy.rate_limit if state.policy is not None else None
        if limit is not None:
            since = now - float(limit.window_secs)
            counted = len(state.allowed_times) - bisect_right(state.allowed_times, since)
            assert counted == len(every) - bisect_right(every, since)
        record = _allowed(len(log), now)
        log.append(record)
        at = parse_ts(record["ts"])
        state.allowed_times.append(at)  # as the fold of the record does
        every.append(at)
