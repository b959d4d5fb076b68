"""Where the lines of one log file start, learnt as far as a read needs.

A reply sometimes quotes an earlier record (a finished action's input, the
first decision of a repeated request). Agent state keeps what later
decisions need, not every action's input and answer: those are in the log
already. So the file store reads such a line back by seq, and this index
says where to look. It is built on the first read, by one scan of the file
(on a worker thread), and extended by later reads to the committed end:
nothing on the append path, and nothing at all for an agent whose replies
never quote an old record.

It keeps where every ``STRIDE``-th line starts (4 bytes per 64 records, 8
past 4 GiB), not every line: a read seeks to the nearest kept start at or
before its line and reads forward to it, at most ``STRIDE - 1`` lines
(some tens of kilobytes) more than the line itself.
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from typing import BinaryIO

from agents_runtime.errors import LogReadError

CHUNK = 1 << 20
STRIDE = 64


class LineIndex:
    __slots__ = ("_count", "_starts", "end")

    def __init__(self) -> None:
        self._starts = array("I")  # the start of line k * STRIDE; "q" once past 4 GiB
        self._count = 0  # lines learnt
        self.end = 0  # where the last line learnt ends

    def __len__(self) -> int:
        return self._count

    def read(self, fh: BinaryIO, name: str, seqs: Sequence[int], upto: int) -> dict[int, bytes]:
        """The lines at ``seqs`` (without newline) of the file ``fh``, whose
        first ``upto`` bytes are committed whole lines."""
        if seqs and max(seqs) >= self._count:
            self._learn(fh, upto)
        count = self._count
        lines = {}
        for seq in seqs:
            if not 0 <= seq < count:
                raise LogReadError(f"{name} has no record at seq {seq}")
            fh.seek(self._starts[seq // STRIDE])
            for _ in range(seq % STRIDE):
                if not fh.readline().endswith(b"\n"):
                    raise LogReadError(f"{name}: the record at seq {seq} is not where it was")
            line = fh.readline()
            if not line.endswith(b"\n") or fh.tell() > self.end:
                raise LogReadError(f"{name}: the record at seq {seq} is not where it was")
            lines[seq] = line[:-1]
        return lines

    def _learn(self, fh: BinaryIO, upto: int) -> None:
        """Index the whole lines between ``end`` and ``upto``."""
        line_start = pos = self.end
        fh.seek(pos)
        while pos < upto:
            chunk = fh.read(min(CHUNK, upto - pos))
            if not chunk:
                break
            at = chunk.find(b"\n")
            while at != -1:
                self._add(line_start)
                line_start = pos + at + 1
                at = chunk.find(b"\n", at + 1)
            pos += len(chunk)
        self.end = line_start

    def _add(self, start: int) -> None:
        count = self._count
        self._count = count + 1
        if count % STRIDE:
            return
        try:
            self._starts.append(start)
        except OverflowError:
            self._starts = array("q", self._starts)
            self._starts.append(start)
