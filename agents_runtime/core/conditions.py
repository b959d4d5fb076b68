"""Rule conditions: the CEL expressions of a policy's ``rules``, the one
module that knows the CEL library.

An expression is compiled and type-checked once, when its policy is parsed
(set by an operator or read back from a log), against the variables a rule
may read and nothing else: a name outside them, a syntax error or a
non-boolean result is refused there with its line and column. A request
then evaluates compiled programs only. The library is Google's C++ CEL
through its Python binding (``docs/design.md`` says why, with figures).

Evaluation is a pure function of the facts handed in (the call, the agent's
counters, its history, and ``now``, the decision record's time): there is no
clock and no I/O in an expression, so replaying a log decides every call the
same way.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import attrs
from cel_expr_python import cel

from agents_runtime.core._cel_cost import CostError, check_cost
from agents_runtime.log.canonical import MAX_SAFE_INT

_T = cel.Type
# What ``when`` can read. ``agent`` and ``history`` are declared field by
# field (as qualified names) so that each field has a type the checker knows:
# ``now - history.tag_last_used['x'] < duration('1h')`` type-checks, and a
# misspelt field is refused when the policy is set, not on a request.
VARIABLES: dict[str, Any] = {
    "tool": _T.STRING,
    "input": _T.DYN,
    "now": _T.TIMESTAMP,
    "agent.budget": _T.DOUBLE,
    "agent.spent": _T.DOUBLE,
    "agent.remaining": _T.DOUBLE,
    "agent.scar_score": _T.INT,
    "agent.actions_allowed": _T.INT,
    "history.tags_used": _T.List(_T.STRING),
    "history.tag_last_used": _T.Map(_T.STRING, _T.TIMESTAMP),
    "history.calls": _T.Map(_T.STRING, _T.INT),
}
_ENV = cel.NewEnv(variables=VARIABLES)
_BOOL = _T.BOOL
_DYN = _T.DYN
_ERROR = _T.ERROR

# "ERROR: <input>:1:12: undeclared reference to 'foo' ..." (the first of the
# checker's errors; the lines after it draw the position).
_COMPILE_ERROR = re.compile(r"<input>:(-?\d+):(-?\d+): ([^\n]*)")
# "NOT_FOUND: Key not found in map ..." -> the part after the status word;
# "... limit: 32 [CANCELLED]" -> the part before it.
_STATUS = re.compile(r"^[A-Z_]+: | \[[A-Z_]+\]$")
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_CONVERTED = (dict, list, Decimal)  # what json_value may have to copy or convert


@attrs.frozen(eq=False)
class Reads:
    """Which variables (or groups of them) an expression may read: only those
    are built for a request (an over-estimate from the text: a word that
    appears anywhere, even in a string, counts; never an under-estimate)."""

    tool: bool
    input: bool
    now: bool
    agent: bool
    history: bool

    @classmethod
    def of_text(cls, text: str) -> Reads:
        words = set(_WORD.findall(text))
        return cls(*(name in words for name in _GROUPS))

    def __or__(self, other: Reads) -> Reads:
        return Reads(
            *(a or b for a, b in zip(attrs.astuple(self), attrs.astuple(other), strict=True))
        )


_GROUPS = ("tool", "input", "now", "agent", "history")
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
NOTHING = Reads(False, False, False, False, False)


@attrs.frozen
class Condition:
    """A compiled ``when``. Equal by its text; pickled as its text and
    compiled again (startup workers send states back by pickle)."""

    text: str
    program: Any = attrs.field(eq=False, repr=False)
    reads: Reads = attrs.field(eq=False, repr=False)
    # How many + outside macros may join strings, lists or bytes: the rules
    # of one list have at most MAX_JOINS in all (policy.py).
    joins: int = attrs.field(eq=False, repr=False, default=0)

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return compile_admitted, (self.text,)


def compile_condition(text: str, *, admit: bool = True) -> Condition:
    """Compile and type-check ``text``, or raise ValueError with
    ``line L column C: what is wrong``. With ``admit``, a construct whose
    cost grows faster than the input it reads is refused too (``_cel_cost``);
    without it (``compile_admitted``) the cost is not checked again."""
    try:
        program = _ENV.compile(text)
    except RuntimeError as exc:
        found = _COMPILE_ERROR.search(str(exc))
        if found is None:
            raise ValueError(_STATUS.sub("", str(exc).split("\n")[0])) from None
        line, column, what = found.groups()
        what = _STATUS.sub("", what.replace(" (in container '')", ""))
        if line.startswith("-"):  # the parser gave up before it had a position
            raise ValueError(what) from None
        raise ValueError(f"line {line} column {column}: {what}") from None
    returns = program.return_type()
    if returns != _BOOL and returns != _DYN:
        raise ValueError(f"must be a boolean expression, not {returns.name().lower()}")
    if not admit:
        return Condition(text, program, Reads.of_text(text))
    joins = _WITHIN_COST.get(text)
    if joins is None:
        try:
            joins = check_cost(text, program.serialize())
        except CostError as exc:
            line = text.count("\n", 0, exc.offset) + 1
            column = exc.offset - (text.rfind("\n", 0, exc.offset) + 1) + 1
            raise ValueError(f"line {line} column {column}: {exc}") from None
        if len(_WITHIN_COST) >= _WITHIN_COST_MAX:
            _WITHIN_COST.clear()
        _WITHIN_COST[text] = joins
    return Condition(text, program, Reads.of_text(text), joins)


def compile_admitted(text: str) -> Condition:
    """A condition that was admitted once (read back from a record, a
    snapshot or a copy of a state): a later release may check costs more
    strictly, and must still read what an earlier one admitted."""
    return compile_condition(text, admit=False)


# The texts the cost check passed, with their joins: it costs twice the
# compiling, and the same rules come back often (each follower of a named
# policy, each agent's policy at startup). Cleared when full.
_WITHIN_COST: dict[str, int] = {}
_WITHIN_COST_MAX = 4096


def timestamp(now: float) -> datetime:
    """``now`` (seconds since the epoch, whole microseconds as a record's
    ``ts``) as the exact instant a CEL ``timestamp`` holds."""
    global _last
    last = _last
    if last[0] == now:  # the requests of one batch share their now
        return last[1]
    at = _EPOCH + timedelta(microseconds=round(now * 1_000_000))
    _last = (now, at)
    return at


_last = (0.0, _EPOCH)  # the last now timestamp() converted, and its instant


def json_value(value: Any) -> Any:
    """A JSON value as CEL takes it, as its log line reads back: a Decimal
    (a JSON number with a fraction or an exponent) becomes an int when its
    double is whole (as RFC 8785 writes it), else that double; the value
    itself when it holds none."""
    kind = type(value)
    if kind is dict:
        for item in value.values():
            if type(item) in _CONVERTED:
                break
        else:  # the usual input: an object of strings, ints, bools, nulls
            return value
        out = {k: json_value(v) for k, v in value.items()}
        return value if all(out[k] is value[k] for k in value) else out
    if kind is list:
        items = [json_value(v) for v in value]
        return value if all(a is b for a, b in zip(items, value, strict=True)) else items
    if kind is Decimal:
        # The log writes the number's double, a whole one as an integer (2.0,
        # and 2.0000000000000001, as 2), and reads it back so: a rule sees
        # that int, live as on replay.
        number = float(value)
        if number.is_integer() and abs(number) <= MAX_SAFE_INT:
            return int(number)
        return number
    return value


def bind(facts: dict[str, Any]) -> Any:
    """The facts of one request, converted once for all its rules."""
    return _ENV.Activation(facts)


def evaluate(condition: Condition, facts: Any) -> bool | str:
    """True or False, or the message saying why ``condition`` cannot be
    evaluated for these facts (a missing key, a wrong type, not a boolean)."""
    try:
        result = condition.program.eval(facts)
        value = result.value()
    except Exception as exc:  # the binding's own errors: fail closed with its words
        return _STATUS.sub("", str(exc)) or type(exc).__name__
    if value is True or value is False:
        return value
    kind = result.type()
    if kind == _ERROR:
        return _STATUS.sub("", str(value))
    return f"gave {kind.name().lower()}, not a boolean"
