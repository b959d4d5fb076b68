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
that one is no larger), so an agent holds at most about log2(keys / recent)
runs and a lookup bisects each. A merge drops the entries already past the
retention, and a run whose newest entry is past it is dropped whole.

The digest is BLAKE2b (8 bytes), the same in every process, so a snapshot
holds the same runs as the fold from genesis. Two keys with one digest are
told apart where it matters: a repeat reads its first request, whose key
must be the one asked with (``actions.request_action``).
"""

from __future__ import annotations

from array import array
from bisect import bisect_left
from hashlib import blake2b

import attrs


def key_digest(key: str) -> int:
    """The 64-bit digest of an Idempotency-Key a run sorts by."""
    return int.from_bytes(blake2b(key.encode(), digest_size=8).digest(), "little")


@attrs.define(slots=True)
class KeyRun:
    """Keys sorted by digest: entry i is ``digests[i]``, asked for action
    ``numbers[i]`` at ``times[i]``."""

    digests: array[int] = attrs.field(factory=lambda: array("Q"))
    numbers: array[int] = attrs.field(factory=lambda: array("q"))
    times: array[float] = attrs.field(factory=lambda: array("d"))
    newest: float = 0.0  # the latest of ``times``: the run is dropped when it is past

    def __len__(self) -> int:
        return len(self.digests)


def find_in_runs(runs: list[KeyRun], digest: int) -> tuple[int, float] | None:
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
    runs: list[KeyRun], entries: list[tuple[int, int, float]], since: float
) -> list[KeyRun]:
    """``runs`` with the ``entries`` (digest, number, time) added as a new
    run, merged with the newest runs while those are no larger; entries
    before ``since`` (past the retention) and runs whose newest entry is,
    dropped."""
    kept = [run for run in runs if run.newest >= since]
    while kept and len(kept[-1]) <= len(entries):
        run = kept.pop()
        entries.extend(zip(run.digests, run.numbers, run.times, strict=True))
    entries = sorted(e for e in entries if e[2] >= since)
    if entries:
        run = KeyRun(
            array("Q", [e[0] for e in entries]),
            array("q", [e[1] for e in entries]),
            array("d", [e[2] for e in entries]),
            max(e[2] for e in entries),
        )
        kept.append(run)
    return kept


__all__ = ["KeyRun", "add_run", "find_in_runs", "key_digest"]
