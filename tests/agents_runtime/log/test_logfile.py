"""agents_runtime.log.files.logfile: torn tails, durable creation, appends that fail closed."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

import pytest

from agents_runtime.errors import LogWriteError
from agents_runtime.log.files.logfile import FileIO, LogFile, move_torn_tail, read_log
from agents_runtime.log.store import LogContents, split_log

A = b'{"seq":0}'
B = b'{"seq":1}'


class RecordingIO(FileIO):
    """Real I/O that remembers the calls."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def write(self, fd: int, data: memoryview) -> int:
        self.calls.append("write")
        return super().write(fd, data)

    def fsync(self, fd: int) -> None:
        self.calls.append("fsync")
        super().fsync(fd)


class FailingIO(FileIO):
    """Fails writes (or fsyncs) with EIO while ``failing`` is set."""

    def __init__(self, *, on: str = "write") -> None:
        self.on = on
        self.failing = True

    def write(self, fd: int, data: memoryview) -> int:
        if self.failing and self.on == "write":
            raise OSError(errno.EIO, "Input/output error")
        return super().write(fd, data)

    def fsync(self, fd: int) -> None:
        if self.failing and self.on == "fsync":
            raise OSError(errno.EIO, "Input/output error")
        super().fsync(fd)


class ShortWriteIO(FileIO):
    """Writes at most ``chunk`` bytes per call, as a kernel may."""

    def __init__(self, chunk: int) -> None:
        self.chunk = chunk
        self.writes = 0

    def write(self, fd: int, data: memoryview) -> int:
        self.writes += 1
        return super().write(fd, data[: self.chunk])


class StuckIO(FileIO):
    def write(self, fd: int, data: memoryview) -> int:
        return 0


# --- reading ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        pytest.param(b"", LogContents([], None, False, 0), id="empty"),
        pytest.param(A + b"\n" + B + b"\n", LogContents([A, B], None, False, 20), id="complete"),
        pytest.param(A + b"\n" + B, LogContents([A, B], None, True, 19), id="missing-newline"),
        pytest.param(A + b'\n{"seq":1', LogContents([A], b'{"seq":1', False, 10), id="torn"),
        pytest.param(b'{"se', LogContents([], b'{"se', False, 0), id="torn-only"),
        pytest.param(A + b"\n\xff\xfe", LogContents([A], b"\xff\xfe", False, 10), id="torn-binary"),
    ],
)
def test_split_log_finds_lines_torn_tail_and_missing_newline(
    data: bytes, expected: LogContents
) -> None:
    assert split_log(data) == expected


def test_split_log_keeps_a_bad_complete_line_for_the_verifier() -> None:
    contents = split_log(b"garbage\n" + A + b"\n")
    assert contents.lines == [b"garbage", A]
    assert contents.torn_tail is None


def test_read_log_reads_the_file(tmp_path: Path) -> None:
    path = tmp_path / "a.jsonl"
    path.write_bytes(A + b"\n" + B[:3])
    assert read_log(path) == LogContents([A], B[:3], False, 10)


# --- repairs after a crash -------------------------------------------------------


def test_torn_tail_is_moved_to_torn_file_and_cut_from_the_log(tmp_path: Path) -> None:
    path = tmp_path / "a.jsonl"
    path.write_bytes(A + b"\n" + B[:5])
    move_torn_tail(path, read_log(path))
    assert path.read_bytes() == A + b"\n"
    torn = tmp_path / "a.jsonl.torn"
    assert torn.read_bytes() == B[:5]
    assert stat.S_IMODE(torn.stat().st_mode) == 0o600


def test_second_torn_tail_is_appended_to_the_torn_file(tmp_path: Path) -> None:
    path = tmp_path / "a.jsonl"
    path.write_bytes(A + b"\n" + b'{"first')
    move_torn_tail(path, read_log(path))
    with path.open("ab") as fh:
        fh.write(b'{"second')
    move_torn_tail(path, read_log(path))
    assert (tmp_path / "a.jsonl.torn").read_bytes() == b'{"first{"second'
    assert path.read_bytes() == A + b"\n"


def test_missing_final_newline_is_added(tmp_path: Path) -> None:
    path = tmp_path / "a.jsonl"
    path.write_bytes(A + b"\n" + B)
    move_torn_tail(path, read_log(path))
    assert path.read_bytes() == A + b"\n" + B + b"\n"
    assert not (tmp_path / "a.jsonl.torn").exists()


def test_a_clean_log_is_left_alone(tmp_path: Path) -> None:
    path = tmp_path / "a.jsonl"
    path.write_bytes(A + b"\n")
    move_torn_tail(path, read_log(path))
    assert path.read_bytes() == A + b"\n"
    assert not (tmp_path / "a.jsonl.torn").exists()


# --- creating ----------------------------------------------------------------------


def test_create_writes_the_data_durably_with_mode_0600(tmp_path: Path) -> None:
    path = tmp_path / "a.jsonl"
    io = RecordingIO()
    log = LogFile.create(path, A + b"\n", io)
    log.close()
    assert path.read_bytes() == A + b"\n"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert io.calls == ["write", "fsync"]
    assert not (tmp_path / "a.jsonl.tmp").exists()


def test_create_refuses_an_existing_file_and_leaves_it_alone(tmp_path: Path) -> None:
    path = tmp_path / "a.jsonl"
    path.write_bytes(B + b"\n")
    with pytest.raises(FileExistsError):
        LogFile.create(path, A + b"\n")
    assert path.read_bytes() == B + b"\n"
    assert not (tmp_path / "a.jsonl.tmp").exists()


def test_create_that_fails_to_write_leaves_nothing(tmp_path: Path) -> None:
    path = tmp_path / "a.jsonl"
    with pytest.raises(
        LogWriteError, match=r"^cannot create a\.jsonl: \[Errno 5\] Input/output error$"
    ):
        LogFile.create(path, A + b"\n", FailingIO())
    assert list(tmp_path.iterdir()) == []


# --- appending ---------------------------------------------------------------------


def _log(tmp_path: Path, io: FileIO) -> LogFile:
    path = tmp_path / "a.jsonl"
    path.write_bytes(A + b"\n")
    return LogFile.open(path, io)


def test_append_writes_then_fsyncs(tmp_path: Path) -> None:
    io = RecordingIO()
    log = _log(tmp_path, io)
    log.append(B + b"\n")
    log.close()
    assert io.calls == ["write", "fsync"]
    assert (tmp_path / "a.jsonl").read_bytes() == A + b"\n" + B + b"\n"


@pytest.mark.parametrize("on", ["write", "fsync"])
def test_append_after_a_failed_write_or_fsync_refuses(tmp_path: Path, on: str) -> None:
    io = FailingIO(on=on)
    log = _log(tmp_path, io)
    with pytest.raises(
        LogWriteError, match=r"^append to a\.jsonl failed: \[Errno 5\] Input/output"
    ):
        log.append(B + b"\n")
    io.failing = False  # the disk recovers; the log must not
    with pytest.raises(LogWriteError, match=r"^a\.jsonl refuses writes after an earlier failure$"):
        log.append(B + b"\n")
    assert isinstance(log.failed, OSError)
    log.close()


def test_short_writes_are_continued_until_everything_is_written(tmp_path: Path) -> None:
    io = ShortWriteIO(chunk=4)
    log = _log(tmp_path, io)
    data = B + b"\n" + b'{"seq":2,"text":"' + b"x" * 50 + b'"}\n'
    log.append(data)
    log.close()
    assert (tmp_path / "a.jsonl").read_bytes() == A + b"\n" + data
    assert io.writes == -(-len(data) // 4)


def test_a_write_that_makes_no_progress_fails_the_append(tmp_path: Path) -> None:
    log = _log(tmp_path, StuckIO())
    with pytest.raises(LogWriteError, match=r"^append to a\.jsonl failed: write made no progress$"):
        log.append(B + b"\n")
    log.close()


def test_close_twice_is_harmless(tmp_path: Path) -> None:
    log = _log(tmp_path, FileIO())
    log.close()
    log.close()


def test_open_appends_at_the_end_even_after_a_seek(tmp_path: Path) -> None:
    log = _log(tmp_path, FileIO())
    os.lseek(log._fd, 0, os.SEEK_SET)
    log.append(B + b"\n")
    log.close()
    assert (tmp_path / "a.jsonl").read_bytes() == A + b"\n" + B + b"\n"


def test_create_whose_directory_fsync_fails_leaves_no_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from agents_runtime.log import fsutil

    def failing_fsync_dir(path: Path) -> None:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(fsutil, "fsync_dir", failing_fsync_dir)
    path = tmp_path / "a.jsonl"
    with pytest.raises(LogWriteError):
        LogFile.create(path, b"{}\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == []
