"""Reading one key of an answer, or InvalidResponse saying what is wrong.

What the generated parsers (``_parsers.py``) are made of: each function reads
``obj[key]`` as one JSON type. An absent key reads as null, so the
``opt_...`` functions take both as None. Numbers come as ``Decimal`` (the
service writes money exactly; ``_json.loads`` never makes a float).
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from decimal import Decimal
from typing import Any, TypeVar

from client_sdk.errors import InvalidResponse

T = TypeVar("T")


def object_of(body: Any) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise InvalidResponse(f"expected a JSON object, got {type(body).__name__}")
    return body


def string(obj: dict[str, Any], key: str) -> str:
    value = obj.get(key)
    if not isinstance(value, str):
        raise InvalidResponse(f"expected a string {key!r} in {sorted(obj)}")
    return value


def word(obj: dict[str, Any], key: str, words: Collection[str]) -> str:
    """A string that must be one of ``words``: the client acts on it."""
    value = string(obj, key)
    if value not in words:
        raise InvalidResponse(f"unknown {key} {value!r}")
    return value


def opt(obj: dict[str, Any], key: str, kind: type[T]) -> T | None:
    value = obj.get(key)
    if value is not None and not isinstance(value, kind):
        raise InvalidResponse(f"{key!r} should be {kind.__name__}, got {value!r}")
    return value


def integer(obj: dict[str, Any], key: str) -> int:
    value = obj.get(key)
    if type(value) is not int:
        raise InvalidResponse(f"expected an integer {key!r}, got {value!r}")
    return value


def opt_integer(obj: dict[str, Any], key: str) -> int | None:
    return None if obj.get(key) is None else integer(obj, key)


def boolean(obj: dict[str, Any], key: str) -> bool:
    value = obj.get(key)
    if not isinstance(value, bool):
        raise InvalidResponse(f"expected true or false as {key!r}, got {value!r}")
    return value


def number(obj: dict[str, Any], key: str) -> Decimal:
    value = obj.get(key)
    if type(value) is int:
        return Decimal(value)
    if not isinstance(value, Decimal):
        raise InvalidResponse(f"expected a number {key!r}, got {value!r}")
    return value


def opt_number(obj: dict[str, Any], key: str) -> Decimal | None:
    return None if obj.get(key) is None else number(obj, key)


def json_object(obj: dict[str, Any], key: str) -> dict[str, Any]:
    return object_of(obj.get(key))


def objects(obj: dict[str, Any], key: str) -> list[dict[str, Any]]:
    items = obj.get(key)
    if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
        raise InvalidResponse(f"expected a list of objects under {key!r}")
    return items


def opt_objects(obj: dict[str, Any], key: str) -> tuple[dict[str, Any], ...] | None:
    return None if obj.get(key) is None else tuple(objects(obj, key))


def strings(obj: dict[str, Any], key: str) -> tuple[str, ...]:
    items = obj.get(key)
    if not isinstance(items, list) or not all(isinstance(i, str) for i in items):
        raise InvalidResponse(f"{key!r} should be a list of strings, got {items!r}")
    return tuple(items)


def opt_strings(obj: dict[str, Any], key: str) -> tuple[str, ...] | None:
    return None if obj.get(key) is None else strings(obj, key)


def model(obj: dict[str, Any], key: str, parse: Callable[[Any], T]) -> T:
    return parse(obj.get(key))


def opt_model(obj: dict[str, Any], key: str, parse: Callable[[Any], T]) -> T | None:
    value = obj.get(key)
    return None if value is None else parse(value)


def models(obj: dict[str, Any], key: str, parse: Callable[[Any], T]) -> tuple[T, ...]:
    return tuple(parse(item) for item in objects(obj, key))


def opt_models(obj: dict[str, Any], key: str, parse: Callable[[Any], T]) -> tuple[T, ...] | None:
    return None if obj.get(key) is None else models(obj, key, parse)


def mapping(obj: dict[str, Any], key: str, parse: Callable[[Any], T]) -> dict[str, T]:
    return {name: parse(item) for name, item in object_of(obj.get(key)).items()}
