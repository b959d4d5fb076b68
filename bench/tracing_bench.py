"""The cost of traces: decide at c=64 against two guardd in the same run, one
tracing every decision (``OTEL_TRACES_SAMPLER=always_on``, each span
exported over OTLP/HTTP to a local receiver, ``bench/otlp_sink.py``, in its
own process) and one with no ``OTEL_*`` variable at all, as shipped. Rounds
interleaved (ABBA), each measured again while the rest of the machine is
busy, as ``http_bench --metrics-cost`` does; prints the medians and their
ratio (target: tracing on at least 0.85x of off), and checks that the
receiver got a span for every allowed action of the traced guardd.

With each round it prints where the CPU went, per request answered: guardd's
process (its export thread included), the receiver's process and wrk's, from
their own CPU time (utime + stime), which other work on the machine does not
inflate as it does requests per second.

    python -m bench.tracing_bench                    # 10 s rounds, 2 per side
    python -m bench.tracing_bench --duration 3 --rounds 1
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

import attrs
import httpx

from bench.http_bench import (
    BUSY_CORES,
    N_AGENTS,
    Pair,
    Round,
    Server,
    admin_token,
    clean_env,
    create_agents,
    format_round,
    free_port,
    guardd_server,
    quietest_round,
    run_wrk,
    write_wrk_data,
    wrk_path,
)

TARGET = 0.85  # decide throughput with every span exported, at least this share of off
CONCURRENCY = 64


@attrs.frozen
class CpuSplit:
    """CPU time (us) per request answered in a round, by process."""

    guardd: float
    receiver: float
    wrk: float

    def format(self) -> str:
        return (
            f"CPU per request: guardd {self.guardd:.0f} us, receiver {self.receiver:.1f} us,"
            f" wrk {self.wrk:.0f} us"
        )


def cpu_split(result: Round, receiver_seconds: float) -> CpuSplit:
    """``result``'s CPU shares (of a core, over the round) as time per request."""
    seconds_per_request = 1e6 / result.rps
    return CpuSplit(
        guardd=result.server_cpu * seconds_per_request,
        receiver=receiver_seconds * 1e6 / result.requests,
        wrk=result.wrk_cpu * seconds_per_request,
    )


def median_split(splits: list[CpuSplit]) -> CpuSplit:
    return CpuSplit(
        guardd=statistics.median(s.guardd for s in splits),
        receiver=statistics.median(s.receiver for s in splits),
        wrk=statistics.median(s.wrk for s in splits),
    )


def server_env(otel: dict[str, str]) -> dict[str, str]:
    """Ours without any GUARD_* or OTEL_* setting, plus ``otel``."""
    return clean_env() | otel


class TracingCost:
    """The receiver, and two guardd on their own data dirs with the same
    agents and policy: "on" traces to the receiver, "off" has no OTEL_*."""

    def __init__(
        self, work_dir: Path, duration: float, rounds: int, warmup: float, retries: int = 2
    ) -> None:
        self.work_dir = work_dir
        self.duration = duration
        self.rounds = rounds
        self.warmup = warmup
        self.retries = retries
        port = free_port()
        self.sink = Server(
            "sink",
            [sys.executable, "-m", "bench.otlp_sink", "--port", str(port)],
            port,
            work_dir / "sink.out",
        )
        self.on = guardd_server(self._dir("on"), name="on")
        self.off = guardd_server(self._dir("off"), name="off")
        self.data_files: dict[str, Path] = {}
        self.splits: dict[str, list[CpuSplit]] = {"on": [], "off": []}

    def _dir(self, side: str) -> Path:
        path = self.work_dir / side
        path.mkdir()
        return path / "guard-data"

    def start(self) -> None:
        self.sink.start(env=server_env({}))
        traced = {
            "OTEL_EXPORTER_OTLP_ENDPOINT": self.sink.url,
            "OTEL_TRACES_SAMPLER": "always_on",
            "OTEL_SERVICE_NAME": "guardd-bench",
        }
        ids = [f"bench-agent-{i:03d}" for i in range(N_AGENTS)]
        for server, env in ((self.on, traced), (self.off, {})):
            server.start(env=server_env(env))
            data_dir = Path(server.argv[server.argv.index("--data-dir") + 1])
            tokens = asyncio.run(create_agents(server.url, admin_token(data_dir), ids))
            path = self.work_dir / f"wrk-{server.name}.lua"
            write_wrk_data(path, "decide", [(a, tokens[a]) for a in ids])
            self.data_files[server.name] = path

    def stop(self) -> None:
        self.on.stop()
        self.off.stop()
        self.sink.stop()

    def received(self) -> dict[str, int]:
        counts: dict[str, int] = httpx.get(f"{self.sink.url}/count", timeout=30.0).json()
        return counts

    def _round(self, server: Server, report: Any) -> Round:
        data_file = self.data_files[server.name]
        splits: dict[int, CpuSplit] = {}

        def measure() -> Round:
            before = self.sink.cpu_seconds()
            result = run_wrk(server, "decide", CONCURRENCY, self.duration, data_file)
            splits[id(result)] = cpu_split(result, self.sink.cpu_seconds() - before)
            return result

        result = quietest_round(measure, self.retries, report)
        self.splits[server.name].append(splits[id(result)])
        return result

    def run(self, report: Any = print) -> tuple[Pair, int]:
        """The rounds, as a Pair whose "floor" side is tracing off and
        "guardd" on; and the requests the traced guardd answered."""
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
                report(f"{format_round(result)}; {self.splits[server.name][-1].format()}")
        # Every decision of the traced guardd, warm-up and retried rounds
        # included, from its own metrics.
        decided = _decisions(self.on)
        return Pair("decide", CONCURRENCY, off, on), decided


def _decisions(server: Server) -> int:
    data_dir = Path(server.argv[server.argv.index("--data-dir") + 1])
    headers = {"Authorization": f"Bearer {admin_token(data_dir)}"}
    text = httpx.get(f"{server.url}/metrics", headers=headers, timeout=30.0).text
    total = 0.0
    for line in text.splitlines():
        if line.startswith("guard_decisions_total{"):
            total += float(line.rsplit(" ", 1)[1])
    return int(total)


def results(
    pair: Pair,
    decided: int,
    received: dict[str, int],
    duration: float,
    splits: dict[str, list[CpuSplit]] | None = None,
) -> dict[str, Any]:
    ratio = pair.throughput_ratio
    busy = max(r.others_cpu for r in [*pair.floor, *pair.guardd])
    return {
        "round_seconds": duration,
        "rounds_per_server": len(pair.guardd),
        f"tracing_on_c{CONCURRENCY}": (
            f"{pair.median('guardd', 'rps'):.0f} req/s, p99 "
            f"{pair.median('guardd', 'p99_us') / 1000:.2f} ms"
        ),
        f"tracing_off_c{CONCURRENCY}": (
            f"{pair.median('floor', 'rps'):.0f} req/s, p99 "
            f"{pair.median('floor', 'p99_us') / 1000:.2f} ms"
        ),
        "on_off_throughput": f"{ratio:.3f}x (target >= {TARGET})",
        "on_off_p99": f"{pair.p99_ratio:.3f}x",
        **{
            f"cpu_tracing_{side}": median_split(found).format().removeprefix("CPU ")
            for side, found in (splits or {}).items()
            if found
        },
        "others_cpu_max": f"{busy:.0%}",
        # Spans exported against decisions made: short of 1 when the export
        # queue overflowed and dropped spans.
        "spans_received": f"{received['spans']:,} of {decided:,} decisions"
        f" in {received['exports']:,} exports",
        "pass": ratio >= TARGET,
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(
        prog="python -m bench.tracing_bench",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--duration", type=float, default=10.0, help="seconds per wrk round")
    parser.add_argument("--rounds", type=int, default=2, help="rounds per server, ABBA")
    parser.add_argument("--warmup", type=float, default=2.0, help="seconds of warm-up per server")
    parser.add_argument(
        "--retries",
        type=int,
        default=2,
        help=f"measure a round again when the rest of the machine used > {BUSY_CORES} cores",
    )
    args = parser.parse_args([] if argv is None else argv)
    print(
        f"tracing_bench: {os.cpu_count()} cores, load {os.getloadavg()[0]:.2f};"
        f" decide c={CONCURRENCY}, {args.duration:g} s rounds x {args.rounds} per side,"
        f" wrk {wrk_path()}"
    )
    with tempfile.TemporaryDirectory(prefix="guard-tracing-cost-") as tmp:
        bench = TracingCost(Path(tmp), args.duration, args.rounds, args.warmup, args.retries)
        try:
            bench.start()
            pair, decided = bench.run()
            bench.on.stop()  # it sends the spans it still holds before it exits
            received = bench.received()
        finally:
            bench.stop()
    out = results(pair, decided, received, args.duration, bench.splits)
    print(
        f"  -> tracing on/off: throughput {pair.throughput_ratio:.3f}x"
        f" (median {pair.median('guardd', 'rps'):.0f} vs {pair.median('floor', 'rps'):.0f}"
        f" req/s), p99 {pair.p99_ratio:.3f}x; {out['spans_received']};"
        f" {'met' if out['pass'] else 'MISSED'} (>= {TARGET})"
    )
    return out


if __name__ == "__main__":
    sys.exit(0 if main(sys.argv[1:]).get("pass") is not False else 1)
