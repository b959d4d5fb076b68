"""Shared helpers for the agent-actor tests: a registry on a tmp data dir with
a clock the test moves, policies from plain dicts, and the replay check that
the state rebuilt from disk equals the live state."""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator, Mapping
from decimal import Decimal
from pathlib import Path
from typing import Any

import nacl.signing

from agents_runtime.core.commands import RequestAction
from agents_runtime.core.idempotency import key_digest
from agents_runtime.core.policy import Policy, parse_policy
from agents_runtime.core.rate_history import allowed_times_in, rate_gap, reach
from agents_runtime.core.state import (
    DEFAULT_IDEMPOTENCY_RETENTION,
    NO_LINES,
    AgentState,
    action_status,
    first_decision,
    parse_ts,
)
from agents_runtime.log import canonical
from agents_runtime.log.files.datadir import DataDir
from agents_runtime.log.files.logfile import read_log
from agents_runtime.log.files.store import FileStore
from agents_runtime.log.keys import Signer
from agents_runtime.runtime.actor import AgentRef
from agents_runtime.runtime.registry import Registry
from agents_runtime.runtime.replay import Loaded, replay
from guardd import views
from guardd.app import BY_COMMAND

# 2026-01-01T00:00:00Z: a round start so rate-window arithmetic reads easily.
T0 = 1_767_225_600.0
AGENT = "agent-1"


# The fixed test key: every test data dir signs with it, so a test can forge
# a correctly signed record (and audit replay must still catch it).
TEST_SEED = bytes(range(32))
TEST_SIGNER = Signer(TEST_SEED)
TEST_PUBLIC_KEY = TEST_SIGNER.public_key


def write_test_keys(root: Path) -> None:
    """Key files for a test data dir, written without the fsyncs of real key
    creation (which would dominate the run time of these tests)."""
    keys = root / "keys"
    keys.mkdir(mode=0o700, parents=True, exist_ok=True)
    public = bytes(nacl.signing.SigningKey(TEST_SEED).verify_key)
    files = {
        "audit.key": TEST_SEED.hex().encode() + b"\n",
        "audit.pub": public.hex().encode() + b"\n",
        "token.key": bytes(range(100, 132)),
        "admin.token": b"test-admin-token\n",
    }
    for name, data in files.items():
        path = keys / name
        if not path.exists():
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            try:
                os.write(fd, data)
            finally:
                os.close(fd)


class FakeClock:
    """A clock that only moves when the test says so."""

    def __init__(self, now: float = T0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def D(text: str | int) -> Decimal:
    return Decimal(str(text))


def policy(**overrides: Any) -> Policy:
    """A policy from JSON-shaped keys; numbers may be given as str or int."""
    raw: dict[str, Any] = {"budget": 100, "scar_limit": 10, "tools": {"read": {"cost": 1}}}
    raw.update(overrides)
    return parse_policy(canonical.loads(canonical.dumps(_decimals(raw))))


def _decimals(value: Any) -> Any:
    if isinstance(value, float):
        return Decimal(repr(value))
    if isinstance(value, dict):
        return {k: _decimals(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_decimals(v) for v in value]
    return value


@contextlib.asynccontextmanager
async def running_registry(
    root: Path, *, clock: FakeClock | None = None
) -> AsyncIterator[Registry]:
    """A started registry on ``root`` (created if needed), stopped on exit."""
    data_dir = DataDir(root)
    write_test_keys(root)
    ring = data_dir.prepare()
    # Replies rendered as guardd renders them: what a client sees.
    registry = Registry(FileStore(data_dir), ring, clock=clock or FakeClock(), render=BY_COMMAND)
    registry.load()
    await registry.start()
    try:
        yield registry
    finally:
        await registry.stop()


class Harness:
    """One agent in a running registry: ask it commands, look at its state."""

    def __init__(self, registry: Registry, agent_id: str, clock: FakeClock) -> None:
        self.registry = registry
        self.agent_id = agent_id
        self.clock = clock
        self.ref: AgentRef = registry.ref(agent_id)

    async def ask(self, command: Any) -> Any:
        return await self.ref.ask(command)

    @property
    def state(self) -> AgentState:
        return live_state(self.registry, self.agent_id)

    @property
    def path(self) -> Path:
        return self.registry.store.path(self.agent_id)

    def records(self) -> list[dict[str, Any]]:
        return [canonical.loads(line) for line in self.path.read_bytes().splitlines()]

    def kinds(self) -> list[str]:
        return [r["kind"] for r in self.records()]

    def check_replay(self) -> None:
        assert_replay_matches(self.registry, self.agent_id)


@contextlib.asynccontextmanager
async def running_agent(
    root: Path,
    agent_policy: Policy | None = None,
    *,
    clock: FakeClock | None = None,
    agent_id: str = AGENT,
) -> AsyncIterator[Harness]:
    """A registry with one freshly created agent. On a clean exit the state
    rebuilt from disk must equal the live state."""
    clock = clock or FakeClock()
    async with running_registry(root, clock=clock) as registry:
        await registry.create(agent_id, agent_policy or policy())
        harness = Harness(registry, agent_id, clock)
        yield harness
        harness.check_replay()


def live_state(registry: Registry, agent_id: str = AGENT) -> AgentState:
    return registry.actors[agent_id].state


def log_lines(path: Path) -> dict[int, bytes]:
    """Every line of a log file by seq: what the views may quote."""
    return dict(enumerate(path.read_bytes().splitlines()))


def live_keys(state: AgentState) -> dict[str, int]:
    """The Idempotency-Keys still inside their retention at the state's last
    record, by digest, and the action each names: what a repeat sees, however
    the state keeps them (agents_runtime/core/idempotency.py)."""
    since = parse_ts(state.last_ts) - state.idempotency_retention if state.last_ts else 0.0
    found: dict[int, tuple[int, float]] = {}
    for run in state.old_keys:
        for digest, n, at in zip(run.digests, run.numbers, run.times, strict=True):
            if digest not in found or at > found[digest][1]:
                found[digest] = (n, at)
    for key, (n, at) in state.idempotency.items():
        found[key_digest(key)] = (n, at)
    return {f"{d:016x}": n for d, (n, at) in sorted(found.items()) if at >= since}


def snapshot(state: AgentState, lines: Mapping[int, bytes]) -> dict[str, Any]:
    """Everything observable about an agent, as canonical JSON text; ``lines``
    are its log's (the views quote them)."""
    numbers = range(1, state.action_count + 1)
    view = {
        "status": views.status(state, lines),
        "actions": [views.action(state, n, lines) for n in numbers],
        "pending": [views.pending_entry(a) for a in state.pending.values()],
        "first_decisions": [
            BY_COMMAND[RequestAction](state, first_decision(state, n, lines), 0.0, lines)
            for n in numbers
            if n_decided(state, n, lines)
        ],
        "tool_calls": state.tool_calls,
        "tag_last_used": {tag: at.isoformat() for tag, at in state.tag_last_used.items()},
        "allowed_times": [Decimal(repr(t)) for t in counted_times(state, lines)],
        "idempotency": live_keys(state),
        "terminated_by": state.terminated_by,
        "last_ts": state.last_ts,
    }
    return canonical.loads(canonical.dumps(view))


def counted_times(state: AgentState, lines: Mapping[int, bytes]) -> list[float]:
    """The allowed times a rate check in force at the last record counts:
    what memory holds, and what a gap in it reads back from ``lines``, as
    the actor does (``rate_history``). A live state may hold a gap's times
    that a state folded again holds only once it reads them."""
    now = parse_ts(state.last_ts) if state.last_ts else 0.0
    times = list(state.allowed_times)
    gap = rate_gap(state, now)
    if gap is not None:
        older = (canonical.loads(lines[seq]) for seq in sorted(lines) if seq <= gap.upto_seq)
        times = allowed_times_in(older, gap) + times
    since = now - reach(state)
    return [t for t in times if t > since]


def allowed_ids(state: AgentState, lines: Mapping[int, bytes] = NO_LINES) -> list[str]:
    """IDs of the actions that are allowed and have no outcome yet (``lines``:
    the log's, for the actions that left memory)."""
    numbers = range(1, state.action_count + 1)
    return [f"act-{n}" for n in numbers if action_status(state, n, lines) == "allowed"]


def n_decided(state: AgentState, n: int, lines: Mapping[int, bytes] = NO_LINES) -> bool:
    return action_status(state, n, lines) != "requested"


def replayed_state(registry: Registry, agent_id: str = AGENT) -> AgentState:
    """The state rebuilt from the agent's file on disk; fails if it does not verify."""
    path = registry.store.path(agent_id)
    loaded = load_log(path, agent_id, registry.ring.public_key, registry.idempotency_retention)
    assert loaded.failure is None, loaded.failure
    assert loaded.contents.torn_tail is None
    assert loaded.state is not None
    return loaded.state


def assert_replay_matches(registry: Registry, agent_id: str = AGENT) -> None:
    lines = log_lines(registry.store.path(agent_id))
    live = snapshot(live_state(registry, agent_id), lines)
    assert snapshot(replayed_state(registry, agent_id), lines) == live


def load_log(
    path: Path, agent_id: str, public_key: bytes, retention: float = DEFAULT_IDEMPOTENCY_RETENTION
) -> Loaded:
    """Verify and fold a log file, as guardd does at startup."""
    return replay(agent_id, read_log(path), public_key, idempotency_retention=retention)
