"""Checkpoint files: written atomically, kept up to date by the registry off
the decision path, never ahead of what is on disk, and held against each log
at startup."""

from __future__ import annotations

import asyncio
import logging
import stat
from pathlib import Path

import pytest

from agents_runtime.core import commands as c
from agents_runtime.errors import AgentUnavailable
from agents_runtime.log.checkpoint import CheckpointDir, CheckpointFileError, read_checkpoint_file
from agents_runtime.log.files.datadir import DataDir
from agents_runtime.log.files.faults import EIO_FSYNC, Fault, io_for_faults
from agents_runtime.log.files.store import FileStore
from agents_runtime.log.record import Head
from agents_runtime.log.verify import Checkpoint, Failure
from agents_runtime.runtime.registry import CHECKPOINT_EVERY, Registry, quarantine_message
from tests.agents_runtime.support import (
    AGENT,
    FakeClock,
    policy,
    running_agent,
    running_registry,
    write_test_keys,
)

HASH = "ab" * 32


def loaded(root: Path, **kwargs: object) -> Registry:
    data_dir = DataDir(root)
    write_test_keys(root)
    registry = Registry(FileStore(data_dir), data_dir.prepare(), clock=FakeClock(), **kwargs)  # type: ignore[arg-type]
    registry.load()
    return registry


def close(registry: Registry) -> None:
    for actor in registry.actors.values():
        actor.log.close()
    registry.store.close()


async def make_agent(root: Path, requests: int = 3) -> Path:
    async with running_agent(root) as agent:
        for _ in range(requests):
            await agent.ask(c.RequestAction("read"))
        return agent.path


def head_line(path: Path, index: int) -> str:
    from agents_runtime.log import canonical

    record = canonical.loads(path.read_bytes().splitlines()[index])
    return f"{record['seq']}:{record['hash']}"


# -- the file ----------------------------------------------------------------------


def test_a_checkpoint_is_one_line_written_0600_in_a_0700_directory(tmp_path: Path) -> None:
    checkpoints = CheckpointDir(tmp_path / "deep" / "checkpoints")
    checkpoints.prepare()
    checkpoints.write({"a-1": Head(7, HASH)})
    path = checkpoints.path("a-1")
    assert path.read_bytes() == f"7:{HASH}\n".encode()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(checkpoints.root.stat().st_mode) == 0o700
    assert [p.name for p in checkpoints.root.iterdir()] == ["a-1.checkpoint"]
    assert checkpoints.read("a-1") == Checkpoint(7, HASH)
    checkpoints.write({"a-1": Head(8, "cd" * 32)})
    assert checkpoints.read("a-1") == Checkpoint(8, "cd" * 32)


def test_a_missing_checkpoint_reads_as_none(tmp_path: Path) -> None:
    assert CheckpointDir(tmp_path).read("a-1") is None


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(b"", id="empty"),
        pytest.param(f"7:{HASH}".encode(), id="no-newline"),
        pytest.param(f"7:{HASH}\n7:{HASH}\n".encode(), id="two-lines"),
        pytest.param(b"seven:" + HASH.encode() + b"\n", id="bad-seq"),
        pytest.param(b"7:" + b"AB" * 32 + b"\n", id="upper-hex"),
        pytest.param(b"\xff\n", id="not-ascii"),
    ],
)
def test_a_file_that_is_not_a_checkpoint_is_an_error(tmp_path: Path, data: bytes) -> None:
    (tmp_path / "a-1.checkpoint").write_bytes(data)
    with pytest.raises(CheckpointFileError, match=r"a-1\.checkpoint: "):
        CheckpointDir(tmp_path).read("a-1")
    with pytest.raises(CheckpointFileError):
        read_checkpoint_file(tmp_path / "a-1.checkpoint")


# -- written while serving ------------------------------------------------------------


async def test_a_created_agent_gets_its_checkpoint_within_a_second(tmp_path: Path) -> None:
    async with running_registry(tmp_path) as registry:
        await registry.create(AGENT, policy())
        await registry.ref(AGENT).ask(c.RequestAction("read"))
        path = registry.checkpoints.path(AGENT)
        head = registry.actors[AGENT].committed_head
        for _ in range(int(3 * CHECKPOINT_EVERY / 0.05)):
            if path.exists() and path.read_text() == f"{head.checkpoint()}\n":
                break
            await asyncio.sleep(0.05)
        assert path.read_text() == f"{head.checkpoint()}\n"


async def test_a_graceful_stop_writes_every_head(tmp_path: Path) -> None:
    path = await make_agent(tmp_path, requests=4)
    checkpoint = (tmp_path / "checkpoints" / f"{AGENT}.checkpoint").read_text()
    assert checkpoint == head_line(path, -1) + "\n"


async def test_the_checkpoint_dir_can_be_elsewhere(tmp_path: Path) -> None:
    elsewhere = tmp_path / "worm" / "heads"
    data_dir = DataDir(tmp_path / "data")
    write_test_keys(data_dir.root)
    registry = Registry(
        FileStore(data_dir), data_dir.prepare(), clock=FakeClock(), checkpoint_dir=elsewhere
    )
    registry.load()
    await registry.start()
    await registry.create(AGENT, policy())
    await registry.stop()
    assert (elsewhere / f"{AGENT}.checkpoint").read_text() == (
        head_line(data_dir.log_path(AGENT), -1) + "\n"
    )
    assert not (data_dir.root / "checkpoints" / f"{AGENT}.checkpoint").exists()


async def test_a_checkpoint_never_names_records_that_failed_to_reach_the_disk(
    tmp_path: Path,
) -> None:
    # Creation is append 1, the first request append 2; the third append's fsync fails.
    data_dir = DataDir(tmp_path)
    write_test_keys(tmp_path)
    io_for = io_for_faults([Fault(AGENT, EIO_FSYNC, after=2)])
    registry = Registry(FileStore(data_dir, io_for=io_for), data_dir.prepare(), clock=FakeClock())
    registry.load()
    await registry.start()
    try:
        await registry.create(AGENT, policy())
        await registry.ref(AGENT).ask(c.RequestAction("read"))
        durable = registry.actors[AGENT].state.head
        with pytest.raises(AgentUnavailable):
            await registry.ref(AGENT).ask(c.RequestAction("read"))
    finally:
        await registry.stop()
    assert registry.checkpoints.read(AGENT) == Checkpoint(durable.seq, durable.hash)


# -- held against the log at startup ---------------------------------------------------


async def test_a_log_cut_at_a_record_boundary_below_its_checkpoint_is_quarantined(
    tmp_path: Path,
) -> None:
    path = await make_agent(tmp_path)
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join(lines[:-2]))
    registry = loaded(tmp_path)
    try:
        failure = Failure(len(lines) - 1, len(lines) - 1, "truncated before checkpoint")
        assert registry.quarantined == {AGENT: failure}
    finally:
        close(registry)


async def test_a_checkpoint_whose_record_differs_quarantines_the_agent(tmp_path: Path) -> None:
    path = await make_agent(tmp_path)
    seq = len(path.read_bytes().splitlines()) - 1
    (tmp_path / "checkpoints" / f"{AGENT}.checkpoint").write_text(f"{seq}:{HASH}\n")
    registry = loaded(tmp_path)
    try:
        assert registry.quarantined == {AGENT: Failure(seq + 1, seq, "checkpoint hash mismatch")}
    finally:
        close(registry)


async def test_a_checkpoint_behind_the_log_loads_and_is_brought_up_to_date(
    tmp_path: Path,
) -> None:
    # A crash (kill -9) after a commit, before the next checkpoint round.
    path = await make_agent(tmp_path)
    checkpoint = tmp_path / "checkpoints" / f"{AGENT}.checkpoint"
    checkpoint.write_text(head_line(path, 2) + "\n")
    async with running_registry(tmp_path) as registry:
        assert AGENT in registry.actors
        assert registry.quarantined == {}
    assert checkpoint.read_text() == head_line(path, -1) + "\n"


async def test_a_missing_checkpoint_is_created_from_the_verified_log_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = await make_agent(tmp_path)
    checkpoint = tmp_path / "checkpoints" / f"{AGENT}.checkpoint"
    checkpoint.unlink()
    with caplog.at_level(logging.WARNING, logger="agents_runtime.runtime.registry"):
        async with running_registry(tmp_path) as registry:
            assert AGENT in registry.actors
    head = head_line(path, -1)
    assert f"agent {AGENT}: no checkpoint; one is written from its verified log ({head})" in (
        caplog.messages
    )
    assert checkpoint.read_text() == head + "\n"


async def test_an_unreadable_checkpoint_quarantines_its_agent(tmp_path: Path) -> None:
    await make_agent(tmp_path)
    (tmp_path / "checkpoints" / f"{AGENT}.checkpoint").write_text("garbage\n")
    registry = loaded(tmp_path)
    try:
        failure = registry.quarantined[AGENT]
        assert failure == Failure(0, None, "checkpoint file is unreadable")
        assert quarantine_message(failure) == "checkpoint file is unreadable"
    finally:
        close(registry)


async def test_a_checkpoint_whose_log_is_gone_quarantines_its_agent_id(tmp_path: Path) -> None:
    path = await make_agent(tmp_path)
    seq = len(path.read_bytes().splitlines()) - 1
    path.unlink()
    registry = loaded(tmp_path)
    try:
        assert registry.quarantined == {AGENT: Failure(1, seq, "truncated before checkpoint")}
        assert registry.exists(AGENT)
    finally:
        close(registry)


async def test_a_log_holding_only_its_genesis_is_quarantined(tmp_path: Path) -> None:
    path = await make_agent(tmp_path)
    path.write_bytes(path.read_bytes().splitlines(keepends=True)[0])
    (tmp_path / "checkpoints" / f"{AGENT}.checkpoint").unlink()
    registry = loaded(tmp_path)
    try:
        assert registry.quarantined == {AGENT: Failure(2, 1, "log has no policy record")}
    finally:
        close(registry)
