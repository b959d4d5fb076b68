"""The committer's rounds: the batches of many agents waiting together are
written, then made durable with one shared flush; nobody is answered before
that flush returns; a failed flush fails and fences every agent of its
round, a failed write only its own."""

from __future__ import annotations

import asyncio
import os
import re
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from agents_runtime.core import commands as c
from agents_runtime.errors import AgentUnavailable, LogWriteError
from agents_runtime.log.files.committer import Committer
from agents_runtime.log.files.datadir import DataDir
from agents_runtime.log.files.faults import EIO_FSYNC, EIO_WRITE, Fault, FaultyIO
from agents_runtime.log.files.logfile import DEFAULT_IO, FileIO, FlushAnchors, LogFile, sync_logs
from agents_runtime.log.files.store import FileStore
from agents_runtime.runtime.registry import Registry
from guardd.app import BY_COMMAND
from tests.agents_runtime.support import FakeClock, policy, running_registry, write_test_keys

AGENTS = [f"agent-{n:02d}" for n in range(20)]
GATE = "gate"  # its batch holds the writer in a round while the others queue up


class RecordingIO(FileIO):
    """The real system calls, noting the descriptor of each shared flush."""

    def __init__(self) -> None:
        self.flushed: list[int] = []

    def sync_fs(self, fd: int) -> None:
        super().sync_fs(fd)
        self.flushed.append(fd)


class CountingIO(FileIO):
    """The real system calls, counting the flushes (fsyncs and shared
    flushes apart); ``hold`` keeps the next flush waiting until the test
    sets ``release``."""

    def __init__(self) -> None:
        self.fsyncs = 0
        self.flushes = 0
        self.hold = False
        self.holding = threading.Event()
        self.release = threading.Event()

    def _held(self) -> None:
        if self.hold:
            self.hold = False
            self.holding.set()
            self.release.wait(10.0)

    def fsync(self, fd: int) -> None:
        self._held()
        super().fsync(fd)
        self.fsyncs += 1

    def sync_fs(self, fd: int) -> None:
        self._held()
        super().sync_fs(fd)
        self.flushes += 1


class CountingCommitter(Committer):
    """The real committer, counting the batches handed to it."""

    def __init__(self) -> None:
        super().__init__()
        self.appended = 0

    async def append(self, logfile: LogFile, data: bytes) -> None:
        self.appended += 1
        await super().append(logfile, data)


async def _until(condition: Callable[[], bool], what: str) -> None:
    for _ in range(5000):
        if condition():
            return
        await asyncio.sleep(0.001)
    raise AssertionError(f"timed out waiting for {what}")


async def _registry(root: Path, io_for: Callable[[str], FileIO]) -> Registry:
    data_dir = DataDir(root)
    write_test_keys(root)
    registry = Registry(
        FileStore(data_dir, committer=CountingCommitter(), io_for=io_for),
        data_dir.prepare(),
        clock=FakeClock(),
        render=BY_COMMAND,
    )
    registry.load()
    await registry.start()
    for agent_id in [GATE, *AGENTS]:
        await registry.create(agent_id, policy())
    return registry


async def _one_round(
    registry: Registry, gate_io: CountingIO
) -> list[dict[str, object] | BaseException]:
    """Hold the writer in a round with the gate's batch, send one request to
    each of AGENTS, wait until all their batches are queued, then let the
    writer go: those batches form the next round, all together."""
    committer = registry.store.committer
    assert isinstance(committer, CountingCommitter)
    gate_io.hold = True
    gate = asyncio.ensure_future(registry.ref(GATE).ask(c.RequestAction("read")))
    await _until(gate_io.holding.is_set, "the gate's round to reach its flush")
    before = committer.appended
    asks = [
        asyncio.ensure_future(registry.ref(agent_id).ask(c.RequestAction("read")))
        for agent_id in AGENTS
    ]
    await _until(lambda: committer.appended == before + len(AGENTS), "every batch handed over")
    await asyncio.sleep(0.01)  # the hand-off runs on the next turn of the loop
    # Written is not durable: nobody is answered while the flush is held.
    assert not gate.done()
    assert not any(ask.done() for ask in asks)
    gate_io.release.set()
    assert (await gate)["decision"] == "allowed"
    return list(await asyncio.gather(*asks, return_exceptions=True))


def _fenced(agent_id: str) -> str:
    return (
        f"writing the log of agent {agent_id} failed; "
        "it accepts no writes until guardd is restarted"
    )


async def test_batches_of_many_agents_waiting_together_share_one_flush(tmp_path: Path) -> None:
    io = CountingIO()
    registry = await _registry(tmp_path, lambda agent_id: io)
    try:
        fsyncs, flushes = io.fsyncs, io.flushes
        replies = await _one_round(registry, io)
        assert [r["decision"] for r in replies if isinstance(r, dict)] == ["allowed"] * 20
        # the gate's round (one log: its fsync), then one shared flush for
        # the 20 batches: two flushes, not 21
        assert (io.fsyncs - fsyncs, io.flushes - flushes) == (1, 1)
        for agent_id in AGENTS:
            lines = registry.store.path(agent_id).read_bytes().splitlines()
            assert b'"kind":"action_allowed"' in lines[-1]
    finally:
        await registry.stop()


async def test_no_answer_before_the_flush_of_its_round_returns(tmp_path: Path) -> None:
    io = CountingIO()
    registry = await _registry(tmp_path, lambda agent_id: io)
    try:
        io.hold = True
        asks = [
            asyncio.ensure_future(registry.ref(agent_id).ask(c.RequestAction("read")))
            for agent_id in AGENTS
        ]
        await _until(io.holding.is_set, "the round to reach its flush")
        await asyncio.sleep(0.05)
        assert not any(ask.done() for ask in asks)
        io.release.set()
        replies = await asyncio.gather(*asks)
        assert {r["decision"] for r in replies} == {"allowed"}
    finally:
        await registry.stop()


async def test_a_failed_shared_flush_fails_and_fences_every_agent_of_its_round(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    victim = AGENTS[7]
    gate_io = CountingIO()
    # after=1: the victim's log is created (one append), then its first flush fails.
    victim_io = FaultyIO(Fault(victim, EIO_FSYNC, after=1))

    def io_for(agent_id: str) -> FileIO:
        return {GATE: gate_io, victim: victim_io}.get(agent_id, DEFAULT_IO)

    registry = await _registry(tmp_path, io_for)
    try:
        before = {a: await registry.ref(a).ask(c.GetStatus()) for a in AGENTS}
        replies = await _one_round(registry, gate_io)
        # One flush for the round: it failed, so every batch of it failed.
        for agent_id, reply in zip(AGENTS, replies, strict=True):
            assert isinstance(reply, AgentUnavailable), (agent_id, reply)
            assert str(reply) == _fenced(agent_id)
            # Fenced as after its own failed fsync: writes refused, state as committed.
            assert await registry.ref(agent_id).ask(c.GetStatus()) == before[agent_id]
            with pytest.raises(AgentUnavailable, match=f"^{re.escape(_fenced(agent_id))}$"):
                await registry.ref(agent_id).ask(c.RequestAction("read"))
            assert re.search(
                rf"agent {agent_id}: append to {agent_id}\.jsonl failed: \[Errno 5\] .*"
                r"injected fsync fault.*; refusing writes until restart",
                caplog.text,
            )
        # The gate's round came before and was flushed: it goes on.
        assert (await registry.ref(GATE).ask(c.RequestAction("read")))["decision"] == "allowed"
    finally:
        await registry.stop()
    # A restart (without the fault) loads every log: nothing quarantined, all
    # agents take writes; the records written before the failed flush are in
    # the files, never acknowledged, and count as the log says.
    async with running_registry(tmp_path) as again:
        assert again.quarantined == {}
        for agent_id in AGENTS:
            reply = await again.ref(agent_id).ask(c.RequestAction("read"))
            assert reply["decision"] == "allowed"


async def test_a_failed_write_fails_only_its_own_batch_of_the_round(tmp_path: Path) -> None:
    victim = AGENTS[3]
    gate_io = CountingIO()
    victim_io = FaultyIO(Fault(victim, EIO_WRITE, after=1))

    def io_for(agent_id: str) -> FileIO:
        return {GATE: gate_io, victim: victim_io}.get(agent_id, DEFAULT_IO)

    registry = await _registry(tmp_path, io_for)
    try:
        replies = await _one_round(registry, gate_io)
        for agent_id, reply in zip(AGENTS, replies, strict=True):
            if agent_id == victim:
                assert isinstance(reply, AgentUnavailable)
                assert str(reply) == _fenced(victim)
            else:
                assert isinstance(reply, dict), (agent_id, reply)
                assert reply["decision"] == "allowed"
    finally:
        await registry.stop()


def test_sync_logs_flushes_each_file_system_and_io_once(tmp_path: Path) -> None:
    io = CountingIO()
    logs = [LogFile.create(tmp_path / f"a{n}.jsonl", b"", io) for n in range(5)]
    created = io.fsyncs
    try:
        for n, log in enumerate(logs):
            log.write(b'{"n":%d}\n' % n)
        assert sync_logs(logs) == [None] * 5
        assert (io.fsyncs - created, io.flushes) == (0, 1)
        other = CountingIO()
        extra = LogFile.create(tmp_path / "b.jsonl", b"", other)
        try:
            assert sync_logs([*logs, extra]) == [None] * 6
            assert (io.flushes, other.flushes) == (2, 1)
        finally:
            extra.close()
    finally:
        for log in logs:
            log.close()
    assert (tmp_path / "a3.jsonl").read_bytes() == b'{"n":3}\n'


def test_a_round_of_one_or_two_logs_fsyncs_each_and_fails_alone(tmp_path: Path) -> None:
    io = CountingIO()
    good = LogFile.create(tmp_path / "good.jsonl", b"", io)
    bad = LogFile.create(tmp_path / "bad.jsonl", b"", FaultyIO(Fault("bad", EIO_FSYNC, after=1)))
    created = io.fsyncs
    try:
        assert sync_logs([good]) == [None]
        errors = sync_logs([good, bad])
        assert errors[0] is None
        assert isinstance(errors[1], OSError)
        assert "injected fsync fault" in str(errors[1])
        assert (io.fsyncs - created, io.flushes) == (2, 0)
    finally:
        good.close()
        bad.close()


def test_a_log_refuses_writes_after_its_shared_flush_failed(tmp_path: Path) -> None:
    log = LogFile.create(tmp_path / "a.jsonl", b"", DEFAULT_IO)
    try:
        error = log.fail(OSError(5, os.strerror(5)))
        assert str(error) == "append to a.jsonl failed: [Errno 5] Input/output error"
        with pytest.raises(
            LogWriteError, match=r"^a\.jsonl refuses writes after an earlier failure$"
        ):
            log.write(b"{}\n")
    finally:
        log.close()


def test_every_shared_flush_of_a_file_system_goes_through_one_descriptor(tmp_path: Path) -> None:
    # syncfs reports a writeback error once per open file description: one
    # descriptor for all rounds makes an error fail the round it struck only.
    io = RecordingIO()
    logs = [LogFile.create(tmp_path / f"a{n}.jsonl", b"", io) for n in range(4)]
    anchors = FlushAnchors()
    try:
        for first in range(2):  # rounds led by different logs
            round_ = logs[first:] + logs[:first]
            for log in round_:
                log.write(b"{}\n")
            assert sync_logs(round_, anchors) == [None] * 4
        assert len(io.flushed) == 2
        assert io.flushed[0] == io.flushed[1] == anchors.fd_for(logs[3])
        assert os.path.samestat(os.fstat(io.flushed[0]), os.stat(tmp_path))
    finally:
        anchors.close()
        for log in logs:
            log.close()
