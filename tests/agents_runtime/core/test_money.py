"""Exact money: decimals in, decimals out, never binary floats."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from agents_runtime.core import commands as c
from agents_runtime.core.money import positive, to_money
from agents_runtime.core.policy import ToolRule, charge_for
from agents_runtime.log import canonical
from tests.agents_runtime.support import D, policy, running_agent


@pytest.mark.parametrize(
    "value",
    [
        pytest.param(0, id="zero"),
        pytest.param(5, id="int"),
        pytest.param(Decimal("0.1"), id="tenth"),
        pytest.param(Decimal("0.000001"), id="six-places"),
        pytest.param(Decimal("1.500000"), id="trailing-zeros"),
        pytest.param(Decimal("1E+3"), id="exponent"),
        pytest.param(999_999_999, id="just-below-10^9"),
    ],
)
def test_to_money_keeps_the_exact_value(value: Any) -> None:
    money = to_money(value)
    assert isinstance(money, Decimal)
    assert money == Decimal(value)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        pytest.param(0.1, "must be a number", id="float"),
        pytest.param(True, "must be a number", id="bool"),
        pytest.param("1", "must be a number", id="string"),
        pytest.param(None, "must be a number", id="null"),
        pytest.param(Decimal("NaN"), "must be a finite number", id="nan"),
        pytest.param(Decimal("Infinity"), "must be a finite number", id="infinity"),
        pytest.param(-1, "must not be negative", id="negative"),
        pytest.param(Decimal("0.0000001"), "must have at most 6 decimal places", id="7-places"),
        pytest.param(10**9, "must be below 1000000000", id="10^9"),
    ],
)
def test_to_money_refuses(value: Any, message: str) -> None:
    with pytest.raises(ValueError, match=f"^{message}$"):
        to_money(value)


def test_positive_refuses_zero() -> None:
    with pytest.raises(ValueError, match=r"^must be greater than 0$"):
        positive(0)


def test_every_money_value_survives_the_canonical_number_form() -> None:
    for text in ["0.1", "0.3", "123456789.123456", "999999999.999999", "0.000001", "7"]:
        value = Decimal(text)
        assert canonical.loads(canonical.dumps({"v": value}))["v"] == value


@pytest.mark.parametrize(
    ("rule_cost", "requested", "charge"),
    [
        pytest.param("2", None, "2", id="no-request-cost-charges-the-rule"),
        pytest.param("2", "1", "2", id="rule-minimum-wins"),
        pytest.param("2", "3.5", "3.5", id="request-above-minimum-wins"),
        pytest.param("0", None, "0", id="both-zero"),
    ],
)
def test_charge_is_the_larger_of_request_cost_and_rule_cost(
    rule_cost: str, requested: str | None, charge: str
) -> None:
    rule = ToolRule(cost=D(rule_cost))
    assert charge_for(rule, None if requested is None else D(requested)) == (D(charge), None)


async def test_ten_actions_of_0_1_on_budget_1_leave_exactly_0_and_terminate(tmp_path: Path) -> None:
    agent_policy = policy(budget=1, tools={"t": {"cost": Decimal("0.1")}})
    async with running_agent(tmp_path, agent_policy) as agent:
        decisions = [await agent.ask(c.RequestAction("t")) for _ in range(10)]
        assert [d["decision"] for d in decisions] == ["allowed"] * 10
        assert decisions[-1]["remaining"] == Decimal("0")
        status = await agent.ask(c.GetStatus())
    assert status["remaining"] == Decimal("0")
    assert status["spent"] == Decimal("1")
    assert canonical.dumps(status["remaining"]) == b"0"
    assert status["alive"] is False
    assert status["termination_reason"] == "budget_exhausted"
    assert [type(d["remaining"]) for d in decisions] == [Decimal] * 10


async def test_three_tenths_add_up_to_exactly_0_3(tmp_path: Path) -> None:
    async with running_agent(tmp_path, policy(budget=1, tools={"t": {}})) as agent:
        for _ in range(3):
            await agent.ask(c.RequestAction("t", cost=D("0.1")))
        status = await agent.ask(c.GetStatus())
    assert status["spent"] == Decimal("0.3")
    assert canonical.dumps(status["spent"]) == b"0.3"
    assert status["remaining"] == Decimal("0.7")
