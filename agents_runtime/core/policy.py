"""The policy model and its strict parser.

Unknown keys, wrong types, negative numbers, NaN and infinities are refused
with one message naming the key path, e.g.
``$.tools.search.requires_aproval: unknown key``: a typo must never be
silently ignored.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any, NewType

import attrs
import cattrs
from cattrs.errors import ClassValidationError

from agents_runtime.core.money import ZERO, Money, positive, to_money
from agents_runtime.core.validation import error_messages
from agents_runtime.errors import PolicyError
from agents_runtime.log.canonical import MAX_SAFE_INT

PositiveNumber = NewType("PositiveNumber", Decimal)
PositiveInt = NewType("PositiveInt", int)

MAX_TOOL_NAME = 128


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
    # Operators who must approve a held call, each once (1 to MAX_APPROVALS).
    approvals_required: ApprovalCount = ApprovalCount(1)


def charge_for(rule: ToolRule | None, requested_cost: Decimal | None) -> Decimal:
    """The larger of the request's cost (default 0) and the rule's minimum."""
    requested = requested_cost if requested_cost is not None else ZERO
    if rule is None or requested >= rule.cost:
        return requested
    return rule.cost


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
_converter.register_structure_hook_func(lambda t: t == dict[str, ToolRule], _tools)
for _cls in (ToolRule, RateLimit, Policy):
    _hook = _converter.gen_structure_attrs_fromdict(_cls)
    _converter.register_structure_hook(_cls, lambda v, t, _h=_hook: _h(_rule_dict(v), t))


def parse_policy(value: Any) -> Policy:
    """Structure a JSON policy strictly, or raise PolicyError naming the key."""
    try:
        return _converter.structure(value, Policy)
    except (ClassValidationError, ValueError, TypeError, ExceptionGroup) as exc:
        messages = error_messages(exc, "$")
        raise PolicyError("; ".join(messages) or "invalid policy") from None


def policy_json(policy: Policy) -> dict[str, Any]:
    """The whole policy, defaults filled in, as written into the log."""

    # approval_timeout_secs is written only when set: a policy without it
    # keeps the exact bytes it had before the key existed.
    def rule(r: ToolRule) -> dict[str, Any]:
        out = {"cost": r.cost, "requires_approval": r.requires_approval, "max_calls": r.max_calls}
        if r.approval_timeout_secs is not None:
            out["approval_timeout_secs"] = r.approval_timeout_secs
        if r.approvals_required != 1:  # likewise: one approver keeps the old bytes
            out["approvals_required"] = r.approvals_required
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
