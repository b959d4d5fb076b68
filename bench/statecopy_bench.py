"""The copy a lost race's rebuild starts from, against a whole copy.

An actor on a shared store keeps the state its last rebuild reached, to start
the next one from (``agents_runtime/runtime/statecopy.py``): each rebuild
copies the state it reaches and restores the previous copy. The floor is
what the actor did before, and the least any copy does: the whole state
pickled and unpickled. Both run in this process, interleaved, on the state
of one agent with a long history (the startup benchmark's generated log,
1 x ``--records``, cached under ``bench/.cache/``, verified and folded as a
start does); the figure is the ratio copy-and-restore / whole copy (lower is
better), the medians of ``--rounds`` rounds. No target: it is reported.

    python -m bench.statecopy_bench                      # 100,000 records
    python -m bench.statecopy_bench --records 1000000    # as in docs/benchmarks.md
"""

from __future__ import annotations

import argparse
import os
import pickle
import statistics
import sys
import time
from typing import Any

from agents_runtime.core.state import DEFAULT_RECENT_ACTIONS, keep_recent
from agents_runtime.log.files.datadir import DataDir
from agents_runtime.log.keys import load_keys
from agents_runtime.log.store import split_log
from agents_runtime.runtime.replay import replay
from agents_runtime.runtime.statecopy import copy_state, restore
from bench.startup_bench import cached_data_dir

_PICKLE = pickle.HIGHEST_PROTOCOL


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Run the benchmark; ``argv`` None means the defaults and BENCH_* variables."""
    parser = argparse.ArgumentParser(
        prog="python -m bench.statecopy_bench",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    env = os.environ.get
    parser.add_argument("--records", type=int, default=int(env("BENCH_STATECOPY_RECORDS", 100_000)))
    parser.add_argument("--rounds", type=int, default=int(env("BENCH_STATECOPY_ROUNDS", 50)))
    args = parser.parse_args([] if argv is None else argv)

    root = cached_data_dir(1, args.records)
    data_dir = DataDir(root)
    ring = load_keys(data_dir.keys_dir)
    log = next(data_dir.agents_dir.iterdir())
    loaded = replay(log.stem, split_log(log.read_bytes()), ring.public_key, signer=ring.signer)
    state = loaded.state
    assert state is not None, loaded.failure
    keep_recent(state, DEFAULT_RECENT_ACTIONS)

    whole: list[float] = []
    shared: list[float] = []
    for _ in range(args.rounds):
        started = time.perf_counter()
        pickle.loads(pickle.dumps(state, _PICKLE))  # noqa: S301 (our own)
        whole.append(time.perf_counter() - started)
        started = time.perf_counter()
        restore(copy_state(state))
        shared.append(time.perf_counter() - started)
    floor, copy = statistics.median(whole), statistics.median(shared)
    copied = copy_state(state)
    print(
        f"statecopy_bench: one agent, {state.head.seq + 1:,} records;"
        f" whole copy {len(pickle.dumps(state, _PICKLE)):,} bytes pickled,"
        f" the rebuild's copy {len(copied.rest):,}\n"
        f"\n| records | whole copy (floor) ms | copy and restore ms | ratio |\n"
        f"|---|---|---|---|\n"
        f"| {state.head.seq + 1:,} | {floor * 1000:.2f} | {copy * 1000:.2f} | {copy / floor:.2f} |"
    )
    return {
        "records": state.head.seq + 1,
        "whole_copy_ms": round(floor * 1000, 2),
        "copy_and_restore_ms": round(copy * 1000, 2),
        "ratio": round(copy / floor, 3),
    }


if __name__ == "__main__":
    main(sys.argv[1:])
    sys.exit(0)
