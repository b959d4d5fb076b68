"""The signed log: what a line of an agent's log is, how it is signed and
verified, and the seam every store implements. No clock of its own, no
domain rule: the log does not know what an action or a budget is.

May import: ``agents_runtime.errors`` only. Neither ``core`` nor ``runtime``,
and no module here imports ``files/`` or ``postgres/`` (the format and its
verification do not know where lines are kept; ``make lint`` checks both),
but ``stores``, which builds either.

Public modules (``__all__``)::

    canonical     RFC 8785 canonical JSON with exact decimals
    kinds         Kind: the one list of record kinds (adding one: its docstring)
    ids           the syntax of an agent's ID, which names its log
    record        the record: fields, hash, signature, the chain, Head
    keys          signing keys, key files, agent tokens
    verify        verification of a log: chain, signatures, genesis, checkpoint
    checkpoint    checkpoint files: each agent's committed head beside its log
    operators     the operators log: operator tokens issued and revoked, verified
    passkeys      WebAuthn passkeys: the binding an approval signs, assertion checks
    snapshot      state snapshots: an agent's state at one record, signed
    store         the storage seam: LogStore, AgentLog and BatchHost protocols
    stores        open_store: any store from where it is (the one module that knows both)
    policies      named (fleet) policies: signed versions, verified; the PolicyStore seam
    readback      reading a served log back: its records, its verification
    files         the file store (a package of its own, above the rest of log)
    postgres      the PostgreSQL store, shared by several guardd nodes (likewise)

A module whose name starts with ``_`` is the layer's own (a fast path beside
the readable reference it must equal): imported only from inside ``log`` and
from its tests.

Where to add: a new store is a sub-package here beside ``files/`` and
``postgres/``, implementing ``store.LogStore``; it may import the rest of
log, and the rest of log never imports it. A new record kind starts in
``kinds.py``.
"""

__all__ = [
    "canonical",
    "checkpoint",
    "files",
    "ids",
    "keys",
    "kinds",
    "operators",
    "passkeys",
    "policies",
    "postgres",
    "readback",
    "record",
    "snapshot",
    "store",
    "stores",
    "verify",
]
