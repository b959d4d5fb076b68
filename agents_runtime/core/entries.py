"""What an entry of the two tables holds: one ``KindEntry`` per record kind,
one ``CommandEntry`` per command, and ``Command``, the base of every command.

A concept module (``actions``, ``decisions``, ``scars``, ``termination``,
``agent``, ``grants``) declares its commands and record kinds with these,
each with every part that knows it; ``records`` gathers the kind entries
into ``KINDS`` and ``behaviour`` the command entries into ``COMMANDS``, and
whatever needs to know a kind or a command reads those tables: the fold,
``finish_interrupted``, ``audit replay`` and ``--policy``, the webhooks. An
entry cannot be made without each part every kind must answer (keyword
arguments without defaults, checked when the module is imported; the three
that only one kind needs default to what the others do), and a table cannot
be built without an entry for every kind or command, so a part or an entry
left out stops the import and names what is missing.

Where a kind has nothing to say for a part, its entry says so with one of
the named parts below (``nothing_follows``, ``no_command``, ...), so that
every entry reads the same way and a reader sees the choice was made.
"""

from __future__ import annotations

import enum
import inspect
import sys
from collections.abc import Callable, Generator, Iterable
from typing import TYPE_CHECKING, Any

import attrs

from agents_runtime.log import canonical
from agents_runtime.log.kinds import Kind
from agents_runtime.log.record import Sealed

if TYPE_CHECKING:
    from agents_runtime.core.state import AgentState, Lines, Recall

Record = dict[str, Any]
# A writer's generator: yields record fields, is sent each one sealed (and
# folded), returns the reply.
Steps = Generator[Record, Sealed, Any]


@attrs.frozen
class Command:
    """The base of every command an agent actor accepts: a frozen attrs
    value, validated by the edge (guardd) before it is built."""


class ByTimer(enum.Enum):
    """What ``starts`` gives for a record the actor's timer writes
    (``decisions.expire_due``), not a command: replay runs the timer there."""

    BY_TIMER = "by the timer"


BY_TIMER = ByTimer.BY_TIMER


class Dropped(enum.Enum):
    """Why ``audit replay --policy`` leaves out a step of the history under
    a candidate policy (``audit.whatif.RULES`` says it to the reader)."""

    LEFT_OUT = "left out"  # the candidate's own business (its policy, its agent ended already)
    OPERATOR_STEP = "operator step"  # the candidate did not hold the action for approval
    OUTCOME = "outcome"  # the candidate did not allow the action


# The parts of a kind's entry.
Fold = Callable[["AgentState", Record], None]
Finish = Callable[["AgentState", Record], Steps]
Starts = Callable[[Record], "Command | str | ByTimer | None"]
Continues = Callable[[Record, Record], bool]
Describe = Callable[[Record], str]
AsWritten = Callable[[Record, Record], Record]
Announce = Callable[[Record, "Record | None"], "tuple[str, Record] | None"]
Settles = Callable[[Record], "str | None"]
UnderCandidate = Callable[["AgentState", Record], "Dropped | None"]

# The parts of a command's entry.
Handler = Callable[["AgentState", Any, float, "Lines"], Any]
Reads = Callable[["AgentState", Any], "tuple[int, ...] | Recall"]


def signed_by(fields: dict[str, Any], by: str | None, by_id: str | None) -> dict[str, Any]:
    """``fields`` of a record an operator caused, with who they are: ``by``
    (their display name) and ``by_id`` (``oidc:<iss>#<sub>``, ``token:<id>``
    or ``admin-token``). Without ``by_id`` (the agent's own step, or a log
    from before operators had identities) ``fields`` are left as they were."""
    if by_id is not None:
        fields["by"] = by
        fields["by_id"] = by_id
    return fields


def json_text(value: Any) -> str:
    """A value as its canonical JSON, for a record's description."""
    return canonical.dumps(value).decode()


# Named parts, for a kind that has nothing to say for one.


def nothing_follows(state: AgentState, record: Record) -> Steps:
    """``finish``: no record follows this one within its command."""
    yield from ()


def no_command(record: Record) -> None:
    """``starts``: no command starts with this record."""
    return None


def never_continues(record: Record, previous: Record) -> bool:
    """``continues``: the record always starts a command of its own (or is
    written by none)."""
    return False


def no_description(record: Record) -> str:
    """``describe``: kind and action ID say enough."""
    return ""


def as_is(expected: Record, actual: Record) -> Record:
    """``as_written``: the service has always written this kind the same way."""
    return expected


def announces_nothing(record: Record, requested: Record | None) -> None:
    """``announces``: webhooks say nothing of this kind."""
    return None


def settles_nothing(record: Record) -> None:
    """``settles``: the record leaves its action's decision as it was."""
    return None


def replayed(state: AgentState, record: Record) -> None:
    """``under_candidate``: the step is run on the candidate's state as it was."""
    return None


def left_out(state: AgentState, record: Record) -> Dropped:
    """``under_candidate``: the candidate's own; never run from the history."""
    return Dropped.LEFT_OUT


_callable: Any = attrs.validators.is_callable()


@attrs.frozen(kw_only=True)
class KindEntry:
    """Everything the code knows about one record kind. Every part but the
    last three must be given; those three are exceptions that one kind
    needs, and default to what every other kind does."""

    kind: Kind = attrs.field(validator=attrs.validators.instance_of(Kind))
    # The fold: what the record changes in the agent's state (``records.apply``).
    fold: Fold = attrs.field(validator=_callable)
    # What finishing a command that a crash cut short right after this record
    # writes (``behaviour.finish_interrupted``): the same records the handler
    # would have written after it.
    finish: Finish = attrs.field(validator=_callable)
    # ``audit replay``: whether the record, after ``previous``, is a later
    # record of the same command (where a departing command ends).
    continues: Continues = attrs.field(validator=_callable)
    # ``audit replay``: the words after kind and action ID that tell the
    # record apart in a report ("" for none).
    describe: Describe = attrs.field(validator=_callable)
    # ``audit replay``: the command whose handling starts with this record,
    # rebuilt from it; a message when it cannot be rebuilt; ``BY_TIMER``; or
    # None when no command starts with it (it follows another record).
    starts: Starts = attrs.field(validator=_callable)
    # Webhooks: the event type and the data (beyond agent, seq and ts) the
    # committed record announces, or None; ``requested`` is the action's
    # ``action_requested`` record when the caller has it.
    announces: Announce = attrs.field(validator=_callable)
    # ``audit replay --policy``: the decision the record leaves its action
    # with, as the report counts it, or None when it decides nothing.
    settles: Settles = attrs.field(validator=_callable)
    # ``audit replay --policy``: why the step the record starts is left out
    # on the candidate's state, or None to run it.
    under_candidate: UnderCandidate = attrs.field(validator=_callable)
    # ``audit replay``: a record the behaviour writes, as the service wrote
    # it when the log's record was written (older logs lack some fields).
    as_written: AsWritten = attrs.field(default=as_is, validator=_callable)
    # ``audit replay``: whether two records of this kind whose descriptions
    # differ are reported as different records rather than as one record
    # whose fields differ (a denial for another reason is another denial).
    told_apart_by_description: bool = attrs.field(
        default=False, validator=attrs.validators.instance_of(bool)
    )
    # ``audit replay``: whether a record of this kind is folded as written
    # even where the command it starts is refused (action IDs must line up).
    folded_when_refused: bool = attrs.field(
        default=False, validator=attrs.validators.instance_of(bool)
    )


@attrs.frozen(kw_only=True)
class CommandEntry:
    """Everything the code knows about one command. A command that writes
    has ``writes``, a generator function; one that only reads has ``view``;
    one with neither is answered by the runtime itself (a long-poll, the
    log handle)."""

    command: type[Command] = attrs.field()
    writes: Handler | None = attrs.field()
    view: Handler | None = attrs.field()
    # The seqs of the earlier lines the reply quotes, read from the store
    # before the handler runs (``behaviour.READS``); None: it quotes none.
    reads: Reads | None = attrs.field()
    # Its reply is the agent's status, which lists every scar: those that
    # left memory (``state.scars_gone``) are read for it as ``reads`` are.
    replies_status: bool = attrs.field(default=False)

    @command.validator
    def _is_a_command(self, _: attrs.Attribute[Any], value: type[Command]) -> None:
        if not (isinstance(value, type) and issubclass(value, Command)):
            raise TypeError(f"{value!r} is not a Command class")

    def __attrs_post_init__(self) -> None:
        name = self.command.__name__
        if self.writes is not None and self.view is not None:
            raise TypeError(f"{name} has both a writer and a view")
        if self.writes is not None and not inspect.isgeneratorfunction(self.writes):
            raise TypeError(f"{name}'s writer must be a generator function")
        if self.view is not None and inspect.isgeneratorfunction(self.view):
            raise TypeError(f"{name}'s view must return its reply, not yield records")
        if self.reads is not None and not callable(self.reads):
            raise TypeError(f"{name}'s reads must be callable")


def kind_table(entries: Iterable[KindEntry]) -> dict[str, KindEntry]:
    """The entries keyed by the plain kind string (a record's ``kind`` looks
    them up); ValueError naming each kind with no entry or with two."""
    table: dict[str, KindEntry] = {}
    for entry in entries:
        if entry.kind.value in table:
            raise ValueError(f"two entries for record kind {entry.kind.value}")
        table[entry.kind.value] = entry
    missing = [kind.value for kind in Kind if kind.value not in table]
    if missing:
        raise ValueError(f"no entry for record kinds {missing}")
    return table


def command_table(entries: Iterable[CommandEntry]) -> dict[type, CommandEntry]:
    """The entries keyed by command class; ValueError naming each command
    class (a subclass of ``Command``) with no entry or with two."""
    table: dict[type, CommandEntry] = {}
    for entry in entries:
        if entry.command in table:
            raise ValueError(f"two entries for command {entry.command.__name__}")
        table[entry.command] = entry
    missing = sorted(cls.__name__ for cls in every_command() if cls not in table)
    if missing:
        raise ValueError(f"no entry for commands {missing}")
    return table


def every_command() -> list[type]:
    """Every command class: the subclasses of ``Command`` of the modules
    imported so far (``behaviour`` imports every concept module)."""
    return _subclasses(Command)


def _subclasses(cls: type) -> list[type]:
    """The subclasses of ``cls`` that their modules name. attrs replaces a
    slotted class with a new one, and the class it replaced stays among the
    subclasses until it is collected: only the one its module holds counts."""
    found: list[type] = []
    sub: type
    for sub in cls.__subclasses__():
        if getattr(sys.modules.get(sub.__module__), sub.__qualname__, None) is sub:
            found.append(sub)
        found.extend(_subclasses(sub))
    return found
