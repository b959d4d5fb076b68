"""PostgreSQL benchmark: guardd on PostgreSQL against a floor in the same run.

The floor is the bare Quart app of the HTTP benchmark (guardd's Hypercorn
settings and event loop) whose ``POST /v1/agents/<id>/actions`` handler
writes the record lines guardd writes for an allowed ``decide`` (taken from
a real guardd's log, ``bench/pg_support.py``) into the store's table with
the store's driver (asyncpg, pooled), and answers a body of the size guardd
answers. Commits are grouped as a store would: a handler puts its lines in a
queue, and one writer task takes everything waiting, inserts it in one
transaction (one statement over arrays), then wakes those handlers. With
``--writers N``, N such writers share the queue: while one commits, the next
takes what arrived meanwhile. No decisions, no signing, no state but a
sequence counter. wrk drives it at c=64 with bench/wrk/guard.lua over 100
agents; the server is a PostgreSQL of our own (fsync and synchronous_commit
on), removed at the end.

Modes:
  floor   the floor alone
  guardd  decide through guardd on PostgreSQL (--store), one node against the
          floor, rounds interleaved (ABBA); then two nodes on one database,
          with and without agent-affinity routing, and their conflict rate
          (target: one node >= 0.6x the floor)
  conflict  the cost of a lost race against the length of the agent's log:
          two nodes on one database ask for decisions of one agent at once
          (each request races the other node's), on an agent whose log holds
          1,000 records and on one of --records records (default 1,000,000);
          the p99 of those requests on the long log against the short
          (target: <= 2x)

    python -m bench pg                          # guardd against the floor
    python -m bench.pg_bench floor --duration 5 --rounds 1
    python -m bench.pg_bench conflict --records 50000 --requests 200  # a quick look
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx
from hypercorn.asyncio import serve
from prometheus_client.parser import text_string_to_metric_families
from quart import Quart, request

from bench.http_bench import (
    N_AGENTS,
    Round,
    Server,
    admin_token,
    create_agents,
    format_round,
    free_port,
    guardd_server,
    run_wrk,
    write_wrk_data,
)
from bench.pg_support import (
    LOG_TABLE,
    bench_database,
    decide_sample,
    postgres_cpu_seconds,
    reset_log_table,
)
from guardd.__main__ import hypercorn_config, run_event_loop

CONCURRENCY = 64
MODES = ("floor", "guardd", "conflict")
# How often a racing request refused with 503 (the node kept losing its
# races) is asked again, as the SDK's clients do; its time counts them all.
RETRIES = 5
# The conflict mode: the short log, the target, and requests per node. The
# p99 of 3,000 requests is their 30th slowest: 600 (the sixth slowest) left
# it to the few requests that lost several races in a row, and moved it by
# 2x from run to run on the same code.
CONFLICT_SHORT = 1000
CONFLICT_TARGET = 2.0
CONFLICT_REQUESTS = 1500
# One statement, so one transaction and one round trip, whatever the batch.
INSERT_BATCH = (
    f"insert into {LOG_TABLE} (agent_id, seq, line)"  # noqa: S608
    " select * from unnest($1::text[], $2::bigint[], $3::bytea[])"
)


# -- the floor app ----------------------------------------------------------------


class GroupCommit:
    """Writer tasks (``run``, once per writer): everything waiting when a
    writer is free goes into its next transaction."""

    def __init__(self, pool: Any, lines: Sequence[bytes]) -> None:
        self.pool = pool
        self.lines = list(lines)
        self.waiting: list[tuple[str, asyncio.Future[None]]] = []
        self.wake = asyncio.Event()
        self.next_seq = 0
        self.commits = 0
        self.rows = 0

    async def append(self, agent_id: str) -> None:
        """Return once this request's lines are committed."""
        done = asyncio.get_running_loop().create_future()
        self.waiting.append((agent_id, done))
        self.wake.set()
        await done

    async def run(self) -> None:
        while True:
            await self.wake.wait()
            self.wake.clear()
            batch, self.waiting = self.waiting, []
            if not batch:
                continue
            agent_ids: list[str] = []
            seqs: list[int] = []
            lines: list[bytes] = []
            for agent_id, _ in batch:
                for line in self.lines:
                    agent_ids.append(agent_id)
                    seqs.append(self.next_seq)
                    lines.append(line)
                    self.next_seq += 1
            try:
                async with self.pool.acquire() as conn:
                    await conn.execute(INSERT_BATCH, agent_ids, seqs, lines)
            except Exception as exc:  # every waiter learns it, the writer goes on
                for _, done in batch:
                    if not done.done():
                        done.set_exception(exc)
                continue
            self.commits += 1
            self.rows += len(lines)
            for _, done in batch:
                if not done.done():
                    done.set_result(None)


def create_pg_floor_app(
    dsn: str, lines: Sequence[bytes], answer_size: int, writers: int = 1
) -> Quart:
    import asyncpg

    app = Quart("pg-floor", static_folder=None)
    state: dict[str, Any] = {}
    body: dict[str, Any] = {"ok": True, "pad": ""}
    body["pad"] = "x" * max(0, answer_size - len(app.json.dumps(body)) - 1)

    @app.before_serving
    async def open_pool() -> None:
        state["pool"] = await asyncpg.create_pool(dsn, min_size=writers, max_size=writers)
        state["group"] = GroupCommit(state["pool"], lines)
        loop = asyncio.get_running_loop()
        state["writers"] = [loop.create_task(state["group"].run()) for _ in range(writers)]

    @app.after_serving
    async def close_pool() -> None:
        for writer in state["writers"]:
            writer.cancel()
        await state["pool"].close()

    @app.get("/healthz")
    async def healthz() -> dict[str, Any]:
        return {"ok": True}

    @app.get("/_stats")
    async def stats() -> dict[str, Any]:
        group: GroupCommit = state["group"]
        return {"commits": group.commits, "rows": group.rows}

    @app.post("/v1/agents/<agent_id>/actions")
    async def request_action(agent_id: str) -> dict[str, Any]:
        await request.get_json()
        await state["group"].append(agent_id)
        return body

    return app


async def _serve(
    port: int, dsn: str, lines: Sequence[bytes], answer_size: int, writers: int
) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    app = create_pg_floor_app(dsn, lines, answer_size, writers)
    await serve(app, hypercorn_config("127.0.0.1", port), shutdown_trigger=stop.wait)


def serve_floor(port: int, dsn: str, lines_file: Path, answer_size: int, writers: int) -> int:
    lines = lines_file.read_bytes().splitlines()
    run_event_loop(_serve(port, dsn, lines, answer_size, writers))
    return 0


# -- the benchmark ------------------------------------------------------------------


def floor_server(
    work_dir: Path, dsn: str, lines: Sequence[bytes], answer_size: int, writers: int = 1
) -> Server:
    lines_file = work_dir / "record-lines"
    lines_file.write_bytes(b"".join(line + b"\n" for line in lines))
    port = free_port()
    argv = [
        sys.executable,
        "-m",
        "bench.pg_bench",
        "--serve-floor",
        "--port",
        str(port),
        "--dsn",
        dsn,
        "--lines",
        str(lines_file),
        "--answer-size",
        str(answer_size),
        "--writers",
        str(writers),
    ]
    return Server("floor", argv, port, work_dir / f"pg-floor-{port}.out")


def floor_stats(server: Server) -> dict[str, int]:
    response = httpx.get(f"{server.url}/_stats", timeout=30.0)
    response.raise_for_status()
    return {key: int(value) for key, value in response.json().items()}


def run_floor(duration: float, rounds: int, warmup: float, writers: int = 1) -> dict[str, Any]:
    lines, answer_size = decide_sample()
    print(
        f"pg_bench floor: {os.cpu_count()} cores, load {os.getloadavg()[0]:.2f};"
        f" decide c={CONCURRENCY}, {duration:g} s rounds x {rounds}, {writers} writer(s);"
        f" record lines of {', '.join(str(len(x)) for x in lines)} bytes, answer {answer_size}"
    )
    agents = [(f"bench-agent-{i:03d}", "unused") for i in range(N_AGENTS)]
    measured: list[tuple[Round, int, int]] = []
    pg_cores: list[float] = []
    with (
        tempfile.TemporaryDirectory(prefix="guard-pg-bench-") as tmp,
        bench_database() as (
            pg,
            dsn,
        ),
    ):
        work_dir = Path(tmp)
        data_file = work_dir / "wrk-floor.lua"
        write_wrk_data(data_file, "decide", agents)  # the floor reads no token
        floor = floor_server(work_dir, dsn, lines, answer_size, writers)
        floor.start(timeout=60.0)
        try:
            if warmup > 0:
                run_wrk(floor, "decide", 16, warmup, data_file)
            for _ in range(rounds):
                reset_log_table(pg)
                before = floor_stats(floor)
                pg_before = postgres_cpu_seconds(pg)
                result = run_wrk(floor, "decide", CONCURRENCY, duration, data_file)
                pg_cpu = (postgres_cpu_seconds(pg) - pg_before) / duration
                after = floor_stats(floor)
                pg_cores.append(pg_cpu)
                commits = after["commits"] - before["commits"]
                rows = after["rows"] - before["rows"]
                measured.append((result, commits, rows))
                print(
                    f"{format_round(result)}\n"
                    f"         {commits / duration:.0f} commits/s, {rows / duration:.0f} rows/s,"
                    f" {result.requests / max(1, commits):.1f} requests per commit;"
                    f" cpu: postgres {pg_cpu:.0%}, others but postgres"
                    f" {max(0.0, result.others_cpu - pg_cpu):.0%}"
                )
        finally:
            floor.stop()
    rps = statistics.median(r.rps for r, _, _ in measured)
    p99 = statistics.median(r.p99_us for r, _, _ in measured) / 1000
    commits_s = statistics.median(c / duration for _, c, _ in measured)
    per_commit = statistics.median(r.requests / max(1, c) for r, c, _ in measured)
    errors = sum(r.error_count for r, _, _ in measured)
    return {
        "round_seconds": duration,
        "rounds": rounds,
        "writers": writers,
        f"floor_decide_c{CONCURRENCY}": (
            f"{rps:.0f} req/s, p99 {p99:.2f} ms; {commits_s:.0f} commits/s,"
            f" {per_commit:.1f} requests per commit"
        ),
        "postgres_cpu": f"{statistics.median(pg_cores):.0%} of a core",
        "errors": errors,
        "pass": None if errors == 0 else False,
    }


def run_guardd(duration: float, rounds: int, warmup: float) -> dict[str, Any]:
    """decide at c=64 through guardd on PostgreSQL against the floor, rounds
    interleaved (ABBA) in the same run; then two nodes on one database, wrk
    spread over both (c=32 each), with agent-affinity routing (each agent
    to one node) and without (every agent to both)."""
    lines, answer_size = decide_sample()
    print(
        f"pg_bench guardd: {os.cpu_count()} cores, load {os.getloadavg()[0]:.2f};"
        f" decide c={CONCURRENCY}, {duration:g} s rounds x {rounds}"
    )
    with (
        tempfile.TemporaryDirectory(prefix="guard-pg-bench-") as tmp,
        bench_database() as (pg, dsn),
    ):
        work_dir = Path(tmp)
        guard_dsn = pg.create_database("guard")
        floor = floor_server(work_dir, dsn, lines, answer_size)
        one = guardd_server(work_dir / "node1", name="guardd", args=["--store", guard_dsn])
        two = guardd_server(work_dir / "node2", name="guardd2", args=["--store", guard_dsn])
        servers = [floor, one]
        try:
            floor.start(timeout=60.0)
            one.start(timeout=120.0)
            admin = admin_token(one_dir := work_dir / "node1")
            ids = [f"bench-agent-{i:03d}" for i in range(N_AGENTS)]
            tokens = asyncio.run(create_agents(one.url, admin, ids))
            agents = [(a, tokens[a]) for a in ids]
            every = work_dir / "wrk-all.lua"
            write_wrk_data(every, "decide", agents)
            halves = [work_dir / "wrk-half-0.lua", work_dir / "wrk-half-1.lua"]
            for k, path in enumerate(halves):
                write_wrk_data(path, "decide", agents[k::2])
            if warmup > 0:
                for server in (floor, one):
                    run_wrk(server, "decide", 16, warmup, every)
            floor_rounds: list[Round] = []
            guard_rounds: list[Round] = []
            for k in range(rounds):
                order = (floor, one) if k % 2 == 0 else (one, floor)
                for server in order:
                    # Each round from a fresh checkpoint, on both sides; the
                    # floor's table is emptied too (guardd's rows are its logs).
                    if server is floor:
                        reset_log_table(pg)
                    else:
                        pg.psql("checkpoint", "guard")
                    result = run_wrk(server, "decide", CONCURRENCY, duration, every)
                    (floor_rounds if server is floor else guard_rounds).append(result)
                    print(format_round(result), flush=True)
            # The second node only now: while it runs it follows the first.
            shutil.copytree(one_dir / "keys", work_dir / "node2" / "keys")
            two.start(timeout=120.0)
            servers.append(two)
            if warmup > 0:
                run_wrk(two, "decide", 16, warmup, every)
            spread: dict[str, tuple[float, float, float]] = {}
            for name, files in (("affinity", halves), ("no affinity", [every, every])):
                before = _conflicts(one, admin), _conflicts(two, admin)
                with concurrent.futures.ThreadPoolExecutor(2) as pool:
                    both = list(
                        pool.map(
                            lambda pair: run_wrk(
                                pair[0], "decide", CONCURRENCY // 2, duration, pair[1]
                            ),
                            [(one, files[0]), (two, files[1])],
                        )
                    )
                after = _conflicts(one, admin), _conflicts(two, admin)
                conflicts = sum(a - b for a, b in zip(after, before, strict=True))
                requests = sum(r.requests for r in both)
                rps = sum(r.rps for r in both)
                p99 = max(r.p99_us for r in both) / 1000
                rate = conflicts / max(1, requests)
                spread[name] = (rps, p99, rate)
                print(
                    f"  two nodes, {name}: {rps:.0f} req/s, p99 {p99:.2f} ms,"
                    f" {conflicts:.0f} conflicts in {requests} requests ({rate:.1%})",
                    flush=True,
                )
        finally:
            for server in servers:
                server.stop()
    floor_rps = statistics.median(r.rps for r in floor_rounds)
    guard_rps = statistics.median(r.rps for r in guard_rounds)
    ratio = guard_rps / floor_rps
    floor_p99 = statistics.median(r.p99_us for r in floor_rounds) / 1000
    guard_p99 = statistics.median(r.p99_us for r in guard_rounds) / 1000
    verdict = "met" if ratio >= 0.6 else "MISSED"
    print(
        f"  -> one node: guardd/floor throughput {ratio:.2f}x"
        f" ({guard_rps:.0f} vs {floor_rps:.0f} req/s), p99 {guard_p99:.2f} vs {floor_p99:.2f} ms"
        f"  [target >= 0.6x: {verdict}]"
    )
    errors = sum(r.error_count for r in floor_rounds + guard_rounds)
    return {
        "round_seconds": duration,
        "rounds": rounds,
        "one_node_ratio": round(ratio, 3),
        "floor_decide": f"{floor_rps:.0f} req/s, p99 {floor_p99:.2f} ms",
        "guardd_one_node": f"{guard_rps:.0f} req/s, p99 {guard_p99:.2f} ms",
        **{
            f"two_nodes_{name.replace(' ', '_')}": (
                f"{rps:.0f} req/s, p99 {p99:.2f} ms, conflicts per request {rate:.1%}"
            )
            for name, (rps, p99, rate) in spread.items()
        },
        "errors": errors,
        "pass": ratio >= 0.6 and errors == 0,
    }


def _race(
    servers: Sequence[Server], agent_id: str, token: str, requests: int, timeout: float = 60.0
) -> list[float]:
    """Each server asked ``requests`` decisions of ``agent_id`` one after the
    other, all servers at once: the seconds of each request."""
    body = {"tool": "web_search", "input": {"query": "weather in Lisbon", "max_results": 5}}
    path = f"/v1/agents/{agent_id}/actions"

    def run(server: Server) -> list[float]:
        seconds = []
        headers = {"Authorization": f"Bearer {token}"}
        with httpx.Client(base_url=server.url, headers=headers, timeout=timeout) as client:
            for _ in range(requests):
                started = time.perf_counter()
                answer = client.post(path, json=body)
                for attempt in range(1, RETRIES + 1):
                    if answer.status_code != 503:
                        break
                    # Kept colliding: asked again after a pause, as a client does.
                    time.sleep(0.01 * attempt)
                    answer = client.post(path, json=body)
                if answer.is_error:
                    raise RuntimeError(f"{server.url}: {answer.status_code} {answer.text}")
                seconds.append(time.perf_counter() - started)
        return seconds

    with concurrent.futures.ThreadPoolExecutor(len(servers)) as pool:
        return [s for each in pool.map(run, servers) for s in each]


def _conflict_on(pg: Any, work_dir: Path, records: int, requests: int) -> dict[str, float]:
    """Two nodes racing on one agent whose log holds ``records`` records
    (startup_bench's generated log, moved in with ``guardd migrate``): the
    p50 and p99 of the racing requests, and the conflicts."""
    from agents_runtime.log.keys import agent_token, load_keys
    from bench.history_bench import _linked
    from bench.startup_bench import agent_ids, cached_data_dir

    agent_id = agent_ids(1)[0]
    source = work_dir / f"logs-{records}"
    _linked(cached_data_dir(1, records), source)
    dsn = pg.create_database(f"guard{records}")
    started = time.perf_counter()
    moved = subprocess.run(
        [sys.executable, "-m", "guardd", "migrate", "--data-dir", str(source), "--store", dsn],
        capture_output=True,
        text=True,
        check=False,
    )
    if moved.returncode != 0:
        raise RuntimeError(f"guardd migrate failed:\n{moved.stdout}\n{moved.stderr}")
    print(f"  {records} records moved into PostgreSQL in {time.perf_counter() - started:.1f} s")
    token = agent_token(load_keys(source / "keys").token_key, agent_id)
    nodes = []
    try:
        for k in (1, 2):
            shutil.copytree(source / "keys", work_dir / f"node{records}-{k}" / "keys")
            server = guardd_server(
                work_dir / f"node{records}-{k}", name=f"guardd{k}", args=["--store", dsn]
            )
            nodes.append(server)
            server.start(timeout=120.0)
        # Each node loads the agent on its first use (the whole log, once:
        # minutes for a million records, so one node at a time, untimed),
        # and writes its snapshot at the first round after (a long log).
        for node in nodes:
            _race([node], agent_id, token, 1, timeout=1800.0)
        _race(nodes, agent_id, token, 5)
        time.sleep(3.0)
        admin = admin_token(work_dir / f"node{records}-1")
        before = sum(_conflicts(n, admin) for n in nodes)
        seconds = sorted(_race(nodes, agent_id, token, requests))
        conflicts = sum(_conflicts(n, admin) for n in nodes) - before
    finally:
        for server in nodes:
            server.stop()
    p99 = seconds[min(len(seconds) - 1, int(len(seconds) * 0.99))]
    return {
        "p50_ms": statistics.median(seconds) * 1000,
        "p99_ms": p99 * 1000,
        "conflicts": conflicts,
        "requests": len(seconds),
    }


def run_conflict(records: int, requests: int) -> dict[str, Any]:
    """A lost race on an agent of ``records`` records against one on an
    agent of CONFLICT_SHORT records, in the same run."""
    print(
        f"pg_bench conflict: {os.cpu_count()} cores, load {os.getloadavg()[0]:.2f};"
        f" {CONFLICT_SHORT} vs {records} records, two nodes x {requests} requests"
    )
    with (
        tempfile.TemporaryDirectory(prefix="guard-pg-conflict-") as tmp,
        bench_database() as (pg, _),
    ):
        work_dir = Path(tmp)
        short = _conflict_on(pg, work_dir, CONFLICT_SHORT, requests)
        long = _conflict_on(pg, work_dir, records, requests)
    ratio = long["p99_ms"] / short["p99_ms"]
    for size, figures in ((CONFLICT_SHORT, short), (records, long)):
        print(
            f"  {size} records: p50 {figures['p50_ms']:.1f} ms, p99 {figures['p99_ms']:.1f} ms,"
            f" {figures['conflicts']:.0f} conflicts in {figures['requests']} requests"
        )
    verdict = "met" if ratio <= CONFLICT_TARGET else "MISSED"
    print(f"  -> p99 {ratio:.2f}x  [target <= {CONFLICT_TARGET:g}x: {verdict}]")
    return {
        "records": records,
        f"p99_{CONFLICT_SHORT}_records_ms": round(short["p99_ms"], 1),
        f"p99_{records}_records_ms": round(long["p99_ms"], 1),
        "conflicts": f"{short['conflicts']:.0f} / {long['conflicts']:.0f}",
        "ratio": round(ratio, 2),
        "pass": ratio <= CONFLICT_TARGET,
    }


def _conflicts(server: Server, admin: str) -> float:
    """The node's guard_store_conflicts_total: batches decided again."""
    response = httpx.get(
        f"{server.url}/metrics", headers={"Authorization": f"Bearer {admin}"}, timeout=30.0
    )
    response.raise_for_status()
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            if sample.name == "guard_store_conflicts_total":
                return sample.value
    return 0.0


def _env_number(name: str, default: float) -> float:
    return float(os.environ.get(name, default))


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Run the benchmark; ``argv`` None means the defaults and BENCH_* variables."""
    parser = argparse.ArgumentParser(
        prog="python -m bench.pg_bench",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("mode", nargs="?", default="guardd", choices=MODES)
    parser.add_argument(
        "--duration",
        type=float,
        default=_env_number("BENCH_DURATION", 10),
        help="seconds per wrk round (env BENCH_DURATION, default 10)",
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=int(_env_number("BENCH_ROUNDS", 2)),
        help="rounds (env BENCH_ROUNDS, default 2)",
    )
    parser.add_argument("--warmup", type=float, default=2.0, help="seconds of warm-up")
    parser.add_argument(
        "--records",
        type=int,
        default=int(_env_number("BENCH_CONFLICT_RECORDS", 1_000_000)),
        help="conflict: records of the long log (env BENCH_CONFLICT_RECORDS, default 1,000,000)",
    )
    parser.add_argument(
        "--requests",
        type=int,
        default=CONFLICT_REQUESTS,
        help=f"conflict: requests per node (default {CONFLICT_REQUESTS})",
    )
    parser.add_argument(
        "--writers", type=int, default=1, help="floor: commits in flight at once (default 1)"
    )
    # The floor server's own process, started by the benchmark.
    parser.add_argument("--serve-floor", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--dsn", help=argparse.SUPPRESS)
    parser.add_argument("--lines", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--answer-size", type=int, default=96, help=argparse.SUPPRESS)
    args = parser.parse_args([] if argv is None else argv)
    if args.serve_floor:
        if not (args.port and args.dsn and args.lines):
            parser.error("--serve-floor needs --port, --dsn and --lines")
        sys.exit(serve_floor(args.port, args.dsn, args.lines, args.answer_size, args.writers))
    if args.mode == "guardd":
        return run_guardd(args.duration, args.rounds, args.warmup)
    if args.mode == "conflict":
        return run_conflict(args.records, args.requests)
    if args.writers < 1:
        parser.error("--writers must be at least 1")
    return run_floor(args.duration, args.rounds, args.warmup, args.writers)


if __name__ == "__main__":
    sys.exit(0 if main(sys.argv[1:]).get("pass") is not False else 1)
