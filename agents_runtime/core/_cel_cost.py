"""The cost check of a compiled ``when``: refuse, when a policy is set or
loaded, the constructs whose cost grows faster than the input they read.

The CEL library bounds how many elements the macros of one evaluation may
visit in all (10,000, then it fails closed with ``policy_error``), but not
what each visit costs, nor how a macro builds its result. Measured on it:

- ``map`` and ``filter`` copy their growing result at each element: over a
  list of 9,000 elements, 4 to 7 s, the square of the list's length;
- a macro's body that reads ``input`` (or ``history``, or an enclosing
  macro's element) again for each element costs the size of that value
  each time (``input.w.exists(x, input.s.contains(x))``: 18 s);
- ``+`` on strings, lists or bytes in a body builds a new value each time
  (``input.w.map(x, input.s + x)``: 11 s, gigabytes of memory);
- ``contains`` or ``matches`` given a value that is not a literal searches
  one input for another: the product of their sizes;
- a chain of ``+`` on lists copies every step, and the library keeps each
  until the evaluation ends (30 of them on a 250,000-element list: 15 s,
  3.5 GB), so the rules of one list have at most MAX_JOINS in all (the
  check counts them; policy.py sums them);
- macros over literal lists multiply what their bodies read by the lists'
  lengths, so nested in a body such a list holds constants only, and its
  body reads no more than the body around it.

What is left costs at most the expression's size times the input's size,
both bounded (``docs/api.md``, "Bounded cost" under the policy rules).

The library's Python binding offers no cost estimate of its own, but a
compiled expression serializes to its checked syntax tree
(``cel.expr.CheckedExpr`` in an ``Any``): read here with a few lines of
protobuf wire format rather than a dependency on the generated classes.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import attrs

# Field numbers of cel.expr (syntax.proto and checked.proto).
_ANY_VALUE = 2
_CHECKED_REFERENCES, _CHECKED_EXPR, _CHECKED_SOURCE = 2, 4, 5
_SOURCE_POSITIONS = 4
_REFERENCE_NAME, _REFERENCE_OVERLOAD = 1, 3
_EXPR_ID, _CONST, _IDENT, _SELECT, _CALL, _LIST, _STRUCT, _COMPREHENSION = 2, 3, 4, 5, 6, 7, 8, 9
_CONST_STRING = 6
_CALL_TARGET, _CALL_FUNCTION, _CALL_ARGS = 1, 2, 3
_SELECT_OPERAND = 1
_LIST_ELEMENTS = 1
_STRUCT_ENTRIES, _ENTRY_MAP_KEY, _ENTRY_VALUE = 2, 3, 4
_ITER_VAR, _ITER_RANGE, _ACCU_VAR, _ACCU_INIT, _LOOP_CONDITION, _LOOP_STEP, _RESULT = (
    1, 2, 3, 4, 5, 6, 7
)  # fmt: skip
_ITER_VAR2 = 8

_VARINT, _FIXED64, _BYTES, _FIXED32 = 0, 1, 2, 5

# The variables a body may read besides its own element: small, of a size
# the policy does not let the agent choose.
_SCALARS = frozenset(
    {
        "tool",
        "now",
        "agent.budget",
        "agent.spent",
        "agent.remaining",
        "agent.scar_score",
        "agent.actions_allowed",
    }
)
_ROOTS = frozenset({"tool", "input", "now", "agent", "history"})
MAX_JOINS = 4
_JOINS = frozenset({"add_string", "add_list", "add_bytes"})
_SEARCHES = frozenset({"contains", "matches"})


class CostError(ValueError):
    """A construct whose cost grows faster than the input; ``offset`` is
    where it starts in the expression (in characters)."""

    def __init__(self, offset: int, message: str) -> None:
        super().__init__(message)
        self.offset = offset


def _fields(data: bytes) -> Iterator[tuple[int, Any]]:
    """(field number, value) of each field of a protobuf message: an int for
    a varint or a fixed field, bytes for a length-delimited one."""
    at, end = 0, len(data)
    value: Any
    while at < end:
        key, at = _varint(data, at)
        number, wire = key >> 3, key & 7
        if wire == _VARINT:
            value, at = _varint(data, at)
        elif wire == _BYTES:
            size, at = _varint(data, at)
            value, at = data[at : at + size], at + size
        elif wire == _FIXED64:
            value, at = int.from_bytes(data[at : at + 8], "little"), at + 8
        elif wire == _FIXED32:
            value, at = int.from_bytes(data[at : at + 4], "little"), at + 4
        else:  # groups: not in cel.expr
            raise ValueError(f"unexpected protobuf wire type {wire}")
        yield number, value


def _varint(data: bytes, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, at
        shift += 7


def _first(data: bytes, number: int, default: Any = None) -> Any:
    for field, value in _fields(data):
        if field == number:
            return value
    return default


def _all(data: bytes, number: int) -> list[Any]:
    return [value for field, value in _fields(data) if field == number]


@attrs.frozen(eq=False)
class _Node:
    """One expression of the tree, as much of it as the check needs."""

    id: int
    kind: int  # _CONST, _IDENT, ... (the field of Expr that is set)
    name: str = ""  # an ident's name, a call's function
    literal_string: bool = False
    target: _Node | None = None
    # A call's args, a select's operand, a list's elements, a map's keys and
    # values; a comprehension's range and its accumulator's start.
    args: tuple[_Node, ...] = ()
    # A comprehension's variables (its elements' and its accumulator), its
    # body (loop condition and loop step) and its result.
    names: frozenset[str] = frozenset()
    body: tuple[_Node, ...] = ()
    result: _Node | None = None

    @property
    def iter_range(self) -> _Node:
        return self.args[0]

    @property
    def accu_init(self) -> _Node:
        return self.args[1]

    def start(self, positions: dict[int, int]) -> int:
        """Where it starts in the text: the least position of its nodes (a
        call's own position is its operator's or its dot's)."""
        offsets = [positions[node.id] for node in self.walk() if node.id in positions]
        return min(offsets, default=0)

    def walk(self) -> Iterator[_Node]:
        yield self
        for child in (self.target, *self.args, *self.body, self.result):
            if child is not None:
                yield from child.walk()


def _node(data: bytes) -> _Node:
    fields = dict(_fields(data))
    expr_id = fields.get(_EXPR_ID, 0)
    if (value := fields.get(_IDENT)) is not None:
        return _Node(expr_id, _IDENT, name=_first(value, 1, b"").decode())
    if (value := fields.get(_SELECT)) is not None:
        return _Node(expr_id, _SELECT, args=(_node(_first(value, _SELECT_OPERAND, b"")),))
    if (value := fields.get(_CALL)) is not None:
        target = _first(value, _CALL_TARGET)
        return _Node(
            expr_id,
            _CALL,
            name=_first(value, _CALL_FUNCTION, b"").decode(),
            target=None if target is None else _node(target),
            args=tuple(_node(arg) for arg in _all(value, _CALL_ARGS)),
        )
    if (value := fields.get(_LIST)) is not None:
        return _Node(expr_id, _LIST, args=tuple(_node(e) for e in _all(value, _LIST_ELEMENTS)))
    if (value := fields.get(_STRUCT)) is not None:
        entries = tuple(
            _node(part)
            for entry in _all(value, _STRUCT_ENTRIES)
            for number in (_ENTRY_MAP_KEY, _ENTRY_VALUE)
            if (part := _first(entry, number)) is not None
        )
        return _Node(expr_id, _STRUCT, args=entries)
    if (value := fields.get(_COMPREHENSION)) is not None:
        parts = dict(_fields(value))
        return _Node(
            expr_id,
            _COMPREHENSION,
            names=frozenset(
                name.decode()
                for number in (_ITER_VAR, _ITER_VAR2, _ACCU_VAR)
                if (name := parts.get(number))
            ),
            args=(_node(parts.get(_ITER_RANGE, b"")), _node(parts.get(_ACCU_INIT, b""))),
            body=(_node(parts.get(_LOOP_CONDITION, b"")), _node(parts.get(_LOOP_STEP, b""))),
            result=_node(parts.get(_RESULT, b"")),
        )
    constant = fields.get(_CONST)
    string = constant is not None and _first(constant, _CONST_STRING) is not None
    return _Node(expr_id, _CONST, literal_string=string)


@attrs.frozen
class _Body:
    macro: str
    # What it may read: its element's variables and its result's; None for
    # anything (the body of a macro over a literal, outside any other).
    names: frozenset[str] | None
    literal: bool = False  # the body of a macro over a literal list or map


@attrs.define
class _Check:
    references: dict[int, bytes]  # expr id -> its cel.expr.Reference, undecoded
    positions: dict[int, int]  # expr id -> offset
    text: str
    problems: list[CostError] = attrs.field(factory=list)
    joins: int = 0  # + that may join strings, lists or bytes, outside bodies

    def walk(self, node: _Node, body: _Body | None) -> None:
        """Check ``node`` and what it holds; ``body`` is the macro whose
        body (evaluated once per element) ``node`` is in, None outside any."""
        if node.kind == _IDENT:
            self.ident(node, body)
        elif node.kind == _CALL:
            self.call(node, body)
        elif node.kind == _COMPREHENSION:
            self.comprehension(node, body)
            return
        for child in (node.target, *node.args):
            if child is not None:
                self.walk(child, body)

    def reference(self, expr_id: int) -> tuple[str, frozenset[str]] | None:
        """The name and the overload ids the checker resolved ``expr_id`` to."""
        data = self.references.get(expr_id)
        if data is None:
            return None
        name = _first(data, _REFERENCE_NAME, b"").decode()
        return name, frozenset(v.decode() for v in _all(data, _REFERENCE_OVERLOAD))

    def may_join(self, node: _Node) -> bool:
        """Whether the ``+`` of ``node`` may join strings, lists or bytes
        (the checker resolves every call; one it did not resolve may)."""
        reference = self.reference(node.id)
        return reference is None or bool(reference[1] & _JOINS)

    def refuse(self, offset: int, message: str) -> None:
        self.problems.append(CostError(offset, message))

    def ident(self, node: _Node, body: _Body | None) -> None:
        if body is None or body.names is None or node.name in body.names:
            return
        reference = self.reference(node.id)
        if reference is not None and reference[0].split(".")[0] in _ROOTS:  # the environment's
            if reference[0] in _SCALARS:
                return
            what = f"reads {reference[0].split('.')[0]} again for each element"
        else:  # an enclosing macro's element
            what = f"reads {node.name} (an enclosing macro's element) again for each element"
        self.refuse(
            node.start(self.positions),
            f"{body.macro} {what}, so its cost grows with the product of their sizes:"
            " inside a macro read only its own element (and tool, now, agent)",
        )

    def call(self, node: _Node, body: _Body | None) -> None:
        args = node.args
        if node.name == "_+_" and args and self.may_join(node):
            if args[0].kind == _IDENT and args[0].name == _ACCUMULATOR:
                pass  # map's own append (checked with the macro)
            elif body is not None:
                self.refuse(
                    node.start(self.positions),
                    f"+ on strings, lists or bytes inside {body.macro} builds a new value"
                    " for each element",
                )
            else:
                # Each join copies both sides, a chain of them every step
                # (the library keeps every step until the end).
                self.joins += 1
                if self.joins == MAX_JOINS + 1:
                    self.refuse(
                        node.start(self.positions),
                        f"more than {MAX_JOINS} + that may join strings, lists or bytes"
                        " (each copies its operands; write int(...) or double(...) around"
                        " an input number to add numbers)",
                    )
        if node.name in _SEARCHES:
            searched = args[0] if node.target is not None else args[1] if len(args) > 1 else None
            if searched is not None and not searched.literal_string:
                self.refuse(
                    searched.start(self.positions),
                    f"{node.name} takes a string literal: searching a value for another"
                    " costs the product of their sizes",
                )

    def inner_body(self, node: _Node, macro: str, body: _Body | None) -> _Body:
        """What the body of the macro ``node`` may read. Over a literal it
        runs a fixed number of times, as if written out, so it may read what
        the expression around it may; but each macro over a literal nested
        in another's multiplies what the outer reads by its length, so
        inside a body a literal holds constants only, and the body of one
        nested in another macro over a literal reads its own element only.
        A + in any body still joins once per element (call)."""
        if node.iter_range.kind not in (_LIST, _STRUCT):
            return _Body(macro, node.names)
        if body is None:
            return _Body(macro, None, literal=True)
        variable = next((n for n in node.iter_range.walk() if n.kind == _IDENT), None)
        if variable is not None:
            self.refuse(
                variable.start(self.positions),
                f"inside {body.macro}, a macro's list holds constants only: a value"
                " repeated in it is read again for each of its elements",
            )
        if body.literal or body.names is None:
            return _Body(body.macro, node.names, literal=True)
        return _Body(body.macro, body.names | node.names, literal=True)

    def comprehension(self, node: _Node, body: _Body | None) -> None:
        # A macro's position is its opening parenthesis, after its name.
        found = _MACRO_NAME.search(self.text, 0, self.positions.get(node.id, 0))
        macro = found.group(1) if found else "a macro"
        if node.accu_init.kind == _LIST and node.iter_range.kind not in (_LIST, _STRUCT):
            self.refuse(
                found.start(1) if found else node.iter_range.start(self.positions),
                f"{macro} copies its growing result at each element, so its cost grows"
                " with the square of the list's length: use exists, all or exists_one",
            )
        self.walk(node.iter_range, body)
        self.walk(node.accu_init, body)
        inner = self.inner_body(node, macro, body)
        for part in node.body:
            self.walk(part, inner)
        if node.result is not None:
            outer = body
            if body is not None and body.names is not None:
                outer = _Body(body.macro, body.names | {_ACCUMULATOR}, body.literal)
            self.walk(node.result, outer)


_ACCUMULATOR = "@result"  # the variable a macro builds its result in
_MACRO_NAME = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\s*$")


def check_cost(text: str, serialized: bytes) -> int:
    """Raise CostError for the first construct (in the order of the text)
    whose cost grows faster than the input; ``serialized`` is what the
    compiled ``text`` serializes to. Returns how many ``+`` outside macros
    may join strings, lists or bytes."""
    checked = _first(serialized, _ANY_VALUE, b"")
    references: dict[int, bytes] = {}  # decoded when a node asks (_Check.reference)
    positions: dict[int, int] = {}
    expr = b""
    for number, value in _fields(checked):  # one pass: the type map is skipped
        if number == _CHECKED_REFERENCES:
            entry = dict(_fields(value))
            references[entry.get(1, 0)] = entry.get(2, b"")
        elif number == _CHECKED_SOURCE:
            for field, item in _fields(value):
                if field == _SOURCE_POSITIONS:
                    entry = dict(_fields(item))
                    positions[entry.get(1, 0)] = entry.get(2, 0)
        elif number == _CHECKED_EXPR:
            expr = value
    check = _Check(references, positions, text)
    check.walk(_node(expr), None)
    if check.problems:
        raise min(check.problems, key=lambda problem: problem.offset)
    return check.joins
