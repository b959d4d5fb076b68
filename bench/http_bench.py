"""HTTP benchmark: guardd against a bare Quart floor, in the same run.

guardd runs as shipped (``python -m guardd``, fsync on) on a temporary data
directory with 100 agents. The floor (``bench/floor_app.py``) is a bare Quart
app on the same Hypercorn settings and event loop whose routes parse the
same JSON and answer bodies of the same size. wrk drives both from its own
process on loopback, with ``bench/wrk/guard.lua`` spreading requests over
the agents, each with its own token. Floor and guardd rounds are interleaved
(ABBA), and each round records the CPU time of wrk, of the server, and of
everything else on the machine, so a busy machine shows in the result.

Workloads:
  decide  allowed actions: each writes action_requested + action_allowed,
          signed and fsynced before the answer
  mixed   80% allowed, 10% denied (insufficient_budget), 10% outcome reports
          of actions allowed before the round
  status  GET /v1/agents/:id

    python -m bench.http_bench                       # 10 s rounds, 2 of each
    python -m bench.http_bench --duration 3 --rounds 1 --workloads decide
    BENCH_DURATION=3 BENCH_ROUNDS=1 python -m bench.http_bench

The cost of metrics (--metrics-cost): decide at c=64 against two guardd, one
with metrics (as shipped) and one with --no-metrics, rounds interleaved
(ABBA), each scraped once a round as Prometheus would; prints the medians
and their ratio (target: metrics on within 3 % of off).

    python -m bench.http_bench --metrics-cost --rounds 6
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import attrs
import httpx
from prometheus_client.parser import text_string_to_metric_families

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent
LUA_SCRIPT = BENCH_DIR / "wrk" / "guard.lua"
WORKLOADS = ("status", "decide", "mixed")
CONCURRENCIES = (1, 16, 64)
SIDES = ("floor", "guardd")
N_AGENTS = 100
CLK_TCK = os.sysconf("SC_CLK_TCK")

# A realistic policy: a few tools with costs, one that needs approval (never
# benchmarked), a default rule and a rate limit too high to bite; the budget
# is large so no agent is terminated during a run.
POLICY: dict[str, Any] = {
    "budget": 100000000,
    "scar_limit": 1000,
    "tools": {
        "web_search": {"cost": 0.01},
        "read_file": {"cost": 0, "max_calls": 1000000},
        "send_email": {"cost": 5, "requires_approval": True},
    },
    "default": {"cost": 0.5},
    "rate_limit": {"max_actions": 1000000, "window_secs": 60},
}
DECIDE_BODY = {
    "tool": "web_search",
    "input": {"query": "weather in Lisbon tomorrow", "max_results": 5},
    "cost": 0.01,
}  # keep in step with DECIDE_BODY in bench/wrk/guard.lua
OUTCOME_BODY = {"status": "success", "detail": "5 results"}

# Our targets, as ratios to the floor in the same run (docs/benchmarks.md).
TARGETS = {
    ("decide", 64): {"throughput": 0.6, "p99": 1.5},
    ("status", 64): {"throughput": 0.8},
}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def clean_env() -> dict[str, str]:
    """The environment for a server: ours without any GUARD_* setting, nor
    any OTEL_* one (which would turn traces on: bench/tracing_bench.py
    measures those)."""
    return {k: v for k, v in os.environ.items() if not k.startswith(("GUARD_", "OTEL_"))}


def machine_busy_ticks() -> int:
    """Busy clock ticks of all CPUs since boot, from /proc/stat."""
    ticks = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return sum(ticks) - ticks[3] - ticks[4]  # all but idle and iowait


BUSY_CORES = 0.35  # CPU of other processes above which a round is measured again


def wait_quiet(max_wait: float, quiet: float = BUSY_CORES) -> float:
    """Wait up to ``max_wait`` s for a second in which the machine (our idle
    servers included) uses at most ``quiet`` cores; returns the last reading."""
    deadline = time.monotonic() + max_wait
    while True:
        before = machine_busy_ticks()
        time.sleep(1.0)
        used = (machine_busy_ticks() - before) / CLK_TCK
        if used <= quiet or time.monotonic() >= deadline:
            return used


class Server:
    """A server process we started: readiness, CPU time, RSS, and a stop by PID."""

    def __init__(self, name: str, argv: Sequence[str], port: int, log_path: Path) -> None:
        self.name = name
        self.argv = list(argv)
        self.port = port
        self.log_path = log_path
        self.proc: subprocess.Popen[bytes] | None = None
        self.started_at = 0.0
        self.ready_after = 0.0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def start(self, timeout: float = 600.0, env: dict[str, str] | None = None) -> Server:
        with self.log_path.open("ab") as out:
            self.started_at = time.perf_counter()
            self.proc = subprocess.Popen(
                self.argv, cwd=REPO, env=env or clean_env(), stdout=out, stderr=subprocess.STDOUT
            )
        deadline = time.monotonic() + timeout
        # Poll with a bare connect until the port listens: an httpx request
        # per poll costs this process a core, which a loading server needs.
        with httpx.Client(timeout=1.0) as client:
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"{self.name} exited early:\n{self.output()}")
                try:
                    socket.create_connection(("127.0.0.1", self.port), timeout=1.0).close()
                    if client.get(f"{self.url}/healthz").status_code == 200:
                        self.ready_after = time.perf_counter() - self.started_at
                        return self
                except (OSError, httpx.TransportError):
                    pass
                time.sleep(0.02)
        self.stop()
        raise RuntimeError(f"{self.name} did not answer within {timeout}s:\n{self.output()}")

    def output(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def cpu_seconds(self) -> float:
        """User + system CPU time of the server process so far."""
        stat = Path(f"/proc/{self.pid}/stat").read_text()
        fields = stat[stat.rindex(")") + 2 :].split()
        return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime, stime

    def rss_kib(self) -> int:
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        raise RuntimeError("no VmRSS")

    def stop(self, timeout: float = 30.0) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        os.kill(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


def guardd_server(
    data_dir: Path, port: int | None = None, *, name: str = "guardd", args: Sequence[str] = ()
) -> Server:
    port = port or free_port()
    argv = [sys.executable, "-m", "guardd", "--port", str(port), "--data-dir", str(data_dir)]
    return Server(name, [*argv, *args], port, data_dir.parent / f"guardd-{port}.out")


def floor_server(work_dir: Path) -> Server:
    port = free_port()
    argv = [sys.executable, "-m", "bench.floor_app", "--port", str(port)]
    return Server("floor", argv, port, work_dir / f"floor-{port}.out")


def admin_token(data_dir: Path) -> str:
    return (data_dir / "keys" / "admin.token").read_text().strip()


async def gather_bounded(coros: Iterable[Any], limit: int) -> list[Any]:
    """Run coroutines with at most ``limit`` in flight; results in order."""
    sem = asyncio.Semaphore(limit)

    async def one(coro: Any) -> Any:
        async with sem:
            return await coro

    return await asyncio.gather(*(one(c) for c in coros))


async def create_agents(
    url: str, admin: str, agent_ids: Sequence[str], policy: dict[str, Any] = POLICY
) -> dict[str, str]:
    """Create agents through the API; returns agent_id -> token."""
    headers = {"Authorization": f"Bearer {admin}"}
    async with httpx.AsyncClient(base_url=url, headers=headers, timeout=60.0) as client:

        async def create(agent_id: str) -> tuple[str, str]:
            response = await client.post(
                "/v1/agents", json={"agent_id": agent_id, "policy": policy}
            )
            response.raise_for_status()
            return agent_id, response.json()["token"]

        return dict(await gather_bounded((create(a) for a in agent_ids), 16))


async def allow_actions(url: str, agents: list[tuple[str, str]], count: int) -> list[int | str]:
    """Have ``count`` actions allowed, spread over the agents; returns for
    each (agent index, action_id) flattened as [i, id, i, id, ...]."""
    async with httpx.AsyncClient(base_url=url, timeout=60.0) as client:

        async def one(k: int) -> tuple[int, str]:
            index = k % len(agents)
            agent_id, token = agents[index]
            response = await client.post(
                f"/v1/agents/{agent_id}/actions",
                json=DECIDE_BODY,
                headers={"Authorization": f"Bearer {token}"},
            )
            response.raise_for_status()
            body = response.json()
            assert body["decision"] == "allowed", body
            return index, body["action_id"]

        pairs = await gather_bounded((one(k) for k in range(count)), 32)
    return [x for pair in pairs for x in pair]


def lua_string(text: str) -> str:
    return json.dumps(text)  # a JSON string of ASCII is a valid Lua string literal


def write_wrk_data(
    path: Path,
    workload: str,
    agents: list[tuple[str, str]],
    outcomes: list[int | str] | None = None,
    threads: int = 1,
    seed: int = 1,
) -> None:
    """The per-run Lua table guard.lua loads: agents with tokens, outcomes to report."""
    lines = [
        "return {",
        f"  workload = {lua_string(workload)}, seed = {seed}, threads = {threads},",
        "  agents = {",
    ]
    lines += [f"    {{id = {lua_string(a)}, token = {lua_string(t)}}}," for a, t in agents]
    lines.append("  },")
    if outcomes is not None:
        lines.append("  outcomes = {")
        for index, action_id in zip(outcomes[0::2], outcomes[1::2], strict=True):
            lines.append(
                f"    {{agent = {int(index) + 1}, action = {lua_string(str(action_id))}}},"
            )
        lines.append("  },")
    lines.append("}")
    path.write_text("\n".join(lines) + "\n")


@attrs.frozen
class Round:
    server: str
    workload: str
    concurrency: int
    rps: float
    p50_us: float
    p90_us: float
    p99_us: float
    max_us: float
    requests: int
    errors: dict[str, int]
    fallbacks: int
    wrk_cpu: float  # share of one core used by wrk
    server_cpu: float  # share of one core used by the server
    others_cpu: float  # cores used by everything else on the machine
    load1: float

    @property
    def error_count(self) -> int:
        return sum(self.errors.values())


def wrk_path() -> str:
    found = shutil.which("wrk")
    if found is None:
        raise SystemExit("wrk not found: install it (make wrk, or apt-get install wrk)")
    return found


def quietest_round(
    measure: Callable[[], Round], retries: int, report: Any, label: str = ""
) -> Round:
    """A round measured by ``measure``, again (after the machine quiets) up to
    ``retries`` times while the rest of the machine was busy; the quietest."""
    result: Round | None = None
    for attempt in range(retries + 1):
        if attempt:
            wait_quiet(60.0)
        this = measure()
        if result is None or this.others_cpu < result.others_cpu:
            result = this
        if this.others_cpu <= BUSY_CORES:
            break
        if attempt < retries:
            report(f"{label}{format_round(this)}  (busy machine: measured again)")
    assert result is not None
    return result


def run_wrk(
    server: Server,
    workload: str,
    concurrency: int,
    duration: float,
    data_file: Path,
    threads: int = 1,
) -> Round:
    """One wrk run against ``server``; CPU of wrk, server and the rest alongside."""
    argv = [
        wrk_path(),
        f"-t{threads}",
        f"-c{concurrency}",
        f"-d{duration:g}s",
        "--timeout",
        "30s",
        "--latency",
        "-s",
        str(LUA_SCRIPT),
        server.url,
        "--",
        str(data_file),
    ]
    before_children = resource.getrusage(resource.RUSAGE_CHILDREN)
    before_server = server.cpu_seconds()
    before_busy = machine_busy_ticks()
    started = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, timeout=duration + 120, check=False)
    wall = time.perf_counter() - started
    after_busy = machine_busy_ticks()
    server_cpu = server.cpu_seconds() - before_server
    after_children = resource.getrusage(resource.RUSAGE_CHILDREN)
    wrk_cpu = (after_children.ru_utime - before_children.ru_utime) + (
        after_children.ru_stime - before_children.ru_stime
    )
    if done.returncode != 0:
        raise RuntimeError(f"wrk failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    line = next((x for x in done.stdout.splitlines() if x.startswith("WRKJSON ")), None)
    if line is None:
        raise RuntimeError(f"wrk printed no summary:\n{done.stdout}\n{done.stderr}")
    summary = json.loads(line.removeprefix("WRKJSON "))
    busy = (after_busy - before_busy) / CLK_TCK
    return Round(
        server=server.name,
        workload=workload,
        concurrency=concurrency,
        rps=summary["requests"] / (summary["duration_us"] / 1e6),
        p50_us=summary["p50_us"],
        p90_us=summary["p90_us"],
        p99_us=summary["p99_us"],
        max_us=summary["max_us"],
        requests=summary["requests"],
        errors=summary["errors"],
        fallbacks=summary["fallbacks"],
        wrk_cpu=wrk_cpu / wall,
        server_cpu=server_cpu / wall,
        others_cpu=max(0.0, busy - wrk_cpu - server_cpu) / wall,
        load1=os.getloadavg()[0],
    )


@attrs.frozen
class Pair:
    """Floor and guardd rounds of one workload at one concurrency."""

    workload: str
    concurrency: int
    floor: list[Round]
    guardd: list[Round]

    @staticmethod
    def _median(rounds: list[Round], field: str) -> float:
        return statistics.median(getattr(r, field) for r in rounds)

    def median(self, side: str, field: str) -> float:
        return self._median(self.floor if side == "floor" else self.guardd, field)

    @property
    def throughput_ratio(self) -> float:
        return self.median("guardd", "rps") / self.median("floor", "rps")

    @property
    def p99_ratio(self) -> float:
        return self.median("guardd", "p99_us") / self.median("floor", "p99_us")

    def verdicts(self) -> list[str]:
        target = TARGETS.get((self.workload, self.concurrency), {})
        out = []
        if "throughput" in target:
            ok = self.throughput_ratio >= target["throughput"]
            out.append(f"throughput >= {target['throughput']}x: {'met' if ok else 'MISSED'}")
        if "p99" in target:
            ok = self.p99_ratio <= target["p99"]
            out.append(f"p99 <= {target['p99']}x: {'met' if ok else 'MISSED'}")
        return out

    def missed(self) -> bool:
        return any("MISSED" in v for v in self.verdicts())


class HttpBench:
    """Both servers, the agents and the wrk data files of one run."""

    def __init__(
        self, work_dir: Path, duration: float, rounds: int, warmup: float, retries: int = 2
    ) -> None:
        self.retries = retries
        self.work_dir = work_dir
        self.duration = duration
        self.rounds = rounds
        self.warmup = warmup
        self.data_dir = work_dir / "guard-data"
        self.guardd = guardd_server(self.data_dir)
        self.floor = floor_server(work_dir)
        self.agents: list[tuple[str, str]] = []
        self.rps_seen: dict[tuple[str, int], float] = {}

    def start(self) -> None:
        self.guardd.start()
        self.floor.start()
        admin = admin_token(self.data_dir)
        ids = [f"bench-agent-{i:03d}" for i in range(N_AGENTS)]
        tokens = asyncio.run(create_agents(self.guardd.url, admin, ids))
        self.agents = [(a, tokens[a]) for a in ids]

    def stop(self) -> None:
        self.guardd.stop()
        self.floor.stop()

    def _match_sizes(self) -> dict[str, int]:
        """Make the floor answer bodies as large as guardd's answers are now."""
        agent_id, token = self.agents[0]
        headers = {"Authorization": f"Bearer {token}"}
        with httpx.Client(base_url=self.guardd.url, headers=headers, timeout=30.0) as client:
            decision = client.post(f"/v1/agents/{agent_id}/actions", json=DECIDE_BODY)
            status = client.get(f"/v1/agents/{agent_id}")
        sizes = {"decision": len(decision.content), "status": len(status.content)}
        httpx.put(f"{self.floor.url}/_sizes", json=sizes, timeout=30.0).raise_for_status()
        return sizes

    def _data_file(self, server: Server, workload: str, concurrency: int) -> Path:
        path = self.work_dir / f"wrk-{server.name}-{workload}-{concurrency}.lua"
        outcomes = None
        if workload == "mixed" and server is self.guardd:
            # One outcome per outcome request the round will send, from the
            # throughput seen at this concurrency, with room to spare.
            expected = self.rps_seen.get(("decide", concurrency), 3000.0) * self.duration
            count = int(expected * 0.1 * 1.5) + 50
            outcomes = asyncio.run(allow_actions(self.guardd.url, self.agents, count))
        elif workload == "mixed":
            # The floor keeps no state: any action ID does.
            expected = self.rps_seen.get(("floor", concurrency), 10000.0) * self.duration
            count = int(expected * 0.1 * 1.5) + 50
            outcomes = [x for k in range(count) for x in (k % len(self.agents), f"act-{k + 1}")]
        write_wrk_data(path, workload, self.agents, outcomes)
        return path

    def _round(self, server: Server, workload: str, concurrency: int, report: Any) -> Round:
        """One round; measured again (keeping the quietest) while the rest of
        the machine was busy."""
        result = quietest_round(
            lambda: run_wrk(
                server,
                workload,
                concurrency,
                self.duration,
                self._data_file(server, workload, concurrency),
            ),
            self.retries,
            report,
        )
        if workload == "decide" and server is self.guardd:
            self.rps_seen[("decide", concurrency)] = result.rps
        if server is self.floor:
            self.rps_seen[("floor", concurrency)] = max(
                result.rps, self.rps_seen.get(("floor", concurrency), 0.0)
            )
        return result

    def run(
        self, workloads: Sequence[str], concurrencies: Sequence[int], report: Any = print
    ) -> list[Pair]:
        pairs = []
        for workload in workloads:
            sizes = self._match_sizes()
            report(f"\n== {workload} (floor body sizes {sizes})")
            if self.warmup > 0:
                for server in (self.floor, self.guardd):
                    run_wrk(
                        server, workload, 16, self.warmup, self._data_file(server, workload, 16)
                    )
            for concurrency in concurrencies:
                floor: list[Round] = []
                guard: list[Round] = []
                for k in range(self.rounds):
                    order = (self.floor, self.guardd) if k % 2 == 0 else (self.guardd, self.floor)
                    for server in order:
                        result = self._round(server, workload, concurrency, report)
                        (floor if server is self.floor else guard).append(result)
                        report(format_round(result))
                pair = Pair(workload, concurrency, floor, guard)
                report(format_pair(pair))
                pairs.append(pair)
        return pairs


def format_round(r: Round) -> str:
    extra = ""
    if r.error_count:
        extra += f" ERRORS {r.errors}"
    if r.fallbacks:
        extra += f" fallbacks {r.fallbacks}"
    return (
        f"  {r.server:6s} c={r.concurrency:<3d} {r.rps:8.0f} req/s  p50 {r.p50_us / 1000:7.2f} ms"
        f"  p99 {r.p99_us / 1000:7.2f} ms  cpu: server {r.server_cpu:4.0%} wrk {r.wrk_cpu:4.0%}"
        f" others {r.others_cpu:4.0%} (load {r.load1:.2f}){extra}"
    )


def format_pair(p: Pair) -> str:
    verdicts = "; ".join(p.verdicts())
    return (
        f"  -> {p.workload} c={p.concurrency}: guardd/floor throughput {p.throughput_ratio:.2f}x,"
        f" p99 {p.p99_ratio:.2f}x" + (f"  [{verdicts}]" if verdicts else "")
    )


def markdown_table(pairs: Sequence[Pair]) -> str:
    rows = [
        "| workload | c | floor req/s | guardd req/s | throughput ratio | floor p50 / p99 ms"
        " | guardd p50 / p99 ms | p99 ratio | target |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for p in pairs:
        ms = {(side, f): p.median(side, f) / 1000 for side in SIDES for f in ("p50_us", "p99_us")}
        rows.append(
            f"| {p.workload} | {p.concurrency} | {p.median('floor', 'rps'):.0f}"
            f" | {p.median('guardd', 'rps'):.0f} | {p.throughput_ratio:.2f}"
            f" | {ms['floor', 'p50_us']:.2f} / {ms['floor', 'p99_us']:.2f}"
            f" | {ms['guardd', 'p50_us']:.2f} / {ms['guardd', 'p99_us']:.2f}"
            f" | {p.p99_ratio:.2f} | {'; '.join(p.verdicts()) or '-'} |"
        )
    return "\n".join(rows)


# -- the cost of metrics ----------------------------------------------------------

METRICS_TARGET = 0.97  # decide throughput with metrics, at least this share of without


class MetricsCost:
    """Two guardd on their own data dirs, metrics on and off, the same agents
    and policy; decide rounds interleaved ABBA, the quietest of each kept."""

    def __init__(
        self,
        work_dir: Path,
        duration: float,
        rounds: int,
        warmup: float,
        concurrency: int = 64,
        retries: int = 2,
    ) -> None:
        self.work_dir = work_dir
        self.duration = duration
        self.rounds = rounds
        self.warmup = warmup
        self.concurrency = concurrency
        self.retries = retries
        self.on = guardd_server(self._dir("on"), name="on")
        self.off = guardd_server(self._dir("off"), name="off", args=["--no-metrics"])
        self.data_files: dict[str, Path] = {}

    def _dir(self, side: str) -> Path:
        path = self.work_dir / side
        path.mkdir()
        return path / "guard-data"

    def start(self) -> None:
        ids = [f"bench-agent-{i:03d}" for i in range(N_AGENTS)]
        for server in (self.on, self.off):
            server.start()
            data_dir = Path(server.argv[server.argv.index("--data-dir") + 1])
            tokens = asyncio.run(create_agents(server.url, admin_token(data_dir), ids))
            path = self.work_dir / f"wrk-{server.name}.lua"
            write_wrk_data(path, "decide", [(a, tokens[a]) for a in ids])
            self.data_files[server.name] = path

    def stop(self) -> None:
        self.on.stop()
        self.off.stop()

    def scrape(self) -> str:
        """/metrics of the server with metrics, as a scraper reads it."""
        data_dir = Path(self.on.argv[self.on.argv.index("--data-dir") + 1])
        headers = {"Authorization": f"Bearer {admin_token(data_dir)}"}
        response = httpx.get(f"{self.on.url}/metrics", headers=headers, timeout=30.0)
        response.raise_for_status()
        return response.text

    def _round(self, server: Server, report: Any) -> Round:
        data_file = self.data_files[server.name]
        result = quietest_round(
            lambda: run_wrk(server, "decide", self.concurrency, self.duration, data_file),
            self.retries,
            report,
        )
        if server is self.on:
            self.scrape()  # once a round, as Prometheus scrapes every few seconds
        return result

    def run(self, report: Any = print) -> Pair:
        """The rounds; the Pair's "floor" side is metrics off, "guardd" on."""
        if self.warmup > 0:
            for server in (self.off, self.on):
                run_wrk(server, "decide", 16, self.warmup, self.data_files[server.name])
        off: list[Round] = []
        on: list[Round] = []
        for k in range(self.rounds):
            order = (self.off, self.on) if k % 2 == 0 else (self.on, self.off)
            for server in order:
                result = self._round(server, report)
                (on if server is self.on else off).append(result)
                report(format_round(result))
        return Pair("decide", self.concurrency, off, on)


def metrics_cost_results(pair: Pair, scraped: str, duration: float) -> dict[str, Any]:
    ratio = pair.throughput_ratio
    allowed = sum(
        sample.value
        for family in text_string_to_metric_families(scraped)
        for sample in family.samples
        if sample.name == "guard_decisions_total" and sample.labels["decision"] == "allowed"
    )
    busy = max(r.others_cpu for r in [*pair.floor, *pair.guardd])
    return {
        "round_seconds": duration,
        "rounds_per_server": len(pair.guardd),
        f"metrics_on_c{pair.concurrency}": (
            f"{pair.median('guardd', 'rps'):.0f} req/s, p99 "
            f"{pair.median('guardd', 'p99_us') / 1000:.2f} ms"
        ),
        f"metrics_off_c{pair.concurrency}": (
            f"{pair.median('floor', 'rps'):.0f} req/s, p99 "
            f"{pair.median('floor', 'p99_us') / 1000:.2f} ms"
        ),
        "on_off_throughput": f"{ratio:.3f}x (target >= {METRICS_TARGET})",
        "on_off_p99": f"{pair.p99_ratio:.3f}x",
        "others_cpu_max": f"{busy:.0%}",
        "allowed_counted_by_on": int(allowed),
        "pass": ratio >= METRICS_TARGET,
    }


def run_metrics_cost(
    duration: float, rounds: int, warmup: float, concurrency: int, retries: int
) -> dict[str, Any]:
    print(
        f"http_bench --metrics-cost: {os.cpu_count()} cores, load {os.getloadavg()[0]:.2f};"
        f" decide c={concurrency}, {duration:g} s rounds x {rounds} per side, wrk {wrk_path()}"
    )
    with tempfile.TemporaryDirectory(prefix="guard-metrics-cost-") as tmp:
        bench = MetricsCost(Path(tmp), duration, rounds, warmup, concurrency, retries)
        try:
            bench.start()
            pair = bench.run()
            scraped = bench.scrape()
        finally:
            bench.stop()
    out = metrics_cost_results(pair, scraped, duration)
    print(
        f"  -> metrics on/off: throughput {pair.throughput_ratio:.3f}x"
        f" (median {pair.median('guardd', 'rps'):.0f} vs {pair.median('floor', 'rps'):.0f}"
        f" req/s), p99 {pair.p99_ratio:.3f}x;"
        f" {'met' if out['pass'] else 'MISSED'} (>= {METRICS_TARGET})"
    )
    return out


def _env_number(name: str, default: float) -> float:
    return float(os.environ.get(name, default))


def results(pairs: Sequence[Pair], duration: float, rounds: int) -> dict[str, Any]:
    """The figures for ``python -m bench``: one line per workload and concurrency."""
    out: dict[str, Any] = {"round_seconds": duration, "rounds_per_server": rounds}
    for p in pairs:
        busy = max(r.others_cpu for r in [*p.floor, *p.guardd])
        out[f"{p.workload}_c{p.concurrency}"] = (
            f"{p.median('guardd', 'rps'):.0f} req/s vs floor {p.median('floor', 'rps'):.0f}"
            f" = {p.throughput_ratio:.2f}x; p99 {p.median('guardd', 'p99_us') / 1000:.2f} ms"
            f" vs {p.median('floor', 'p99_us') / 1000:.2f} = {p.p99_ratio:.2f}x"
            f"; others' cpu <= {busy:.0%}" + "".join(f"; {v}" for v in p.verdicts())
        )
    checked = [p for p in pairs if (p.workload, p.concurrency) in TARGETS]
    out["pass"] = all(not p.missed() for p in checked) if checked else None
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Run the benchmark; ``argv`` None means the defaults and BENCH_* variables."""
    parser = argparse.ArgumentParser(
        prog="python -m bench.http_bench",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
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
        help="rounds per server, interleaved ABBA (env BENCH_ROUNDS, default 2)",
    )
    parser.add_argument("--warmup", type=float, default=2.0, help="seconds of warm-up per workload")
    parser.add_argument(
        "--workloads", default=os.environ.get("BENCH_HTTP_WORKLOADS", ",".join(WORKLOADS))
    )
    parser.add_argument(
        "--concurrency", help=f"default {','.join(map(str, CONCURRENCIES))}; 64 with --metrics-cost"
    )
    parser.add_argument(
        "--retries",
        type=int,
        default=2,
        help=f"measure a round again when the rest of the machine used > {BUSY_CORES} cores",
    )
    parser.add_argument("--json", type=Path, help="also write every round to this file")
    parser.add_argument(
        "--metrics-cost",
        action="store_true",
        help="only decide with metrics on against --no-metrics, interleaved (see above)",
    )
    args = parser.parse_args([] if argv is None else argv)
    if args.metrics_cost:
        concurrency = int(args.concurrency) if args.concurrency else 64
        return run_metrics_cost(args.duration, args.rounds, args.warmup, concurrency, args.retries)
    args.concurrency = args.concurrency or ",".join(map(str, CONCURRENCIES))
    workloads = [w for w in args.workloads.split(",") if w]
    if unknown := set(workloads) - set(WORKLOADS):
        parser.error(f"unknown workloads: {', '.join(sorted(unknown))}")
    concurrencies = [int(c) for c in args.concurrency.split(",") if c]

    print(
        f"http_bench: {os.cpu_count()} cores, load {os.getloadavg()[0]:.2f};"
        f" {args.duration:g} s rounds x {args.rounds}, wrk {wrk_path()}"
    )
    with tempfile.TemporaryDirectory(prefix="guard-http-bench-") as tmp:
        bench = HttpBench(Path(tmp), args.duration, args.rounds, args.warmup, args.retries)
        try:
            bench.start()
            pairs = bench.run(workloads, concurrencies)
        finally:
            bench.stop()
    print("\n" + markdown_table(pairs))
    if args.json:
        args.json.write_text(json.dumps([attrs.asdict(p) for p in pairs], indent=1))
    return results(pairs, args.duration, args.rounds)


if __name__ == "__main__":
    sys.exit(0 if main(sys.argv[1:]).get("pass") is not False else 1)
