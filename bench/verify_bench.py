"""How fast ``audit verify`` checks a log, against its floor.

The floor is PyNaCl alone over the same signatures, the faster of
``VerifyKey.verify`` and the binding it ends in (``crypto_sign_open``, which
the verifier calls itself) on inputs joined beforehand: no verifier can beat
checking every signature. Both run in this process on
one core, interleaved, and the ratio ``audit verify`` / floor is the figure
that counts (absolute speed drifts with the host; the ratio holds). Target:
ratio >= 0.70.

The log (200,000 records by default; ``BENCH_VERIFY_RECORDS`` overrides) is
built once and cached in ``bench/.cache/agents/``.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import io
import os
import sys
import time
from collections.abc import Callable, Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import nacl.bindings
import nacl.signing
import orjson

from agents_runtime.log import record
from agents_runtime.log.keys import Signer
from audit.cli import main as audit_main

RECORDS = int(os.environ.get("BENCH_VERIFY_RECORDS", "200000"))
ROUNDS = int(os.environ.get("BENCH_VERIFY_ROUNDS", "3"))
TARGET_RATIO = 0.70
SEED = bytes(range(32))  # a fixed test key, so the cached log stays valid
LOG_ID = "bench"
CACHE = Path(__file__).parent / ".cache" / "agents"
CACHE_VERSION = 1  # bump when the generated records change


def _fields(n: int, remaining: Decimal) -> dict[str, Any]:
    """Record n of a plausible agent's life: requests, decisions, outcomes,
    the odd denial and scar; numbers and strings vary from record to record."""
    action = f"act-{n // 3 + 1}"
    step = n % 3
    if n % 97 == 0:
        return {
            "kind": "action_denied",
            "action_id": action,
            "reason": {"code": "tool_call_limit", "tool": "send_email", "max_calls": 5},
        }
    if n % 211 == 0:
        return {
            "kind": "scar",
            "severity": "minor",
            "reason": "outcome: failure: upstream timed out",
            "action_id": action,
            "by": "system",
        }
    if step == 0:
        return {
            "kind": "action_requested",
            "action_id": action,
            "tool": "web_search",
            "input": {"query": f"flights to city {n} under {n % 500} EUR", "max_results": 5},
            "requested_cost": None,
            "cost": Decimal("0.25"),
        }
    if step == 1:
        return {
            "kind": "action_allowed",
            "action_id": action,
            "cost": Decimal("0.25"),
            "remaining": remaining,
        }
    return {"kind": "outcome", "action_id": action, "outcome": "success", "by": "agent"}


def _ts(n: int) -> str:
    seconds, micros = divmod(n * 1375, 1_000_000)
    minutes, seconds = divmod(seconds, 60)
    hours, minutes = divmod(minutes, 60)
    return f"2025-03-01T{hours % 24:02d}:{minutes:02d}:{seconds:02d}.{micros:06d}Z"


def _lines(count: int, signer: Signer) -> Iterator[bytes]:
    head = record.Head.empty()
    remaining = Decimal(10_000_000)
    policy = {"budget": remaining, "scar_limit": 1000, "tools": {}, "default": {"cost": 0}}
    firsts = [
        record.genesis_fields(LOG_ID, signer.public_key_hex),
        {"kind": "policy", "policy": policy},
    ]
    for n in range(count):
        if n < len(firsts):
            fields = firsts[n]
        else:
            if n % 3 == 1:
                remaining -= Decimal("0.25")
            fields = _fields(n, remaining)
        sealed = record.seal(fields, prev=head, ts=_ts(n), signer=signer)
        head = sealed.head
        yield sealed.line


def cached_log(count: int = RECORDS) -> Path:
    """The benchmark log of ``count`` records, built on first use."""
    path = CACHE / f"{LOG_ID}.jsonl"
    stamp = CACHE / f"{LOG_ID}.stamp"
    wanted = f"{CACHE_VERSION}:{count}"
    if path.exists() and stamp.exists() and stamp.read_text() == wanted:
        return path
    CACHE.mkdir(parents=True, exist_ok=True)
    print(f"building a {count:,}-record log in {path.parent} (once)...", file=sys.stderr)
    tmp = path.with_suffix(".tmp")
    with tmp.open("wb") as out:
        for line in _lines(count, Signer(SEED)):
            out.write(line)
    tmp.replace(path)
    stamp.write_text(wanted)
    return path


@contextlib.contextmanager
def _one_core() -> Iterator[str]:
    """Run on one CPU for the duration, then give the process its CPUs back."""
    if not hasattr(os, "sched_setaffinity"):
        yield "not pinned (no sched_setaffinity)"
        return
    allowed = os.sched_getaffinity(0)
    cpu = min(allowed)
    os.sched_setaffinity(0, {cpu})
    try:
        yield f"pinned to CPU {cpu}"
    finally:
        os.sched_setaffinity(0, allowed)


def _versions() -> str:
    names = ("pynacl", "orjson", "rfc8785")
    return ", ".join(f"{name} {importlib.metadata.version(name)}" for name in names)


def _timed(run: Callable[[], object]) -> tuple[float, float]:
    """(CPU seconds, wall seconds) of one call."""
    cpu, wall = time.process_time(), time.perf_counter()
    run()
    return time.process_time() - cpu, time.perf_counter() - wall


def main() -> dict[str, Any]:
    path = cached_log()
    with _one_core() as pinned:
        return _measure(path, pinned)


def _measure(path: Path, pinned: str) -> dict[str, Any]:
    public_key = Signer(SEED).public_key
    pairs = []
    for line in path.read_bytes().splitlines():
        fields = orjson.loads(line)
        pairs.append((record.signing_message(fields["hash"]), bytes.fromhex(fields["sig"])))
    count = len(pairs)
    verify_key = nacl.signing.VerifyKey(public_key)

    signed = [signature + message for message, signature in pairs]

    def floor_verify_key() -> None:
        verify = verify_key.verify
        for message, signature in pairs:
            verify(message, signature)

    def floor_binding() -> None:
        open_signed = nacl.bindings.crypto_sign_open
        for item in signed:
            open_signed(item, public_key)

    def audit() -> None:
        out = io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
            status = audit_main(["verify", str(path), "--public-key", public_key.hex(), "--json"])
        report = orjson.loads(out.getvalue())
        if status != 0 or report["records"] != count:
            raise RuntimeError(f"audit verify did not pass the benchmark log: {report}")

    audit_times, floor_times = [], []
    for _ in range(ROUNDS):
        audit_times.append(_timed(audit))
        floor_times.append(_timed(floor_verify_key))
        floor_times.append(_timed(floor_binding))
    audit_cpu = min(t[0] for t in audit_times)
    floor_cpu = min(t[0] for t in floor_times)
    ratio = floor_cpu / audit_cpu
    return {
        "records": count,
        "rounds": ROUNDS,
        "cpu": pinned,
        "audit_verify_records_per_s": round(count / audit_cpu),
        "floor_nacl_verify_per_s": round(count / floor_cpu),
        "ratio": round(ratio, 3),
        "audit_verify_records_per_s_wall": round(count / min(t[1] for t in audit_times)),
        "floor_nacl_verify_per_s_wall": round(count / min(t[1] for t in floor_times)),
        "target_ratio": TARGET_RATIO,
        "timing": "best of the rounds, CPU time of this process (user + system)",
        "versions": _versions(),
        "pass": ratio >= TARGET_RATIO,
    }
