"""The file store's read_after: several readers following one large log each
read only the new lines (their cursors), a read after a seq no cursor
holds is still right and skips without holding what it skips, and a limit
returns one page at a time."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from agents_runtime.errors import LogReadError
from agents_runtime.log.files import cursors
from agents_runtime.log.files.store import FileAgentLog
from agents_runtime.log.record import Head, seal
from agents_runtime.log.store import Committed
from tests.agents_runtime.support import TEST_SIGNER

PAD = 20_000  # bytes of each record's padding


def _lines(count: int, pad: int = PAD, start: Head | None = None) -> list[bytes]:
    head = start or Head.empty()
    lines = []
    for n in range(count):
        record = {"kind": "scar", "n": n, "pad": "x" * (pad + n % 7)}
        sealed = seal(record, prev=head, ts="t", signer=TEST_SIGNER)
        head = sealed.head
        lines.append(sealed.line)
    return lines


def _log(path: Path) -> FileAgentLog:
    # Read-only (no log file to append to, no committer): reads need neither.
    return FileAgentLog("a", path, None, None, path.stat().st_size)  # type: ignore[arg-type]


def _upto(path: Path, count: int) -> Committed:
    return Committed(Head(count - 1, ""), path.stat().st_size)


def _read_chars() -> int:
    """Bytes this process has read through read(2) and its kin, from any
    file, cached or not (/proc/self/io rchar)."""
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("rchar:"):
            return int(line.split()[1])
    raise AssertionError("no rchar")  # pragma: no cover


def test_two_readers_following_a_large_log_read_about_each_new_line_once(tmp_path: Path) -> None:
    path = tmp_path / "a.jsonl"
    old = _lines(500)  # 10 MB
    path.write_bytes(b"".join(old))
    log = _log(path)
    count = len(old)
    upto = _upto(path, count)
    # Two webhooks, both caught up with the head.
    positions = [count - 1, count - 1]
    new = _lines(20, start=Head(count - 1, ""))
    before = _read_chars()
    for line in new:
        with path.open("ab") as fh:
            fh.write(line)
        count += 1
        upto = _upto(path, count)
        for reader, after in enumerate(positions):
            got = log.read_after(after, upto, 32)
            assert got == [line[:-1]]
            positions[reader] = after + len(got)
    read = _read_chars() - before
    # Each reader reads each new line once (and one byte before it); read
    # from the start each time, as when one reader's place was forgotten
    # for the other's, it was 400 MB.
    new_bytes = sum(len(line) for line in new)
    assert read < 3 * new_bytes, f"{read} bytes read for {2 * new_bytes} bytes of new lines"


def test_a_reader_new_to_a_large_log_near_its_end_does_not_read_it_from_the_start(
    tmp_path: Path,
) -> None:
    path = tmp_path / "a.jsonl"
    lines = _lines(500)
    path.write_bytes(b"".join(lines))
    log = _log(path)
    before = _read_chars()
    assert log.read_after(496, _upto(path, 500)) == [line[:-1] for line in lines[497:]]
    # Counted back from the committed end: a few lines, not 10 MB.
    assert _read_chars() - before < 2 * cursors.PAGE_CHUNK + 4 * (PAD + 1000)


@pytest.mark.parametrize("limit", [None, 1, 3, 50])
def test_reads_after_any_seq_with_or_without_a_limit_return_exactly_the_lines_after_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, limit: int | None
) -> None:
    # Small chunks, so that scans and pages cross chunk boundaries, and few
    # cursors, so that they are dropped and found again.
    monkeypatch.setattr(cursors, "SCAN_CHUNK", 4096)
    monkeypatch.setattr(cursors, "PAGE_CHUNK", 1000)
    monkeypatch.setattr(cursors, "KEEP", 2)
    path = tmp_path / "a.jsonl"
    lines = _lines(40, pad=300)
    path.write_bytes(b"".join(lines))
    log = _log(path)
    upto = _upto(path, len(lines))
    want = [line[:-1] for line in lines]
    rng = random.Random(7)
    for seq in [-1, 0, 38, 39, 20, 21, 21, -1, *(rng.randrange(-1, 40) for _ in range(60))]:
        stop = None if limit is None else seq + 1 + limit
        assert log.read_after(seq, upto, limit) == want[seq + 1 : stop], seq


def test_a_reader_paging_through_a_log_gets_every_line_once_one_page_at_a_time(
    tmp_path: Path,
) -> None:
    path = tmp_path / "a.jsonl"
    lines = _lines(100, pad=100)
    path.write_bytes(b"".join(lines))
    log = _log(path)
    upto = _upto(path, len(lines))
    got: list[bytes] = []
    pages = 0
    while True:
        page = log.read_after(len(got) - 1, upto, 32)
        if not page:
            break
        assert len(page) <= 32
        got += page
        pages += 1
    assert got == [line[:-1] for line in lines]
    assert pages == 4


def test_lines_written_but_not_committed_are_not_read(tmp_path: Path) -> None:
    path = tmp_path / "a.jsonl"
    lines = _lines(5, pad=10)
    path.write_bytes(b"".join(lines))
    log = _log(path)
    committed = Committed(Head(2, ""), len(b"".join(lines[:3])))
    assert log.read_after(0, committed) == [lines[1][:-1], lines[2][:-1]]
    assert log.read_after(0, committed, 10) == [lines[1][:-1], lines[2][:-1]]
    assert log.read_after(2, committed, 10) == []


def test_a_log_cut_short_under_a_reader_is_a_read_error_not_wrong_lines(tmp_path: Path) -> None:
    path = tmp_path / "a.jsonl"
    lines = _lines(6, pad=10)
    path.write_bytes(b"".join(lines))
    log = _log(path)
    upto = _upto(path, 6)
    log.read_after(-1, upto, 3)  # a cursor at seq 2
    path.write_bytes(b"".join(lines)[5:])
    with pytest.raises(LogReadError, match="not where it was"):
        log.read_after(2, upto, 3)
    path.unlink()
    with pytest.raises(LogReadError, match=r"cannot read a\.jsonl"):
        log.read_after(2, upto, 3)
