"""A node on a PostgreSQL store starts without reading any agent's log: it
lists the agents (one query) and verifies and folds each on its first use,
with the quarantine rule of a start (docs/scale-out.md, "How a node loads
agents")."""

from __future__ import annotations

import concurrent.futures
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from audit.cli import main as audit_main
from tests.guardd.conftest import Agent, Api, assert_error, ok
from tests.support.postgres import run_sql
from tests.support.server import GuardServer

POLICY: dict[str, Any] = {"budget": 100, "scar_limit": 30, "tools": {"search": {"cost": 1}}}
AGENTS = 12


@attrs.frozen
class Nodes:
    one: Api
    two: Api
    dsn: str

    def agent_on(self, api: Api, agent: Agent) -> Agent:
        return Agent(agent.agent_id, agent.token, api.client(agent.token))


@pytest.fixture
def nodes(postgres_dsn: str, tmp_path: Path) -> Iterator[Nodes]:
    first = GuardServer(tmp_path / "node1", args=["--store", postgres_dsn]).start()
    shutil.copytree(tmp_path / "node1" / "keys", tmp_path / "node2" / "keys")
    second = GuardServer(tmp_path / "node2", args=["--store", postgres_dsn]).start()
    one, two = Api(first), Api(second)
    try:
        yield Nodes(one, two, postgres_dsn)
    finally:
        for api in (one, two):
            api.close()
            api.server.kill()


def _agents(nodes: Nodes, count: int = AGENTS) -> list[Agent]:
    """``count`` agents made on the first node, each with one action."""
    made = []
    for _ in range(count):
        agent = nodes.one.create(policy=POLICY)
        ok(agent.act("search"))
        made.append(agent)
    return made


def _states(api: Api) -> dict[str, str]:
    return {e["agent_id"]: e["state"] for e in ok(api.admin.get("/v1/agents"))["agents"]}


def _by_state(api: Api) -> dict[str, float]:
    text = api.admin.get("/metrics").text
    return {
        sample.labels["state"]: sample.value
        for family in text_string_to_metric_families(text)
        if family.name == "guard_agents"
        for sample in family.samples
    }


def _change_row(dsn: str, agent_id: str) -> None:
    """Change the tool of seq 2 (the action) behind every node's back."""
    run_sql(
        dsn,
        "update guard_logs set line = convert_to(replace(convert_from(line, 'UTF8'),"
        " '\"search\"', '\"starch\"'), 'UTF8') where agent_id = $1 and seq = 2",
        agent_id,
    )


def test_a_node_starts_without_loading_its_agents_and_loads_each_on_first_use(
    nodes: Nodes,
) -> None:
    agents = _agents(nodes)
    nodes.two.server.restart()
    assert ok(httpx.get(f"{nodes.two.server.url}/healthz")) == {"ok": True}
    banner = f"agents: 0 loaded, 0 quarantined, {AGENTS} loaded on first use"
    assert banner in nodes.two.server.read_output()
    assert set(_states(nodes.two).values()) == {"unloaded"}
    assert _by_state(nodes.two) == {
        "active": 0,
        "terminated": 0,
        "quarantined": 0,
        "unloaded": AGENTS,
    }
    first, *others = agents
    there = nodes.agent_on(nodes.two, first)
    assert ok(there.client.get(first.path))["spent"] == 1
    assert ok(there.act("search"))["remaining"] == 98
    states = _states(nodes.two)
    assert states.pop(first.agent_id) == "active"
    assert set(states.values()) == {"unloaded"}
    assert _by_state(nodes.two)["unloaded"] == AGENTS - 1
    # Loaded here, it reads what the other node appends after, as any agent.
    ok(first.act("search"))
    assert ok(there.client.get(first.path))["spent"] == 3
    assert nodes.two.server.read_output().count(f"agent {first.agent_id}: loaded on first use") == 1
    assert len(others) == AGENTS - 1


def test_a_changed_row_of_an_agent_not_yet_loaded_quarantines_it_on_first_use(
    nodes: Nodes,
) -> None:
    changed, sound = _agents(nodes, 2)
    nodes.two.server.restart()
    _change_row(nodes.dsn, changed.agent_id)
    # Not read at the start: listed as not loaded, not yet as quarantined.
    assert _states(nodes.two)[changed.agent_id] == "unloaded"
    there = nodes.agent_on(nodes.two, changed)
    refused = assert_error(there.act("search"), 503, "quarantined")
    assert "seq 2" in refused["error"]
    assert "failed verification when it was first used" in refused["error"]
    refused = assert_error(there.client.get(changed.path), 503, "quarantined")
    assert "seq 2" in refused["error"]
    assert _states(nodes.two) == {changed.agent_id: "quarantined", sound.agent_id: "unloaded"}
    assert _by_state(nodes.two)["quarantined"] == 1
    assert ok(nodes.agent_on(nodes.two, sound).act("search"))["decision"] == "allowed"
    key = nodes.one.server.public_key
    assert audit_main(["verify", "--store", nodes.dsn, "--public-key", key, "--json"]) == 1


def test_requests_arriving_together_for_an_unloaded_agent_load_it_once(nodes: Nodes) -> None:
    (agent,) = _agents(nodes, 1)
    nodes.two.server.restart()
    there = nodes.agent_on(nodes.two, agent)

    def ask(k: int) -> httpx.Response:
        if k % 2:
            return there.client.get(agent.path)
        return there.act("search")

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(ask, range(16)))
    for answer in answers:
        ok(answer)
    assert ok(there.client.get(agent.path))["spent"] == 9
    assert nodes.two.server.read_output().count(f"agent {agent.agent_id}: loaded on first use") == 1


def test_a_named_policy_reaches_followers_the_node_has_not_loaded(nodes: Nodes) -> None:
    ok(nodes.one.admin.put("/v1/policies/team", json=POLICY | {"budget": 50}))
    followers = [nodes.one.new_id() for _ in range(3)]
    for agent_id in followers:
        body = {"agent_id": agent_id, "policy_ref": "team"}
        ok(nodes.one.admin.post("/v1/agents", json=body), 201)
    nodes.two.server.restart()
    put = ok(nodes.two.admin.put("/v1/policies/team", json=POLICY | {"budget": 70}))
    assert put["agents"] == sorted(followers)
    for agent_id in followers:
        assert ok(nodes.one.admin.get(f"/v1/agents/{agent_id}"))["budget"] == 70


def test_a_log_cut_behind_the_nodes_checkpoint_is_quarantined_on_first_use(nodes: Nodes) -> None:
    (agent,) = _agents(nodes, 1)
    there = nodes.agent_on(nodes.two, agent)
    for _ in range(3):
        ok(there.act("search"))
    nodes.two.server.restart()  # a graceful stop writes its checkpoint at the head
    run_sql(nodes.dsn, "delete from guard_logs where agent_id = $1 and seq > 3", agent.agent_id)
    assert _states(nodes.two)[agent.agent_id] == "unloaded"
    refused = assert_error(there.client.get(agent.path), 503, "quarantined")
    assert "failed verification when it was first used" in refused["error"]
    assert "checkpoint" in refused["error"]


def test_an_unreadable_checkpoint_is_found_on_first_use_not_at_the_start(nodes: Nodes) -> None:
    (agent,) = _agents(nodes, 1)
    there = nodes.agent_on(nodes.two, agent)
    ok(there.act("search"))
    server = nodes.two.server
    server.stop()
    checkpoint = server.data_dir / "store-checkpoints" / f"{agent.agent_id}.checkpoint"
    assert checkpoint.exists()
    checkpoint.write_bytes(b"not a checkpoint\n")
    server.start()
    assert _states(nodes.two)[agent.agent_id] == "unloaded"
    refused = assert_error(there.act("search"), 503, "quarantined")
    assert "failed verification when it was first used" in refused["error"]
    assert _states(nodes.two)[agent.agent_id] == "quarantined"
