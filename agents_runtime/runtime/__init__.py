"""The runtime: one actor per agent runs the core's behaviour on its state,
seals the records, has them committed through a store and answers; the
registry loads, creates, finds and stops the actors.

May import: ``agents_runtime.core``, ``agents_runtime.log`` (logs only
through ``log.store``'s protocols: never a path) and ``agents_runtime.errors``;
never ``guardd`` (``make lint``).

Public modules (``__all__``)::

    registry   Registry: every agent's actor, loaded at start or on first use, created on demand
    actor      the agent actor and AgentRef, the handle callers ask
    replay     rebuilding an agent's state from its log: verify, then fold
    statecopy  the copy of a state that a lost race's rebuild starts from

``mailbox`` (an actor's bounded mailbox) is the actor's own; ``tasks`` (the
registry's tasks, each ended by cancellation at its stop) the registry's.

Where to add: what happens around a command (sealing, folding, timers) goes
in ``actor``; how a batch is committed (retries, fencing after a failed
write) is the store's (``AgentLog.run_batch``); what a command does goes in
``agents_runtime.core``, not here.
"""

__all__ = ["actor", "registry", "replay", "statecopy"]
