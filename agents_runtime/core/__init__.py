"""The domain: money, policy, commands, agent state, the checks that decide
and the behaviour that turns a command into records. Pure: no I/O, no clock
(``now`` is passed in), no globals; the runtime runs it, ``audit replay``
re-runs it on a log. A command's reply is a value of the domain (the state,
an action's number, a grant, a decision); the HTTP layer renders it
(``guardd.views``), through the table the runtime is given.

May import: ``agents_runtime.log`` (records, kinds, canonical form) and
``agents_runtime.errors``; never ``runtime`` or ``guardd`` (``make lint``).

Each concept module holds its commands (frozen attrs classes), their
handlers, and the entries of the record kinds it writes: everything that
knows a command or a kind, in one place::

    actions      asking to act and reporting the outcome (action_requested, outcome)
    decisions    what settles an action: the checks' verdict, approve, reject,
                 cancel, the approval timeout (approval_required, action_allowed, ...)
    scars        scars and the score (scar)
    termination  how an agent ends, by an operator or at its limits (terminated)
    agent        genesis, the policy in force, the status (genesis, policy)
    grants       bounded grants (grant_issued, grant_revoked)

They import each other one way only, as the automatic records chain
(a scar may terminate, a denial scars, a new policy expires held actions):
termination, then scars, decisions, actions and agent; grants only by
actions. Below them::

    entries      what an entry of the two tables holds; Command, every command's base
    state        the agent's state (the model) and its queries
    idempotency  the Idempotency-Keys past the recent actions, kept compactly
    answers      what a decision answers with (Allowed, Denied, Pending), as values
    checks       decide(): the checks, in their fixed order (policy rules among them)
    rate_history the allowed times a window in force reaches; a widened one's, read back
    conditions   the rules' CEL expressions: compiled once, evaluated on facts
    vocabulary   decisions, action statuses, outcomes, severities, reason codes
    snapshot     the state as JSON and back, generically (what a state snapshot holds)
    money, policy, validation

Above them, the two tables::

    records      KINDS: every record kind's entry; apply(), the fold
    behaviour    COMMANDS: every command's entry; WRITERS, VIEWS, READS, run(),
                 finish_interrupted()
    commands     every command by name, for the edge (``c.RequestAction``)

Where to add: a record kind and the command that writes it go in one
concept module (a new one, or the one whose concept they belong to), after
the kind's member in ``agents_runtime.log.kinds``, whose docstring lists
every step; a new word of the domain goes in ``vocabulary``.
"""

__all__ = [
    "actions",
    "agent",
    "answers",
    "behaviour",
    "checks",
    "commands",
    "conditions",
    "decisions",
    "entries",
    "grants",
    "idempotency",
    "money",
    "policy",
    "rate_history",
    "records",
    "scars",
    "snapshot",
    "state",
    "termination",
    "validation",
    "vocabulary",
]
