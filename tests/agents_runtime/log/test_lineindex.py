"""Reading a log file's lines back by seq (the file store's line index)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from agents_runtime.errors import LogReadError
from agents_runtime.log.files.lineindex import STRIDE, LineIndex
from agents_runtime.log.files.store import FileAgentLog
from agents_runtime.log.record import Head, seal
from agents_runtime.log.store import Committed
from tests.agents_runtime.support import TEST_SIGNER


def _lines(count: int) -> list[bytes]:
    head = Head.empty()
    lines = []
    for n in range(count):
        sealed = seal(
            {"kind": "scar", "n": n, "pad": "x" * n}, prev=head, ts="t", signer=TEST_SIGNER
        )
        head = sealed.head
        lines.append(sealed.line)
    return lines


def _read(
    path: Path, index: LineIndex, seqs: list[int], upto: int | None = None
) -> dict[int, bytes]:
    size = path.stat().st_size if upto is None else upto
    with path.open("rb") as fh:
        return index.read(fh, path.name, seqs, size)


def test_the_index_reads_each_line_back_by_seq(tmp_path: Path) -> None:
    path = tmp_path / "a.jsonl"
    lines = _lines(20)
    path.write_bytes(b"".join(lines))
    index = LineIndex()
    assert len(index) == 0  # nothing learnt before the first read
    assert _read(path, index, [0, 7, 19]) == {seq: lines[seq][:-1] for seq in (0, 7, 19)}
    assert (len(index), index.end) == (20, path.stat().st_size)


def test_the_index_learns_only_up_to_the_committed_size(tmp_path: Path) -> None:
    path = tmp_path / "a.jsonl"
    lines = _lines(4)
    path.write_bytes(b"".join(lines))
    committed = len(lines[0] + lines[1])
    index = LineIndex()
    assert _read(path, index, [1], committed) == {1: lines[1][:-1]}
    with pytest.raises(LogReadError, match="no record at seq 2"):
        _read(path, index, [2], committed)  # written, not committed
    assert _read(path, index, [3]) == {3: lines[3][:-1]}  # committed since: learnt on


def test_the_index_learns_lines_longer_than_its_read_chunk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("agents_runtime.log.files.lineindex.CHUNK", 7)
    path = tmp_path / "a.jsonl"
    lines = _lines(5)
    path.write_bytes(b"".join(lines))
    index = LineIndex()
    assert _read(path, index, [4, 0]) == {4: lines[4][:-1], 0: lines[0][:-1]}


@pytest.mark.parametrize("seq", [-1, 3, 10**9])
def test_the_index_refuses_a_seq_the_log_does_not_have(tmp_path: Path, seq: int) -> None:
    path = tmp_path / "a.jsonl"
    path.write_bytes(b"".join(_lines(3)))
    with pytest.raises(LogReadError, match="no record at seq"):
        _read(path, LineIndex(), [seq])


def test_the_index_notices_a_file_cut_short_under_it(tmp_path: Path) -> None:
    path = tmp_path / "a.jsonl"
    lines = _lines(3)
    path.write_bytes(b"".join(lines))
    index = LineIndex()
    _read(path, index, [2])
    path.write_bytes(b"".join(lines)[:-5])
    with pytest.raises(LogReadError, match="not where it was"):
        _read(path, index, [2])


def test_the_index_grows_past_4_gib() -> None:
    index = LineIndex()
    index._add(10)
    for _ in range(STRIDE - 1):
        index._add(20)
    index._add(2**32 + 15)
    assert len(index) == STRIDE + 1


def test_the_index_keeps_one_start_in_a_stride_and_reads_every_line(tmp_path: Path) -> None:
    path = tmp_path / "a.jsonl"
    lines = _lines(3 * STRIDE + 5)
    path.write_bytes(b"".join(lines))
    index = LineIndex()
    seqs = list(range(len(lines)))
    assert _read(path, index, seqs) == {seq: lines[seq][:-1] for seq in seqs}
    assert len(index._starts) == 4


def test_a_file_log_reads_lines_off_the_event_loop_and_says_when_it_cannot(
    tmp_path: Path,
) -> None:
    path = tmp_path / "a.jsonl"
    lines = _lines(3)
    path.write_bytes(b"".join(lines))
    # Read-only (no log file to append to, no committer): reads need neither.
    log = FileAgentLog("a", path, None, None, path.stat().st_size)  # type: ignore[arg-type]
    upto = Committed(Head(2, ""), path.stat().st_size)
    assert asyncio.run(log.lines([1], upto)) == {1: lines[1][:-1]}
    path.unlink()
    with pytest.raises(LogReadError, match=r"cannot read a\.jsonl"):
        asyncio.run(log.lines([0], upto))
