"""Scars: marks against an agent's conduct, which can end it.

An operator adds one (``AddScar``); the service adds its own (``by:
system``) for some denials and for failed or harmful outcomes, and a
rejection adds the one its approver chose. Each scar's weight goes into the
agent's scar score; a fatal scar, or a score that reaches the policy's
``scar_limit``, terminates the agent in the same command.
"""

from __future__ import annotations

from typing import Any

import attrs

from agents_runtime.core.entries import (
    Command,
    CommandEntry,
    KindEntry,
    Record,
    Steps,
    announces_nothing,
    replayed,
    settles_nothing,
    signed_by,
)
from agents_runtime.core.state import AgentState, Lines, Scar, known_action
from agents_runtime.core.termination import terminate_if_due
from agents_runtime.core.vocabulary import OPERATOR, SYSTEM, Severity
from agents_runtime.log.kinds import Kind

# What each severity adds to the score; a fatal scar terminates at once instead.
SCAR_WEIGHTS = {Severity.MINOR: 1, Severity.MODERATE: 3, Severity.SEVERE: 10, Severity.FATAL: 0}


@attrs.frozen
class AddScar(Command):
    severity: str
    reason: str
    action_id: str | None = None
    by: str | None = None  # the operator who adds it; None writes "operator"
    by_id: str | None = None  # the operator's identity (entries.signed_by)


def add_scar(
    state: AgentState,
    severity: str,
    reason: str,
    action_id: str | None,
    by: str,
    by_id: str | None = None,
) -> Steps:
    fields: dict[str, Any] = {"kind": Kind.SCAR, "severity": severity, "reason": reason, "by": by}
    if action_id is not None:
        fields["action_id"] = action_id
    signed_by(fields, by, by_id)
    yield fields
    yield from terminate_if_due(state, fatal=severity == Severity.FATAL)


def scar(state: AgentState, cmd: AddScar, now: float, lines: Lines) -> Steps:
    if cmd.action_id is not None:
        known_action(state, cmd.action_id)
    # Without a name the record keeps the word it always had, so logs written
    # before operators could sign their scars read (and replay) the same.
    by = OPERATOR if cmd.by is None else cmd.by
    yield from add_scar(state, cmd.severity, cmd.reason, cmd.action_id, by, cmd.by_id)
    return state


def _fold(state: AgentState, r: Record) -> None:
    severity = r["severity"]
    state.scars.append(Scar(r["seq"], severity, r["reason"], r.get("action_id")))
    state.scar_score += SCAR_WEIGHTS[severity]


def _finish(state: AgentState, last: Record) -> Steps:
    yield from terminate_if_due(state, fatal=last["severity"] == Severity.FATAL)


def _starts(record: Record) -> AddScar | None:
    by = record.get("by")
    if not isinstance(by, str) or by == SYSTEM:
        return None  # the service's own: it follows the record that caused it
    # An operator's scar: ``by`` is the name given, or "operator" when none was.
    return AddScar(
        record["severity"], record["reason"], record.get("action_id"), by, record.get("by_id")
    )


def _continues(record: Record, previous: Record) -> bool:
    if record.get("action_id") != previous.get("action_id"):
        return False
    # A denial's and an outcome's scars are the service's own; a rejection's
    # only when it chose one. Any other scar is an operator's, even one
    # signed by the approver who just rejected that action.
    before = previous.get("kind")
    if before in (Kind.ACTION_DENIED, Kind.OUTCOME):
        return record.get("by") == SYSTEM
    return before == Kind.ACTION_REJECTED and previous.get("scar") is not None


def _describe(record: Record) -> str:
    return f"{record.get('severity')}, by {record.get('by')}"


KIND_ENTRIES = (
    KindEntry(
        kind=Kind.SCAR,
        fold=_fold,
        finish=_finish,
        continues=_continues,
        describe=_describe,
        starts=_starts,
        announces=announces_nothing,
        settles=settles_nothing,
        under_candidate=replayed,
    ),
)

COMMAND_ENTRIES = (
    CommandEntry(command=AddScar, writes=scar, view=None, reads=None, replies_status=True),
)
