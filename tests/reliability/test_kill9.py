"""kill -9 under load loses nothing acknowledged and quarantines nothing.

A client process (load_client.py) drives a real guardd with concurrent action
requests, approvals, rejections, outcomes and scars over 20 agents, and
records every acknowledged answer. The test SIGKILLs guardd at random moments
and restarts it on the same port, at least 25 times. After every restart:

- no agent is quarantined;
- every acknowledged action is in the log with the acknowledged decision and
  charge (an acknowledged ``allowed`` may since have got an outcome, an
  acknowledged ``pending_approval`` may since have been decided), every
  acknowledged outcome and scar is there;
- each newly acknowledged action also reads back so from ``GET .../actions/:id``;
- the status of every agent is what its log says: spent is the sum of the
  charges of its allowed actions, no action is allowed (charged) twice,
  action IDs run act-1..act-N without a gap; every log verifies;
- a torn tail found on disk after a kill was moved to ``<id>.jsonl.torn``.

SIGKILL keeps the page cache, so a real torn tail is rare; every fifth kill
also cuts a line in half at the end of one log, as a crash of the machine in
the middle of a write would, to prove the torn-tail path in the same run.

guardd makes the batches of every agent waiting at one moment durable with
one shared flush (agents_runtime/log/files/committer.py). A second case runs the same
checks with 100 agents under 48 concurrent requests and fewer kills, on a
slow disk (every flush waits 20 ms first, GUARD_TEST_SLOW_FLUSH_MS), so the
batches of many agents gather in each round and the kills strike rounds of
many agents, between their writes and their flush too; it reads guardd's
own metrics before each kill to show how many records the rounds held.
"""

from __future__ import annotations

import json
import random
import re
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import pytest

from agents_runtime.log.files.logfile import split_log
from tests.reliability.support import (
    LogFacts,
    assert_status_matches_log,
    exact,
    ok_json,
    policy,
    read_log,
    verify_file,
)
from tests.support.server import GuardServer

AGENTS = [f"agent-{n:02d}" for n in range(20)]
KILLS = 25
KILL_LOOP_BUDGET = 75.0  # seconds; the whole test stays under 90
CONCURRENCY = 16
# Many agents per flush round: 100 agents, 48 requests in flight, 8 kills.
MANY_AGENTS = [f"agent-{n:03d}" for n in range(100)]
MANY_KILLS = 8
MANY_BUDGET = 45.0
MANY_CONCURRENCY = 48
SLOW_FLUSH = {"GUARD_TEST_SLOW_FLUSH_MS": "20"}
LOAD_BEFORE_KILL = 20  # acknowledgements from each server before it is killed
SIMULATED_TEAR_EVERY = 5
CLIENT = Path(__file__).with_name("load_client.py")

# What the action's status may be now, given an acknowledged answer.
SINCE_ALLOWED = {"allowed", "completed"}
SINCE_PENDING = {"pending_approval", "allowed", "completed", "denied"}


def _expected(ack: dict[str, Any]) -> tuple[set[str], Decimal | None, str | None]:
    """Statuses the action may have now, the charge it must have, its outcome."""
    op, decision = ack["op"], ack.get("decision")
    if op == "outcome":
        return {"completed"}, None, ack["outcome"]
    if op == "reject" or decision == "denied":
        return {"denied"}, None, None
    if decision == "allowed":
        return SINCE_ALLOWED, Decimal(str(ack["cost"])), None
    assert decision == "pending_approval", ack
    return SINCE_PENDING, None, None


class Checker:
    """Reads the acknowledgements so far and checks them against the server."""

    def __init__(self, server: GuardServer, acks_path: Path, agents: list[str]) -> None:
        self.server = server
        self.agents = agents
        self.acks_path = acks_path
        self.acks: list[dict[str, Any]] = []
        self._read_bytes = 0
        self.fetched = 0  # acks[:fetched] were read back through GET .../actions/:id
        self.record_checks = 0

    def _read_new_acks(self) -> None:
        data = self.acks_path.read_bytes() if self.acks_path.exists() else b""
        complete = data[: data.rfind(b"\n") + 1]  # a line being written is not read yet
        for line in complete[self._read_bytes :].splitlines():
            self.acks.append(json.loads(line))
        self._read_bytes = len(complete)

    def check(self, *, get_all: bool = False) -> None:
        self._read_new_acks()
        acks = list(self.acks)  # read before the state: each of them is in the state
        with self.server.client(self.server.admin_token) as admin:
            listed = ok_json(admin.get("/v1/agents"))["agents"]
            assert [(a["agent_id"], a["state"]) for a in listed] == [
                (agent, "active") for agent in self.agents
            ], [a for a in listed if a["state"] != "active"]
            facts = {agent: self._agent_facts(admin, agent) for agent in self.agents}
            for ack in acks:
                self._check_against_log(ack, facts[ack["agent"]])
            self.record_checks += len(acks)
            fresh = acks if get_all else acks[self.fetched :]
            with ThreadPoolExecutor(8) as pool:
                list(pool.map(lambda ack: self._check_action(admin, ack), fresh))
        self.fetched = len(acks)

    def _agent_facts(self, admin: httpx.Client, agent: str) -> LogFacts:
        status = ok_json(admin.get(f"/v1/agents/{agent}"))
        facts = assert_status_matches_log(status, read_log(admin, agent))
        assert facts.action_ids == [f"act-{n}" for n in range(1, len(facts.action_ids) + 1)]
        doubles = [a for a, n in facts.allowed_records.items() if n > 1]
        assert not doubles, f"{agent}: charged twice: {doubles}"
        assert status["alive"] is True
        report = ok_json(admin.get(f"/v1/agents/{agent}/verify"))
        assert report["ok"] is True, report
        return facts

    def _check_against_log(self, ack: dict[str, Any], facts: LogFacts) -> None:
        if ack["op"] == "scar":
            assert ack["reason"] in facts.scar_reasons, ack
            return
        statuses, cost, outcome = _expected(ack)
        action_id = ack["action_id"]
        assert facts.status.get(action_id) in statuses, (ack, facts.status.get(action_id))
        if cost is not None:
            assert facts.cost[action_id] == cost, ack
        if outcome is not None:
            assert facts.outcome[action_id] == outcome, ack

    def _check_action(self, admin: httpx.Client, ack: dict[str, Any]) -> None:
        if ack["op"] == "scar":
            return
        statuses, cost, outcome = _expected(ack)
        action = exact(admin.get(f"/v1/agents/{ack['agent']}/actions/{ack['action_id']}"))
        assert action["status"] in statuses, (ack, action)
        if cost is not None:
            assert Decimal(str(action["cost"])) == cost, (ack, action)
        if outcome is not None:
            assert action["outcome"] == outcome, (ack, action)


def _ack_count(acks_path: Path) -> int:
    return acks_path.read_bytes().count(b"\n") if acks_path.exists() else 0


def _wait_for_load(acks_path: Path, count: int, timeout: float = 3.0) -> bool:
    """Wait until the client got ``count`` more acknowledgements from this server."""
    target = _ack_count(acks_path) + count
    deadline = time.monotonic() + timeout
    while _ack_count(acks_path) < target:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def _tear(path: Path) -> bytes:
    """Append the first half of the file's last line, without a newline."""
    last = path.read_bytes().splitlines()[-1]
    tail = last[: len(last) // 2]
    with path.open("ab") as fh:
        fh.write(tail)
    return tail


def _torn_tails(data_dir: Path, agents: list[str]) -> dict[str, bytes]:
    tails = {}
    for agent in agents:
        contents = split_log((data_dir / "agents" / f"{agent}.jsonl").read_bytes())
        if contents.torn_tail is not None:
            tails[agent] = contents.torn_tail
    return tails


def _commit_rounds(server: GuardServer) -> tuple[float, float]:
    """(records, rounds) this guardd has made durable, from its metrics."""
    with server.client(server.admin_token) as admin:
        response = admin.get("/metrics")
    assert response.status_code == 200, response.text
    found = dict(re.findall(r"^guard_commit_batch_records_(sum|count) (\S+)$", response.text, re.M))
    return float(found["sum"]), float(found["count"])


@pytest.mark.slow
def test_kill9_under_load_loses_no_acknowledged_record(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _kill9_under_load(tmp_path, capsys, AGENTS, CONCURRENCY, KILLS, KILL_LOOP_BUDGET, {})


@pytest.mark.slow
def test_kill9_with_many_agents_per_flush_round_loses_no_acknowledged_record(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    records, rounds = _kill9_under_load(
        tmp_path, capsys, MANY_AGENTS, MANY_CONCURRENCY, MANY_KILLS, MANY_BUDGET, SLOW_FLUSH
    )
    # No request of the load writes more than three records: more than six a
    # round on average means rounds held three requests or more on average
    # (over 100 agents, nearly always of different agents) when the kills
    # struck. Runs on the 2-core reference machine saw 10 to 15.
    assert records / rounds > 6, (records, rounds)


def _kill9_under_load(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    agents: list[str],
    concurrency: int,
    kills_wanted: int,
    budget: float,
    env: dict[str, str],
) -> tuple[float, float]:
    """The kill loop; returns the records and flush rounds the killed
    servers committed (from their metrics, read just before each kill)."""
    seed = random.randrange(2**32)
    rng = random.Random(seed)
    server = GuardServer(tmp_path / "guard-data", env=env).start()
    client: subprocess.Popen[bytes] | None = None
    try:
        tokens = {}
        with server.client(server.admin_token) as admin:
            for agent in agents:
                created = ok_json(
                    admin.post("/v1/agents", json={"agent_id": agent, "policy": policy()}), 201
                )
                tokens[agent] = created["token"]
        stop_file, pause_file = tmp_path / "stop", tmp_path / "pause"
        config = {
            "url": server.url,
            "admin_token": server.admin_token,
            "tokens": tokens,
            "concurrency": concurrency,
            "seed": seed,
            "max_seconds": budget + 30,
            "stop_file": str(stop_file),
            "pause_file": str(pause_file),
        }
        (tmp_path / "load.json").write_text(json.dumps(config))
        acks_path, stats_path = tmp_path / "acks.jsonl", tmp_path / "stats.json"
        client = subprocess.Popen(
            [
                sys.executable,
                str(CLIENT),
                str(tmp_path / "load.json"),
                str(acks_path),
                str(stats_path),
            ]
        )
        checker = Checker(server, acks_path, agents)
        agents_dir = server.data_dir / "agents"
        real_tears = simulated_tears = kills = loaded_kills = 0
        records = rounds = 0.0
        deadline = time.monotonic() + budget
        while kills < kills_wanted:
            assert time.monotonic() < deadline, (
                f"only {kills} kills in {budget} s: each restart takes about 1 s "
                "on an idle machine; this one is too busy"
            )
            assert client.poll() is None, "the load client stopped early"
            loaded_kills += _wait_for_load(acks_path, LOAD_BEFORE_KILL)
            time.sleep(rng.uniform(0.0, 0.3))
            committed = _commit_rounds(server)
            records, rounds = records + committed[0], rounds + committed[1]
            server.kill()
            kills += 1
            pause_file.touch()  # the load waits while the test inspects and checks
            tails = _torn_tails(server.data_dir, agents)
            real_tears += len(tails)
            if kills % SIMULATED_TEAR_EVERY == 0:
                victim = rng.choice([a for a in agents if a not in tails])
                tails[victim] = _tear(agents_dir / f"{victim}.jsonl")
                simulated_tears += 1
            torn_before = {
                agent: (agents_dir / f"{agent}.jsonl.torn").read_bytes()
                if (agents_dir / f"{agent}.jsonl.torn").exists()
                else b""
                for agent in tails
            }
            server.start()
            for agent, tail in tails.items():
                torn = (agents_dir / f"{agent}.jsonl.torn").read_bytes()
                assert torn == torn_before[agent] + tail, agent
            checker.check()
            pause_file.unlink()

        # Let the load stop, read every acknowledged action back, stop cleanly.
        stop_file.touch()
        client.wait(timeout=20)
        stats = json.loads(stats_path.read_text())
        checker.check(get_all=True)
        assert server.stop() == 0
        for agent in agents:
            path = agents_dir / f"{agent}.jsonl"
            contents = split_log(path.read_bytes())
            assert contents.torn_tail is None, agent
            assert not contents.missing_newline, agent
            report = verify_file(path, server.public_key, agent)
            assert report.ok, (agent, report.failure)
    finally:
        if client is not None and client.poll() is None:
            client.kill()
            client.wait()
        server.kill()

    # The load really ran across the restarts and met nothing it did not expect.
    assert stats["client_errors"] == 0, stats["client_error_samples"]
    assert loaded_kills >= kills_wanted * 0.8, f"only {loaded_kills} kills came under load"
    with capsys.disabled():
        print(
            f"\nkill -9 under load, {len(agents)} agents at c={concurrency}: {kills} kills "
            f"({loaded_kills} after {LOAD_BEFORE_KILL}+ "
            f"acknowledged answers from that server), {len(checker.acks)} acknowledged records "
            f"checked ({checker.record_checks} checks over all restarts), "
            f"torn tails moved aside: {real_tears} real, {simulated_tears} simulated; "
            f"{records / max(rounds, 1):.1f} records a flush round; "
            f"client: {stats['transport_errors']} dropped connections, seed {seed}"
        )
    return records, rounds
