"""An agent's state as JSON, and back: what a state snapshot holds.

A snapshot (agents_runtime/log/snapshot.py, docs/log-format.md "State
snapshots") lets a start fold only the records after it. Its ``state`` member
is written here, generically: one private cattrs converter walks the attrs
classes of ``AgentState`` and whatever they hold (actions, scars, grants,
...), so a field added to one of them is written and read with no change
here. What cannot be generic has a hook of its own, by type:

- ``Decimal`` as a JSON number (exact, as in the log); ``int`` as itself;
- ``float`` (seconds since the epoch) as the JSON number of its shortest
  repr, which reads back to the same double;
- ``bytes`` and ``bytearray`` as standard base64; an ``array`` as
  ``{"typecode", "items"}``, the items little-endian, in base64;
- the policy as its record's encoding (``policy_json``), read back by the
  strict parser every policy goes through;
- a field whose metadata names another (``SAME_AS``: ``pending`` holds
  actions of ``held``) is written as its keys, and read back as that
  field's entries, the same objects, as the folds made them;
- a dict whose order a fold reads (``IN_ORDER``: the Idempotency-Keys
  oldest first, the grants in issue order, the tags and tools in first
  use) is written as a list of ``[key, value]`` pairs in that order, since
  canonical JSON sorts an object's members;
- a field declared with ``eq=False`` is a cache, not a part of the state's
  value (``expiry_dirty``): it is not written, and takes its default.

``SCHEMA`` is a digest of the layout the converter writes (every class, its
fields and their types): a snapshot written by code whose state had another
layout is not read (the agent is folded from genesis, and a new snapshot
written), so a field added in a later version never takes its default where
its history would have given it another value.
"""

from __future__ import annotations

import base64
import hashlib
import sys
import types
import typing
from array import array
from datetime import datetime
from decimal import Decimal
from typing import Any

import attrs
import cattrs
from cattrs.gen import make_dict_structure_fn, make_dict_unstructure_fn, override

from agents_runtime.core.grants import Grant
from agents_runtime.core.idempotency import KeyFilter, KeyRun
from agents_runtime.core.policy import Policy, parse_policy, policy_json
from agents_runtime.core.state import (
    IN_ORDER,
    NO_GRANTS,
    NO_TAGS,
    SAME_AS,
    AgentState,
    Evicted,
    Shadow,
)


class ArrayOf:
    """``array[int]`` as the state module annotates it, resolvable on Python
    3.11, whose ``array`` takes no subscript."""

    def __class_getitem__(cls, item: Any) -> Any:
        return types.GenericAlias(cls, (item,))


_converter = cattrs.Converter(forbid_extra_keys=True)
attrs.resolve_types(Grant)
attrs.resolve_types(KeyRun, localns={"array": ArrayOf})
attrs.resolve_types(KeyFilter)
attrs.resolve_types(Shadow, localns={"Policy": Policy})
attrs.resolve_types(Evicted, localns={"array": ArrayOf})
attrs.resolve_types(
    AgentState,
    localns={"Grant": Grant, "Policy": Policy, "Evicted": Evicted, "array": ArrayOf},
)


def _b64(data: bytes | bytearray) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(value: Any) -> bytes:
    if not isinstance(value, str):
        raise TypeError(f"expected base64 text, not {type(value).__name__}")
    return base64.b64decode(value, validate=True)


def _array_json(value: array[Any]) -> dict[str, str]:
    if sys.byteorder != "little":  # pragma: no cover - every platform we run on
        value = array(value.typecode, value)
        value.byteswap()
    return {"typecode": value.typecode, "items": _b64(value.tobytes())}


def _array(value: Any, _: Any) -> array[Any]:
    if not isinstance(value, dict) or set(value) != {"typecode", "items"}:
        raise TypeError("an array is {typecode, items}")
    out = array(value["typecode"])
    out.frombytes(_unb64(value["items"]))
    if sys.byteorder != "little":  # pragma: no cover
        out.byteswap()
    return out


def _float_json(value: float) -> Decimal:
    return Decimal(repr(value))


def _float(value: Any, _: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | Decimal):
        raise TypeError(f"expected a number, not {type(value).__name__}")
    return float(value)


def _decimal(value: Any, _: Any) -> Decimal:
    if isinstance(value, bool) or not isinstance(value, int | Decimal):
        raise TypeError(f"expected a number, not {type(value).__name__}")
    return Decimal(value)


def _grants(value: Any, _: Any) -> dict[str, Grant]:
    if not value:
        return NO_GRANTS  # shared by every agent that never had a grant
    if not isinstance(value, dict):
        raise TypeError(f"expected an object, not {type(value).__name__}")
    return {str(key): _converter.structure(item, Grant) for key, item in value.items()}


def _instant(value: Any, _: Any) -> datetime:
    if not isinstance(value, str):
        raise TypeError(f"expected an ISO 8601 time, not {type(value).__name__}")
    return datetime.fromisoformat(value)


def _tags(value: Any, _: Any) -> dict[str, datetime]:
    if not value:
        return NO_TAGS  # shared by every agent that never used a tag
    if not isinstance(value, dict):
        raise TypeError(f"expected an object, not {type(value).__name__}")
    return {str(tag): _instant(at, None) for tag, at in value.items()}


def _is_array(kind: Any) -> bool:
    return typing.get_origin(kind) is ArrayOf or kind is ArrayOf


def _value_fields(cls: type) -> list[attrs.Attribute[Any]]:
    return [f for f in attrs.fields(cls) if f.eq]


def _pairs_json(kind: Any) -> Any:
    """A dict of ``kind`` as its ``[key, value]`` pairs, in order."""
    value_kind = typing.get_args(kind)[1]
    unstructure = _converter.get_unstructure_hook(value_kind)
    return lambda value: [[key, unstructure(item)] for key, item in value.items()]


def _pairs(kind: Any) -> Any:
    """The dict of ``kind`` that ``_pairs_json`` wrote, in its order."""
    structure = _converter.get_structure_hook(kind)

    def read(value: Any, _: Any) -> Any:
        if not isinstance(value, list) or not all(
            isinstance(pair, list) and len(pair) == 2 and isinstance(pair[0], str) for pair in value
        ):
            raise TypeError("expected a list of [key, value] pairs")
        entries = dict(value)
        if len(entries) != len(value):
            raise ValueError("a key is listed twice")
        return structure(entries, kind)

    return read


def _unstructure_factory(cls: type) -> Any:
    overrides: dict[str, Any] = {f.name: override(omit=True) for f in attrs.fields(cls) if not f.eq}
    for f in attrs.fields(cls):
        if SAME_AS in f.metadata:
            overrides[f.name] = override(unstruct_hook=list)  # the keys, in order
        elif f.metadata.get(IN_ORDER):
            overrides[f.name] = override(unstruct_hook=_pairs_json(f.type))
    return make_dict_unstructure_fn(cls, _converter, **overrides)


def _keys(value: Any, _: Any) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(key, str) for key in value):
        raise TypeError("expected a list of keys")
    return value


def _structure_factory(cls: type) -> Any:
    overrides: dict[str, Any] = {f.name: override(omit=True) for f in attrs.fields(cls) if not f.eq}
    for f in attrs.fields(cls):
        if SAME_AS in f.metadata:
            overrides[f.name] = override(struct_hook=_keys)  # linked by _link
        elif f.metadata.get(IN_ORDER):
            overrides[f.name] = override(struct_hook=_pairs(f.type))
    return make_dict_structure_fn(cls, _converter, _cattrs_forbid_extra_keys=True, **overrides)


def _link(state: AgentState) -> None:
    """Make each SAME_AS field of ``state`` (read as its keys) hold the
    entries of the field it names, the same objects."""
    for f in attrs.fields(AgentState):
        source = f.metadata.get(SAME_AS)
        if source is not None:
            entries = getattr(state, source)
            try:
                setattr(state, f.name, {key: entries[key] for key in getattr(state, f.name)})
            except KeyError as exc:
                raise ValueError(f"$.{f.name}: {exc} is not in $.{source}") from None


_converter.register_unstructure_hook(Policy, policy_json)
_converter.register_structure_hook(Policy, lambda value, _: parse_policy(value, recorded=True))
_converter.register_unstructure_hook(Decimal, lambda value: value)
_converter.register_structure_hook(Decimal, _decimal)
_converter.register_unstructure_hook(float, _float_json)
_converter.register_structure_hook(float, _float)
_converter.register_unstructure_hook(bytes, _b64)
_converter.register_structure_hook(bytes, lambda value, _: _unb64(value))
_converter.register_unstructure_hook(bytearray, _b64)
_converter.register_structure_hook(bytearray, lambda value, _: bytearray(_unb64(value)))
_converter.register_unstructure_hook(array, _array_json)
_converter.register_unstructure_hook_func(_is_array, _array_json)
_converter.register_structure_hook_func(_is_array, _array)
_converter.register_structure_hook_func(lambda kind: kind == dict[str, Grant], _grants)
# A record's ts as written (microseconds, UTC offset): isoformat gives it back exactly.
_converter.register_unstructure_hook(datetime, datetime.isoformat)
_converter.register_structure_hook(datetime, _instant)
_converter.register_structure_hook_func(lambda kind: kind == dict[str, datetime], _tags)
_converter.register_unstructure_hook_factory(attrs.has, _unstructure_factory)
_converter.register_structure_hook_factory(attrs.has, _structure_factory)


def _layout(cls: type, seen: dict[str, str]) -> None:
    """The fields of ``cls`` and of every attrs class its fields hold."""
    name = f"{cls.__module__}.{cls.__qualname__}"
    if name in seen or cls is Policy:  # the policy is written as its record is
        return
    fields = _value_fields(cls)
    seen[name] = ",".join(f"{f.name}:{f.type!r}:{sorted(f.metadata.items())}" for f in fields)
    stack = [f.type for f in fields]
    while stack:
        kind = stack.pop()
        if isinstance(kind, type) and attrs.has(kind):
            _layout(kind, seen)
        stack.extend(typing.get_args(kind))


def _schema() -> str:
    seen: dict[str, str] = {}
    _layout(AgentState, seen)
    text = "\n".join(f"{name}({fields})" for name, fields in sorted(seen.items()))
    return hashlib.sha256(text.encode()).hexdigest()


# The layout of the state a snapshot holds; see the module docstring.
SCHEMA = _schema()


def state_json(state: AgentState) -> dict[str, Any]:
    """``state`` as JSON values (Decimals for numbers with a fraction),
    ready for canonical.dumps."""
    return _converter.unstructure(state)  # type: ignore[no-any-return]


def prepare_reading() -> None:
    """Build now the code that reads a state, which the converter otherwise
    builds at its first use (a few ms): a process that forks workers to read
    snapshots then builds it once, before the fork, not once in each."""
    _converter.get_structure_hook(AgentState)


def state_from_json(value: Any) -> AgentState:
    """The state ``state_json`` wrote. ValueError (naming the path, e.g.
    ``$.held.act-3.cost``) when ``value`` is not one."""
    try:
        state = _converter.structure(value, AgentState)
    except Exception as exc:  # cattrs groups errors; any of them means "not a state"
        messages = cattrs.transform_error(exc, path="$") if isinstance(exc, Exception) else []
        raise ValueError("; ".join(messages) or str(exc)) from None
    _link(state)
    state.expiry_dirty = True  # nothing was computed from it yet
    return state


__all__ = ["SCHEMA", "prepare_reading", "state_from_json", "state_json"]
