"""Reading the file given to ``audit``.

Three formats are accepted (docs/log-format.md, "The audit tool"):

- ``log``: a data-dir log, ``agents/<id>.jsonl``. Each line is verified
  byte for byte, as written.
- ``records``: records saved from ``GET /v1/agents/:id/log``, one JSON record
  per line, not necessarily in canonical form. Each record is re-canonicalized
  before verification: what is proven is the records' content, not the bytes.
- ``response``: the whole JSON response body of that endpoint,
  ``{"records": [...], "head": {...}}``.

Detection: a file named ``<id>.jsonl`` in a directory named ``agents`` is a
log. Otherwise a file that is one JSON object with a top-level ``records`` key
is a response body. Otherwise the first line that parses as a JSON object
decides: byte-canonical means a log, anything else means saved records.
"""

from __future__ import annotations

import json
import os
from decimal import Decimal
from pathlib import Path
from typing import Any

import attrs

from agents_runtime.errors import CanonicalError
from agents_runtime.log import canonical
from agents_runtime.log.files.datadir import LOG_SUFFIX
from agents_runtime.log.ids import valid_agent_id
from agents_runtime.log.store import split_log
from audit.errors import UnknownFormat, UnreadableFile

LOG = "log"
RECORDS = "records"
RESPONSE = "response"

FORMAT_NAMES = {
    LOG: "log: canonical lines, checked byte for byte",
    RECORDS: "saved records, one per line, re-canonicalized",
    RESPONSE: "saved log response body",
}


@attrs.frozen
class TornTail:
    line: int  # the line the torn bytes start on
    size: int  # bytes

    def to_json(self) -> dict[str, int]:
        return {"line": self.line, "bytes": self.size}


@attrs.frozen
class Source:
    """What ``audit`` reads out of a file, ready to verify or show."""

    path: Path
    format: str  # LOG, RECORDS or RESPONSE
    # What to verify, in order: a log's lines as written, or the canonical
    # bytes of each saved record. None marks an item that is not valid JSON.
    items: list[bytes | None]
    # File line (or position in "records") of each item; None when item i is line i + 1.
    numbers: list[int] | None = None
    torn_tail: TornTail | None = None
    missing_newline: bool = False  # a log's last line parses but has no newline
    response_head: Any = None  # the "head" member of a saved response body

    def line_of(self, position: int) -> int:
        """File line of the 1-based item ``position``; one past the last item
        maps to the line after it."""
        if self.numbers is None:
            return position
        if position <= len(self.numbers):
            return self.numbers[position - 1]
        return (self.numbers[-1] if self.numbers else 0) + position - len(self.numbers)


def data_dir_agent_id(path: Path) -> str | None:
    """The agent ID of a path shaped like a data-dir log, ``agents/<id>.jsonl``."""
    full = Path(os.path.abspath(path))
    name = full.name
    if full.parent.name != "agents" or not name.endswith(LOG_SUFFIX):
        return None
    agent_id = name[: -len(LOG_SUFFIX)]
    return agent_id if valid_agent_id(agent_id) else None


def shown(path: Path) -> str:
    """The path as printable text, whatever bytes its name holds."""
    return str(path).encode("utf-8", "backslashreplace").decode("utf-8")


def read_source(path: Path) -> Source:
    """Read ``path`` and detect its format; raise InputError when it cannot."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise UnreadableFile(f"{shown(path)}: no such file") from None
    except IsADirectoryError:
        raise UnreadableFile(f"{shown(path)}: is a directory, not a log file") from None
    except OSError as exc:
        raise UnreadableFile(f"{shown(path)}: cannot read: {exc.strerror or exc}") from None
    if not data.strip():
        raise UnknownFormat(f"{shown(path)} is empty: no records to read")
    if data_dir_agent_id(path) is not None:
        return _from_lines(path, data, LOG)
    body = _response_body(data)
    if body is not None:
        return _from_response(path, body)
    return _from_lines(path, data, None)


def _from_lines(path: Path, data: bytes, fmt: str | None) -> Source:
    contents = split_log(data)
    lines = contents.lines
    torn = contents.torn_tail
    if not any(line.strip() for line in lines):
        torn_note = f" (only {len(torn)} torn bytes)" if torn else ""
        raise UnknownFormat(f"{shown(path)} holds no complete record{torn_note}")
    fmt = fmt or _line_format(path, data, lines)
    torn_tail = None
    if torn is not None and (fmt == LOG or torn.strip()):
        torn_tail = TornTail(len(lines) + 1, len(torn))
    if fmt == LOG:
        items: list[bytes | None] = list(lines)
        numbers = None
    else:
        items, numbers = [], []
        for number, line in enumerate(lines, start=1):
            if line.strip():
                items.append(_recanonicalized(line))
                numbers.append(number)
    missing_newline = contents.missing_newline and fmt == LOG
    return Source(path, fmt, items, numbers, torn_tail, missing_newline)


def _line_format(path: Path, data: bytes, lines: list[bytes]) -> str:
    for line in lines:
        try:
            value = canonical.loads(line)
        except CanonicalError:
            continue
        if isinstance(value, dict):
            return LOG if canonical.dumps(value) == line else RECORDS
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        raise UnknownFormat(f"{shown(path)} is not UTF-8 text") from None
    raise UnknownFormat(
        f"{shown(path)} is neither a log (one JSON record per line) "
        'nor a saved log response ({"records": [...], "head": {...}})'
    )


def _recanonicalized(line: bytes) -> bytes | None:
    try:
        return canonical.dumps(canonical.loads(line))
    except CanonicalError:
        return None


# A saved response body is read in one pass by a decoder that never raises
# on what canonical.loads refuses (duplicate keys, integers beyond 2^53-1,
# NaN, out-of-range numbers) but marks it, so that the record holding it
# fails on its own, at its own position.


class _Duplicated(dict[str, Any]):
    """An object that had a duplicate key."""


class _Invalid:
    """A number RFC 8785 cannot write."""


_INVALID = _Invalid()


def _marked_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    return obj if len(obj) == len(pairs) else _Duplicated(obj)


def _marked_number(text: str) -> Any:
    try:
        return canonical.loads(text)
    except CanonicalError:
        return _INVALID


def _marked_constant(text: str) -> Any:
    return _INVALID


_MARKING_DECODER = json.JSONDecoder(
    object_pairs_hook=_marked_pairs,
    parse_int=_marked_number,
    parse_float=_marked_number,
    parse_constant=_marked_constant,
)


def _response_body(data: bytes) -> dict[str, Any] | None:
    if not data.lstrip().startswith(b"{") or b'"records"' not in data:
        return None
    try:
        doc = _MARKING_DECODER.decode(data.decode("utf-8"))
    except (ValueError, RecursionError):
        return None
    if isinstance(doc, dict) and "records" in doc:
        return doc
    return None


def _from_response(path: Path, body: dict[str, Any]) -> Source:
    records = body["records"]
    if not isinstance(records, list):
        raise UnknownFormat(f'{shown(path)}: "records" is not a list')
    if not records:
        raise UnknownFormat(f'{shown(path)}: "records" is empty: no records to read')
    items = [_strict_bytes(item) for item in records]
    return Source(path, RESPONSE, items, response_head=body.get("head"))


def _strict_bytes(value: Any) -> bytes | None:
    if not _strict(value, 1):
        return None
    try:
        return canonical.dumps(value)
    except CanonicalError:  # pragma: no cover - _strict lets through only what dumps can write
        return None


def _strict(value: Any, depth: int) -> bool:
    """True when canonical.loads would accept ``value`` at nesting ``depth``."""
    if isinstance(value, dict):
        if isinstance(value, _Duplicated) or depth > canonical.MAX_DEPTH:
            return False
        return all(_strict(k, depth) and _strict(v, depth + 1) for k, v in value.items())
    if isinstance(value, list):
        return depth <= canonical.MAX_DEPTH and all(_strict(v, depth + 1) for v in value)
    if isinstance(value, str):
        return value.isascii() or _utf8(value)
    return value is None or isinstance(value, bool | int | Decimal)


def _utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
