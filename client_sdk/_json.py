"""JSON at the wire: exact decimals both ways.

Money never passes through a binary float: responses are parsed with
``parse_float=Decimal``, and integral money values (the service writes ``5``,
not ``5.0``) are turned into ``Decimal`` too, so ``spent``, ``remaining``,
``budget`` and ``cost`` are always ``Decimal``. A tool's ``input`` is user data
and is left exactly as parsed. ``Decimal`` is sent as a JSON number.
"""

from __future__ import annotations

import json
import math
from decimal import Decimal
from typing import Any

import orjson

MONEY_KEYS = frozenset({"budget", "spent", "remaining", "cost"})
# Integers the service (RFC 8785) can write; larger ones are refused with 400.
MAX_SAFE_INT = 2**53 - 1


def _default(value: object) -> orjson.Fragment:
    if isinstance(value, Decimal):
        if not value.is_finite():
            raise TypeError(f"{value} is not a finite number")
        return orjson.Fragment(str(value).encode())
    raise TypeError(f"cannot write {type(value).__name__} as JSON")


def dumps(value: Any) -> bytes:
    """JSON bytes of ``value``; ``Decimal`` becomes a number, never a string."""
    try:
        return orjson.dumps(value, default=_default)
    except orjson.JSONEncodeError as exc:
        raise TypeError(str(exc)) from exc


def loads(data: bytes) -> Any:
    """Parse a response body; numbers with a fraction and money become Decimal."""
    return _money(json.loads(data, parse_float=Decimal))


def _money(value: Any) -> Any:
    if isinstance(value, dict):
        return {
            key: (
                item
                if key == "input"
                else Decimal(item)
                if key in MONEY_KEYS and type(item) is int
                else _money(item)
            )
            for key, item in value.items()
        }
    if isinstance(value, list):
        return [_money(item) for item in value]
    return value


def json_safety_problem(value: Any, path: str) -> str | None:
    """Why ``value`` cannot be sent as JSON, naming the place inside it; None if it can.

    Accepted: None, bool, str, int within 2^53-1, finite float and Decimal,
    lists and tuples of those, dicts with str keys.
    """
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, str):
        if not value.isascii():
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                return f"{path} holds a lone surrogate"
        return None
    if isinstance(value, int):
        if abs(value) > MAX_SAFE_INT:
            return f"{path} is an integer beyond 2^53-1 ({value})"
        return None
    if isinstance(value, float):
        return None if math.isfinite(value) else f"{path} is {value}, not a finite number"
    if isinstance(value, Decimal):
        return None if value.is_finite() else f"{path} is {value}, not a finite number"
    if isinstance(value, list | tuple):
        for index, item in enumerate(value):
            problem = json_safety_problem(item, f"{path}[{index}]")
            if problem:
                return problem
        return None
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                return f"{path} has a key that is not a string ({key!r})"
            problem = json_safety_problem(item, f"{path}[{key!r}]")
            if problem:
                return problem
        return None
    return f"{path} is of type {type(value).__name__}, which JSON cannot carry"
