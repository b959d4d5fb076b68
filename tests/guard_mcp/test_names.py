"""Which tool names a call may use (guard_mcp.names), without a server."""

from __future__ import annotations

import pytest

from guard_mcp.names import Catalogue, fold


@pytest.mark.parametrize(
    ("name", "folded"),
    [
        pytest.param("WRITE_FILE", "write_file", id="case"),
        pytest.param("\uff37rite\uff3ffile", "write_file", id="fullwidth"),
        pytest.param("Stra\u00dfe", "strasse", id="sharp-s"),
        pytest.param("\ufb01le", "file", id="ligature"),
        pytest.param("e\u0301", "\u00e9", id="combining-accent"),
    ],
)
def test_fold_takes_case_and_compatibility_forms_away(name: str, folded: str) -> None:
    assert fold(name) == folded


def test_a_listed_name_is_callable_exactly_and_nothing_else_is() -> None:
    catalogue = Catalogue.of(["echo", "write_file"])
    assert catalogue.refusal("write_file") is None
    assert catalogue.refusal("WRITE_FILE", "fs.") == (
        "unknown tool 'fs.WRITE_FILE': the upstream server lists no tool of that name, "
        "only 'fs.write_file' (names must match exactly, in case and Unicode form)"
    )
    assert catalogue.refusal("rm") == (
        "unknown tool 'rm': the upstream server lists no tool of that name"
    )
    assert catalogue.ambiguous == ()


def test_listed_names_that_fold_alike_are_withheld_all_of_them() -> None:
    catalogue = Catalogue.of(["echo", "Write_File", "write_file", "\uff57rite_file"])
    assert catalogue.callable == frozenset({"echo"})
    assert catalogue.ambiguous == (("Write_File", "write_file", "\uff57rite_file"),)
    assert catalogue.lists("Write_File")
    assert not catalogue.lists("WRITE_FILE")
    assert catalogue.refusal("write_file") == (
        "tool 'write_file' is withheld: the upstream server also lists 'Write_File' and "
        "'\uff57rite_file', which differ from it only in case or Unicode form and may be "
        "the same tool"
    )
