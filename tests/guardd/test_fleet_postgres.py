"""Named policies on a PostgreSQL store shared by two nodes: a version put
on either node reaches every follower, whichever node created it, and a
version stored before a crash reaches each follower when a node loads it."""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from agents_runtime.log import canonical
from agents_runtime.log.keys import load_keys
from agents_runtime.log.policies import seal_version, verify_versions
from tests.guardd.conftest import Api, ok
from tests.support.postgres import run_sql, store_lines
from tests.support.server import GuardServer

POLICY: dict[str, Any] = {"budget": 10, "scar_limit": 30, "tools": {"search": {"cost": 1}}}


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


def newest_policy(dsn: str, agent_id: str) -> dict[str, Any]:
    records = [canonical.loads(line) for line in store_lines(dsn, agent_id)]
    return [r for r in records if r["kind"] == "policy"][-1]  # type: ignore[no-any-return]


def test_a_version_put_on_one_node_reaches_followers_created_on_both(
    two: tuple[Api, Api], postgres_dsn: str
) -> None:
    one, other = two
    ok(one.admin.put("/v1/policies/fleet", json=POLICY))
    ids = [f"pg-{n}" for n in range(40)]
    for n, agent_id in enumerate(ids):
        api = one if n % 2 else other
        ok(api.admin.post("/v1/agents", json={"agent_id": agent_id, "policy_ref": "fleet"}), 201)
    put = ok(other.admin.put("/v1/policies/fleet", json={**POLICY, "budget": 20}))
    assert (put["version"], put["agents"]) == (2, sorted(ids))
    for agent_id in ids:
        newest = newest_policy(postgres_dsn, agent_id)
        assert (newest["policy_ref"], newest["version"]) == ("fleet", 2)
    shown = ok(one.admin.get("/v1/policies/fleet"))
    assert (shown["version"], shown["policy"]["budget"], len(shown["agents"])) == (2, 20, 40)


def test_a_version_stored_before_a_crash_reaches_each_follower_when_it_is_loaded(
    postgres_dsn: str, tmp_path: Path
) -> None:
    server = node(tmp_path / "node1", postgres_dsn).start()
    api = Api(server)
    try:
        ok(api.admin.put("/v1/policies/fleet", json=POLICY))
        ids = [f"pg-{n}" for n in range(30)]
        for agent_id in ids:
            body = {"agent_id": agent_id, "policy_ref": "fleet"}
            ok(api.admin.post("/v1/agents", json=body), 201)
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
        assert {newest_policy(postgres_dsn, a)["version"] for a in ids} == {1}
        server.start()
        # A node on a shared store loads each agent on its first use, and
        # finishes the fan-out for it before it answers anything.
        assert {newest_policy(postgres_dsn, a)["version"] for a in ids} == {1}
        assert ok(api.admin.get("/v1/agents/pg-1"))["budget"] == 30
        assert newest_policy(postgres_dsn, "pg-1")["version"] == 2
        # A named policy's listing loads them all (followers are known from
        # the logs only): each gets the version then.
        assert len(ok(api.admin.get("/v1/policies/fleet"))["agents"]) == 30
        assert {newest_policy(postgres_dsn, a)["version"] for a in ids} == {2}
    finally:
        api.close()
        server.kill()


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
