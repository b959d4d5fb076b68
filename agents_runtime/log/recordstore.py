"""Reading an agent's own records back by ``seq``.

Agent state keeps what later decisions need (counters, money, the rate
window, held actions, one status byte and one seq per action), not every
action's input and answer: those are in the log already, and keeping them
in memory too made a long-running guardd grow with every action it served.
A view of a finished action, or the first decision an ``Idempotency-Key``
repeat answers with, is read back from the log through a store:

- ``FileRecords``: the offset of each record in the agent's log file (4 bytes
  per record below 4 GiB, then 8), plus the lines sealed but not yet known to be on disk; used by
  guardd.
- ``MemoryRecords``: every record kept as a dict; used where the records are
  in memory anyway (``audit replay``) and by default.
"""

from __future__ import annotations

from array import array
from pathlib import Path
from typing import Any, Protocol

from agents_runtime.errors import LogReadError
from agents_runtime.log import canonical
from agents_runtime.log.canonical import loads_trusted


class RecordStore(Protocol):
    def add(self, record: dict[str, Any], line: bytes, *, written: bool = True) -> None:
        """Note the next record (in seq order) and its line, newline included;
        ``written`` False while the line may not be on disk yet."""

    def written(self) -> None:
        """Every line added so far is on disk."""

    def get(self, seq: int) -> dict[str, Any]:
        """The record at ``seq``; LogReadError if it cannot be read."""
        ...

    def line(self, seq: int) -> bytes:
        """The canonical bytes of the record at ``seq``, without its newline
        (what a decision receipt quotes); LogReadError if it cannot be read."""
        ...


class MemoryRecords:
    """Every record folded, kept as it was folded."""

    __slots__ = ("_records",)

    def __init__(self) -> None:
        self._records: dict[int, dict[str, Any]] = {}

    def add(self, record: dict[str, Any], line: bytes = b"", *, written: bool = True) -> None:
        self._records[record["seq"]] = record

    def written(self) -> None:
        pass

    def get(self, seq: int) -> dict[str, Any]:
        record = self._records.get(seq)
        if record is None:
            raise LogReadError(f"no record at seq {seq}")
        return record

    def line(self, seq: int) -> bytes:
        # A record's line is its canonical form: no need to keep the bytes.
        return canonical.dumps(self.get(seq))


class FileRecords:
    """Where each record of one log file starts.

    Lines added with ``written=False`` are kept in memory, after the last
    indexed record, until ``written()`` indexes them: the actor folds a
    record before its batch reaches the disk, and a later command of the
    same batch may read it. Indexing them a batch at a time keeps ``add``
    down to one list append on the actor's path.
    """

    __slots__ = ("_offsets", "_unwritten", "end", "path")

    def __init__(self, path: Path) -> None:
        self.path = path
        self._offsets = array("I")  # "q" once the file passes 4 GiB
        self.end = 0  # where the last indexed line ends
        self._unwritten: list[bytes] = []  # the records after the indexed ones

    def add(self, record: dict[str, Any], line: bytes, *, written: bool = True) -> None:
        if not written:
            self._unwritten.append(line)
            return
        if self._unwritten:
            self.written()
        self._index(line)

    def _index(self, line: bytes) -> None:
        try:
            self._offsets.append(self.end)
        except OverflowError:
            self._offsets = array("q", self._offsets)
            self._offsets.append(self.end)
        self.end += len(line)

    def written(self) -> None:
        for line in self._unwritten:
            self._index(line)
        self._unwritten.clear()

    def __len__(self) -> int:
        return len(self._offsets) + len(self._unwritten)

    def line(self, seq: int) -> bytes:
        return self._read(seq)[:-1]

    def _read(self, seq: int) -> bytes:
        """The line at ``seq``, newline included."""
        indexed = len(self._offsets)
        if not 0 <= seq < indexed + len(self._unwritten):
            raise LogReadError(f"{self.path.name} has no record at seq {seq}")
        if seq >= indexed:
            return self._unwritten[seq - indexed]
        start = self._offsets[seq]
        stop = self._offsets[seq + 1] if seq + 1 < len(self._offsets) else self.end
        try:
            with self.path.open("rb") as fh:
                fh.seek(start)
                return fh.read(stop - start)
        except OSError as exc:
            raise LogReadError(f"cannot read {self.path.name}: {exc}") from exc

    def get(self, seq: int) -> dict[str, Any]:
        line = self._read(seq)
        try:
            # Our own log's lines: verified when loaded, or written by us.
            record = loads_trusted(line.decode())
        except ValueError as exc:
            raise LogReadError(f"{self.path.name}: seq {seq} does not parse: {exc}") from exc
        if not isinstance(record, dict) or record.get("seq") != seq:
            # The file changed under a running guardd; the verify endpoint says how.
            raise LogReadError(f"{self.path.name}: the record at seq {seq} is not where it was")
        return record
