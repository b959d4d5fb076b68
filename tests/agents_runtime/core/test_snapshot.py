"""The state a snapshot writes comes back equal, whatever optional parts
the agent has grown (a shadow policy with its tallies, tag history), and
its dicts whose order a fold reads come back in that order."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

import pytest

from agents_runtime.core.grants import Grant
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


def _grant(n: int) -> Grant:
    at = "2026-11-26T20:00:00.000001Z"
    return Grant(f"grt-{n}", n + 1, at, "read", "ann", None, None, None, at, 1.0, None)


def test_keys_grants_tags_and_tool_calls_come_back_in_their_order_not_sorted() -> None:
    # Canonical JSON sorts an object's members: written as objects, the
    # oldest key (k4) would come back after k1 and be kept while k1 moved to
    # the runs, and grt-10 would come before grt-2 (the first of equals wins).
    state = AgentState("agent-1")
    state.idempotency = {"k4": (2, 10.0), "k1": (4, 11.0), "k3": (5, 12.0)}
    state.grants = {f"grt-{n}": _grant(n) for n in (1, 2, 10)}
    at = datetime(2026, 11, 26, 20, 0, 0, 1, tzinfo=UTC)
    state.tag_last_used = {"z": at, "private": at, "a": at}
    state.tool_calls = {"send": 2, "read": 1}
    back = state_from_json(canonical.loads(canonical.dumps(state_json(state))))
    assert back == state
    assert list(back.idempotency) == ["k4", "k1", "k3"]
    assert list(back.grants) == ["grt-1", "grt-2", "grt-10"]
    assert list(back.tag_last_used) == ["z", "private", "a"]
    assert list(back.tool_calls) == ["send", "read"]


def test_a_dict_kept_in_order_that_lists_a_key_twice_does_not_read() -> None:
    written = state_json(AgentState("agent-1"))
    written["idempotency"] = [["k1", [1, 1.0]], ["k1", [2, 2.0]]]
    with pytest.raises(ValueError, match="idempotency"):
        state_from_json(canonical.loads(canonical.dumps(written)))
