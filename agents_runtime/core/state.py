"""Agent state: the model every record kind folds into, and its queries.

Only the folds change it: ``apply`` (``agents_runtime.core.records``) runs
the fold of each record's kind, as the entry of that kind declares it in its
concept module. The actor calls it on each record it has just sealed (the
dict whose canonical bytes go to disk), and startup calls it on each
verified record of the file, so the live state and the replayed state are
the same by construction.
"""

from __future__ import annotations

from array import array
from collections.abc import Mapping
from datetime import datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any

import attrs

from agents_runtime.core.money import ZERO
from agents_runtime.core.vocabulary import ActionStatus, Decision, Outcome
from agents_runtime.errors import LogReadError, UnknownAction
from agents_runtime.log.canonical import dumps, loads_trusted
from agents_runtime.log.kinds import Kind
from agents_runtime.log.record import Head, Sealed, timestamp_micros

if TYPE_CHECKING:
    from agents_runtime.core.grants import Grant
    from agents_runtime.core.policy import Policy

# Lines of earlier records by seq (canonical bytes, no newline): what a view
# quotes, read from the store by the runtime before the view runs.
Lines = Mapping[int, bytes]
NO_LINES: Lines = {}


def parse_ts(ts: str) -> float:
    """Seconds since the epoch of a record's ``ts``."""
    global _parsed
    # The records of one batch share their ts: parse it once.
    last = _parsed
    if ts == last[0]:
        return last[1]
    value = datetime.fromisoformat(ts).timestamp()
    _parsed = (ts, value)
    return value


_parsed = ("", 0.0)  # the last ts parse_ts read, and its value


def note_ts(ts: str, value: float) -> None:
    """Tell parse_ts that ``ts`` reads as ``value``: the actor, which has just
    made ``ts`` from ``value``, saves the fold parsing it."""
    global _parsed
    _parsed = (ts, value)


# One byte per action says where it stands; an outcome is kept as its own status.
STATUS_CODES: dict[str, int] = {
    ActionStatus.REQUESTED: 0,
    ActionStatus.PENDING_APPROVAL: 1,
    ActionStatus.ALLOWED: 2,
    ActionStatus.DENIED: 3,
    Outcome.SUCCESS: 4,
    Outcome.FAILURE: 5,
    Outcome.HARMFUL: 6,
    ActionStatus.CANCELLED: 7,
}
_STATUS_NAMES = (
    ActionStatus.REQUESTED,
    ActionStatus.PENDING_APPROVAL,
    ActionStatus.ALLOWED,
    ActionStatus.DENIED,
    ActionStatus.COMPLETED,
    ActionStatus.COMPLETED,
    ActionStatus.COMPLETED,
    ActionStatus.CANCELLED,
)
_OUTCOMES = (None, None, None, None, Outcome.SUCCESS, Outcome.FAILURE, Outcome.HARMFUL, None)
_DENIED_CODE = STATUS_CODES[ActionStatus.DENIED]
_PENDING_CODE = STATUS_CODES[ActionStatus.PENDING_APPROVAL]


@attrs.define(slots=True)
class Action:
    """An action held for approval: kept whole while it can still change
    (pending) and once decided, since operators, not agents, set their pace.
    Actions decided at request time keep a status byte and a seq only.

    What was asked is its ``action_requested`` record, kept as folded: an
    approval names its hash and a receipt quotes its line, with no read of
    the log, and the request's fields are read from it."""

    request: dict[str, Any]
    cost: Decimal  # the charge (recomputed when an approval re-runs the checks)
    held_at: float = 0.0  # ts of its approval_required record: expiry counts from it
    reason: dict[str, Any] | None = None  # deny (or cancel) reason object
    approved_by: str | None = None
    note: str | None = None
    decided_at: str | None = None  # ts of the record that took it out of pending
    # Seq of its action_allowed record when that record names its request
    # (log_id and request_hash): the second line of its receipt.
    receipt_seq: int | None = None

    @property
    def action_id(self) -> str:
        return self.request["action_id"]  # type: ignore[no-any-return]

    @property
    def seq(self) -> int:
        """The seq of its action_requested record."""
        return self.request["seq"]  # type: ignore[no-any-return]

    @property
    def requested_at(self) -> str:
        return self.request["ts"]  # type: ignore[no-any-return]

    @property
    def tool(self) -> str:
        return self.request["tool"]  # type: ignore[no-any-return]

    @property
    def input(self) -> Any:
        return self.request["input"]

    @property
    def requested_cost(self) -> Decimal | None:
        return self.request["requested_cost"]  # type: ignore[no-any-return]


@attrs.define(slots=True)
class Scar:
    seq: int
    severity: str  # a Severity, as its record has it
    reason: str
    action_id: str | None


class _NoGrants(dict[str, "Grant"]):
    """The grants of an agent that never had one: one empty dict shared by
    all such agents (an empty dict each would cost 64 bytes of every idle
    agent), never written to, and pickled as itself (startup workers send
    states back by pickle)."""

    def __setitem__(self, key: str, value: Grant) -> None:
        raise TypeError("NO_GRANTS is shared: give the agent a dict of its own first")

    def __reduce__(self) -> str:
        return "NO_GRANTS"


NO_GRANTS = _NoGrants()

# How many disagreeing action IDs a shadow keeps (its view's recent_disagreements).
RECENT_DISAGREEMENTS = 20


@attrs.define(slots=True)
class Shadow:
    """A candidate policy evaluated beside the one in force and never
    enforced (``shadow``), with the tallies its view shows, folded from the
    decisions recorded since its ``shadow_set``."""

    policy: Policy
    since: str  # ts of its shadow_set record
    policy_ref: str | None = None
    version: int | None = None
    agree: int = 0
    disagree: dict[str, int] = attrs.field(factory=dict)  # "<live>-><shadow>" -> count
    recent: list[str] = attrs.field(factory=list)  # oldest first, at most RECENT_DISAGREEMENTS


@attrs.define(slots=True)
class AgentState:
    agent_id: str
    public_key: str = ""
    policy: Policy | None = None
    head: Head = attrs.field(factory=Head.empty)
    last_ts: str = ""
    last_record: dict[str, Any] | None = None  # the newest record (behaviour.finish_interrupted)
    # budget - spent; spent is derived from it, since every request reads
    # remaining several times and only a status reads spent.
    remaining: Decimal = ZERO
    scars: list[Scar] = attrs.field(factory=list)
    scar_score: int = 0
    # Action n (act-n) is at index n - 1: the seq of its action_requested
    # record, and a status code.
    action_seqs: array[int] = attrs.field(factory=lambda: array("I"))  # "q" past 2^32
    action_status: bytearray = attrs.field(factory=bytearray)
    held: dict[str, Action] = attrs.field(factory=dict)  # every action that needed approval
    pending: dict[str, Action] = attrs.field(factory=dict)  # insertion order = oldest first
    idempotency: dict[str, int] = attrs.field(factory=dict)  # key -> action number
    # grt-n -> grant, in issue order; NO_GRANTS until the first is issued.
    grants: dict[str, Grant] = NO_GRANTS
    tool_calls: dict[str, int] = attrs.field(factory=dict)  # allowed calls per tool
    # The ts of every action_allowed, in order (ts never goes backwards): the
    # rate check counts its tail by bisection, under any policy.
    allowed_times: array[float] = attrs.field(factory=lambda: array("d"))
    # The ID the next action_requested must carry, made once: the request
    # and its fold both read it.
    next_action_id: str = "act-1"
    actions_allowed: int = 0
    actions_denied: int = 0
    alive: bool = True
    termination_reason: str | None = None
    terminated_by: str | None = None
    # The named (fleet) policy the agent follows and the version its newest
    # policy record holds; None for a policy of its own.
    policy_ref: str | None = None
    policy_version: int | None = None
    shadow: Shadow | None = None
    # "<live>-><shadow>" -> disagreements over the agent's whole life, never
    # reset by shadow_cleared (a counter for /metrics); None until the first.
    shadow_disagreements: dict[str, int] | None = None
    # Set by the records that can bring the next approval expiry closer (a new
    # held action, a new policy); the actor recomputes its timer only then.
    expiry_dirty: bool = attrs.field(default=True, eq=False)

    @property
    def budget(self) -> Decimal:
        return self.policy.budget if self.policy is not None else ZERO

    @property
    def spent(self) -> Decimal:
        return self.budget - self.remaining

    @property
    def action_count(self) -> int:
        return len(self.action_seqs)


def action_number(state: AgentState, action_id: str) -> int | None:
    """n of ``act-n`` when the agent has that action, else None."""
    if not action_id.startswith("act-"):
        return None
    digits = action_id[4:]
    if not digits.isascii() or not digits.isdigit() or digits[0] == "0" or len(digits) > 18:
        return None
    n = int(digits)
    return n if n <= len(state.action_seqs) else None


def action_of(state: AgentState, record: dict[str, Any]) -> int:
    """n of the action a record names, for its fold: KeyError when the agent
    has no such action (the record does not apply)."""
    n = action_number(state, record["action_id"])
    if n is None:
        raise KeyError(record["action_id"])
    return n


def known_action(state: AgentState, action_id: str) -> int:
    """The number of the agent's action ``action_id``, or UnknownAction."""
    n = action_number(state, action_id)
    if n is None:
        raise UnknownAction(f"no action {action_id} for agent {state.agent_id}")
    return n


def action_status(state: AgentState, n: int) -> ActionStatus:
    """Status of action ``n``: requested, pending_approval, allowed, denied,
    completed or cancelled."""
    return _STATUS_NAMES[state.action_status[n - 1]]


def action_outcome(state: AgentState, n: int) -> Outcome | None:
    return _OUTCOMES[state.action_status[n - 1]]


def approval_deadline(state: AgentState, action: Action) -> float | None:
    """When the held ``action`` expires (seconds since the epoch) under the
    policy in force, counted from its approval_required record; None: never."""
    policy = state.policy
    timeout = policy.approval_timeout(action.tool) if policy is not None else None
    return None if timeout is None else action.held_at + float(timeout)


def next_deadline(state: AgentState) -> float | None:
    """The earliest approval deadline of the pending actions, or None."""
    policy = state.policy
    if policy is None or not state.pending:
        return None
    deadlines = [approval_deadline(state, a) for a in state.pending.values()]
    return min((d for d in deadlines if d is not None), default=None)


def expired_actions(state: AgentState, now: float) -> list[tuple[Action, Decimal]]:
    """The pending actions whose deadline is at or before ``now``, oldest
    first, each with the timeout that applied."""
    policy = state.policy
    if policy is None:
        return []
    due = []
    for action in state.pending.values():
        timeout = policy.approval_timeout(action.tool)
        if timeout is not None and action.held_at + float(timeout) <= now:
            due.append((action, timeout))
    return due


def _iso(seconds: float) -> str:
    return timestamp_micros(round(seconds * 1_000_000))


def parse_line(lines: Lines, seq: int) -> dict[str, Any]:
    """The record at ``seq`` of ``lines`` (our own log's: verified when
    loaded, or written by us). LogReadError if it is not that record: the
    log changed under a running guardd, and the verify endpoint says how."""
    try:
        record = loads_trusted(lines[seq].decode())
    except ValueError as exc:
        raise LogReadError(f"the record at seq {seq} does not parse: {exc}") from exc
    if not isinstance(record, dict) or record.get("seq") != seq:
        raise LogReadError(f"the record at seq {seq} is not where it was")
    return record


def request_line(request: Sealed | dict[str, Any]) -> bytes:
    """The line of an action_requested record, as sealed or as folded (a
    record's line is its canonical form)."""
    return request.line[:-1] if isinstance(request, Sealed) else dumps(request)


def receipt(request: bytes, allowed: bytes) -> list[str]:
    """The receipt of an allowed action: the lines of its action_requested
    and action_allowed records, as they are in the log (docs/receipts.md)."""
    return [request.decode(), allowed.decode()]


def first_decision_reads(state: AgentState, n: int) -> tuple[int, ...]:
    """The seqs ``first_decision`` (and the repeat's body check) reads: none
    for a held action, whose request is in memory."""
    if f"act-{n}" in state.held:
        return ()
    seq = state.action_seqs[n - 1]
    return (seq, seq + 1)


def first_decision(state: AgentState, n: int, lines: Lines) -> dict[str, Any]:
    """The decision action ``n`` was first answered with (an Idempotency-Key
    repeat answers with it again); ``lines`` holds ``first_decision_reads``."""
    action_id = f"act-{n}"
    if action_id in state.held:
        return {"decision": Decision.PENDING_APPROVAL, "action_id": action_id}
    # Decided at request time: the decision record follows action_requested.
    seq = state.action_seqs[n - 1]
    record = parse_line(lines, seq + 1)
    if record["kind"] == Kind.ACTION_ALLOWED:
        decision: dict[str, Any] = {
            "decision": Decision.ALLOWED,
            "action_id": action_id,
            "cost": record["cost"],
            "remaining": record["remaining"],
        }
        if "grant_id" in record:
            decision["grant_id"] = record["grant_id"]
        if "request_hash" in record:  # older records give no receipt
            decision["receipt"] = receipt(lines[seq], lines[seq + 1])
        return decision
    return {"decision": Decision.DENIED, "action_id": action_id, "reason": record["reason"]}


# Views: the JSON shapes of the HTTP API (docs/api.md), built from state.


def status_json(state: AgentState) -> dict[str, Any]:
    return {
        "agent_id": state.agent_id,
        "alive": state.alive,
        "termination_reason": state.termination_reason,
        "budget": state.budget,
        "spent": state.spent,
        "remaining": state.remaining,
        "scar_score": state.scar_score,
        "scar_limit": state.policy.scar_limit if state.policy is not None else None,
        "scars": [scar_json(s) for s in state.scars],
        "actions_allowed": state.actions_allowed,
        "actions_denied": state.actions_denied,
        "actions_pending": len(state.pending),
        "head": state.head.to_json(),
        "public_key": state.public_key,
    }


def scar_json(scar: Scar) -> dict[str, Any]:
    out: dict[str, Any] = {"seq": scar.seq, "severity": scar.severity, "reason": scar.reason}
    if scar.action_id is not None:
        out["action_id"] = scar.action_id
    return out


def action_reads(state: AgentState, n: int) -> tuple[int, ...]:
    """The seqs ``action_json`` reads: a held action's allowance (for its
    receipt), or an action decided at request time and its decision."""
    held = state.held.get(f"act-{n}")
    if held is not None:
        return () if held.receipt_seq is None else (held.receipt_seq,)
    seq = state.action_seqs[n - 1]
    return (seq,) if state.action_status[n - 1] == 0 else (seq, seq + 1)


def action_json(state: AgentState, n: int, lines: Lines) -> dict[str, Any]:
    """GET .../actions/act-n: a held action from memory, any other from its
    action_requested record and (if decided) the decision right after it;
    ``lines`` holds ``action_reads``."""
    action_id = f"act-{n}"
    held = state.held.get(action_id)
    code = state.action_status[n - 1]
    out: dict[str, Any]
    if held is not None:
        out = {
            "action_id": action_id,
            "tool": held.tool,
            "input": held.input,
            "cost": held.cost,
            "status": _STATUS_NAMES[code],
            "outcome": _OUTCOMES[code],
            "requested_at": held.requested_at,
        }
        if held.reason is not None:
            out["reason"] = held.reason
        if held.approved_by is not None:
            out["approved_by"] = held.approved_by
        if held.note is not None:
            out["note"] = held.note
        if held.decided_at is not None:
            out["decided_at"] = held.decided_at
            if held.receipt_seq is not None:
                out["receipt"] = receipt(request_line(held.request), lines[held.receipt_seq])
        elif code == _PENDING_CODE:
            deadline = approval_deadline(state, held)
            if deadline is not None:
                out["expires_at"] = _iso(deadline)
        return out
    seq = state.action_seqs[n - 1]
    requested = parse_line(lines, seq)
    out = {
        "action_id": action_id,
        "tool": requested["tool"],
        "input": requested["input"],
        "cost": requested["cost"],
        "status": _STATUS_NAMES[code],
        "outcome": _OUTCOMES[code],
        "requested_at": requested["ts"],
    }
    if code == _DENIED_CODE:
        out["reason"] = parse_line(lines, seq + 1)["reason"]
    elif code != 0:
        # Allowed (and perhaps completed since): the decision follows the request.
        allowed = parse_line(lines, seq + 1)
        if "grant_id" in allowed:
            out["grant_id"] = allowed["grant_id"]
        if "request_hash" in allowed:
            out["receipt"] = receipt(lines[seq], lines[seq + 1])
    return out


def pending_json(action: Action, state: AgentState | None = None) -> dict[str, Any]:
    """A pending entry; with ``state``, ``expires_at`` when a timeout applies."""
    out: dict[str, Any] = {
        "requested_at": action.requested_at,
        "seq": action.seq,
        "action": {
            "action_id": action.action_id,
            "tool": action.tool,
            "input": action.input,
            "cost": action.cost,
        },
    }
    if state is not None:
        deadline = approval_deadline(state, action)
        if deadline is not None:
            out["expires_at"] = _iso(deadline)
    return out
