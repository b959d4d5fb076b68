"""The two tables: every record kind and every command has one complete
entry, a missing entry or part stops the import and is named, the tables the
hot paths read are plain dicts keyed for one lookup, and docs/records.md
names the module that declares each kind."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import attrs
import pytest

from agents_runtime.core import behaviour, commands, records
from agents_runtime.core.behaviour import (
    NO_LINES,
    READS,
    VIEWS,
    WRITERS,
    expire_due,
    finish_interrupted,
    run,
    run_steps,
)
from agents_runtime.core.entries import (
    Command,
    CommandEntry,
    KindEntry,
    Steps,
    command_table,
    every_command,
    kind_table,
)
from agents_runtime.core.state import AgentState, Lines
from agents_runtime.log.kinds import Kind

ROOT = Path(__file__).parents[3]
RECORDS_MD = (ROOT / "docs" / "records.md").read_text(encoding="utf-8")
KIND_PARTS = [field.name for field in attrs.fields(KindEntry) if field.name != "kind"]
# The parts every kind must state; the others are exceptions one kind needs.
REQUIRED_PARTS = [
    field.name
    for field in attrs.fields(KindEntry)
    if field.name != "kind" and field.default is attrs.NOTHING
]
# Answered by the actor itself: a long-poll, the log's handle.
RUNTIME_COMMANDS = {commands.WatchAction, commands.GetLogView}


def _every_kind_entry() -> list[KindEntry]:
    return [entry for concept in records.CONCEPTS for entry in concept.KIND_ENTRIES]


def _every_command_entry() -> list[CommandEntry]:
    return [entry for concept in records.CONCEPTS for entry in concept.COMMAND_ENTRIES]


def test_every_kind_has_exactly_one_entry_keyed_by_its_plain_string() -> None:
    assert set(records.KINDS) == {kind.value for kind in Kind}
    assert all(type(key) is str for key in records.KINDS)
    assert all(entry.kind == key for key, entry in records.KINDS.items())
    assert len(_every_kind_entry()) == len(Kind)


def test_a_kind_without_an_entry_is_named() -> None:
    entries = [entry for entry in _every_kind_entry() if entry.kind is not Kind.OUTCOME]
    with pytest.raises(ValueError, match=r"^no entry for record kinds \['outcome'\]$"):
        kind_table(entries)


def test_a_kind_with_two_entries_is_refused() -> None:
    entries = _every_kind_entry()
    with pytest.raises(ValueError, match=r"^two entries for record kind scar$"):
        kind_table([*entries, records.KINDS["scar"]])


def test_the_required_parts_are_the_ones_every_kind_must_answer() -> None:
    assert REQUIRED_PARTS == [
        "fold",
        "finish",
        "continues",
        "describe",
        "starts",
        "announces",
        "settles",
        "under_candidate",
    ]


@pytest.mark.parametrize("part", REQUIRED_PARTS)
def test_an_entry_without_one_of_its_parts_cannot_be_made(part: str) -> None:
    parts = attrs.asdict(records.KINDS["scar"], recurse=False)
    del parts[part]
    with pytest.raises(TypeError, match=rf"'{part}'"):
        KindEntry(**parts)


@pytest.mark.parametrize(
    "part", [name for name in KIND_PARTS if not name.startswith(("told_", "folded_"))]
)
def test_a_part_that_cannot_be_called_is_refused(part: str) -> None:
    with pytest.raises(TypeError, match=rf"'{part}' must be callable"):
        attrs.evolve(records.KINDS["scar"], **{part: None})


def test_the_fold_table_is_one_plain_dict_keyed_by_the_kind_strings() -> None:
    folds = records._FOLD
    assert type(folds) is dict
    assert set(folds) == {kind.value for kind in Kind}
    assert all(type(key) is str for key in folds)
    assert all(folds[key] is entry.fold for key, entry in records.KINDS.items())


def test_every_command_has_exactly_one_entry() -> None:
    every = set(every_command())
    assert set(behaviour.COMMANDS) == every
    assert len(_every_command_entry()) == len(every)
    assert Command not in every


def test_every_command_the_edge_builds_by_name_is_a_command_with_an_entry() -> None:
    named = (getattr(commands, name) for name in commands.__all__)
    classes = {x for x in named if isinstance(x, type)} - {Command}
    assert classes <= set(behaviour.COMMANDS)


def test_the_derived_tables_cover_every_command_the_actor_does_not_answer_itself() -> None:
    writers, views = set(behaviour.WRITERS), set(behaviour.VIEWS)
    assert not writers & views
    assert writers | views == set(behaviour.COMMANDS) - RUNTIME_COMMANDS
    assert set(behaviour.READS) <= writers | views
    for table in (behaviour.WRITERS, behaviour.VIEWS, behaviour.READS):
        assert type(table) is dict
        assert all(isinstance(key, type) for key in table)


def test_a_command_without_an_entry_is_named() -> None:
    entries = [e for e in _every_command_entry() if e.command is not commands.Terminate]
    with pytest.raises(ValueError, match=r"^no entry for commands \['Terminate'\]$"):
        command_table(entries)


def test_a_command_with_two_entries_is_refused() -> None:
    entries = _every_command_entry()
    with pytest.raises(ValueError, match=r"^two entries for command AddScar$"):
        command_table([*entries, behaviour.COMMANDS[commands.AddScar]])


def _writer(state: AgentState, cmd: Any, now: float, lines: Lines) -> Steps:
    yield {"kind": Kind.SCAR}


def _view(state: AgentState, cmd: Any, now: float, lines: Lines) -> Any:
    return {}


@pytest.mark.parametrize(
    ("parts", "message"),
    [
        pytest.param(
            {"writes": _writer, "view": _view},
            r"^GetStatus has both a writer and a view$",
            id="both",
        ),
        pytest.param(
            {"writes": _view, "view": None},
            r"^GetStatus's writer must be a generator function$",
            id="writer-that-returns",
        ),
        pytest.param(
            {"writes": None, "view": _writer},
            r"^GetStatus's view must return its reply, not yield records$",
            id="view-that-yields",
        ),
    ],
)
def test_a_command_entry_whose_handler_does_not_fit_is_refused(
    parts: dict[str, Any], message: str
) -> None:
    with pytest.raises(TypeError, match=message):
        CommandEntry(command=commands.GetStatus, reads=None, **parts)


def test_only_command_classes_have_entries() -> None:
    with pytest.raises(TypeError, match=r"is not a Command class$"):
        CommandEntry(command=dict, writes=None, view=_view, reads=None)  # type: ignore[arg-type]


def test_the_names_the_actor_takes_from_the_behaviour_are_the_derived_tables() -> None:
    assert NO_LINES == {}
    assert (READS, VIEWS, WRITERS) == (behaviour.READS, behaviour.VIEWS, behaviour.WRITERS)
    assert all(callable(f) for f in (expire_due, finish_interrupted, run, run_steps))


@pytest.mark.parametrize("kind", [kind.value for kind in Kind])
def test_records_md_names_the_module_that_declares_each_kind(kind: str) -> None:
    section = RECORDS_MD.split(f"## `{kind}`\n")[1].split("\n## ")[0]
    named = re.findall(r"Declared in `agents_runtime/core/([a-z_]+)\.py`", section)
    assert len(named) == 1, f"the section of {kind} names no module (or several)"
    (concept,) = [c for c in records.CONCEPTS if c.__name__.endswith(f".{named[0]}")]  # type: ignore[attr-defined]
    assert kind in {entry.kind for entry in concept.KIND_ENTRIES}
