"""The state a snapshot writes comes back equal, whatever optional parts
the agent has grown (a shadow policy with its tallies, tag history)."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

from agents_runtime.core.policy import parse_policy
from agents_runtime.core.snapshot import state_from_json, state_json
from agents_runtime.core.state import Action, AgentState, Shadow
from agents_runtime.log import canonical

POLICY = {"budget": 10, "scar_limit": 5, "tools": {"read": {"cost": 1, "tags": ["private"]}}}


def test_a_state_with_a_shadow_and_tag_history_comes_back_equal() -> None:
    state = AgentState("agent-1")
    state.policy = parse_policy(POLICY)
    state.shadow = Shadow(
        parse_policy(POLICY | {"budget": 3}),
        "2026-11-26T20:00:00.000001Z",
        policy_ref="fleet",
        version=2,
        agree=4,
        disagree={"allowed->pending_approval": 2},
        recent=["act-3", "act-5"],
    )
    state.shadow_disagreements = {"allowed->pending_approval": 2}
    state.tag_last_used = {"private": datetime(2026, 11, 26, 20, 0, 0, 1, tzinfo=UTC)}
    # Through the bytes a snapshot holds, as a start reads them.
    back = state_from_json(canonical.loads(canonical.dumps(state_json(state))))
    assert back == state
    assert back.shadow is not None
    assert back.shadow.policy.budget == 3


def test_a_held_action_with_approvals_short_of_its_quorum_comes_back_equal() -> None:
    state = AgentState("agent-1")
    state.policy = parse_policy(
        {
            "budget": 10,
            "scar_limit": 5,
            "tools": {"wire": {"requires_approval": True, "approvals_required": 3}},
        }
    )
    request = {
        "kind": "action_requested",
        "action_id": "act-1",
        "tool": "wire",
        "input": {},
        "seq": 2,
        "ts": "2026-11-26T20:00:00.000001Z",
        "by": "ann",
        "by_id": "token:tok-1",
    }
    held = Action(request, Decimal(0), held_at=1.5)
    held.approvals = [
        {"by": "bob", "by_id": "oidc:https://id.example#b", "at": "2026-11-26T20:00:01.000001Z"}
    ]
    state.held["act-1"] = held
    state.pending["act-1"] = held
    decided = Action({**request, "action_id": "act-0"}, Decimal(0), approved_by="carl")
    decided.decided_by_id = "admin-token"
    decided.decided_at = "2026-11-26T19:00:00.000001Z"
    state.held["act-0"] = decided
    back = state_from_json(canonical.loads(canonical.dumps(state_json(state))))
    assert back == state
    assert back.pending["act-1"] is back.held["act-1"]
    assert back.held["act-1"].approvals == held.approvals
    assert back.held["act-0"].decided_by_id == "admin-token"
