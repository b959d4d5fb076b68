"""Idempotency-Keys past the recent actions: runs sorted by digest, merged
as a binary counter, dropping what is past the retention."""

from __future__ import annotations

from agents_runtime.core.idempotency import (
    FILTER_FIRST,
    MAX_RUN,
    KeyRun,
    add_run,
    add_to_filters,
    find_in_runs,
    key_digest,
    may_hold,
)


def _batch(first: int, count: int, at: float) -> list[tuple[int, int, float]]:
    return [(key_digest(f"key-{n}"), n, at) for n in range(first, first + count)]


def test_runs_merge_as_a_binary_counter() -> None:
    runs: tuple[KeyRun, ...] = ()
    for b in range(7):
        runs = add_run(runs, _batch(b * 4, 4, float(b)), since=0.0)
    assert [len(run) for run in runs] == [16, 8, 4]
    runs = add_run(runs, _batch(28, 4, 7.0), since=0.0)
    assert [len(run) for run in runs] == [32]
    assert list(runs[0].digests) == sorted(runs[0].digests)
    assert find_in_runs(runs, key_digest("key-17")) == (17, 4.0)
    assert find_in_runs(runs, key_digest("never-used")) is None


def test_a_merge_drops_the_entries_past_the_retention_and_keeps_those_at_it() -> None:
    runs = add_run([], _batch(0, 2, 10.0), since=0.0)
    runs = add_run(runs, _batch(2, 2, 20.0), since=10.0)  # merged: key-0 and key-1 at exactly 10
    assert [len(run) for run in runs] == [4]
    runs = add_run(runs, _batch(4, 8, 30.0), since=10.5)  # merged: the entries at 10 are past
    assert sorted(runs[0].numbers) == list(range(2, 12))
    assert find_in_runs(runs, key_digest("key-0")) is None


def test_a_run_whose_newest_entry_is_past_the_retention_is_dropped_whole() -> None:
    runs = add_run([], _batch(0, 8, 10.0), since=0.0)
    runs = add_run(runs, _batch(8, 2, 50.0), since=20.0)
    assert [list(run.numbers) for run in runs] == [
        sorted([8, 9], key=lambda n: key_digest(f"key-{n}"))
    ]


def test_a_key_used_again_is_found_at_its_latest_use() -> None:
    digest = key_digest("again")
    runs = add_run([], [(digest, 1, 5.0)], since=0.0)
    runs = add_run(runs, [(digest, 9, 50.0), (key_digest("other"), 10, 50.0)], since=0.0)
    assert find_in_runs(runs, digest) == (9, 50.0)


def test_merges_stop_at_the_largest_run_and_keep_every_key() -> None:
    runs: tuple[KeyRun, ...] = ()
    for b in range(40):
        runs = add_run(runs, _batch(b * 4096, 4096, float(b)), since=0.0)
    assert max(len(run) for run in runs) == MAX_RUN
    assert sum(len(run) for run in runs) == 40 * 4096
    assert find_in_runs(runs, key_digest("key-5")) == (5, 0.0)
    assert find_in_runs(runs, key_digest(f"key-{40 * 4096 - 1}")) == (40 * 4096 - 1, 39.0)


def test_a_filter_holds_every_key_added_and_each_next_one_takes_four_times_as_many() -> None:
    entries = _batch(0, FILTER_FIRST + 5 * FILTER_FIRST, 1.0)
    filters = add_to_filters([], entries, since=0.0)
    assert [f.capacity for f in filters] == [FILTER_FIRST, 4 * FILTER_FIRST, 16 * FILTER_FIRST]
    assert [len(f) for f in filters] == [FILTER_FIRST, 4 * FILTER_FIRST, FILTER_FIRST]
    assert all(may_hold(filters, digest) for digest, _, _ in entries)
    absent = [key_digest(f"absent-{n}") for n in range(1000)]
    assert sum(may_hold(filters, digest) for digest in absent) < 50


def test_a_filter_whose_newest_key_is_past_the_retention_is_dropped() -> None:
    filters = add_to_filters([], _batch(0, FILTER_FIRST, 1.0), since=0.0)
    filters = add_to_filters(filters, _batch(FILTER_FIRST, 10, 5.0), since=1.0)
    assert [len(f) for f in filters] == [FILTER_FIRST, 10]
    filters = add_to_filters(filters, _batch(FILTER_FIRST + 10, 1, 9.0), since=2.0)
    assert [len(f) for f in filters] == [11]
    assert not may_hold(filters, key_digest("key-0"))
