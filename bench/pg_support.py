"""What the PostgreSQL benchmarks share: a server of their own (the tests'
helper, tests/support/postgres.py), the log table, and real record lines.

The lines are taken from a real guardd's log, not made up: the two records
(``action_requested``, ``action_allowed``) guardd writes for one allowed
``decide`` of the HTTP benchmark, byte for byte as its log file holds them.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from bench.http_bench import DECIDE_BODY, admin_token, create_agents, guardd_server
from tests.support.postgres import PostgresServer

# The store's table: one row per record line.
LOG_TABLE = "guard_logs"
CREATE_LOG_TABLE = f"""
create table {LOG_TABLE} (
    agent_id text not null,
    seq bigint not null,
    line bytea not null,
    primary key (agent_id, seq)
)
"""


def decide_sample() -> tuple[list[bytes], int]:
    """The record lines of one allowed decide, from a guardd started for it
    (without their line feeds), and the size of guardd's answer to it."""
    agent_id = "bench-agent-000"
    with tempfile.TemporaryDirectory(prefix="guard-pg-lines-") as tmp:
        data_dir = Path(tmp) / "guard-data"
        server = guardd_server(data_dir)
        server.start(timeout=120.0)
        try:
            token = asyncio.run(create_agents(server.url, admin_token(data_dir), [agent_id]))[
                agent_id
            ]
            log = data_dir / "agents" / f"{agent_id}.jsonl"
            before = len(log.read_bytes().splitlines())
            response = httpx.post(
                f"{server.url}/v1/agents/{agent_id}/actions",
                json=DECIDE_BODY,
                headers={"Authorization": f"Bearer {token}"},
                timeout=30.0,
            )
            response.raise_for_status()
            if response.json().get("decision") != "allowed":
                raise RuntimeError(f"the decide was not allowed: {response.text}")
            # guardd answers only after its records are durable: they are in the file.
            lines = log.read_bytes().splitlines()[before:]
        finally:
            server.stop()
    if not lines:
        raise RuntimeError("guardd wrote no record for the decide")
    return lines, len(response.content)


@contextmanager
def bench_database() -> Iterator[tuple[PostgresServer, str]]:
    """A PostgreSQL server of our own with an empty log table; removed at the end."""
    server = PostgresServer()
    try:
        server.start()
        dsn = server.create_database("bench")
        server.psql(CREATE_LOG_TABLE, "bench")
        yield server, dsn
    finally:
        server.cleanup()


def reset_log_table(server: PostgresServer) -> None:
    """Empty the table and checkpoint, so each round starts from the same state."""
    server.psql(f"truncate {LOG_TABLE}", "bench")
    server.psql("checkpoint", "bench")


CLK_TCK = os.sysconf("SC_CLK_TCK")


def postgres_cpu_seconds(server: PostgresServer) -> float:
    """User + system CPU of the postmaster and its children (backends) so far;
    a backend that exited since is not counted."""
    if server.pid is None:
        return 0.0
    total = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        if int(entry.name) == server.pid or int(fields[1]) == server.pid:
            total += int(fields[11]) + int(fields[12])
    return total / CLK_TCK
