"""The policy parser: every key of a policy, and every way to get
one wrong, each refused with one message naming the key path."""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Any

import pytest

from agents_runtime.core.policy import Policy, RateLimit, ToolRule, parse_policy, policy_json
from agents_runtime.errors import PolicyError
from agents_runtime.log import canonical

BASE: dict[str, Any] = {"budget": 100, "scar_limit": 10, "tools": {}}

EXAMPLE = {
    "budget": 100,
    "scar_limit": 10,
    "tools": {
        "web_search": {"cost": 1, "requires_approval": False, "max_calls": 50},
        "send_email": {"cost": 5, "requires_approval": True},
    },
    "default": {"cost": Decimal("0.5")},
    "rate_limit": {"max_actions": 30, "window_secs": 60},
}


def with_(**changes: Any) -> dict[str, Any]:
    return {**BASE, **changes}


def tool(**rule: Any) -> dict[str, Any]:
    return with_(tools={"search": rule})


def refused(value: Any, message: str) -> None:
    with pytest.raises(PolicyError, match=f"^{re.escape(message)}$"):
        parse_policy(value)


# -- accepted ---------------------------------------------------------------


def test_the_decisions_example_parses_into_the_model() -> None:
    assert parse_policy(EXAMPLE) == Policy(
        budget=Decimal(100),
        scar_limit=Decimal(10),
        tools={
            "web_search": ToolRule(cost=Decimal(1), requires_approval=False, max_calls=50),
            "send_email": ToolRule(cost=Decimal(5), requires_approval=True, max_calls=None),
        },
        default=ToolRule(cost=Decimal("0.5")),
        rate_limit=RateLimit(max_actions=30, window_secs=Decimal(60)),
    )


def test_the_example_read_from_json_text_parses_the_same() -> None:
    assert parse_policy(canonical.loads(canonical.dumps(EXAMPLE))) == parse_policy(EXAMPLE)


def test_only_budget_scar_limit_and_tools_are_required() -> None:
    policy = parse_policy(BASE)
    assert policy.tools == {}
    assert policy.default is None
    assert policy.rate_limit is None


def test_rule_keys_default_to_cost_0_no_approval_no_cap() -> None:
    assert parse_policy(tool()).tools["search"] == ToolRule(Decimal(0), False, None)


@pytest.mark.parametrize(
    ("key", "value"),
    [
        pytest.param("default", None, id="default-null"),
        pytest.param("rate_limit", None, id="rate_limit-null"),
    ],
)
def test_optional_objects_may_be_null(key: str, value: Any) -> None:
    assert getattr(parse_policy(with_(**{key: value})), key) is None


def test_max_calls_may_be_null() -> None:
    assert parse_policy(tool(max_calls=None)).tools["search"].max_calls is None


def test_budget_zero_is_allowed() -> None:
    assert parse_policy(with_(budget=0)).budget == 0


def test_rule_cost_zero_is_allowed() -> None:
    assert parse_policy(tool(cost=0)).tools["search"].cost == 0


def test_money_with_six_decimal_places_just_below_10_to_the_9_is_allowed() -> None:
    assert parse_policy(with_(budget=Decimal("999999999.999999"))).budget == Decimal(
        "999999999.999999"
    )


def test_an_integral_decimal_counts_as_an_integer_for_max_calls() -> None:
    assert parse_policy(tool(max_calls=Decimal("2.0"))).tools["search"].max_calls == 2


def test_fractional_window_secs_is_allowed() -> None:
    limit = parse_policy(with_(rate_limit={"max_actions": 1, "window_secs": Decimal("0.5")}))
    assert limit.rate_limit == RateLimit(1, Decimal("0.5"))


def test_tool_names_of_1_and_128_characters_are_allowed() -> None:
    names = {"a": {}, "b" * 128: {}}
    assert set(parse_policy(with_(tools=names)).tools) == set(names)


def test_policy_json_fills_in_defaults_and_parses_back_to_the_same_policy() -> None:
    policy = parse_policy(EXAMPLE)
    written = policy_json(policy)
    assert written["tools"]["send_email"] == {
        "cost": Decimal(5),
        "requires_approval": True,
        "max_calls": None,
    }
    assert written["default"] == {
        "cost": Decimal("0.5"),
        "requires_approval": False,
        "max_calls": None,
    }
    assert parse_policy(canonical.loads(canonical.dumps(written))) == policy


def test_rule_for_falls_back_to_the_default_rule() -> None:
    policy = parse_policy(EXAMPLE)
    assert policy.rule_for("web_search") is policy.tools["web_search"]
    assert policy.rule_for("anything_else") == ToolRule(cost=Decimal("0.5"))
    assert parse_policy(BASE).rule_for("anything_else") is None


# -- unknown keys -------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "message"),
    [
        pytest.param(with_(extra=1), "$.extra: unknown key", id="top-level"),
        pytest.param(
            tool(requires_aproval=True),
            "$.tools.search.requires_aproval: unknown key",
            id="typo-in-rule",
        ),
        pytest.param(
            with_(default={"cost": 1, "max_call": 2}),
            "$.default.max_call: unknown key",
            id="default",
        ),
        pytest.param(
            with_(rate_limit={"max_actions": 1, "window_secs": 1, "burst": 2}),
            "$.rate_limit.burst: unknown key",
            id="rate_limit",
        ),
        pytest.param(
            with_(b=1, a=2),
            "$.a: unknown key; $.b: unknown key",
            id="two-at-once-sorted",
        ),
    ],
)
def test_unknown_keys_anywhere_are_refused_naming_the_path(value: Any, message: str) -> None:
    refused(value, message)


# -- missing keys ----------------------------------------------------------------


@pytest.mark.parametrize("key", ["budget", "scar_limit", "tools"])
def test_required_keys_missing_are_refused(key: str) -> None:
    value = {k: v for k, v in BASE.items() if k != key}
    refused(value, f"$.{key}: required key missing")


@pytest.mark.parametrize("key", ["max_actions", "window_secs"])
def test_rate_limit_needs_both_keys(key: str) -> None:
    limit = {k: v for k, v in {"max_actions": 1, "window_secs": 1}.items() if k != key}
    refused(with_(rate_limit=limit), f"$.rate_limit.{key}: required key missing")


# -- wrong types -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "message"),
    [
        pytest.param([], "$: must be an object", id="policy-array"),
        pytest.param(None, "$: must be an object", id="policy-null"),
        pytest.param(with_(budget="5"), "$.budget: must be a number", id="budget-string"),
        pytest.param(with_(budget=None), "$.budget: must be a number", id="budget-null"),
        pytest.param(with_(scar_limit="1"), "$.scar_limit: must be a number", id="scar-string"),
        pytest.param(with_(tools=[]), "$.tools: must be an object", id="tools-array"),
        pytest.param(
            with_(tools={"search": 1}), "$.tools.search: must be an object", id="rule-number"
        ),
        pytest.param(tool(cost="1"), "$.tools.search.cost: must be a number", id="cost-string"),
        pytest.param(
            tool(requires_approval=1),
            "$.tools.search.requires_approval: must be true or false",
            id="requires_approval-number",
        ),
        pytest.param(
            tool(requires_approval="true"),
            "$.tools.search.requires_approval: must be true or false",
            id="requires_approval-string",
        ),
        pytest.param(
            tool(max_calls=Decimal("1.5")),
            "$.tools.search.max_calls: must be an integer",
            id="max_calls-fraction",
        ),
        pytest.param(
            tool(max_calls="3"),
            "$.tools.search.max_calls: must be an integer",
            id="max_calls-string",
        ),
        pytest.param(with_(default=5), "$.default: must be an object", id="default-number"),
        pytest.param(
            with_(rate_limit=[]), "$.rate_limit: must be an object", id="rate_limit-array"
        ),
        pytest.param(
            with_(rate_limit={"max_actions": Decimal("1.5"), "window_secs": 1}),
            "$.rate_limit.max_actions: must be an integer",
            id="max_actions-fraction",
        ),
        pytest.param(
            with_(rate_limit={"max_actions": 1, "window_secs": "60"}),
            "$.rate_limit.window_secs: must be a number",
            id="window_secs-string",
        ),
    ],
)
def test_wrong_types_are_refused_naming_the_key(value: Any, message: str) -> None:
    refused(value, message)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        pytest.param(with_(budget=True), "$.budget: must be a number", id="budget"),
        pytest.param(with_(scar_limit=False), "$.scar_limit: must be a number", id="scar_limit"),
        pytest.param(tool(cost=True), "$.tools.search.cost: must be a number", id="cost"),
        pytest.param(
            tool(max_calls=True), "$.tools.search.max_calls: must be an integer", id="max_calls"
        ),
        pytest.param(
            with_(rate_limit={"max_actions": True, "window_secs": 1}),
            "$.rate_limit.max_actions: must be an integer",
            id="max_actions",
        ),
        pytest.param(
            with_(rate_limit={"max_actions": 1, "window_secs": True}),
            "$.rate_limit.window_secs: must be a number",
            id="window_secs",
        ),
    ],
)
def test_booleans_where_numbers_are_expected_are_refused(value: Any, message: str) -> None:
    refused(value, message)


# -- out of range ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "message"),
    [
        pytest.param(with_(budget=-1), "$.budget: must not be negative", id="budget-negative"),
        pytest.param(
            with_(budget=Decimal("-0.5")),
            "$.budget: must not be negative",
            id="budget-negative-fraction",
        ),
        pytest.param(
            tool(cost=-1), "$.tools.search.cost: must not be negative", id="cost-negative"
        ),
        pytest.param(
            with_(scar_limit=0), "$.scar_limit: must be greater than 0", id="scar_limit-zero"
        ),
        pytest.param(
            with_(scar_limit=-3), "$.scar_limit: must not be negative", id="scar_limit-negative"
        ),
        pytest.param(
            tool(max_calls=0), "$.tools.search.max_calls: must be at least 1", id="max_calls-zero"
        ),
        pytest.param(
            tool(max_calls=-2),
            "$.tools.search.max_calls: must be at least 1",
            id="max_calls-negative",
        ),
        pytest.param(
            with_(rate_limit={"max_actions": 0, "window_secs": 1}),
            "$.rate_limit.max_actions: must be at least 1",
            id="max_actions-zero",
        ),
        pytest.param(
            with_(rate_limit={"max_actions": 1, "window_secs": 0}),
            "$.rate_limit.window_secs: must be greater than 0",
            id="window_secs-zero",
        ),
        pytest.param(
            with_(rate_limit={"max_actions": 1, "window_secs": -5}),
            "$.rate_limit.window_secs: must not be negative",
            id="window_secs-negative",
        ),
    ],
)
def test_negative_and_zero_values_are_refused(value: Any, message: str) -> None:
    refused(value, message)


@pytest.mark.parametrize(
    ("number", "message"),
    [
        pytest.param(Decimal("NaN"), "must be a finite number", id="nan"),
        pytest.param(Decimal("sNaN"), "must be a finite number", id="signalling-nan"),
        pytest.param(Decimal("Infinity"), "must be a finite number", id="infinity"),
        pytest.param(Decimal("-Infinity"), "must be a finite number", id="minus-infinity"),
        pytest.param(Decimal("0.0000001"), "must have at most 6 decimal places", id="7-places"),
        pytest.param(
            Decimal("1.1234567"), "must have at most 6 decimal places", id="7-places-above-1"
        ),
        pytest.param(10**9, "must be below 1000000000", id="10^9"),
        pytest.param(Decimal("1E+9"), "must be below 1000000000", id="10^9-exponent"),
        pytest.param(Decimal("1e300"), "must be below 1000000000", id="huge"),
    ],
)
@pytest.mark.parametrize(
    ("build", "path"),
    [
        pytest.param(lambda n: with_(budget=n), "$.budget", id="budget"),
        pytest.param(lambda n: with_(scar_limit=n), "$.scar_limit", id="scar_limit"),
        pytest.param(lambda n: tool(cost=n), "$.tools.search.cost", id="rule-cost"),
        pytest.param(lambda n: with_(default={"cost": n}), "$.default.cost", id="default-cost"),
        pytest.param(
            lambda n: with_(rate_limit={"max_actions": 1, "window_secs": n}),
            "$.rate_limit.window_secs",
            id="window_secs",
        ),
    ],
)
def test_numbers_money_cannot_hold_are_refused(
    number: Any, message: str, build: Any, path: str
) -> None:
    refused(build(number), f"{path}: {message}")


def test_every_failure_is_reported_at_once() -> None:
    value = {
        "budget": -1,
        "scar_limit": 10,
        "tools": {"a": {"cost": -1}, "b": {"zz": 1}},
    }
    refused(
        value,
        "$.budget: must not be negative; $.tools.a.cost: must not be negative; "
        "$.tools.b.zz: unknown key",
    )


@pytest.mark.parametrize(
    "name",
    [pytest.param("", id="empty"), pytest.param("x" * 129, id="129-characters")],
)
def test_tool_names_outside_1_to_128_characters_are_refused(name: str) -> None:
    with pytest.raises(PolicyError, match=r": tool names must be 1 to 128 characters$"):
        parse_policy(with_(tools={name: {}}))


def test_policy_error_is_a_value_error() -> None:
    with pytest.raises(ValueError, match=r"^\$\.extra: unknown key$"):
        parse_policy(with_(extra=True))


@pytest.mark.parametrize(
    ("policy", "message"),
    [
        pytest.param(
            {"budget": 1, "scar_limit": 1, "tools": {"t": {"max_calls": Decimal("1e21")}}},
            "$.tools.t.max_calls: must be at most 9007199254740991",
            id="max_calls",
        ),
        pytest.param(
            {
                "budget": 1,
                "scar_limit": 1,
                "tools": {},
                "rate_limit": {"max_actions": 2**53, "window_secs": 1},
            },
            "$.rate_limit.max_actions: must be at most 9007199254740991",
            id="max_actions",
        ),
    ],
)
def test_integers_the_log_cannot_hold_are_refused_naming_the_key(
    policy: dict[str, Any], message: str
) -> None:
    with pytest.raises(PolicyError, match=rf"^{re.escape(message)}$"):
        parse_policy(policy)
