"""Agent state as a fold over its log records.

``apply(state, record)`` is the only code that changes agent state. The actor
calls it on each record it has just sealed (parsed back from the very bytes
that go to disk), and startup calls it on each verified record of the file,
so the live state and the replayed state are the same by construction.
"""

from __future__ import annotations

from collections import deque
from datetime import datetime
from decimal import Decimal
from typing import Any

import attrs

from agents_runtime.money import ZERO
from agents_runtime.policy import Policy, parse_policy
from agents_runtime.record import Head

SCAR_WEIGHTS = {"minor": 1, "moderate": 3, "severe": 10, "fatal": 0}
SEVERITIES = tuple(SCAR_WEIGHTS)

PENDING = "pending_approval"
ALLOWED = "allowed"
DENIED = "denied"
COMPLETED = "completed"


def parse_ts(ts: str) -> float:
    """Seconds since the epoch of a record's ``ts``."""
    return datetime.fromisoformat(ts).timestamp()


@attrs.define(slots=True)
class Action:
    action_id: str
    seq: int  # seq of its action_requested record
    requested_at: str
    tool: str
    input: Any
    requested_cost: Decimal | None
    cost: Decimal  # the charge (recomputed when an approval re-runs the checks)
    idempotency_key: str | None = None
    status: str = "requested"
    outcome: str | None = None
    reason: dict[str, Any] | None = None  # deny reason object
    approved_by: str | None = None
    note: str | None = None
    first_decision: dict[str, Any] | None = None
    allowed_at: float | None = None  # ts of its action_allowed record


@attrs.define(slots=True)
class Scar:
    seq: int
    severity: str
    reason: str
    action_id: str | None


@attrs.define(slots=True)
class AgentState:
    agent_id: str
    public_key: str = ""
    policy: Policy | None = None
    head: Head = attrs.field(factory=Head.empty)
    last_ts: str = ""
    last_record: dict[str, Any] | None = None  # the newest record (agent.finish_interrupted)
    spent: Decimal = ZERO
    scars: list[Scar] = attrs.field(factory=list)
    scar_score: int = 0
    actions: dict[str, Action] = attrs.field(factory=dict)
    pending: dict[str, Action] = attrs.field(factory=dict)  # insertion order = oldest first
    idempotency: dict[str, str] = attrs.field(factory=dict)  # key -> action_id
    tool_calls: dict[str, int] = attrs.field(factory=dict)  # allowed calls per tool
    rate_window: deque[float] = attrs.field(factory=deque)  # times of recent allowed actions
    actions_allowed: int = 0
    actions_denied: int = 0
    alive: bool = True
    termination_reason: str | None = None
    terminated_by: str | None = None

    @property
    def budget(self) -> Decimal:
        return self.policy.budget if self.policy is not None else ZERO

    @property
    def remaining(self) -> Decimal:
        return self.budget - self.spent

    @property
    def next_action_id(self) -> str:
        return f"act-{len(self.actions) + 1}"


def _decide_first(action: Action, decision: dict[str, Any]) -> None:
    if action.first_decision is None:
        action.first_decision = decision


def apply(state: AgentState, record: dict[str, Any]) -> AgentState:
    """Fold one verified record into ``state`` (in place) and return it."""
    kind = record["kind"]
    handler = _APPLY.get(kind)
    if handler is not None:
        handler(state, record)
    state.head = Head(record["seq"], record["hash"])
    state.last_ts = record["ts"]
    state.last_record = record
    return state


def _genesis(state: AgentState, r: dict[str, Any]) -> None:
    state.public_key = r["public_key"]


def _policy(state: AgentState, r: dict[str, Any]) -> None:
    from agents_runtime.checks import charge_for  # checks imports this module

    policy = state.policy = parse_policy(r["policy"])
    # The window kept for the old policy may be too short for the new one (a
    # longer window, more actions, or no rate limit before): rebuild it.
    allowed = (a.allowed_at for a in state.actions.values() if a.allowed_at is not None)
    state.rate_window = deque(sorted(allowed))
    _trim_window(state)
    # A held action is charged under the policy in force when it is approved.
    for action in state.pending.values():
        action.cost = Decimal(charge_for(policy.rule_for(action.tool), action.requested_cost))


def _requested(state: AgentState, r: dict[str, Any]) -> None:
    action = Action(
        action_id=r["action_id"],
        seq=r["seq"],
        requested_at=r["ts"],
        tool=r["tool"],
        input=r["input"],
        requested_cost=r["requested_cost"],
        cost=Decimal(r["cost"]),
        idempotency_key=r.get("idempotency_key"),
    )
    state.actions[action.action_id] = action
    if action.idempotency_key is not None:
        state.idempotency[action.idempotency_key] = action.action_id


def _approval_required(state: AgentState, r: dict[str, Any]) -> None:
    action = state.actions[r["action_id"]]
    action.status = PENDING
    action.cost = Decimal(r["cost"])
    state.pending[action.action_id] = action
    _decide_first(action, {"decision": PENDING, "action_id": action.action_id})


def _allowed(state: AgentState, r: dict[str, Any]) -> None:
    action = state.actions[r["action_id"]]
    state.pending.pop(action.action_id, None)
    action.status = ALLOWED
    action.cost = Decimal(r["cost"])
    action.approved_by = r.get("approved_by")
    action.note = r.get("note")
    state.spent += action.cost
    state.actions_allowed += 1
    state.tool_calls[action.tool] = state.tool_calls.get(action.tool, 0) + 1
    action.allowed_at = parse_ts(r["ts"])
    state.rate_window.append(action.allowed_at)
    _trim_window(state)
    _decide_first(
        action,
        {
            "decision": ALLOWED,
            "action_id": action.action_id,
            "cost": action.cost,
            "remaining": state.remaining,
        },
    )


def _trim_window(state: AgentState) -> None:
    # Only the newest max_actions allowed times can ever decide a rate check,
    # and only those inside the window of the newest one; keep no more.
    policy = state.policy
    window = state.rate_window
    if policy is None or policy.rate_limit is None:
        window.clear()
        return
    limit = policy.rate_limit
    while len(window) > limit.max_actions:
        window.popleft()
    if window:
        horizon = window[-1] - float(limit.window_secs)
        while window and window[0] <= horizon:
            window.popleft()


def _deny(state: AgentState, action: Action, reason: dict[str, Any]) -> None:
    state.pending.pop(action.action_id, None)
    action.status = DENIED
    action.reason = reason
    state.actions_denied += 1
    _decide_first(action, {"decision": DENIED, "action_id": action.action_id, "reason": reason})


def _denied(state: AgentState, r: dict[str, Any]) -> None:
    _deny(state, state.actions[r["action_id"]], r["reason"])


def _rejected(state: AgentState, r: dict[str, Any]) -> None:
    reason = {"code": "rejected", "by": r["by"], "reason": r["reason"]}
    _deny(state, state.actions[r["action_id"]], reason)


def _outcome(state: AgentState, r: dict[str, Any]) -> None:
    action = state.actions[r["action_id"]]
    action.status = COMPLETED
    action.outcome = r["outcome"]


def _scar(state: AgentState, r: dict[str, Any]) -> None:
    severity = r["severity"]
    state.scars.append(Scar(r["seq"], severity, r["reason"], r.get("action_id")))
    state.scar_score += SCAR_WEIGHTS[severity]


def _terminated(state: AgentState, r: dict[str, Any]) -> None:
    state.alive = False
    state.termination_reason = r["reason"]
    state.terminated_by = r["by"]


_APPLY = {
    "genesis": _genesis,
    "policy": _policy,
    "action_requested": _requested,
    "approval_required": _approval_required,
    "action_allowed": _allowed,
    "action_denied": _denied,
    "action_rejected": _rejected,
    "outcome": _outcome,
    "scar": _scar,
    "terminated": _terminated,
}

RECORD_KINDS = frozenset(_APPLY)


# Views: the JSON shapes of SERVICE.md, built from state.


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


def action_json(action: Action) -> dict[str, Any]:
    out: dict[str, Any] = {
        "action_id": action.action_id,
        "tool": action.tool,
        "input": action.input,
        "cost": action.cost,
        "status": action.status,
        "outcome": action.outcome,
        "requested_at": action.requested_at,
    }
    if action.reason is not None:
        out["reason"] = action.reason
    if action.approved_by is not None:
        out["approved_by"] = action.approved_by
    if action.note is not None:
        out["note"] = action.note
    return out


def pending_json(action: Action) -> dict[str, Any]:
    return {
        "requested_at": action.requested_at,
        "seq": action.seq,
        "action": {
            "action_id": action.action_id,
            "tool": action.tool,
            "input": action.input,
            "cost": action.cost,
        },
    }
