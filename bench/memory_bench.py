"""Memory benchmark: RSS of guardd with 10,000 idle agents, per agent above
an empty server.

Each agent has a small log written with the real behaviour (genesis, policy,
a few allowed and denied actions, an outcome: see ``startup_bench.LogBuilder``),
cached under ``bench/.cache/``. Two guardd processes are measured one after
the other, RSS read from ``/proc/<pid>/status`` (VmRSS) once the server
answers and has been idle for a moment:

  empty   guardd on a fresh data directory (keys only)
  loaded  guardd on the 10,000-agent data directory

    python -m bench.memory_bench
    python -m bench.memory_bench --agents 1000 --records 8
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.http_bench import Server, guardd_server
from bench.startup_bench import cached_data_dir, fingerprint, unchanged

TARGET_KIB_PER_AGENT = 32
SETTLE_SECONDS = 2.0


def idle_rss(data_dir: Path, log_dir: Path) -> tuple[int, float]:
    """(VmRSS in KiB, seconds to ready) of guardd on ``data_dir`` once idle."""
    server: Server = guardd_server(data_dir)
    server.log_path = log_dir / f"guardd-{server.port}.out"
    try:
        server.start(timeout=900)
        time.sleep(SETTLE_SECONDS)
        return server.rss_kib(), server.ready_after
    finally:
        server.stop()


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Run the benchmark; ``argv`` None means the defaults and BENCH_* variables."""
    parser = argparse.ArgumentParser(
        prog="python -m bench.memory_bench",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--agents", type=int, default=int(os.environ.get("BENCH_MEMORY_AGENTS", 10000))
    )
    parser.add_argument("--records", type=int, default=8, help="records per log (default 8)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--json", type=Path, help="also write the results to this file")
    args = parser.parse_args([] if argv is None else argv)

    root = cached_data_dir(args.agents, args.records)
    disk = sum(p.stat().st_size for p in (root / "agents").iterdir())
    print(
        f"memory_bench: {args.agents} agents x {args.records} records"
        f" ({disk / args.agents:,.0f} bytes of log each); load {os.getloadavg()[0]:.2f}"
    )
    empties: list[int] = []
    loadeds: list[int] = []
    with tempfile.TemporaryDirectory(prefix="guard-memory-bench-") as tmp:
        for k in range(args.rounds):
            empty, _ = idle_rss(Path(tmp) / f"empty-{k}" / "guard-data", Path(tmp))
            before = fingerprint(root)
            loaded, ready = idle_rss(root, Path(tmp))
            unchanged(root, before)
            empties.append(empty)
            loadeds.append(loaded)
            print(
                f"  round {k + 1}: empty {empty / 1024:.1f} MiB, loaded {loaded / 1024:.1f} MiB"
                f" (ready after {ready:.1f} s; load {os.getloadavg()[0]:.2f})"
            )
    empty, loaded = min(empties), min(loadeds)
    per_agent = (loaded - empty) / args.agents
    verdict = "met" if per_agent <= TARGET_KIB_PER_AGENT else "MISSED"
    print(
        f"\n| agents | empty RSS MiB | loaded RSS MiB | KiB per agent | target |\n"
        f"|---|---|---|---|---|\n"
        f"| {args.agents} x {args.records} records | {empty / 1024:.1f} | {loaded / 1024:.1f}"
        f" | {per_agent:.1f} | <= {TARGET_KIB_PER_AGENT}: {verdict} |"
    )
    if args.json:
        args.json.write_text(
            json.dumps(
                {"empty_kib": empties, "loaded_kib": loadeds, "kib_per_agent": per_agent}, indent=1
            )
        )
    return {
        "agents": args.agents,
        "records_per_agent": args.records,
        "empty_rss_mib": round(empty / 1024, 1),
        "loaded_rss_mib": round(loaded / 1024, 1),
        "kib_per_agent": round(per_agent, 2),
        "target_kib_per_agent": TARGET_KIB_PER_AGENT,
        "pass": per_agent <= TARGET_KIB_PER_AGENT,
    }


if __name__ == "__main__":
    sys.exit(0 if main(sys.argv[1:]).get("pass") is not False else 1)
