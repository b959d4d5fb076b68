"""Approval expiry: ``approval_timeout_secs`` (the policy's, a tool's rule's or
the default rule's) counted from the ``approval_required`` record. The actor
writes ``approval_expired`` (denied, code ``approval_expired``, no scar, never
charged) at the first batch whose clock reaches the deadline, before that
batch's commands, and by itself when its timer runs out."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from agents_runtime.core import commands as c
from agents_runtime.errors import InvalidState
from tests.agents_runtime.support import (
    AGENT,
    FakeClock,
    Harness,
    live_state,
    policy,
    running_agent,
    running_registry,
)


def held_policy(**overrides: Any) -> Any:
    keys: dict[str, Any] = {
        "budget": 10,
        "scar_limit": 10,
        "tools": {"send": {"cost": 2, "requires_approval": True}, "read": {"cost": 1}},
        "approval_timeout_secs": 30,
    }
    keys.update(overrides)
    return policy(**keys)


def kinds_after(agent: Harness, seq: int) -> list[str]:
    return [r["kind"] for r in agent.records() if r["seq"] > seq]


async def test_a_held_action_expires_before_the_first_command_past_its_deadline(
    tmp_path: Path,
) -> None:
    async with running_agent(tmp_path, held_policy()) as agent:
        assert (await agent.ask(c.RequestAction("send")))["decision"] == "pending_approval"
        held_at = agent.records()[-1]
        agent.clock.advance(29.999999)
        await agent.ask(c.GetStatus())
        assert agent.state.pending  # not yet
        head = agent.state.head.seq
        agent.clock.advance(0.000001)
        status = await agent.ask(c.RequestAction("read"))
        assert kinds_after(agent, head) == [
            "approval_expired",
            "action_requested",
            "action_allowed",
        ]
        expired = agent.records()[head + 1]
        assert (expired["action_id"], expired["timeout_secs"]) == ("act-1", 30)
        assert expired["ts"] > held_at["ts"]
        assert status["decision"] == "allowed"
        state = agent.state
        assert (state.actions_denied, state.spent, state.scars, len(state.pending)) == (
            1,
            1,
            [],
            0,
        )
        action = await agent.ask(c.GetAction("act-1"))
        assert action["status"] == "denied"
        assert action["reason"] == {"code": "approval_expired", "timeout_secs": 30}
        with pytest.raises(InvalidState, match=r"^action act-1 expired at .*30 seconds; "):
            await agent.ask(c.Approve("act-1", "alice"))


@pytest.mark.parametrize(
    ("overrides", "tool", "secs"),
    [
        pytest.param({}, "send", 30, id="policy"),
        pytest.param(
            {"tools": {"send": {"requires_approval": True, "approval_timeout_secs": 5}}},
            "send",
            5,
            id="tool-rule",
        ),
        pytest.param(
            {"tools": {}, "default": {"requires_approval": True, "approval_timeout_secs": 7}},
            "anything",
            7,
            id="default-rule",
        ),
    ],
)
async def test_the_rule_that_sets_a_timeout_wins_over_the_policy(
    tmp_path: Path, overrides: dict[str, Any], tool: str, secs: int
) -> None:
    async with running_agent(tmp_path, held_policy(**overrides)) as agent:
        await agent.ask(c.RequestAction(tool))
        agent.clock.advance(secs - 0.5)
        await agent.ask(c.GetStatus())
        assert agent.state.pending
        agent.clock.advance(0.5)
        await agent.ask(c.GetStatus())
        assert not agent.state.pending
        assert agent.records()[-1]["timeout_secs"] == secs


async def test_without_a_timeout_a_held_action_waits_for_ever(tmp_path: Path) -> None:
    async with running_agent(tmp_path, held_policy(approval_timeout_secs=None)) as agent:
        await agent.ask(c.RequestAction("send"))
        agent.clock.advance(10 * 365 * 86400)
        await agent.ask(c.GetStatus())
        assert list(agent.state.pending) == ["act-1"]


async def test_the_policy_in_force_decides_measured_from_approval_required(
    tmp_path: Path,
) -> None:
    async with running_agent(tmp_path, held_policy(approval_timeout_secs=None)) as agent:
        await agent.ask(c.RequestAction("send"))
        agent.clock.advance(20)
        await agent.ask(c.SetPolicy(held_policy(approval_timeout_secs=60)))
        agent.clock.advance(39)
        await agent.ask(c.GetStatus())
        assert agent.state.pending  # 59 s since approval_required
        await agent.ask(c.SetPolicy(held_policy(approval_timeout_secs=10)))
        await agent.ask(c.GetStatus())  # the next batch: 59 s > 10 s
        assert not agent.state.pending
        assert agent.kinds()[-2:] == ["policy", "approval_expired"]


async def test_cancelled_and_decided_actions_never_expire(tmp_path: Path) -> None:
    async with running_agent(tmp_path, held_policy()) as agent:
        for _ in range(3):
            await agent.ask(c.RequestAction("send"))
        await agent.ask(c.Approve("act-1", "alice"))
        await agent.ask(c.Cancel("act-2", c.AGENT, "gave up"))
        agent.clock.advance(31)
        await agent.ask(c.GetStatus())
        expired = [r["action_id"] for r in agent.records() if r["kind"] == "approval_expired"]
        assert expired == ["act-3"]
        assert agent.state.spent == 2


async def test_the_timer_expires_an_action_with_no_command_and_wakes_a_watcher(
    tmp_path: Path,
) -> None:
    clock = time.time  # real time: the timer is what moves things here
    async with running_registry(tmp_path, clock=clock) as registry:  # type: ignore[arg-type]
        await registry.create(AGENT, held_policy(approval_timeout_secs=0.3))
        ref = registry.ref(AGENT)
        await ref.ask(c.RequestAction("send"))
        watch = await ref.ask(c.WatchAction("act-1"))
        started = time.monotonic()
        await asyncio.wait_for(watch, 5)
        assert time.monotonic() - started < 2
        action = await ref.ask(c.GetAction("act-1"))
        assert action["reason"]["code"] == "approval_expired"
        state = live_state(registry)
        assert state.last_record is not None
        assert state.last_record["kind"] == "approval_expired"


async def test_an_action_that_expired_while_stopped_is_expired_before_the_first_command(
    tmp_path: Path,
) -> None:
    clock = FakeClock()
    async with running_registry(tmp_path, clock=clock) as registry:
        await registry.create(AGENT, held_policy())
        await registry.ref(AGENT).ask(c.RequestAction("send"))
    clock.advance(3600)
    async with running_registry(tmp_path, clock=clock) as registry:
        with pytest.raises(InvalidState, match=r"^action act-1 expired at "):
            await registry.ref(AGENT).ask(c.Approve("act-1", "alice"))
        state = live_state(registry)
        assert state.last_record is not None
        assert state.last_record["kind"] == "approval_expired"
        assert state.last_record["ts"] == state.last_ts
        assert state.spent == 0
