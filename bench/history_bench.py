"""Start of a data dir with long histories: folding from genesis against
folding from each agent's state snapshot.

Generates ``--agents`` logs of ``--records`` records (startup_bench's
generator, in a temporary directory), loads them with ``Registry.load()``
as a start does without snapshots, writes every agent's snapshot at its
head, and loads again: both loads still verify every record; the second
folds none. Figures: seconds of each load and their ratio. Run at a size
that fits the machine (``python -m bench.history_bench --agents 1000
--records 10000``); the defaults are small. docs/benchmarks.md gives
measured figures.
"""

from __future__ import annotations

import argparse
import os
import pickle
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from agents_runtime.log.files.datadir import DataDir
from agents_runtime.log.files.store import FileStore
from agents_runtime.log.keys import load_keys
from agents_runtime.runtime.registry import Registry
from bench.startup_bench import generate


def _load(root: Path, workers: int | None) -> tuple[Registry, float, int]:
    data_dir = DataDir(root)
    registry = Registry(FileStore(data_dir), load_keys(data_dir.keys_dir))
    started = time.perf_counter()
    summary = registry.load(workers=workers)
    seconds = time.perf_counter() - started
    assert not summary.quarantined, summary.quarantined
    return registry, seconds, sum(a.state.head.seq + 1 for a in registry.actors.values())


def _write_snapshots(registry: Registry) -> None:
    """Every agent's snapshot at its head, as the background rounds write it."""
    taken = {
        agent_id: (actor.state.head, pickle.dumps(actor.state, pickle.HIGHEST_PROTOCOL))
        for agent_id, actor in registry.actors.items()
    }
    written = registry._write_snapshots(taken)  # the rounds' own writer
    assert len(written) == len(taken)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog="python -m bench.history_bench", description=__doc__)
    env = os.environ.get
    parser.add_argument("--agents", type=int, default=int(env("BENCH_HISTORY_AGENTS", 10)))
    parser.add_argument("--records", type=int, default=int(env("BENCH_HISTORY_RECORDS", 1000)))
    parser.add_argument("--workers", type=int, default=None, help="load workers (default: CPUs)")
    args = parser.parse_args([] if argv is None else argv)
    root = Path(tempfile.mkdtemp(prefix="history-bench-"))
    try:
        generate(root, args.agents, args.records, workers=1)
        registry, genesis, records = _load(root, args.workers)
        _write_snapshots(registry)
        for actor in registry.actors.values():
            actor.log.close()
        registry, snapshot, again = _load(root, args.workers)
        for actor in registry.actors.values():
            actor.log.close()
        assert again == records
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return {
        "agents": args.agents,
        "records": records,
        "load_from_genesis_s": round(genesis, 3),
        "load_from_snapshots_s": round(snapshot, 3),
        "speedup": round(genesis / snapshot, 2) if snapshot else None,
    }


if __name__ == "__main__":
    print(main(sys.argv[1:]))
