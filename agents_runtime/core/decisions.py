"""Decisions: what settles an action once it has been asked for.

A request is decided at once by the checks (``conclude``): allowed, denied,
or held for approval. A held action is then settled by one of: an operator's
approval (the checks run again: allowed, or denied with ``by``), an
operator's rejection, its asker's cancel, or the actor's timer when its
approval timeout runs out (``expire_due``). The records of this module are
those decisions; the request itself is in ``actions``.
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import Any

import attrs

from agents_runtime.core.answers import Allowed, Denied, Pending
from agents_runtime.core.checks import DENY_SCARS, Verdict, decide
from agents_runtime.core.entries import (
    BY_TIMER,
    Announce,
    ByTimer,
    Command,
    CommandEntry,
    Dropped,
    KindEntry,
    Record,
    Steps,
    json_text,
    left_out,
    never_continues,
    no_command,
    no_description,
    nothing_follows,
    signed_by,
)
from agents_runtime.core.rate_history import TRIM_EVERY, trim_allowed_times
from agents_runtime.core.scars import add_scar
from agents_runtime.core.shadow import tally
from agents_runtime.core.state import (
    NO_TAGS,
    STATUS_CODES,
    Action,
    AgentState,
    Lines,
    Recall,
    action_number,
    action_of,
    action_status,
    allow_held,
    cancelled_reason,
    deny_held,
    expired_actions,
    expired_reason,
    given,
    hold,
    known_action,
    left_memory,
    note_late,
    parse_ts,
    recall,
    recalled,
    rejected_reason,
    request_line,
)
from agents_runtime.core.termination import terminate_if_exhausted
from agents_runtime.core.vocabulary import (
    ADMIN,
    ADMIN_TOKEN_ID,
    SYSTEM,
    ActionStatus,
    Decision,
    ReasonCode,
)
from agents_runtime.errors import Forbidden, InvalidState
from agents_runtime.log.kinds import Kind
from agents_runtime.log.record import Sealed

# Compared or written for every request: aliases spare the lookup of a member
# on its enum class.
_ALLOWED = Decision.ALLOWED
_PENDING = Decision.PENDING_APPROVAL
_DENIED = Decision.DENIED
_ACTION_REQUESTED = Kind.ACTION_REQUESTED
_ACTION_ALLOWED = Kind.ACTION_ALLOWED
_APPROVAL_REQUIRED = Kind.APPROVAL_REQUIRED
_ALLOWED_CODE = STATUS_CODES[ActionStatus.ALLOWED]
_DENIED_CODE = STATUS_CODES[ActionStatus.DENIED]
_PENDING_CODE = STATUS_CODES[ActionStatus.PENDING_APPROVAL]
_CANCELLED_CODE = STATUS_CODES[ActionStatus.CANCELLED]
_POLICY_RULE = ReasonCode.POLICY_RULE


@attrs.frozen
class Approve(Command):
    action_id: str
    approver: str
    note: str | None = None
    by_id: str | None = None  # the approver's identity (entries.signed_by)
    # The approver's passkey assertion, checked by guardd against the binding
    # (agents_runtime.log.passkeys) before it sends this; written as it is.
    passkey: dict[str, str] | None = None


@attrs.frozen
class Reject(Command):
    action_id: str
    approver: str
    reason: str
    scar: str | None = None
    by_id: str | None = None
    passkey: dict[str, str] | None = None


@attrs.frozen
class Cancel(Command):
    """The asker withdraws a pending action (agent or admin)."""

    action_id: str
    role: str  # ADMIN or AGENT
    reason: str | None = None
    by: str | None = None  # an operator's display name; with by_id, written for the role
    by_id: str | None = None


@attrs.frozen
class ListPending(Command):
    pass


@attrs.frozen
class ApprovalSubject(Command):
    """What an operator's passkey signs to decide a pending action (its binding's parts)."""

    action_id: str


@attrs.frozen
class Subject:
    """The reply of ApprovalSubject: the agent's log, the action, the hash
    of its request, and which decisions of it need a passkey."""

    log_id: str
    action_id: str
    request_hash: str
    passkey_approve: bool
    passkey_reject: bool


# -- the decision of a request, and of an approval --------------------------------------


def conclude(
    state: AgentState,
    action_id: str,
    verdict: Verdict,
    request: Sealed | dict[str, Any],
    *,
    approver: str | None = None,
    note: str | None = None,
    grant: str | None = None,
    by_id: str | None = None,
    approvers: list[dict[str, Any]] | None = None,
    shadow: dict[str, Any] | None = None,
    passkey: dict[str, str] | None = None,
) -> Steps:
    """Write the decision records for a verdict on the action whose
    action_requested record is ``request`` (as sealed, or folded); return
    the decision object. ``grant``: the grant an allowance draws on in place
    of an approval; ``shadow``: a shadow policy's other decision
    (``shadow.shadow_of``), carried by the decision record."""
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
            signed_by(fields, approver, by_id)
            if approvers is not None:
                fields["approvers"] = approvers
            if passkey is not None:
                fields["passkey"] = passkey
        if grant is not None:
            fields["grant_id"] = grant
        if shadow is not None:
            fields["shadow"] = shadow
        if verdict.rule is not None:
            fields["rule"] = verdict.rule
        allowed = yield fields
        decision = Allowed(
            action_id,
            charge,
            remaining,
            (request_line(request), allowed.line[:-1]),
            grant,
            verdict.rule,
        )
        yield from terminate_if_exhausted(remaining, charge, state.alive)
        return decision
    if verdict.decision == _PENDING:
        held = {"kind": _APPROVAL_REQUIRED, "action_id": action_id, "cost": verdict.charge}
        if verdict.rule is not None:
            held["rule"] = verdict.rule
        if shadow is not None:
            held["shadow"] = shadow
        yield held
        return Pending(action_id, verdict.rule)
    reason = verdict.reason or {}
    denied: dict[str, Any] = {"kind": Kind.ACTION_DENIED, "action_id": action_id, "reason": reason}
    if approver is not None:
        denied["by"] = approver
        signed_by(denied, approver, by_id)
        if approvers is not None:
            denied["approvers"] = approvers
        if passkey is not None:
            denied["passkey"] = passkey
    if verdict.rule is not None:
        denied["rule"] = verdict.rule
    if shadow is not None:
        denied["shadow"] = shadow
    yield denied
    yield from _denial_scar(state, action_id, reason)
    return Denied(action_id, reason, verdict.rule)


def _denial_scar(state: AgentState, action_id: str, reason: dict[str, Any]) -> Steps:
    code = reason["code"]
    # A deny rule sets its own scar, written into its reason (so finishing a
    # denial a crash cut short, and replay, read it back).
    severity = reason.get("scar") if code == _POLICY_RULE else DENY_SCARS[code]
    if severity is not None:
        yield from add_scar(state, severity, f"denied: {reason['code']}", action_id, SYSTEM)


def pending_action(state: AgentState, action_id: str, lines: Lines) -> Action:
    """The agent's pending action ``action_id``, or why it cannot be decided
    (``lines``: ``pending_reads``)."""
    n = known_action(state, action_id)
    action = state.pending.get(action_id)
    if action is None:
        if left_memory(state, n):
            old = recalled(state, n, lines)
            held = old.held
        else:
            held = state.held.get(action_id)
        if held is not None and held.decided_at is not None:
            raise InvalidState(f"action {action_id} {_decided_how(held)}; it is no longer pending")
        status = action_status(state, n, lines)
        raise InvalidState(f"action {action_id} is {status}, not {ActionStatus.PENDING_APPROVAL}")
    return action


def pending_reads(state: AgentState, cmd: Any) -> tuple[int, ...] | Recall:
    """What a command on a held action reads: the records of one that left
    memory and is not pending (for the error that says what became of it)."""
    action_id = cmd.action_id
    if action_id in state.pending:
        return ()
    n = action_number(state, action_id)
    return recall(state, n) if n is not None and left_memory(state, n) else ()


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


def _passkey_needed(state: AgentState, action: Action, decision: str, given: object) -> None:
    """Forbidden when the tool's rule wants ``decision`` signed by a passkey
    and none came with it (guardd checks one that came before it sends it)."""
    assert state.policy is not None
    if given is None and state.policy.passkey_needed(action.tool, decision, action.rule):
        raise Forbidden(
            f"{decision} of {action.action_id} needs the approver's passkey: send `passkey`, "
            "an assertion made with the action's approval-options"
        )


def approval_subject(state: AgentState, cmd: ApprovalSubject, now: float, lines: Lines) -> Subject:
    action = pending_action(state, cmd.action_id, lines)
    policy = state.policy
    assert policy is not None
    return Subject(
        state.agent_id,
        action.action_id,
        action.request["hash"],
        policy.passkey_needed(action.tool, "approve", action.rule),
        policy.passkey_needed(action.tool, "reject", action.rule),
    )


def approve(state: AgentState, cmd: Approve, now: float, lines: Lines) -> Steps:
    action = pending_action(state, cmd.action_id, lines)
    _passkey_needed(state, action, "approve", cmd.passkey)
    by_id = cmd.by_id
    if by_id is not None:
        if by_id != ADMIN_TOKEN_ID and action.request.get("by_id") == by_id:
            raise Forbidden(
                f"{cmd.approver} asked for {action.action_id} on the agent's behalf:"
                " another operator must approve it"
            )
        if any(given["by_id"] == by_id for given in action.approvals):
            raise InvalidState(f"action {action.action_id} is already approved by you")
    assert state.policy is not None
    required = state.policy.approvals_required(action.tool)
    if len(action.approvals) + 1 < required:
        # Not the last approval: recorded, and the action stays pending.
        fields: dict[str, Any] = {
            "kind": Kind.APPROVAL_RECORDED,
            "action_id": action.action_id,
            "approvals_required": required,
            "by": cmd.approver,
        }
        if cmd.note is not None:
            fields["note"] = cmd.note
        signed_by(fields, cmd.approver, by_id)
        if cmd.passkey is not None:
            fields["passkey"] = cmd.passkey
        yield fields
        return Pending(action.action_id, action.rule, action.approvals, required)
    approvers = None
    if required > 1:
        given = [{"by": a["by"], "by_id": a["by_id"]} for a in action.approvals]
        approvers = [*given, {"by": cmd.approver, "by_id": by_id}]
    verdict = decide(state, action.tool, action.requested_cost, now, action.input, approving=True)
    return (
        yield from conclude(
            state,
            action.action_id,
            verdict,
            action.request,
            approver=cmd.approver,
            note=cmd.note,
            by_id=by_id,
            approvers=approvers,
            passkey=cmd.passkey,
        )
    )


def reject(state: AgentState, cmd: Reject, now: float, lines: Lines) -> Steps:
    action = pending_action(state, cmd.action_id, lines)
    _passkey_needed(state, action, "reject", cmd.passkey)
    fields: dict[str, Any] = {
        "kind": Kind.ACTION_REJECTED,
        "action_id": action.action_id,
        "by": cmd.approver,
        "reason": cmd.reason,
        "scar": cmd.scar,
    }
    signed_by(fields, cmd.approver, cmd.by_id)
    if cmd.passkey is not None:
        fields["passkey"] = cmd.passkey
    yield fields
    if cmd.scar is not None:
        yield from add_scar(state, cmd.scar, cmd.reason, action.action_id, cmd.approver, cmd.by_id)
    assert action.reason is not None  # set by the fold of its action_rejected
    return Denied(action.action_id, action.reason)


def cancel(state: AgentState, cmd: Cancel, now: float, lines: Lines) -> Steps:
    """The asker withdraws a pending action: never charged, no scar."""
    action = pending_action(state, cmd.action_id, lines)
    fields: dict[str, Any] = {"kind": Kind.ACTION_CANCELLED, "action_id": action.action_id}
    fields["by"] = cmd.role
    signed_by(fields, cmd.by, cmd.by_id)
    if cmd.reason is not None:
        fields["reason"] = cmd.reason
    yield fields
    # Reply: the action's number. A cancelled action is held and has no
    # receipt: its view reads nothing.
    return known_action(state, action.action_id)


def expire_due(state: AgentState, now: float) -> Steps:
    """Write ``approval_expired`` for every pending action whose approval
    timeout has run out at ``now`` (oldest first). The actor runs this at the
    start of a batch whose ``now`` has reached its earliest deadline, before
    the batch's commands, so no command sees an action past its time."""
    for action, timeout in expired_actions(state, now):
        action_id = action.action_id
        yield {"kind": Kind.APPROVAL_EXPIRED, "action_id": action_id, "timeout_secs": timeout}


def list_pending(
    state: AgentState, cmd: ListPending, now: float, lines: Lines
) -> dict[str, Action]:
    """Reply: the pending actions by ID, oldest first."""
    return state.pending


# -- folds ------------------------------------------------------------------------------


def _request_before(state: AgentState, r: Record) -> Record | None:
    """The action_requested record of ``r``'s action if it is the newest record."""
    requested = state.last_record
    if (
        requested is not None
        and requested["kind"] == _ACTION_REQUESTED
        and requested["action_id"] == r["action_id"]
    ):
        return requested
    return None


def _not_after_request(r: Record) -> ValueError:
    return ValueError(f"{r['kind']} of {r['action_id']} does not follow its request")


def _fold_approval_required(state: AgentState, r: Record) -> None:
    n = action_of(state, r)
    # A decision made at request time is written right after the request.
    q = _request_before(state, r)
    if q is None:
        raise _not_after_request(r)
    action = hold(q, r)
    shadow = state.shadow
    if shadow is not None:
        tally(state, shadow, r, _PENDING)
    state.expiry_dirty = True
    state.held[action.action_id] = action
    state.pending[action.action_id] = action
    state.action_status[n - state.first_action] = _PENDING_CODE


def _decided(state: AgentState, r: Record) -> tuple[int, Action | None, str]:
    """The action a decision record is about, its held Action if any (which
    must be pending; any other must be just requested), and its tool."""
    requested = _request_before(state, r)
    if requested is not None:
        # Decided at request time, the common case: the newest action, which
        # is neither decided nor pending yet.
        return state.action_count, None, requested["tool"]
    n = action_of(state, r)
    action = state.pending.pop(r["action_id"], None)
    if action is not None:
        return n, action, action.tool
    i = n - state.first_action
    if i < 0 or state.action_status[i] != 0:
        raise ValueError(f"{r['action_id']} is decided already")
    raise _not_after_request(r)


def _decided_late(state: AgentState, n: int, code: int, r: Record) -> None:
    """Action ``n``, decided by ``r`` after it left the latest actions while
    pending: its Action keeps its status until the next eviction drops it
    (``state.evict``), and a recall of it reads ``r``."""
    state.held[r["action_id"]].late_status = code
    note_late(state, n, r["seq"])


def _fold_allowed(state: AgentState, r: Record) -> None:
    n, action, tool = _decided(state, r)
    cost = r["cost"]
    if type(cost) is not Decimal:  # an int, as a line is read back
        cost = Decimal(cost)
    if action is not None:
        allow_held(action, r, cost)
    else:
        shadow = state.shadow
        if shadow is not None:
            tally(state, shadow, r, _ALLOWED)
    i = n - state.first_action
    if i >= 0:
        state.action_status[i] = _ALLOWED_CODE
    else:
        _decided_late(state, n, _ALLOWED_CODE, r)
    if "grant_id" in r:  # drawn on a grant instead of a person's approval
        grant = state.grants[r["grant_id"]]
        grant.calls += 1
        grant.spent += cost
    state.remaining -= cost
    state.actions_allowed += 1
    state.tool_calls[tool] = state.tool_calls.get(tool, 0) + 1
    times = state.allowed_times
    now = parse_ts(r["ts"])
    times.append(now)
    if not len(times) % TRIM_EVERY:
        trim_allowed_times(state, now, r["seq"])
    policy = state.policy
    if policy is not None:
        rule = policy.rule_for(tool)
        if rule is not None and rule.tags:
            _remember_tags(state, rule.tags, r["ts"])


def _remember_tags(state: AgentState, tags: tuple[str, ...], ts: str) -> None:
    """The tags of an allowed call, as the policy in force gives them, last
    used at its record's ts (what a rule's ``history`` reads)."""
    last_used = state.tag_last_used
    if last_used is NO_TAGS:
        last_used = state.tag_last_used = {}
    at = datetime.fromisoformat(ts)
    for tag in tags:
        last_used[tag] = at


def _fold_recorded(state: AgentState, r: Record) -> None:
    action = state.pending.get(r["action_id"])
    if action is None:
        raise ValueError(f"{r['action_id']} is not pending approval")
    action.approvals.append(given(r))
    n = action_of(state, r)
    if n < state.first_action:
        note_late(state, n, r["seq"])  # pending, but left the latest actions


def _deny(state: AgentState, r: Record, reason: dict[str, Any]) -> None:
    n, action, _ = _decided(state, r)
    if action is not None:
        deny_held(action, r, reason)
    else:
        shadow = state.shadow
        if shadow is not None:
            tally(state, shadow, r, _DENIED)
    i = n - state.first_action
    if i >= 0:
        state.action_status[i] = _DENIED_CODE
    else:
        _decided_late(state, n, _DENIED_CODE, r)
    state.actions_denied += 1


def _fold_denied(state: AgentState, r: Record) -> None:
    _deny(state, r, r["reason"])


def _fold_rejected(state: AgentState, r: Record) -> None:
    if r["action_id"] not in state.pending:
        raise ValueError(f"{r['action_id']} is not pending approval")
    _deny(state, r, rejected_reason(r))


def _fold_expired(state: AgentState, r: Record) -> None:
    if r["action_id"] not in state.pending:
        raise ValueError(f"{r['action_id']} is not pending approval")
    _deny(state, r, expired_reason(r))


def _fold_cancelled(state: AgentState, r: Record) -> None:
    action = state.pending.pop(r["action_id"], None)
    if action is None:
        raise ValueError(f"{r['action_id']} is not pending approval")
    deny_held(action, r, cancelled_reason(r))
    # Withdrawn by its asker: neither allowed nor denied, so no counter moves.
    n = action_of(state, r)
    if n >= state.first_action:
        state.action_status[n - state.first_action] = _CANCELLED_CODE
    else:
        _decided_late(state, n, _CANCELLED_CODE, r)


# -- what finishing a command cut short writes after each --------------------------------


def _finish_allowed(state: AgentState, last: Record) -> Steps:
    yield from terminate_if_exhausted(state.remaining, Decimal(last["cost"]), state.alive)


def _finish_denied(state: AgentState, last: Record) -> Steps:
    yield from _denial_scar(state, last["action_id"], last["reason"])


def _finish_rejected(state: AgentState, last: Record) -> Steps:
    if last["scar"] is not None:
        scar, reason, action_id = last["scar"], last["reason"], last["action_id"]
        yield from add_scar(state, scar, reason, action_id, last["by"], last.get("by_id"))


# -- replay: the command each record starts, how one command's records follow -----------


def _approval_of_allowed(record: Record) -> Approve | None:
    approver = record.get("approved_by")
    if approver is None:
        return None  # allowed at request time: it follows its request
    return Approve(
        record["action_id"],
        approver,
        record.get("note"),
        record.get("by_id"),
        record.get("passkey"),
    )


def _approval_of_denied(record: Record) -> Approve | None:
    approver = record.get("by")
    if approver is None:
        return None  # denied at request time: it follows its request
    return Approve(
        record["action_id"], approver, by_id=record.get("by_id"), passkey=record.get("passkey")
    )


def _recorded_approval(record: Record) -> Approve:
    return Approve(
        record["action_id"],
        record["by"],
        record.get("note"),
        record.get("by_id"),
        record.get("passkey"),
    )


def _describe_recorded(record: Record) -> str:
    return f"by {record.get('by')}, {json_text(record.get('approvals_required'))} required"


def _announces_recorded(record: Record, requested: Record | None) -> tuple[str, Record]:
    data = {"action_id": record["action_id"], "by": record["by"]}
    for key in ("by_id", "note", "approvals_required"):
        if key in record:
            data[key] = record[key]
    if requested is not None:
        data["tool"] = requested["tool"]
    return "approval.recorded", data


def _rejection(record: Record) -> Reject:
    return Reject(
        record["action_id"],
        record["by"],
        record["reason"],
        record["scar"],
        record.get("by_id"),
        record.get("passkey"),
    )


def _cancellation(record: Record) -> Cancel:
    by_id = record.get("by_id")
    if by_id is None:  # the agent's, or the admin token's before identities
        return Cancel(record["action_id"], record["by"], record.get("reason"))
    return Cancel(record["action_id"], ADMIN, record.get("reason"), record["by"], by_id)


def _by_timer(record: Record) -> ByTimer:
    return BY_TIMER


def _decides_its_request(record: Record, previous: Record) -> bool:
    # A decision at request time, right after its request; an approval's names its approver.
    same_action = record.get("action_id") == previous.get("action_id")
    return previous.get("kind") == _ACTION_REQUESTED and same_action and record.get("by") is None


def _expires_with(record: Record, previous: Record) -> bool:
    # The actor expires every action due at once, in one batch (one ts); a
    # new policy expires what it makes due in its own write.
    before = previous.get("kind")
    return before in (Kind.APPROVAL_EXPIRED, Kind.POLICY, Kind.TERMINATED) and record.get(
        "ts"
    ) == previous.get("ts")


def _describe_required(record: Record) -> str:
    return f"cost {json_text(record.get('cost'))}"


def _describe_allowed(record: Record) -> str:
    cost, remaining = json_text(record.get("cost")), json_text(record.get("remaining"))
    on = f", on {record['grant_id']}" if record.get("grant_id") is not None else ""
    return f"cost {cost}, remaining {remaining}{on}"


def _describe_denied(record: Record) -> str:
    reason = record.get("reason")
    return str(reason.get("code")) if isinstance(reason, dict) else ""


def _describe_expired(record: Record) -> str:
    return f"after {json_text(record.get('timeout_secs'))} s"


def _describe_cancelled(record: Record) -> str:
    return f"by {record.get('by')}"


RECEIPT_FIELDS = ("log_id", "request_hash")


def _allowed_as_written(expected: Record, actual: Record) -> Record:
    """An ``action_allowed`` from before allowances named their request has
    neither ``log_id`` nor ``request_hash`` (and gives no receipt); one that
    has either is held to both."""
    if any(key in actual for key in RECEIPT_FIELDS):
        return expected
    return {key: value for key, value in expected.items() if key not in RECEIPT_FIELDS}


# -- webhooks ---------------------------------------------------------------------------

_DECIDED_FIELDS = ("approved_by", "by", "note", "reason", "cost", "timeout_secs", "rule")


def _announces_held(record: Record, requested: Record | None) -> tuple[str, Record]:
    data = {"action_id": record["action_id"], "cost": record["cost"]}
    if requested is not None:
        data |= {"tool": requested["tool"], "input": requested["input"]}
    if "rule" in record:
        data["rule"] = record["rule"]
    return "approval.required", data


def _announces_decision(word: str, *, only_with: str | None = None) -> Announce:
    """``approval.decided`` with ``decision: word``. ``only_with``: a field
    that only the decision of a held action has (one made at request time
    kept nobody waiting, and is not announced)."""

    def announces(record: Record, requested: Record | None) -> tuple[str, Record] | None:
        if only_with is not None and only_with not in record:
            return None
        data = {"action_id": record["action_id"], "decision": word}
        for key in _DECIDED_FIELDS:
            if key in record:
                data[key] = record[key]
        if requested is not None:
            data["tool"] = requested["tool"]
        return "approval.decided", data

    return announces


# -- what if: the decision each record leaves, the operator's steps on a candidate -------


def _settles_held(record: Record) -> str:
    return Decision.PENDING_APPROVAL


def _settles_allowed(record: Record) -> str:
    return Decision.ALLOWED


def _settles_denied(record: Record) -> str:
    return f"{Decision.DENIED}:{record['reason'].get('code')}"


def _settles_rejected(record: Record) -> str:
    return f"{Decision.DENIED}:{ReasonCode.REJECTED}"


def _settles_expired(record: Record) -> str:
    return f"{Decision.DENIED}:{ReasonCode.APPROVAL_EXPIRED}"


def _settles_cancelled(record: Record) -> str:
    return ActionStatus.CANCELLED


def _only_if_held(state: AgentState, record: Record) -> Dropped | None:
    """An operator's step on an action (approve, reject, cancel) is run only
    where the candidate holds that action for approval too."""
    return None if record["action_id"] in state.pending else Dropped.OPERATOR_STEP


KIND_ENTRIES = (
    KindEntry(
        kind=Kind.APPROVAL_REQUIRED,
        fold=_fold_approval_required,
        finish=nothing_follows,
        continues=_decides_its_request,
        describe=_describe_required,
        starts=no_command,
        announces=_announces_held,
        settles=_settles_held,
        under_candidate=left_out,
    ),
    KindEntry(
        kind=Kind.ACTION_ALLOWED,
        fold=_fold_allowed,
        finish=_finish_allowed,
        continues=_decides_its_request,
        describe=_describe_allowed,
        starts=_approval_of_allowed,
        announces=_announces_decision("allowed", only_with="approved_by"),
        settles=_settles_allowed,
        under_candidate=_only_if_held,
        as_written=_allowed_as_written,
    ),
    KindEntry(
        kind=Kind.ACTION_DENIED,
        fold=_fold_denied,
        finish=_finish_denied,
        continues=_decides_its_request,
        describe=_describe_denied,
        starts=_approval_of_denied,
        # An approval whose re-run checks failed; one at request time has no ``by``.
        announces=_announces_decision("denied", only_with="by"),
        settles=_settles_denied,
        under_candidate=_only_if_held,
        # A denial for another reason is another denial, not a field that differs.
        told_apart_by_description=True,
    ),
    KindEntry(
        kind=Kind.ACTION_REJECTED,
        fold=_fold_rejected,
        finish=_finish_rejected,
        continues=never_continues,
        describe=no_description,
        starts=_rejection,
        announces=_announces_decision("rejected"),
        settles=_settles_rejected,
        under_candidate=_only_if_held,
    ),
    KindEntry(
        kind=Kind.APPROVAL_EXPIRED,
        fold=_fold_expired,
        finish=nothing_follows,
        continues=_expires_with,
        describe=_describe_expired,
        starts=_by_timer,
        announces=_announces_decision("expired"),
        settles=_settles_expired,
        # The candidate's own timeouts expire its actions, on the history's clock.
        under_candidate=left_out,
    ),
    KindEntry(
        kind=Kind.APPROVAL_RECORDED,
        fold=_fold_recorded,
        finish=nothing_follows,
        continues=never_continues,
        describe=_describe_recorded,
        starts=_recorded_approval,
        announces=_announces_recorded,
        settles=_settles_held,
        under_candidate=_only_if_held,
    ),
    KindEntry(
        kind=Kind.ACTION_CANCELLED,
        fold=_fold_cancelled,
        finish=nothing_follows,
        continues=never_continues,
        describe=_describe_cancelled,
        starts=_cancellation,
        announces=_announces_decision("cancelled"),
        settles=_settles_cancelled,
        under_candidate=_only_if_held,
    ),
)

COMMAND_ENTRIES = (
    CommandEntry(command=Approve, writes=approve, view=None, reads=pending_reads),
    CommandEntry(command=Reject, writes=reject, view=None, reads=pending_reads),
    CommandEntry(command=Cancel, writes=cancel, view=None, reads=pending_reads),
    CommandEntry(command=ListPending, writes=None, view=list_pending, reads=None),
    CommandEntry(command=ApprovalSubject, writes=None, view=approval_subject, reads=pending_reads),
)
