"""The agent actor: serialised commands, group commit, answers only after the
records are on disk, fencing after a failed write, clean stop, watchers."""

from __future__ import annotations

import asyncio
import re
from decimal import Decimal
from pathlib import Path
from typing import Any

import attrs
import pytest

from agents_runtime.core import commands as c
from agents_runtime.core.answers import Allowed
from agents_runtime.errors import (
    AgentUnavailable,
    CanonicalError,
    LogWriteError,
    ReadOnly,
    ShuttingDown,
    UnknownAction,
)
from agents_runtime.log.files.committer import Committer
from agents_runtime.log.files.datadir import DataDir
from agents_runtime.log.files.logfile import LogFile
from agents_runtime.log.files.store import FileStore
from agents_runtime.runtime.actor import LogView
from agents_runtime.runtime.registry import Registry
from audit.replay import replay_records
from guardd.app import BY_COMMAND
from tests.agents_runtime.support import (
    AGENT,
    D,
    FakeClock,
    Harness,
    load_log,
    policy,
    running_agent,
    running_registry,
    snapshot,
    write_test_keys,
)


class CountingCommitter(Committer):
    """The real committer, counting the batches (one write + fsync each)."""

    def __init__(self) -> None:
        super().__init__()
        self.batches: list[int] = []  # bytes per batch

    async def append(self, logfile: LogFile, data: bytes) -> None:
        self.batches.append(len(data))
        await super().append(logfile, data)


class GatedCommitter(Committer):
    """Holds each batch of the gated logs until the test opens the gate."""

    def __init__(self) -> None:
        super().__init__()
        self.gated: set[str] = set()
        self.gate = asyncio.Event()
        self.waiting = asyncio.Event()

    async def append(self, logfile: LogFile, data: bytes) -> None:
        if logfile.path.stem in self.gated:
            self.waiting.set()
            await self.gate.wait()
        await super().append(logfile, data)


class FailingCommitter(Committer):
    """Once armed, writes a third of the next batch (less than its first
    record, so no whole line), then fails as a disk would."""

    def __init__(self) -> None:
        super().__init__(inline=True)
        self.armed = False

    async def append(self, logfile: LogFile, data: bytes) -> None:
        if self.armed:
            logfile.append(data[: len(data) // 3])
            raise LogWriteError(f"append to {logfile.path.name} failed: [Errno 5] EIO")
        await super().append(logfile, data)


@attrs.define
class Running:
    registry: Registry
    agent: Harness


async def start(root: Path, committer: Committer, *agent_ids: str) -> Registry:
    data_dir = DataDir(root)
    write_test_keys(root)
    registry = Registry(
        FileStore(data_dir, committer=committer),
        data_dir.prepare(),
        clock=FakeClock(),
        render=BY_COMMAND,
    )
    registry.load()
    await registry.start()
    for agent_id in agent_ids:
        await registry.create(agent_id, policy())
    return registry


def number(action_id: str) -> int:
    return int(action_id.removeprefix("act-"))


# -- concurrency --------------------------------------------------------------------


async def test_1000_concurrent_requests_with_budget_for_100_allow_exactly_100(
    tmp_path: Path,
) -> None:
    committer = CountingCommitter()
    registry = await start(tmp_path, committer)
    try:
        await registry.create(AGENT, policy(budget=100, tools={"t": {"cost": 1}}))
        ref = registry.ref(AGENT)
        replies = await asyncio.gather(*(ref.ask(c.RequestAction("t")) for _ in range(1000)))
        status = await ref.ask(c.GetStatus())
    finally:
        await registry.stop()
    allowed = [r for r in replies if r["decision"] == "allowed"]
    denied = [r for r in replies if r["decision"] == "denied"]
    assert len(allowed) == 100
    assert len(denied) == 900
    assert {r["reason"]["code"] for r in denied} == {"terminated"}
    assert sorted(number(r["action_id"]) for r in replies) == list(range(1, 1001))
    assert sorted(r["remaining"] for r in allowed) == list(range(100))
    assert (status["remaining"], status["spent"]) == (Decimal(0), Decimal(100))
    assert (status["alive"], status["termination_reason"]) == (False, "budget_exhausted")
    assert (status["actions_allowed"], status["actions_denied"]) == (100, 900)
    # the log verifies, and holds exactly these decisions
    path = registry.store.path(AGENT)
    loaded = load_log(path, AGENT, registry.ring.public_key)
    assert loaded.failure is None
    assert loaded.state is not None
    assert loaded.state.head.seq == 1 + 1000 * 2 + 1  # genesis, policy, 2 per request, terminated
    lines = dict(enumerate(loaded.contents.lines))
    assert snapshot(loaded.state, lines) == snapshot(registry.actors[AGENT].state, lines)
    records = [r for r in (_parse(line) for line in loaded.contents.lines)]
    assert replay_records(records).ok
    # group commit: far fewer write+fsync batches than commands
    assert len(committer.batches) < 100
    print(f"1000 concurrent requests: {len(committer.batches)} batches")


def _parse(line: bytes) -> dict[str, Any]:
    from agents_runtime.log import canonical

    return canonical.loads(line)


async def test_commands_to_one_agent_run_in_mailbox_order(tmp_path: Path) -> None:
    async with running_agent(tmp_path, policy(budget=1000)) as agent:
        commands = [c.RequestAction("read", {"n": n}) for n in range(50)]
        replies = await asyncio.gather(*(agent.ask(cmd) for cmd in commands))
        assert [r["action_id"] for r in replies] == [f"act-{n}" for n in range(1, 51)]
        inputs = [(await agent.ask(c.GetAction(f"act-{n}")))["input"] for n in range(1, 51)]
        assert inputs == [{"n": n} for n in range(50)]


async def test_agents_do_not_wait_for_each_other(tmp_path: Path) -> None:
    committer = GatedCommitter()
    registry = await start(tmp_path, committer, "slow", "fast")
    try:
        committer.gated.add("slow")
        slow = asyncio.ensure_future(registry.ref("slow").ask(c.RequestAction("read")))
        await asyncio.wait_for(committer.waiting.wait(), 5)
        fast = await asyncio.wait_for(registry.ref("fast").ask(c.RequestAction("read")), 5)
        assert fast["decision"] == "allowed"
        assert not slow.done()
        committer.gate.set()
        assert (await asyncio.wait_for(slow, 5))["decision"] == "allowed"
    finally:
        committer.gate.set()
        await registry.stop()


# -- durability ---------------------------------------------------------------------


async def test_callers_are_answered_only_after_their_records_are_on_disk(tmp_path: Path) -> None:
    committer = GatedCommitter()
    registry = await start(tmp_path, committer, AGENT)
    try:
        path = registry.store.path(AGENT)
        before = path.read_bytes()
        committer.gated.add(AGENT)
        ask = asyncio.ensure_future(registry.ref(AGENT).ask(c.RequestAction("read")))
        await asyncio.wait_for(committer.waiting.wait(), 5)
        await asyncio.sleep(0.01)
        assert not ask.done()
        assert path.read_bytes() == before
        committer.gate.set()
        reply = await asyncio.wait_for(ask, 5)
        assert reply["decision"] == "allowed"
        written = path.read_bytes()[len(before) :]
        assert written.count(b"\n") == 2
        assert b'"kind":"action_allowed"' in written
    finally:
        committer.gate.set()
        await registry.stop()


async def test_a_failed_write_fails_the_batch_and_fences_the_agent(tmp_path: Path) -> None:
    committer = FailingCommitter()
    registry = await start(tmp_path, committer, AGENT)
    ref = registry.ref(AGENT)
    try:
        await ref.ask(c.RequestAction("read"))
        before = await ref.ask(c.GetStatus())
        committer.armed = True
        fenced = (
            f"writing the log of agent {AGENT} failed; "
            "it accepts no writes until guardd is restarted"
        )
        with pytest.raises(AgentUnavailable, match=f"^{re.escape(fenced)}$"):
            await ref.ask(c.RequestAction("read"))
        committer.armed = False
        # the state was rebuilt from what was committed: the failed request never happened
        assert await ref.ask(c.GetStatus()) == before
        with pytest.raises(AgentUnavailable, match=f"^{re.escape(fenced)}$"):
            await ref.ask(c.Terminate("x", "y"))
        assert (await ref.ask(c.GetAction("act-1")))["status"] == "allowed"
        with pytest.raises(UnknownAction):
            await ref.ask(c.GetAction("act-2"))
    finally:
        await registry.stop()
    # after a restart the half-written batch is a torn tail, moved aside; nothing is lost
    async with running_registry(tmp_path) as again:
        status = await again.ref(AGENT).ask(c.GetStatus())
        assert (status["actions_allowed"], status["spent"]) == (1, 1)
        assert (await again.ref(AGENT).ask(c.RequestAction("read")))["action_id"] == "act-2"
    assert (tmp_path / "agents" / f"{AGENT}.jsonl.torn").exists()


async def test_a_failed_write_fails_every_caller_of_the_batch(tmp_path: Path) -> None:
    committer = GatedCommitter()
    registry = await start(tmp_path, committer, AGENT)
    ref = registry.ref(AGENT)
    try:
        committer.gated.add(AGENT)
        first = asyncio.ensure_future(ref.ask(c.RequestAction("read")))
        await asyncio.wait_for(committer.waiting.wait(), 5)
        # these three queue up behind the held batch and will share the next one
        rest = [asyncio.ensure_future(ref.ask(c.RequestAction("read"))) for _ in range(3)]
        await asyncio.sleep(0.01)
        real_append = Committer.append

        async def failing(self: Committer, logfile: LogFile, data: bytes) -> None:
            raise LogWriteError("append failed: [Errno 28] ENOSPC")

        committer.gated.clear()
        Committer.append = failing  # type: ignore[method-assign]
        try:
            committer.gate.set()
            results = await asyncio.gather(first, *rest, return_exceptions=True)
        finally:
            Committer.append = real_append  # type: ignore[method-assign]
        assert all(isinstance(r, AgentUnavailable) for r in results), results
        status = await ref.ask(c.GetStatus())
        assert (status["actions_allowed"], status["head"]["seq"]) == (0, 1)
    finally:
        committer.gate.set()
        await registry.stop()


# -- lifecycle of the actor -------------------------------------------------------------


async def test_stop_answers_what_is_queued_and_refuses_later_asks(tmp_path: Path) -> None:
    registry = await start(tmp_path, Committer(), AGENT)
    ref = registry.ref(AGENT)
    asks = [asyncio.ensure_future(ref.ask(c.RequestAction("read"))) for _ in range(20)]
    await asyncio.sleep(0)
    await registry.stop()
    results = await asyncio.gather(*asks, return_exceptions=True)
    answered = [r for r in results if isinstance(r, dict)]
    refused = [r for r in results if isinstance(r, ShuttingDown)]
    assert len(answered) + len(refused) == 20
    with pytest.raises(ShuttingDown, match=r"^guardd is shutting down$"):
        await ref.ask(c.GetStatus())
    loaded = load_log(registry.store.path(AGENT), AGENT, registry.ring.public_key)
    assert loaded.state is not None
    assert loaded.state.actions_allowed == len(answered)


async def test_watch_resolves_when_the_action_leaves_pending(tmp_path: Path) -> None:
    tools = {"send": {"requires_approval": True}}
    async with running_agent(tmp_path, policy(tools=tools)) as agent:
        await agent.ask(c.RequestAction("send"))
        watch = await agent.ask(c.WatchAction("act-1"))
        again = await agent.ask(c.WatchAction("act-1"))
        await asyncio.sleep(0.01)
        assert not watch.done()
        await agent.ask(c.Approve("act-1", "alice"))
        await asyncio.wait_for(asyncio.gather(watch, again), 5)


async def test_watch_of_a_decided_action_is_already_done(tmp_path: Path) -> None:
    async with running_agent(tmp_path) as agent:
        await agent.ask(c.RequestAction("read"))
        assert (await agent.ask(c.WatchAction("act-1"))).done()
        with pytest.raises(UnknownAction):
            await agent.ask(c.WatchAction("act-2"))


async def test_watchers_are_released_when_the_actor_stops(tmp_path: Path) -> None:
    tools = {"send": {"requires_approval": True}}
    async with running_agent(tmp_path, policy(tools=tools)) as agent:
        await agent.ask(c.RequestAction("send"))
        watch = await agent.ask(c.WatchAction("act-1"))
    assert watch.cancelled()


async def test_log_view_covers_exactly_the_committed_bytes(tmp_path: Path) -> None:
    async with running_agent(tmp_path) as agent:
        await agent.ask(c.RequestAction("read"))
        view = await agent.ask(c.GetLogView())
        assert isinstance(view, LogView)
        assert view.committed.size == agent.path.stat().st_size
        assert view.head == agent.state.head
        assert view.log.path == agent.path


async def test_timestamps_never_go_backwards_when_the_clock_does(tmp_path: Path) -> None:
    clock = FakeClock()
    async with running_agent(tmp_path, policy(budget=1000), clock=clock) as agent:
        await agent.ask(c.RequestAction("read"))
        clock.advance(-3600)
        await agent.ask(c.RequestAction("read"))
        stamps = [r["ts"] for r in agent.records()]
        assert stamps == sorted(stamps)
        assert stamps[-1] == stamps[-3]


class TickingClock(FakeClock):
    """A clock that moves a millisecond every time it is read."""

    def __call__(self) -> float:
        self.now += 0.001
        return self.now


async def test_every_record_of_one_batch_carries_the_same_ts(tmp_path: Path) -> None:
    async with running_agent(tmp_path, policy(budget=1000), clock=TickingClock()) as agent:
        before = len(agent.records())
        await asyncio.gather(*(agent.ask(c.RequestAction("read")) for _ in range(5)))
        batch = agent.records()[before:]
        assert len(batch) == 10
        assert len({r["ts"] for r in batch}) == 1
        await agent.ask(c.RequestAction("read"))
        assert agent.records()[-1]["ts"] > batch[-1]["ts"]


async def test_a_read_only_key_ring_serves_reads_and_refuses_writes(tmp_path: Path) -> None:
    async with running_agent(tmp_path) as agent:
        await agent.ask(c.RequestAction("read"))
    data_dir = DataDir(tmp_path)
    ring = attrs.evolve(data_dir.prepare(), signer=None)
    registry = Registry(FileStore(data_dir), ring, clock=FakeClock(), render=BY_COMMAND)
    registry.load()
    await registry.start()
    try:
        ref = registry.ref(AGENT)
        assert (await ref.ask(c.GetStatus()))["actions_allowed"] == 1
        message = "guardd has no signing key (keys/audit.key): logs are read-only"
        for command in (c.RequestAction("read"), c.Terminate("x", "y"), c.AddScar("minor", "x")):
            with pytest.raises(ReadOnly, match=f"^{re.escape(message)}$"):
                await ref.ask(command)
        with pytest.raises(ReadOnly, match=r"cannot create agents$"):
            await registry.create("other", policy())
    finally:
        await registry.stop()


async def test_a_request_that_cannot_be_written_is_refused_and_writes_nothing(
    tmp_path: Path,
) -> None:
    async with running_agent(tmp_path) as agent:
        before = agent.path.read_bytes()
        with pytest.raises(CanonicalError, match="Integer exceeds 53-bit range"):
            await agent.ask(c.RequestAction("read", {"x": 2**60}))
        assert agent.path.read_bytes() == before
        assert (await agent.ask(c.RequestAction("read", {"x": D("0.5")})))["action_id"] == "act-1"


@pytest.mark.parametrize(
    "inline", [pytest.param(False, id="writer-thread"), pytest.param(True, id="inline")]
)
async def test_on_commit_is_told_each_batch_with_its_records_and_timings(
    tmp_path: Path, inline: bool
) -> None:
    committer = Committer(inline=inline)
    seen: list[tuple[int, float, float]] = []
    committer.on_commit = lambda records, write, fsync: seen.append((records, write, fsync))
    registry = await start(tmp_path, committer, AGENT)
    try:
        ref = registry.ref(AGENT)
        for _ in range(3):  # one after another: a batch each
            assert (await ref.ask(c.RequestAction("read")))["decision"] == "allowed"
    finally:
        await registry.stop()
    assert [records for records, _, _ in seen] == [2, 2, 2]  # action_requested + its decision
    assert all(write >= 0 and fsync > 0 for _, write, fsync in seen)


async def test_a_sender_waiting_for_room_when_the_actor_ends_is_answered(
    tmp_path: Path,
) -> None:
    # The mailbox is full and one more caller waits for room; the actor ends
    # (cancelled at the end of a stop's grace, or quarantined while
    # serving) and fails what its mailbox holds. The room that makes lets
    # the waiting caller's command in after the actor has read its last: it
    # must be answered all the same, not left waiting for ever.
    async with running_registry(tmp_path) as registry:
        await registry.create("a", policy())
        actor = registry.actors["a"]
        ref = registry.ref("a")
        await ref.ask(c.GetStatus())  # the actor runs, waiting for its mailbox
        assert actor.task is not None
        queued = [ref.ask(c.GetStatus()) for _ in range(actor.mailbox.size)]
        assert actor.mailbox.full()
        waiting = asyncio.ensure_future(ref.ask(c.GetStatus()))
        actor.task.cancel()
        await asyncio.wait([actor.task])
        answers = await asyncio.gather(*queued, return_exceptions=True)
        assert all(isinstance(answer, ShuttingDown) for answer in answers)
        for _ in range(5):  # the waiting caller's turn comes on the next steps
            await asyncio.sleep(0)
        assert waiting.done()
        with pytest.raises(ShuttingDown):
            waiting.result()


async def test_each_reply_is_rendered_from_the_state_its_own_command_left(tmp_path: Path) -> None:
    async with running_agent(tmp_path) as agent:
        # Asked with no await between: the idle actor cannot run in between,
        # so both are one batch, answered together after its commit; the
        # scar's status is rendered before the request runs.
        scarred = agent.ref.ask(c.AddScar("minor", "rude"))
        decided = agent.ref.ask(c.RequestAction("read", {"q": 1}))
        status, decision = await scarred, await decided
        assert (status["scar_score"], status["actions_allowed"]) == (1, 0)
        assert (decision["decision"], decision["remaining"]) == ("allowed", 99)
        assert (await agent.ask(c.GetStatus()))["actions_allowed"] == 1


async def test_without_a_renderer_a_command_is_answered_with_the_cores_value(
    tmp_path: Path,
) -> None:
    data_dir = DataDir(tmp_path)
    write_test_keys(tmp_path)
    registry = Registry(FileStore(data_dir), data_dir.prepare(), clock=FakeClock())
    registry.load()
    await registry.start()
    try:
        await registry.create(AGENT, policy())
        ref = registry.ref(AGENT)
        decision = await ref.ask(c.RequestAction("read", {"q": 1}))
        assert isinstance(decision, Allowed)
        assert (decision.action_id, decision.remaining, decision.grant_id) == ("act-1", 99, None)
        assert await ref.ask(c.GetAction("act-1")) == 1
        assert await ref.ask(c.FindAction("nope")) is None
    finally:
        await registry.stop()
