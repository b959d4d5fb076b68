"""The PostgreSQL store: every agent's log as rows of one table, shared by
any number of guardd nodes (``guardd --store postgresql://...``). Imported
only when such a store is asked for: the file store needs no driver.

Above the rest of ``agents_runtime.log`` as ``files/`` is: it may import any
of it (and ``agents_runtime.errors``), nothing of ``core`` or ``runtime``.

Public modules (``__all__``)::

    schema      the tables, versioned, created and upgraded under a lock
    store       PgStore and PgAgentLog: log.store's protocols on PostgreSQL
    portal      one event loop on a thread, for the seam's blocking reads
"""

__all__ = ["portal", "schema", "store"]
