"""State snapshots at startup: a start folds only the records after an
agent's snapshot, a snapshot that cannot be trusted is ignored (the agent is
folded from genesis and stays active), and a tampered log is quarantined
whatever its snapshot says."""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path

import pytest

from agents_runtime.core import commands as c
from agents_runtime.core.snapshot import SCHEMA, state_json
from agents_runtime.core.state import AgentState
from agents_runtime.errors import Failure
from agents_runtime.log import canonical
from agents_runtime.log.files.datadir import DataDir
from agents_runtime.log.files.logfile import read_log
from agents_runtime.log.files.store import FileStore
from agents_runtime.log.keys import Signer
from agents_runtime.log.record import Head, content_hash
from agents_runtime.log.snapshot import Snapshot, open_snapshot, seal_snapshot
from agents_runtime.log.store import LogContents
from agents_runtime.log.verify import Checkpoint, verify_lines
from agents_runtime.runtime.registry import Registry
from agents_runtime.runtime.replay import load, replay
from guardd.app import BY_COMMAND
from tests.agents_runtime.support import (
    AGENT,
    TEST_SIGNER,
    FakeClock,
    policy,
    write_test_keys,
)

OTHER = "agent-2"


def _registry(root: Path, clock: FakeClock, **options: float) -> Registry:
    write_test_keys(root)
    data_dir = DataDir(root)
    return Registry(  # type: ignore[misc]
        FileStore(data_dir),
        data_dir.prepare(),
        clock=clock,
        render=BY_COMMAND,
        **options,  # type: ignore[arg-type]
    )


async def _run(root: Path, agents: tuple[str, ...] = (AGENT,), requests: int = 6) -> Registry:
    """Agents that each made ``requests`` requests (2 records each), with a
    snapshot every 5 records written; stopped."""
    clock = FakeClock()
    registry = _registry(root, clock, snapshot_records=5)
    registry.load()
    await registry.start()
    try:
        for agent_id in agents:
            await registry.create(agent_id, policy(budget=Decimal(100)))
            for n in range(requests):
                command = c.RequestAction(tool="read", input={"n": n})
                await registry.ref(agent_id).ask(command)
        await registry.save_checkpoints()
        await registry.save_snapshots()
    finally:
        await registry.stop()
    return registry


def _snapshot_path(root: Path, agent_id: str = AGENT) -> Path:
    return DataDir(root).snapshot_path(agent_id)


def _loaded(root: Path, agent_id: str = AGENT) -> object:
    data_dir = DataDir(root)
    return load(FileStore(data_dir), agent_id, data_dir.prepare().public_key)


async def test_a_start_folds_only_the_records_after_the_snapshot(tmp_path: Path) -> None:
    await _run(tmp_path)
    data_dir = DataDir(tmp_path)
    public_key = data_dir.prepare().public_key
    snap = open_snapshot(_snapshot_path(tmp_path).read_bytes(), public_key, AGENT)
    lines = data_dir.log_path(AGENT).read_bytes().splitlines()
    assert snap.head.seq == len(lines) - 1  # 14 records: one snapshot, at the head
    # One more record after it: the start folds that one on the snapshot.
    registry = _registry(tmp_path, FakeClock())
    registry.load()
    await registry.start()
    try:
        await registry.ref(AGENT).ask(c.AddScar(severity="minor", reason="x"))
    finally:
        await registry.stop()
    loaded = load(FileStore(data_dir), AGENT, public_key)
    whole = load(FileStore(DataDir(tmp_path)), AGENT, public_key)
    assert loaded.snapshot_seq == snap.head.seq
    assert loaded.snapshot_problem is None
    assert loaded.state is not None
    assert loaded.state.head.seq == snap.head.seq + 1
    assert loaded.state.scar_score > 0
    _snapshot_path(tmp_path).unlink()
    whole = load(FileStore(data_dir), AGENT, public_key)
    assert whole.snapshot_seq is None
    assert loaded.state == whole.state


async def test_keys_folded_on_a_snapshot_move_to_the_runs_as_from_genesis(
    tmp_path: Path,
) -> None:
    # The case the state machine found: keys used in an order that is not
    # theirs sorted (k4, k1, k3), one recent action kept as it came. From
    # genesis k3 moves k4, the oldest, to the runs; folded on a snapshot
    # taken after k1 it moved k1 too, when the snapshot sorted the keys.
    clock = FakeClock()
    registry = _registry(tmp_path, clock, idempotency_retention=30.0, recent_actions=1)
    registry.load()
    await registry.start()
    try:
        await registry.create(AGENT, policy(budget=Decimal(100)))
        for n, key in enumerate(["k4", "k1", "k3"]):
            await registry.ref(AGENT).ask(c.RequestAction("read", {"n": n}, None, key))
            await registry.ref(AGENT).ask(c.RequestAction("read", {"n": n}))  # no key
    finally:
        await registry.stop()
    data_dir = DataDir(tmp_path)
    public_key = data_dir.prepare().public_key
    contents = read_log(data_dir.log_path(AGENT))

    def fold(lines: list[bytes], snap: Snapshot | None = None) -> AgentState:
        loaded = replay(
            AGENT,
            LogContents.of_lines(lines),
            public_key,
            snapshot=snap,
            idempotency_retention=30.0,
            recent_actions=1,
        )
        assert loaded.state is not None
        assert (loaded.snapshot_seq, loaded.snapshot_problem) == (
            None if snap is None else snap.head.seq,
            None,
        )
        return loaded.state

    whole = fold(contents.lines)
    assert list(whole.idempotency) == ["k1", "k3"]
    for cut in range(1, len(contents.lines)):
        prefix = fold(contents.lines[: cut + 1])
        data = seal_snapshot(AGENT, prefix.head, SCHEMA, state_json(prefix), TEST_SIGNER)
        loaded = fold(contents.lines, open_snapshot(data, public_key, AGENT))
        assert loaded == whole
        assert list(loaded.idempotency) == ["k1", "k3"]


@pytest.mark.parametrize("from_snapshot", [True, False], ids=["snapshot", "genesis"])
async def test_a_start_folds_under_the_configured_recent_actions(
    tmp_path: Path, from_snapshot: bool
) -> None:
    # The start's fold moves keys to the runs at the same records as the
    # process that wrote them did, not under the default and then all at
    # once: the state is the fold from genesis under the setting, exactly.
    options: dict[str, float] = {"idempotency_retention": 30.0, "recent_actions": 1}
    registry = _registry(tmp_path, FakeClock(), snapshot_records=3, **options)
    registry.load()
    await registry.start()
    try:
        await registry.create(AGENT, policy(budget=Decimal(100)))
        for n, key in enumerate(["k4", "k1", "k3", "k6", "k2", "k5"]):
            await registry.ref(AGENT).ask(c.RequestAction("read", {"n": n}, None, key))
        await registry.save_checkpoints()
        await registry.save_snapshots()
        before = registry.actors[AGENT].state
    finally:
        await registry.stop()
    if not from_snapshot:
        _snapshot_path(tmp_path).unlink()
    data_dir = DataDir(tmp_path)
    public_key = data_dir.prepare().public_key
    whole = replay(
        AGENT,
        read_log(data_dir.log_path(AGENT)),
        public_key,
        idempotency_retention=30.0,
        recent_actions=1,
    )
    assert whole.state == before
    started = load(FileStore(data_dir), AGENT, public_key, idempotency_retention=30.0)
    assert (started.snapshot_seq is not None) == from_snapshot
    registry = _registry(tmp_path, FakeClock(), **options)
    registry.load()
    try:
        after = registry.actors[AGENT].state
        assert after == whole.state
        assert list(after.idempotency) == list(whole.state.idempotency)
    finally:
        await registry.stop()


def _forged(root: Path) -> None:
    """The snapshot re-signed by a key that is not the audit key."""
    data = _snapshot_path(root).read_bytes()
    snap = open_snapshot(data, DataDir(root).prepare().public_key, AGENT)
    forged = seal_snapshot(AGENT, snap.head, SCHEMA, snap.state, Signer(bytes([7]) * 32))
    _snapshot_path(root).write_bytes(forged)


def _copied(root: Path) -> None:
    _snapshot_path(root).write_bytes(_snapshot_path(root, OTHER).read_bytes())


def _other_hash(root: Path) -> None:
    """Signed by the key, but not of this log: another hash at its seq."""
    data = _snapshot_path(root).read_bytes()
    snap = open_snapshot(data, DataDir(root).prepare().public_key, AGENT)
    head = Head(snap.head.seq, "ab" * 32)
    state = dict(snap.state, head={"seq": head.seq, "hash": head.hash})
    _snapshot_path(root).write_bytes(seal_snapshot(AGENT, head, SCHEMA, state, TEST_SIGNER))


def _beyond(root: Path) -> None:
    """Signed by the key, of a seq the log never reached."""
    data = _snapshot_path(root).read_bytes()
    snap = open_snapshot(data, DataDir(root).prepare().public_key, AGENT)
    head = Head(snap.head.seq + 5, snap.head.hash)
    state = dict(snap.state, head={"seq": head.seq, "hash": head.hash})
    _snapshot_path(root).write_bytes(seal_snapshot(AGENT, head, SCHEMA, state, TEST_SIGNER))


def _other_layout(root: Path) -> None:
    data = _snapshot_path(root).read_bytes()
    snap = open_snapshot(data, DataDir(root).prepare().public_key, AGENT)
    _snapshot_path(root).write_bytes(
        seal_snapshot(AGENT, snap.head, "0" * 64, snap.state, TEST_SIGNER)
    )


def _garbage(root: Path) -> None:
    _snapshot_path(root).write_bytes(b'{"not": "a snapshot"}\n')


@pytest.mark.parametrize(
    ("spoil", "why"),
    [
        pytest.param(_forged, "its signature does not verify under the audit key", id="forged"),
        pytest.param(_copied, "it is the snapshot of 'agent-2', not of 'agent-1'", id="copied"),
        pytest.param(
            _other_hash, "it is of seq 13, and the log has another record there", id="hash"
        ),
        pytest.param(_beyond, "it is of seq 18, and the log ends before it", id="beyond"),
        pytest.param(
            _other_layout,
            "it was written for another layout of the state (another version)",
            id="layout",
        ),
        pytest.param(_garbage, "not a snapshot: a JSON line and a signature line", id="garbage"),
    ],
)
async def test_a_snapshot_that_cannot_be_trusted_is_ignored_and_the_agent_stays_active(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, spoil: object, why: str
) -> None:
    await _run(tmp_path, (AGENT, OTHER))
    spoil(tmp_path)  # type: ignore[operator]
    registry = _registry(tmp_path, FakeClock())
    with caplog.at_level(logging.WARNING, "agents_runtime.runtime.registry"):
        summary = registry.load()
    assert summary.quarantined == {}
    assert f"agent {AGENT}: ignoring its state snapshot: {why}; folded from genesis" in (
        caplog.messages
    )
    loaded = _loaded(tmp_path)
    assert loaded.snapshot_seq is None  # type: ignore[attr-defined]
    assert loaded.state.actions_allowed == 6  # type: ignore[attr-defined]
    await registry.start()
    try:
        status = await registry.ref(AGENT).ask(c.GetStatus())
        assert status["alive"] is True
        assert status["actions_allowed"] == 6
    finally:
        await registry.stop()


def _change_line(path: Path, index: int) -> None:
    lines = path.read_bytes().splitlines(keepends=True)
    assert b'"n":' in lines[index]  # an action_requested record
    lines[index] = lines[index].replace(b'"n":', b'"m":', 1)
    path.write_bytes(b"".join(lines))


@pytest.mark.parametrize(
    ("tamper", "reason"),
    [
        pytest.param(lambda p: _change_line(p, 4), "hash does not match content", id="before"),
        pytest.param(lambda p: _change_line(p, -2), "hash does not match content", id="after"),
        pytest.param(
            lambda p: p.write_bytes(b"".join(p.read_bytes().splitlines(keepends=True)[:6])),
            "truncated before checkpoint",
            id="cut",
        ),
    ],
)
async def test_a_tampered_log_is_quarantined_whatever_the_snapshot_says(
    tmp_path: Path, tamper: object, reason: str
) -> None:
    await _run(tmp_path)
    checkpoint = DataDir(tmp_path).checkpoints_dir / f"{AGENT}.checkpoint"
    older = checkpoint.read_bytes()
    # More records after the checkpoint and the snapshot: "after" changes one.
    registry = _registry(tmp_path, FakeClock())
    registry.load()
    await registry.start()
    try:
        await registry.ref(AGENT).ask(c.RequestAction(tool="read", input={"n": 9}))
    finally:
        await registry.stop()
    checkpoint.write_bytes(older)
    path = DataDir(tmp_path).log_path(AGENT)
    tamper(path)  # type: ignore[operator]
    registry = _registry(tmp_path, FakeClock())
    summary = registry.load()
    assert summary.quarantined[AGENT].reason == reason


def _moved_hash(line: bytes) -> bytes:
    """The hash member moved after the kind: the same hash input."""
    at = line.find(b'"hash":"')
    member = line[at : at + 74]
    rest = line[:at] + line[at + 74 :]
    kind = rest.find(b'"kind":"')
    after = rest.find(b",", kind) + 1
    return rest[:after] + member + rest[after:]


def _sig_digit(digit: bytes) -> Callable[[bytes], bytes]:
    def edit(line: bytes) -> bytes:
        at = line.find(b'"sig":"') + 7
        return line[:at] + digit + line[at + 1 :]

    return edit


def _resealed(line: bytes) -> bytes:
    record = canonical.loads(line)
    record["input"] = {"n": 99}
    body = {k: v for k, v in record.items() if k not in ("hash", "sig")}
    record["hash"] = content_hash(body)
    return canonical.dumps(record)


def _non_canonical(line: bytes) -> bytes:
    """A number written 1.0, and the line's hash made again over its bytes:
    it looks sound by its bytes and its hash, but the next line's prev no
    longer names it."""
    line = line.replace(b'"input":{"n":1}', b'"input":{"n":1.0}')
    at = line.find(b'"hash":"')
    sig = line.find(b',"sig":"') + 1
    digest = hashlib.sha256(line[:at] + line[at + 74 : sig] + line[sig + 137 :]).hexdigest()
    return line[: at + 8] + digest.encode() + line[at + 72 :]


@pytest.mark.parametrize(
    ("edit", "failure"),
    [
        # Taken by its bytes, the next one is not: the failure is named by
        # verifying the log again, at the first faulty line.
        pytest.param(_non_canonical, (5, 4, "not canonical JSON"), id="non-canonical"),
        pytest.param(_moved_hash, (5, 4, "not canonical JSON"), id="hash moved"),
        pytest.param(_sig_digit(b"A"), (5, 4, "record is malformed"), id="sig not hex"),
        pytest.param(_resealed, (6, 5, "prev does not match previous hash"), id="resealed"),
        # Not checked: a signed checkpoint vouches for the record.
        pytest.param(_sig_digit(b"0"), None, id="sig other hex"),
    ],
)
async def test_a_vouched_line_before_the_snapshot_is_judged_as_the_reference_judges_it(
    tmp_path: Path, edit: Callable[[bytes], bytes], failure: tuple[int, int, str] | None
) -> None:
    """Such a line is checked from its bytes at a start (the snapshot and a
    signed checkpoint at the head), and a fault named as by the reference."""
    await _run(tmp_path)
    path = DataDir(tmp_path).log_path(AGENT)
    lines = path.read_bytes().splitlines(keepends=True)
    assert b'"action_requested"' in lines[4]
    lines[4] = edit(lines[4][:-1]) + b"\n"
    path.write_bytes(b"".join(lines))
    head = Head(len(lines) - 1, canonical.loads(lines[-1])["hash"])
    reference = verify_lines(
        [line[:-1] for line in lines],
        public_key=TEST_SIGNER.public_key,
        log_id=AGENT,
        checkpoint=Checkpoint(head.seq, head.hash, signed=True),
    )
    summary = _registry(tmp_path, FakeClock()).load()
    if failure is None:
        assert reference.ok
        assert summary.quarantined == {}
    else:
        assert reference.failure == Failure(*failure)
        assert summary.quarantined == {AGENT: reference.failure}


_KILLED_WRITER = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from agents_runtime.log.files.datadir import DataDir
    from agents_runtime.log.files.store import FileStore

    store = FileStore(DataDir(Path(sys.argv[1])))
    old, new = Path(sys.argv[2]).read_bytes(), Path(sys.argv[3]).read_bytes()
    print("writing", flush=True)
    while True:
        store.write_snapshot("agent-1", 1, new)
        store.write_snapshot("agent-1", 1, old)
    """
)


def test_kill_9_while_a_snapshot_is_written_leaves_the_old_or_the_new(tmp_path: Path) -> None:
    asyncio.run(_run(tmp_path))
    path = _snapshot_path(tmp_path)
    public_key = DataDir(tmp_path).prepare().public_key
    old = path.read_bytes()
    snap = open_snapshot(old, public_key, AGENT)
    # A large one, so that a kill often lands inside a write.
    state = dict(snap.state, idempotency={f"key-{n}": 1 for n in range(200_000)})
    new = seal_snapshot(AGENT, snap.head, SCHEMA, state, TEST_SIGNER)
    (tmp_path / "old").write_bytes(old)
    (tmp_path / "new").write_bytes(new)
    writes = (str(tmp_path / "old"), str(tmp_path / "new"))
    for _ in range(5):
        with subprocess.Popen(
            [sys.executable, "-c", _KILLED_WRITER, str(tmp_path), *writes],
            stdout=subprocess.PIPE,
            cwd=Path(__file__).parents[3],
        ) as child:
            assert child.stdout is not None
            assert child.stdout.readline() == b"writing\n"
            os.kill(child.pid, signal.SIGKILL)
            child.wait()
        data = path.read_bytes()
        assert data in (old, new)
        open_snapshot(data, public_key, AGENT)  # whole, and it verifies


async def test_a_round_asks_for_a_bounded_number_of_snapshots(tmp_path: Path) -> None:
    from agents_runtime.runtime import registry as registry_module

    agents = tuple(f"agent-{n:02d}" for n in range(registry_module.SNAPSHOTS_PER_ROUND + 5))
    await _run(tmp_path, agents, requests=2)  # 6 records each, one snapshot each
    for path in DataDir(tmp_path).snapshots_dir.iterdir():
        path.unlink()
    # A start finds every agent due: the first rounds spread them out.
    registry = _registry(tmp_path, FakeClock(), snapshot_records=5)
    registry.load()
    await registry.start()
    try:
        await registry.save_snapshots()
        first = len(list(DataDir(tmp_path).snapshots_dir.iterdir()))
        await registry.save_snapshots()
        second = len(list(DataDir(tmp_path).snapshots_dir.iterdir()))
    finally:
        await registry.stop()
    assert (first, second) == (registry_module.SNAPSHOTS_PER_ROUND, len(agents))


async def test_a_stop_waits_for_the_snapshots_its_cancelled_round_is_writing(
    tmp_path: Path,
) -> None:
    from agents_runtime.runtime import registry as registry_module

    agents = tuple(f"agent-{n:02d}" for n in range(registry_module.SNAPSHOTS_PER_ROUND))
    await _run(tmp_path, agents, requests=2)
    snapshots = DataDir(tmp_path).snapshots_dir
    for path in snapshots.iterdir():
        path.unlink()
    registry = _registry(tmp_path, FakeClock(), snapshot_records=5)
    registry.load()
    await registry.start()
    round_ = asyncio.create_task(registry.save_snapshots())
    await asyncio.sleep(0)  # the round runs up to its thread's first await
    assert registry._snap_writing is not None  # the copies are being written
    round_.cancel()
    await registry.stop()
    # Nothing is written once stop() has returned: every snapshot is whole.
    assert registry._snap_writing.done()  # type: ignore[unreachable]
    written = sorted(path.name for path in snapshots.iterdir())
    assert written == sorted(f"{agent_id}.snapshot" for agent_id in agents)
