"""Driver probe: asyncpg against psycopg 3 (async, pooled) on what the
PostgreSQL store does most, to choose its driver by measurement.

Against a PostgreSQL server of its own (fsync and synchronous_commit on),
64 tasks, each the actor of its own agent, commit batches of real record
lines (``bench/pg_support.py``) into a table keyed ``(agent_id, seq)``, as
fast as they can through a pool. Two ways of writing a batch, each atomic:

  tx      BEGIN, one INSERT per line (the driver's executemany), COMMIT
  unnest  one INSERT ... SELECT FROM unnest($seqs, $lines): a single
          statement, its own transaction, one round trip

at batch sizes 1 and 16. Drivers are measured in turns (ABBA), the table
emptied and checkpointed before each turn. It prints commits/s, rows/s, the
latency of a commit, and the CPU this process (the driver) and the server
spent per commit.

Not part of ``python -m bench`` (no target, a measurement behind a choice:
docs/design.md). Needs both drivers: ``pip install asyncpg 'psycopg[binary]'
psycopg-pool``. Bounded: about 2 x ways x sizes x rounds x duration seconds.

    python -m bench.pg_driver_probe
    python -m bench.pg_driver_probe --duration 3 --rounds 1 --pool 16,64
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import statistics
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import attrs

from bench.pg_support import (
    LOG_TABLE,
    bench_database,
    decide_sample,
    postgres_cpu_seconds,
    reset_log_table,
)
from guardd.__main__ import run_event_loop
from tests.support.postgres import PostgresServer

DRIVERS = ("asyncpg", "psycopg")
WAYS = ("tx", "unnest")
BATCHES = (1, 16)
TASKS = 64

# A batch writer: (agent_id, first seq, lines) -> None, one committed transaction.
Writer = Callable[[str, int, Sequence[bytes]], Awaitable[None]]


@attrs.frozen
class Result:
    driver: str
    way: str
    batch: int
    pool: int
    commits: int
    seconds: float
    latencies_ms: list[float]
    client_cpu: float  # seconds of this process
    server_cpu: float  # seconds of the server's processes

    @property
    def commits_s(self) -> float:
        return self.commits / self.seconds

    @property
    def rows_s(self) -> float:
        return self.commits * self.batch / self.seconds

    def quantile(self, q: float) -> float:
        ordered = sorted(self.latencies_ms)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0

    @property
    def client_us_per_commit(self) -> float:
        return 1e6 * self.client_cpu / max(1, self.commits)

    @property
    def server_us_per_commit(self) -> float:
        return 1e6 * self.server_cpu / max(1, self.commits)


def process_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


INSERT_ONE = f"insert into {LOG_TABLE} (agent_id, seq, line) values ($1, $2, $3)"  # noqa: S608
INSERT_UNNEST = (
    f"insert into {LOG_TABLE} (agent_id, seq, line)"  # noqa: S608
    " select $1, s, l from unnest($2::bigint[], $3::bytea[]) as u(s, l)"
)


async def asyncpg_writers(dsn: str, pool_size: int) -> tuple[dict[str, Writer], Any]:
    import asyncpg

    pool = await asyncpg.create_pool(dsn, min_size=pool_size, max_size=pool_size)

    async def tx(agent_id: str, seq: int, lines: Sequence[bytes]) -> None:
        rows = [(agent_id, seq + k, line) for k, line in enumerate(lines)]
        async with pool.acquire() as conn, conn.transaction():
            await conn.executemany(INSERT_ONE, rows)

    async def unnest(agent_id: str, seq: int, lines: Sequence[bytes]) -> None:
        seqs = list(range(seq, seq + len(lines)))
        async with pool.acquire() as conn:
            await conn.execute(INSERT_UNNEST, agent_id, seqs, list(lines))

    return {"tx": tx, "unnest": unnest}, pool.close


async def psycopg_writers(dsn: str, pool_size: int) -> tuple[dict[str, Writer], Any]:
    from psycopg_pool import AsyncConnectionPool

    pool = AsyncConnectionPool(
        dsn, min_size=pool_size, max_size=pool_size, open=False, kwargs={"autocommit": True}
    )
    await pool.open(wait=True)
    insert_one = INSERT_ONE.replace("$1", "%s").replace("$2", "%s").replace("$3", "%s")
    insert_unnest = INSERT_UNNEST.replace("$1", "%s").replace("$2", "%s").replace("$3", "%s")

    async def tx(agent_id: str, seq: int, lines: Sequence[bytes]) -> None:
        rows = [(agent_id, seq + k, line) for k, line in enumerate(lines)]
        async with pool.connection() as conn, conn.transaction(), conn.cursor() as cur:
            await cur.executemany(insert_one, rows)

    async def unnest(agent_id: str, seq: int, lines: Sequence[bytes]) -> None:
        seqs = list(range(seq, seq + len(lines)))
        async with pool.connection() as conn:
            await conn.execute(insert_unnest, (agent_id, seqs, list(lines)))

    return {"tx": tx, "unnest": unnest}, pool.close


async def measure(
    server: PostgresServer,
    dsn: str,
    driver: str,
    way: str,
    batch: int,
    pool_size: int,
    duration: float,
    lines: Sequence[bytes],
) -> Result:
    make = asyncpg_writers if driver == "asyncpg" else psycopg_writers
    writers, close = await make(dsn, pool_size)
    write = writers[way]
    batch_lines = [lines[k % len(lines)] for k in range(batch)]
    latencies: list[float] = []
    commits = 0
    try:
        # Warm-up: connections made, statements prepared, before the clock starts.
        await asyncio.gather(*(write(f"warm-{t}", 0, batch_lines) for t in range(TASKS)))
        stop_at = 0.0

        async def actor(task: int) -> None:
            nonlocal commits
            agent_id = f"bench-agent-{task:03d}"
            seq = 0
            while time.perf_counter() < stop_at:
                started = time.perf_counter()
                await write(agent_id, seq, batch_lines)
                latencies.append((time.perf_counter() - started) * 1000)
                seq += batch
                commits += 1

        cpu_before, server_before = process_cpu_seconds(), postgres_cpu_seconds(server)
        started = time.perf_counter()
        stop_at = started + duration
        await asyncio.gather(*(actor(t) for t in range(TASKS)))
        seconds = time.perf_counter() - started
        cpu = process_cpu_seconds() - cpu_before
        server_cpu = postgres_cpu_seconds(server) - server_before
    finally:
        await close()
    return Result(driver, way, batch, pool_size, commits, seconds, latencies, cpu, server_cpu)


def format_result(r: Result) -> str:
    return (
        f"  {r.driver:8s} {r.way:6s} batch {r.batch:2d} pool {r.pool:2d}:"
        f" {r.commits_s:7.0f} commits/s {r.rows_s:8.0f} rows/s"
        f"  p50 {r.quantile(0.5):6.2f} ms p99 {r.quantile(0.99):6.2f} ms"
        f"  cpu/commit: driver {r.client_us_per_commit:5.0f} us,"
        f" server {r.server_us_per_commit:5.0f} us"
    )


def summarise(results: Sequence[Result]) -> dict[str, Any]:
    """Median of the rounds per (way, batch, pool): each driver and their ratio."""
    out: dict[str, Any] = {}
    keys = sorted({(r.way, r.batch, r.pool) for r in results})
    for way, batch, pool in keys:
        medians = {}
        for driver in DRIVERS:
            mine = [
                r
                for r in results
                if (r.driver, r.way, r.batch, r.pool) == (driver, way, batch, pool)
            ]
            if not mine:
                continue
            medians[driver] = (
                statistics.median(r.commits_s for r in mine),
                statistics.median(r.rows_s for r in mine),
                statistics.median(r.client_us_per_commit for r in mine),
                statistics.median(r.quantile(0.99) for r in mine),
            )
        text = "; ".join(
            f"{d} {c:.0f} commits/s, {rows:.0f} rows/s, p99 {p99:.1f} ms, driver cpu {cpu:.0f} us"
            for d, (c, rows, cpu, p99) in medians.items()
        )
        if len(medians) == 2:
            ratio = medians["asyncpg"][0] / medians["psycopg"][0]
            text += f"; asyncpg/psycopg {ratio:.2f}x"
        out[f"{way}_b{batch}_pool{pool}"] = text
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(
        prog="python -m bench.pg_driver_probe",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--duration", type=float, default=5.0, help="seconds per round")
    parser.add_argument("--rounds", type=int, default=2, help="rounds per driver, ABBA")
    parser.add_argument("--pool", default="16", help="pool sizes, comma-separated")
    parser.add_argument("--batches", default=",".join(map(str, BATCHES)))
    parser.add_argument("--ways", default=",".join(WAYS))
    args = parser.parse_args([] if argv is None else argv)
    pools = [int(p) for p in args.pool.split(",") if p]
    batches = [int(b) for b in args.batches.split(",") if b]
    ways = [w for w in args.ways.split(",") if w]
    if unknown := set(ways) - set(WAYS):
        parser.error(f"unknown ways: {', '.join(sorted(unknown))}")

    lines, _ = decide_sample()
    print(
        f"pg_driver_probe: {os.cpu_count()} cores, load {os.getloadavg()[0]:.2f};"
        f" {TASKS} tasks, lines of {', '.join(str(len(x)) for x in lines)} bytes,"
        f" {args.duration:g} s rounds x {args.rounds} per driver"
    )
    results: list[Result] = []
    with bench_database() as (server, dsn):
        print(f"  PostgreSQL {server.psql('show server_version').strip()} ({server.bin_dir})")
        for pool in pools:
            for way in ways:
                for batch in batches:
                    for k in range(args.rounds):
                        order = DRIVERS if k % 2 == 0 else DRIVERS[::-1]
                        for driver in order:
                            reset_log_table(server)
                            result = _run(
                                measure(server, dsn, driver, way, batch, pool, args.duration, lines)
                            )
                            print(format_result(result), flush=True)
                            results.append(result)
    out = summarise(results)
    for key, value in out.items():
        print(f"  {key}: {value}")
    return out


def _run(coro: Awaitable[Result]) -> Result:
    box: list[Result] = []

    async def wrapper() -> None:
        box.append(await coro)

    run_event_loop(wrapper())
    return box[0]


if __name__ == "__main__":
    main(sys.argv[1:])
