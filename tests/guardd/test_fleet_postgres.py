"""Named policies on a PostgreSQL store shared by two nodes: a version put
on either node reaches every follower, whichever node created it, and a
version stored before a crash reaches each follower when a node loads it."""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from agents_runtime.log import canonical
from agents_runtime.log.keys import load_keys
from agents_runtime.log.policies import seal_version, verify_versions
from tests.guardd.conftest import Api, ok
from tests.support.postgres import run_sql
from tests.support.server import GuardServer

POLICY: dict[str, Any] = {"budget": 10, "scar_limit": 30, "tools": {"search": {"cost": 1}}}
FLEET = 1_000  # followers of one named policy: a fleet of a thousand agents


def follow(apis: list[Api], ids: list[str]) -> None:
    """Create the agents of ``ids`` following ``fleet``, a few at a time,
    each on the node of ``apis`` its place in ``ids`` picks."""

    def create(n: int) -> None:
        body = {"agent_id": ids[n], "policy_ref": "fleet"}
        ok(apis[n % len(apis)].admin.post("/v1/agents", json=body), 201)

    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(create, range(len(ids))))


def node(data_dir: Path, dsn: str) -> GuardServer:
    return GuardServer(data_dir, args=["--store", dsn])


@pytest.fixture
def two(postgres_dsn: str, tmp_path: Path) -> Iterator[tuple[Api, Api]]:
    first = node(tmp_path / "node1", postgres_dsn).start()
    shutil.copytree(tmp_path / "node1" / "keys", tmp_path / "node2" / "keys")
    second = node(tmp_path / "node2", postgres_dsn).start()
    one, other = Api(first), Api(second)
    try:
        yield one, other
    finally:
        for api in (one, other):
            api.close()
            api.server.kill()


def newest_versions(dsn: str, ids: list[str]) -> dict[str, tuple[str, int]]:
    """Agent ID -> (policy_ref, version) of its newest policy record, read
    in one query (one connection per agent would be most of the test)."""

    async def fetch() -> list[Any]:
        conn = await asyncpg.connect(dsn)
        try:
            return await conn.fetch(
                "select agent_id, line from guard_logs where agent_id = any($1::text[])"
                " order by agent_id, seq",
                ids,
            )
        finally:
            await conn.close()

    newest: dict[str, tuple[str, int]] = {}
    for row in asyncio.run(fetch()):
        record = canonical.loads(bytes(row["line"]))
        if record["kind"] == "policy":
            newest[row["agent_id"]] = (record.get("policy_ref"), record.get("version"))
    return newest


def test_a_version_put_on_one_node_reaches_followers_created_on_both(
    two: tuple[Api, Api], postgres_dsn: str
) -> None:
    one, other = two
    ok(one.admin.put("/v1/policies/fleet", json=POLICY))
    ids = [f"pg-{n}" for n in range(FLEET)]
    follow([other, one], ids)
    put = ok(other.admin.put("/v1/policies/fleet", json={**POLICY, "budget": 20}))
    assert (put["version"], put["agents"]) == (2, sorted(ids))
    assert newest_versions(postgres_dsn, ids) == dict.fromkeys(ids, ("fleet", 2))
    shown = ok(one.admin.get("/v1/policies/fleet"))
    assert (shown["version"], shown["policy"]["budget"], len(shown["agents"])) == (2, 20, FLEET)


@pytest.mark.parametrize("restart", ["same-node", "other-node"])
def test_a_version_stored_before_a_crash_reaches_each_follower_when_it_is_loaded(
    postgres_dsn: str, tmp_path: Path, restart: str
) -> None:
    server = node(tmp_path / "node1", postgres_dsn).start()
    api = Api(server)
    nodes = [server]
    try:
        ok(api.admin.put("/v1/policies/fleet", json=POLICY))
        ids = [f"pg-{n}" for n in range(FLEET)]
        follow([api], ids)
        server.kill()
        # What a node killed right after storing version 2 leaves: the
        # signed row, and no follower's log holding it yet.
        signer = load_keys(server.data_dir / "keys").signer
        assert signer is not None
        assert not (server.data_dir / "policies").exists()  # the database keeps them
        (v1,) = verify_versions("fleet", _rows(postgres_dsn), bytes.fromhex(server.public_key))
        v2 = seal_version("fleet", {**v1.policy, "budget": 30}, after=v1, ts=v1.ts, signer=signer)
        run_sql(
            postgres_dsn,
            "insert into guard_policies (name, version, line) values ($1, $2, $3)",
            "fleet",
            2,
            v2.line,
        )
        assert newest_versions(postgres_dsn, ids) == dict.fromkeys(ids, ("fleet", 1))
        if restart == "other-node":  # the next node to start, whichever it is
            shutil.copytree(tmp_path / "node1" / "keys", tmp_path / "node2" / "keys")
            nodes.append(node(tmp_path / "node2", postgres_dsn))
        nodes[-1].start()
        # A node on a shared store loads each agent on its first use, and
        # finishes the fan-out for it before it answers anything.
        assert newest_versions(postgres_dsn, ids) == dict.fromkeys(ids, ("fleet", 1))
        other = Api(nodes[-1])
        try:
            assert ok(other.admin.get("/v1/agents/pg-1"))["budget"] == 30
            assert newest_versions(postgres_dsn, ["pg-1"]) == {"pg-1": ("fleet", 2)}
            # A named policy's listing loads them all (followers are known
            # from the logs only): each gets the version then.
            assert len(ok(other.admin.get("/v1/policies/fleet"))["agents"]) == FLEET
            assert newest_versions(postgres_dsn, ids) == dict.fromkeys(ids, ("fleet", 2))
        finally:
            other.close()
    finally:
        api.close()
        for started in nodes:
            started.kill()


def _rows(dsn: str) -> list[bytes]:
    """The signed lines of the named policy ``fleet``, oldest first."""

    async def fetch() -> list[bytes]:
        conn = await asyncpg.connect(dsn)
        try:
            rows = await conn.fetch(
                "select line from guard_policies where name = 'fleet' order by version"
            )
        finally:
            await conn.close()
        return [bytes(row["line"]) for row in rows]

    return asyncio.run(fetch())
