"""The domain: money, policy, commands, agent state, the checks that decide
and the behaviour that turns a command into records. Pure: no I/O, no clock
(``now`` is passed in), no globals; the runtime runs it, ``audit replay``
re-runs it on a log.

May import: ``agents_runtime.log`` (records, kinds, canonical form) and
``agents_runtime.errors``; never ``runtime`` or ``guardd`` (``make lint``).

Public modules (``__all__``)::

    vocabulary   decisions, action statuses, outcomes, severities, reason codes
    money        exact Decimal money
    policy       the policy model and its strict parser
    commands     the commands an agent accepts (frozen, validated by guardd)
    state        agent state as a fold over its records (apply), and its views
    behaviour    each command's handler: checks, then the records it yields
    validation   cattrs failures as messages that name the key path

``checks`` (the decision, in order) and ``grants`` (bounded grants) are
used through ``behaviour`` and ``state``, not from outside.

Where to add: a new command is a class in ``commands`` and its handler in
``behaviour.WRITERS`` or ``behaviour.VIEWS`` (then the route in guardd that builds it, and
``audit/replay.py``'s ``command_for``); a new record kind starts in
``agents_runtime.log.kinds``, whose docstring lists every step; a new word
of the domain goes in ``vocabulary``.
"""

__all__ = [
    "behaviour",
    "commands",
    "money",
    "policy",
    "state",
    "validation",
    "vocabulary",
]
