"""The allowed times a rate check counts, and only those, in memory.

The rate check counts the agent's allowed calls in the last ``window_secs``
(``checks.decide``). The state keeps the ``ts`` of each allowed call for as
long as a window in force can reach back (the policy's, and a shadow
policy's): the fold trims the older ones (``trim_allowed_times``), so an
agent's memory is bounded by its own rate, not by how long it has run.

A policy set later may count further back than the trimmed times reach.
Those calls are in the log, and nowhere else: the state says how far back
its times are complete (``rate_known_since``) and after which record none
of the trimmed ones lies (``rate_known_seq``). Before a command runs, whoever
runs it (the actor, ``audit replay``) asks ``rate_gap``; for a gap it reads
the ``action_allowed`` records of that stretch of the log and puts their
times back (``restore_allowed_times``). The check then counts exactly what
it would have counted had nothing been trimmed. Like ``recent_actions``,
this shapes memory only, never an answer.
"""

from __future__ import annotations

from array import array
from bisect import bisect_right
from collections.abc import Iterable, Sequence
from typing import Any

import attrs

from agents_runtime.core.state import AgentState, parse_ts
from agents_runtime.log.kinds import Kind

# The fold trims every this many allowed calls: a bisection and a cut of
# the array's head, at the same records live and at replay.
TRIM_EVERY = 64
# A trim cuts only when at least 1/TRIM_SHARE of the times is past reach: a
# cut moves the times left, so each time is moved a few times at most,
# however many a long window holds (a day's window at 100 calls a second:
# 8.6 million), and memory holds at most a few more than the window's.
TRIM_SHARE = 8

_ALLOWED = Kind.ACTION_ALLOWED.value


def reach(state: AgentState) -> float:
    """How far back, in seconds, a rate check in force counts: the longer of
    the policy's window and the shadow policy's (0: neither has one)."""
    longest = 0.0
    policy = state.policy
    if policy is not None and policy.rate_limit is not None:
        longest = float(policy.rate_limit.window_secs)
    shadow = state.shadow
    if shadow is not None and shadow.policy.rate_limit is not None:
        longest = max(longest, float(shadow.policy.rate_limit.window_secs))
    return longest


def trim_allowed_times(state: AgentState, now: float, seq: int) -> None:
    """Drop the allowed times no rate check in force can count at ``now``
    (the fold of the action_allowed at ``seq`` calls it every TRIM_EVERY)."""
    cut = now - reach(state)
    times = state.allowed_times
    gone = bisect_right(times, cut)
    if gone and gone * TRIM_SHARE >= len(times):
        # Every time memory held was after rate_known_since: so is ``cut``.
        del times[:gone]
        state.rate_known_since = cut
        state.rate_known_seq = seq


@attrs.frozen
class RateGap:
    """The allowed calls a rate check in force needs and memory lacks: those
    with ``since`` < ts <= ``upto``, all in records at seq ``upto_seq`` or
    before."""

    since: float
    upto: float
    upto_seq: int


def rate_gap(state: AgentState, now: float) -> RateGap | None:
    """What a rate check at ``now`` would count that memory does not hold
    (after a policy that counts further back was set); None: nothing."""
    known = state.rate_known_since
    if known is None:
        return None
    since = now - reach(state)
    if since >= known:
        return None
    return RateGap(since, known, state.rate_known_seq)


def allowed_time(record: dict[str, Any], gap: RateGap) -> float | None:
    """The time of ``record`` if it is an action_allowed that ``gap`` lacks
    (its seq none after ``gap.upto_seq``: the caller's to see to)."""
    if record.get("kind") != _ALLOWED:
        return None
    ts = parse_ts(record["ts"])
    return ts if gap.since < ts <= gap.upto else None


def allowed_times_in(records: Iterable[dict[str, Any]], gap: RateGap) -> list[float]:
    """The times ``gap`` lacks among ``records`` (in log order)."""
    return [t for t in (allowed_time(r, gap) for r in records) if t is not None]


def restore_allowed_times(state: AgentState, gap: RateGap, times: Sequence[float]) -> None:
    """Put back the times found for ``gap``, in order: memory now holds
    every allowed time after ``gap.since``."""
    if times:
        state.allowed_times[0:0] = array("d", times)
    state.rate_known_since = gap.since
