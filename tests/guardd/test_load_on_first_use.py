"""guardd --load-agents on-first-use on the file store: it serves at once,
verifies and loads each agent before that agent's first answer, and loads
the others in the background; a tampered log is never served
(docs/operations.md, "Loading agents on first use")."""

from __future__ import annotations

import asyncio
import concurrent.futures
import gc
import re
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from agents_runtime.log.files.datadir import DataDir
from agents_runtime.log.files.store import FileStore
from agents_runtime.runtime.registry import Loading, Registry
from audit.cli import main as audit_main
from guardd.__main__ import freeze_once_swept
from guardd.config import SettingsError, parse_settings
from tests.guardd.conftest import POLICY, Agent, Api, assert_error, ok, serving
from tests.support.server import GuardServer

ON_FIRST_USE = ["--load-agents", "on-first-use"]
DONE = "background loading done"
SWEEP_TIMEOUT = 60.0  # seconds; a bound on waiting, not a measure


@pytest.fixture
def lazy(tmp_path: Path) -> Iterator[Api]:
    with serving(tmp_path / "guard-data", args=ON_FIRST_USE) as api:
        yield api


def _agents(api: Api, count: int, prefix: str = "agent") -> list[Agent]:
    made = []
    for k in range(count):
        agent = api.create(f"{prefix}-{k:02d}")
        ok(agent.act("search"))
        made.append(agent)
    return made


def _tamper(api: Api, agent: Agent) -> None:
    """Change the action's tool in the agent's log file behind guardd's back."""
    path = api.server.data_dir / "agents" / f"{agent.agent_id}.jsonl"
    path.write_bytes(path.read_bytes().replace(b'"tool":"search"', b'"tool":"starch"', 1))


def _sweep_lines(server: GuardServer) -> list[str]:
    return [line for line in server.read_output().splitlines() if DONE in line]


def _wait_for_sweep(server: GuardServer, before: int) -> str:
    """The log line of the sweep that ends after ``before`` such lines."""
    deadline = time.monotonic() + SWEEP_TIMEOUT
    while time.monotonic() < deadline:
        lines = _sweep_lines(server)
        if len(lines) > before:
            return lines[before]
        time.sleep(0.05)
    raise AssertionError(f"no sweep ended:\n{server.read_output()}")


def _states(api: Api) -> dict[str, str]:
    return {e["agent_id"]: e["state"] for e in ok(api.admin.get("/v1/agents"))["agents"]}


def _by_state(api: Api) -> dict[str, float]:
    return {
        sample.labels["state"]: sample.value
        for family in text_string_to_metric_families(api.admin.get("/metrics").text)
        if family.name == "guard_agents"
        for sample in family.samples
    }


def test_load_agents_from_flag_and_environment() -> None:
    assert parse_settings([], {}).load_agents == "at-start"
    assert parse_settings(ON_FIRST_USE, {}).load_agents == "on-first-use"
    env = {"GUARD_LOAD_AGENTS": "on-first-use"}
    assert parse_settings([], env).load_agents == "on-first-use"
    store = ["--store", "postgresql://guard@localhost/guard"]
    assert parse_settings(store, {}).load_agents == "on-first-use"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        pytest.param(
            ["--load-agents", "lazily"],
            "--load-agents must be at-start or on-first-use, not 'lazily'",
            id="unknown",
        ),
        pytest.param(
            ["--load-agents", "at-start", "--store", "postgresql://guard@localhost/guard"],
            "--load-agents at-start: a node of a PostgreSQL store (--store) loads each agent "
            "on its first use, since other nodes create agents while it serves",
            id="at-start-on-postgres",
        ),
    ],
)
def test_a_bad_load_agents_setting_is_refused(argv: list[str], message: str) -> None:
    with pytest.raises(SettingsError, match=f"^{re.escape(message)}$"):
        parse_settings(argv, {})


def test_a_tampered_log_is_quarantined_before_it_is_ever_served(lazy: Api) -> None:
    agents = _agents(lazy, 4)
    tampered = agents[-1]
    lazy.server.stop()
    _tamper(lazy, tampered)
    before = len(_sweep_lines(lazy.server))
    lazy.server.start()
    assert "agents: 0 loaded, 0 quarantined, 4 loading in the background" in (
        lazy.server.read_output()
    )
    # Asked for at once: loaded by this request or by the sweep, verified
    # either way before any answer.
    refused = assert_error(tampered.act("search"), 503, "quarantined")
    assert re.search(
        r"failed verification (when it was first used|when it was loaded in the background) "
        r"\(line 3 \(seq 2\): hash does not match content\)",
        refused["error"],
    ), refused["error"]
    assert_error(tampered.client.get(tampered.path), 503, "quarantined")
    _wait_for_sweep(lazy.server, before)
    assert _states(lazy) == {a.agent_id: "active" for a in agents[:-1]} | {
        tampered.agent_id: "quarantined"
    }
    assert ok(agents[0].act("search"))["remaining"] == POLICY["budget"] - 2


def test_the_sweep_quarantines_a_tampered_log_nobody_asked_for(lazy: Api) -> None:
    agents = _agents(lazy, 5)
    tampered = agents[2]
    lazy.server.stop()
    _tamper(lazy, tampered)
    before = len(_sweep_lines(lazy.server))
    lazy.server.start()
    line = _wait_for_sweep(lazy.server, before)
    assert re.search(
        r"background loading done in \d+\.\d\d s: 4 agents loaded, 1 quarantined$", line
    )
    assert _states(lazy)[tampered.agent_id] == "quarantined"
    assert _by_state(lazy) == {"active": 4, "terminated": 0, "quarantined": 1, "unloaded": 0}
    refused = assert_error(tampered.act("search"), 503, "quarantined")
    assert "failed verification when it was loaded in the background" in refused["error"]
    assert f"agent {tampered.agent_id} quarantined: line 3 (seq 2)" in lazy.server.read_output()


def test_requests_arriving_together_for_one_agent_share_one_load(lazy: Api) -> None:
    agents = _agents(lazy, 12)
    last = agents[-1]  # the sweep comes to it last
    lazy.server.restart()

    def ask(k: int) -> httpx.Response:
        return last.client.get(last.path) if k % 2 else last.act("search")

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(ask, range(16)))
    for answer in answers:
        ok(answer)
    assert ok(last.client.get(last.path))["spent"] == 9
    assert lazy.server.read_output().count(f"agent {last.agent_id}: loaded on first use") <= 1
    # One actor wrote the log: it verifies whole, as the next start does.
    lazy.server.stop()
    key = lazy.server.public_key
    log_file = lazy.server.data_dir / "agents" / f"{last.agent_id}.jsonl"
    assert audit_main(["verify", str(log_file), "--public-key", key]) == 0


def test_creating_an_agent_whose_id_is_listed_is_a_conflict(lazy: Api) -> None:
    (agent,) = _agents(lazy, 1)
    lazy.server.restart()
    body: dict[str, Any] = {"agent_id": agent.agent_id, "policy": POLICY}
    assert_error(lazy.admin.post("/v1/agents", json=body), 409, "agent_exists")
    assert ok(agent.client.get(agent.path))["spent"] == 1


def test_a_named_policy_reaches_followers_not_yet_loaded(lazy: Api) -> None:
    ok(lazy.admin.put("/v1/policies/team", json=POLICY | {"budget": 50}))
    followers = [f"follower-{k}" for k in range(3)]
    for agent_id in followers:
        body = {"agent_id": agent_id, "policy_ref": "team"}
        ok(lazy.admin.post("/v1/agents", json=body), 201)
    (other,) = _agents(lazy, 1)
    lazy.server.restart()
    put = ok(lazy.admin.put("/v1/policies/team", json=POLICY | {"budget": 70}))
    assert put["agents"] == followers
    for agent_id in followers:
        assert ok(lazy.admin.get(f"/v1/agents/{agent_id}"))["budget"] == 70
    assert ok(lazy.admin.get(other.path))["budget"] == POLICY["budget"]


def test_a_stop_during_the_sweep_is_clean(lazy: Api) -> None:
    agents = _agents(lazy, 30)
    server = lazy.server
    server.stop()
    start = len(server.read_output())
    server.start()
    assert server.proc is not None
    server.proc.send_signal(signal.SIGTERM)  # at once: the sweep has barely begun
    assert server.stop() == 0
    output = server.read_output()[start:]
    for trouble in ("Traceback", "ended with an error", "did not end within", " ERROR "):
        assert trouble not in output, output
    before = len(_sweep_lines(server))
    server.start()
    line = _wait_for_sweep(server, before)
    assert line.endswith("30 agents loaded, 0 quarantined")
    assert set(_states(lazy).values()) == {"active"}
    assert ok(agents[0].act("search"))["decision"] == "allowed"


def test_loading_every_agent_at_the_start_stays_the_default(fresh_api: Api) -> None:
    agents = _agents(fresh_api, 3)
    fresh_api.server.stop()
    _tamper(fresh_api, agents[1])
    fresh_api.server.start()
    output = fresh_api.server.read_output()
    assert "agents: 2 loaded, 1 quarantined\n" in output
    assert f"quarantined: {agents[1].agent_id}: line 3 (seq 2)" in output
    assert DONE not in output
    assert _states(fresh_api) == {
        agents[0].agent_id: "active",
        agents[1].agent_id: "quarantined",
        agents[2].agent_id: "active",
    }
    refused = assert_error(agents[1].act("search"), 503, "quarantined")
    assert "failed verification at startup" in refused["error"]


async def test_what_the_sweep_loaded_is_frozen_out_of_the_collectors_sight(
    tmp_path: Path,
) -> None:
    server = GuardServer(tmp_path / "guard-data").start()
    api = Api(server)
    try:
        _agents(api, 3)
    finally:
        api.close()
        server.stop()
    data_dir = DataDir(tmp_path / "guard-data")
    registry = Registry(FileStore(data_dir), data_dir.prepare(), loading=Loading.ON_FIRST_USE)
    registry.load()
    gc.unfreeze()
    # Started before the registry, as guardd starts it before serving.
    freezer = asyncio.create_task(freeze_once_swept(registry))
    await asyncio.sleep(0)
    assert not freezer.done()
    await registry.start()
    try:
        await freezer
        assert set(registry.actors) == {"agent-00", "agent-01", "agent-02"}
        states = [actor.state for actor in registry.actors.values()]
        # Frozen: in no generation a collection walks.
        walked = {id(o) for o in gc.get_objects()}
        assert not any(id(state) in walked for state in states)
    finally:
        gc.unfreeze()
        await registry.stop()
