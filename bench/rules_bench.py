"""Policy rules benchmark: decide with a 3-rule policy against the plain one.

One guardd (as shipped, fsync on) serves two sets of 100 agents: the first
under ``http_bench``'s plain policy, the second under the same policy whose
``web_search`` rule also has tags and 3 rules: one reading ``input``, one
reading ``history``, one reading both. None of them is true for the
benchmark's request, so every decision evaluates all three (the most a
request of this policy costs) and is then allowed. wrk drives decide at
c=64 over each set of agents in turn, rounds interleaved ABBA on the same
server, and the result is the ratio of the medians (target: rules keep at
least 0.9 of the plain throughput).

    python -m bench.rules_bench                    # 10 s rounds, 2 per side
    python -m bench.rules_bench --duration 3 --rounds 1
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench.http_bench import (
    BUSY_CORES,
    N_AGENTS,
    POLICY,
    Pair,
    Round,
    admin_token,
    create_agents,
    format_round,
    guardd_server,
    quietest_round,
    run_wrk,
    write_wrk_data,
    wrk_path,
)

TARGET = 0.9  # decide throughput with rules, at least this share of the plain policy's

# http_bench's DECIDE_BODY calls web_search with {"query": ..., "max_results": 5}.
RULES = [
    {"name": "long-query", "when": "size(input.query) > 500", "effect": "deny"},
    {"name": "after-private", "when": "'private_data' in history.tags_used", "effect": "deny"},
    {
        "name": "many-recent",
        "when": "input.max_results > 50 && history.calls['web_search'] > 1000000",
        "effect": "require_approval",
    },
]


def rules_policy() -> dict[str, Any]:
    policy = copy.deepcopy(POLICY)
    policy["tools"]["web_search"] |= {"tags": ["external"], "rules": RULES}
    return policy


class RulesCost:
    """One guardd, plain agents and ruled agents; decide rounds interleaved
    ABBA, the quietest of each kept."""

    def __init__(
        self,
        work_dir: Path,
        duration: float,
        rounds: int,
        warmup: float,
        concurrency: int,
        retries: int = 2,
    ) -> None:
        self.work_dir = work_dir
        self.duration = duration
        self.rounds = rounds
        self.warmup = warmup
        self.concurrency = concurrency
        self.retries = retries
        self.data_dir = work_dir / "guard-data"
        self.server = guardd_server(self.data_dir)
        self.data_files: dict[str, Path] = {}

    def start(self) -> None:
        self.server.start()
        admin = admin_token(self.data_dir)
        for side, policy in (("plain", POLICY), ("rules", rules_policy())):
            ids = [f"bench-{side}-{i:03d}" for i in range(N_AGENTS)]
            tokens = asyncio.run(create_agents(self.server.url, admin, ids, policy))
            path = self.work_dir / f"wrk-{side}.lua"
            write_wrk_data(path, "decide", [(a, tokens[a]) for a in ids])
            self.data_files[side] = path

    def stop(self) -> None:
        self.server.stop()

    def _round(self, side: str, report: Any) -> Round:
        data_file = self.data_files[side]
        return quietest_round(
            lambda: run_wrk(self.server, "decide", self.concurrency, self.duration, data_file),
            self.retries,
            report,
            label=f"{side}: ",
        )

    def run(self, report: Any = print) -> Pair:
        """The rounds; the Pair's "floor" side is the plain policy, "guardd" the rules."""
        if self.warmup > 0:
            for side in ("plain", "rules"):
                run_wrk(self.server, "decide", 16, self.warmup, self.data_files[side])
        plain: list[Round] = []
        ruled: list[Round] = []
        for k in range(self.rounds):
            order = ("plain", "rules") if k % 2 == 0 else ("rules", "plain")
            for side in order:
                result = self._round(side, report)
                (ruled if side == "rules" else plain).append(result)
                report(f"{side}: {format_round(result)}")
        return Pair("decide", self.concurrency, plain, ruled)


def results(pair: Pair, duration: float) -> dict[str, Any]:
    ratio = pair.throughput_ratio
    busy = max(r.others_cpu for r in [*pair.floor, *pair.guardd])
    errors = sum(r.error_count for r in [*pair.floor, *pair.guardd])
    c = pair.concurrency
    return {
        "round_seconds": duration,
        "rounds_per_side": len(pair.guardd),
        f"plain_decide_c{c}": (
            f"{pair.median('floor', 'rps'):.0f} req/s, p99 "
            f"{pair.median('floor', 'p99_us') / 1000:.2f} ms"
        ),
        f"rules_decide_c{c}": (
            f"{pair.median('guardd', 'rps'):.0f} req/s, p99 "
            f"{pair.median('guardd', 'p99_us') / 1000:.2f} ms"
        ),
        "rules_plain_throughput": f"{ratio:.3f}x (target >= {TARGET})",
        "rules_plain_p99": f"{pair.p99_ratio:.3f}x",
        "errors": errors,
        "others_cpu_max": f"{busy:.0%}",
        "pass": ratio >= TARGET and errors == 0,
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(
        prog="python -m bench.rules_bench",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--duration", type=float, default=10.0, help="seconds per wrk round")
    parser.add_argument("--rounds", type=int, default=2, help="rounds per side, ABBA")
    parser.add_argument("--warmup", type=float, default=2.0, help="seconds of warm-up per side")
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument(
        "--retries",
        type=int,
        default=2,
        help=f"measure a round again when the rest of the machine used > {BUSY_CORES} cores",
    )
    args = parser.parse_args([] if argv is None else argv)
    print(
        f"rules_bench: {os.cpu_count()} cores, load {os.getloadavg()[0]:.2f};"
        f" decide c={args.concurrency}, {args.duration:g} s rounds x {args.rounds} per side,"
        f" wrk {wrk_path()}"
    )
    with tempfile.TemporaryDirectory(prefix="guard-rules-bench-") as tmp:
        bench = RulesCost(
            Path(tmp), args.duration, args.rounds, args.warmup, args.concurrency, args.retries
        )
        try:
            bench.start()
            pair = bench.run()
        finally:
            bench.stop()
    out = results(pair, args.duration)
    print(f"  -> rules/plain decide throughput {pair.throughput_ratio:.3f}x")
    return out


if __name__ == "__main__":
    sys.exit(0 if main(sys.argv[1:]).get("pass") is not False else 1)
