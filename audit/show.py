"""``audit show``: a log's records as a table, or as canonical JSON lines.

Showing is not verifying: it reads what is there. Every cell is made safe
for a terminal (no control characters from a record reach the screen).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import attrs

from agents_runtime.errors import CanonicalError
from agents_runtime.log import canonical
from agents_runtime.log.kinds import Kind
from audit.source import Source

COMMON_FIELDS = frozenset({"seq", "kind", "ts", "prev", "hash", "sig"})
# Fields named first in a summary, in this order; the rest follow sorted.
LEADING_FIELDS = (
    "action_id",
    "tool",
    "outcome",
    "cost",
    "requested_cost",
    "remaining",
    "severity",
    "reason",
    "by",
    "by_id",  # beside by: who, then how they authenticated
    "approved_by",
    "note",
    "detail",
    "scar",
    "input",
    "log_id",
    "format",
    "public_key",
)
VALUE_WIDTH = 40
HASH_WIDTH = 12
HEADER = ("SEQ", "KIND", "TS", "HASH", "SUMMARY")
_BARE = re.compile(r"[A-Za-z0-9_.:@/+#-]+")


@attrs.frozen
class Row:
    line: int
    record: dict[str, Any] | None  # None: the line is not a JSON object


def rows(source: Source) -> Iterator[Row]:
    for position, data in enumerate(source.items, start=1):
        yield Row(source.line_of(position), _parse(data))


def _parse(data: bytes | None) -> dict[str, Any] | None:
    if data is None:
        return None
    try:
        value = canonical.loads(data)
    except CanonicalError:
        return None
    return value if isinstance(value, dict) else None


def table(source: Source) -> tuple[list[str], int]:
    """The table's lines, header first, and the count of unreadable lines."""
    cells = []
    unreadable = 0
    for row in rows(source):
        if row.record is None:
            unreadable += 1
            cells.append(("?", "?", "", "", f"line {row.line}: not a JSON record"))
        else:
            cells.append(_cells(row.record))
    widths = [max(len(h), *(len(c[i]) for c in cells)) for i, h in enumerate(HEADER[:-1])]
    lines = []
    for cell_row in [HEADER, *cells]:
        head = "  ".join(cell.ljust(width) for cell, width in zip(cell_row, widths, strict=False))
        lines.append(f"{head}  {cell_row[-1]}".rstrip())
    return lines, unreadable


def canonical_lines(source: Source) -> Iterator[tuple[int, str | None]]:
    """(line, canonical JSON text) per item; None for an unreadable one."""
    for row in rows(source):
        text = canonical.dumps(row.record).decode("utf-8") if row.record is not None else None
        yield row.line, text


def _cells(record: dict[str, Any]) -> tuple[str, str, str, str, str]:
    digest = record.get("hash")
    short = _text(digest)[:HASH_WIDTH] if isinstance(digest, str) else ""
    return (
        _text(record.get("seq", "")),
        _text(record.get("kind", "")),
        _text(record.get("ts", "")),
        short,
        summary(record),
    )


def summary(record: dict[str, Any]) -> str:
    """The kind's own fields as ``key=value`` pairs, each value cut short."""
    if record.get("kind") == Kind.POLICY and isinstance(record.get("policy"), dict):
        who = [f"{name}={_value(record[name])}" for name in ("by", "by_id") if name in record]
        return " ".join([_policy_summary(record["policy"]), *who])
    names = [n for n in LEADING_FIELDS if n in record]
    names += sorted(n for n in record if n not in COMMON_FIELDS and n not in LEADING_FIELDS)
    return " ".join(f"{_text(name)}={_value(record[name])}" for name in names)


def _policy_summary(policy: dict[str, Any]) -> str:
    parts = [
        f"{name}={_value(policy[name])}" for name in ("budget", "scar_limit") if name in policy
    ]
    tools = policy.get("tools")
    if isinstance(tools, dict):
        parts.append("tools=" + _cut(",".join(_text(name) for name in tools) or "none"))
    parts += [
        f"{_text(name)}={_value(value)}"
        for name, value in sorted(policy.items())
        if name not in ("budget", "scar_limit", "tools") and value is not None
    ]
    return " ".join(parts)


def _value(value: Any) -> str:
    if isinstance(value, dict) and isinstance(value.get("code"), str):
        extra = ",".join(f"{_text(k)}={_value(v)}" for k, v in value.items() if k != "code")
        return _cut(f"{_text(value['code'])}({extra})" if extra else _text(value["code"]))
    if isinstance(value, str):
        if _BARE.fullmatch(value):
            return _cut(value)
        return _cut(_text(canonical.dumps(value).decode("utf-8")))  # quoted
    return _cut(_text(value))


def _text(value: Any) -> str:
    """Printable text of a value: a bare string, or compact JSON, with every
    non-printable character escaped."""
    if isinstance(value, str):
        text = value
    elif isinstance(value, bool | int | Decimal | dict | list) or value is None:
        text = canonical.dumps(value).decode("utf-8")
    else:  # pragma: no cover - records hold JSON values only
        text = repr(value)
    if not text.isprintable():
        text = "".join(ch if ch.isprintable() else f"\\u{ord(ch):04x}" for ch in text)
    return text


def _cut(text: str) -> str:
    return text if len(text) <= VALUE_WIDTH else text[: VALUE_WIDTH - 3] + "..."
