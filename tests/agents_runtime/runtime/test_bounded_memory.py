"""What an agent keeps per action stays bounded: allowed times past what a
rate check can count leave memory at the fold, live and at a restart; an
old action (its key compacted, its lines far back in the log) still reads
back right on both stores: its view and receipt, its outcome, a repeat of
its Idempotency-Key."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from agents_runtime.core import commands as c
from agents_runtime.core.rate_history import TRIM_EVERY
from agents_runtime.core.state import recall
from agents_runtime.errors import InvalidState
from agents_runtime.log import canonical
from agents_runtime.log.files.datadir import DataDir
from agents_runtime.log.files.lineindex import STRIDE
from agents_runtime.log.files.store import FileStore
from agents_runtime.log.keys import load_keys
from agents_runtime.runtime.actor import AgentRef
from agents_runtime.runtime.registry import Registry
from guardd.app import BY_COMMAND
from tests.agents_runtime.runtime.conftest import OPEN
from tests.agents_runtime.runtime.test_crash import crash_cut
from tests.agents_runtime.support import AGENT, FakeClock, policy, write_test_keys

WINDOW = 60  # the rate window in force: only its allowed times stay in memory
STEP = 1.0  # seconds between two requests


async def _registry(root: Path, clock: FakeClock, **settings: Any) -> Registry:
    write_test_keys(root)
    data_dir = DataDir(root)
    registry = Registry(
        FileStore(data_dir),
        data_dir.prepare(),
        clock=clock,
        render=BY_COMMAND,
        **settings,
    )
    assert (await asyncio.to_thread(registry.load)).quarantined == {}
    await registry.start()
    return registry


def _rated(max_actions: int, window_secs: int) -> Any:
    rate = {"max_actions": max_actions, "window_secs": window_secs}
    return policy(budget=Decimal(10_000), tools={"read": {"cost": 0}}, rate_limit=rate)


async def test_allowed_times_the_window_in_force_does_not_reach_leave_memory_at_the_fold(
    tmp_path: Path,
) -> None:
    clock = FakeClock()
    registry = await _registry(tmp_path, clock)
    try:
        await registry.create(AGENT, _rated(1000, WINDOW))
        ref = registry.ref(AGENT)
        for _ in range(4 * TRIM_EVERY):
            await ref.ask(c.RequestAction(tool="read"))
            clock.advance(STEP)
        times = registry.actors[AGENT].state.allowed_times
        assert len(times) <= WINDOW / STEP + TRIM_EVERY
        assert times[0] > clock() - STEP - WINDOW - TRIM_EVERY * STEP
        live = list(times)
    finally:
        await registry.stop()
    registry = await _registry(tmp_path, clock)  # folded again from genesis
    try:
        assert list(registry.actors[AGENT].state.allowed_times) == live
    finally:
        await registry.stop()


@asynccontextmanager
async def _running(
    make_store: OPEN, root: Path, snapshots: int, clock: FakeClock | None = None
) -> AsyncIterator[Registry]:
    write_test_keys(root)
    store = make_store()
    registry = Registry(
        store,
        load_keys(DataDir(root).keys_dir),
        clock=clock or FakeClock(),
        recent_actions=2,
        snapshot_records=snapshots,
        render=BY_COMMAND,
    )
    assert (await asyncio.to_thread(registry.load)).quarantined == {}
    await registry.start()
    try:
        yield registry
    finally:
        await registry.stop()
        close = getattr(store, "close", None)  # the PostgreSQL store's own thread
        if close is not None:
            await asyncio.to_thread(close)


def _request(n: int) -> c.RequestAction:
    return c.RequestAction(tool="read", input={"n": n}, idempotency_key=f"key-{n}")


async def test_an_old_action_reads_back_right_its_outcome_view_receipt_and_key(
    make_store: OPEN, tmp_path: Path
) -> None:
    count = 2 * STRIDE + 10  # the first action's lines lie a few strides back
    async with _running(make_store, tmp_path, 10_000) as registry:
        await registry.create(AGENT, policy(budget=Decimal(10_000)))
        ref = registry.ref(AGENT)
        first = await ref.ask(_request(1))
        view = await ref.ask(c.GetAction("act-1"))
        assert view["status"] == "allowed"
        assert "receipt" in view
        for n in range(2, count + 1):
            await ref.ask(_request(n))
        assert "key-1" not in registry.actors[AGENT].state.idempotency  # compacted
        assert await ref.ask(c.GetAction("act-1")) == view
        assert await ref.ask(_request(1)) == first  # a repeat, read back from the log
        await ref.ask(c.ReportOutcome("act-1", "success", "agent"))
        with pytest.raises(InvalidState, match=r"^action act-1 already has outcome success$"):
            await ref.ask(c.ReportOutcome("act-1", "failure", "agent"))
        after = await ref.ask(c.GetAction("act-1"))
        assert after == dict(view, status="completed", outcome="success")
        await registry.save_checkpoints()
    # A restart folds it all again (from genesis twice, the second writing a
    # snapshot; then from that snapshot): the same answers.
    for snapshots in (10_000, 1, 1):
        async with _running(make_store, tmp_path, snapshots) as registry:
            ref = registry.ref(AGENT)
            assert await ref.ask(c.GetAction("act-1")) == after
            assert await ref.ask(_request(1)) == first
            await registry.save_snapshots()


def _left_memory(registry: Registry, action_id: str) -> bool:
    state = registry.actors[AGENT].state
    return int(action_id[4:]) < state.first_action and action_id not in state.held


async def _fill(registry: Registry, count: int) -> None:
    """``count`` more actions: with recent_actions=2, those before them leave memory."""
    ref = registry.ref(AGENT)
    for _ in range(count):
        await ref.ask(c.RequestAction(tool="read"))


async def _refusal(registry: Registry, command: c.Command) -> str:
    with pytest.raises(InvalidState) as refused:
        await registry.ref(AGENT).ask(command)
    return str(refused.value)


async def test_an_outcome_for_an_action_that_left_memory_is_taken_once(
    make_store: OPEN, tmp_path: Path
) -> None:
    tools = {"read": {"cost": 1}, "rm": {"cost": 1000}}  # rm: over the budget, denied
    async with _running(make_store, tmp_path, 10_000) as registry:
        await registry.create(AGENT, policy(budget=Decimal(100), tools=tools))
        ref = registry.ref(AGENT)
        await ref.ask(c.RequestAction(tool="read"))  # act-1: reported after it left memory
        await ref.ask(c.RequestAction(tool="read"))  # act-2: reported before
        await ref.ask(c.ReportOutcome("act-2", "failure", "agent"))
        await ref.ask(c.RequestAction(tool="rm"))  # act-3: denied
        refused_in_memory = await _refusal(registry, c.ReportOutcome("act-3", "success", "agent"))
        await _fill(registry, 6)
        assert all(_left_memory(registry, f"act-{n}") for n in (1, 2, 3))
        # The first report of act-1 is taken, and its fold keeps nothing of it.
        await ref.ask(c.ReportOutcome("act-1", "success", "agent"))
        assert _left_memory(registry, "act-1")
        assert await _refusal(registry, c.ReportOutcome("act-1", "failure", "agent")) == (
            "action act-1 already has outcome success"
        )
        assert await _refusal(registry, c.ReportOutcome("act-2", "success", "agent")) == (
            "action act-2 already has outcome failure"
        )
        assert (
            await _refusal(registry, c.ReportOutcome("act-3", "success", "agent"))
            == refused_in_memory
            == "action act-3 is denied, not allowed"
        )
        view = await ref.ask(c.GetAction("act-1"))
        assert (view["status"], view["outcome"]) == ("completed", "success")
    async with _running(make_store, tmp_path, 10_000) as registry:  # folded again
        assert await _refusal(registry, c.ReportOutcome("act-1", "harmful", "admin")) == (
            "action act-1 already has outcome success"
        )
        assert _left_memory(registry, "act-1")
        assert await registry.ref(AGENT).ask(c.GetAction("act-1")) == view


async def test_held_actions_that_left_memory_read_back_as_they_were(
    make_store: OPEN, tmp_path: Path
) -> None:
    tools = {"read": {"cost": 0}, "send": {"cost": 2, "requires_approval": True}}
    async with _running(make_store, tmp_path, 10_000) as registry:
        await registry.create(AGENT, policy(budget=Decimal(100), tools=tools))
        ref = registry.ref(AGENT)
        for n in range(1, 5):
            await ref.ask(c.RequestAction(tool="send", input={"n": n}))
        await ref.ask(c.Approve("act-1", "alice", "ok"))
        await ref.ask(c.Reject("act-2", "bob", "no"))
        await ref.ask(c.Cancel("act-3", "agent", "changed my mind"))
        views = {n: await ref.ask(c.GetAction(f"act-{n}")) for n in range(1, 5)}
        assert "receipt" in views[1]
        late = {
            n: await _refusal(registry, command)
            for n, command in (
                (1, c.Approve("act-1", "carol")),
                (2, c.Cancel("act-2", "agent")),
                (3, c.Reject("act-3", "carol", "late")),
            )
        }
        await _fill(registry, 6)
        assert all(_left_memory(registry, f"act-{n}") for n in (1, 2, 3))
        assert "act-4" in registry.actors[AGENT].state.pending  # pending: kept however old
        for n in range(1, 5):
            assert await ref.ask(c.GetAction(f"act-{n}")) == views[n]
        assert await _refusal(registry, c.Approve("act-1", "carol")) == late[1]
        assert await _refusal(registry, c.Cancel("act-2", "agent")) == late[2]
        assert await _refusal(registry, c.Reject("act-3", "carol", "late")) == late[3]
        # Decided after it left the window: its view and receipt still read back
        # once its Action has left memory too.
        await ref.ask(c.Approve("act-4", "alice"))
        approved = await ref.ask(c.GetAction("act-4"))
        assert approved["status"] == "allowed"
        assert "receipt" in approved
        await _fill(registry, 6)
        assert _left_memory(registry, "act-4")
        assert await ref.ask(c.GetAction("act-4")) == approved
        views[4] = approved
    async with _running(make_store, tmp_path, 1) as registry:  # folded again, then snapshotted
        for n in range(1, 5):
            assert await registry.ref(AGENT).ask(c.GetAction(f"act-{n}")) == views[n]
        await registry.save_snapshots()
    async with _running(make_store, tmp_path, 10_000) as registry:  # from the snapshot
        for n in range(1, 5):
            assert await registry.ref(AGENT).ask(c.GetAction(f"act-{n}")) == views[n]
        assert await _refusal(registry, c.Approve("act-1", "carol")) == late[1]


async def test_per_action_data_stays_within_twice_the_recent_actions(tmp_path: Path) -> None:
    clock = FakeClock()
    registry = await _registry(tmp_path, clock, recent_actions=100)
    try:
        tools = {"read": {"cost": 0}, "send": {"cost": 0, "requires_approval": True}}
        await registry.create(AGENT, policy(budget=Decimal(10), tools=tools))
        ref = registry.ref(AGENT)
        await ref.ask(c.RequestAction(tool="send"))  # act-1: pending throughout
        count = 1000
        for n in range(2, count + 1):
            tool = "send" if n % 10 == 0 else "read"
            await ref.ask(c.RequestAction(tool=tool))
            if tool == "send":
                await ref.ask(c.Reject(f"act-{n}", "bob", "no"))
        state = registry.actors[AGENT].state
        recent = state.recent_actions
        assert state.action_count == count
        assert recent <= len(state.action_seqs) <= 2 * recent
        assert len(state.action_status) == len(state.action_seqs)
        # One entry per eviction, every recent + 1 requests.
        assert state.evicted is not None
        assert len(state.evicted.to) == (count - 2 * recent - 1) // (recent + 1) + 1
        assert list(state.evicted.late_actions) == []  # nothing was said of an old action since
        # A recall of an old action reads the stretch of about 2 x recent
        # actions around it (at most 3 records each here), not the log.
        for n in range(1, state.first_action, 37):
            stretch = recall(state, n)
            assert stretch.upto - stretch.after <= 3 * (2 * recent + 2)
        # Held: the pending one, and those of the latest actions only.
        assert set(state.held) - {"act-1"} <= {
            f"act-{n}" for n in range(state.first_action, count + 1)
        }
        assert list(state.pending) == ["act-1"]
    finally:
        await registry.stop()


async def test_scars_that_left_memory_are_listed_in_every_status_on_both_stores(
    make_store: OPEN, tmp_path: Path
) -> None:
    async with _running(make_store, tmp_path, 10_000) as registry:
        tools = {"read": {"cost": 0}}
        await registry.create(AGENT, policy(budget=Decimal(10), scar_limit=1000, tools=tools))
        ref = registry.ref(AGENT)
        for n in range(1, 9):
            allowed = await ref.ask(c.RequestAction(tool="read"))
            await ref.ask(c.ReportOutcome(allowed["action_id"], "failure", "agent"))  # a scar
            await ref.ask(c.RequestAction(tool="write"))  # denied: a scar of its own
            await ref.ask(c.AddScar("minor", f"scar {n}", allowed["action_id"]))
        state = registry.actors[AGENT].state
        assert state.evicted is not None
        assert len(state.evicted.scars) > len(state.scars)  # most of them left memory
        status = await ref.ask(c.GetStatus())
        scars = status["scars"]
        assert len(scars) == 24
        assert [s["seq"] for s in scars] == sorted(s["seq"] for s in scars)
        assert scars[2] == {
            "seq": scars[2]["seq"],
            "severity": "minor",
            "reason": "scar 1",
            "action_id": "act-1",
        }
        # Every reply that is the status lists them all, each time.
        assert (await ref.ask(c.AddScar("minor", "one more")))["scars"][:24] == scars
        await registry.save_checkpoints()
    # From genesis twice (the second writing a snapshot), then from that snapshot.
    for snapshots in (10_000, 1, 1):
        async with _running(make_store, tmp_path, snapshots) as registry:
            again = await registry.ref(AGENT).ask(c.GetStatus())
            assert again["scars"][:24] == scars
            assert len(again["scars"]) == 25
            await registry.save_snapshots()


async def _calls_then_widened(
    registry: Registry, clock: FakeClock, calls: int, max_actions: int
) -> AgentRef:
    """``calls`` allowed calls, one a second, under the minute's window (so the
    trims let most of their times go), then an hour's window of
    ``max_actions``; the agent's reference."""
    await registry.create(AGENT, _rated(1000, WINDOW))
    ref = registry.ref(AGENT)
    for n in range(calls):
        await ref.ask(c.RequestAction(tool="read", input={"n": n}))
        clock.advance(STEP)
    await ref.ask(c.SetPolicy(_rated(max_actions, 3600)))
    return ref


async def test_a_policy_that_counts_further_back_counts_the_calls_read_back_from_the_log(
    make_store: OPEN, tmp_path: Path
) -> None:
    clock = FakeClock()
    calls = 3 * TRIM_EVERY  # one a second: all within the hour, most past the minute
    async with _running(make_store, tmp_path, 10_000, clock) as registry:
        ref = await _calls_then_widened(registry, clock, calls, calls + 1)
        state = registry.actors[AGENT].state
        assert len(state.allowed_times) < calls  # the trim let most go
        assert (await ref.ask(c.RequestAction(tool="read")))["decision"] == "allowed"
        assert len(state.allowed_times) == calls + 1  # put back from the log
        denied = await ref.ask(c.RequestAction(tool="read"))
        assert denied["decision"] == "denied"
        assert denied["reason"]["code"] == "rate_limited"
    # A restart, from genesis then from a snapshot, folds the trims again and
    # reads back the same calls: the same answer.
    for snapshots in (1, 10_000):
        async with _running(make_store, tmp_path, snapshots, clock) as registry:
            again = await registry.ref(AGENT).ask(c.RequestAction(tool="read"))
            assert again["reason"] == denied["reason"]
            await registry.save_snapshots()
        clock.advance(STEP)
    clock.advance(3600)  # the hour has passed: nothing left to count
    async with _running(make_store, tmp_path, 10_000, clock) as registry:
        later = await registry.ref(AGENT).ask(c.RequestAction(tool="read"))
        assert later["decision"] == "allowed"


async def test_a_restart_with_no_command_to_finish_leaves_the_read_back_to_the_first_command(
    make_store: OPEN, tmp_path: Path
) -> None:
    # Read back at the start, a read that fails would fence the agent until
    # the next restart; at a command it fails that command alone.
    clock = FakeClock()
    calls = 3 * TRIM_EVERY
    async with _running(make_store, tmp_path, 10_000, clock) as registry:
        # The policy is the last record: nothing to finish.
        await _calls_then_widened(registry, clock, calls, calls + 1)
    async with _running(make_store, tmp_path, 10_000, clock) as registry:
        pass  # stopped once the start's steps are done, before any command
    actor = registry.actors.get(AGENT)  # none on PostgreSQL: loaded on first use
    if actor is not None:
        assert actor.fenced is None
        assert len(actor.state.allowed_times) < calls  # nothing read back yet
    async with _running(make_store, tmp_path, 10_000, clock) as registry:
        ref = registry.ref(AGENT)
        assert (await ref.ask(c.RequestAction(tool="read")))["decision"] == "allowed"
        assert len(registry.actors[AGENT].state.allowed_times) == calls + 1
        denied = await ref.ask(c.RequestAction(tool="read"))
        assert denied["reason"]["code"] == "rate_limited"


async def test_a_request_a_crash_left_undecided_counts_the_calls_read_back_from_the_log(
    file_store: OPEN, tmp_path: Path
) -> None:
    clock = FakeClock()
    calls = 3 * TRIM_EVERY
    async with _running(file_store, tmp_path, 10_000, clock) as registry:
        ref = await _calls_then_widened(registry, clock, calls, calls)  # the hour holds them all
        denied = await ref.ask(c.RequestAction(tool="read"))
        assert denied["reason"]["code"] == "rate_limited"
    path = DataDir(tmp_path).agents_dir / f"{AGENT}.jsonl"
    whole = path.read_bytes()
    lines = whole.splitlines(keepends=True)
    kinds = [canonical.loads(line)["kind"] for line in lines]
    request = len(kinds) - 1 - kinds[::-1].index("action_requested")
    crash_cut(path, b"".join(lines[: request + 1]))  # its decision never written
    async with _running(file_store, tmp_path, 10_000, clock):
        pass
    assert path.read_bytes() == whole  # decided again as it was: rate_limited
