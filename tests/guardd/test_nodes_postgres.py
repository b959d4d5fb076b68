"""Several guardd nodes on one PostgreSQL store (docs/scale-out.md): any
node serves any agent with the answers one node would give, reads are never
stale, long-polls cross nodes, creation and Idempotency-Key repeats happen
once, keys must match, and an unreachable database answers 503."""

from __future__ import annotations

import concurrent.futures
import json
import shutil
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import attrs
import httpx
import pytest

from agents_runtime.log import canonical
from agents_runtime.log.keys import Signer, create_keys
from agents_runtime.log.record import Head, seal
from agents_runtime.log.verify import verify_lines
from audit.cli import main as audit_main
from tests.guardd.conftest import Agent, Api, assert_error, ok
from tests.support.postgres import PostgresServer, run_sql, store_lines
from tests.support.server import GuardServer

POLICY: dict[str, Any] = {
    "budget": 10,
    "scar_limit": 30,
    "tools": {
        "search": {"cost": 1},
        "send_email": {"cost": 2, "requires_approval": True},
    },
}


@attrs.frozen
class Nodes:
    one: Api
    two: Api
    dsn: str

    def agent_on(self, api: Api, agent: Agent) -> Agent:
        """The same agent, asked through another node."""
        return Agent(agent.agent_id, agent.token, api.client(agent.token))


def act(who: Agent, tool: str, **kwargs: Any) -> httpx.Response:
    """Ask as a client should: a 503 ``unavailable`` (here, nodes that kept
    colliding on one agent) is asked again; nothing was written."""
    for _ in range(50):
        answer = who.client.post(f"{who.path}/actions", json={"tool": tool}, **kwargs)
        if answer.status_code != 503:
            return answer
        assert_error(answer, 503, "unavailable")
    raise AssertionError("still 503 after 50 tries")


def node(data_dir: Path, dsn: str) -> GuardServer:
    return GuardServer(data_dir, args=["--store", dsn])


@pytest.fixture
def nodes(postgres_dsn: str, tmp_path: Path) -> Iterator[Nodes]:
    first = node(tmp_path / "node1", postgres_dsn).start()
    shutil.copytree(tmp_path / "node1" / "keys", tmp_path / "node2" / "keys")
    second = node(tmp_path / "node2", postgres_dsn).start()
    one, two = Api(first), Api(second)
    try:
        yield Nodes(one, two, postgres_dsn)
    finally:
        for api in (one, two):
            api.close()
            api.server.kill()


def test_an_agent_created_on_one_node_is_served_by_the_other(nodes: Nodes) -> None:
    agent = nodes.one.create(policy=POLICY)
    there = nodes.agent_on(nodes.two, agent)
    assert ok(there.client.get(agent.path))["spent"] == 0
    assert ok(there.act("search"))["decision"] == "allowed"
    # Read on the first node right after the second acknowledged: not stale.
    assert ok(agent.client.get(agent.path))["spent"] == 1
    assert ok(agent.act("search"))["remaining"] == 8
    assert ok(there.client.get(agent.path))["remaining"] == 8


def test_requests_spread_over_two_nodes_never_overspend(nodes: Nodes) -> None:
    agent = nodes.one.create(policy=POLICY)
    there = nodes.agent_on(nodes.two, agent)

    def ask(k: int) -> httpx.Response:
        return act(agent if k % 2 else there, "search")

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(ask, range(30)))
    decisions = [ok(a)["decision"] for a in answers]
    assert decisions.count("allowed") == 10
    assert decisions.count("denied") == 20
    ids = [ok(a)["action_id"] for a in answers]
    assert len(set(ids)) == 30
    for api in (nodes.one, nodes.two):
        status = api.status(agent)
        assert (status["spent"], status["remaining"]) == (10, 0)
    records = nodes.two.records(agent)
    allowed = [r for r in records if r["kind"] == "action_allowed"]
    assert sum(Decimal(str(r["cost"])) for r in allowed) == 10
    assert [r["seq"] for r in records] == list(range(len(records)))
    # Each node counts the batches it decided again after the other's write.
    for api in (nodes.one, nodes.two):
        metrics = api.admin.get("/metrics").text
        counted = [m for m in metrics.splitlines() if m.startswith("guard_store_conflicts_total ")]
        assert len(counted) == 1
        assert float(counted[0].split()[1]) >= 0


def test_the_log_in_the_store_verifies_and_is_the_same_from_every_node(nodes: Nodes) -> None:
    agent = nodes.one.create(policy=POLICY)
    there = nodes.agent_on(nodes.two, agent)
    for k in range(6):
        ok((agent if k % 2 else there).act("search"))
    exported = [api.records(agent) for api in (nodes.one, nodes.two)]
    assert exported[0] == exported[1]
    lines = store_lines(nodes.dsn, agent.agent_id)
    public_key = bytes.fromhex(nodes.one.server.public_key)
    report = verify_lines(lines, public_key=public_key, log_id=agent.agent_id)
    assert report.ok, report.failure
    assert report.records == len(exported[0])


def test_one_idempotency_key_sent_to_two_nodes_at_once_makes_one_action(nodes: Nodes) -> None:
    agent = nodes.one.create(policy=POLICY)
    there = nodes.agent_on(nodes.two, agent)
    headers = {"Idempotency-Key": "once-only"}

    def ask(who: Agent) -> httpx.Response:
        return act(who, "search", headers=headers)

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        answers = list(pool.map(ask, [agent, there, agent, there]))
    bodies = [ok(a) for a in answers]
    assert {b["action_id"] for b in bodies} == {"act-1"}
    assert nodes.two.status(agent)["spent"] == 1


def test_creating_one_agent_on_two_nodes_at_once_gives_one_201_and_one_409(
    nodes: Nodes,
) -> None:
    body = {"agent_id": "racer", "policy": POLICY}
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        answers = list(
            pool.map(lambda api: api.admin.post("/v1/agents", json=body), [nodes.one, nodes.two])
        )
    assert sorted(a.status_code for a in answers) == [201, 409]
    refused = next(a for a in answers if a.status_code == 409)
    assert_error(refused, 409, "agent_exists")


def test_a_long_poll_on_one_node_returns_soon_after_an_approval_on_the_other(
    nodes: Nodes,
) -> None:
    agent = nodes.one.create(policy=POLICY)
    held = ok(agent.act("send_email"))
    assert held["decision"] == "pending_approval"
    there = nodes.agent_on(nodes.two, agent)
    action = f"{agent.path}/actions/{held['action_id']}"

    def wait() -> tuple[float, dict[str, Any]]:
        answer = ok(there.client.get(action, params={"wait": 30}))
        return time.monotonic(), answer

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        waiting = pool.submit(wait)
        time.sleep(0.5)  # the long-poll is waiting on node two
        ok(nodes.one.approve(agent, held["action_id"]))
        approved_at = time.monotonic()
        returned_at, answer = waiting.result(timeout=30)
    assert answer["status"] == "allowed"
    assert returned_at - approved_at < 1.0


def test_a_node_whose_keys_differ_refuses_to_start(nodes: Nodes, tmp_path: Path) -> None:
    nodes.one.create(policy=POLICY)
    create_keys(tmp_path / "node3" / "keys")  # keys of its own, not the store's
    other = node(tmp_path / "node3", nodes.dsn)
    with pytest.raises(RuntimeError, match="guardd exited with 1") as failed:
        other.start()
    assert "this node's audit public key" in str(failed.value)
    assert nodes.one.server.public_key in str(failed.value)


def test_a_node_without_keys_on_a_store_with_logs_refuses_and_creates_none(
    nodes: Nodes, tmp_path: Path
) -> None:
    nodes.one.create(policy=POLICY)
    data_dir = tmp_path / "node4"
    with pytest.raises(RuntimeError, match="guardd exited with 1") as failed:
        node(data_dir, nodes.dsn).start()
    assert "has no keys" in str(failed.value)
    assert not (data_dir / "keys" / "audit.key").exists()


def test_the_store_url_shows_in_the_banner_without_its_password(
    postgres_dsn: str, tmp_path: Path
) -> None:
    # The test server trusts loopback, so any password connects.
    url = postgres_dsn.replace("@", ":s3cret-pw@", 1)
    server = node(tmp_path / "node", url).start()
    try:
        output = server.read_output()
    finally:
        server.kill()
    assert "store: PostgreSQL at postgresql://" in output
    assert ":***@127.0.0.1" in output
    assert "s3cret-pw" not in output


def test_an_unreachable_database_answers_503_then_the_node_recovers_by_itself(
    nodes: Nodes, postgres_server: PostgresServer
) -> None:
    agent = nodes.one.create(policy=POLICY)
    ok(agent.act("search"))
    postgres_server.stop("fast")
    try:
        assert_error(agent.act("search"), 503, "unavailable")
        assert_error(agent.client.get(agent.path), 503, "unavailable")
    finally:
        postgres_server.start()
    deadline = time.monotonic() + 20
    while True:
        answer = agent.act("search")
        if answer.status_code == 200 or time.monotonic() > deadline:
            break
        assert_error(answer, 503, "unavailable")
        time.sleep(0.2)
    assert ok(answer)["decision"] == "allowed"
    status = nodes.two.status(agent)
    assert status["spent"] == 2  # the refused request charged nothing


def test_the_agent_list_of_a_node_shows_agents_another_node_created(nodes: Nodes) -> None:
    before = {e["agent_id"] for e in ok(nodes.one.admin.get("/v1/agents"))["agents"]}
    agent = nodes.two.create(policy=POLICY)
    listed = {e["agent_id"]: e for e in ok(nodes.one.admin.get("/v1/agents"))["agents"]}
    assert set(listed) == before | {agent.agent_id}
    assert listed[agent.agent_id]["state"] == "unloaded"  # loaded on first use


def test_a_forged_row_another_writer_appended_quarantines_the_agent(nodes: Nodes) -> None:
    agent = nodes.one.create(policy=POLICY)
    ok(agent.act("search"))
    last = canonical.loads(store_lines(nodes.dsn, agent.agent_id)[-1])
    forger = Signer(bytes(32))  # not the store's key
    forged = seal(
        {"kind": "scar", "severity": "minor", "reason": "forged", "action_id": None},
        prev=Head(last["seq"], last["hash"]),
        ts=last["ts"],
        signer=forger,
    )
    run_sql(
        nodes.dsn,
        "insert into guard_logs (agent_id, seq, line) values ($1, $2, $3)",
        agent.agent_id,
        last["seq"] + 1,
        forged.line[:-1],
    )
    there = nodes.agent_on(nodes.two, agent)
    # The second node had not loaded the agent: it finds the row on its first use.
    for who, when in ((agent, "while serving"), (there, "when it was first used")):
        refused = assert_error(who.act("search"), 503, "quarantined")
        assert "signature" in refused["error"]
        refused = assert_error(who.client.get(agent.path), 503, "quarantined")
        assert f"failed verification {when}" in refused["error"]
    for api in (nodes.one, nodes.two):
        listed = {e["agent_id"]: e for e in ok(api.admin.get("/v1/agents"))["agents"]}
        assert listed[agent.agent_id]["state"] == "quarantined"


def test_a_node_killed_under_load_loses_no_acknowledged_decision(nodes: Nodes) -> None:
    agent = nodes.one.create(policy=POLICY | {"budget": 100000})
    there = nodes.agent_on(nodes.two, agent)
    acknowledged: list[str] = []
    stop_at = time.monotonic() + 3.0

    def client(who: Agent) -> None:
        while time.monotonic() < stop_at:
            try:
                answer = who.act("search")
            except httpx.TransportError:
                continue  # the killed node
            if answer.status_code == 200:
                acknowledged.append(answer.json()["action_id"])

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        running = [pool.submit(client, who) for who in (agent, agent, there, there)]
        time.sleep(1.0)
        nodes.one.server.kill()
        for future in running:
            future.result(timeout=30)
    assert len(acknowledged) > 10
    records = _store_records(nodes.dsn, agent.agent_id)
    allowed = {r["action_id"] for r in records if r["kind"] == "action_allowed"}
    assert set(acknowledged) <= allowed
    assert ok(there.act("search"))["decision"] == "allowed"  # the other node serves on
    report = verify_lines(
        store_lines(nodes.dsn, agent.agent_id),
        public_key=bytes.fromhex(nodes.two.server.public_key),
        log_id=agent.agent_id,
    )
    assert report.ok, report.failure


@pytest.mark.parametrize("mode", ["fast", "immediate"])
def test_nodes_recover_by_themselves_when_postgresql_restarts_under_load(
    nodes: Nodes, postgres_server: PostgresServer, mode: Any
) -> None:
    agent = nodes.one.create(policy=POLICY | {"budget": 100000})

    def restart(stop_at: float) -> None:
        time.sleep(1.0)
        postgres_server.restart(mode)

    acknowledged = _decide_under_load(nodes, agent, seconds=4.0, meanwhile=restart)
    _assert_every_acknowledged_decision_is_logged(nodes, agent, acknowledged)


def _decide_under_load(
    nodes: Nodes, agent: Agent, *, seconds: float, meanwhile: Callable[[float], None]
) -> list[str]:
    """Four clients, two a node, ask for ``seconds`` while ``meanwhile``
    (given the end time) breaks something; every answer is an allowance or
    503 ``unavailable``, never another error. The acknowledged action IDs."""
    there = nodes.agent_on(nodes.two, agent)
    acknowledged: list[str] = []
    stop_at = time.monotonic() + seconds

    def client(who: Agent) -> None:
        while time.monotonic() < stop_at:
            answer = who.act("search")
            if answer.status_code == 200:
                acknowledged.append(answer.json()["action_id"])
            else:
                assert_error(answer, 503, "unavailable")  # never a false success

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        running = [pool.submit(client, who) for who in (agent, agent, there, there)]
        meanwhile(stop_at)
        for future in running:
            future.result(timeout=60)
    return acknowledged


def _assert_every_acknowledged_decision_is_logged(
    nodes: Nodes, agent: Agent, acknowledged: list[str]
) -> None:
    """Both nodes serve again; every acknowledged allowance is in the
    store's log, the spend is that of the allowances logged, the chain verifies."""
    deadline = time.monotonic() + 20
    for who in (agent, nodes.agent_on(nodes.two, agent)):
        while (answer := who.act("search")).status_code != 200 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert ok(answer)["decision"] == "allowed"
    records = _store_records(nodes.dsn, agent.agent_id)
    allowed = [r for r in records if r["kind"] == "action_allowed"]
    assert set(acknowledged) <= {r["action_id"] for r in allowed}
    assert nodes.two.status(agent)["spent"] == len(allowed)
    report = verify_lines(
        store_lines(nodes.dsn, agent.agent_id),
        public_key=bytes.fromhex(nodes.one.server.public_key),
        log_id=agent.agent_id,
    )
    assert report.ok, report.failure


def _store_records(dsn: str, agent_id: str) -> list[dict[str, Any]]:
    return [canonical.loads(line) for line in store_lines(dsn, agent_id)]


def test_readyz_says_why_while_the_database_is_down(
    nodes: Nodes, postgres_server: PostgresServer
) -> None:
    assert nodes.one.http.get("/readyz").status_code == 200
    postgres_server.stop("fast")
    try:
        time.sleep(1.1)  # past the probe's reuse of its last answer
        answer = nodes.one.http.get("/readyz")
    finally:
        postgres_server.start()
    assert answer.status_code == 503
    assert "the store postgresql://" in answer.text
    assert "cannot be reached" in answer.text
    deadline = time.monotonic() + 20
    while nodes.one.http.get("/readyz").status_code != 200:
        assert time.monotonic() < deadline, "the node did not become ready again"
        time.sleep(0.3)


def test_three_nodes_spread_over_exactly_the_budget_and_replay_agrees(
    nodes: Nodes, tmp_path: Path
) -> None:
    shutil.copytree(nodes.one.server.data_dir / "keys", tmp_path / "node3" / "keys")
    third = Api(node(tmp_path / "node3", nodes.dsn).start())
    try:
        policy = POLICY | {"tools": {"search": {"cost": 1, "max_calls": 7}}}
        agent = nodes.one.create(policy=policy)
        askers = [nodes.agent_on(api, agent) for api in (nodes.one, nodes.two, third)]
        with concurrent.futures.ThreadPoolExecutor(9) as pool:
            answers = list(pool.map(lambda k: act(askers[k % 3], "search"), range(27)))
        decisions = [ok(a)["decision"] for a in answers]
        assert decisions.count("allowed") == 7  # the call cap, exact across nodes
        for api in (nodes.one, nodes.two, third):
            assert api.status(agent)["spent"] == 7
    finally:
        third.close()
        third.server.kill()
    log = tmp_path / "store.jsonl"
    log.write_bytes(b"".join(line + b"\n" for line in store_lines(nodes.dsn, agent.agent_id)))
    key = nodes.one.server.public_key
    assert audit_main(["replay", str(log), "--public-key", key, "--log-id", agent.agent_id]) == 0


def test_a_row_changed_in_the_database_quarantines_the_agent_at_the_next_start(
    nodes: Nodes,
) -> None:
    agent = nodes.one.create(policy=POLICY)
    ok(agent.act("search"))
    run_sql(
        nodes.dsn,
        "update guard_logs set line = convert_to(replace(convert_from(line, 'UTF8'),"
        " '\"search\"', '\"starch\"'), 'UTF8') where agent_id = $1 and seq = 2",
        agent.agent_id,
    )
    nodes.two.server.restart()
    there = nodes.agent_on(nodes.two, agent)
    refused = assert_error(there.act("search"), 503, "quarantined")
    assert "seq 2" in refused["error"]


def test_a_rate_window_is_exact_across_nodes(nodes: Nodes) -> None:
    policy = POLICY | {"budget": 100, "rate_limit": {"max_actions": 5, "window_secs": 3600}}
    agent = nodes.one.create(policy=policy)
    there = nodes.agent_on(nodes.two, agent)
    with concurrent.futures.ThreadPoolExecutor(6) as pool:
        answers = list(pool.map(lambda k: act(agent if k % 2 else there, "search"), range(16)))
    bodies = [ok(a) for a in answers]
    assert [b["decision"] for b in bodies].count("allowed") == 5
    denied = {b["reason"]["code"] for b in bodies if b["decision"] == "denied"}
    assert denied == {"rate_limited"}


def test_every_read_on_one_node_sees_a_write_the_other_acknowledged(nodes: Nodes) -> None:
    agent = nodes.one.create(policy=POLICY)
    there = nodes.agent_on(nodes.two, agent)
    ok(there.client.get(agent.path))  # node two has the agent loaded before the writes
    held = ok(agent.act("send_email"))["action_id"]
    pending = ok(nodes.two.admin.get(f"{agent.path}/actions/pending"))
    assert [p["action"]["action_id"] for p in pending["pending"]] == [held]
    ok(nodes.one.approve(agent, held))
    assert ok(there.client.get(f"{agent.path}/actions/{held}"))["status"] == "allowed"
    assert ok(nodes.two.admin.get(f"{agent.path}/actions/pending")) == {"pending": []}
    assert nodes.two.records(agent)[-1]["kind"] == "action_allowed"
    assert ok(there.client.get(agent.path))["spent"] == 2


def test_the_store_url_may_come_from_guard_store(postgres_dsn: str, tmp_path: Path) -> None:
    server = GuardServer(tmp_path / "node", env={"GUARD_STORE": postgres_dsn}).start()
    api = Api(server)
    try:
        agent = api.create(policy=POLICY)
        ok(agent.act("search"))
    finally:
        api.close()
        server.kill()
    assert "store: PostgreSQL at postgresql://" in server.read_output()
    assert len(store_lines(postgres_dsn, agent.agent_id)) == 4


def test_a_node_whose_token_key_differs_refuses_with_both_fingerprints(
    nodes: Nodes, tmp_path: Path
) -> None:
    keys = tmp_path / "node5" / "keys"
    shutil.copytree(nodes.one.server.data_dir / "keys", keys)
    (keys / "token.key").write_bytes(bytes(range(32)))
    with pytest.raises(RuntimeError, match="guardd exited with 1") as failed:
        node(tmp_path / "node5", nodes.dsn).start()
    message = str(failed.value)
    assert "this node's token.key (fingerprint " in message
    assert "is not the store's (fingerprint " in message
    assert bytes(range(32)).hex() not in message


def test_connections_killed_under_load_never_give_a_false_success(nodes: Nodes) -> None:
    # Kills land anywhere in a statement, a commit included: an append whose
    # outcome is unknown is read back before anyone is answered.
    agent = nodes.one.create(policy=POLICY | {"budget": 100000})

    def kill_connections(stop_at: float) -> None:
        while time.monotonic() < stop_at:
            run_sql(
                nodes.dsn,
                "select pg_terminate_backend(pid) from pg_stat_activity"
                " where datname = current_database() and pid <> pg_backend_pid()",
            )
            time.sleep(0.2)

    acknowledged = _decide_under_load(nodes, agent, seconds=3.0, meanwhile=kill_connections)
    _assert_every_acknowledged_decision_is_logged(nodes, agent, acknowledged)


def test_a_due_expiry_on_an_unreachable_database_is_tried_again_calmly(
    nodes: Nodes, postgres_server: PostgresServer
) -> None:
    agent = nodes.one.create(policy=POLICY | {"approval_timeout_secs": 1})
    assert ok(agent.act("send_email"))["decision"] == "pending_approval"
    before = nodes.one.server.read_output().count("reading the log of")
    postgres_server.stop("fast")
    try:
        time.sleep(3.0)  # the action falls due while the database is down
        started = time.monotonic()
        assert nodes.one.http.get("/healthz").status_code == 200
        assert time.monotonic() - started < 1.0  # the event loop is not spinning
    finally:
        postgres_server.start()
    tries = nodes.one.server.read_output().count("reading the log of") - before
    assert tries <= 6  # about one a second, not as fast as the loop can go
    deadline = time.monotonic() + 20
    while True:
        status = nodes.two.admin.get(f"{agent.path}/actions/act-1")
        if status.status_code == 200 and status.json()["status"] == "denied":
            break
        assert time.monotonic() < deadline, status.text
        time.sleep(0.3)
    assert status.json()["reason"]["code"] == "approval_expired"


def _assert_quarantined_for_a_gap(nodes: Nodes, agent: Agent, seq: int) -> None:
    """Every node answers 503 ``quarantined`` naming the gap at ``seq``, and
    lists the agent as quarantined."""
    for api in (nodes.one, nodes.two):
        who = nodes.agent_on(api, agent)
        refused = assert_error(who.act("search"), 503, "quarantined")
        assert f"(seq {seq}): gap: a committed record is gone from the store" in refused["error"]
        assert_error(who.client.get(agent.path), 503, "quarantined")
        listed = {e["agent_id"]: e for e in ok(api.admin.get("/v1/agents"))["agents"]}
        assert listed[agent.agent_id]["state"] == "quarantined"
        assert listed[agent.agent_id]["failure"] == {
            "line": seq + 1,
            "seq": seq,
            "reason": "gap: a committed record is gone from the store",
        }


def test_rows_deleted_under_running_nodes_quarantine_the_agent_and_nothing_is_written_after(
    nodes: Nodes,
) -> None:
    agent = nodes.one.create(policy=POLICY | {"budget": 100})
    there = nodes.agent_on(nodes.two, agent)
    for k in range(4):
        ok((agent if k % 2 else there).act("search"))
    for who in (agent, there):  # both nodes hold the agent at its last record
        ok(who.client.get(agent.path))
    last = len(store_lines(nodes.dsn, agent.agent_id)) - 1
    run_sql(
        nodes.dsn,
        "delete from guard_logs where agent_id = $1 and seq >= $2",
        agent.agent_id,
        last - 1,
    )
    _assert_quarantined_for_a_gap(nodes, agent, last)
    assert len(store_lines(nodes.dsn, agent.agent_id)) == last - 1  # nothing after the hole


def test_a_node_behind_the_deleted_rows_learns_of_them_from_the_notices_and_writes_nothing(
    nodes: Nodes,
) -> None:
    agent = nodes.one.create(policy=POLICY | {"budget": 100})
    there = nodes.agent_on(nodes.two, agent)
    ok(there.client.get(agent.path))  # node two holds the agent at its policy record
    for _ in range(3):
        ok(agent.act("search"))  # node two hears of each but reads none of them
    time.sleep(1.0)  # the notices reach node two
    lines = len(store_lines(nodes.dsn, agent.agent_id))
    run_sql(nodes.dsn, "delete from guard_logs where agent_id = $1 and seq >= 2", agent.agent_id)
    _assert_quarantined_for_a_gap_on_two_then_one(nodes, agent, lines)
    assert len(store_lines(nodes.dsn, agent.agent_id)) == 2


def _assert_quarantined_for_a_gap_on_two_then_one(nodes: Nodes, agent: Agent, lines: int) -> None:
    there = nodes.agent_on(nodes.two, agent)
    refused = assert_error(there.act("search"), 503, "quarantined")
    assert "(seq 2): gap: a committed record is gone from the store" in refused["error"]
    refused = assert_error(agent.act("search"), 503, "quarantined")
    assert f"(seq {lines - 1}): gap: a committed record is gone from the store" in refused["error"]


def test_a_token_revoked_on_one_node_is_refused_by_the_other_within_a_second(
    nodes: Nodes,
) -> None:
    issued = ok(
        nodes.one.admin.post("/v1/operators/tokens", json={"name": "roamer", "role": "viewer"}),
        201,
    )
    there = nodes.two.client(issued["token"])
    for _ in range(40):  # bounded: the other node reads the operators log twice a second
        if there.get("/v1/me").status_code == 200:
            break
        time.sleep(0.05)
    assert ok(there.get("/v1/me"))["id"] == f"token:{issued['token_id']}"
    ok(nodes.two.admin.post(f"/v1/operators/tokens/{issued['token_id']}/revoke"))
    here = nodes.one.client(issued["token"])
    time.sleep(1.0)  # the promise: refused on every node within a second
    assert_error(here.get("/v1/me"), 401, "unauthorized")
    listed = ok(nodes.one.admin.get("/v1/operators/tokens"))["tokens"]
    assert [t["status"] for t in listed] == ["revoked"]


def test_a_token_past_its_expiry_is_refused_by_every_node(nodes: Nodes) -> None:
    body = {"name": "brief", "role": "viewer", "ttl_secs": 2}
    issued = ok(nodes.one.admin.post("/v1/operators/tokens", json=body), 201)
    there = nodes.two.client(issued["token"])
    for _ in range(40):  # bounded: the other node reads the operators log twice a second
        if there.get("/v1/me").status_code == 200:
            break
        time.sleep(0.05)
    assert ok(there.get("/v1/me"))["name"] == "brief"  # known on both, still live
    expires = datetime.fromisoformat(issued["expires_at"].replace("Z", "+00:00"))
    time.sleep(max(0.0, (expires - datetime.now(UTC)).total_seconds()) + 0.1)
    # Each node compares the expiry the log records with its clock: no record
    # has to travel, so both refuse it at once.
    for api in (nodes.one, nodes.two):
        assert_error(api.client(issued["token"]).get("/v1/me"), 401, "unauthorized")
        listed = ok(api.admin.get("/v1/operators/tokens"))["tokens"]
        assert [t["status"] for t in listed] == ["expired"]


def test_tokens_issued_on_two_nodes_make_one_operators_log_that_audit_verifies(
    nodes: Nodes, capsys: pytest.CaptureFixture[str]
) -> None:
    for k in range(6):
        api = nodes.one if k % 2 else nodes.two
        ok(api.admin.post("/v1/operators/tokens", json={"name": f"n{k}", "role": "viewer"}), 201)
    names = [t["name"] for t in ok(nodes.two.admin.get("/v1/operators/tokens"))["tokens"]]
    assert sorted(names) == [f"n{k}" for k in range(6)]
    key = nodes.one.server.public_key
    assert audit_main(["verify", "--store", nodes.dsn, "--public-key", key, "--json"]) == 0
    reports = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    operators = [r for r in reports if r["agent_id"] == "operators log"]
    assert len(operators) == 1
    assert operators[0]["ok"] is True
    assert operators[0]["records"] == 7


def test_two_approvals_on_two_nodes_allow_once_and_the_same_operator_twice_is_409(
    nodes: Nodes,
) -> None:
    policy = {**POLICY, "tools": {"deploy": {"requires_approval": True, "approvals_required": 2}}}
    agent = nodes.one.create(policy=policy)
    action_id = ok(act(agent, "deploy"))["action_id"]
    tokens = {}
    for name in ("ann", "bob"):
        body = {"name": name, "role": "approver"}
        tokens[name] = ok(nodes.one.admin.post("/v1/operators/tokens", json=body), 201)["token"]
    ann = nodes.one.client(tokens["ann"])
    path = f"{agent.path}/actions/{action_id}/approve"
    assert ok(ann.post(path, json={}))["decision"] == "pending_approval"
    for _ in range(40):  # bounded: node two reads the operators log twice a second
        if nodes.two.client(tokens["bob"]).get("/v1/me").status_code == 200:
            break
        time.sleep(0.05)
    ann_there = nodes.two.client(tokens["ann"])
    assert_error(ann_there.post(path, json={}), 409, "invalid_state")
    bob_there = nodes.two.client(tokens["bob"])
    assert ok(bob_there.post(path, json={}))["decision"] == "allowed"
    allowed = nodes.one.records(agent)[-1]
    assert [a["by"] for a in allowed["approvers"]] == ["ann", "bob"]
