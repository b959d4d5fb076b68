"""The policy model and its strict parser.

Unknown keys, wrong types, negative numbers, NaN and infinities are refused
with one message naming the key path, e.g.
``$.tools.search.requires_aproval: unknown key``: a typo must never be
silently ignored.
"""

from __future__ import annotations

from contextvars import ContextVar
from decimal import Decimal
from typing import Any, Literal, NewType

import attrs
import cattrs
from cattrs.errors import ClassValidationError

from agents_runtime.core._cel_cost import MAX_JOINS
from agents_runtime.core.conditions import NOTHING, Condition, Reads, compile_condition
from agents_runtime.core.money import ZERO, Money, positive, to_money
from agents_runtime.core.validation import error_messages
from agents_runtime.core.vocabulary import Effect, Severity
from agents_runtime.errors import PolicyError
from agents_runtime.log.canonical import MAX_SAFE_INT, dumps, loads

PositiveNumber = NewType("PositiveNumber", Decimal)
PositiveInt = NewType("PositiveInt", int)
# A rule's name or a tag: 1 to MAX_NAME characters, no control characters.
ShortName = NewType("ShortName", str)
# A key, or a dotted key path, of a request's input.
KeyPath = NewType("KeyPath", str)
Text = NewType("Text", str)

MAX_TOOL_NAME = 128
MAX_NAME = 64
MAX_KEY_PATH = 256
# The `when`s of one rule list, in characters, all told: what remains of a
# decision's cost once the cost check has refused what grows faster than
# the input (conditions.py) is the expressions' size times the input's.
MAX_RULES_TEXT = 4096


# Whether a held call's approval must be signed by the approver's passkey:
# false, true (approvals), or "both" (approvals and rejections).
ApprovalPasskey = Literal[False, True, "both"]
PASSKEY_BOTH = "both"


def _wants(setting: ApprovalPasskey, decision: str) -> bool:
    return setting is not False and (decision == "approve" or setting == PASSKEY_BOTH)


@attrs.frozen
class Rule:
    """One of a tool's ``rules``: when ``when`` is true, ``effect`` decides
    the call (rules after it are not evaluated)."""

    name: ShortName
    when: Condition
    effect: Effect
    # A deny's own words and scar (the others take neither).
    message: Text | None = None
    scar: Severity | None = None
    # A require_approval rule's: the calls it holds need passkey-signed decisions.
    approval_passkey: ApprovalPasskey = False


class Rules(tuple[Rule, ...]):
    """A tool's rules, in order, with what any of them may read (so that a
    request builds those facts only, without looking at each rule)."""

    reads: Reads

    def __new__(cls, rules: tuple[Rule, ...] = ()) -> Rules:
        self = super().__new__(cls, rules)
        reads = NOTHING
        for rule in rules:
            reads = reads | rule.when.reads
        self.reads = reads
        return self


NO_RULES = Rules()


ApprovalCount = NewType("ApprovalCount", int)  # operators who must approve: 1 to MAX_APPROVALS
MAX_APPROVALS = 10


@attrs.frozen
class ToolRule:
    cost: Money = ZERO
    requires_approval: bool = False
    max_calls: PositiveInt | None = None
    # Seconds a held call of this tool may wait for an operator; None: the
    # policy's own approval_timeout_secs.
    approval_timeout_secs: PositiveNumber | None = None
    rules: Rules = NO_RULES
    # What history.tags_used remembers of each allowed call of the tool.
    tags: tuple[ShortName, ...] = ()
    # The input key (path) whose value is the call's money amount.
    cost_from: KeyPath | None = None
    # Operators who must approve a held call, each once (1 to MAX_APPROVALS).
    approvals_required: ApprovalCount = ApprovalCount(1)
    approval_passkey: ApprovalPasskey = False


def charge_for(
    rule: ToolRule | None, requested_cost: Decimal | None, tool_input: Any = None
) -> tuple[Decimal, str | None]:
    """The charge of a call: the largest of the request's cost (default 0),
    the rule's minimum and, with ``cost_from``, the input's amount; and why
    that amount cannot be read, if it cannot (the call is then denied
    ``policy_error``, and the charge leaves the amount out)."""
    requested = requested_cost if requested_cost is not None else ZERO
    if rule is None:
        return requested, None
    charge = requested if requested >= rule.cost else rule.cost
    if rule.cost_from is None:
        return charge, None
    amount = input_amount(rule.cost_from, tool_input)
    if isinstance(amount, str):
        return charge, amount
    return (amount if amount > charge else charge), None


def input_amount(path: str, tool_input: Any) -> Money | str:
    """The money amount at ``path`` (a key, or dotted keys) of a call's input,
    exact as the request gave it; or what is wrong with it."""
    value = tool_input
    for key in path.split("."):
        if type(value) is not dict or key not in value:
            return f"input.{path} is missing"
        value = value[key]
    if type(value) is Decimal:
        # As the log writes it and reads it back (2.0000000000000001 as 2):
        # a replay of the call must read the very same amount.
        value = loads(dumps(value))
    try:
        return to_money(value)
    except ValueError as exc:
        return f"input.{path} {exc}"


@attrs.frozen
class RateLimit:
    max_actions: PositiveInt
    window_secs: PositiveNumber


@attrs.frozen
class Policy:
    budget: Money
    scar_limit: PositiveNumber
    tools: dict[str, ToolRule]  # names checked by _tool_name
    default: ToolRule | None = None
    rate_limit: RateLimit | None = None
    # Seconds a held action may wait before it expires; None: for ever.
    approval_timeout_secs: PositiveNumber | None = None

    def rule_for(self, tool: str) -> ToolRule | None:
        return self.tools.get(tool, self.default)

    def approvals_required(self, tool: str) -> int:
        """How many operators must approve a held call of ``tool``."""
        rule = self.tools.get(tool, self.default)
        return 1 if rule is None else rule.approvals_required

    def passkey_needed(self, tool: str, decision: str, held_by: str | None = None) -> bool:
        """Whether an operator's ``decision`` (approve or reject) on a held call
        of ``tool`` must carry a passkey assertion (agents_runtime.log.passkeys):
        as the tool's rule says, or the policy rule ``held_by`` that held it."""
        rule = self.tools.get(tool, self.default)
        if rule is None:
            return False
        if _wants(rule.approval_passkey, decision):
            return True
        if held_by is None:
            return False
        return any(r.name == held_by and _wants(r.approval_passkey, decision) for r in rule.rules)

    def approval_timeout(self, tool: str) -> Decimal | None:
        """Seconds a held call of ``tool`` may wait: its rule's (the tool's
        own, else the default rule's) if it sets one, else the policy's."""
        rule = self.tools.get(tool, self.default)
        if rule is not None and rule.approval_timeout_secs is not None:
            return rule.approval_timeout_secs
        return self.approval_timeout_secs


def _strict_int(value: Any, _: Any) -> int:
    if type(value) is int:
        number = value
    elif isinstance(value, Decimal) and value.is_finite() and value == value.to_integral_value():
        number = int(value)
    else:
        raise ValueError("must be an integer")
    # The policy is written into the log, whose numbers RFC 8785 bounds.
    if abs(number) > MAX_SAFE_INT:
        raise ValueError(f"must be at most {MAX_SAFE_INT}")
    return number


def _positive_int(value: Any, _: Any) -> PositiveInt:
    number = _strict_int(value, None)
    if number < 1:
        raise ValueError("must be at least 1")
    return PositiveInt(number)


def _approval_count(value: Any, _: Any) -> ApprovalCount:
    number = _strict_int(value, None)
    if not 1 <= number <= MAX_APPROVALS:
        raise ValueError(f"must be an integer from 1 to {MAX_APPROVALS}")
    return ApprovalCount(number)


def _bool(value: Any, _: Any) -> bool:
    if type(value) is bool:
        return value
    raise ValueError("must be true or false")


def _approval_passkey(value: Any, _: Any) -> ApprovalPasskey:
    if value is True or value is False or value == PASSKEY_BOTH:
        return value  # type: ignore[no-any-return]  # one of the Literal's values
    raise ValueError('must be true, false or "both"')


def _tool_name(value: Any, _: Any) -> str:
    if not isinstance(value, str) or not 1 <= len(value) <= MAX_TOOL_NAME:
        raise ValueError(f"tool names must be 1 to {MAX_TOOL_NAME} characters")
    return value


def _tools(value: Any, _: Any) -> dict[str, ToolRule]:
    if not isinstance(value, dict):
        raise ValueError("must be an object")
    result: dict[str, ToolRule] = {}
    errors: list[Exception] = []
    for name, rule in value.items():
        try:
            result[_tool_name(name, None)] = _converter.structure(rule, ToolRule)
        except Exception as exc:  # collected, re-raised below with its path
            exc.__notes__ = [*getattr(exc, "__notes__", []), f"@key {name}"]
            errors.append(exc)
    if errors:
        raise ExceptionGroup("invalid tools", errors)
    return result


def _short_name(value: Any, _: Any) -> ShortName:
    if not isinstance(value, str) or not 1 <= len(value) <= MAX_NAME:
        raise ValueError(f"must be a string of 1 to {MAX_NAME} characters")
    if any(c < " " or "\x7f" <= c <= "\x9f" for c in value):  # C0, DEL and C1
        raise ValueError("must not contain control characters")
    return ShortName(value)


def _key_path(value: Any, _: Any) -> KeyPath:
    if not isinstance(value, str) or not 1 <= len(value) <= MAX_KEY_PATH:
        raise ValueError(f"must be a string of 1 to {MAX_KEY_PATH} characters")
    if "" in value.split("."):
        raise ValueError("must be a key or a dotted key path (a.b.c)")
    return KeyPath(value)


# Whether the policy being parsed is admitted now (set by an operator) or
# was admitted when its record was written (``parse_policy(recorded=True)``).
_ADMITTING: ContextVar[bool] = ContextVar("admitting", default=True)


def _condition(value: Any, _: Any) -> Condition:
    if not isinstance(value, str):
        raise ValueError("must be a string (a CEL expression)")
    return compile_condition(value, admit=_ADMITTING.get())


def _text(value: Any, _: Any) -> Text:
    if not isinstance(value, str):
        raise ValueError("must be a string")
    return Text(value)


def _rules(value: Any, _: Any) -> Rules:
    if not isinstance(value, list):
        raise ValueError("must be a list")
    result: list[Rule] = []
    errors: list[Exception] = []
    names: set[str] = set()
    for index, item in enumerate(value):
        try:
            rule = _converter.structure(item, Rule)
            if rule.effect != Effect.DENY and (rule.message is not None or rule.scar is not None):
                raise ValueError(f"only a {Effect.DENY} rule takes a message or a scar")
            if rule.effect != Effect.REQUIRE_APPROVAL and rule.approval_passkey is not False:
                raise ValueError(f"only a {Effect.REQUIRE_APPROVAL} rule takes approval_passkey")
            if rule.name in names:
                raise ValueError(f"rule name {rule.name!r} is used twice")
            names.add(rule.name)
            result.append(rule)
        except Exception as exc:  # collected, re-raised below with its path
            exc.__notes__ = [*getattr(exc, "__notes__", []), f"@index {index}"]
            errors.append(exc)
    if errors:
        raise ExceptionGroup("invalid rules", errors)
    if not _ADMITTING.get():
        return Rules(tuple(result))
    if (size := sum(len(rule.when.text) for rule in result)) > MAX_RULES_TEXT:
        raise ValueError(
            f"the when expressions hold {size} characters in all, more than {MAX_RULES_TEXT}"
        )
    if (joins := sum(rule.when.joins for rule in result)) > MAX_JOINS:
        raise ValueError(
            f"the when expressions have {joins} + that may join strings, lists or bytes"
            f" in all, more than {MAX_JOINS} (each copies its operands; write int(...) or"
            " double(...) around an input number to add numbers)"
        )
    return Rules(tuple(result))


def _tags(value: Any, _: Any) -> tuple[ShortName, ...]:
    if not isinstance(value, list):
        raise ValueError("must be a list")
    return tuple(_short_name(v, None) for v in value)


def _rule_dict(value: Any) -> Any:
    if not isinstance(value, dict):
        raise ValueError("must be an object")
    return value


_converter = cattrs.Converter(forbid_extra_keys=True, detailed_validation=True)
_converter.register_structure_hook(Money, lambda v, _: to_money(v))
_converter.register_structure_hook(PositiveNumber, lambda v, _: PositiveNumber(positive(v)))
_converter.register_structure_hook(PositiveInt, _positive_int)
_converter.register_structure_hook(ApprovalCount, _approval_count)
_converter.register_structure_hook(bool, _bool)
_converter.register_structure_hook_func(lambda t: t == ApprovalPasskey, _approval_passkey)
_converter.register_structure_hook_func(lambda t: t == dict[str, ToolRule], _tools)
_converter.register_structure_hook(ShortName, _short_name)
_converter.register_structure_hook(KeyPath, _key_path)
_converter.register_structure_hook(Condition, _condition)
_converter.register_structure_hook(Text, _text)
_converter.register_structure_hook(Rules, _rules)
_converter.register_structure_hook_func(lambda t: t == tuple[ShortName, ...], _tags)
for _cls in (Rule, ToolRule, RateLimit, Policy):
    _hook = _converter.gen_structure_attrs_fromdict(_cls)
    _converter.register_structure_hook(_cls, lambda v, t, _h=_hook: _h(_rule_dict(v), t))


def parse_policy(value: Any, *, recorded: bool = False) -> Policy:
    """Structure a JSON policy strictly, or raise PolicyError naming the key.

    A ``recorded`` policy (read back from a log or a snapshot) was admitted
    when it was written: the limits on what a policy may cost to evaluate
    (the CEL cost check, MAX_RULES_TEXT, MAX_JOINS) are not applied again,
    so that a release that tightens them still loads every log an earlier
    one wrote. Everything else is checked as strictly as ever."""
    admitting = _ADMITTING.set(not recorded)
    try:
        return _converter.structure(value, Policy)
    except (ClassValidationError, ValueError, TypeError, ExceptionGroup) as exc:
        messages = error_messages(exc, "$")
        raise PolicyError("; ".join(messages) or "invalid policy") from None
    finally:
        _ADMITTING.reset(admitting)


def policy_json(policy: Policy) -> dict[str, Any]:
    """The whole policy, defaults filled in, as written into the log."""

    # approval_timeout_secs is written only when set: a policy without it
    # keeps the exact bytes it had before the key existed.
    def rule(r: ToolRule) -> dict[str, Any]:
        out = {"cost": r.cost, "requires_approval": r.requires_approval, "max_calls": r.max_calls}
        if r.approval_timeout_secs is not None:
            out["approval_timeout_secs"] = r.approval_timeout_secs
        # Likewise rules, tags, cost_from and approvals_required.
        if r.rules:
            out["rules"] = [rule_json(x) for x in r.rules]
        if r.tags:
            out["tags"] = list(r.tags)
        if r.cost_from is not None:
            out["cost_from"] = r.cost_from
        if r.approvals_required != 1:  # one approver keeps the old bytes
            out["approvals_required"] = r.approvals_required
        if r.approval_passkey is not False:
            out["approval_passkey"] = r.approval_passkey
        return out

    out = {
        "budget": policy.budget,
        "scar_limit": policy.scar_limit,
        "tools": {name: rule(r) for name, r in policy.tools.items()},
        "default": rule(policy.default) if policy.default is not None else None,
        "rate_limit": (
            {
                "max_actions": policy.rate_limit.max_actions,
                "window_secs": policy.rate_limit.window_secs,
            }
            if policy.rate_limit is not None
            else None
        ),
    }
    if policy.approval_timeout_secs is not None:
        out["approval_timeout_secs"] = policy.approval_timeout_secs
    return out


def rule_json(rule: Rule) -> dict[str, Any]:
    out: dict[str, Any] = {"name": rule.name, "when": rule.when.text, "effect": rule.effect}
    if rule.message is not None:
        out["message"] = rule.message
    if rule.scar is not None:
        out["scar"] = rule.scar
    if rule.approval_passkey is not False:
        out["approval_passkey"] = rule.approval_passkey
    return out
