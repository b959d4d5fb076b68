"""Run by test_crash.py, which kills its workers with SIGKILL at random moments.

    python -m tests.agents_runtime.crash_child <data-dir>

This process imports everything once, then serves runs: for each line
``<seed> <write-chunk-bytes> <ack-file>`` on stdin it forks a worker, prints
the worker's pid, waits for it and prints its wait status. Forking saves the
interpreter start and imports for every kill, which would otherwise be most of
the test's time.

A worker opens a Registry on the data dir (loading what earlier runs left:
torn tails moved aside), makes sure agents ``a`` and ``b`` exist, writes
``ready`` to the ack file, then sends commands through the actors from several
concurrent askers (so batches hold several commands) until it is killed.
After each *answered* command it appends one JSON line to the ack file with a
single write(2), so every complete line there is an acknowledgement.

A write chunk above 0 makes every write(2) of a log write at most that many
bytes and pause briefly between chunks: a slow disk, so that a kill often
lands in the middle of a batch and leaves a torn tail.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import sys
import time
from decimal import Decimal
from pathlib import Path
from typing import Any

from agents_runtime.core import commands as c
from agents_runtime.core.policy import parse_policy
from agents_runtime.errors import AgentError
from agents_runtime.log.files.datadir import DataDir
from agents_runtime.log.files.logfile import FileIO
from agents_runtime.log.files.store import FileStore
from agents_runtime.runtime.registry import Registry
from guardd.app import BY_COMMAND
from tests.agents_runtime.support import allowed_ids

AGENTS = ("a", "b")
ASKERS = 4  # per agent
POLICY = {
    "budget": 999_999_999,
    "scar_limit": 999_999_999,
    "tools": {"read": {"cost": 1}, "send": {"cost": 2, "requires_approval": True}},
}


def slow_writes(chunk: int) -> None:
    def write(self: FileIO, fd: int, data: memoryview) -> int:
        written = os.write(fd, data[:chunk])
        time.sleep(0.0002)
        return written

    FileIO.write = write  # type: ignore[method-assign]


_ack_fd = -1


def say(line: dict[str, Any]) -> None:
    os.write(_ack_fd, json.dumps(line).encode() + b"\n")


async def asker(registry: Registry, agent_id: str, rng: random.Random) -> None:
    ref = registry.ref(agent_id)
    while True:
        roll = rng.random()
        state = registry.actors[agent_id].state
        pending = list(state.pending)
        allowed = allowed_ids(state)
        if roll < 0.15 and pending:
            action_id = rng.choice(pending)
            command: Any = c.Approve(action_id, "op", "fine")
        elif roll < 0.25 and allowed:
            command = c.ReportOutcome(rng.choice(allowed), "success", c.AGENT)
        elif roll < 0.30:
            command = c.AddScar("minor", "noticed")
        elif roll < 0.45:
            command = c.RequestAction("send", {"n": rng.randrange(1000)})
        elif roll < 0.50:
            command = c.RequestAction("nope")
        else:
            command = c.RequestAction("read", {"n": rng.randrange(1000)}, Decimal("1.5"))
        try:
            reply = await ref.ask(command)
        except AgentError:
            continue  # e.g. two askers approved the same action: nothing written
        line: dict[str, Any] = {"agent": agent_id, "command": type(command).__name__}
        if "decision" in reply:
            line |= {"action_id": reply["action_id"], "decision": reply["decision"]}
        else:
            line |= {"head": reply["head"]}
        if isinstance(command, c.ReportOutcome):
            line["action_id"] = command.action_id
        say(line)


async def run(root: Path, seed: int, chunk: int) -> None:
    if chunk:
        slow_writes(chunk)
    data_dir = DataDir(root)
    registry = Registry(FileStore(data_dir), data_dir.prepare(), render=BY_COMMAND)
    summary = registry.load()
    if summary.quarantined:
        raise SystemExit(f"quarantined: {summary.quarantined}")
    await registry.start()
    for agent_id in AGENTS:
        if not registry.exists(agent_id):
            await registry.create(agent_id, parse_policy(POLICY))
    say({"ready": True})
    rng = random.Random(seed)
    await asyncio.gather(
        *(
            asker(registry, agent_id, random.Random(rng.random()))
            for agent_id in AGENTS
            for _ in range(ASKERS)
        )
    )


def worker(root: Path, seed: int, chunk: int, ack_file: str) -> None:
    global _ack_fd
    _ack_fd = os.open(ack_file, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    asyncio.run(run(root, seed, chunk))


def serve(root: Path) -> None:
    for request in sys.stdin:
        seed, chunk, ack_file = request.split()
        pid = os.fork()
        if pid == 0:  # the worker
            code = 1
            try:
                worker(root, int(seed), int(chunk), ack_file)
                code = 0
            finally:
                os._exit(code)
        print(pid, flush=True)
        _, status = os.waitpid(pid, 0)
        print(status, flush=True)


if __name__ == "__main__":
    serve(Path(sys.argv[1]))
