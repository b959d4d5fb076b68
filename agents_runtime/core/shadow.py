"""Shadow mode: a candidate policy tried on live traffic, never enforced.

``SetShadow`` writes ``shadow_set`` (the candidate, or the version of a
named policy it was taken from); ``ClearShadow`` writes ``shadow_cleared``.
While one is set, each request is decided by the policy in force and, with
the very same checks (``checks.decide``, and a grant where the candidate
would hold the call), by the candidate; the decision record of a request
on which the two disagree carries ``shadow: {decision, reason}``, and the
candidate's decision changes nothing else. The tallies ``GetShadow``
shows are folded from those decision records, so they survive a restart
and replay exactly. Approvals, rejections and expiries are operators' and
timers' steps, not the policy's first decision: they are not compared.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import attrs

from agents_runtime.core.checks import decide
from agents_runtime.core.entries import (
    Command,
    CommandEntry,
    KindEntry,
    Record,
    Steps,
    announces_nothing,
    never_continues,
    nothing_follows,
    replayed,
    settles_nothing,
    signed_by,
)
from agents_runtime.core.grants import drawable
from agents_runtime.core.policy import Policy, parse_policy, policy_json
from agents_runtime.core.state import RECENT_DISAGREEMENTS, AgentState, Lines, Shadow
from agents_runtime.core.vocabulary import Decision
from agents_runtime.errors import InvalidState, NotFound, PolicyError
from agents_runtime.log.kinds import Kind

_ALLOWED = Decision.ALLOWED
_PENDING = Decision.PENDING_APPROVAL
_DENIED = Decision.DENIED


@attrs.frozen
class SetShadow(Command):
    """A candidate: a policy of its own, or ``version`` of a named policy."""

    policy: Policy
    policy_ref: str | None = None
    version: int | None = None
    by: str | None = None  # the operator who sets it (entries.signed_by)
    by_id: str | None = None


@attrs.frozen
class ClearShadow(Command):
    by: str | None = None  # the operator who clears it
    by_id: str | None = None


@attrs.frozen
class GetShadow(Command):
    pass


def set_shadow(state: AgentState, cmd: SetShadow, now: float, lines: Lines) -> Steps:
    if not state.alive:
        raise InvalidState(f"agent {state.agent_id} is terminated; it decides nothing more")
    fields = signed_by(
        {"kind": Kind.SHADOW_SET, "policy": policy_json(cmd.policy)}, cmd.by, cmd.by_id
    )
    if cmd.policy_ref is not None:
        fields |= {"policy_ref": cmd.policy_ref, "version": cmd.version}
    yield fields
    return _shadow(state)


def clear_shadow(state: AgentState, cmd: ClearShadow, now: float, lines: Lines) -> Steps:
    _shadow(state)
    yield signed_by({"kind": Kind.SHADOW_CLEARED}, cmd.by, cmd.by_id)
    return None


def get_shadow(state: AgentState, cmd: GetShadow, now: float, lines: Lines) -> Shadow:
    return _shadow(state)


def _shadow(state: AgentState) -> Shadow:
    shadow = state.shadow
    if shadow is None:
        raise NotFound(f"agent {state.agent_id} has no shadow policy")
    return shadow


def shadow_of(
    state: AgentState,
    shadow: Shadow,
    tool: str,
    requested_cost: Decimal | None,
    tool_input: Any,
    now: float,
    live: str,
) -> dict[str, Any] | None:
    """What the decision record carries when the candidate would have
    decided the request otherwise than ``live``; None when it agrees."""
    # decide() reads the policy in force from the state: the candidate
    # stands in for it for this one call (nothing awaits in between), so it
    # is judged by exactly the checks, and any rules they grow, that the
    # live policy is; the budget left is the candidate's budget less what
    # has been spent.
    policy, remaining = state.policy, state.remaining
    spent = state.spent
    state.policy = shadow.policy
    state.remaining = shadow.policy.budget - spent
    try:
        verdict = decide(state, tool, requested_cost, now, tool_input)
        decision = verdict.decision
        if decision == _PENDING and state.grants:
            if drawable(state.grants, tool, tool_input, verdict.charge, now) is not None:
                decision = _ALLOWED
    finally:
        state.policy, state.remaining = policy, remaining
    if decision == live:
        return None
    return {"decision": decision, "reason": verdict.reason if decision == _DENIED else None}


def tally(state: AgentState, shadow: Shadow, record: Record, live: str) -> None:
    """Fold a decision made at request time into the shadow's counts."""
    theirs = record.get("shadow")
    if theirs is None:
        shadow.agree += 1
        return
    key = f"{live}->{theirs['decision']}"
    shadow.disagree[key] = shadow.disagree.get(key, 0) + 1
    recent = shadow.recent
    recent.append(record["action_id"])
    if len(recent) > RECENT_DISAGREEMENTS:
        del recent[0]
    total = state.shadow_disagreements
    if total is None:
        total = state.shadow_disagreements = {}
    total[key] = total.get(key, 0) + 1


def _fold_set(state: AgentState, r: Record) -> None:
    state.shadow = Shadow(
        parse_policy(r["policy"], recorded=True), r["ts"], r.get("policy_ref"), r.get("version")
    )


def _fold_cleared(state: AgentState, r: Record) -> None:
    if state.shadow is None:
        raise ValueError("shadow_cleared without a shadow policy set")
    state.shadow = None


def _set_of(record: Record) -> SetShadow | str:
    try:
        policy = parse_policy(record["policy"], recorded=True)
    except PolicyError as exc:
        return f"shadow_set record is not a valid policy: {exc}"
    return SetShadow(
        policy,
        record.get("policy_ref"),
        record.get("version"),
        record.get("by"),
        record.get("by_id"),
    )


def _cleared_of(record: Record) -> ClearShadow:
    return ClearShadow(record.get("by"), record.get("by_id"))


def _describe_set(record: Record) -> str:
    ref = record.get("policy_ref")
    return "" if ref is None else f"{ref} version {record.get('version')}"


def _describe_cleared(record: Record) -> str:
    return ""


KIND_ENTRIES = (
    KindEntry(
        kind=Kind.SHADOW_SET,
        fold=_fold_set,
        finish=nothing_follows,
        continues=never_continues,
        describe=_describe_set,
        starts=_set_of,
        announces=announces_nothing,
        settles=settles_nothing,
        # A candidate's shadow changes none of its decisions: run as it was.
        under_candidate=replayed,
    ),
    KindEntry(
        kind=Kind.SHADOW_CLEARED,
        fold=_fold_cleared,
        finish=nothing_follows,
        continues=never_continues,
        describe=_describe_cleared,
        starts=_cleared_of,
        announces=announces_nothing,
        settles=settles_nothing,
        under_candidate=replayed,
    ),
)

COMMAND_ENTRIES = (
    CommandEntry(command=SetShadow, writes=set_shadow, view=None, reads=None),
    CommandEntry(command=ClearShadow, writes=clear_shadow, view=None, reads=None),
    CommandEntry(command=GetShadow, writes=None, view=get_shadow, reads=None),
)
