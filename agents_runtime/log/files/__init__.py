"""The file store: each agent's log is one file in the data directory.

The embedded default store, and the only code that knows paths of the data
directory. Above the rest of ``agents_runtime.log``: it may import any of it
(and ``agents_runtime.errors``), nothing of ``core`` or ``runtime``, and no
module of log outside this package imports it.

Public modules (``__all__``)::

    store       FileStore: log.store's LogStore and AgentLog on files
    datadir     the data directory's layout: keys, logs, checkpoints, agent IDs
    logfile     one log file: torn-tail detection, durable appends
    committer   one writer thread making every actor's batches durable per round
    lineindex   where each line starts, learnt on the first read back by seq
    cursors     where a few readers of a log stopped, so that reading on is a seek
    lock        one owner per data directory (flock)
    faults      fault injection for the reliability tests (TEST-ONLY)

Where to add: a change of layout goes in ``datadir``; a new way of making
writes durable in ``committer``/``logfile``. A second store is not added
here: it is a sibling package of this one (see ``agents_runtime.log``).
"""

__all__ = [
    "committer",
    "cursors",
    "datadir",
    "faults",
    "lineindex",
    "lock",
    "logfile",
    "policies",
    "store",
]
