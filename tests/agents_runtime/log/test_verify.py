"""agents_runtime.log.verify: every way of changing a log is caught, with the
fixed reason, at the right line."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agents_runtime.errors import VerificationError
from agents_runtime.log import canonical, record, verify
from agents_runtime.log.keys import Signer
from agents_runtime.log.kinds import Kind
from agents_runtime.log.record import Head
from agents_runtime.log.verify import ChainVerifier, Checkpoint, Failure, Report, verify_lines

DATA = Path(__file__).parents[2] / "data"
SIGNER = Signer(bytes(range(32)))
ATTACKER = Signer(bytes(range(1, 33)))
LOG_ID = "agent-1"
KINDS = sorted(kind.value for kind in Kind if kind is not Kind.GENESIS)

# --- generated logs ---------------------------------------------------------

chars = st.one_of(
    st.characters(exclude_categories=["Cs"]),
    st.sampled_from(["\x00", '"', "\\", "\ue000", "\U0001f600", "é", "\u2028"]),
)
texts = st.text(chars, max_size=10)
money = st.decimals(min_value=0, max_value=10**9 - 1, places=6, allow_nan=False)
json_values = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-(2**53) + 1, 2**53 - 1),
        money,
        st.floats(-1e300, 1e300)
        .filter(lambda f: not f.is_integer())
        .map(lambda f: Decimal(repr(f))),
        texts,
    ),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(texts, children, max_size=3),
    max_leaves=8,
)
record_fields = st.fixed_dictionaries(
    {"kind": st.sampled_from(KINDS)},
    optional={
        "action_id": st.integers(1, 10**6).map(lambda n: f"act-{n}"),
        "tool": texts,
        "input": json_values,
        "cost": money,
        "remaining": money,
        "reason": st.one_of(texts, st.fixed_dictionaries({"code": texts, "tool": texts})),
        "note": texts,
        "count": st.integers(-(2**53) + 1, 2**53 - 1),
    },
)


def ts(n: int) -> str:
    return f"2025-03-01T12:00:00.{n:06d}Z"


def seal_all(
    fields: list[dict[str, Any]], signer: Signer = SIGNER, prev: Head | None = None
) -> list[bytes]:
    """Lines (without newlines) of records sealed one after another on ``prev``."""
    head = prev or Head.empty()
    lines = []
    for f in fields:
        sealed = record.seal(f, prev=head, ts=ts(head.seq + 1), signer=signer)
        lines.append(sealed.line[:-1])
        head = sealed.head
    return lines


def build_log(fields: list[dict[str, Any]], signer: Signer = SIGNER) -> list[bytes]:
    return seal_all([record.genesis_fields(LOG_ID, signer.public_key_hex), *fields], signer)


def head_of(line: bytes) -> Head:
    parsed = canonical.loads(line)
    return Head(parsed["seq"], parsed["hash"])


logs = st.lists(record_fields, max_size=49).map(build_log)  # 1 to 50 records
long_logs = st.lists(record_fields, min_size=2, max_size=49).map(build_log)  # 3 to 50

PROPERTY = settings(max_examples=60, deadline=None)


def fails(report: Report) -> Failure:
    assert not report.ok
    assert report.failure is not None
    return report.failure


# --- properties ---------------------------------------------------------------


@PROPERTY
@given(logs)
def test_generated_log_verifies_with_and_without_its_key(lines: list[bytes]) -> None:
    for key in (None, SIGNER.public_key):
        report = verify_lines(lines, public_key=key)
        assert report.ok, report.failure
        assert report.records == len(lines)
        assert report.head == head_of(lines[-1])
        assert report.log_id == LOG_ID
        assert report.public_key == SIGNER.public_key_hex
        assert report.key_trusted is (key is not None)


@PROPERTY
@given(logs, st.data())
def test_changed_byte_in_any_line_fails_verification_at_that_line(
    lines: list[bytes], data: st.DataObject
) -> None:
    index = data.draw(st.integers(0, len(lines) - 1), label="line index")
    line = lines[index]
    at = data.draw(st.integers(0, len(line) - 1), label="byte offset")
    new = data.draw(st.integers(0, 255).filter(lambda b: b != line[at]), label="new byte")
    changed = [*lines]
    changed[index] = line[:at] + bytes([new]) + line[at + 1 :]
    for key in (None, SIGNER.public_key):
        failure = fails(verify_lines(changed, public_key=key))
        assert failure.line == index + 1


@PROPERTY
@given(long_logs, st.data())
def test_deleting_an_inner_record_fails(lines: list[bytes], data: st.DataObject) -> None:
    index = data.draw(st.integers(1, len(lines) - 2))
    failure = fails(verify_lines(lines[:index] + lines[index + 1 :]))
    assert (failure.line, failure.reason) == (index + 1, verify.SEQ_ORDER)


@PROPERTY
@given(long_logs)
def test_deleting_the_genesis_leaves_a_slice_that_says_so(lines: list[bytes]) -> None:
    report = verify_lines(lines[1:])
    assert report.ok
    assert report.is_slice
    assert report.first_seq == 1
    assert not report.signatures_checked
    assert report.public_key is None
    with_key = verify_lines(lines[1:], public_key=SIGNER.public_key)
    assert with_key.ok
    assert with_key.signatures_checked
    assert with_key.key_trusted


@PROPERTY
@given(logs, st.data())
def test_duplicating_a_record_fails(lines: list[bytes], data: st.DataObject) -> None:
    index = data.draw(st.integers(0, len(lines) - 1))
    failure = fails(verify_lines(lines[: index + 1] + lines[index:]))
    assert failure.line == index + 2
    assert failure.reason == verify.SEQ_ORDER


@PROPERTY
@given(long_logs, st.data())
def test_swapping_two_records_fails(lines: list[bytes], data: st.DataObject) -> None:
    first = data.draw(st.integers(0, len(lines) - 2))
    second = data.draw(st.integers(first + 1, len(lines) - 1))
    swapped = [*lines]
    swapped[first], swapped[second] = swapped[second], swapped[first]
    failure = fails(verify_lines(swapped))
    assert failure.line <= first + 2


@PROPERTY
@given(logs, st.data(), record_fields)
def test_inserting_a_record_fails(
    lines: list[bytes], data: st.DataObject, fields: dict[str, Any]
) -> None:
    """A record chained in correctly but signed by another key, anywhere,
    even at the end, where it would be a perfect append."""
    index = data.draw(st.integers(1, len(lines)))
    [forged] = seal_all([fields], ATTACKER, prev=head_of(lines[index - 1]))
    changed = [*lines[:index], forged, *lines[index:]]
    for key in (None, SIGNER.public_key):
        failure = fails(verify_lines(changed, public_key=key))
        assert failure.line == index + 1
        assert failure.reason == verify.BAD_SIGNATURE


@PROPERTY
@given(long_logs, st.data())
def test_truncation_passes_without_checkpoint_and_fails_with_one_past_the_cut(
    lines: list[bytes], data: st.DataObject
) -> None:
    keep = data.draw(st.integers(1, len(lines) - 1))
    kept = lines[:keep]
    assert verify_lines(kept, public_key=SIGNER.public_key).ok
    target = head_of(lines[data.draw(st.integers(keep, len(lines) - 1))])
    checkpoint = Checkpoint(target.seq, target.hash)
    failure = fails(verify_lines(kept, public_key=SIGNER.public_key, checkpoint=checkpoint))
    assert failure == Failure(keep + 1, target.seq, verify.TRUNCATED)
    assert verify_lines(lines, public_key=SIGNER.public_key, checkpoint=checkpoint).ok


@PROPERTY
@given(logs, st.data())
def test_checkpoint_with_a_wrong_hash_fails(lines: list[bytes], data: st.DataObject) -> None:
    index = data.draw(st.integers(0, len(lines) - 1))
    real = head_of(lines[index])
    wrong = data.draw(
        st.binary(min_size=32, max_size=32).map(bytes.hex).filter(lambda h: h != real.hash)
    )
    failure = fails(verify_lines(lines, checkpoint=Checkpoint(real.seq, wrong)))
    assert failure == Failure(index + 1, real.seq, verify.CHECKPOINT_MISMATCH)


@PROPERTY
@given(logs)
def test_a_wrong_public_key_fails(lines: list[bytes]) -> None:
    failure = fails(verify_lines(lines, public_key=ATTACKER.public_key))
    assert failure == Failure(1, 0, verify.KEY_MISMATCH)
    slice_failure = fails(verify_lines(lines[1:] or lines, public_key=ATTACKER.public_key))
    assert slice_failure.line == 1


# --- every fixed reason, by hand --------------------------------------------


def _resealed(line: bytes, signer: Signer = SIGNER, **changes: Any) -> bytes:
    """The line with fields changed, then hashed and signed again."""
    parsed = canonical.loads(line)
    parsed.update(changes)
    body = {k: v for k, v in parsed.items() if k not in ("hash", "sig")}
    parsed["hash"] = record.content_hash(body)
    parsed["sig"] = signer.sign(record.signing_message(parsed["hash"])).hex()
    return canonical.dumps(parsed)


def _edited(line: bytes, **changes: Any) -> bytes:
    parsed = canonical.loads(line)
    parsed.update(changes)
    return canonical.dumps({k: v for k, v in parsed.items() if v is not _DROP})


_DROP = object()
BASE = build_log(
    [
        {"kind": "policy", "policy": {"budget": 10}},
        {"kind": "action_requested", "action_id": "act-1", "tool": "t", "input": None},
        {"kind": "action_allowed", "action_id": "act-1", "cost": Decimal("0.5")},
    ]
)


def _case(index: int, line: bytes) -> list[bytes]:
    changed = [*BASE]
    changed[index] = line
    return changed


REASON_CASES = [
    pytest.param(_case(2, b"{not json"), None, Failure(3, None, verify.NOT_JSON), id="not-json"),
    pytest.param(_case(2, b'{"a":1,"a":1}'), None, Failure(3, None, verify.NOT_JSON), id="dup-key"),
    pytest.param(_case(2, b"[1,2]"), None, Failure(3, None, verify.MALFORMED), id="not-object"),
    pytest.param(
        _case(2, _edited(BASE[2], seq="2")), None, Failure(3, None, verify.MALFORMED), id="seq-str"
    ),
    pytest.param(
        _case(2, _edited(BASE[2], ts=_DROP)), None, Failure(3, 2, verify.MALFORMED), id="no-ts"
    ),
    pytest.param(
        _case(2, _edited(BASE[2], sig="AB" * 64)),
        None,
        Failure(3, 2, verify.MALFORMED),
        id="hex-case",
    ),
    pytest.param(
        _case(2, BASE[2].replace(b",", b", ", 1)),
        None,
        Failure(3, 2, verify.NOT_CANONICAL),
        id="not-canonical",
    ),
    pytest.param(
        _case(2, _edited(BASE[2], tool="u")), None, Failure(3, 2, verify.HASH_MISMATCH), id="hash"
    ),
    pytest.param(
        _case(2, _resealed(BASE[2], seq=3)), None, Failure(3, 3, verify.SEQ_ORDER), id="seq-gap"
    ),
    pytest.param(
        _case(2, _resealed(BASE[2], prev="0" * 64)),
        None,
        Failure(3, 2, verify.PREV_MISMATCH),
        id="prev",
    ),
    pytest.param(
        _case(0, _resealed(BASE[0], prev="1" * 64)),
        None,
        Failure(1, 0, verify.PREV_MISMATCH),
        id="genesis-prev-not-zero",
    ),
    pytest.param(
        _case(2, _resealed(BASE[2], ATTACKER)), None, Failure(3, 2, verify.BAD_SIGNATURE), id="sig"
    ),
    pytest.param(
        _case(0, _resealed(BASE[0], format="guard-log/2")),
        None,
        Failure(1, 0, verify.BAD_GENESIS),
        id="genesis-format",
    ),
    pytest.param(
        _case(0, _resealed(BASE[0], kind="policy")),
        None,
        Failure(1, 0, verify.BAD_GENESIS),
        id="seq-0-not-genesis",
    ),
    pytest.param(
        _case(2, _resealed(BASE[2], kind="genesis")),
        None,
        Failure(3, 2, verify.BAD_GENESIS),
        id="second-genesis",
    ),
    pytest.param(
        _case(0, _resealed(BASE[0], log_id="agent-2")),
        {"log_id": LOG_ID},
        Failure(1, 0, verify.LOG_ID_MISMATCH),
        id="log-id",
    ),
    pytest.param(
        BASE, {"public_key": ATTACKER.public_key}, Failure(1, 0, verify.KEY_MISMATCH), id="key"
    ),
    pytest.param(
        BASE[:2],
        {"checkpoint": Checkpoint(3, head_of(BASE[3]).hash)},
        Failure(3, 3, verify.TRUNCATED),
        id="truncated",
    ),
    pytest.param(
        BASE,
        {"checkpoint": Checkpoint(1, "f" * 64)},
        Failure(2, 1, verify.CHECKPOINT_MISMATCH),
        id="checkpoint-hash",
    ),
    pytest.param(
        BASE[2:],
        {"checkpoint": Checkpoint(1, head_of(BASE[1]).hash)},
        Failure(1, 2, verify.CHECKPOINT_OUTSIDE),
        id="checkpoint-before-slice",
    ),
]


@pytest.mark.parametrize(("lines", "options", "expected"), REASON_CASES)
def test_each_fault_gets_its_fixed_reason(
    lines: list[bytes], options: dict[str, Any] | None, expected: Failure
) -> None:
    assert verify_lines(lines, **(options or {})).failure == expected


def test_feed_returns_the_record_with_exact_decimals() -> None:
    verifier = ChainVerifier()
    parsed = [verifier.feed(line) for line in BASE]
    assert parsed[3]["cost"] == Decimal("0.5")
    assert type(parsed[3]["cost"]) is Decimal
    assert verifier.head == head_of(BASE[3])


def test_feed_raises_verification_error_naming_line_seq_and_reason() -> None:
    verifier = ChainVerifier()
    verifier.feed(BASE[0])
    with pytest.raises(VerificationError, match=r"^line 2 \(seq 2\): seq out of order$"):
        verifier.feed(BASE[2])


def test_empty_input_verifies_nothing() -> None:
    report = verify_lines([])
    assert report.ok
    assert report.records == 0
    assert report.head is None


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("5", id="no-hash"),
        pytest.param("x:" + "a" * 64, id="seq-not-digits"),
        pytest.param("-1:" + "a" * 64, id="negative"),
        pytest.param("5:" + "A" * 64, id="upper-case"),
        pytest.param("5:" + "a" * 63, id="short-hash"),
    ],
)
def test_checkpoint_parse_refuses_malformed_text(text: str) -> None:
    with pytest.raises(ValueError, match=r"^checkpoint must be <seq>:<64 hex characters>, not '"):
        Checkpoint.parse(text)


def test_checkpoint_parse_reads_a_head_checkpoint() -> None:
    head = head_of(BASE[2])
    assert Checkpoint.parse(head.checkpoint()) == Checkpoint(head.seq, head.hash)


def test_worked_example_verifies_with_its_public_key() -> None:
    lines = (DATA / "worked-example.jsonl").read_bytes().splitlines()
    seed = bytes.fromhex((DATA / "worked-example.key").read_text().strip())
    report = verify_lines(lines, public_key=Signer(seed).public_key, log_id="worked-example")
    assert report.ok
    assert report.key_trusted
    assert report.records == 3


# --- an agent's own log must be whole ------------------------------------------


def test_agent_log_cut_before_a_policy_record_fails_as_not_starting_at_seq_0() -> None:
    lines = build_log([{"kind": "policy"}, {"kind": "scar"}, {"kind": "policy"}])
    assert verify_lines(lines[3:], log_id=None).ok  # as a slice it is fine
    failure = fails(verify_lines(lines[3:], public_key=SIGNER.public_key, log_id=LOG_ID))
    assert failure == Failure(1, 3, "log does not start at seq 0")


def test_agent_log_without_its_genesis_fails_even_under_another_name() -> None:
    lines = build_log([{"kind": "policy"}])
    failure = fails(verify_lines(lines[1:], public_key=SIGNER.public_key, log_id="other"))
    assert failure == Failure(1, 1, "log does not start at seq 0")


def test_agent_log_whose_seq_1_is_not_a_policy_fails() -> None:
    lines = build_log([{"kind": "scar"}])
    failure = fails(verify_lines(lines, public_key=SIGNER.public_key, log_id=LOG_ID))
    assert failure == Failure(2, 1, "seq 1 is not a policy record")
