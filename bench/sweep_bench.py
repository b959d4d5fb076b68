"""Serving while the background sweep loads every agent, against serving
after it, in the same process.

With ``--load-agents on-first-use`` guardd answers at once and loads the
agents nobody asked for on a worker thread (the sweep), with requests served
in between. This measures what the sweep costs those requests: guardd on
the history benchmark's data dir with checkpoints and snapshots
(``--agents`` x ``--records``, default 1,000 x 10,000, cached under
``bench/.cache/``), wrk driving decisions (``bench/wrk/guard.lua``,
workload ``decide``, c=``--concurrency``) at ``--served`` agents (each
asked once first, which loads it: first uses are not what is measured),
first while the sweep runs, then once it has ended (the floor: the same
server, the same agents, nothing loading). The served agents' logs are copies (the
requests append to them); the others are hard links to the cache, which
is only read. The figures are the ratios of p99 and of throughput, during
over after. No target: reported.

    python -m bench.sweep_bench
    python -m bench.sweep_bench --agents 100 --records 2000 --seconds 5
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from agents_runtime.log.files.datadir import DataDir
from agents_runtime.log.keys import agent_token, load_keys
from bench.history_bench import _linked, _prepared
from bench.http_bench import Round, admin_token, guardd_server, run_wrk, write_wrk_data
from bench.startup_bench import agent_ids


def _data_dir(sealed: Path, root: Path, served: list[str]) -> None:
    """``root``: the sealed dir's logs linked, the served agents' copied, its
    checkpoints and snapshots copied (guardd rewrites them)."""
    _linked(sealed, root)
    source, target = DataDir(sealed), DataDir(root)
    for agent_id in served:
        log = target.agents_dir / f"{agent_id}.jsonl"
        log.unlink()
        shutil.copy2(source.agents_dir / f"{agent_id}.jsonl", log)
    for name in ("checkpoints", "snapshots"):
        if (sealed / name).exists():
            shutil.copytree(sealed / name, root / name)


def _unloaded(url: str, admin: str) -> int:
    agents = httpx.get(
        f"{url}/v1/agents", headers={"Authorization": f"Bearer {admin}"}, timeout=60.0
    ).json()["agents"]
    return sum(1 for a in agents if a["state"] == "unloaded")


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Run the benchmark; ``argv`` None means the defaults and BENCH_* variables."""
    parser = argparse.ArgumentParser(
        prog="python -m bench.sweep_bench",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    env = os.environ.get
    parser.add_argument("--agents", type=int, default=int(env("BENCH_SWEEP_AGENTS", 1000)))
    parser.add_argument("--records", type=int, default=int(env("BENCH_SWEEP_RECORDS", 10000)))
    parser.add_argument("--served", type=int, default=50)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args([] if argv is None else argv)

    sealed = _prepared(args.agents, args.records, sealed=True)
    served = agent_ids(args.agents)[-args.served :]  # the sweep reaches them last
    token_key = load_keys(DataDir(sealed).keys_dir).token_key
    with tempfile.TemporaryDirectory(prefix="guard-sweep-") as tmp:
        root = Path(tmp) / "guard-data"
        _data_dir(sealed, root, served)
        data_file = Path(tmp) / "sweep.lua"
        write_wrk_data(data_file, "decide", [(a, agent_token(token_key, a)) for a in served])
        server = guardd_server(root, args=["--load-agents", "on-first-use"])
        server.start(timeout=600.0)
        admin = admin_token(root)
        try:
            started = time.monotonic()
            # The served agents loaded first (each on its first use): the
            # rounds measure the sweep's effect on requests, not first uses.
            with httpx.Client(base_url=server.url, timeout=600.0) as client:
                for agent_id in served:
                    client.get(
                        f"/v1/agents/{agent_id}",
                        headers={"Authorization": f"Bearer {agent_token(token_key, agent_id)}"},
                    ).raise_for_status()
            warmed = time.monotonic() - started
            during: Round = run_wrk(server, "decide", args.concurrency, args.seconds, data_file)
            left = _unloaded(server.url, admin)
            if left == 0:
                raise RuntimeError("the sweep ended before the first round did: use more records")
            while _unloaded(server.url, admin):
                time.sleep(1.0)
            swept = time.monotonic() - started
            after = run_wrk(server, "decide", args.concurrency, args.seconds, data_file)
        finally:
            server.stop()
    p99 = during.p99_us / after.p99_us
    rps = during.rps / after.rps
    print(
        f"sweep_bench: {args.agents:,} x {args.records:,} records, loading on first use;"
        f" wrk decide c={args.concurrency} at {args.served} agents, {args.seconds:g} s each;"
        f" the served agents loaded in {warmed:.1f} s, {left} agents still unloaded after"
        f" the first round, the sweep over after {swept:.0f} s\n"
        f"\n| round | req/s | p50 ms | p99 ms |\n|---|---|---|---|\n"
        f"| during the sweep | {during.rps:.0f} | {during.p50_us / 1000:.1f}"
        f" | {during.p99_us / 1000:.1f} |\n"
        f"| after it (floor) | {after.rps:.0f} | {after.p50_us / 1000:.1f}"
        f" | {after.p99_us / 1000:.1f} |\n"
        f"\nduring / after: p99 {p99:.2f}x, throughput {rps:.2f}x"
    )
    return {
        "records": args.agents * args.records,
        "unloaded_after_first_round": left,
        "sweep_seconds": round(swept, 1),
        "p99_during_ms": round(during.p99_us / 1000, 1),
        "p99_after_ms": round(after.p99_us / 1000, 1),
        "p99_ratio": round(p99, 2),
        "throughput_ratio": round(rps, 2),
    }


if __name__ == "__main__":
    main(sys.argv[1:])
    sys.exit(0)
