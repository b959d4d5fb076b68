"""agents_runtime.log._fast_verify gives the reference's answer on every input.

The reference is ``ChainVerifier.feed_strict`` (docs/log-format.md, step by
step); ``ChainVerifier.feed`` is the fast path in front of it. Both are fed
the same lines, and every line must give the same record or the same
Failure, the same head and count after it, and the same report at the end:
on generated logs (valid, tampered in every way, torn, non-canonical) and on
the tamper samples of tests/data/tampered. The last tests check that the
fast path is taken at all, or it would agree by doing nothing.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from decimal import Decimal
from pathlib import Path
from typing import Any

import nacl.bindings
import orjson
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from agents_runtime.errors import CanonicalError, VerificationError
from agents_runtime.log import _fast_verify, canonical, record
from agents_runtime.log.keys import Signer
from agents_runtime.log.verify import ChainVerifier, Checkpoint, Report, verify_lines
from tests.agents_runtime.log.test_verify import (
    ATTACKER,
    LOG_ID,
    PROPERTY,
    SIGNER,
    _resealed,
    build_log,
    head_of,
    logs,
    long_logs,
    record_fields,
    seal_all,
)

TAMPERED = Path(__file__).parents[2] / "data" / "tampered"
EXPECT: dict[str, Any] = json.loads((TAMPERED / "expectations.json").read_text())
# The fixed test key tests/data/tampered/generate.py signs with.
TAMPER_SIGNER = Signer(
    hashlib.sha256(b"agent-action-guard tamper vectors: test signing key").digest()
)


def _outcome(feed: Callable[[bytes], dict[str, Any]], line: bytes) -> Any:
    try:
        return feed(line)
    except VerificationError as exc:
        return exc.failure


def _end(verifier: ChainVerifier) -> Report:
    try:
        verifier.finish()
    except VerificationError as exc:
        return verifier.report(exc.failure)
    return verifier.report(None)


def reference_lines(lines: list[bytes], **options: Any) -> Report:
    """``verify_lines`` by the reference alone."""
    verifier = ChainVerifier(**options)
    for line in lines:
        try:
            verifier.feed_strict(line)
        except VerificationError as exc:
            return verifier.report(exc.failure)
    return _end(verifier)


def assert_same_answers(lines: list[bytes], **options: Any) -> None:
    """Line by line (going on after a failure, as a caller may), then the
    end of the log, then ``verify_lines`` against its reference."""
    fast, reference = ChainVerifier(**options), ChainVerifier(**options)
    for line in lines:
        assert _outcome(fast.feed, line) == _outcome(reference.feed_strict, line)
        assert (fast.head, fast.count) == (reference.head, reference.count)
    assert _end(fast) == _end(reference)
    if "signer" not in options:
        assert verify_lines(lines, **options) == reference_lines(lines, **options)


def option_sets(lines: list[bytes]) -> Iterator[dict[str, Any]]:
    """Every way callers set up a verifier, the head as a checkpoint too."""
    key = SIGNER.public_key
    yield {}
    yield {"public_key": key}
    yield {"log_id": LOG_ID}
    yield {"public_key": key, "log_id": LOG_ID}
    yield {"public_key": key, "log_id": LOG_ID, "signer": SIGNER}
    yield {"public_key": ATTACKER.public_key, "signer": ATTACKER}
    try:
        head = head_of(lines[-1])
    except (CanonicalError, KeyError, TypeError):  # a tampered last line: no head to take
        return
    yield {"public_key": key, "checkpoint": Checkpoint(head.seq, head.hash), "signer": SIGNER}
    # A signed checkpoint: the records up to it are not signature-checked.
    signed = Checkpoint(head.seq, head.hash, signed=True)
    yield {"public_key": key, "checkpoint": signed, "signer": SIGNER}
    yield {"public_key": key, "log_id": LOG_ID, "checkpoint": signed}
    middle = len(lines) // 2
    try:
        mid = head_of(lines[middle])
    except (CanonicalError, KeyError, TypeError):
        return
    mid_signed = Checkpoint(mid.seq, mid.hash, signed=True)
    yield {"public_key": key, "log_id": LOG_ID, "checkpoint": mid_signed, "signer": SIGNER}
    yield {"public_key": ATTACKER.public_key, "checkpoint": mid_signed}


def assert_same_answers_everywhere(lines: list[bytes]) -> None:
    for options in option_sets(lines):
        assert_same_answers(lines, **options)


# --- generated logs -------------------------------------------------------------


@PROPERTY
@given(logs)
def test_valid_logs(lines: list[bytes]) -> None:
    assert_same_answers_everywhere(lines)


@PROPERTY
@given(logs, st.data())
def test_any_byte_changed(lines: list[bytes], data: st.DataObject) -> None:
    index = data.draw(st.integers(0, len(lines) - 1))
    line = lines[index]
    at = data.draw(st.integers(0, len(line) - 1))
    new = data.draw(
        st.integers(0, 255) | st.sampled_from(b' ,:{}[]"\\0123456789abcdef-.eE\x00\xff')
    )
    changed = [*lines]
    changed[index] = line[:at] + bytes([new]) + line[at + 1 :]
    assert_same_answers_everywhere(changed)


@PROPERTY
@given(long_logs, st.data(), record_fields)
def test_records_moved_forged_or_resigned(
    lines: list[bytes], data: st.DataObject, fields: dict[str, Any]
) -> None:
    index = data.draw(st.integers(1, len(lines) - 1))
    how = data.draw(
        st.sampled_from(
            [
                "deleted",
                "duplicated",
                "swapped",
                "inserted",
                "forged",
                "resealed",
                "unsigned",
                "signature of another record",
                "head cut off",
            ]
        )
    )
    changed = [*lines]
    if how == "deleted":
        del changed[index]
    elif how == "duplicated":
        changed.insert(index, lines[index])
    elif how == "swapped":
        changed[index], changed[index - 1] = lines[index - 1], lines[index]
    elif how == "inserted":  # chained in correctly, signed by another key
        changed.insert(index, seal_all([fields], ATTACKER, prev=head_of(lines[index - 1]))[0])
    elif how == "forged":
        changed[index] = _resealed(lines[index], ATTACKER, note="changed")
    elif how == "resealed":  # signed by the key, but the next prev no longer matches
        changed[index] = _resealed(lines[index], note="changed")
    elif how == "unsigned":
        sig = canonical.loads(lines[index])["sig"].encode()
        changed[index] = lines[index].replace(sig, b"0" * 128)
    elif how == "signature of another record":
        sig = canonical.loads(lines[index])["sig"].encode()
        other = canonical.loads(lines[index - 1])["sig"].encode()
        changed[index] = lines[index].replace(sig, other)
    else:
        changed = changed[index:]
    assert_same_answers_everywhere(changed)


@PROPERTY
@given(logs, st.data())
def test_torn_lines(lines: list[bytes], data: st.DataObject) -> None:
    """A line cut short, at the end (a crash during an append) or inside."""
    index = data.draw(st.integers(0, len(lines) - 1))
    cut = data.draw(st.integers(0, len(lines[index]) - 1))
    changed = [*lines]
    changed[index] = lines[index][:cut]
    assert_same_answers_everywhere(changed)
    assert_same_answers_everywhere([*lines[:index], lines[index][:cut]])


# Rewritings of a line that keep (or nearly keep) its record but not its
# canonical bytes, and lines canonical JSON cannot be.
NOT_CANONICAL: dict[str, Callable[[bytes], bytes]] = {
    "space after a colon": lambda line: line.replace(b'"kind":', b'"kind": ', 1),
    "space at the end": lambda line: line + b" ",
    "newline inside": lambda line: line.replace(b",", b",\n", 1),
    "escaped ASCII": lambda line: line.replace(b'"ts":"2', b'"ts":"\\u0032', 1),
    "escaped non-ASCII": lambda line: line.replace("é".encode(), b"\\u00e9", 1),
    "keys reversed": lambda line: orjson.dumps(
        dict(reversed(canonical.loads(line).items())), default=canonical.number_fragment
    ),
    "trailing zero": lambda line: re.sub(rb":(\d+\.\d+)", rb":\g<1>0", line, count=1),
    "exponent": lambda line: re.sub(rb'"seq":(\d+)', rb'"seq":\g<1>e0', line, count=1),
    "integer too large": lambda line: re.sub(
        rb'"seq":\d+', b'"seq":9007199254740993', line, count=1
    ),
    "duplicate key": lambda line: line.replace(b'"kind":', b'"kind":"scar","kind":', 1),
    "lone surrogate": lambda line: line.replace(b'"ts":"', b'"ts":"\\ud800', 1),
    "not UTF-8": lambda line: line.replace(b'"ts":"', b'"ts":"\xc3', 1),
    "BOM": lambda line: b"\xef\xbb\xbf" + line,
    "NaN": lambda line: re.sub(rb'"seq":\d+', b'"seq":NaN', line, count=1),
    "not an object": lambda line: b"[" + line + b"]",
    "empty": lambda line: b"",
}


@PROPERTY
@given(logs, st.data())
def test_non_canonical_lines(lines: list[bytes], data: st.DataObject) -> None:
    index = data.draw(st.integers(0, len(lines) - 1))
    rewrite = data.draw(st.sampled_from(sorted(NOT_CANONICAL)))
    changed = [*lines]
    changed[index] = NOT_CANONICAL[rewrite](lines[index])
    assert_same_answers_everywhere(changed)


def _nested(depth: int) -> Any:
    value: Any = 0
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize("depth", [60, 62, 63, 64, 65, 100])
def test_deep_nesting(depth: int) -> None:
    """The depth limit is the reference's: the fast path leaves deep lines alone."""
    lines = build_log([{"kind": "policy"}, {"kind": "scar", "input": _nested(depth)}])
    assert_same_answers_everywhere(lines)


@given(st.text(max_size=12))
@example("\u2028")
@example("\U0001f600é\x00")
@example('"hash":"')
@example('"sig":"')
@PROPERTY
def test_strings_that_look_like_members(text: str) -> None:
    """A string or key holding what the fast path looks for on the line."""
    lines = build_log(
        [{"kind": "policy"}, {"kind": "scar", "note": text, "input": {text: text, "hash": text}}]
    )
    assert_same_answers_everywhere(lines)


# --- the tamper samples -------------------------------------------------------------

SAMPLES = sorted(
    [*TAMPERED.glob("*.jsonl"), *(TAMPERED / "original").glob("*.jsonl")],
    key=lambda path: str(path.relative_to(TAMPERED)),
)


@pytest.mark.parametrize(
    "path", [pytest.param(p, id=str(p.relative_to(TAMPERED))) for p in SAMPLES]
)
def test_tamper_samples(path: Path) -> None:
    assert TAMPER_SIGNER.public_key_hex == EXPECT["public_key"]
    lines = path.read_bytes().splitlines()
    key = TAMPER_SIGNER.public_key
    checkpoint = Checkpoint.parse(EXPECT["checkpoint"])
    for options in (
        {},
        {"public_key": key},
        {"public_key": key, "checkpoint": checkpoint},
        {"public_key": key, "log_id": EXPECT["victim"]},
        {"public_key": key, "log_id": EXPECT["victim"], "signer": TAMPER_SIGNER},
        {"public_key": key, "checkpoint": checkpoint, "signer": TAMPER_SIGNER},
    ):
        assert_same_answers(lines, **options)


# --- the fast path is taken --------------------------------------------------------


@contextmanager
def counted_reference() -> Iterator[list[bytes]]:
    """The lines that reach the reference while in the block."""
    seen: list[bytes] = []
    feed_strict = ChainVerifier.feed_strict

    def counting(self: ChainVerifier, line: bytes) -> dict[str, Any]:
        seen.append(line)
        return feed_strict(self, line)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(ChainVerifier, "feed_strict", counting)
        yield seen


@PROPERTY
@given(logs)
def test_every_line_after_the_policy_of_a_sound_log_takes_the_fast_path(
    lines: list[bytes],
) -> None:
    """Non-ASCII lines included: the speed of startup rests on it."""
    with counted_reference() as seen:
        assert verify_lines(lines, public_key=SIGNER.public_key).ok
    assert seen == lines[:2]


def test_the_checkpoint_line_goes_to_the_reference() -> None:
    lines = build_log([{"kind": "policy"}, *({"kind": "scar"} for _ in range(5))])
    checkpoint = Checkpoint(4, head_of(lines[4]).hash)
    with counted_reference() as seen:
        assert verify_lines(lines, checkpoint=checkpoint).ok
    assert seen == [*lines[:2], lines[4]]


def test_line_sha_is_the_content_hash() -> None:
    lines = build_log([{"kind": "policy"}, {"kind": "scar", "note": "é", "cost": Decimal("1.5")}])
    for line in lines:
        parsed = canonical.loads(line)
        sha = _fast_verify.line_sha(line, parsed["hash"], parsed["sig"])
        assert sha.hexdigest() == record.content_hash(parsed)


def test_a_repeated_hash_member_is_left_to_the_reference() -> None:
    lines = build_log([{"kind": "policy"}, {"kind": "scar"}, {"kind": "scar"}])
    parsed = canonical.loads(lines[3])
    forged = _resealed(lines[3], action_id={"hash": parsed["hash"], "x": 1})
    reparsed = canonical.loads(forged)
    assert _fast_verify.line_sha(forged, reparsed["hash"], reparsed["sig"]) is None
    assert verify_lines([*lines[:3], forged]).ok


class _SignerOfOtherBytes(Signer):
    """The key's holder as seen through a signing that gives other bytes
    than the signature in the file (Ed25519 allows no second valid
    signature to make one for real)."""

    def sign(self, message: bytes) -> bytes:
        return bytes(64)


def test_with_the_signer_signatures_are_checked_by_signing_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Only genesis and policy go to a verify; every later signature is
    found byte-equal to the one the key's holder makes."""
    lines = build_log([{"kind": "policy"}, *({"kind": "scar"} for _ in range(5))])
    opened: list[bytes] = []
    crypto_sign_open = nacl.bindings.crypto_sign_open

    def counting(signed: bytes, key: bytes) -> bytes:
        opened.append(signed)
        return crypto_sign_open(signed, key)

    monkeypatch.setattr(nacl.bindings, "crypto_sign_open", counting)
    report = verify_lines(lines, public_key=SIGNER.public_key, log_id=LOG_ID)
    assert report.ok
    assert len(opened) == len(lines) == 7
    opened.clear()
    verifier = ChainVerifier(public_key=SIGNER.public_key, log_id=LOG_ID, signer=SIGNER)
    for line in lines:
        verifier.feed(line)
    assert len(opened) == 2  # genesis and policy, on the reference path


def test_a_signature_other_than_the_signers_own_is_left_to_the_verify() -> None:
    lines = build_log([{"kind": "policy"}, *({"kind": "scar"} for _ in range(5))])
    other = _SignerOfOtherBytes(bytes(range(32)))  # SIGNER's seed
    verifier = ChainVerifier(public_key=SIGNER.public_key, log_id=LOG_ID, signer=other)
    assert [verifier.feed(line) for line in lines] == [canonical.loads(x) for x in lines]
    forged = build_log([{"kind": "policy"}, {"kind": "scar"}], signer=ATTACKER)
    # A signer of another key than the trusted one is not used at all.
    verifier = ChainVerifier(public_key=ATTACKER.public_key, signer=SIGNER)
    assert [verifier.feed(line) for line in forged] == [canonical.loads(x) for x in forged]
