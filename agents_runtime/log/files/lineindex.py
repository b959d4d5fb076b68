"""Where each line of one log file starts, learnt as far as a read needs.

A reply sometimes quotes an earlier record (a finished action's input, the
first decision of a repeated request). Agent state keeps what later
decisions need, not every action's input and answer: those are in the log
already. So the file store reads such a line back by seq, and this index
says where it is. It is built on the first read, by one scan of the file
(on a worker thread), and extended by later reads to the committed end:
nothing on the append path, and nothing at all for an agent whose replies
never quote an old record (4 bytes a record once built, 8 past 4 GiB).
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from typing import BinaryIO

from agents_runtime.errors import LogReadError

CHUNK = 1 << 20


class LineIndex:
    __slots__ = ("_starts", "end")

    def __init__(self) -> None:
        self._starts = array("I")  # "q" once the file passes 4 GiB
        self.end = 0  # where the last line learnt ends

    def __len__(self) -> int:
        return len(self._starts)

    def read(self, fh: BinaryIO, name: str, seqs: Sequence[int], upto: int) -> dict[int, bytes]:
        """The lines at ``seqs`` (without newline) of the file ``fh``, whose
        first ``upto`` bytes are committed whole lines."""
        if seqs and max(seqs) >= len(self._starts):
            self._learn(fh, upto)
        starts, count = self._starts, len(self._starts)
        lines = {}
        for seq in seqs:
            if not 0 <= seq < count:
                raise LogReadError(f"{name} has no record at seq {seq}")
            start = starts[seq]
            stop = starts[seq + 1] if seq + 1 < count else self.end
            fh.seek(start)
            line = fh.read(stop - start)
            if not line.endswith(b"\n"):
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
        try:
            self._starts.append(start)
        except OverflowError:
            self._starts = array("q", self._starts)
            self._starts.append(start)
