"""Start of a data dir with long histories: today's start against the start
that uses signed checkpoints and state snapshots, on the same logs, in the
same run.

Three starts, each ``Registry.load()`` in a fresh process (startup_bench's
``measure_load``), as guardd does before it serves:

- **full**: ``--agents`` x ``--records`` with neither checkpoints nor
  snapshots: every signature checked, every record folded from genesis
  (what a start cost before them);
- **big**: the same logs with each agent's signed checkpoint and state
  snapshot at its head (what a node leaves behind once it ran): the chain's
  hashes checked from genesis, no signature, no record folded;
- **small**: ``--agents`` x ``--small-records`` (default 1,000), as big.

Then the big and small dirs again with agents loaded on first use
(guardd ``--load-agents on-first-use``), each in a fresh process: the time
until ``Registry.load()`` returns (guardd serves then), and apart from it
the time until the background sweep has loaded every agent.

Targets: full / big >= 10x, and big / small <= 2x, for each way of
loading, on the time until guardd serves; the sweep's time is printed
beside it. ``pass`` is the result of loading on first use (the targets
cannot be met by a start that verifies every log before serving: the
chain's hashes are checked from genesis); ``at_start_pass`` that of the
start that loads every agent first.

The logs are startup_bench's generated logs (``bench/.cache/``, generated
once, one worker process per CPU). Each start gets a data dir of its own
whose ``agents/`` files are hard links to the cached logs (no copy, and the
logs are never written); the checkpoints and snapshots of the big and small
dirs are written once, in parallel, and cached beside them.

    python -m bench history                                  # 1,000 x 10,000 vs 1,000
    python -m bench.history_bench --agents 20 --records 2000 --small-records 200
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from agents_runtime.core.snapshot import SCHEMA, state_json
from agents_runtime.log.checkpoint import CheckpointDir
from agents_runtime.log.files.datadir import DataDir
from agents_runtime.log.files.store import FileStore
from agents_runtime.log.keys import load_keys
from agents_runtime.log.snapshot import seal_snapshot
from agents_runtime.runtime.registry import Loading, Registry, load_workers
from agents_runtime.runtime.replay import load
from bench.startup_bench import CACHE_DIR, agent_ids, cached_data_dir, measure_load

FULL_OVER_BIG = 10.0  # the full start is at least this many times slower
BIG_OVER_SMALL = 2.0  # the big start takes at most this many times the small one
HISTORY_VERSION = 1  # bump when what a prepared dir holds changes


def _linked(logs: Path, root: Path) -> None:
    """A data dir at ``root`` holding the keys of ``logs`` and hard links to
    its agents' logs (copies where the file system has no hard links)."""
    source = DataDir(logs)
    target = DataDir(root)
    shutil.copytree(source.keys_dir, target.keys_dir)
    target.agents_dir.mkdir(parents=True)
    for entry in os.scandir(source.agents_dir):
        try:
            os.link(entry.path, target.agents_dir / entry.name)
        except OSError:
            shutil.copy2(entry.path, target.agents_dir / entry.name)


def _seal_heads(root: str, ids: Sequence[str]) -> int:
    """In a worker: each agent's log verified and folded, then its state
    snapshot and signed checkpoint written at its head, as guardd's
    background rounds write them."""
    data_dir = DataDir(Path(root))
    store = FileStore(data_dir)
    ring = load_keys(data_dir.keys_dir)
    assert ring.signer is not None
    checkpoints = CheckpointDir(store.default_checkpoint_dir())
    heads = {}
    for agent_id in ids:
        loaded = load(store, agent_id, ring.public_key, signer=ring.signer)
        assert loaded.state is not None, (agent_id, loaded.failure)
        head = loaded.state.head
        data = seal_snapshot(agent_id, head, SCHEMA, state_json(loaded.state), ring.signer)
        store.write_snapshot(agent_id, head.seq, data)
        heads[agent_id] = head
    checkpoints.write(heads, ring.signer)
    return len(ids)


def _prepared(agents: int, records: int, *, sealed: bool) -> Path:
    """The cached data dir of this size for a start: bare (logs and keys), or
    with every agent's snapshot and signed checkpoint at its head."""
    logs = cached_data_dir(agents, records)
    # Snapshots of another state layout would be ignored by the start, which
    # would then fold from genesis: the sealed dir is named for the layout.
    kind = f"sealed-{SCHEMA[:12]}" if sealed else "bare"
    root = CACHE_DIR / f"history-v{HISTORY_VERSION}-{kind}-{agents}x{records}"
    marker = root / "complete.json"
    if marker.exists():
        return root
    shutil.rmtree(root, ignore_errors=True)
    if sealed:  # those of earlier layouts, at this size
        for stale in CACHE_DIR.glob(f"history-v*-sealed*-{agents}x{records}"):
            shutil.rmtree(stale, ignore_errors=True)
    _linked(logs, root)
    if sealed:
        print(f"writing snapshots and checkpoints in {root} (once) ...", flush=True)
        started = time.perf_counter()
        DataDir(root).snapshots_dir.mkdir(mode=0o700, exist_ok=True)
        CheckpointDir(FileStore(DataDir(root)).default_checkpoint_dir()).prepare()
        ids = agent_ids(agents)
        workers = load_workers()
        chunks = [ids[k :: workers * 4] for k in range(workers * 4)]
        with ProcessPoolExecutor(workers) as pool:
            done = sum(pool.map(_seal_heads, [str(root)] * len(chunks), chunks))
        assert done == agents
        print(f"written in {time.perf_counter() - started:.1f} s", flush=True)
    marker.write_text(json.dumps({"agents": agents, "records": records, "sealed": sealed}))
    return root


def _first_use_child(root: Path) -> dict[str, Any]:
    """In a fresh process: ``Registry.load()`` with agents loaded on first
    use, then the registry started until its sweep has loaded every agent;
    print one JSON line."""
    data_dir = DataDir(root)
    registry = Registry(
        FileStore(data_dir), load_keys(data_dir.keys_dir), loading=Loading.ON_FIRST_USE
    )
    started = time.perf_counter()
    summary = registry.load()
    seconds = time.perf_counter() - started

    async def sweep() -> float:
        began = time.perf_counter()
        await registry.start()
        await registry.swept()
        took = time.perf_counter() - began
        await registry.stop()
        return took

    swept = asyncio.run(sweep())
    records = sum(actor.state.head.seq + 1 for actor in registry.actors.values())
    result = {
        "seconds": seconds,
        "sweep_seconds": swept,
        "listed": summary.unloaded,
        "records": records,
        "loaded": len(registry.actors),
        "quarantined": len(registry.quarantined),
    }
    print(json.dumps(result))
    return result


def _first_use_start(root: Path) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-m", "bench.history_bench", "--first-use-child", str(root)],
        capture_output=True,
        text=True,
        check=False,
        cwd=Path(__file__).resolve().parent.parent,
    )
    if done.returncode != 0:
        raise RuntimeError(f"load failed:\n{done.stdout}\n{done.stderr}")
    result: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    result["snapshots_ignored"] = done.stderr.count("ignoring its state snapshot")
    if result["quarantined"]:
        raise RuntimeError(f"a start of {root} quarantined {result['quarantined']} agents")
    if result["snapshots_ignored"]:
        raise RuntimeError(f"a start of {root} ignored {result['snapshots_ignored']} snapshots")
    return result


def _start(root: Path) -> dict[str, Any]:
    result = measure_load(root)
    if result["quarantined"]:
        raise RuntimeError(f"a start of {root} quarantined {result['quarantined']} agents")
    if result["snapshots_ignored"]:
        raise RuntimeError(f"a start of {root} ignored {result['snapshots_ignored']} snapshots")
    return result


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(
        prog="python -m bench.history_bench",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    env = os.environ.get
    parser.add_argument("--agents", type=int, default=int(env("BENCH_HISTORY_AGENTS", 1000)))
    parser.add_argument("--records", type=int, default=int(env("BENCH_HISTORY_RECORDS", 10000)))
    parser.add_argument(
        "--small-records", type=int, default=int(env("BENCH_HISTORY_SMALL_RECORDS", 1000))
    )
    parser.add_argument("--first-use-child", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args([] if argv is None else argv)
    if args.first_use_child is not None:
        return _first_use_child(args.first_use_child)
    full_dir = _prepared(args.agents, args.records, sealed=False)
    big_dir = _prepared(args.agents, args.records, sealed=True)
    small_dir = _prepared(args.agents, args.small_records, sealed=True)
    print(
        f"history_bench: {os.cpu_count()} cores, load {os.getloadavg()[0]:.2f};"
        f" {args.agents} agents x {args.records} records vs x {args.small_records}",
        flush=True,
    )
    full = _start(full_dir)
    big = _start(big_dir)
    small = _start(small_dir)
    lazy = _first_use_start(big_dir)
    lazy_small = _first_use_start(small_dir)
    for result in (big, lazy):
        if full["records"] != result["records"]:
            raise RuntimeError(
                f"the starts loaded {full['records']} and {result['records']} records"
            )
    speedup = full["seconds"] / big["seconds"]
    growth = big["seconds"] / small["seconds"]
    met = speedup >= FULL_OVER_BIG and growth <= BIG_OVER_SMALL
    lazy_speedup = full["seconds"] / lazy["seconds"]
    lazy_growth = lazy["seconds"] / lazy_small["seconds"]
    lazy_met = lazy_speedup >= FULL_OVER_BIG and lazy_growth <= BIG_OVER_SMALL
    print(
        f"  at start: full {full['seconds']:.2f} s, with checkpoints and snapshots"
        f" {big['seconds']:.2f} s ({speedup:.1f}x, target >= {FULL_OVER_BIG:g}x);"
        f" x {args.small_records} records {small['seconds']:.2f} s"
        f" ({growth:.2f}x, target <= {BIG_OVER_SMALL:g}x)",
        flush=True,
    )
    print(
        f"  on first use: serving after {lazy['seconds'] * 1e3:.1f} ms ({lazy_speedup:.0f}x,"
        f" target >= {FULL_OVER_BIG:g}x); x {args.small_records} records"
        f" {lazy_small['seconds'] * 1e3:.1f} ms ({lazy_growth:.2f}x,"
        f" target <= {BIG_OVER_SMALL:g}x);"
        f" every agent loaded by the sweep {lazy['sweep_seconds']:.2f} s after it"
        f" (x {args.small_records}: {lazy_small['sweep_seconds']:.2f} s)",
        flush=True,
    )
    return {
        "agents": args.agents,
        "records": full["records"],
        "small_records": small["records"],
        "full_start_s": round(full["seconds"], 3),
        "start_s": round(big["seconds"], 3),
        "small_start_s": round(small["seconds"], 3),
        "full_over_start": round(speedup, 2),
        "start_over_small": round(growth, 2),
        "at_start_pass": met,
        "first_use_start_s": round(lazy["seconds"], 4),
        "first_use_small_start_s": round(lazy_small["seconds"], 4),
        "first_use_sweep_s": round(lazy["sweep_seconds"], 3),
        "first_use_small_sweep_s": round(lazy_small["sweep_seconds"], 3),
        "full_over_first_use": round(lazy_speedup, 2),
        "first_use_over_small": round(lazy_growth, 2),
        "pass": lazy_met,
    }


if __name__ == "__main__":
    sys.exit(0 if main(sys.argv[1:]).get("pass", True) else 1)
