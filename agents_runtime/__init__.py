"""Agents' runtime: the signed log, policies, decisions and agent actors.

Four parts, each allowed to import only those below it (``make lint`` checks
it with the contracts of ``[tool.importlinter]`` in pyproject.toml)::

    guardd                 the HTTP service (not in this package)
    runtime/               actors, their mailboxes, the registry, loading a log back
    core/                  the domain: money, policy, commands, state, checks, behaviour
    log/                   the signed log: canonical form, records, keys, verification,
                           the storage seam; log/files/ is the file store
    errors                 the one error hierarchy; imports nothing of ours at run time

``audit`` reads logs offline with core and log, never with the runtime.
Where to add:

- a store (PostgreSQL, ...): a sub-package of ``log/`` beside ``log/files/``,
  implementing ``log.store``'s protocols;
- a record kind, a command: ``log/kinds.py`` says every step (the kind's
  member there, everything else in one concept module of ``core/``);
- an error: ``errors.py``, in its tree.

Each package's ``__init__`` names its public modules in ``__all__`` and
imports none of them: importing one module of the runtime costs that module
and what it imports, no more (``import agents_runtime.errors`` loads no other
module of ours). Import names from the modules: ``from
agents_runtime.log.record import Head``.
"""

__all__ = ["core", "errors", "log", "runtime"]
