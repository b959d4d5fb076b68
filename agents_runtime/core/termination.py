"""Termination: how an agent ends, for good.

An operator terminates an agent (``Terminate``); the service terminates it
on its own (``by: system``) when a fatal scar is added, when its scar score
reaches the policy's limit, and when an allowed action's positive charge
brings ``remaining`` to exactly 0. Each writes a ``terminated`` record; after
it nothing is allowed or charged again and no second ``terminated`` is
written.
"""

from __future__ import annotations

from decimal import Decimal

import attrs

from agents_runtime.core.entries import (
    Command,
    CommandEntry,
    Dropped,
    KindEntry,
    Record,
    Steps,
    nothing_follows,
    settles_nothing,
    signed_by,
)
from agents_runtime.core.money import ZERO
from agents_runtime.core.state import AgentState, Lines
from agents_runtime.core.vocabulary import SYSTEM, TerminationReason
from agents_runtime.errors import AlreadyTerminated
from agents_runtime.log.kinds import Kind


@attrs.frozen
class Terminate(Command):
    reason: str
    by: str
    by_id: str | None = None  # the operator's identity (entries.signed_by)


def terminate(state: AgentState, cmd: Terminate, now: float, lines: Lines) -> Steps:
    if not state.alive:
        raise AlreadyTerminated(
            f"agent {state.agent_id} is already terminated ({state.termination_reason})"
        )
    yield signed_by(
        {"kind": Kind.TERMINATED, "reason": cmd.reason, "by": cmd.by}, cmd.by, cmd.by_id
    )
    return state


def terminate_if_due(state: AgentState, *, fatal: bool = False) -> Steps:
    """After a scar or a new policy (folded): terminate an agent at its limit."""
    if not state.alive or state.policy is None:
        return
    if fatal:
        yield {"kind": Kind.TERMINATED, "reason": TerminationReason.FATAL_SCAR, "by": SYSTEM}
    elif state.scar_score >= state.policy.scar_limit:
        yield {"kind": Kind.TERMINATED, "reason": TerminationReason.SCAR_LIMIT, "by": SYSTEM}


def terminate_if_exhausted(remaining: Decimal, charge: Decimal, alive: bool) -> Steps:
    # Only a positive charge that brings remaining to exactly 0 terminates.
    if remaining == ZERO and charge > ZERO and alive:
        yield {"kind": Kind.TERMINATED, "reason": TerminationReason.BUDGET_EXHAUSTED, "by": SYSTEM}


def _fold(state: AgentState, r: Record) -> None:
    state.alive = False
    state.termination_reason = r["reason"]
    state.terminated_by = r["by"]


def _starts(record: Record) -> Terminate:
    return Terminate(record["reason"], record["by"], record.get("by_id"))


def _continues(record: Record, previous: Record) -> bool:
    # The service's own termination ends the command whose record made it due.
    automatic_after = (Kind.SCAR, Kind.ACTION_ALLOWED, Kind.POLICY)
    return record.get("by") == SYSTEM and previous.get("kind") in automatic_after


def _describe(record: Record) -> str:
    return f"{record.get('reason')}, by {record.get('by')}"


def _announces(record: Record, requested: Record | None) -> tuple[str, Record]:
    return "agent.terminated", {"reason": record["reason"], "by": record["by"]}


def _under_candidate(state: AgentState, record: Record) -> Dropped | None:
    # An agent the candidate has terminated already is not terminated twice.
    return None if state.alive else Dropped.LEFT_OUT


KIND_ENTRIES = (
    KindEntry(
        kind=Kind.TERMINATED,
        fold=_fold,
        finish=nothing_follows,
        continues=_continues,
        describe=_describe,
        starts=_starts,
        announces=_announces,
        settles=settles_nothing,
        under_candidate=_under_candidate,
    ),
)

COMMAND_ENTRIES = (
    CommandEntry(command=Terminate, writes=terminate, view=None, reads=None, replies_status=True),
)
