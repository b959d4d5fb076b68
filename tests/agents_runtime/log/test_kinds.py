"""agents_runtime.log.kinds: the one list of record kinds, docs/records.md
holds exactly that list, and a member goes onto the wire as its plain string."""

from __future__ import annotations

import re
from decimal import Decimal
from pathlib import Path

import orjson
import pytest

from agents_runtime.log import canonical, record
from agents_runtime.log.keys import Signer
from agents_runtime.log.kinds import Kind, table
from agents_runtime.log.record import Head

ROOT = Path(__file__).parents[3]
RECORDS_MD = (ROOT / "docs" / "records.md").read_text(encoding="utf-8")


def test_every_kind_has_its_section_in_records_md_and_no_other() -> None:
    # "## `<kind>`" headings are the sections of the kinds; the page's other
    # headings are prose.
    documented = re.findall(r"^## `([a-z_]+)`$", RECORDS_MD, re.MULTILINE)
    assert len(documented) == len(set(documented))
    assert set(documented) == {kind.value for kind in Kind}


def test_every_kind_is_in_the_command_table_of_records_md() -> None:
    commands = RECORDS_MD.split("## Commands and the records they write")[1].split("\n## ")[0]
    named = set(re.findall(r"`([a-z_]+)`", commands))
    assert {kind.value for kind in Kind} <= named


@pytest.mark.parametrize(
    "value",
    [
        {"kind": Kind.ACTION_ALLOWED, "cost": Decimal("0.3"), "note": "plain ascii"},
        {"kind": Kind.SCAR, "reason": "ünïcödé 𝄞 sorts by UTF-16", "é": 1, "z": [Kind.POLICY]},
        [Kind.GENESIS, {"nested": {"kind": Kind.GRANT_REVOKED}}],
    ],
)
def test_a_member_is_written_exactly_as_its_string(value: object) -> None:
    """Both writers of canonical.dumps (orjson for ASCII output, rfc8785 for
    the rest) give a member's bytes as its value's, and so does guardd's."""

    def plain(v: object) -> object:
        if isinstance(v, Kind):
            return v.value
        if isinstance(v, dict):
            return {k: plain(x) for k, x in v.items()}
        if isinstance(v, list):
            return [plain(x) for x in v]
        return v

    as_strings = plain(value)
    assert canonical.dumps(value) == canonical.dumps(as_strings)
    options = {"default": canonical.number_fragment}
    assert orjson.dumps(value, **options) == orjson.dumps(as_strings, **options)


def test_a_sealed_record_is_the_same_with_a_member_or_its_string() -> None:
    signer = Signer(bytes(range(32)))
    prev = Head.empty()
    ts = "2026-01-01T00:00:00.000000Z"
    by_member = record.seal({"kind": Kind.POLICY, "x": 1}, prev=prev, ts=ts, signer=signer)
    by_string = record.seal({"kind": "policy", "x": 1}, prev=prev, ts=ts, signer=signer)
    assert by_member.line == by_string.line
    assert record.genesis_fields("a", "00" * 32)["kind"] == "genesis"


def test_members_are_strings_that_hash_and_compare_as_their_values() -> None:
    for kind in Kind:
        assert isinstance(kind, str)
        assert kind == kind.value
        assert hash(kind) == hash(kind.value)
        assert str(kind) == f"{kind}" == kind.value
        assert type(str(kind)) is str
    read_back = canonical.loads(canonical.dumps({"kind": Kind.ACTION_DENIED}))
    assert read_back["kind"] == Kind.ACTION_DENIED
    assert {Kind.ACTION_DENIED: 1}[read_back["kind"]] == 1


def test_a_member_cannot_key_a_dict_written_as_json() -> None:
    # Pinned so that nobody keys a JSON object by members: orjson takes only
    # exact str keys. Key such dicts by ``.value``.
    with pytest.raises(TypeError):
        orjson.dumps({Kind.SCAR: 1})


def test_table_is_keyed_by_plain_strings_and_refuses_a_missing_kind() -> None:
    every = table({kind: kind.value.upper() for kind in Kind})
    assert all(type(key) is str for key in every)
    assert every["action_allowed"] == "ACTION_ALLOWED"
    with pytest.raises(ValueError, match="grant_revoked"):
        table({kind: 1 for kind in Kind if kind is not Kind.GRANT_REVOKED})
    partial = table({Kind.SCAR: 1}, complete=False)
    assert partial == {"scar": 1}
    assert type(next(iter(partial))) is str
    with pytest.raises(ValueError, match="not_a_kind"):
        table({"not_a_kind": 1}, complete=False)  # type: ignore[dict-item]
