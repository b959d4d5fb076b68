"""Where readers following a log file stopped: a few (seq, byte) cursors.

Each webhook follows every agent's log on its own (``read_after``), so
several readers follow one log at different places. Each read leaves a
cursor, the byte after the last line it returned, and the next read after
that seq starts there: a reader that follows the log reads each line once,
whatever the size of the log and however many readers there are. A read
after a seq no cursor holds (after a restart, or with more readers than
cursors) counts newlines from the nearest place known, forwards from a
cursor below it or backwards from one above it (the committed end is one),
in chunks, keeping nothing of what it skips. A log keeps at most ``KEEP``
cursors (the one used longest ago goes): nothing an agent can grow.
"""

from __future__ import annotations

import threading
from io import FileIO

from agents_runtime.errors import LogReadError

KEEP = 8  # cursors a log keeps: more than the webhooks a guardd has
PAGE_CHUNK = 1 << 16  # bytes read at once while reading a limited number of lines
# Counting newlines reads PAGE_CHUNK first, then twice as much each time up
# to SCAN_CHUNK: a few lines away costs little, far away few system calls.
SCAN_CHUNK = 1 << 20


class Cursors:
    """seq -> the byte after its record's line, for the last few reads.
    Reads run on worker threads, several at once: a lock guards the dict
    (never the reads themselves)."""

    __slots__ = ("_at", "_lock")

    def __init__(self) -> None:
        self._at: dict[int, int] = {}  # oldest use first
        self._lock = threading.Lock()

    def nearest(self, seq: int, end_seq: int, end: int) -> tuple[int, int]:
        """The known (seq, byte after its line) fewest records away from
        ``seq``: a cursor, the start (-1, 0) or the end (``end_seq``, ``end``)."""
        with self._lock:
            offset = self._at.pop(seq, None)
            if offset is not None:
                self._at[seq] = offset  # used last
                return seq, offset
            best = (-1, 0) if seq + 1 <= end_seq - seq else (end_seq, end)
            for known in self._at.items():
                if abs(known[0] - seq) < abs(best[0] - seq):
                    best = known
            return best

    def remember(self, seq: int, offset: int) -> None:
        with self._lock:
            self._at.pop(seq, None)
            self._at[seq] = offset
            if len(self._at) > KEEP:
                del self._at[next(iter(self._at))]


def line_end(fh: FileIO, name: str, seq: int, known: tuple[int, int]) -> int:
    """The byte after the line of the record at ``seq`` (0 for seq -1),
    counting lines from ``known`` (a seq and the byte after its line)."""
    known_seq, offset = known
    if known_seq < seq:
        return _forward(fh, name, offset, seq - known_seq)
    if known_seq > seq:
        return _backward(fh, name, offset, known_seq - seq)
    return offset


def _forward(fh: FileIO, name: str, pos: int, count: int) -> int:
    """The byte after the ``count``-th newline from ``pos``."""
    fh.seek(pos)
    size = PAGE_CHUNK
    while True:
        chunk = fh.read(size)
        size = min(SCAN_CHUNK, size * 2)
        if not chunk:
            raise LogReadError(f"{name} ends before a record it had")
        found = chunk.count(b"\n")
        if found >= count:
            at = -1
            for _ in range(count):
                at = chunk.index(b"\n", at + 1)
            return pos + at + 1
        count -= found
        pos += len(chunk)


def _backward(fh: FileIO, name: str, pos: int, count: int) -> int:
    """The byte after the newline ``count`` lines before the one ending at
    ``pos`` (0 when that is the start of the file)."""
    need = count + 1  # the newline at pos - 1 ends the line we start from
    size = PAGE_CHUNK
    while pos > 0:
        start = max(0, pos - size)
        size = min(SCAN_CHUNK, size * 2)
        fh.seek(start)
        chunk = fh.read(pos - start)
        if len(chunk) != pos - start:
            raise LogReadError(f"{name} is shorter than what was committed")
        found = chunk.count(b"\n")
        if found >= need:
            at = len(chunk)
            for _ in range(need):
                at = chunk.rindex(b"\n", 0, at)
            return start + at + 1
        need -= found
        pos = start
    if need == 1:
        return 0
    raise LogReadError(f"{name} has fewer records than were committed")


def read_lines(
    fh: FileIO, name: str, start: int, stop: int, limit: int | None
) -> tuple[list[bytes], int]:
    """The whole lines (without newlines) from ``start``, a line's start, up
    to ``stop``, at most ``limit`` of them; and the byte after the last."""
    if start > 0:
        # The byte before a line is the previous line's newline: a cheap
        # check that the cursor still points where it did.
        fh.seek(start - 1)
        if fh.read(1) != b"\n":
            raise LogReadError(f"{name}: a record is not where it was")
    else:
        fh.seek(0)
    if limit is None:
        data = fh.read(stop - start)
        if len(data) != stop - start or (data and not data.endswith(b"\n")):
            raise LogReadError(f"{name} is shorter than what was committed")
        lines = data.split(b"\n")
        lines.pop()
        return lines, stop
    lines = []
    pos, rest = start, b""
    while pos < stop and len(lines) < limit:
        chunk = fh.read(min(PAGE_CHUNK, stop - pos))
        if not chunk:
            raise LogReadError(f"{name} is shorter than what was committed")
        pos += len(chunk)
        parts = (rest + chunk).split(b"\n")
        rest = parts.pop()
        lines.extend(parts)
    if pos == stop and rest:
        raise LogReadError(f"{name}: a committed record lost its newline")
    del lines[limit:]
    return lines, start + sum(len(line) + 1 for line in lines)
