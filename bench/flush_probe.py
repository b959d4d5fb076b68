"""Flush probe: what making N appended files durable costs on this file system.

The measurements behind the committer's shared flush (docs/design.md,
"Durability shared across agents"). Each round appends one 301-byte line to
each of N files in a temporary directory, then makes them durable one way;
it prints the median and 90th percentile of the rounds and, from the block
device's own counters (``/sys/dev/block/<major>:<minor>/stat``), the device
writes and cache flushes a round cost: whether the kernel merged concurrent
fsyncs shows there, where an injected delay would hide it.

Ways: one ``fsync`` per file; ``fsync`` on 4, 16 and 64 threads at once;
``syncfs``; ``syncfs`` then ``fdatasync`` (what guardd does); one append to
one shared journal file and its ``fdatasync``.

Not part of ``python -m bench`` (no target, a diagnostic). Bounded: a few
seconds, its files removed at the end. The counters see every process
writing to the same device, so run it on a quiet machine.

    python -m bench.flush_probe                    # in a temporary dir here
    python -m bench.flush_probe --dir /var/lib/guard --files 1,64,100
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from agents_runtime.log.files.logfile import _syncfs

LINE = b"x" * 300 + b"\n"


def device_counters(path: Path) -> Callable[[], tuple[int, int]] | None:
    """A reader of (writes, flushes) completed by the device holding ``path``."""
    dev = os.stat(path).st_dev
    stat = Path(f"/sys/dev/block/{os.major(dev)}:{os.minor(dev)}/stat")
    if not stat.exists() or len(stat.read_text().split()) < 17:
        return None

    def read() -> tuple[int, int]:
        fields = stat.read_text().split()
        return int(fields[4]), int(fields[15])  # write I/Os, flush I/Os

    return read


def _ways(
    mine: list[int], journal: int, pools: dict[int, ThreadPoolExecutor]
) -> list[tuple[str, Callable[[], None]]]:
    """Each way of making the round's appends to ``mine`` durable."""

    def each() -> None:
        for fd in mine:
            os.fsync(fd)

    def threads(n: int) -> Callable[[], None]:
        def run() -> None:
            list(pools[n].map(os.fsync, mine))

        return run

    def syncfs() -> None:
        _syncfs(mine[0])

    def shared() -> None:  # what guardd does for a round of three logs or more
        _syncfs(mine[0])
        os.fdatasync(mine[0])

    def one_journal() -> None:
        os.write(journal, LINE * len(mine))
        os.fdatasync(journal)

    return [
        ("fsync each", each),
        ("fsync on 4 threads", threads(4)),
        ("fsync on 16 threads", threads(16)),
        ("fsync on 64 threads", threads(64)),
        ("syncfs", syncfs),
        ("syncfs + fdatasync", shared),
        ("one journal file", one_journal),
    ]


def probe(directory: Path, counts: list[int], rounds: int) -> list[str]:
    base = Path(tempfile.mkdtemp(prefix="flush-probe-", dir=directory))
    counters = device_counters(base)
    lines = []
    try:
        fds = [
            os.open(base / f"a{n}.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            for n in range(max(counts))
        ]
        journal = os.open(base / "journal", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        for fd in [*fds, journal]:
            os.write(fd, LINE)
            os.fsync(fd)
        pools = {n: ThreadPoolExecutor(n) for n in (4, 16, 64)}
        for count in counts:
            ways = _ways(fds[:count], journal, pools)
            for name, flush in ways:
                times = []
                before = counters() if counters else (0, 0)
                for _ in range(rounds):
                    for fd in fds[:count]:
                        os.write(fd, LINE)
                    started = time.perf_counter()
                    flush()
                    times.append(time.perf_counter() - started)
                after = counters() if counters else (0, 0)
                times.sort()
                device = (
                    f"  device writes {(after[0] - before[0]) / rounds:6.1f}"
                    f"  flushes {(after[1] - before[1]) / rounds:5.1f}"
                    if counters
                    else ""
                )
                lines.append(
                    f"{count:4d} files  {name:20s}  median {statistics.median(times) * 1e3:7.3f} ms"
                    f"  p90 {times[int(rounds * 0.9)] * 1e3:7.3f} ms{device}"
                )
                print(lines[-1], flush=True)
        for pool in pools.values():
            pool.shutdown()
        for fd in [*fds, journal]:
            os.close(fd)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.flush_probe",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--dir", type=Path, default=Path.cwd(), help="where (default: here)")
    parser.add_argument("--files", default="1,64,100", help="files per round (default 1,64,100)")
    parser.add_argument("--rounds", type=int, default=30, help="rounds per way (default 30)")
    args = parser.parse_args(argv)
    counts = [int(n) for n in args.files.split(",") if n]
    print(f"flush_probe: {args.dir}, load {os.getloadavg()[0]:.2f}, {args.rounds} rounds a way")
    probe(args.dir, counts, args.rounds)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
