"""Slow-disk benchmark: decisions per second when making data durable is slow.

On the virtual disk we measure on, an fsync returns quickly (docs/benchmarks.md,
"slow disk", has the figure); cloud
block storage and SSDs without a power-loss-protected cache take about 1 ms
or more. This runs guardd under strace, which delays the return of every
system call that can make data durable, so the figures show what guardd
would do on such a disk:

- ``fsync``, ``fdatasync``, ``syncfs``, ``sync``, ``sync_file_range`` and
  ``msync``;
- ``pwritev2``, the only call that takes ``RWF_DSYNC``/``RWF_SYNC``
  (delayed whatever its flags: guardd does not use it, so a delay there
  could only lower our figures);
- ``io_uring_enter``, which can run an fsync (likewise unused);
- writes on files opened with ``O_SYNC``/``O_DSYNC``: strace cannot delay
  a write by the flags of its file, so ``open``/``openat``/``openat2`` are
  traced too and a run in which guardd opened a file with either flag fails
  (the delays would have missed those writes).

The 0 ms runs go through the same strace with the same calls traced (so
both pay the same tracing cost); only the injected delay differs.

The workload is the HTTP benchmark's ``decide`` (bench/wrk/guard.lua: an
allowed action, two records signed and made durable before each answer) at
c=64 with two wrk threads, over 100 agents and over 1 agent. One guardd per
delay, all started first; the rounds of every setting are interleaved
(forwards, then backwards) and a round during which other processes used
more than 0.35 of a core is measured again (up to twice, the quietest
kept), as in the HTTP benchmark; medians of the rounds.

Target: with 100 agents, decisions/s at 1 ms >= 0.8x the same at 0 ms.

    python -m bench slowdisk
    python -m bench.slowdisk_bench --duration 5 --rounds 1 --delays 0,1
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import attrs

from bench.http_bench import (
    BUSY_CORES,
    Server,
    admin_token,
    create_agents,
    free_port,
    run_wrk,
    wait_quiet,
    write_wrk_data,
)

# Every call that can make data durable: delayed.
DURABLE_CALLS = (
    "fsync",
    "fdatasync",
    "syncfs",
    "sync",
    "sync_file_range",
    "msync",
    "pwritev2",
    "io_uring_enter",
)
# Traced, not delayed: a file opened O_SYNC/O_DSYNC would make writes durable.
OPEN_CALLS = ("open", "openat", "openat2")
SYNC_OPEN = re.compile(r"\bO_D?SYNC\b")

CONCURRENCY = 64
WRK_THREADS = 2
TARGET_RATIO = 0.8  # decisions/s at 1 ms >= 0.8x at 0 ms, 100 agents
AGENT_COUNTS = (100, 1)
DELAYS_MS = (0.0, 1.0, 2.0)
# Which agent counts run at which delay: 1 agent only at 0 and 1 ms.
ONE_AGENT_DELAYS = (0.0, 1.0)


def strace_path() -> str:
    found = shutil.which("strace")
    if found is None:
        raise SystemExit("strace not found: install it (make strace, or apt-get install strace)")
    return found


def strace_argv(delay_ms: float, trace_log: Path) -> list[str]:
    """strace as a prefix: the durable calls delayed by ``delay_ms`` on
    return (0: traced, not delayed), the opens logged to ``trace_log``."""
    argv = [strace_path(), "-f", "--seccomp-bpf", "-qq", "-o", str(trace_log)]
    argv += ["-e", "trace=" + ",".join(DURABLE_CALLS + OPEN_CALLS)]
    argv += ["-e", "signal=none"]
    if delay_ms > 0:
        micros = round(delay_ms * 1000)
        argv += ["-e", "inject=" + ",".join(DURABLE_CALLS) + f":delay_exit={micros}"]
    return argv


class TracedGuardd(Server):
    """guardd under strace. Stopped by signalling guardd itself (strace then
    exits with it), never strace: a detached guardd would outlive the run."""

    def __init__(self, data_dir: Path, delay_ms: float) -> None:
        self.data_dir = data_dir
        self.trace_log = data_dir.parent / f"strace-{delay_ms:g}ms.log"
        port = free_port()
        argv = strace_argv(delay_ms, self.trace_log)
        argv += [sys.executable, "-m", "guardd", "--port", str(port), "--data-dir", str(data_dir)]
        super().__init__("guardd", argv, port, data_dir.parent / f"guardd-{delay_ms:g}ms.out")

    def guardd_pid(self) -> int | None:
        """The process strace started (its only child)."""
        children = Path(f"/proc/{self.pid}/task/{self.pid}/children")
        try:
            pids = children.read_text().split()
        except OSError:
            return None
        return int(pids[0]) if pids else None

    def tracer_cpu_seconds(self) -> float:
        """CPU time of strace itself so far."""
        return super().cpu_seconds()

    def cpu_seconds(self) -> float:
        child = self.guardd_pid()
        if child is None:
            return super().cpu_seconds()
        stat = Path(f"/proc/{child}/stat").read_text()
        fields = stat[stat.rindex(")") + 2 :].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self, timeout: float = 30.0) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        child = self.guardd_pid()
        if child is not None:
            os.kill(child, signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            if child is not None:
                os.kill(child, signal.SIGKILL)
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def sync_opens(self) -> list[str]:
        """Lines of the trace that open a file O_SYNC or O_DSYNC."""
        if not self.trace_log.exists():
            return []
        with self.trace_log.open(errors="replace") as lines:
            return [line.strip() for line in lines if SYNC_OPEN.search(line)]


@attrs.frozen
class Sample:
    """One measured round of one setting."""

    delay_ms: float
    agents: int
    rps: float
    p99_ms: float
    guardd_cpu: float  # cores
    tracer_cpu: float  # cores used by strace itself
    others_cpu: float  # cores used by everything else but wrk


class Bench:
    """One guardd under strace per delay, all started first and each given
    100 agents; rounds of the settings interleaved (forwards, then
    backwards), each measured again while other processes used more than
    BUSY_CORES, keeping the quietest."""

    def __init__(self, work_dir: Path, delays: list[float], duration: float, rounds: int) -> None:
        self.work_dir = work_dir
        self.duration = duration
        self.rounds = rounds
        self.servers = {d: TracedGuardd(work_dir / f"data-{d:g}ms", d) for d in delays}
        self.data_files: dict[tuple[float, int], Path] = {}

    def start(self, report: Any) -> None:
        for delay, server in self.servers.items():
            server.start(timeout=300.0)
            report(f"  {delay:g} ms: {shlex.join(server.argv)}")
            admin = admin_token(server.data_dir)
            ids = [f"slow-agent-{i:03d}" for i in range(max(AGENT_COUNTS))]
            tokens = asyncio.run(create_agents(server.url, admin, ids))
            agents = [(a, tokens[a]) for a in ids]
            for count in AGENT_COUNTS:
                path = self.work_dir / f"wrk-{delay:g}ms-{count}.lua"
                write_wrk_data(path, "decide", agents[:count], threads=WRK_THREADS)
                self.data_files[delay, count] = path
            run_wrk(server, "decide", 16, 2.0, self.data_files[delay, 100], WRK_THREADS)  # warm-up

    def stop(self) -> None:
        for server in self.servers.values():
            server.stop()
        for server in self.servers.values():
            escaped = server.sync_opens()
            if escaped:
                raise RuntimeError(
                    "guardd opened files O_SYNC/O_DSYNC, whose writes no delay reached:\n"
                    + "\n".join(escaped[:5])
                )

    def settings(self) -> list[tuple[float, int]]:
        return [
            (delay, count)
            for delay in self.servers
            for count in AGENT_COUNTS
            if count != 1 or delay in ONE_AGENT_DELAYS
        ]

    def _once(self, delay: float, count: int) -> Sample:
        server = self.servers[delay]
        tracer = server.tracer_cpu_seconds()
        started = time.perf_counter()
        result = run_wrk(
            server, "decide", CONCURRENCY, self.duration, self.data_files[delay, count], WRK_THREADS
        )
        tracer = (server.tracer_cpu_seconds() - tracer) / (time.perf_counter() - started)
        if result.error_count:
            raise RuntimeError(f"errors at {delay:g} ms, {count} agents: {result.errors}")
        return Sample(
            delay,
            count,
            result.rps,
            result.p99_us / 1000,
            result.server_cpu,
            tracer,
            max(0.0, result.others_cpu - tracer),
        )

    def measure(self, delay: float, count: int, report: Any, retries: int = 2) -> Sample:
        best: Sample | None = None
        for attempt in range(retries + 1):
            if attempt:
                wait_quiet(60.0)
            this = self._once(delay, count)
            if best is None or this.others_cpu < best.others_cpu:
                best = this
            if this.others_cpu <= BUSY_CORES:
                break
            if attempt < retries:
                report(f"{format_sample(this)}  (busy machine: measured again)")
        assert best is not None
        report(format_sample(best))
        return best

    def run(self, report: Any) -> list[Sample]:
        samples = []
        settings = self.settings()
        for k in range(self.rounds):
            for delay, count in settings if k % 2 == 0 else reversed(settings):
                samples.append(self.measure(delay, count, report))
        return samples


def format_sample(s: Sample) -> str:
    return (
        f"    {s.delay_ms:g} ms, {s.agents:3d} agents: {s.rps:7.0f} decisions/s"
        f"  p99 {s.p99_ms:6.2f} ms  cpu: guardd {s.guardd_cpu:4.0%} strace {s.tracer_cpu:4.0%}"
        f" others {s.others_cpu:4.0%} (load {os.getloadavg()[0]:.2f})"
    )


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(
        prog="python -m bench.slowdisk_bench",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--duration",
        type=float,
        default=float(os.environ.get("BENCH_DURATION", 10)),
        help="seconds per wrk round (env BENCH_DURATION, default 10)",
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=int(os.environ.get("BENCH_ROUNDS", 2)),
        help="rounds per setting, interleaved (env BENCH_ROUNDS, default 2); medians",
    )
    parser.add_argument(
        "--delays",
        default=",".join(f"{d:g}" for d in DELAYS_MS),
        help="injected delays in ms (default 0,1,2; the ratio needs 0 and 1)",
    )
    args = parser.parse_args([] if argv is None else argv)
    delays = [float(d) for d in args.delays.split(",") if d]
    print(
        f"slowdisk_bench: {os.cpu_count()} cores, load {os.getloadavg()[0]:.2f};"
        f" decide c={CONCURRENCY} wrk -t{WRK_THREADS}, {args.duration:g} s rounds;"
        f" delayed on return: {', '.join(DURABLE_CALLS)}"
    )
    out: dict[str, Any] = {"round_seconds": args.duration, "rounds": args.rounds}
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="guard-slowdisk-bench-") as tmp:
        bench = Bench(Path(tmp), delays, args.duration, args.rounds)
        try:
            bench.start(print)
            samples = bench.run(print)
        finally:
            bench.stop()
    rps: dict[tuple[int, float], float] = {}
    for delay, count in bench.settings():
        mine = [x for x in samples if (x.delay_ms, x.agents) == (delay, count)]
        rps[count, delay] = statistics.median(x.rps for x in mine)
        out[f"agents_{count}_{delay:g}ms"] = (
            f"{rps[count, delay]:.0f} decisions/s (rounds: "
            + ", ".join(f"{x.rps:.0f}" for x in mine)
            + f"); p99 {statistics.median(x.p99_ms for x in mine):.2f} ms"
            + f"; others' cpu <= {max(x.others_cpu for x in mine):.0%}"
        )
    out["strace"] = shlex.join(strace_argv(1.0, Path("TRACE.log"))) + " python -m guardd ..."
    out["seconds"] = round(time.perf_counter() - started)
    if (100, 0.0) in rps and (100, 1.0) in rps:
        ratio = rps[100, 1.0] / rps[100, 0.0]
        out["ratio_100_agents_1ms_to_0ms"] = f"{ratio:.2f} (target >= {TARGET_RATIO})"
        out["pass"] = ratio >= TARGET_RATIO
    return out


if __name__ == "__main__":
    result = main(sys.argv[1:])
    width = max(map(len, result))
    for key, value in result.items():
        print(f"  {key.ljust(width)}  {value}")
    sys.exit(0 if result.get("pass") is not False else 1)
