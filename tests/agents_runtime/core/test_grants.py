"""Bounded grants in the agent's behaviour: issued, drawn exactly (calls and
cost), matched on input, expiring, revoked, never turning a denial into an
allowance; replayed from the log."""

from __future__ import annotations

import re
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from agents_runtime.core import commands as c
from agents_runtime.errors import InvalidState, NotFound
from tests.agents_runtime.support import AGENT, D, Harness, policy, running_agent

TOOLS = {
    "read": {"cost": 1},
    "send": {"cost": 2, "requires_approval": True},
    "wire": {"requires_approval": True},
}


def standard(**overrides: Any) -> Any:
    return policy(**({"budget": 100, "scar_limit": 10, "tools": TOOLS} | overrides))


def grant(**fields: Any) -> c.IssueGrant:
    return c.IssueGrant(**({"tool": "send", "by": "alice", "ttl_secs": D(60)} | fields))


async def decide(agent: Harness, tool: str = "send", tool_input: Any = None, cost: Any = None):
    return await agent.ask(c.RequestAction(tool, tool_input, None if cost is None else D(cost)))


async def test_a_grant_is_a_record_with_its_expiry_and_its_bounds(tmp_path: Path) -> None:
    async with running_agent(tmp_path, standard()) as agent:
        issued = await agent.ask(grant(max_calls=2, note="batch mail", input_match={"to": "ops"}))
        record = agent.records()[-1]
        assert {k: v for k, v in record.items() if k not in ("hash", "sig", "prev")} == {
            "kind": "grant_issued",
            "grant_id": "grt-1",
            "tool": "send",
            "by": "alice",
            "max_calls": 2,
            "max_cost": None,
            "expires_at": "2026-01-01T00:01:00.000000Z",  # the clock's now + 60 s
            "input_match": {"to": "ops"},
            "note": "batch mail",
            "seq": 2,
            "ts": "2026-01-01T00:00:00.000000Z",
        }
        assert issued == {
            "grant_id": "grt-1",
            "tool": "send",
            "by": "alice",
            "note": "batch mail",
            "issued_at": "2026-01-01T00:00:00.000000Z",
            "expires_at": "2026-01-01T00:01:00.000000Z",
            "max_calls": 2,
            "max_cost": None,
            "input_match": {"to": "ops"},
            "calls_used": 0,
            "cost_used": 0,
            "calls_left": 2,
            "cost_left": None,
            "status": "active",
        }


async def test_held_calls_draw_on_the_grant_until_its_calls_are_spent(tmp_path: Path) -> None:
    async with running_agent(tmp_path, standard()) as agent:
        await agent.ask(grant(max_calls=2))
        first, second = await decide(agent), await decide(agent)
        for n, decision in ((1, first), (2, second)):
            assert (decision["decision"], decision["grant_id"]) == ("allowed", "grt-1")
            assert decision["action_id"] == f"act-{n}"
        allowed = agent.records()[-1]
        assert (allowed["kind"], allowed["grant_id"], allowed["cost"]) == (
            "action_allowed",
            "grt-1",
            2,
        )
        assert "approved_by" not in allowed
        assert (await decide(agent))["decision"] == "pending_approval"  # spent
        [listed] = (await agent.ask(c.ListGrants()))["grants"]
        assert (listed["calls_used"], listed["calls_left"], listed["status"]) == (2, 0, "used_up")
        assert (listed["cost_used"]) == 4
        action = await agent.ask(c.GetAction("act-1"))
        assert (action["status"], action["grant_id"]) == ("allowed", "grt-1")


async def test_a_cost_bound_is_drawn_exactly_never_past_it(tmp_path: Path) -> None:
    async with running_agent(tmp_path, standard()) as agent:
        await agent.ask(grant(tool="wire", max_cost=D(10)))
        assert (await decide(agent, "wire", cost=6))["grant_id"] == "grt-1"
        # 6 + 5 > 10: held for a person, not drawn
        assert (await decide(agent, "wire", cost=5))["decision"] == "pending_approval"
        # 6 + 4 = 10: drawn, and the grant is used up
        assert (await decide(agent, "wire", cost=4))["grant_id"] == "grt-1"
        [listed] = (await agent.ask(c.ListGrants()))["grants"]
        assert (listed["cost_used"], listed["cost_left"], listed["status"]) == (10, 0, "used_up")


async def test_only_calls_holding_the_matched_values_draw(tmp_path: Path) -> None:
    async with running_agent(tmp_path, standard()) as agent:
        await agent.ask(grant(max_calls=5, input_match={"to": "ops@example.com", "n": 1}))
        same = {"to": "ops@example.com", "n": Decimal("1.0"), "body": "anything"}
        assert (await decide(agent, tool_input=same))["decision"] == "allowed"
        for other in (
            {"to": "eve@example.com", "n": 1},
            {"to": "ops@example.com"},
            "ops@example.com",
            None,
        ):
            assert (await decide(agent, tool_input=other))["decision"] == "pending_approval"
        assert (await decide(agent, "wire", {"to": "ops@example.com", "n": 1}))[
            "decision"
        ] == "pending_approval"  # another tool


async def test_of_several_matching_grants_the_one_expiring_first_draws(tmp_path: Path) -> None:
    async with running_agent(tmp_path, standard()) as agent:
        await agent.ask(grant(max_calls=5, ttl_secs=D(600)))
        await agent.ask(grant(max_calls=1, ttl_secs=D(60)))
        await agent.ask(grant(max_calls=5, ttl_secs=D(300), input_match={"to": "x"}))
        assert (await decide(agent, tool_input={"to": "x"}))["grant_id"] == "grt-2"
        assert (await decide(agent, tool_input={"to": "x"}))["grant_id"] == "grt-3"
        assert (await decide(agent, tool_input={"to": "y"}))["grant_id"] == "grt-1"


async def test_an_expired_or_revoked_grant_draws_nothing(tmp_path: Path) -> None:
    async with running_agent(tmp_path, standard()) as agent:
        await agent.ask(grant(max_calls=5, ttl_secs=D(60)))
        await agent.ask(grant(max_calls=5, ttl_secs=D(600)))
        agent.clock.advance(60)
        assert (await decide(agent))["grant_id"] == "grt-2"  # grt-1 expired at exactly 60 s
        revoked = await agent.ask(c.RevokeGrant("grt-2", "bob", "enough"))
        assert (revoked["status"], revoked["revoked_by"], revoked["revoke_reason"]) == (
            "revoked",
            "bob",
            "enough",
        )
        assert agent.records()[-1]["kind"] == "grant_revoked"
        assert (await decide(agent))["decision"] == "pending_approval"
        statuses = [g["status"] for g in (await agent.ask(c.ListGrants()))["grants"]]
        assert statuses == ["expired", "revoked"]
        with pytest.raises(InvalidState, match=r"^grant grt-2 was revoked by bob at "):
            await agent.ask(c.RevokeGrant("grt-2", "bob"))
        with pytest.raises(NotFound, match=re.escape(f"no grant grt-9 for agent {AGENT}")):
            await agent.ask(c.RevokeGrant("grt-9", "bob"))


@pytest.mark.parametrize(
    ("overrides", "tool", "cost", "code"),
    [
        pytest.param({"budget": 3}, "send", 5, "insufficient_budget", id="budget"),
        pytest.param(
            {"rate_limit": {"max_actions": 1, "window_secs": 60}},
            "send",
            None,
            "rate_limited",
            id="rate",
        ),
        pytest.param(
            {"tools": TOOLS | {"send": {"requires_approval": True, "max_calls": 1}}},
            "send",
            None,
            "tool_call_limit",
            id="cap",
        ),
    ],
)
async def test_a_grant_never_turns_a_denial_into_an_allowance(
    tmp_path: Path, overrides: dict[str, Any], tool: str, cost: Any, code: str
) -> None:
    async with running_agent(tmp_path, standard(**overrides)) as agent:
        await agent.ask(grant(max_calls=10))
        await decide(agent, "read" if code == "rate_limited" else tool)  # uses the room
        decision = await decide(agent, tool, cost=cost)
        assert (decision["decision"], decision["reason"]["code"]) == ("denied", code)


async def test_a_tool_needing_no_approval_leaves_the_grant_untouched(tmp_path: Path) -> None:
    async with running_agent(tmp_path, standard()) as agent:
        await agent.ask(grant(tool="read", max_calls=1))
        decision = await decide(agent, "read")
        assert decision["decision"] == "allowed"
        assert "grant_id" not in decision
        [listed] = (await agent.ask(c.ListGrants()))["grants"]
        assert listed["calls_used"] == 0


async def test_a_terminated_agent_takes_no_grant(tmp_path: Path) -> None:
    async with running_agent(tmp_path, standard()) as agent:
        await agent.ask(c.Terminate("done", "op"))
        with pytest.raises(
            InvalidState, match=f"^agent {AGENT} is terminated; it takes no grants$"
        ):
            await agent.ask(grant(max_calls=1))


async def test_an_idempotency_retry_answers_the_draw_again(tmp_path: Path) -> None:
    async with running_agent(tmp_path, standard()) as agent:
        await agent.ask(grant(max_calls=1))
        first = await agent.ask(c.RequestAction("send", idempotency_key="k"))
        again = await agent.ask(c.RequestAction("send", idempotency_key="k"))
        assert again == first
        assert first["grant_id"] == "grt-1"
