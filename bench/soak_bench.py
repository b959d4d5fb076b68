"""Soak: 200,000 actions over 1,000 agents against one guardd process, with
its RSS sampled all along. Not part of CI.

guardd runs as shipped (fsync on) on a temporary data directory. wrk drives
allowed actions (``bench/wrk/guard.lua``, workload ``decide``: each writes
action_requested + action_allowed) at concurrency 64, in rounds of a few
seconds until the total is reached; RSS is read from ``/proc/<pid>/status``
every half second and after each round. The target: RSS at the end is within
10% of RSS once the first 10% of the actions were done. Throughput of the
first and the last rounds is reported too: it should not sag as logs grow.

    python -m bench.soak_bench
    python -m bench.soak_bench --actions 20000 --agents 100
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from bench.http_bench import (
    Round,
    admin_token,
    create_agents,
    guardd_server,
    run_wrk,
    write_wrk_data,
)

TARGET_DRIFT = 0.10
CONCURRENCY = 64


class RssSampler(threading.Thread):
    """Reads a process's VmRSS every ``every`` seconds until stopped."""

    def __init__(self, read: Any, every: float = 0.5) -> None:
        super().__init__(daemon=True)
        self.read = read
        self.every = every
        self.samples: list[tuple[float, int]] = []
        self._finished = threading.Event()

    def run(self) -> None:
        started = time.monotonic()
        while not self._finished.wait(self.every):
            try:
                self.samples.append((time.monotonic() - started, self.read()))
            except OSError:
                return

    def stop(self) -> None:
        self._finished.set()
        if self.ident is not None:
            self.join()


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Run the soak; ``argv`` None means the defaults and BENCH_* variables."""
    parser = argparse.ArgumentParser(
        prog="python -m bench.soak_bench",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    env = os.environ.get
    parser.add_argument("--actions", type=int, default=int(env("BENCH_SOAK_ACTIONS", 200000)))
    parser.add_argument("--agents", type=int, default=int(env("BENCH_SOAK_AGENTS", 1000)))
    parser.add_argument("--round-seconds", type=float, default=5.0)
    args = parser.parse_args([] if argv is None else argv)

    with tempfile.TemporaryDirectory(prefix="guard-soak-") as tmp:
        work = Path(tmp)
        server = guardd_server(work / "guard-data")
        server.start()
        sampler = RssSampler(server.rss_kib)
        try:
            ids = [f"soak-{i:04d}" for i in range(args.agents)]
            tokens = asyncio.run(create_agents(server.url, admin_token(work / "guard-data"), ids))
            data_file = work / "soak.lua"
            write_wrk_data(data_file, "decide", [(a, tokens[a]) for a in ids])
            start_rss = server.rss_kib()
            print(
                f"soak_bench: {args.actions:,} actions over {args.agents} agents,"
                f" c={CONCURRENCY}; RSS with agents created {start_rss / 1024:.1f} MiB;"
                f" load {os.getloadavg()[0]:.2f}"
            )
            sampler.start()
            done = 0
            rounds: list[tuple[int, Round, int]] = []  # (actions done, round, RSS after)
            full: list[Round] = []  # rounds of the full length, for the rates
            rss_at_tenth: int | None = None
            done_at_tenth = 0
            rate = 1000.0
            while done < args.actions:
                left = args.actions - done
                # The first rounds are short so the 10% mark is read close to 10%.
                seconds = min(args.round_seconds, max(1.0, left / rate))
                if rss_at_tenth is None:
                    seconds = min(seconds, max(1.0, 0.05 * args.actions / rate))
                seconds = round(seconds)
                result = run_wrk(server, "decide", CONCURRENCY, seconds, data_file)
                if seconds == round(args.round_seconds):
                    full.append(result)
                if result.error_count:
                    raise RuntimeError(f"errors during the soak: {result.errors}")
                done += result.requests
                rate = result.rps
                rss = server.rss_kib()
                rounds.append((done, result, rss))
                if rss_at_tenth is None and done >= args.actions / 10:
                    rss_at_tenth, done_at_tenth = rss, done
                print(
                    f"  {done:>8,} actions  {result.rps:6.0f} req/s"
                    f"  p99 {result.p99_us / 1000:6.2f} ms  RSS {rss / 1024:7.1f} MiB"
                    f"  (others' cpu {result.others_cpu:.0%},"
                    f" load {result.load1:.2f})"
                )
        finally:
            sampler.stop()
            server.stop()
        assert rss_at_tenth is not None
    end_rss = rounds[-1][2]
    peak = max([rss for _, rss in sampler.samples] + [end_rss])
    drift = end_rss / rss_at_tenth - 1
    first, last = (full[0], full[-1]) if full else (rounds[0][1], rounds[-1][1])
    verdict = "met" if abs(drift) <= TARGET_DRIFT else "MISSED"
    per_action = (end_rss - rss_at_tenth) * 1024 / max(1, done - done_at_tenth)
    print(
        f"\n| actions | RSS at 10% MiB | RSS at end MiB | drift | peak MiB"
        f" | first / last full round req/s"
        f" | target |\n|---|---|---|---|---|---|---|\n"
        f"| {done:,} over {args.agents} agents | {rss_at_tenth / 1024:.1f} | {end_rss / 1024:.1f}"
        f" | {drift:+.1%} | {peak / 1024:.1f} | {first.rps:.0f} / {last.rps:.0f}"
        f" | within {TARGET_DRIFT:.0%}: {verdict} |"
    )
    print(f"RSS grew {per_action:,.0f} bytes per action after the 10% mark")
    return {
        "actions": done,
        "agents": args.agents,
        "rss_start_mib": round(start_rss / 1024, 1),
        "rss_at_10pct_mib": round(rss_at_tenth / 1024, 1),
        "rss_end_mib": round(end_rss / 1024, 1),
        "rss_peak_mib": round(peak / 1024, 1),
        "drift": round(drift, 3),
        "bytes_per_action_after_10pct": round(per_action),
        "first_full_round_rps": round(first.rps),
        "last_full_round_rps": round(last.rps),
        "target_drift": TARGET_DRIFT,
        "pass": abs(drift) <= TARGET_DRIFT,
    }


if __name__ == "__main__":
    sys.exit(0 if main(sys.argv[1:]).get("pass") is not False else 1)
