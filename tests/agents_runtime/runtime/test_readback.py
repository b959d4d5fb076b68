"""What a reply quotes of earlier records is read back from the store, off
the event loop; what later decisions need stays in memory."""

from __future__ import annotations

from pathlib import Path

import pytest

from agents_runtime.core import commands as c
from agents_runtime.core.records import apply
from agents_runtime.core.state import AgentState
from agents_runtime.errors import LogReadError
from tests.agents_runtime.support import policy, running_agent

TOOLS = {"read": {"cost": 1}, "send": {"cost": 2, "requires_approval": True}}


async def test_actions_decided_at_request_are_read_back_from_the_log_not_kept(
    tmp_path: Path,
) -> None:
    async with running_agent(tmp_path, policy(budget=1000, tools=TOOLS)) as agent:
        for n in range(50):
            await agent.ask(c.RequestAction("read", {"n": n, "text": "x" * 100}))
        await agent.ask(c.RequestAction("nope", {"n": 50}))
        state = agent.state
        assert (state.action_count, state.held, state.pending) == (51, {}, {})
        action = await agent.ask(c.GetAction("act-7"))
        assert (action["input"], action["status"], action["cost"]) == (
            {"n": 6, "text": "x" * 100},
            "allowed",
            1,
        )
        denied = await agent.ask(c.GetAction("act-51"))
        assert denied["reason"] == {"code": "tool_not_allowed", "tool": "nope"}


async def test_held_actions_stay_in_memory_with_their_answer(tmp_path: Path) -> None:
    async with running_agent(tmp_path, policy(tools=TOOLS)) as agent:
        await agent.ask(c.RequestAction("send", {"to": "ops"}))
        await agent.ask(c.Approve("act-1", "alice", "fine"))
        assert list(agent.state.held) == ["act-1"]
        assert agent.state.pending == {}
        action = await agent.ask(c.GetAction("act-1"))
        assert (action["approved_by"], action["note"], action["cost"]) == ("alice", "fine", 2)


async def test_a_finished_action_of_a_log_changed_under_guardd_is_an_internal_error(
    tmp_path: Path,
) -> None:
    async with running_agent(tmp_path, policy(tools=TOOLS)) as agent:
        await agent.ask(c.RequestAction("read", {"q": 1}))
        await agent.ask(c.RequestAction("read", {"q": 2}))
        lines = agent.path.read_bytes().splitlines(keepends=True)
        agent.path.write_bytes(b"".join(lines[:2]))  # cut both actions off
        with pytest.raises(LogReadError) as caught:
            await agent.ask(c.GetAction("act-2"))
        assert caught.value.code == "internal"
        agent.path.write_bytes(b"".join(lines))  # put back for the replay check on exit


def test_action_seqs_grow_past_2_to_the_32() -> None:
    state = AgentState("a")
    for seq in (5, 2**32 + 7):
        n = state.action_count + 1
        record = {
            "kind": "action_requested",
            "seq": seq,
            "ts": "2026-01-01T00:00:00.000000Z",
            "hash": "0" * 64,
            "action_id": f"act-{n}",
        }
        apply(state, record)
    assert list(state.action_seqs) == [5, 2**32 + 7]
