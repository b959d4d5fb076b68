"""Actions: an agent asks to act, and reports what came of it.

A request (``RequestAction``) writes ``action_requested`` and then its
decision (``decisions.conclude``); a request the policy would hold for
approval is allowed at once when a grant covers it. A repeated
``Idempotency-Key`` writes nothing and answers with the first decision. An
allowed action's outcome (``ReportOutcome``) adds a scar when it failed or
did harm. ``GetAction`` shows one action, ``FindAction`` names the one an
Idempotency-Key asked for; ``WatchAction`` (a long-poll) is
answered by the actor itself.
"""

from __future__ import annotations

from array import array
from decimal import Decimal
from typing import Any

import attrs

from agents_runtime.core.checks import Verdict, decide
from agents_runtime.core.decisions import conclude
from agents_runtime.core.entries import (
    Command,
    CommandEntry,
    Dropped,
    KindEntry,
    Record,
    Steps,
    announces_nothing,
    never_continues,
    no_description,
    replayed,
    settles_nothing,
    signed_by,
)
from agents_runtime.core.grants import drawable
from agents_runtime.core.scars import add_scar
from agents_runtime.core.shadow import shadow_of
from agents_runtime.core.state import (
    STATUS_CODES,
    AgentState,
    Lines,
    Recall,
    action_number,
    action_of,
    action_outcome,
    action_reads,
    action_status,
    evict,
    first_decision,
    first_decision_reads,
    keep_key,
    keyed_action,
    known_action,
    left_memory,
    note_late,
    parse_ts,
    recall,
    request_of,
)
from agents_runtime.core.vocabulary import ADMIN, SYSTEM, ActionStatus, Decision, Outcome, Severity
from agents_runtime.errors import AgentUnavailable, Forbidden, IdempotencyConflict, InvalidState
from agents_runtime.log.canonical import dumps
from agents_runtime.log.kinds import Kind

OUTCOME_SCARS: dict[str, Severity | None] = {
    Outcome.SUCCESS: None,
    Outcome.FAILURE: Severity.MINOR,
    Outcome.HARMFUL: Severity.SEVERE,
}

# Compared or written for every request: aliases spare the lookup of a member
# on its enum class.
_ALLOWED = Decision.ALLOWED
_PENDING = Decision.PENDING_APPROVAL
_REQUESTED = ActionStatus.REQUESTED
_ACTION_REQUESTED = Kind.ACTION_REQUESTED
_ALLOWED_CODE = STATUS_CODES[ActionStatus.ALLOWED]


@attrs.frozen
class RequestAction(Command):
    tool: str
    input: Any = None
    cost: Decimal | None = None
    idempotency_key: str | None = None
    by: str | None = None  # an operator asking on the agent's behalf (entries.signed_by)
    by_id: str | None = None


@attrs.frozen
class GetAction(Command):
    action_id: str


@attrs.frozen
class FindAction(Command):
    """Reply: the ID of the action first requested with this Idempotency-Key,
    or None. Reads nothing: an adapter that learns a call's ID only from its
    own key (a Claude Code hook's ``tool_use_id``) finds the action without
    asking for it again, which would create one for a key never seen."""

    idempotency_key: str


@attrs.frozen
class WatchAction(Command):
    """Reply: a future that completes when the action leaves pending_approval."""

    action_id: str


@attrs.frozen
class ReportOutcome(Command):
    action_id: str
    outcome: str  # success, failure, harmful
    role: str  # ADMIN or AGENT
    detail: str | None = None


# -- a request --------------------------------------------------------------------------


def _same_request(requested: dict[str, Any], cmd: RequestAction) -> bool:
    first = {
        "tool": requested["tool"],
        "input": requested["input"],
        "cost": requested["requested_cost"],
    }
    again = {"tool": cmd.tool, "input": cmd.input, "cost": cmd.cost}
    return dumps(first) == dumps(again)


def _repeated(state: AgentState, cmd: RequestAction, now: float) -> int | None:
    """The number of the action an Idempotency-Key repeat names, if any: a
    key older than its retention names none (a new request)."""
    key = cmd.idempotency_key
    return None if key is None else keyed_action(state, key, now)


def request_reads(state: AgentState, cmd: RequestAction) -> tuple[int, ...] | Recall:
    # No clock here: a key past its retention still reads the lines of its
    # action, which request_action then does not use.
    key = cmd.idempotency_key
    earlier = None if key is None else keyed_action(state, key, float("-inf"))
    if earlier is None:
        return ()
    i = earlier - state.first_action
    if i >= 0 and state.action_status[i] == 0:  # undecided: nothing to quote
        return ()
    return first_decision_reads(state, earlier)


def request_action(state: AgentState, cmd: RequestAction, now: float, lines: Lines) -> Steps:
    earlier = _repeated(state, cmd, now)
    if earlier is not None:
        if action_status(state, earlier, lines) == _REQUESTED:
            # Only a read-only or fenced guardd keeps a request a crash cut
            # short undecided (it cannot write the decision).
            raise AgentUnavailable(
                f"act-{earlier} was cut short by a crash and guardd cannot decide it now"
            )
        first = request_of(state, earlier, lines)
        # An older key is found by its digest: another key with the same
        # digest is no repeat (agents_runtime/core/idempotency.py).
        if first.get("idempotency_key") == cmd.idempotency_key:
            if not _same_request(first, cmd):
                raise IdempotencyConflict(
                    f"Idempotency-Key was first used for act-{earlier} with a different body"
                )
            return first_decision(state, earlier, lines)
    action_id = state.next_action_id
    verdict = decide(state, cmd.tool, cmd.cost, now, cmd.input)
    verdict, grant = _draw(state, verdict, cmd.tool, cmd.input, now)
    fields: dict[str, Any] = {
        "kind": _ACTION_REQUESTED,
        "action_id": action_id,
        "tool": cmd.tool,
        "input": cmd.input,
        "requested_cost": cmd.cost,
        "cost": verdict.charge,
    }
    if cmd.idempotency_key is not None:
        fields["idempotency_key"] = cmd.idempotency_key
    signed_by(fields, cmd.by, cmd.by_id)
    shadow = state.shadow
    if shadow is not None:
        other = shadow_of(state, shadow, cmd.tool, cmd.cost, cmd.input, now, verdict.decision)
        requested = yield fields
        return (
            yield from conclude(state, action_id, verdict, requested, grant=grant, shadow=other)
        )
    requested = yield fields
    return (yield from conclude(state, action_id, verdict, requested, grant=grant))


def _draw(
    state: AgentState, verdict: Verdict, tool: str, tool_input: Any, now: float
) -> tuple[Verdict, str | None]:
    """A request the policy would hold for approval, allowed on a grant with
    room left (every check has passed already), and that grant's ID; any
    other verdict as it is."""
    if verdict.decision != _PENDING or not state.grants:
        return verdict, None
    grant = drawable(state.grants, tool, tool_input, verdict.charge, now)
    if grant is None:
        return verdict, None
    return Verdict(_ALLOWED, verdict.charge, None, verdict.rule), grant.grant_id


def get_action_reads(state: AgentState, cmd: GetAction) -> tuple[int, ...] | Recall:
    n = action_number(state, cmd.action_id)
    return () if n is None else action_reads(state, n)


def get_action(state: AgentState, cmd: GetAction, now: float, lines: Lines) -> int:
    """Reply: the action's number (its view reads ``lines``)."""
    return known_action(state, cmd.action_id)


def find_action(state: AgentState, cmd: FindAction, now: float, lines: Lines) -> str | None:
    n = keyed_action(state, cmd.idempotency_key, now)
    return None if n is None else f"act-{n}"


def _fold_requested(state: AgentState, r: Record) -> None:
    if r["action_id"] != state.next_action_id:
        raise ValueError(f"{r['action_id']} requested where {state.next_action_id} comes next")
    seqs = state.action_seqs
    n = state.first_action + len(seqs)
    seq = r["seq"]
    try:
        seqs.append(seq)
    except OverflowError:  # 4 bytes a seq until a log has 2^32 records
        seqs = state.action_seqs = array("q", seqs)
        seqs.append(seq)
    state.action_status.append(0)
    state.next_action_id = f"act-{n + 1}"
    if len(seqs) > 2 * state.recent_actions:
        evict(state, state.recent_actions, seq)
    key = r.get("idempotency_key")
    if key is not None:
        keep_key(state, key, n, parse_ts(r["ts"]))


def _finish_request(state: AgentState, last: Record) -> Steps:
    # Decided as the handler would have: same checks, at the request's ts.
    cost = last["requested_cost"]
    requested_cost = None if cost is None else Decimal(cost)
    now = parse_ts(last["ts"])
    verdict = decide(state, last["tool"], requested_cost, now, last["input"])
    verdict, grant = _draw(state, verdict, last["tool"], last["input"], now)
    shadow = state.shadow
    other = None
    if shadow is not None:
        other = shadow_of(
            state, shadow, last["tool"], requested_cost, last["input"], now, verdict.decision
        )
    yield from conclude(state, last["action_id"], verdict, last, grant=grant, shadow=other)


def _decimal(value: Any) -> Decimal | None:
    if value is None:
        return None
    if type(value) is int or isinstance(value, Decimal):
        return Decimal(value)
    raise ValueError(f"requested_cost {value!r} is not a number")


def _request_of(record: Record) -> RequestAction:
    return RequestAction(
        tool=record["tool"],
        input=record["input"],
        cost=_decimal(record["requested_cost"]),
        idempotency_key=record.get("idempotency_key"),
        by=record.get("by"),
        by_id=record.get("by_id"),
    )


def _settles_requested(record: Record) -> str:
    return ActionStatus.REQUESTED


# -- an outcome -------------------------------------------------------------------------


def report_outcome(state: AgentState, cmd: ReportOutcome, now: float, lines: Lines) -> Steps:
    if cmd.outcome == Outcome.HARMFUL and cmd.role != ADMIN:
        raise Forbidden("only the admin token may report a harmful outcome")
    n = known_action(state, cmd.action_id)
    status = action_status(state, n, lines)
    if status != ActionStatus.ALLOWED:
        outcome = action_outcome(state, n, lines)
        if outcome is not None:
            raise InvalidState(f"action {cmd.action_id} already has outcome {outcome}")
        raise InvalidState(f"action {cmd.action_id} is {status}, not allowed")
    fields: dict[str, Any] = {
        "kind": Kind.OUTCOME,
        "action_id": cmd.action_id,
        "outcome": cmd.outcome,
        "by": cmd.role,
    }
    if cmd.detail is not None:
        fields["detail"] = cmd.detail
    yield fields
    yield from _outcome_scar(state, cmd.action_id, cmd.outcome, cmd.detail)
    return state


def _outcome_scar(state: AgentState, action_id: str, outcome: str, detail: str | None) -> Steps:
    severity = OUTCOME_SCARS[outcome]
    if severity is not None:
        reason = f"outcome: {outcome}" + (f": {detail}" if detail else "")
        yield from add_scar(state, severity, reason, action_id, SYSTEM)


def report_reads(state: AgentState, cmd: ReportOutcome) -> tuple[int, ...] | Recall:
    n = action_number(state, cmd.action_id)
    return recall(state, n) if n is not None and left_memory(state, n) else ()


def _fold_outcome(state: AgentState, r: Record) -> None:
    i = action_of(state, r) - state.first_action
    if i < 0:
        # The action left the latest: its handler checked it (against its
        # records if it left memory); a recall of it reads this one too.
        held = state.held.get(r["action_id"])
        if held is not None:
            if held.late_status != _ALLOWED_CODE:
                raise ValueError(f"{r['action_id']} is not allowed, or has its outcome already")
            held.late_status = STATUS_CODES[r["outcome"]]
        note_late(state, i + state.first_action, r["seq"])
        return
    if state.action_status[i] != _ALLOWED_CODE:
        raise ValueError(f"{r['action_id']} is not allowed, or has its outcome already")
    state.action_status[i] = STATUS_CODES[r["outcome"]]


def _finish_outcome(state: AgentState, last: Record) -> Steps:
    yield from _outcome_scar(state, last["action_id"], last["outcome"], last.get("detail"))


def _outcome_of(record: Record) -> ReportOutcome:
    return ReportOutcome(record["action_id"], record["outcome"], record["by"], record.get("detail"))


def _describe_outcome(record: Record) -> str:
    return str(record.get("outcome"))


def _only_if_allowed(state: AgentState, record: Record) -> Dropped | None:
    # An outcome is replayed for an action the candidate allows, dropped otherwise.
    n = action_number(state, record["action_id"])
    allowed = n is not None and action_status(state, n) == ActionStatus.ALLOWED
    return None if allowed else Dropped.OUTCOME


KIND_ENTRIES = (
    KindEntry(
        kind=Kind.ACTION_REQUESTED,
        fold=_fold_requested,
        finish=_finish_request,
        continues=never_continues,
        describe=no_description,
        starts=_request_of,
        announces=announces_nothing,
        settles=_settles_requested,
        under_candidate=replayed,
        # Folded even where the policy refuses it, so later action IDs line up.
        folded_when_refused=True,
    ),
    KindEntry(
        kind=Kind.OUTCOME,
        fold=_fold_outcome,
        finish=_finish_outcome,
        continues=never_continues,
        describe=_describe_outcome,
        starts=_outcome_of,
        announces=announces_nothing,
        settles=settles_nothing,
        under_candidate=_only_if_allowed,
    ),
)

COMMAND_ENTRIES = (
    CommandEntry(command=RequestAction, writes=request_action, view=None, reads=request_reads),
    CommandEntry(command=GetAction, writes=None, view=get_action, reads=get_action_reads),
    CommandEntry(command=FindAction, writes=None, view=find_action, reads=None),
    CommandEntry(
        command=ReportOutcome,
        writes=report_outcome,
        view=None,
        reads=report_reads,
        replies_status=True,
    ),
    # A long-poll: the actor answers it itself, when the action is decided.
    CommandEntry(command=WatchAction, writes=None, view=None, reads=None),
)
