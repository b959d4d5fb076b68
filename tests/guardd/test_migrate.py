"""``guardd migrate``: a data dir's file logs copied into a PostgreSQL store
byte for byte after verification; a failing log refused with its reason
while the rest are copied; harmless when run twice; never beside a running
guardd; and a node on the store then serves the migrated agents as they were."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from agents_runtime.log.checkpoint import signed_checkpoint
from agents_runtime.log.keys import Signer
from agents_runtime.log.record import Head
from tests.guardd.conftest import Agent, Api, assert_error, ok
from tests.support.postgres import run_sql, store_lines
from tests.support.server import GuardServer

POLICY = {"budget": 10, "scar_limit": 30, "tools": {"search": {"cost": 1}}}


def migrate(data_dir: Path, dsn: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "guardd", "migrate", "--data-dir", str(data_dir), "--store", dsn],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@contextlib.contextmanager
def store_node(data_dir: Path, dsn: str) -> Iterator[Api]:
    """A guardd on the store (with ``data_dir``'s keys), stopped afterwards."""
    api = Api(GuardServer(data_dir, args=["--store", dsn]).start())
    try:
        yield api
    finally:
        api.close()
        api.server.stop()


def seen_by(api: Api, agent: Agent) -> Agent:
    """``agent``, asking through ``api``'s node with its own token."""
    return Agent(agent.agent_id, agent.token, api.client(agent.token))


@pytest.fixture
def data_dir(tmp_path: Path) -> tuple[Path, dict[str, Agent]]:
    """A data dir whose guardd served three agents and was stopped."""
    server = GuardServer(tmp_path / "guard-data").start()
    api = Api(server)
    try:
        agents = {name: api.create(name, POLICY) for name in ("alpha", "beta", "gamma")}
        for k, agent in enumerate(agents.values()):
            for _ in range(k + 1):
                ok(agent.act("search"))
    finally:
        api.close()
        server.stop()
    return server.data_dir, agents


def test_every_log_is_copied_byte_for_byte(
    data_dir: tuple[Path, dict[str, Agent]], postgres_dsn: str
) -> None:
    root, agents = data_dir
    done = migrate(root, postgres_dsn)
    assert done.returncode == 0, done.stderr
    assert "migrated 3 agents (18 records); 0 already there; 0 refused" in done.stdout
    for name in agents:
        file_lines = (root / "agents" / f"{name}.jsonl").read_bytes().splitlines()
        assert store_lines(postgres_dsn, name) == file_lines


def test_a_log_that_fails_is_refused_with_its_reason_and_the_rest_copied(
    data_dir: tuple[Path, dict[str, Agent]], postgres_dsn: str
) -> None:
    root, _ = data_dir
    path = root / "agents" / "beta.jsonl"
    path.write_bytes(path.read_bytes().replace(b'"search"', b'"starch"', 1))
    done = migrate(root, postgres_dsn)
    assert done.returncode == 1
    # The policy record is the first to name the tool.
    assert "refused: beta: line 2 (seq 1): hash does not match content" in done.stdout
    assert "migrated 2 agents" in done.stdout
    assert store_lines(postgres_dsn, "beta") == []
    assert len(store_lines(postgres_dsn, "gamma")) == 8


def test_running_it_twice_is_harmless(
    data_dir: tuple[Path, dict[str, Agent]], postgres_dsn: str
) -> None:
    root, _ = data_dir
    assert migrate(root, postgres_dsn).returncode == 0
    again = migrate(root, postgres_dsn)
    assert again.returncode == 0, again.stderr
    assert "migrated 0 agents (0 records); 3 already there; 0 refused" in again.stdout
    assert len(store_lines(postgres_dsn, "alpha")) == 4


def test_it_will_not_run_beside_a_guardd_on_the_same_data_dir(
    data_dir: tuple[Path, dict[str, Agent]], postgres_dsn: str
) -> None:
    root, _ = data_dir
    server = GuardServer(root).start()
    try:
        done = migrate(root, postgres_dsn)
    finally:
        server.stop()
    assert done.returncode == 1
    assert "guardd migrate:" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_node_on_the_store_serves_the_migrated_agents_as_they_were(
    data_dir: tuple[Path, dict[str, Agent]], postgres_dsn: str
) -> None:
    root, agents = data_dir
    assert migrate(root, postgres_dsn).returncode == 0
    with store_node(root, postgres_dsn) as api:
        assert api.status(agents["gamma"])["spent"] == 3
        assert ok(seen_by(api, agents["gamma"]).act("search"))["remaining"] == 6


def test_a_store_url_that_is_not_postgresql_is_refused(tmp_path: Path) -> None:
    done = migrate(tmp_path, "mysql://db/guard")
    assert done.returncode == 1
    assert "--store must be a postgresql:// URL" in done.stderr


def test_a_log_nodes_wrote_more_to_since_counts_as_already_there(
    data_dir: tuple[Path, dict[str, Agent]], postgres_dsn: str
) -> None:
    root, agents = data_dir
    assert migrate(root, postgres_dsn).returncode == 0
    with store_node(root, postgres_dsn) as api:
        ok(seen_by(api, agents["alpha"]).act("search"))
    again = migrate(root, postgres_dsn)
    assert again.returncode == 0, again.stdout
    assert "already there: alpha (4 records; 2 more written by nodes since)" in again.stdout


def test_a_copy_cut_short_is_not_served_and_the_next_run_finishes_it(
    data_dir: tuple[Path, dict[str, Agent]], postgres_dsn: str
) -> None:
    root, agents = data_dir
    assert migrate(root, postgres_dsn).returncode == 0
    # As if a copy of gamma had stopped after three rows: unregistered, half there.
    run_sql(postgres_dsn, "delete from guard_agents where agent_id = 'gamma'")
    run_sql(postgres_dsn, "delete from guard_logs where agent_id = 'gamma' and seq >= 3")
    shutil.copytree(root / "keys", root / "node" / "keys")
    with store_node(root / "node", postgres_dsn) as api:
        assert_error(api.admin.get("/v1/agents/gamma"), 404, "not_found")
        assert "gamma" not in {e["agent_id"] for e in ok(api.admin.get("/v1/agents"))["agents"]}
        done = migrate(root, postgres_dsn)
        assert done.returncode == 0, done.stdout
        assert "copied: gamma (5 records, 3 were there)" in done.stdout
        assert api.status(agents["gamma"])["spent"] == 3


def test_checkpoints_count_as_at_startup_signed_ones_only_when_they_verify(
    data_dir: tuple[Path, dict[str, Agent]], postgres_dsn: str
) -> None:
    root, _ = data_dir
    # alpha's log cut behind its signed checkpoint: refused.
    alpha = root / "agents" / "alpha.jsonl"
    lines = alpha.read_bytes().splitlines(keepends=True)
    alpha.write_bytes(b"".join(lines[:-1]))
    # beta's checkpoint forged by another key, naming a head beyond its log:
    # ignored, as at startup, and beta copied.
    forged = signed_checkpoint("beta", Head(99, "ab" * 32), Signer(b"\x05" * 32))
    (root / "checkpoints" / "beta.checkpoint").write_bytes(forged)
    done = migrate(root, postgres_dsn)
    assert done.returncode == 1
    seq = len(lines) - 1
    assert f"refused: alpha: line {seq + 1} (seq {seq}): truncated before checkpoint" in done.stdout
    assert "beta: ignoring its checkpoint: it has no signature by the key guardd" in done.stdout
    assert "migrated 2 agents" in done.stdout
    assert store_lines(postgres_dsn, "beta") != []


def test_named_policies_are_copied_and_their_followers_keep_following(
    tmp_path: Path, postgres_dsn: str
) -> None:
    server = GuardServer(tmp_path / "guard-data").start()
    api = Api(server)
    try:
        ok(api.admin.put("/v1/policies/fleet", json=POLICY))
        ok(api.admin.post("/v1/agents", json={"agent_id": "follower", "policy_ref": "fleet"}), 201)
        ok(api.admin.put("/v1/policies/fleet", json={**POLICY, "budget": 20}))
    finally:
        api.close()
        server.stop()
    done = migrate(server.data_dir, postgres_dsn)
    assert done.returncode == 0, done.stdout
    assert "copied: named policy fleet (2 versions)" in done.stdout
    again = migrate(server.data_dir, postgres_dsn)
    assert "already there: named policy fleet (2 versions)" in again.stdout
    with store_node(server.data_dir, postgres_dsn) as node:
        shown = ok(node.admin.get("/v1/policies/fleet"))
        assert (shown["version"], shown["agents"]) == (2, ["follower"])
        put = ok(node.admin.put("/v1/policies/fleet", json={**POLICY, "budget": 30}))
        assert put["version"] == 3
        assert ok(node.admin.get("/v1/agents/follower"))["budget"] == 30


def store_operator_lines(dsn: str) -> list[bytes]:
    """The operators log's lines the store holds, in seq order."""
    import asyncio

    import asyncpg

    async def fetch() -> list[bytes]:
        conn = await asyncpg.connect(dsn)
        try:
            rows = await conn.fetch("select line from guard_operators order by seq")
        finally:
            await conn.close()
        return [bytes(r["line"]) for r in rows]

    return asyncio.run(fetch())


@pytest.fixture
def with_tokens(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A data dir whose guardd issued two operator tokens and revoked one,
    and on which the live one approved an action; stopped."""
    server = GuardServer(tmp_path / "guard-data").start()
    api = Api(server)
    try:
        issued = {
            name: ok(api.admin.post("/v1/operators/tokens", json={"name": name, "role": role}), 201)
            for name, role in (("release-bot", "approver"), ("old-bot", "viewer"))
        }
        ok(api.admin.post(f"/v1/operators/tokens/{issued['old-bot']['token_id']}/revoke"))
        held = {"search": {"cost": 1, "requires_approval": True}}
        agent = api.create("alpha", {**POLICY, "tools": held})
        ok(agent.act("search"))
        ok(
            api.client(issued["release-bot"]["token"]).post(
                f"{agent.path}/actions/act-1/approve", json={}
            )
        )
    finally:
        api.close()
        server.stop()
    return server.data_dir, {name: token["token"] for name, token in issued.items()}


def test_the_operators_log_is_copied_and_its_tokens_work_on_the_store(
    with_tokens: tuple[Path, dict[str, str]], postgres_dsn: str
) -> None:
    root, tokens = with_tokens
    done = migrate(root, postgres_dsn)
    assert done.returncode == 0, done.stdout
    assert "copied: the operators log (4 records)" in done.stdout
    file_lines = (root / "operators.jsonl").read_bytes().splitlines()
    assert store_operator_lines(postgres_dsn) == file_lines
    again = migrate(root, postgres_dsn)
    assert again.returncode == 0, again.stdout
    assert "already there: the operators log (4 records)" in again.stdout
    with store_node(root, postgres_dsn) as node:
        me = ok(node.client(tokens["release-bot"]).get("/v1/me"))
        assert (me["name"], me["via"]) == ("release-bot", "operator_token")
        assert_error(node.client(tokens["old-bot"]).get("/v1/me"), 401, "unauthorized")
        [allowed] = [
            r
            for r in ok(node.admin.get("/v1/agents/alpha/log"))["records"]
            if r["kind"] == "action_allowed"
        ]
        assert allowed["by_id"] == me["id"]


def test_an_operators_log_that_fails_is_refused_with_its_reason_and_the_agents_copied(
    with_tokens: tuple[Path, dict[str, str]], postgres_dsn: str
) -> None:
    root, _ = with_tokens
    path = root / "operators.jsonl"
    path.write_bytes(path.read_bytes().replace(b'"old-bot"', b'"odd-bot"', 1))
    done = migrate(root, postgres_dsn)
    assert done.returncode == 1
    assert "refused: the operators log: line 3 (seq 2): hash does not match content" in (
        done.stdout
    )
    assert "migrated 1 agents" in done.stdout
    assert store_operator_lines(postgres_dsn) == []


def test_a_store_holding_another_operators_log_is_refused(
    with_tokens: tuple[Path, dict[str, str]], postgres_dsn: str
) -> None:
    root, _ = with_tokens
    assert migrate(root, postgres_dsn).returncode == 0
    path = root / "operators.jsonl"
    lines = path.read_bytes().splitlines()
    run_sql(postgres_dsn, "delete from guard_operators where seq >= 1")
    run_sql(postgres_dsn, "insert into guard_operators (seq, line) values (1, $1)", lines[2])
    done = migrate(root, postgres_dsn)
    assert done.returncode == 1
    assert (
        "refused: the operators log: the store holds another one (2 records); nothing copied"
        in done.stdout
    )
