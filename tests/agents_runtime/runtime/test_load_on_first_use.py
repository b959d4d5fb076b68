"""Loading on first use on the file store (``Loading.ON_FIRST_USE``): the
start lists the agents without reading their logs; each is verified and
folded before its first answer, with the quarantine rule of a start; a
background sweep loads the others."""

from __future__ import annotations

import asyncio
import logging
import re
from pathlib import Path

import attrs
import pytest

from agents_runtime.core import commands as c
from agents_runtime.errors import AgentExists, Quarantined
from agents_runtime.log.files.datadir import DataDir
from agents_runtime.log.files.store import FileStore
from agents_runtime.runtime import registry as registry_module
from agents_runtime.runtime.registry import Loading, Registry
from guardd.app import BY_COMMAND
from tests.agents_runtime.support import (
    FakeClock,
    policy,
    running_registry,
    write_test_keys,
)

IDS = [f"agent-{k:02d}" for k in range(6)]
TAMPERED = IDS[3]


async def _make_agents(root: Path, ids: list[str] = IDS) -> None:
    async with running_registry(root) as registry:
        for agent_id in ids:
            await registry.create(agent_id, policy())
            await registry.ref(agent_id).ask(c.RequestAction("read"))


def _tamper(root: Path, agent_id: str = TAMPERED) -> bytes:
    """Change the action's tool in the agent's log: the record's hash no
    longer matches its content."""
    path = root / "agents" / f"{agent_id}.jsonl"
    data = path.read_bytes().replace(b'"tool":"read"', b'"tool":"rear"', 1)
    path.write_bytes(data)
    return data


def _lazy(root: Path) -> Registry:
    data_dir = DataDir(root)
    write_test_keys(root)
    return Registry(
        FileStore(data_dir),
        data_dir.prepare(),
        clock=FakeClock(),
        render=BY_COMMAND,
        loading=Loading.ON_FIRST_USE,
    )


async def _stopped_during_the_sweep(
    root: Path, caplog: pytest.LogCaptureFixture, after: float
) -> Registry:
    """A lazy registry stopped ``after`` seconds into its sweep; no task of
    it is left."""
    await _make_agents(root)
    registry = _lazy(root)
    registry.load()
    caplog.set_level(logging.INFO)
    await registry.start()
    await asyncio.sleep(after)
    await registry.stop()
    assert len(registry._tasks) == 0
    return registry


async def _next_start_loads_every_agent(root: Path) -> None:
    """Nothing was left half done: the next start loads every agent."""
    again = _lazy(root)
    again.load()
    await again.start()
    try:
        await again.swept()
        assert set(again.actors) == set(IDS)
    finally:
        await again.stop()


def _close(registry: Registry) -> None:
    """Close what load() and first uses opened, for a registry never started."""
    for actor in registry.actors.values():
        actor.log.close()
    registry.store.close()


async def test_the_start_lists_the_agents_without_reading_their_logs(tmp_path: Path) -> None:
    await _make_agents(tmp_path)
    _tamper(tmp_path)
    registry = _lazy(tmp_path)
    summary = registry.load()
    try:
        assert (summary.loaded, summary.quarantined, summary.unloaded) == (0, {}, len(IDS))
        assert registry.unloaded == set(IDS)
        listed = await registry.list()
        assert [(e.agent_id, e.unloaded) for e in listed] == [(i, True) for i in IDS]
    finally:
        _close(registry)


async def test_a_tampered_log_is_quarantined_at_its_first_use_and_never_answers(
    tmp_path: Path,
) -> None:
    await _make_agents(tmp_path)
    data = _tamper(tmp_path)
    registry = _lazy(tmp_path)
    registry.load()
    # Asked for as soon as it serves: before the sweep has come to it.
    await registry.start()
    try:
        message = (
            f"agent {TAMPERED} is quarantined: its log failed verification when it was first "
            "used (line 3 (seq 2): hash does not match content)"
        )
        for _ in range(2):
            with pytest.raises(Quarantined, match=f"^{re.escape(message)}$"):
                await registry.ref(TAMPERED).ask(c.GetStatus())
        assert TAMPERED not in registry.unloaded
        assert TAMPERED not in registry.actors
        assert (tmp_path / "agents" / f"{TAMPERED}.jsonl").read_bytes() == data
        assert registry.quarantined_bytes[TAMPERED] == len(data)
        status = await registry.ref(IDS[0]).ask(c.GetStatus())
        assert status["spent"] == 1
    finally:
        await registry.stop()


async def test_requests_arriving_together_load_an_agent_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    await _make_agents(tmp_path, IDS[:1])
    registry = _lazy(tmp_path)
    registry.load()
    caplog.set_level(logging.DEBUG, logger="agents_runtime.runtime.registry")
    await registry.start()  # the sweep asks for it too
    try:
        ref = registry.ref(IDS[0])
        asks = [c.GetStatus() if k % 2 else c.RequestAction("read") for k in range(16)]
        await asyncio.gather(*(ref.ask(command) for command in asks))
        assert (await registry.ref(IDS[0]).ask(c.GetStatus()))["spent"] == 9
        loads = [r for r in caplog.records if r.getMessage().startswith(f"agent {IDS[0]}: loaded")]
        assert len(loads) == 1
    finally:
        await registry.stop()


async def test_creating_an_agent_listed_but_not_loaded_is_a_conflict(tmp_path: Path) -> None:
    await _make_agents(tmp_path, IDS[:1])
    path = tmp_path / "agents" / f"{IDS[0]}.jsonl"
    before = path.read_bytes()
    registry = _lazy(tmp_path)
    registry.load()
    try:
        with pytest.raises(AgentExists, match=f"^agent {IDS[0]} already exists$"):
            await registry.create(IDS[0], policy())
        assert registry.unloaded == {IDS[0]}
        assert path.read_bytes() == before
    finally:
        _close(registry)


async def test_a_named_policy_reaches_followers_not_yet_loaded(tmp_path: Path) -> None:
    async with running_registry(tmp_path) as registry:
        await registry.fleet.put("team", policy(budget=50))
        for agent_id in IDS[:3]:
            await registry.fleet.create(agent_id, "team")
        await registry.create(IDS[3], policy())
    registry = _lazy(tmp_path)
    registry.load()
    await registry.start()
    try:
        view = await registry.fleet.put("team", policy(budget=70))
        assert view["agents"] == IDS[:3]
        for agent_id in IDS[:3]:
            assert (await registry.ref(agent_id).ask(c.GetStatus()))["budget"] == 70
        assert (await registry.ref(IDS[3]).ask(c.GetStatus()))["budget"] == 100
    finally:
        await registry.stop()


async def test_the_sweep_loads_every_agent_and_quarantines_a_tampered_one(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    await _make_agents(tmp_path)
    _tamper(tmp_path)
    registry = _lazy(tmp_path)
    registry.load()
    caplog.set_level(logging.INFO, logger="agents_runtime.runtime.registry")
    await registry.start()
    try:
        await registry.swept()
        assert registry.unloaded == set()
        assert set(registry.actors) == set(IDS) - {TAMPERED}
        assert set(registry.quarantined) == {TAMPERED}
        with pytest.raises(Quarantined, match="when it was loaded in the background"):
            registry.ref(TAMPERED)
        done = [
            r.getMessage() for r in caplog.records if "background loading done" in r.getMessage()
        ]
        assert len(done) == 1
        assert re.fullmatch(
            r"background loading done in \d+\.\d\d s: 5 agents loaded, 1 quarantined", done[0]
        )
    finally:
        await registry.stop()


@pytest.fixture
def sweep_elsewhere(monkeypatch: pytest.MonkeyPatch) -> None:
    """Logs enough for the sweep to load in a worker process, on any machine."""
    monkeypatch.setattr(registry_module, "PARALLEL_LOAD_BYTES", 0)
    monkeypatch.setattr(registry_module, "load_workers", lambda: 2)


@pytest.mark.usefixtures("sweep_elsewhere")
async def test_a_sweep_in_a_worker_process_loads_what_a_start_loads(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    await _make_agents(tmp_path)
    _tamper(tmp_path)
    at_start = Registry(
        FileStore(DataDir(tmp_path)), DataDir(tmp_path).prepare(), clock=FakeClock()
    )
    at_start.load(workers=1)
    _close(at_start)
    registry = _lazy(tmp_path)
    registry.load()
    caplog.set_level(logging.INFO, logger="agents_runtime.runtime.registry")
    await registry.start()
    try:
        await registry.swept()
        assert set(registry.quarantined) == set(at_start.quarantined) == {TAMPERED}
        assert set(registry.actors) == set(at_start.actors)
        for agent_id, actor in registry.actors.items():
            assert actor.state == at_start.actors[agent_id].state
            assert actor.committed == at_start.actors[agent_id].committed
        with pytest.raises(Quarantined, match="when it was loaded in the background"):
            registry.ref(TAMPERED)
        (done,) = [
            r.getMessage() for r in caplog.records if "background loading done" in r.getMessage()
        ]
        assert re.fullmatch(
            r"background loading done in \d+\.\d\d s \(in a worker process\): "
            r"5 agents loaded, 1 quarantined",
            done,
        )
        # A loaded agent answers and writes as one loaded at a start.
        status = await registry.ref(IDS[0]).ask(c.RequestAction("read"))
        assert status["decision"] == "allowed"
    finally:
        await registry.stop()


@pytest.mark.usefixtures("sweep_elsewhere")
async def test_a_stop_during_a_sweep_in_a_worker_process_ends_it_cleanly(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    registry = await _stopped_during_the_sweep(tmp_path, caplog, 0.05)
    assert registry._sweep_pool is None
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []
    await _next_start_loads_every_agent(tmp_path)


async def test_a_stop_during_the_sweep_ends_it_cleanly(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    registry = await _stopped_during_the_sweep(tmp_path, caplog, 0)
    assert registry.unloaded  # the sweep had not got through them
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []
    assert not any("background loading done" in r.getMessage() for r in caplog.records)
    await _next_start_loads_every_agent(tmp_path)


async def test_loading_at_start_stays_the_default(tmp_path: Path) -> None:
    await _make_agents(tmp_path)
    _tamper(tmp_path)
    data_dir = DataDir(tmp_path)
    registry = Registry(FileStore(data_dir), data_dir.prepare(), clock=FakeClock())
    summary = registry.load()
    try:
        assert (registry.on_first_use, registry.sweeps) == (False, False)
        assert (summary.loaded, summary.unloaded) == (len(IDS) - 1, 0)
        assert set(summary.quarantined) == {TAMPERED}
        with pytest.raises(Quarantined, match="failed verification at startup"):
            registry.ref(TAMPERED)
    finally:
        _close(registry)


async def test_without_the_signing_key_the_sweep_loads_every_agent_read_only(
    tmp_path: Path,
) -> None:
    await _make_agents(tmp_path)
    data_dir = DataDir(tmp_path)
    ring = attrs.evolve(data_dir.prepare(), signer=None)
    assert ring.read_only
    registry = Registry(FileStore(data_dir), ring, render=BY_COMMAND, loading=Loading.ON_FIRST_USE)
    registry.load()
    await registry.start()
    try:
        await registry.swept()
        assert set(registry.actors) == set(IDS)
        assert (await registry.ref(IDS[0]).ask(c.GetStatus()))["spent"] == 1
    finally:
        await registry.stop()
