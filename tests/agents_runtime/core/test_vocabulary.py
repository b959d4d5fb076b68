"""agents_runtime.core.vocabulary: each list of words is the one docs/records.md
(and, for grants, docs/api.md) gives, member for member, and in the order the
docs give where order means something."""

from __future__ import annotations

import re
from enum import StrEnum
from pathlib import Path

import pytest

from agents_runtime.core.checks import DENY_SCARS
from agents_runtime.core.vocabulary import (
    ActionStatus,
    Decision,
    GrantStatus,
    Outcome,
    ReasonCode,
    Severity,
    TerminationReason,
)

ROOT = Path(__file__).parents[3]
RECORDS_MD = (ROOT / "docs" / "records.md").read_text(encoding="utf-8")
API_MD = (ROOT / "docs" / "api.md").read_text(encoding="utf-8")


def _section(kind: str) -> str:
    return RECORDS_MD.split(f"## `{kind}`\n")[1].split("\n## ")[0]


def _row(text: str, first_cell: str) -> str:
    (row,) = [line for line in text.splitlines() if line.startswith(f"| {first_cell} |")]
    return row


def _names(text: str) -> list[str]:
    return re.findall(r"`([a-z_]+)`", text)


def _values(enum: type[StrEnum]) -> list[str]:
    return [member.value for member in enum]


def test_decisions_are_the_first_decisions_records_md_gives() -> None:
    documented = re.findall(r"`\{decision: ([a-z_]+)", RECORDS_MD)
    assert sorted(set(documented)) == sorted(_values(Decision))


def test_reason_codes_are_the_denials_of_records_md_in_check_order_then_the_others() -> None:
    denied = _section("action_denied").split("| `reason.code` |")[1]
    table = re.findall(r"^\| `([a-z_]+)` \|", denied, re.MULTILINE)
    checks = _values(ReasonCode)[: len(table)]
    assert table == checks  # "The checks run in that order"
    others = re.findall(r"`\{code: ([a-z_]+)", RECORDS_MD)
    assert sorted(set(table) | set(others)) == sorted(_values(ReasonCode))


def test_every_code_but_a_cancel_says_what_scar_it_adds() -> None:
    assert set(DENY_SCARS) == set(ReasonCode) - {ReasonCode.CANCELLED}
    denied = _section("action_denied").split("| `reason.code` |")[1]
    for code in _values(ReasonCode)[:7]:
        if code == ReasonCode.POLICY_RULE:
            continue  # the rule says (its own `scar`), like an operator's rejection
        scar = _row(denied, f"`{code}`").split("|")[3].strip()
        assert (DENY_SCARS[code] or "none") == scar.strip("`")


def test_severities_are_the_ones_of_the_scar_record_mildest_first() -> None:
    row = _row(_section("scar"), "`severity`")
    assert _names(row.split("|")[3]) == _values(Severity)


def test_outcomes_are_the_ones_of_the_outcome_record() -> None:
    row = _row(_section("outcome"), "`outcome`")
    assert _names(row.split("|")[3]) == _values(Outcome)


def test_termination_reasons_are_the_automatic_ones_of_the_terminated_record() -> None:
    row = _row(_section("terminated"), "`reason`")
    assert _names(row.split("|")[3]) == _values(TerminationReason)


def test_action_statuses_are_the_ones_folding_rebuilds() -> None:
    row = _row(RECORDS_MD, "each action's status")
    documented = [name for name in _names(row) if name != "outcome"]
    assert sorted(set(documented)) == sorted(_values(ActionStatus))


def test_grant_statuses_are_the_ones_api_md_gives() -> None:
    (sentence,) = re.findall(r"`status`: (`[a-z_]+`(?:, `[a-z_]+`)* or `[a-z_]+`)", API_MD)
    assert _names(sentence) == _values(GrantStatus)


@pytest.mark.parametrize(
    "enum", [Decision, ActionStatus, Outcome, Severity, ReasonCode, TerminationReason, GrantStatus]
)
def test_members_are_their_plain_strings(enum: type[StrEnum]) -> None:
    for member in enum:
        assert member == member.value
        assert hash(member) == hash(member.value)
        assert f"{member}" == member.value
        assert member.name.lower() == member.value
