"""The PostgreSQL store: every agent's log as rows of one table, shared by
any number of guardd nodes (``guardd --store postgresql://...``). Imported
only when such a store is asked for: the file store needs no driver.

Above the rest of ``agents_runtime.log`` as ``files/`` is: it may import any
of it (and ``agents_runtime.errors``), nothing of ``core`` or ``runtime``.

Public modules (``__all__``)::

    schema      the tables, versioned, created and upgraded under a lock
    store       PgStore and PgAgentLog: log.store's protocols on PostgreSQL
    batches     how an actor's batch is committed on a log other nodes write too
    rounds      what many actors ask at one moment, in one statement
    portal      one event loop on a thread, for the seam's blocking reads
    url         a store's URL without its password (no driver needed)
"""

__all__ = ["batches", "portal", "rounds", "schema", "store", "url"]
