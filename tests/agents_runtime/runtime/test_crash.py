"""kill -9 at random moments: no acknowledged record is ever lost, loading
never quarantines, and a torn tail is reported and moved aside.

A child process (crash_child.py, started with sys.executable) forks workers
that drive two agents through their actors and write one line per answered
command; the test SIGKILLs each worker at a random moment, checks the data
dir as a restart finds it, and has the next worker go on on the same data dir.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import selectors
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import attrs
import pytest

from agents_runtime.core import commands as c
from agents_runtime.core.answers import Allowed, Denied, Pending
from agents_runtime.core.state import (
    AgentState,
    action_number,
    action_outcome,
    action_status,
    first_decision,
)
from agents_runtime.errors import AgentUnavailable
from agents_runtime.log import canonical
from agents_runtime.log.files.datadir import DataDir
from agents_runtime.log.files.logfile import TORN_SUFFIX, read_log
from agents_runtime.log.files.store import FileStore
from agents_runtime.log.keys import KeyRing
from agents_runtime.log.record import seal
from agents_runtime.runtime.registry import Registry
from audit.replay import replay_records
from guardd.app import BY_COMMAND
from tests.agents_runtime.crash_child import AGENTS
from tests.agents_runtime.support import (
    AGENT,
    TEST_SIGNER,
    D,
    FakeClock,
    Harness,
    policy,
    running_agent,
    running_registry,
    write_test_keys,
)

REPO = Path(__file__).resolve().parents[3]
KILLS = 24


class Child:
    """The crash child: forks a worker per run and reports its wait status."""

    def __init__(self, root: Path) -> None:
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.agents_runtime.crash_child", str(root)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=REPO,
            env=env,
        )

    def _line(self, timeout: float = 30.0) -> bytes:
        proc = self.proc
        assert proc.stdout is not None
        with selectors.DefaultSelector() as selector:
            selector.register(proc.stdout, selectors.EVENT_READ)
            if not selector.select(timeout):
                pytest.fail("the crash child did not answer in time")
        line = proc.stdout.readline()
        if not line:
            proc.kill()
            _, err = proc.communicate()
            pytest.fail(f"the crash child died: {err.decode()[-3000:]}")
        return line

    def start_worker(self, seed: int, chunk: int, acks: Path) -> int:
        assert self.proc.stdin is not None
        self.proc.stdin.write(f"{seed} {chunk} {acks}\n".encode())
        self.proc.stdin.flush()
        return int(self._line())

    def wait_status(self) -> int:
        return int(self._line())

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.communicate()


def wait_ready(acks: Path, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not (acks.exists() and acks.read_bytes().startswith(b'{"ready": true}\n')):
        if time.monotonic() > deadline:
            pytest.fail("the crash worker did not get ready in time")
        time.sleep(0.002)


def acknowledgements(output: bytes) -> list[dict[str, Any]]:
    """The lines the child printed in full (a kill may cut the last one)."""
    *complete, _unfinished = output.split(b"\n")
    return [json.loads(line) for line in complete]


def check_acknowledged(ack: dict[str, Any], state: AgentState, lines: list[bytes]) -> None:
    command = ack["command"]
    n = action_number(state, ack.get("action_id", ""))
    if command == "RequestAction":
        assert n is not None, ack
        decision = first_decision(state, n, dict(enumerate(lines)))
        words = {Allowed: "allowed", Denied: "denied", Pending: "pending_approval"}
        assert words[type(decision)] == ack["decision"], ack
    elif command == "Approve":
        assert n is not None, ack
        expected = ("allowed", "completed") if ack["decision"] == "allowed" else ("denied",)
        assert action_status(state, n) in expected, ack
    elif command == "ReportOutcome":
        assert n is not None, ack
        assert action_outcome(state, n) == "success", ack
    else:
        head = ack["head"]
        assert canonical.loads(lines[head["seq"]])["hash"] == head["hash"], ack


def test_kill_9_at_random_moments_loses_no_acknowledged_record(tmp_path: Path) -> None:
    root = tmp_path / "data"
    write_test_keys(root)
    data_dir = DataDir(root)
    ring = data_dir.prepare()
    seed = random.randrange(2**32)
    rng = random.Random(seed)
    acked: list[dict[str, Any]] = []
    kills = torn_tails = 0
    started = time.monotonic()
    child = Child(root)
    try:
        while kills < KILLS:
            chunk = 0 if kills % 2 == 0 else rng.choice([16, 64, 256])
            acks = tmp_path / f"acks-{kills}.jsonl"
            pid = child.start_worker(rng.randrange(2**32), chunk, acks)
            wait_ready(acks)
            time.sleep(rng.uniform(0.0, 0.05))
            os.kill(pid, signal.SIGKILL)
            status = child.wait_status()
            assert os.WIFSIGNALED(status), status
            assert os.WTERMSIG(status) == signal.SIGKILL
            kills += 1
            acked.extend(acknowledgements(acks.read_bytes())[1:])
            torn_tails += check_restart(data_dir, ring, acked)
    finally:
        child.close()
    elapsed = time.monotonic() - started
    print(
        f"\ncrash test (seed {seed}): {kills} kills in {elapsed:.1f} s, "
        f"{len(acked)} acknowledged commands checked, {torn_tails} torn tails moved aside"
    )
    assert kills >= KILLS
    assert len(acked) > kills  # the kills did land while commands were flowing


def check_restart(data_dir: DataDir, ring: KeyRing, acked: list[dict[str, Any]]) -> int:
    """Check the data dir as a restart finds it; return the torn tails found."""
    # What a restart finds: a torn tail is reported as such, every log loads.
    torn = set()
    lines: dict[str, list[bytes]] = {}
    for agent_id in AGENTS:
        contents = read_log(data_dir.log_path(agent_id))
        if contents.torn_tail is not None:
            torn.add(agent_id)
        lines[agent_id] = contents.lines
    registry = Registry(FileStore(data_dir), ring)
    summary = registry.load()  # verifies every record of every log
    try:
        assert summary.quarantined == {}
        assert set(summary.torn) == torn
        for agent_id in torn:
            path = data_dir.log_path(agent_id)
            assert read_log(path).torn_tail is None
            assert path.with_name(path.name + TORN_SUFFIX).stat().st_size > 0
        # Every command ever acknowledged, in this run or before, is on disk.
        states = {agent_id: registry.actors[agent_id].state for agent_id in AGENTS}
        for ack in acked:
            check_acknowledged(ack, states[ack["agent"]], lines[ack["agent"]])
    finally:
        for actor in registry.actors.values():
            actor.log.close()
        registry.store.close()
    return len(torn)


def test_after_the_kills_every_log_replays_as_its_policy_says(tmp_path: Path) -> None:
    """Random kills, then one clean start and stop: audit replay finds every
    record of every log to be what its policy would have written, because a
    command a kill cut short is finished at startup."""
    root = tmp_path / "data"
    write_test_keys(root)
    data_dir = DataDir(root)
    ring = data_dir.prepare()
    rng = random.Random()
    child = Child(root)
    try:
        for run in range(6):
            acks = tmp_path / f"acks-{run}.jsonl"
            pid = child.start_worker(rng.randrange(2**32), rng.choice([16, 64]), acks)
            wait_ready(acks)
            time.sleep(rng.uniform(0.0, 0.05))
            os.kill(pid, signal.SIGKILL)
            child.wait_status()
    finally:
        child.close()

    async def start_and_stop() -> None:
        registry = Registry(FileStore(data_dir), ring)
        assert registry.load().quarantined == {}
        await registry.start()
        await registry.stop()

    asyncio.run(start_and_stop())
    for agent_id in AGENTS:
        records = [canonical.loads(line) for line in read_log(data_dir.log_path(agent_id)).lines]
        result = replay_records(records)
        assert result.ok, [str(p) for p in result.problems]


# -- a command cut short, deterministically ---------------------------------------------


def crash_cut(path: Path, data: bytes) -> None:
    """Leave ``data`` as the log, as a crash would: its checkpoint, which
    only ever names records on disk, at the last whole line."""
    path.write_bytes(data)
    last = canonical.loads(read_log(path).lines[-1])
    checkpoint = (
        path.parent.parent / "checkpoints" / f"{path.name.removesuffix('.jsonl')}.checkpoint"
    )
    checkpoint.write_text(f"{last['seq']}:{last['hash']}\n")


async def _script(agent: Harness, name: str) -> None:
    ask = agent.ask
    await ask(c.RequestAction("read", idempotency_key="warm-up"))
    if name == "request-allowed":
        await ask(c.RequestAction("read", {"q": 1}, D("1.5"), "k"))
    elif name == "request-held":
        await ask(c.RequestAction("send"))
    elif name == "denial-with-scar":
        await ask(c.RequestAction("nope"))
    elif name == "denial-scar-reaches-limit":
        await ask(c.AddScar("severe", "x"))
        await ask(c.RequestAction("nope"))
    elif name == "budget-exhausted":
        await ask(c.RequestAction("read", cost=D(9)))
    elif name == "approval-exhausts-budget":
        await ask(c.RequestAction("send", cost=D(9)))
        await ask(c.Approve("act-2", "alice", "ok"))
    elif name == "rejection-with-scar":
        await ask(c.RequestAction("send"))
        await ask(c.Reject("act-2", "bob", "no", "severe"))
    elif name == "failure-outcome":
        await ask(c.ReportOutcome("act-1", "failure", c.AGENT, "broke"))
    elif name == "fatal-scar":
        await ask(c.AddScar("fatal", "x"))
    elif name == "policy-lowers-scar-limit":
        await ask(c.AddScar("moderate", "x"))
        await ask(c.SetPolicy(policy(budget=10, scar_limit=3, tools=TOOLS)))
    else:  # pragma: no cover
        raise AssertionError(name)


TOOLS = {"read": {"cost": 1}, "send": {"cost": 2, "requires_approval": True}}
SCRIPTS = [
    pytest.param("request-allowed", 1, id="request-allowed-cut-before-its-decision"),
    pytest.param("request-held", 1, id="request-held-cut-before-approval_required"),
    pytest.param("denial-with-scar", 1, id="denial-cut-before-its-scar"),
    pytest.param("denial-with-scar", 2, id="request-cut-before-its-denial"),
    pytest.param("denial-scar-reaches-limit", 1, id="scar-cut-before-terminated-scar_limit"),
    pytest.param("denial-scar-reaches-limit", 2, id="denial-cut-before-scar-and-terminated"),
    pytest.param("denial-scar-reaches-limit", 3, id="request-cut-before-everything"),
    pytest.param("budget-exhausted", 1, id="allowed-cut-before-terminated-budget_exhausted"),
    pytest.param("budget-exhausted", 2, id="request-cut-before-allowed-and-terminated"),
    pytest.param("approval-exhausts-budget", 1, id="approval-cut-before-terminated"),
    pytest.param("rejection-with-scar", 1, id="rejection-cut-before-its-scar"),
    pytest.param("failure-outcome", 1, id="failure-outcome-cut-before-its-scar"),
    pytest.param("fatal-scar", 1, id="fatal-scar-cut-before-terminated"),
    pytest.param("policy-lowers-scar-limit", 1, id="policy-cut-before-terminated"),
]


@pytest.mark.parametrize(("script", "cut"), SCRIPTS)
@pytest.mark.parametrize("torn", [False, True], ids=["clean-cut", "with-torn-tail"])
async def test_a_command_cut_short_by_a_crash_is_finished_at_startup_exactly_as_it_would_have_been(
    tmp_path: Path, script: str, cut: int, torn: bool
) -> None:
    agent_policy = policy(budget=10, scar_limit=11, tools=TOOLS)
    async with running_agent(tmp_path, agent_policy) as agent:
        await _script(agent, script)
        path = agent.path
    whole = path.read_bytes()
    lines = whole.splitlines(keepends=True)
    crashed = b"".join(lines[:-cut]) + (lines[-cut][:40] if torn else b"")
    crash_cut(path, crashed)
    async with running_registry(tmp_path):
        pass
    # the same fields, ts and key: the very bytes the uncut command would have written
    assert path.read_bytes() == whole
    async with running_registry(tmp_path):
        pass
    assert path.read_bytes() == whole  # a complete last command writes nothing


async def test_an_idempotency_retry_after_a_crash_gets_the_finished_decision(
    tmp_path: Path,
) -> None:
    async with running_agent(tmp_path, policy(tools=TOOLS)) as agent:
        first = await agent.ask(c.RequestAction("read", idempotency_key="k"))
        path = agent.path
    crash_cut(path, b"".join(path.read_bytes().splitlines(keepends=True)[:-1]))
    async with running_registry(tmp_path) as registry:
        again = await registry.ref(AGENT).ask(c.RequestAction("read", idempotency_key="k"))
    # the finished allowance is the same record, so the receipt is the same too
    lines = path.read_bytes().decode().splitlines()
    assert (
        again
        == first
        == {
            "decision": "allowed",
            "action_id": "act-1",
            "cost": 1,
            "remaining": 99,
            "receipt": lines[2:4],
        }
    )


async def test_an_agent_at_its_scar_limit_when_a_crash_hit_is_terminated_before_any_request(
    tmp_path: Path,
) -> None:
    async with running_agent(tmp_path, policy(scar_limit=3, tools=TOOLS)) as agent:
        await agent.ask(c.AddScar("moderate", "x"))
        path = agent.path
    crash_cut(path, b"".join(path.read_bytes().splitlines(keepends=True)[:-1]))
    async with running_registry(tmp_path) as registry:
        reply = await registry.ref(AGENT).ask(c.RequestAction("read"))
    assert reply["reason"] == {"code": "terminated", "reason": "scar_limit"}


async def test_a_read_only_service_leaves_a_cut_command_as_it_is(tmp_path: Path) -> None:
    async with running_agent(tmp_path, policy(tools=TOOLS)) as agent:
        await agent.ask(c.RequestAction("read", idempotency_key="k"))
        path = agent.path
    cut = b"".join(path.read_bytes().splitlines(keepends=True)[:-1])
    crash_cut(path, cut)
    data_dir = DataDir(tmp_path)
    # The clock of the first run: the key is within its retention.
    ring = attrs.evolve(data_dir.prepare(), signer=None)
    registry = Registry(FileStore(data_dir), ring, clock=FakeClock(), render=BY_COMMAND)
    registry.load()
    await registry.start()
    try:
        ref = registry.ref(AGENT)
        status = await ref.ask(c.GetStatus())
        assert status["actions_allowed"] == 0
        # A retry of the cut request cannot be answered: its decision is not written.
        with pytest.raises(AgentUnavailable, match="act-1 was cut short by a crash"):
            await ref.ask(c.RequestAction("read", idempotency_key="k"))
    finally:
        await registry.stop()
    assert path.read_bytes() == cut


async def test_a_last_record_that_cannot_be_finished_fences_the_agent(tmp_path: Path) -> None:
    async with running_agent(tmp_path, policy(tools=TOOLS)) as agent:
        await agent.ask(c.RequestAction("read"))
        path = agent.path
        head = agent.state.head
        ts = agent.state.last_ts
    # signed with the key, but no command of the service writes this reason code
    requested = {
        "kind": "action_requested",
        "action_id": "act-2",
        "tool": "read",
        "input": None,
        "requested_cost": None,
        "cost": 1,
    }
    sealed = seal(requested, prev=head, ts=ts, signer=TEST_SIGNER)
    weird = {"kind": "action_denied", "action_id": "act-2", "reason": {"code": "weird"}}
    forged = sealed.line + seal(weird, prev=sealed.head, ts=ts, signer=TEST_SIGNER).line
    path.write_bytes(path.read_bytes() + forged)
    before = path.read_bytes()
    async with running_registry(tmp_path) as registry:
        ref = registry.ref(AGENT)
        assert (await ref.ask(c.GetStatus()))["head"]["seq"] == head.seq + 2
        with pytest.raises(AgentUnavailable, match="accepts no writes until guardd is restarted"):
            await ref.ask(c.RequestAction("read"))
    assert path.read_bytes() == before
