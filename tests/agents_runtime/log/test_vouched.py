"""A start checks the records a signed checkpoint vouches for and a snapshot
has folded from their bytes alone (agents_runtime/log/_vouched.py, through
``ChainVerifier.feed_folded``), and must give the reference's verdict.

The reference is ``ChainVerifier.feed_strict`` over the whole log with the
same checkpoint. The path under test is what ``replay`` does: ``feed_folded``
up to the snapshot's seq, ``feed`` after it, ``finish``; and when that fails
after lines were taken provisionally, the reference again (replay verifies
the log again). So a failure is always the reference's; what these tests
hold is that a log the path finds sound is one the reference finds sound,
with the same head and count, and that a failure found without provisional
lines is the reference's too.

The checkpoint is signed over the log as written, and the log tampered with
afterwards, as by someone without the audit key. A ``sig`` of a vouched
record changed to other hex passes both: neither checks the signature of a
record a signed checkpoint vouches for (docs/log-format.md).
"""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agents_runtime.errors import Failure, VerificationError
from agents_runtime.log import _vouched, canonical
from agents_runtime.log.verify import PREV_MISMATCH, ChainVerifier, Checkpoint, Report
from tests.agents_runtime.log.test_fast_verify import reference_lines
from tests.agents_runtime.log.test_verify import (
    ATTACKER,
    LOG_ID,
    PROPERTY,
    SIGNER,
    _resealed,
    build_log,
    head_of,
    record_fields,
    seal_all,
)

POLICY = {"kind": "policy", "policy": {"budget": 10}}
KEY = SIGNER.public_key

# Records as guardd writes them: no escapes, so that most lines take the
# byte path (the generated ones of test_verify often hold quotes and
# backslashes, which send a line to the reference).
plain = st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E, exclude_characters='"\\'))
plain_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-(2**40), 2**40), plain),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(plain, children, max_size=3),
    max_leaves=6,
)
plain_fields = st.fixed_dictionaries(
    {"kind": st.sampled_from(["action_requested", "action_allowed", "outcome", "scar"])},
    optional={
        "action_id": st.integers(1, 10**6).map(lambda n: f"act-{n}"),
        "by": st.sampled_from(["agent", "operator"]),
        "cost": st.decimals(0, 1000, places=2),
        "input": plain_values,
        "tool": plain,
        "severity": st.sampled_from(["minor", "major"]),
        "request_hash": st.just("ab" * 32),
        "remaining": st.integers(0, 10**9),
        "status": plain,
        "zzz": plain,
    },
)
agent_logs = st.lists(st.one_of(plain_fields, plain_fields, record_fields), max_size=30).map(
    lambda fields: build_log([POLICY, *fields])
)


def by_bytes(lines: list[bytes], checkpoint: Checkpoint, stop: int) -> tuple[Report, bool]:
    """What a start does with a snapshot at ``stop - 1``: the report, and
    whether lines were taken provisionally."""
    verifier = ChainVerifier(public_key=KEY, log_id=LOG_ID, checkpoint=checkpoint)
    try:
        verifier.feed_folded(lines, stop)
        for line in lines[stop:]:
            verifier.feed(line)
        verifier.finish()
    except VerificationError as exc:
        return verifier.report(exc.failure), verifier.provisional
    return verifier.report(None), verifier.provisional


def assert_same_verdict(lines: list[bytes], checkpoint: Checkpoint, stop: int) -> Report:
    """The byte path's verdict is the reference's; returns the reference's."""
    reference = reference_lines(lines, public_key=KEY, log_id=LOG_ID, checkpoint=checkpoint)
    report, provisional = by_bytes(lines, checkpoint, stop)
    if report.ok:
        assert reference.ok, reference.failure
        assert report == reference
    elif not provisional:
        assert report == reference
    # else: replay verifies the log again by the reference, which names it.
    return reference


def signed_at(lines: list[bytes], seq: int) -> Checkpoint:
    head = head_of(lines[seq])
    return Checkpoint(head.seq, head.hash, signed=True)


def cut_points(data: st.DataObject, lines: list[bytes]) -> tuple[Checkpoint, int]:
    """A signed checkpoint on the log as written, and the snapshot's stop."""
    seq = data.draw(st.integers(0, len(lines) - 1), label="checkpoint seq")
    stop = data.draw(st.integers(1, len(lines)), label="snapshot seq + 1")
    return signed_at(lines, seq), stop


def taken(lines: list[bytes], checkpoint: Checkpoint, stop: int) -> int:
    """How many lines the byte path took."""
    verifier = ChainVerifier(public_key=KEY, log_id=LOG_ID, checkpoint=checkpoint)
    fed = []
    original = verifier.feed

    def feed(line: bytes) -> dict[str, Any]:
        fed.append(line)
        return original(line)

    verifier.feed = feed  # type: ignore[method-assign]
    verifier.feed_folded(lines, stop)
    return stop - len(fed)


# --- sound logs ------------------------------------------------------------------


@PROPERTY
@given(agent_logs, st.data())
def test_a_sound_log_is_sound_by_bytes_at_every_checkpoint_and_snapshot(
    lines: list[bytes], data: st.DataObject
) -> None:
    checkpoint, stop = cut_points(data, lines)
    assert assert_same_verdict(lines, checkpoint, stop).ok


def test_the_byte_path_takes_every_plain_line_before_the_checkpoint() -> None:
    lines = build_log([POLICY, *GUARDD_LIKE[:4] * 5])  # the fifth has an object before "hash"
    checkpoint = signed_at(lines, len(lines) - 1)
    assert taken(lines, checkpoint, len(lines)) == len(lines) - 3  # not seq 0, 1 nor the head
    report, provisional = by_bytes(lines, checkpoint, len(lines))
    assert report.ok
    assert provisional


def test_the_byte_path_takes_nothing_without_a_signed_checkpoint() -> None:
    lines = build_log([POLICY, *GUARDD_LIKE])
    head = head_of(lines[-1])
    assert taken(lines, Checkpoint(head.seq, head.hash), len(lines)) == 0


def test_the_byte_path_stops_at_the_snapshot() -> None:
    lines = build_log([POLICY, *GUARDD_LIKE[:4] * 3])
    checkpoint = signed_at(lines, len(lines) - 1)
    assert taken(lines, checkpoint, 6) == 4  # seq 2 to 5
    assert by_bytes(lines, checkpoint, 6)[0].ok


GUARDD_LIKE: list[dict[str, Any]] = [
    {
        "kind": "action_requested",
        "action_id": "act-1",
        "cost": Decimal("0.01"),
        "idempotency_key": "idem-1",
        "input": {"query": "ed25519 {batch} [verify]", "n": 5},
        "requested_cost": None,
        "tool": "web_search",
    },
    {
        "kind": "action_allowed",
        "action_id": "act-1",
        "cost": Decimal("0.01"),
        "log_id": LOG_ID,
        "remaining": Decimal("9.99"),
        "request_hash": "ab" * 32,
    },
    {"kind": "outcome", "action_id": "act-1", "by": "agent", "detail": "ok", "outcome": "success"},
    {"kind": "scar", "by": "operator", "reason": "slow", "severity": "minor"},
    # Objects before "hash" and before "sig", with keys that sort around
    # them: a member moved into one has neighbours of the right order.
    {"kind": "outcome", "action_id": "act-2", "detail": {"a": 1, "z": 2}, "outcome": "success"},
    {"kind": "action_requested", "action_id": "act-3", "input": {"a": "b", "z": 1}, "tool": "t"},
    {"kind": "scar", "by": "operator", "reason": {"a": "b", "z": 1}, "severity": "minor"},
    # Objects after "ts" holding a "ts" of their own.
    {"kind": "outcome", "action_id": "act-4", "zz": {"a": 1, "ts": "x"}},
    {"kind": "outcome", "action_id": "act-5", "u": {"a": 1, "ts": "x"}, "zz": "y"},
]


# --- tampered logs -----------------------------------------------------------


@PROPERTY
@given(agent_logs, st.data())
def test_any_byte_changed_anywhere(lines: list[bytes], data: st.DataObject) -> None:
    checkpoint, stop = cut_points(data, lines)
    index = data.draw(st.integers(0, len(lines) - 1), label="line")
    line = lines[index]
    at = data.draw(st.integers(0, len(line) - 1), label="byte")
    value = data.draw(st.integers(0, 255).filter(lambda b: b != line[at]), label="value")
    lines[index] = line[:at] + bytes([value]) + line[at + 1 :]
    assert_same_verdict(lines, checkpoint, stop)


@PROPERTY
@given(agent_logs, st.data())
def test_a_vouched_signature_changed(lines: list[bytes], data: st.DataObject) -> None:
    checkpoint, stop = cut_points(data, lines)
    index = data.draw(st.integers(0, len(lines) - 1), label="line")
    at = lines[index].rfind(b'"sig":"') + 7 + data.draw(st.integers(0, 127), label="hex digit")
    value = data.draw(st.sampled_from(b'0123456789abcdefABCDEF g"'), label="value")
    lines[index] = lines[index][:at] + bytes([value]) + lines[index][at + 1 :]
    reference = assert_same_verdict(lines, checkpoint, stop)
    if index < checkpoint.seq and chr(value) in "0123456789abcdef":
        assert reference.ok  # a vouched record's signature is not checked


@PROPERTY
@given(agent_logs, st.data())
def test_a_log_cut_short(lines: list[bytes], data: st.DataObject) -> None:
    checkpoint, stop = cut_points(data, lines)
    keep = data.draw(st.integers(1, len(lines) - 1), label="lines kept")
    assert_same_verdict(lines[:keep], checkpoint, stop)  # the snapshot may be past the cut


@PROPERTY
@given(agent_logs.filter(lambda lines: len(lines) > 3), st.data())
def test_lines_reordered_or_repeated(lines: list[bytes], data: st.DataObject) -> None:
    checkpoint, stop = cut_points(data, lines)
    first = data.draw(st.integers(0, len(lines) - 1), label="first")
    second = data.draw(st.integers(0, len(lines) - 1), label="second")
    if data.draw(st.booleans(), label="swap"):
        lines[first], lines[second] = lines[second], lines[first]
    else:
        lines.insert(second, lines[first])
    assert_same_verdict(lines, checkpoint, stop)


def _moved(line: bytes, member: bytes, to: int) -> bytes:
    """``line`` with ``member`` (its bytes, comma included) moved to just
    after the ``to``-th comma or opening brace of what is left."""
    rest = line.replace(member, b"", 1)
    places = [i + 1 for i, byte in enumerate(rest) if byte in b",{"]
    at = places[to % len(places)]
    return rest[:at] + member + rest[at:]


def _member(line: bytes, key: bytes) -> bytes:
    at = line.find(b'"' + key + b'":"')
    return line[at : line.find(b'"', at + len(key) + 4) + 2]  # up to the comma after


@PROPERTY
@given(agent_logs.filter(lambda lines: len(lines) > 3), st.data())
def test_hash_or_sig_moved_elsewhere_in_its_line(lines: list[bytes], data: st.DataObject) -> None:
    """The hash input stays what it was, so only the members' places tell:
    at the top level before or after their neighbours, inside a nested
    object, inside a string."""
    checkpoint, stop = cut_points(data, lines)
    index = data.draw(st.integers(2, len(lines) - 1), label="line")
    key = data.draw(st.sampled_from([b"hash", b"sig"]), label="member")
    line = lines[index]
    moved = _moved(line, _member(line, key), data.draw(st.integers(0, 10**6), label="place"))
    lines[index] = moved
    assert_same_verdict(lines, checkpoint, stop)


@pytest.mark.parametrize("key", [b"hash", b"sig"])
def test_hash_or_sig_moved_to_any_place_of_every_line(key: bytes) -> None:
    base = build_log([POLICY, *GUARDD_LIKE * 2])
    checkpoint = signed_at(base, len(base) - 1)
    for index in range(2, len(base) - 1):
        line = base[index]
        member = _member(line, key)
        rest = line.replace(member, b"", 1)
        for place in range(sum(1 for byte in rest if byte in b",{")):
            moved = _moved(line, member, place)
            lines = [*base[:index], moved, *base[index + 1 :]]
            reference = assert_same_verdict(lines, checkpoint, len(lines))
            assert reference.ok is (moved == line)


@pytest.mark.parametrize(
    "nested",
    [
        pytest.param({"hash": "ab" * 32}, id="hash"),
        pytest.param({"prev": "ab" * 32}, id="prev"),
        pytest.param({"sig": "ab" * 64}, id="sig"),
        pytest.param({"x": {"hash": "ab" * 32, "prev": "cd" * 32, "sig": "ef" * 64}}, id="deep"),
    ],
)
def test_keys_named_hash_prev_or_sig_inside_the_input(nested: dict[str, Any]) -> None:
    """Sound as written (the reference takes them); a line holding a second
    key of that name is left to the reference, and so is a line whose
    top-level member was swapped with the nested one."""
    fields = {"kind": "action_requested", "action_id": "act-1", "input": nested, "tool": "t"}
    base = build_log([POLICY, fields, *GUARDD_LIKE[:4]])
    checkpoint = signed_at(base, len(base) - 1)
    assert assert_same_verdict(base, checkpoint, len(base)).ok
    # seq 2 is left to the reference when it holds a second '"prev":"'
    second_prev = "prev" in json.dumps(nested)
    assert taken(base, checkpoint, len(base)) == len(base) - 3 - second_prev
    # the nested prev given the record's own prev, the top-level one another
    record = canonical.loads(base[2])
    for name, value in (("prev", "ab" * 32), ("hash", "ab" * 32)):
        if name in json.dumps(nested):
            swapped = base[2].replace(f'"{name}":"{record[name]}"'.encode(), b"\x00")
            swapped = swapped.replace(
                f'"{name}":"{value}"'.encode(), f'"{name}":"{record[name]}"'.encode()
            )
            swapped = swapped.replace(b"\x00", f'"{name}":"{value}"'.encode())
            lines = [*base[:2], swapped, *base[3:]]
            assert not assert_same_verdict(lines, checkpoint, len(lines)).ok


def test_a_nested_prev_naming_a_forged_line_does_not_chain_it() -> None:
    """An agent may put '"prev":"<hash>"' in an action's input, the hash
    of a line it forged to follow the one before; the byte path must read
    the record's own prev, not that one, when the forged line is put in."""
    base = build_log([POLICY, *GUARDD_LIKE])
    forged = seal_all([{"kind": "outcome", "action_id": "act-9"}], ATTACKER, head_of(base[-1]))[0]
    honest = {"kind": "action_requested", "action_id": "act-3", "tool": "t"}
    honest["input"] = {"prev": head_of(forged).hash}
    lines = [*base, *seal_all([GUARDD_LIKE[2], honest, GUARDD_LIKE[2]], SIGNER, head_of(base[-1]))]
    checkpoint = signed_at(lines, len(lines) - 1)
    assert assert_same_verdict(lines, checkpoint, len(lines)).ok
    lines[len(base)] = forged  # in place of the line the input's prev does not name
    assert not assert_same_verdict(lines, checkpoint, len(lines)).ok
    assert not by_bytes(lines, checkpoint, len(lines))[0].ok


def test_each_vouched_line_replaced_by_one_resealed_without_the_key() -> None:
    base = build_log([POLICY, *GUARDD_LIKE * 2])
    checkpoint = signed_at(base, len(base) - 1)
    for index in range(2, len(base) - 1):
        lines = list(base)
        lines[index] = _resealed(base[index], ATTACKER, note="changed")
        reference = assert_same_verdict(lines, checkpoint, len(lines))
        assert reference.failure == Failure(index + 2, index + 1, PREV_MISMATCH)


def test_each_pair_of_vouched_lines_swapped() -> None:
    base = build_log([POLICY, *GUARDD_LIKE])
    checkpoint = signed_at(base, len(base) - 1)
    for first in range(2, len(base) - 1):
        for second in range(first + 1, len(base) - 1):
            lines = list(base)
            lines[first], lines[second] = lines[second], lines[first]
            assert not assert_same_verdict(lines, checkpoint, len(lines)).ok


@pytest.mark.parametrize("digit", [b"A", b"g", b" ", b'"', b"0"])
def test_a_digit_of_a_vouched_signature_changed(digit: bytes) -> None:
    """Only other lowercase hex passes, as in the reference."""
    base = build_log([POLICY, *GUARDD_LIKE])
    checkpoint = signed_at(base, len(base) - 1)
    for index in range(2, len(base) - 1):
        at = base[index].rfind(b'"sig":"') + 7 + index
        lines = list(base)
        lines[index] = base[index][:at] + digit + base[index][at + 1 :]
        reference = assert_same_verdict(lines, checkpoint, len(lines))
        assert reference.ok is (digit == b"0"), reference.failure


@pytest.mark.parametrize(
    "edit",
    [
        pytest.param(lambda line: line.replace(b'","', b'", "', 1), id="space"),
        pytest.param(lambda line: line.replace(b'"kind"', b'"kin\\u0064"'), id="escaped key"),
        pytest.param(lambda line: line.replace(b":0.01,", b":0.010,"), id="number"),
        pytest.param(lambda line: line.replace(b'"sig":"', b'"sig" :"'), id="space before sig"),
        pytest.param(lambda line: line[:-1] + b',"ts":"x"}', id="duplicate ts"),
        pytest.param(lambda line: line + b" ", id="trailing space"),
        pytest.param(lambda line: line.upper(), id="upper case"),
    ],
)
def test_non_canonical_lines(edit: Any) -> None:
    base = build_log([POLICY, *GUARDD_LIKE * 2])
    checkpoint = signed_at(base, len(base) - 1)
    for index in range(2, len(base)):
        lines = [*base[:index], edit(base[index]), *base[index + 1 :]]
        if lines != base:
            assert not assert_same_verdict(lines, checkpoint, len(lines)).ok


def test_vouched_lines_reads_a_line_too_short_for_its_shape_as_not_taken() -> None:
    base = build_log([POLICY, *GUARDD_LIKE])
    prev = head_of(base[1]).hash.encode()
    for cut in range(len(base[2])):
        assert _vouched.vouched_lines([base[2][:cut]], 0, 1, prev) == (0, prev)
