"""What an agent does with each command: the table of commands, and running one.

``COMMANDS`` holds one ``CommandEntry`` for every command class, gathered
from the concept modules that declare them (``records.CONCEPTS``); importing
this module fails, naming the command, if one has no entry. ``WRITERS``, ``VIEWS`` and
``READS`` are derived from it, keyed by command class, so the actor finds a
command's handler with one dict lookup.

A command that writes has a handler that checks it against the state, then
``yield``s the fields of each record to write, and returns the reply. The
handler neither seals nor applies: whoever runs it (the actor, or ``audit
replay``) seals each record, folds it into the state with ``apply``, and
sends the ``Sealed`` record back into the generator, which goes on from
there (a receipt quotes the lines it got back). So the state a handler reads
changes only at a ``yield``, and only by the fold that replay runs too.

A command that only reads has a view: a plain function of the state.

Either answers with a value of the domain, never its wire form: the state,
an action's number, a grant, the policy, or a decision (``answers``). The
HTTP layer renders it (``guardd.views``), in the actor's turn.

Neither does I/O or reads a clock: ``now`` is the ``ts`` of the records a
batch writes, and an earlier record a reply quotes (the first decision of an
``Idempotency-Key`` repeat, a finished action's input) comes in ``lines``,
read beforehand by the runtime from the store: ``READS`` says which.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agents_runtime.core.decisions import expire_due as expire_due
from agents_runtime.core.entries import CommandEntry, Handler, Reads, Steps, command_table
from agents_runtime.core.records import CONCEPTS, entry_of
from agents_runtime.core.state import NO_LINES as NO_LINES
from agents_runtime.core.state import AgentState, Lines
from agents_runtime.core.vocabulary import SYSTEM as SYSTEM
from agents_runtime.log.record import Sealed

Write = Callable[[dict[str, Any]], Sealed]

COMMANDS: dict[type, CommandEntry] = command_table(
    entry for concept in CONCEPTS for entry in concept.COMMAND_ENTRIES
)
# The commands that write: each handler is a generator (``Steps``).
WRITERS: dict[type, Handler] = {
    command: entry.writes for command, entry in COMMANDS.items() if entry.writes is not None
}
# The commands that only read: each view returns its reply.
VIEWS: dict[type, Handler] = {
    command: entry.view for command, entry in COMMANDS.items() if entry.view is not None
}
# The commands whose reply may quote earlier records: the seqs of the lines
# their handler needs in ``lines``, read from the store before it runs.
READS: dict[type, Reads] = {
    command: entry.reads for command, entry in COMMANDS.items() if entry.reads is not None
}
# The commands whose reply is the agent's status: it quotes every scar, the
# lines of those that left memory read beforehand too.
REPLIES_STATUS: frozenset[type] = frozenset(
    command for command, entry in COMMANDS.items() if entry.replies_status
)


def finish_interrupted(state: AgentState) -> Steps:
    """Write what a crash kept the last command from writing.

    A command's records reach the disk in one write, but a crash can cut that
    write short: startup moves the torn line aside, and the whole lines before
    it stay in the log. They were never acknowledged, yet they are the log, so
    the command is finished now as its handler would have finished it (same
    checks, ``now`` = the ``ts`` of its records), before the agent takes any
    new command. Otherwise an action could stay undecided for ever (and an
    Idempotency-Key retry would find no decision), or an agent could stay
    alive past its scar limit or with its budget spent. A complete last
    command writes nothing here. What follows each kind is its entry's
    ``finish``.
    """
    last = state.last_record
    if last is None:
        return
    entry = entry_of(last["kind"])
    if entry is not None:
        yield from entry.finish(state, last)


def run_steps(steps: Steps, write: Write) -> Any:
    """Run a writer's generator: ``write`` each record it yields (seal and
    fold it), send the sealed record back, and return the reply."""
    try:
        fields = next(steps)
        while True:
            fields = steps.send(write(fields))
    except StopIteration as done:
        return done.value


def run(state: AgentState, command: Any, now: float, lines: Lines, write: Write) -> Any:
    """Run ``command`` on ``state``: a view, or a writer whose records go to
    ``write``; its reply. ``lines`` holds what ``READS`` names for it."""
    kind = type(command)
    writer = WRITERS.get(kind)
    if writer is not None:
        return run_steps(writer(state, command, now, lines), write)
    return VIEWS[kind](state, command, now, lines)
