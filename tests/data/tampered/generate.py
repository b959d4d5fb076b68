"""Make the tamper vectors in this directory. Run from the repository root:

    python tests/data/tampered/generate.py

It writes two real logs with the service's own code (the agent registry and
actors, a fixed clock, and a fixed TEST signing key whose seed is below;
never use it for anything else): ``original/agent-a.jsonl``, the victim, and
``original/agent-b.jsonl``, another agent of the same service. Then one file
per attack on agent-a's log, named for it, ``public_key.hex`` (the test
key's public key) and ``expectations.json``: for each file, the first failure
a verifier must report, given the public key and the victim's ID
(``failure``); given also the checkpoint of the untampered head
(``failure_with_checkpoint``); given neither key nor checkpoint
(``failure_without_key``). ``null`` means the file passes. The expected
failures are written down here by construction, not taken from the
verifier; generation checks the verifier agrees, and
tests/reliability/test_tamper.py checks that this script reproduces the
committed files byte for byte.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import sys
import tempfile
from decimal import Decimal
from pathlib import Path
from typing import Any

from agents_runtime.core import commands as c
from agents_runtime.core.policy import parse_policy
from agents_runtime.log import canonical
from agents_runtime.log.files.committer import Committer
from agents_runtime.log.files.datadir import DataDir
from agents_runtime.log.files.store import FileStore
from agents_runtime.log.keys import Signer
from agents_runtime.log.record import SEALED_FIELDS, Head, seal, signing_message
from agents_runtime.log.verify import (
    BAD_SIGNATURE,
    HASH_MISMATCH,
    KEY_MISMATCH,
    LOG_ID_MISMATCH,
    PREV_MISMATCH,
    SEQ_ORDER,
    TRUNCATED,
    Checkpoint,
    verify_lines,
)
from agents_runtime.runtime.registry import Registry

HERE = Path(__file__).resolve().parent
VICTIM, OTHER = "agent-a", "agent-b"
# TEST keys: derived from fixed strings so the vectors are reproducible.
TEST_SEED = hashlib.sha256(b"agent-action-guard tamper vectors: test signing key").digest()
FOREIGN_SEED = hashlib.sha256(b"agent-action-guard tamper vectors: foreign key").digest()
TOKEN_KEY = hashlib.sha256(b"agent-action-guard tamper vectors: token key").digest()
EPOCH = 1_735_689_600.0  # 2025-01-01T00:00:00Z
K = 5  # the record most attacks aim at: act-2's action_allowed (cost 2)
TRUNCATED_RECORDS = 3

POLICY = {
    "budget": 50,
    "scar_limit": 20,
    "tools": {"search": {"cost": 1}, "send_email": {"cost": 5, "requires_approval": True}},
}


class FixedClock:
    def __init__(self) -> None:
        self.now = EPOCH

    def __call__(self) -> float:
        self.now += 0.25
        return self.now


async def _victim(registry: Registry) -> None:
    await registry.create(VICTIM, parse_policy(POLICY))
    ask = registry.ref(VICTIM).ask
    await ask(c.RequestAction("search", {"q": "weather in Lyon"}))  # act-1, seq 2-3
    await ask(c.RequestAction("search", {"q": "train times"}, Decimal(2)))  # act-2, seq 4-5
    await ask(c.ReportOutcome("act-1", "success", c.AGENT))  # seq 6
    await ask(c.RequestAction("send_email", {"to": "ops@example.com"}))  # act-3, seq 7-8
    await ask(c.Approve("act-3", "alice", "checked the recipient"))  # seq 9
    await ask(c.ReportOutcome("act-2", "failure", c.AGENT, "timeout"))  # seq 10-11
    await ask(c.RequestAction("rm_rf", {"path": "/"}))  # act-4 denied, seq 12-14
    await ask(c.RequestAction("send_email", {"to": "all@example.com"}))  # act-5, seq 15-16
    await ask(c.Reject("act-5", "bob", "too broad", "minor"))  # seq 17-18
    await ask(c.AddScar("minor", "late report"))  # seq 19
    await ask(c.RequestAction("search", {"q": "status page"}))  # act-6, seq 20-21
    await ask(c.Terminate("task finished", "carol"))  # seq 22


async def _other(registry: Registry) -> None:
    await registry.create(OTHER, parse_policy(POLICY))
    ask = registry.ref(OTHER).ask
    await ask(c.RequestAction("search", {"q": "cheap flights"}))  # act-1, seq 2-3
    await ask(c.RequestAction("search", {"q": "hotel"}, Decimal(3)))  # act-2, seq 4-5
    await ask(c.ReportOutcome("act-2", "success", c.AGENT))  # seq 6
    await ask(c.RequestAction("search", {"q": "car hire"}))  # act-3, seq 7-8
    await ask(c.ReportOutcome("act-3", "success", c.AGENT))  # seq 9
    await ask(c.RequestAction("search", {"q": "museum"}))  # act-4, seq 10-11
    await ask(c.RequestAction("search", {"q": "restaurant"}))  # act-5, seq 12-13
    await ask(c.ReportOutcome("act-5", "success", c.AGENT))  # seq 14


def _write_secret(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


async def _make_logs(root: Path) -> tuple[list[bytes], list[bytes]]:
    keys = root / "keys"
    keys.mkdir(parents=True, mode=0o700)
    _write_secret(keys / "audit.key", TEST_SEED.hex().encode() + b"\n")
    _write_secret(keys / "audit.pub", Signer(TEST_SEED).public_key_hex.encode() + b"\n")
    _write_secret(keys / "token.key", TOKEN_KEY)
    _write_secret(keys / "admin.token", b"test-admin-token\n")
    data_dir = DataDir(root)
    registry = Registry(
        FileStore(data_dir, committer=Committer(inline=True)),
        data_dir.prepare(),
        clock=FixedClock(),
    )
    await registry.start()
    try:
        await _victim(registry)
        await _other(registry)
    finally:
        await registry.stop()
    return (
        data_dir.log_path(VICTIM).read_bytes().splitlines(),
        data_dir.log_path(OTHER).read_bytes().splitlines(),
    )


def _record(line: bytes) -> dict[str, Any]:
    record: dict[str, Any] = canonical.loads(line)
    return record


def _fields(record: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in record.items() if k not in SEALED_FIELDS | {"seq", "ts", "prev"}}


def _flip_hex(text: str, at: int) -> str:
    return text[:at] + ("0" if text[at] != "0" else "1") + text[at + 1 :]


def _replace_field(line: bytes, field: str, value: str) -> bytes:
    record = _record(line)
    old, new = f'"{field}":"{record[field]}"'.encode(), f'"{field}":"{value}"'.encode()
    assert line.count(old) == 1
    return line.replace(old, new)


def _resign(lines: list[bytes], signer: Signer, *, new_genesis_key: bool) -> list[bytes]:
    out: list[bytes] = []
    head = Head.empty()
    for line in lines:
        record = _record(line)
        if new_genesis_key:
            fields = _fields(record)
            if fields["kind"] == "genesis":
                fields["public_key"] = signer.public_key_hex
            sealed = seal(fields, prev=head, ts=record["ts"], signer=signer)
            head = sealed.head
            out.append(sealed.line[:-1])
        else:
            record["sig"] = signer.sign(signing_message(record["hash"])).hex()
            out.append(canonical.dumps(record))
    return out


def _fail(line: int, seq: int, reason: str) -> dict[str, Any]:
    return {"line": line, "seq": seq, "reason": reason}


def vectors(a: list[bytes], b: list[bytes]) -> list[dict[str, Any]]:
    """Each attack: its file name, what it does, its lines and expected failures."""
    foreign = Signer(FOREIGN_SEED)
    target = _record(a[K])
    assert target["kind"] == "action_allowed"
    assert target["cost"] == 2

    cost_changed = a[K].replace(b'"cost":2,', b'"cost":7,')
    assert a[K].count(b'"cost":2,') == 1
    inserted = seal(
        {"kind": "policy", "policy": dict(POLICY, budget=1_000_000)},
        prev=Head(K, target["hash"]),
        ts=target["ts"],
        signer=foreign,
    )
    last = len(a) - 1

    def vector(
        name: str,
        attack: str,
        lines: list[bytes],
        failure: dict[str, Any] | None,
        *,
        with_checkpoint: Any = "same",
        without_key: Any = "same",
    ) -> dict[str, Any]:
        return {
            "file": f"{name}.jsonl",
            "attack": attack,
            "lines": lines,
            "failure": failure,
            "failure_with_checkpoint": failure if with_checkpoint == "same" else with_checkpoint,
            "failure_without_key": failure if without_key == "same" else without_key,
        }

    return [
        vector(
            "content_byte_changed",
            f"record {K} (an action_allowed) charges 7, not 2; hash and sig left as they were",
            [*a[:K], cost_changed, *a[K + 1 :]],
            _fail(K + 1, K, HASH_MISMATCH),
        ),
        vector(
            "hash_byte_changed",
            f"one hex digit of record {K}'s hash changed",
            [*a[:K], _replace_field(a[K], "hash", _flip_hex(target["hash"], 10)), *a[K + 1 :]],
            _fail(K + 1, K, HASH_MISMATCH),
        ),
        vector(
            "signature_byte_changed",
            f"one hex digit of record {K}'s sig changed",
            [*a[:K], _replace_field(a[K], "sig", _flip_hex(target["sig"], 20)), *a[K + 1 :]],
            _fail(K + 1, K, BAD_SIGNATURE),
        ),
        vector(
            "record_deleted",
            f"record {K} removed",
            a[:K] + a[K + 1 :],
            _fail(K + 1, K + 1, SEQ_ORDER),
        ),
        vector(
            "record_duplicated",
            f"record {K} written twice",
            [*a[: K + 1], a[K], *a[K + 1 :]],
            _fail(K + 2, K, SEQ_ORDER),
        ),
        vector(
            "records_swapped",
            f"records {K} and {K + 1} swapped",
            [*a[:K], a[K + 1], a[K], *a[K + 2 :]],
            _fail(K + 1, K + 1, SEQ_ORDER),
        ),
        vector(
            "record_inserted",
            f"a policy record raising the budget inserted after record {K}, chained and "
            "hashed correctly but signed with a foreign key (the service's key is not at hand)",
            [*a[: K + 1], inserted.line[:-1], *a[K + 1 :]],
            _fail(K + 2, K + 1, BAD_SIGNATURE),
        ),
        vector(
            "record_from_other_agent",
            f"record {K} replaced by record {K} of agent-b's log (same key, other chain)",
            [*a[:K], b[K], *a[K + 1 :]],
            _fail(K + 1, K, PREV_MISMATCH),
        ),
        vector(
            "log_from_other_agent",
            "agent-b's whole log, untouched, in agent-a's place",
            list(b),
            _fail(1, 0, LOG_ID_MISMATCH),
        ),
        vector(
            "prefix_spliced",
            f"agent-a's records 0 to {K - 1}, then agent-b's records from {K} on",
            a[:K] + b[K:],
            _fail(K + 1, K, PREV_MISMATCH),
        ),
        vector(
            "resigned_foreign_key",
            "every record re-hashed and re-signed with a foreign key, the genesis "
            "public_key replaced by it: internally consistent",
            _resign(a, foreign, new_genesis_key=True),
            _fail(1, 0, KEY_MISMATCH),
            without_key=None,
        ),
        vector(
            "resigned_foreign_key_genesis_kept",
            "every signature replaced by a foreign key's signature of the same hash; "
            "the genesis still names the service's key",
            _resign(a, foreign, new_genesis_key=False),
            _fail(1, 0, BAD_SIGNATURE),
        ),
        vector(
            "truncated",
            f"the last {TRUNCATED_RECORDS} records cut off (the terminated record among them)",
            a[: len(a) - TRUNCATED_RECORDS],
            None,
            with_checkpoint=_fail(len(a) - TRUNCATED_RECORDS + 1, last, TRUNCATED),
        ),
    ]


def _check(lines: list[bytes], expected: dict[str, Any] | None, **how: Any) -> None:
    report = verify_lines(lines, **how)
    got = report.failure.to_json() if report.failure is not None else None
    assert got == expected, (got, expected)


def generate(out: Path) -> None:
    """Write every file of this directory's data into ``out``."""
    with tempfile.TemporaryDirectory() as tmp:
        a, b = asyncio.run(_make_logs(Path(tmp) / "guard-data"))
    public_key = Signer(TEST_SEED).public_key
    head = _record(a[-1])
    checkpoint = f"{head['seq']}:{head['hash']}"
    (out / "original").mkdir(parents=True, exist_ok=True)
    (out / "original" / f"{VICTIM}.jsonl").write_bytes(b"\n".join(a) + b"\n")
    (out / "original" / f"{OTHER}.jsonl").write_bytes(b"\n".join(b) + b"\n")
    (out / "public_key.hex").write_text(public_key.hex() + "\n")
    expectations: list[dict[str, Any]] = []
    for vector in vectors(a, b):
        lines = vector.pop("lines")
        _check(lines, vector["failure"], public_key=public_key, log_id=VICTIM)
        _check(
            lines,
            vector["failure_with_checkpoint"],
            public_key=public_key,
            log_id=VICTIM,
            checkpoint=Checkpoint.parse(checkpoint),
        )
        _check(lines, vector["failure_without_key"], log_id=VICTIM)
        (out / vector["file"]).write_bytes(b"\n".join(lines) + b"\n")
        expectations.append(vector)
    document = {
        "victim": VICTIM,
        "other": OTHER,
        "public_key": public_key.hex(),
        "checkpoint": checkpoint,
        "vectors": expectations,
    }
    (out / "expectations.json").write_text(json.dumps(document, indent=2) + "\n")


if __name__ == "__main__":
    generate(Path(sys.argv[1]) if len(sys.argv) > 1 else HERE)
