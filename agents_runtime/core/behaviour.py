"""What an agent does with each command: the behaviour, apart from the actor.

A command that writes has a handler that checks it against the state, then
``yield``s the fields of each record to write, and returns the reply. The
handler neither seals nor applies: whoever runs it (the actor, or ``audit
replay``) seals each record, folds it into the state with ``apply``, and
sends the ``Sealed`` record back into the generator, which goes on from
there (a receipt quotes the lines it got back). So the state a handler reads
changes only at a ``yield``, and only by the fold that replay runs too.

A command that only reads has a view: a plain function of the state.

Neither does I/O or reads a clock: ``now`` is the ``ts`` of the records a
batch writes, and an earlier record a reply quotes (the first decision of an
``Idempotency-Key`` repeat, a finished action's input) comes in ``lines``,
read beforehand by the runtime from the store: ``READS`` says which.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from decimal import Decimal
from typing import Any

from agents_runtime.core import commands as c
from agents_runtime.core.checks import DENY_SCARS, Verdict, decide
from agents_runtime.core.grants import Grant, drawable, grant_json
from agents_runtime.core.money import ZERO
from agents_runtime.core.policy import policy_json
from agents_runtime.core.state import (
    Action,
    AgentState,
    Lines,
    action_json,
    action_number,
    action_outcome,
    action_reads,
    action_status,
    expired_actions,
    first_decision,
    first_decision_reads,
    parse_line,
    parse_ts,
    pending_json,
    receipt,
    request_line,
    status_json,
)
from agents_runtime.core.vocabulary import (
    ActionStatus,
    Decision,
    Outcome,
    ReasonCode,
    Severity,
    TerminationReason,
)
from agents_runtime.errors import (
    AgentUnavailable,
    AlreadyTerminated,
    Forbidden,
    IdempotencyConflict,
    InvalidState,
    NotFound,
    UnknownAction,
)
from agents_runtime.log.canonical import dumps
from agents_runtime.log.kinds import Kind
from agents_runtime.log.record import Sealed, timestamp_micros

# A handler's generator: yields record fields, is sent each one sealed (and
# folded), returns the reply.
Steps = Generator[dict[str, Any], Sealed, Any]
NO_LINES: Lines = {}
SYSTEM = "system"
OPERATOR = "operator"
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
_ACTION_ALLOWED = Kind.ACTION_ALLOWED
_APPROVAL_REQUIRED = Kind.APPROVAL_REQUIRED


def _action(state: AgentState, action_id: str) -> int:
    """The number of the agent's action ``action_id``, or UnknownAction."""
    n = action_number(state, action_id)
    if n is None:
        raise UnknownAction(f"no action {action_id} for agent {state.agent_id}")
    return n


def _pending(state: AgentState, action_id: str) -> Action:
    n = _action(state, action_id)
    action = state.pending.get(action_id)
    if action is None:
        held = state.held.get(action_id)
        if held is not None and held.decided_at is not None:
            raise InvalidState(f"action {action_id} {_decided_how(held)}; it is no longer pending")
        status = action_status(state, n)
        raise InvalidState(f"action {action_id} is {status}, not {ActionStatus.PENDING_APPROVAL}")
    return action


def _decided_how(held: Action) -> str:
    """What took a held action out of pending, by whom and when, for the 409
    of a decision that came too late (two operators, or a withdrawn call)."""
    at = held.decided_at
    reason = held.reason
    if reason is None:
        return f"was approved by {held.approved_by} at {at}"
    code = reason.get("code")
    if code == ReasonCode.REJECTED:
        return f"was rejected by {reason['by']} at {at}: {reason['reason']}"
    if code == ReasonCode.CANCELLED:
        why = f": {reason['reason']}" if "reason" in reason else ""
        return f"was cancelled by {reason['by']} at {at}{why}"
    if code == ReasonCode.APPROVAL_EXPIRED:
        return f"expired at {at}, unapproved after {reason['timeout_secs']} seconds"
    return f"was denied ({code}) at {at} when {held.approved_by or 'an operator'} approved it"


def add_scar(
    state: AgentState,
    severity: str,
    reason: str,
    action_id: str | None,
    by: str,
) -> Steps:
    fields: dict[str, Any] = {"kind": Kind.SCAR, "severity": severity, "reason": reason, "by": by}
    if action_id is not None:
        fields["action_id"] = action_id
    yield fields
    yield from _terminate_if_due(state, fatal=severity == Severity.FATAL)


def _terminate_if_due(state: AgentState, *, fatal: bool = False) -> Steps:
    """After a scar or a new policy (folded): terminate an agent at its limit."""
    if not state.alive or state.policy is None:
        return
    if fatal:
        yield {"kind": Kind.TERMINATED, "reason": TerminationReason.FATAL_SCAR, "by": SYSTEM}
    elif state.scar_score >= state.policy.scar_limit:
        yield {"kind": Kind.TERMINATED, "reason": TerminationReason.SCAR_LIMIT, "by": SYSTEM}


def _terminate_if_exhausted(remaining: Decimal, charge: Decimal, alive: bool) -> Steps:
    # Only a positive charge that brings remaining to exactly 0 terminates.
    if remaining == ZERO and charge > ZERO and alive:
        yield {"kind": Kind.TERMINATED, "reason": TerminationReason.BUDGET_EXHAUSTED, "by": SYSTEM}


def _denial_scar(state: AgentState, action_id: str, reason: dict[str, Any]) -> Steps:
    severity = DENY_SCARS[reason["code"]]
    if severity is not None:
        yield from add_scar(state, severity, f"denied: {reason['code']}", action_id, SYSTEM)


def _outcome_scar(state: AgentState, action_id: str, outcome: str, detail: str | None) -> Steps:
    severity = OUTCOME_SCARS[outcome]
    if severity is not None:
        reason = f"outcome: {outcome}" + (f": {detail}" if detail else "")
        yield from add_scar(state, severity, reason, action_id, SYSTEM)


def conclude(
    state: AgentState,
    action_id: str,
    verdict: Verdict,
    request: Sealed | dict[str, Any],
    *,
    approver: str | None = None,
    note: str | None = None,
    grant: str | None = None,
) -> Steps:
    """Write the decision records for a verdict on the action whose
    action_requested record is ``request`` (as sealed, or folded); return
    the decision object. ``grant``: the grant an allowance draws on in place
    of an approval."""
    if verdict.decision == _ALLOWED:
        charge = verdict.charge
        remaining = state.remaining - charge
        requested = request.record if isinstance(request, Sealed) else request
        fields: dict[str, Any] = {
            "kind": _ACTION_ALLOWED,
            "action_id": action_id,
            "cost": charge,
            "remaining": remaining,
            # Tie the allowance to its agent and its very request, so the two
            # signed lines prove it on their own (a receipt, docs/receipts.md).
            "log_id": state.agent_id,
            "request_hash": requested["hash"],
        }
        if approver is not None:
            fields["approved_by"] = approver
            if note is not None:
                fields["note"] = note
        if grant is not None:
            fields["grant_id"] = grant
        allowed = yield fields
        decision = {
            "decision": _ALLOWED,
            "action_id": action_id,
            "cost": charge,
            "remaining": remaining,
            "receipt": receipt(request_line(request), allowed.line[:-1]),
        }
        if grant is not None:
            decision["grant_id"] = grant
        yield from _terminate_if_exhausted(remaining, charge, state.alive)
        return decision
    if verdict.decision == _PENDING:
        yield {"kind": _APPROVAL_REQUIRED, "action_id": action_id, "cost": verdict.charge}
        return {"decision": _PENDING, "action_id": action_id}
    reason = verdict.reason or {}
    denied: dict[str, Any] = {"kind": Kind.ACTION_DENIED, "action_id": action_id, "reason": reason}
    if approver is not None:
        denied["by"] = approver
    yield denied
    yield from _denial_scar(state, action_id, reason)
    return {"decision": Decision.DENIED, "action_id": action_id, "reason": reason}


def _same_request(state: AgentState, n: int, cmd: c.RequestAction, lines: Lines) -> bool:
    held = state.held.get(f"act-{n}")
    requested = held.request if held is not None else parse_line(lines, state.action_seqs[n - 1])
    first = {
        "tool": requested["tool"],
        "input": requested["input"],
        "cost": requested["requested_cost"],
    }
    again = {"tool": cmd.tool, "input": cmd.input, "cost": cmd.cost}
    return dumps(first) == dumps(again)


def _repeated(state: AgentState, cmd: c.RequestAction) -> int | None:
    """The number of the action an Idempotency-Key repeat names, if any."""
    key = cmd.idempotency_key
    return None if key is None else state.idempotency.get(key)


def request_reads(state: AgentState, cmd: c.RequestAction) -> tuple[int, ...]:
    earlier = _repeated(state, cmd)
    if earlier is None or action_status(state, earlier) == _REQUESTED:
        return ()
    return first_decision_reads(state, earlier)


def request_action(state: AgentState, cmd: c.RequestAction, now: float, lines: Lines) -> Steps:
    earlier = _repeated(state, cmd)
    if earlier is not None:
        if action_status(state, earlier) == _REQUESTED:
            # Only a read-only or fenced guardd keeps a request a crash cut
            # short undecided (it cannot write the decision).
            raise AgentUnavailable(
                f"act-{earlier} was cut short by a crash and guardd cannot decide it now"
            )
        if not _same_request(state, earlier, cmd, lines):
            raise IdempotencyConflict(
                f"Idempotency-Key was first used for act-{earlier} with a different body"
            )
        return first_decision(state, earlier, lines)
    action_id = state.next_action_id
    verdict = decide(state, cmd.tool, cmd.cost, now)
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
    return Verdict(_ALLOWED, verdict.charge), grant.grant_id


def approve(state: AgentState, cmd: c.Approve, now: float, lines: Lines) -> Steps:
    action = _pending(state, cmd.action_id)
    verdict = decide(state, action.tool, action.requested_cost, now, approving=True)
    return (
        yield from conclude(
            state,
            action.action_id,
            verdict,
            action.request,
            approver=cmd.approver,
            note=cmd.note,
        )
    )


def reject(state: AgentState, cmd: c.Reject, now: float, lines: Lines) -> Steps:
    action = _pending(state, cmd.action_id)
    yield {
        "kind": Kind.ACTION_REJECTED,
        "action_id": action.action_id,
        "by": cmd.approver,
        "reason": cmd.reason,
        "scar": cmd.scar,
    }
    if cmd.scar is not None:
        yield from add_scar(state, cmd.scar, cmd.reason, action.action_id, cmd.approver)
    return {"decision": Decision.DENIED, "action_id": action.action_id, "reason": action.reason}


def cancel(state: AgentState, cmd: c.Cancel, now: float, lines: Lines) -> Steps:
    """The asker withdraws a pending action: never charged, no scar."""
    action = _pending(state, cmd.action_id)
    fields: dict[str, Any] = {"kind": Kind.ACTION_CANCELLED, "action_id": action.action_id}
    fields["by"] = cmd.role
    if cmd.reason is not None:
        fields["reason"] = cmd.reason
    yield fields
    # A cancelled action is held and has no receipt: its view reads nothing.
    return action_json(state, _action(state, action.action_id), NO_LINES)


def expire_due(state: AgentState, now: float) -> Steps:
    """Write ``approval_expired`` for every pending action whose approval
    timeout has run out at ``now`` (oldest first). The actor runs this at the
    start of a batch whose ``now`` has reached its earliest deadline, before
    the batch's commands, so no command sees an action past its time."""
    for action, timeout in expired_actions(state, now):
        action_id = action.action_id
        yield {"kind": Kind.APPROVAL_EXPIRED, "action_id": action_id, "timeout_secs": timeout}


def report_outcome(state: AgentState, cmd: c.ReportOutcome, now: float, lines: Lines) -> Steps:
    if cmd.outcome == Outcome.HARMFUL and cmd.role != c.ADMIN:
        raise Forbidden("only the admin token may report a harmful outcome")
    n = _action(state, cmd.action_id)
    status = action_status(state, n)
    if status != ActionStatus.ALLOWED:
        outcome = action_outcome(state, n)
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
    return status_json(state)


def scar(state: AgentState, cmd: c.AddScar, now: float, lines: Lines) -> Steps:
    if cmd.action_id is not None:
        _action(state, cmd.action_id)
    # Without a name the record keeps the word it always had, so logs written
    # before operators could sign their scars read (and replay) the same.
    by = OPERATOR if cmd.by is None else cmd.by
    yield from add_scar(state, cmd.severity, cmd.reason, cmd.action_id, by)
    return status_json(state)


def terminate(state: AgentState, cmd: c.Terminate, now: float, lines: Lines) -> Steps:
    if not state.alive:
        raise AlreadyTerminated(
            f"agent {state.agent_id} is already terminated ({state.termination_reason})"
        )
    yield {"kind": Kind.TERMINATED, "reason": cmd.reason, "by": cmd.by}
    return status_json(state)


def set_policy(state: AgentState, cmd: c.SetPolicy, now: float, lines: Lines) -> Steps:
    if not state.alive:
        raise InvalidState(f"agent {state.agent_id} is terminated; its policy cannot change")
    yield {"kind": Kind.POLICY, "policy": policy_json(cmd.policy)}
    yield from _terminate_if_due(state)
    # A shorter timeout applies at once: what it makes due expires now, in
    # the same write, not in a batch of its own at the same ts.
    yield from expire_due(state, now)
    return status_json(state)


def issue_grant(state: AgentState, cmd: c.IssueGrant, now: float, lines: Lines) -> Steps:
    if not state.alive:
        raise InvalidState(f"agent {state.agent_id} is terminated; it takes no grants")
    if cmd.expires_at is not None:
        expires_at = cmd.expires_at
        expires = parse_ts(expires_at)
    else:
        assert cmd.ttl_secs is not None  # the edge requires one of the two
        expires = now + float(cmd.ttl_secs)
        expires_at = timestamp_micros(round(expires * 1_000_000))
    if expires <= now:
        raise InvalidState(f"expires_at {expires_at} is not after now")
    grant_id = f"grt-{len(state.grants) + 1}"
    fields: dict[str, Any] = {
        "kind": Kind.GRANT_ISSUED,
        "grant_id": grant_id,
        "tool": cmd.tool,
        "by": cmd.by,
        "max_calls": cmd.max_calls,
        "max_cost": cmd.max_cost,
        "expires_at": expires_at,
        "input_match": cmd.input_match,
    }
    if cmd.note is not None:
        fields["note"] = cmd.note
    yield fields
    return grant_json(state.grants[grant_id], now)


def _grant(state: AgentState, grant_id: str) -> Grant:
    grant = state.grants.get(grant_id)
    if grant is None:
        raise NotFound(f"no grant {grant_id} for agent {state.agent_id}")
    return grant


def revoke_grant(state: AgentState, cmd: c.RevokeGrant, now: float, lines: Lines) -> Steps:
    grant = _grant(state, cmd.grant_id)
    if grant.revoked_by is not None:
        raise InvalidState(
            f"grant {grant.grant_id} was revoked by {grant.revoked_by} at {grant.revoked_at}"
        )
    fields: dict[str, Any] = {"kind": Kind.GRANT_REVOKED, "grant_id": grant.grant_id, "by": cmd.by}
    if cmd.reason is not None:
        fields["reason"] = cmd.reason
    yield fields
    return grant_json(grant, now)


# Views: commands that only read.


def list_grants(state: AgentState, cmd: c.ListGrants, now: float, lines: Lines) -> Any:
    return {"grants": [grant_json(g, now) for g in state.grants.values()]}


def get_status(state: AgentState, cmd: c.GetStatus, now: float, lines: Lines) -> Any:
    return status_json(state)


def get_policy(state: AgentState, cmd: c.GetPolicy, now: float, lines: Lines) -> Any:
    # Every loaded agent has one: a log without its policy record is quarantined.
    assert state.policy is not None
    return policy_json(state.policy)


def get_action_reads(state: AgentState, cmd: c.GetAction) -> tuple[int, ...]:
    n = action_number(state, cmd.action_id)
    return () if n is None else action_reads(state, n)


def get_action(state: AgentState, cmd: c.GetAction, now: float, lines: Lines) -> Any:
    return action_json(state, _action(state, cmd.action_id), lines)


def list_pending(state: AgentState, cmd: c.ListPending, now: float, lines: Lines) -> Any:
    return {"pending": [pending_json(a, state) for a in state.pending.values()]}


def finish_interrupted(state: AgentState) -> Steps:
    """Write what a crash kept the last command from writing.

    A command's records reach the disk in one write, but a crash can cut that
    write short: startup moves the torn line aside, and the whole lines before
    it stay in the log. They were never acknowledged, yet they are the log, so
    the command is finished now as its handler would have finished it (same
    checks, ``now`` = the ``ts`` of its records), before the agent takes any
    new command. Otherwise an action could stay undecided for ever (and an
    Idempotency-Key retry would find no decision), or an agent could stay
    alive past its scar limit or with its budget spent. A complete last
    command writes nothing here.
    """
    last = state.last_record
    if last is None:
        return
    kind = last["kind"]
    if kind == Kind.ACTION_REQUESTED:
        cost = last["requested_cost"]
        requested_cost = None if cost is None else Decimal(cost)
        now = parse_ts(last["ts"])
        verdict = decide(state, last["tool"], requested_cost, now)
        verdict, grant = _draw(state, verdict, last["tool"], last["input"], now)
        yield from conclude(state, last["action_id"], verdict, last, grant=grant)
    elif kind == Kind.ACTION_ALLOWED:
        yield from _terminate_if_exhausted(state.remaining, Decimal(last["cost"]), state.alive)
    elif kind == Kind.ACTION_DENIED:
        yield from _denial_scar(state, last["action_id"], last["reason"])
    elif kind == Kind.ACTION_REJECTED and last["scar"] is not None:
        yield from add_scar(state, last["scar"], last["reason"], last["action_id"], last["by"])
    elif kind == Kind.OUTCOME:
        yield from _outcome_scar(state, last["action_id"], last["outcome"], last.get("detail"))
    elif kind in (Kind.SCAR, Kind.POLICY):
        fatal = kind == Kind.SCAR and last["severity"] == Severity.FATAL
        yield from _terminate_if_due(state, fatal=fatal)
        if kind == Kind.POLICY:
            yield from expire_due(state, parse_ts(last["ts"]))


Handler = Callable[[AgentState, Any, float, Lines], Any]
Write = Callable[[dict[str, Any]], Sealed]

# The commands that write: each handler is a generator (``Steps``).
WRITERS: dict[type, Handler] = {
    c.RequestAction: request_action,
    c.Approve: approve,
    c.Reject: reject,
    c.Cancel: cancel,
    c.ReportOutcome: report_outcome,
    c.AddScar: scar,
    c.Terminate: terminate,
    c.SetPolicy: set_policy,
    c.IssueGrant: issue_grant,
    c.RevokeGrant: revoke_grant,
}
# The commands that only read: each view returns its reply.
VIEWS: dict[type, Handler] = {
    c.GetStatus: get_status,
    c.GetPolicy: get_policy,
    c.GetAction: get_action,
    c.ListPending: list_pending,
    c.ListGrants: list_grants,
}
# The commands whose reply may quote earlier records: the seqs of the lines
# their handler needs in ``lines``, read from the store before it runs.
READS: dict[type, Callable[[AgentState, Any], tuple[int, ...]]] = {
    c.RequestAction: request_reads,
    c.GetAction: get_action_reads,
}


def run_steps(steps: Steps, write: Write) -> Any:
    """Run a writer's generator: ``write`` each record it yields (seal and
    fold it), send the sealed record back, and return the reply."""
    try:
        fields = next(steps)
        while True:
            fields = steps.send(write(fields))
    except StopIteration as done:
        return done.value


def run(state: AgentState, command: Any, now: float, lines: Lines, write: Write) -> Any:
    """Run ``command`` on ``state``: a view, or a writer whose records go to
    ``write``; its reply. ``lines`` holds what ``READS`` names for it."""
    kind = type(command)
    writer = WRITERS.get(kind)
    if writer is not None:
        return run_steps(writer(state, command, now, lines), write)
    return VIEWS[kind](state, command, now, lines)
