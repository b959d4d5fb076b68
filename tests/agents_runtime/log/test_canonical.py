"""agents_runtime.log.canonical: RFC 8785 bytes, held identical to the reference
``rfc8785`` package, and a strict reader."""

from __future__ import annotations

import math
from decimal import Decimal
from typing import Any

import pytest
import rfc8785
from hypothesis import given, settings
from hypothesis import strategies as st

from agents_runtime.errors import CanonicalError
from agents_runtime.log import canonical

MAX_SAFE = 2**53 - 1

# Characters that stress RFC 8785: escapes, the private use area (sorts after
# surrogates in UTF-16 but before astral characters by code point), astral
# characters, line separators.
SPECIAL_CHARS = [
    "\x00", "\x08", "\x1f", "\x7f", '"', "\\", "/", "\u2028", "\ue000", "\uf8ff",
    "\uffff", "\U00010000", "\U0001f600", "\U0010ffff", "é", "a", "z",
]  # fmt: skip
chars = st.one_of(st.characters(exclude_categories=["Cs"]), st.sampled_from(SPECIAL_CHARS))
texts = st.text(chars, max_size=8)


def _writable_float(number: float) -> bool:
    return not (number.is_integer() and MAX_SAFE < abs(number) < 1e21)


floats = st.floats(allow_nan=False, allow_infinity=False).filter(_writable_float)
numbers = st.one_of(
    st.integers(-MAX_SAFE, MAX_SAFE),
    floats.map(lambda f: Decimal(repr(f))),
)
json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), numbers, texts),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(texts, children, max_size=5),
    max_leaves=16,
)


def _as_floats(value: Any) -> Any:
    """The same value with Decimals as floats, for the reference package."""
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, dict):
        return {k: _as_floats(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_as_floats(v) for v in value]
    return value


@settings(max_examples=400, deadline=None)
@given(json_values)
def test_dumps_is_byte_identical_to_rfc8785(value: Any) -> None:
    assert canonical.dumps(value) == rfc8785.dumps(_as_floats(value))


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(texts, st.integers(0, 9), min_size=2, max_size=8))
def test_keys_sort_by_utf16_code_units_like_rfc8785(value: dict[str, int]) -> None:
    assert canonical.dumps(value) == rfc8785.dumps(value)


def test_key_order_example_of_rfc8785_section_3_2_3() -> None:
    value = {"\u20ac": 1, "\r": 2, "\ufb33": 3, "1": 4, "\U0001f600": 5, "\u0080": 6, "\u00f6": 7}
    order = [canonical.loads(canonical.dumps({k: 0})) for k in value]  # every key survives
    assert all(len(o) == 1 for o in order)
    assert canonical.dumps(value) == (
        '{"\\r":2,"1":4,"\u0080":6,"\u00f6":7,"\u20ac":1,"\U0001f600":5,"\ufb33":3}'.encode()
    )


@pytest.mark.parametrize(
    ("number", "text"),
    [
        pytest.param(Decimal("0.5"), b"0.5", id="fraction"),
        pytest.param(Decimal("5.000"), b"5", id="integral-decimal"),
        pytest.param(Decimal("-0"), b"0", id="negative-zero"),
        pytest.param(Decimal("1e-7"), b"1e-7", id="small-exponent"),
        pytest.param(Decimal("0.000001"), b"0.000001", id="smallest-fixed"),
        pytest.param(Decimal("1e21"), b"1e+21", id="large-exponent"),
        pytest.param({"é": Decimal("1e21")}, '{"é":1e+21}'.encode(), id="large-in-non-ascii"),
        pytest.param(Decimal("123456789.123456"), b"123456789.123456", id="money"),
        pytest.param(Decimal("0.1") + Decimal("0.2"), b"0.3", id="exact-sum"),
        pytest.param(Decimal("1e-400"), b"0", id="underflow"),
        pytest.param(9007199254740991, b"9007199254740991", id="max-safe-int"),
    ],
)
def test_numbers_take_the_rfc8785_form(number: Any, text: bytes) -> None:
    assert canonical.dumps(number) == text


@pytest.mark.parametrize(
    ("value", "message"),
    [
        pytest.param(2**53, r"^Integer exceeds 53-bit range$", id="int-2^53"),
        pytest.param(Decimal(2**53), r"^number out of range: 9007199254740992$", id="decimal-2^53"),
        pytest.param(Decimal("1e20"), r"^number out of range: 1E\+20$", id="decimal-1e20"),
        pytest.param(Decimal("1e400"), r"^number out of range: 1E\+400$", id="decimal-overflow"),
        pytest.param(Decimal("NaN"), r"^NaN and infinities cannot be written", id="nan"),
        pytest.param(Decimal("-Infinity"), r"^NaN and infinities cannot be written", id="inf"),
        pytest.param("\ud800", r"^str is not valid UTF-8: surrogates not allowed$", id="surrogate"),
    ],
)
def test_dumps_refuses_values_rfc8785_cannot_write(value: Any, message: str) -> None:
    with pytest.raises(CanonicalError, match=message):
        canonical.dumps(value)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param('{"a":1,"a":1}', r"^duplicate key 'a'$", id="duplicate-key"),
        pytest.param('{"a":{"b":1,"b":2}}', r"^duplicate key 'b'$", id="nested-duplicate-key"),
        pytest.param("NaN", r"^not valid JSON$", id="nan"),
        pytest.param("[Infinity]", r"^not valid JSON$", id="infinity"),
        pytest.param("-Infinity", r"^not valid JSON$", id="minus-infinity"),
        pytest.param("9007199254740992", r"^not valid JSON$", id="int-beyond-2^53-1"),
        pytest.param("-9007199254740992", r"^not valid JSON$", id="negative-int-beyond"),
        pytest.param("1e20", r"^not valid JSON$", id="exponent-form-integer-beyond"),
        pytest.param("9007199254740993.0", r"^not valid JSON$", id="fraction-form-integer-beyond"),
        pytest.param("1e400", r"^not valid JSON$", id="overflow"),
        pytest.param('"\\ud800"', r"^lone surrogate in string$", id="lone-high-surrogate"),
        pytest.param('{"\\udc00":1}', r"^lone surrogate in string$", id="lone-surrogate-key"),
        pytest.param(
            "[1,]", r"^not valid JSON: line 1 column 4: expected a value$", id="trailing-comma"
        ),
        pytest.param(
            '{"a":1} x',
            r"^not valid JSON: line 1 column 9: more after the end of the JSON value$",
            id="trailing-garbage",
        ),
        pytest.param(
            '{"a": [1, {"b": "]}"} 2]}',
            r"^not valid JSON: line 1 column 23: expected ',' or '\]'$",
            id="missing-comma-in-array",
        ),
        pytest.param(b'"\xff"', r"^not valid UTF-8$", id="not-utf8"),
        pytest.param("[" * 65 + "]" * 65, r"^nested deeper than 64 levels$", id="too-deep"),
    ],
)
def test_loads_refuses_what_rfc8785_cannot_hold(text: str | bytes, message: str) -> None:
    with pytest.raises(CanonicalError, match=message):
        canonical.loads(text)


def test_loads_accepts_nesting_of_exactly_max_depth() -> None:
    depth = canonical.MAX_DEPTH
    value = canonical.loads("[" * depth + "]" * depth)
    for _ in range(depth - 1):
        value = value[0]
    assert value == []


def test_loads_accepts_a_surrogate_pair_and_bracket_characters_in_strings() -> None:
    assert canonical.loads('"\\ud83d\\ude00"') == "\U0001f600"
    assert canonical.loads('"' + "[" * 100 + '"') == "[" * 100


def test_loads_reads_fractions_as_decimal_and_integers_as_int() -> None:
    value = canonical.loads('{"cost":0.1,"n":3,"big":1e21}')
    assert value == {"cost": Decimal("0.1"), "n": 3, "big": Decimal("1e21")}
    assert type(value["n"]) is int
    assert type(value["cost"]) is Decimal


@settings(max_examples=300, deadline=None)
@given(json_values)
def test_round_trip_of_canonical_bytes_is_byte_identical(value: Any) -> None:
    data = canonical.dumps(value)
    assert canonical.dumps(canonical.loads(data)) == data


@settings(max_examples=300, deadline=None)
@given(st.floats(allow_nan=False, allow_infinity=False))
def test_any_writable_number_reads_back_what_was_written(number: float) -> None:
    """Whatever dumps writes, loads accepts: no number is written that the
    verifier would later refuse (1e20 once was)."""
    try:
        data = canonical.dumps(Decimal(repr(number)))
    except CanonicalError:
        assert not _writable_float(number)
        return
    assert canonical.dumps(canonical.loads(data)) == data
    assert math.isclose(float(canonical.loads(data)), number) or number == 0 or abs(number) < 1e-300
