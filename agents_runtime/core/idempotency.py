"""Idempotency-Keys past an agent's recent actions, kept compactly.

An agent keeps every Idempotency-Key for its retention window
(``--idempotency-retention``): a key reused inside it is a repeat. The keys
of its last ``recent_actions`` requests stay as they came, in a dict
(``AgentState.idempotency``); older keys still inside the retention are
moved, ``recent_actions`` at a time, into runs: three arrays each, sorted by
a 64-bit digest of the key, with the action number and the request's time.
About 24 bytes a key instead of some 230 for a key, its tuple, its number
and its time as Python objects.

Runs merge as a binary counter does (a new run merges with the newest while
that one is no larger, up to ``MAX_RUN`` entries), so an agent holds about
log2(MAX_RUN / recent) runs plus one per ``MAX_RUN`` keys. A merge drops the
entries already past the retention, and a run whose newest entry is past it
is dropped whole. Bloom filters (``KeyFilter``, about 2 bytes a key) stand
in front of the runs: a key never used, the common case, is found absent by
three bit tests per filter; only a key the filters may hold (a repeat, or
about one new key in thirty at a million keys) bisects every run.

The digest is BLAKE2b (8 bytes), the same in every process, so a snapshot
holds the same runs as the fold from genesis. Two keys with one digest are
told apart where it matters: a repeat reads its first request, whose key
must be the one asked with (``actions.request_action``).
"""

from __future__ import annotations

import math
from array import array
from bisect import bisect_left
from collections.abc import Iterable, Iterator, Sequence
from hashlib import blake2b
from heapq import merge

import attrs


def key_digest(key: str) -> int:
    """The 64-bit digest of an Idempotency-Key a run sorts by."""
    return int.from_bytes(blake2b(key.encode(), digest_size=8).digest(), "little")


# The largest run a merge makes: a merge runs inside the fold of one
# request, so this bounds its pause (some tens of milliseconds); past it,
# runs of this size pile up oldest first, one more bisection for a key the
# filters may hold.
MAX_RUN = 1 << 14


@attrs.define(slots=True)
class KeyRun:
    """Keys sorted by digest: entry i is ``digests[i]``, asked for action
    ``numbers[i]`` at ``times[i]``. Never changed once built (a merge builds
    a new run): copies of the state share runs (runtime/statecopy.py)."""

    digests: array[int] = attrs.field(factory=lambda: array("Q"))
    numbers: array[int] = attrs.field(factory=lambda: array("q"))
    times: array[float] = attrs.field(factory=lambda: array("d"))
    newest: float = 0.0  # the latest of ``times``: the run is dropped when it is past

    def __len__(self) -> int:
        return len(self.digests)


def find_in_runs(runs: Sequence[KeyRun], digest: int) -> tuple[int, float] | None:
    """(action number, time) of the newest entry with ``digest``, or None."""
    best: tuple[int, float] | None = None
    for run in reversed(runs):  # newest first: a later use of a key wins
        digests = run.digests
        i = bisect_left(digests, digest)
        count = len(digests)
        while i < count and digests[i] == digest:
            at = run.times[i]
            if best is None or at > best[1]:
                best = (run.numbers[i], at)
            i += 1
    return best


def add_run(
    runs: Sequence[KeyRun], entries: list[tuple[int, int, float]], since: float
) -> tuple[KeyRun, ...]:
    """``runs`` with the ``entries`` (digest, number, time) added as a new
    run, merged with the newest runs while those are no larger (up to
    MAX_RUN entries); entries before ``since`` (past the retention) and runs
    whose newest entry is, dropped."""
    kept = [run for run in runs if run.newest >= since]
    new = _run(sorted(e for e in entries if e[2] >= since))
    while kept and len(kept[-1]) <= len(new) and len(kept[-1]) + len(new) <= MAX_RUN:
        new = _run(merge(_entries(kept.pop()), _entries(new)), since)
    if len(new):
        kept.append(new)
    return tuple(kept)


def _entries(run: KeyRun) -> Iterator[tuple[int, int, float]]:
    return zip(run.digests, run.numbers, run.times, strict=True)


def _run(entries: Iterable[tuple[int, int, float]], since: float = -math.inf) -> KeyRun:
    """A run of ``entries`` (sorted), those before ``since`` left out: built
    entry by entry, so a merge holds no list of them."""
    run = KeyRun()
    digests, numbers, times = run.digests, run.numbers, run.times
    newest = -math.inf
    for digest, n, at in entries:
        if at >= since:
            digests.append(digest)
            numbers.append(n)
            times.append(at)
            newest = max(newest, at)
    run.newest = newest if len(digests) else 0.0
    return run


# Bloom filters in front of the runs: a new key (the common case) is found
# absent by a few bit tests per filter, not by a bisection of every run.
# Each filter takes the keys moved in a stretch of time, FILTER_BITS_PER_KEY
# bits a key and three bits set per key (about 0.5 % false positives when
# full); the first takes FILTER_FIRST keys, each next one four times as many
# up to FILTER_MOST, and a filter whose newest key is past the retention is
# dropped whole.
FILTER_BITS_PER_KEY = 16
FILTER_FIRST = 1 << 10
FILTER_MOST = 1 << 18


@attrs.define(slots=True)
class KeyFilter:
    bits: bytearray
    capacity: int  # keys it takes before the next filter starts
    count: int = 0
    newest: float = 0.0  # the time of its newest key

    def __len__(self) -> int:
        return self.count


def _probes(digest: int, mask: int) -> tuple[int, int, int]:
    return digest & mask, (digest >> 21) & mask, (digest >> 42) & mask


def may_hold(filters: Sequence[KeyFilter], digest: int) -> bool:
    """False when no key with ``digest`` was added to ``filters``."""
    for f in filters:
        bits = f.bits
        i, j, k = _probes(digest, len(bits) * 8 - 1)
        if (
            bits[i >> 3] >> (i & 7) & 1
            and bits[j >> 3] >> (j & 7) & 1
            and bits[k >> 3] >> (k & 7) & 1
        ):
            return True
    return False


def add_to_filters(
    filters: Sequence[KeyFilter], entries: list[tuple[int, int, float]], since: float
) -> tuple[KeyFilter, ...]:
    """``filters`` with the digests of ``entries`` (digest, number, time,
    oldest first) added, a new filter started whenever the newest is full;
    filters whose newest key is before ``since`` dropped."""
    kept = [f for f in filters if f.newest >= since]
    for digest, _, at in entries:
        if not kept or kept[-1].count >= kept[-1].capacity:
            last = kept[-1].capacity if kept else 0
            capacity = min(FILTER_MOST, max(FILTER_FIRST, 4 * last))
            kept.append(KeyFilter(bytearray(capacity * FILTER_BITS_PER_KEY // 8), capacity))
        f = kept[-1]
        bits = f.bits
        for n in _probes(digest, len(bits) * 8 - 1):
            bits[n >> 3] |= 1 << (n & 7)
        f.count += 1
        f.newest = max(f.newest, at)
    return tuple(kept)


__all__ = [
    "KeyFilter",
    "KeyRun",
    "add_run",
    "add_to_filters",
    "find_in_runs",
    "key_digest",
    "may_hold",
]
