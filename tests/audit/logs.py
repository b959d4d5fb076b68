"""Signed logs for the audit tool's tests, built with the runtime's own writer."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path
from typing import Any

from agents_runtime.log import canonical, record
from agents_runtime.log.keys import Signer
from agents_runtime.log.record import Head

SIGNER = Signer(bytes(range(32)))
OTHER = Signer(bytes(range(1, 33)))
PUBLIC_KEY = SIGNER.public_key_hex


def fields(n: int) -> dict[str, Any]:
    """Record ``n`` (from 2): request, allow, outcome of act-1, then of act-2, ..."""
    action = f"act-{(n - 2) // 3 + 1}"
    return [
        {
            "kind": "action_requested",
            "action_id": action,
            "tool": "web_search",
            "input": {"query": f"café {n}", "max_results": 3},
            "requested_cost": None,
            "cost": Decimal("0.5"),
        },
        {"kind": "action_allowed", "action_id": action, "cost": Decimal("0.5"), "remaining": 9},
        {"kind": "outcome", "action_id": action, "outcome": "success", "by": "agent"},
    ][(n - 2) % 3]


def build(count: int = 6, *, log_id: str = "agent-1", signer: Signer = SIGNER) -> list[bytes]:
    """Lines (with newlines) of a whole log of ``count`` records."""
    head = Head.empty()
    lines = []
    for n in range(count):
        if n == 0:
            f = record.genesis_fields(log_id, signer.public_key_hex)
        elif n == 1:
            f = {"kind": "policy", "policy": {"budget": 10, "scar_limit": 5, "tools": {}}}
        else:
            f = fields(n)
        sealed = record.seal(f, prev=head, ts=f"2025-03-01T12:00:00.{n:06d}Z", signer=signer)
        lines.append(sealed.line)
        head = sealed.head
    return lines


def head_of(line: bytes) -> Head:
    parsed = canonical.loads(line)
    return Head(parsed["seq"], parsed["hash"])


def write(path: Path, lines: list[bytes], tail: bytes = b"") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"".join(lines) + tail)
    return path


def response_body(lines: list[bytes], head: Head | None = None, **dump: Any) -> str:
    """The body of GET /v1/agents/:id/log holding these records."""
    records = [json.loads(line) for line in lines]
    last = head or head_of(lines[-1])
    return json.dumps({"records": records, "head": last.to_json()}, **dump)
