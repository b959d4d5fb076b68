"""RFC 8785 (JCS) canonical JSON, with exact decimals.

Numbers are read as ``int`` or ``decimal.Decimal`` (never ``float``) so money
survives a round trip exactly, and written in the RFC 8785 number form.

Speed matters here: every record is canonicalised once when written and once
when verified. orjson writes the same bytes as RFC 8785 for everything we feed
it (no floats; integers within 2^53; Decimals become raw fragments) except the
order of object keys outside ASCII: orjson sorts by code point, RFC 8785 by
UTF-16 code unit. So any output that is not pure ASCII is redone by the
reference ``rfc8785`` package. ``tests/agents_runtime/log/test_canonical.py`` holds
the two byte-identical.
"""

from __future__ import annotations

import json
import re
from decimal import Decimal, InvalidOperation
from typing import Any

import orjson
import rfc8785

from agents_runtime.errors import CanonicalError

MAX_SAFE_INT = 2**53 - 1
# Nesting deeper than this is refused when reading, so a hostile body cannot
# exhaust the stack; records written by the service stay far below it.
MAX_DEPTH = 64

DUMPS_OPTIONS = orjson.OPT_SORT_KEYS | orjson.OPT_STRICT_INTEGER


def _outside_domain(number: float) -> bool:
    """True for a double RFC 8785 cannot write in a form ``loads`` accepts:
    infinities, and whole numbers beyond 2^53-1 below 10^21 (RFC 8785 writes
    those as integer literals, e.g. 1e20 as ``100000000000000000000``)."""
    magnitude = abs(number)
    return magnitude == float("inf") or (MAX_SAFE_INT < magnitude < 1e21 and number.is_integer())


def _number_text(value: Decimal) -> bytes:
    if not value.is_finite():
        raise CanonicalError("NaN and infinities cannot be written in RFC 8785")
    number = float(value)
    magnitude = abs(number)
    if number.is_integer():
        if magnitude <= MAX_SAFE_INT:
            return b"%d" % number
    elif 1e-4 <= magnitude < 1e16:
        # rfc8785 formats str(number), which has no exponent in this range:
        # the same bytes, without its pure-Python formatter on the hot path.
        return repr(number).encode()
    if _outside_domain(number):
        raise CanonicalError(f"number out of range: {value}")
    return rfc8785.dumps(number)


def number_fragment(value: object) -> orjson.Fragment:
    if isinstance(value, Decimal):
        return orjson.Fragment(_number_text(value))
    raise TypeError(f"cannot write {type(value).__name__} as JSON")


def _for_reference(value: Any) -> Any:
    if isinstance(value, Decimal):
        _number_text(value)  # range checks
        if value == value.to_integral_value() and abs(value) <= MAX_SAFE_INT:
            return int(value)
        return float(value)  # 1e21 and beyond: rfc8785 refuses such ints
    if isinstance(value, dict):
        return {k: _for_reference(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_for_reference(v) for v in value]
    return value


def dumps(value: Any) -> bytes:
    """Return the RFC 8785 canonical bytes of ``value``.

    Numbers must be ``int`` or ``Decimal``: a ``float`` would be written in
    orjson's form, which is not RFC 8785's for large exponents, and checking
    every value for floats would cost as much as writing it. Nothing in the
    service holds a float: every JSON value it reads is parsed by ``loads``.
    Raises CanonicalError for values RFC 8785 cannot write: integers beyond
    2^53-1, NaN, infinities, lone surrogates.
    """
    try:
        out = orjson.dumps(value, default=number_fragment, option=DUMPS_OPTIONS)
    except orjson.JSONEncodeError as exc:
        cause = exc.__cause__ if isinstance(exc.__cause__, CanonicalError) else None
        raise CanonicalError(str(cause or exc)) from exc
    if out.isascii():
        return out
    try:
        return rfc8785.dumps(_for_reference(value))
    except rfc8785.CanonicalizationError as exc:
        raise CanonicalError(str(exc)) from exc


class _DuplicateKey(ValueError):
    pass


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _DuplicateKey(f"duplicate key {key!r}")
            seen.add(key)
    return obj


def _int(text: str) -> int:
    value = int(text)
    if abs(value) > MAX_SAFE_INT:
        raise ValueError(f"integer out of range: {text}")
    return value


def _decimal(text: str) -> Decimal:
    try:
        value = Decimal(text)
    except InvalidOperation as exc:  # pragma: no cover - the JSON grammar prevents it
        raise ValueError(f"bad number {text}") from exc
    if _outside_domain(float(value)):
        raise ValueError(f"number out of range: {text}")
    return value


def _constant(text: str) -> Any:
    raise ValueError(f"{text} is not valid JSON")


_decoder = json.JSONDecoder(
    object_pairs_hook=_pairs, parse_int=_int, parse_float=_decimal, parse_constant=_constant
)


# One C pass with none of _decoder's hooks, for text already known to be
# canonical: written by dumps, or found byte-identical to dumps of what it
# parses to. Such text has no duplicate key (dumps keeps one), no integer
# beyond 2^53-1, no lone surrogate and no NaN (dumps refuses them), so this
# reads it to the very value loads would, without a Python call for every
# object and number (docs/benchmarks.md, "Why the fast paths exist").
TRUSTED_DECODER = json.JSONDecoder(parse_float=Decimal, parse_constant=_constant)


def loads_trusted(text: str) -> Any:
    """``loads`` for text known to be canonical (see TRUSTED_DECODER)."""
    return TRUSTED_DECODER.decode(text)


def _depth_ok(text: str) -> bool:
    # Cheap upper bound first: most documents have few brackets at all.
    if text.count("[") + text.count("{") <= MAX_DEPTH:
        return True
    depth = 0
    in_string = escaped = False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            if depth > MAX_DEPTH:
                return False
        elif ch in "]}":
            depth -= 1
    return True


# json's messages, said the way the rest of our errors are.
_SYNTAX_MESSAGES = {
    "Expecting value": "expected a value",
    "Expecting ':' delimiter": "expected ':'",
    "Expecting property name enclosed in double quotes": "expected a key in double quotes",
    "Extra data": "more after the end of the JSON value",
    "Unterminated string starting at": "string never ends",
    "Invalid control character at": "control character in a string (escape it)",
    "Invalid \\escape": "invalid escape in a string",
    "Invalid \\uXXXX escape": "invalid \\u escape in a string",
}
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"?')
_BRACKET = re.compile(r"[\[\]{}]")


def syntax_error(exc: json.JSONDecodeError) -> str:
    """Where a JSON syntax error is and what was expected there, e.g.
    ``line 3 column 5: expected ',' or '}'``."""
    message = _SYNTAX_MESSAGES.get(exc.msg)
    if message is None and exc.msg == "Expecting ',' delimiter":
        # json does not say which bracket is open; find it (strings cut out first).
        open_brackets: list[str] = []
        for bracket in _BRACKET.findall(_STRING.sub("", exc.doc[: exc.pos])):
            if bracket in "[{":
                open_brackets.append("]" if bracket == "[" else "}")
            elif open_brackets:
                open_brackets.pop()
        message = f"expected ',' or '{open_brackets[-1]}'" if open_brackets else "expected ','"
    elif message is None:
        message = exc.msg[:1].lower() + exc.msg[1:]
    return f"line {exc.lineno} column {exc.colno}: {message}"


def loads(data: bytes | str) -> Any:
    """Parse strict JSON: no duplicate keys, no NaN or infinities, integers
    within 2^53-1, no lone surrogates, nesting at most MAX_DEPTH. Numbers with
    a fraction or exponent become Decimal."""
    try:
        text = data.decode("utf-8") if isinstance(data, bytes | bytearray) else data
    except UnicodeDecodeError as exc:
        raise CanonicalError("not valid UTF-8") from exc
    if not _depth_ok(text):
        raise CanonicalError(f"nested deeper than {MAX_DEPTH} levels")
    try:
        value = _decoder.decode(text)
    except _DuplicateKey as exc:
        raise CanonicalError(str(exc)) from exc
    except json.JSONDecodeError as exc:
        raise CanonicalError(f"not valid JSON: {syntax_error(exc)}") from exc
    except (ValueError, RecursionError) as exc:
        raise CanonicalError("not valid JSON") from exc
    # Lone surrogates can only arrive as \uD8xx escapes: valid UTF-8 has none.
    if "\\ud" in text or "\\uD" in text:
        _check_strings(value)
    return value


def _check_strings(value: Any) -> None:
    # json accepts "\ud800"; RFC 8785 cannot write it, so refuse it on the way in.
    if isinstance(value, str):
        if not value.isascii():
            try:
                value.encode("utf-8")
            except UnicodeEncodeError as exc:
                raise CanonicalError("lone surrogate in string") from exc
    elif isinstance(value, dict):
        for key, item in value.items():
            _check_strings(key)
            _check_strings(item)
    elif isinstance(value, list):
        for item in value:
            _check_strings(item)
