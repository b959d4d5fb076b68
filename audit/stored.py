"""``audit verify --store URL``: verify logs straight from a PostgreSQL store
that guardd nodes share, each agent's lines exactly as they are kept, with
the same checks as a log file.

The signatures are checked against ``--public-key`` when given; otherwise
against the key the store recorded at its first start, with a warning, and
that key is not reported as trusted, since whoever can change the rows could
change that record too.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs

from agents_runtime import errors
from agents_runtime.errors import LogReadError
from agents_runtime.log.postgres.url import masked
from agents_runtime.log.stores import open_database
from audit.errors import InputError, UsageError
from audit.source import LOG, Source
from audit.verification import OPERATORS_FILE, Outcome, verify_source, verify_text

OPERATORS_LOG = "operators log"  # what a report names the operators log by

# Where the key comes from without --public-key: the store's own record of it.
STORE_KEY = "the key the store records"


class StoreError(InputError):
    """The store cannot be read (unreachable, no guard schema, no such agent)."""


class StoreReader:
    """The logs of a PostgreSQL store, read only."""

    def __init__(self, url: str) -> None:
        try:
            # No checkpoints: the audit tool keeps none of its own.
            self._store = open_database(url, checkpoint_dir=Path("."))
        except errors.StoreError as exc:  # the driver is an optional extra
            raise UsageError(f"--store: {exc}") from None
        self.url = url
        self.shown = masked(url)

    def __enter__(self) -> StoreReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self._store.close()

    def recorded_key(self) -> bytes | None:
        """The audit public key the store recorded at its first start."""
        try:
            recorded = self._store.recorded_keys()
        except LogReadError as exc:
            raise StoreError(f"cannot read the store {self.shown}: {exc}") from None
        return None if recorded.public_key_hex is None else bytes.fromhex(recorded.public_key_hex)

    def agent_ids(self, agent_id: str | None) -> list[str]:
        """``agent_id`` if the store holds it (StoreError otherwise), or every agent."""
        try:
            ids = self._store.scan().agent_ids
        except LogReadError as exc:
            raise StoreError(f"cannot read the store {self.shown}: {exc}") from None
        if agent_id is None:
            return ids
        if agent_id not in ids:
            raise StoreError(f"the store {self.shown} has no agent {agent_id}")
        return [agent_id]

    def operators_source(self) -> Source:
        """The operators log as the audit tool reads a data dir's operators.jsonl."""
        try:
            lines = self._store.operators_log().read()
        except LogReadError as exc:
            raise StoreError(f"cannot read the operators log from the store: {exc}") from None
        return Source(path=Path(OPERATORS_FILE), format=LOG, items=list(lines))

    def source(self, agent_id: str) -> Source:
        """The agent's log as the audit tool reads a log file."""
        try:
            lines = self._store.read(agent_id).lines
        except LogReadError as exc:
            raise StoreError(f"cannot read agent {agent_id} from the store: {exc}") from None
        return Source(path=Path(agent_id), format=LOG, items=list(lines))


def trusted_key(reader: StoreReader, public_key: bytes | None) -> tuple[bytes | None, list[str]]:
    """``--public-key``, or else the key the store records, with a warning."""
    if public_key is not None:
        return public_key, []
    recorded = reader.recorded_key()
    if recorded is None:
        return None, []
    return recorded, [
        "the public key is the one the store records; "
        "give --public-key to check against a key you hold"
    ]


def verify_store(
    url: str, *, agent_id: str | None, public_key: bytes | None
) -> Iterator[tuple[str, Outcome]]:
    """First, unless one agent is asked for, the operators log's outcome
    (named ``operators log``) when the store holds one; then each agent's ID
    and the outcome of verifying its log, in ID order."""
    with StoreReader(url) as reader:
        key, warnings = trusted_key(reader, public_key)
        operators = reader.operators_source() if agent_id is None else None
        if operators is not None and operators.items:
            outcome = verify_source(
                operators, public_key=key, key_origin=None if public_key is not None else STORE_KEY
            )
            yield OPERATORS_LOG, _with_warnings(outcome, warnings) if warnings else outcome
        for one in reader.agent_ids(agent_id):
            outcome = verify_source(
                reader.source(one),
                public_key=key,
                log_id=one,
                key_origin=None if public_key is not None else STORE_KEY,
            )
            if warnings:
                outcome = _with_warnings(outcome, warnings)
            yield one, outcome


def store_operators_lines(url: str) -> list[bytes] | None:
    """The operators log's lines of the store at ``url`` (None: it has none)."""
    with StoreReader(url) as reader:
        source = reader.operators_source()
    if not source.items:
        return None
    return [item for item in source.items if item is not None]


def _with_warnings(outcome: Outcome, warnings: list[str]) -> Outcome:
    return attrs.evolve(outcome, warnings=(*outcome.warnings, *warnings))


def report_json(url: str, agent_id: str, outcome: Outcome) -> str:
    body: dict[str, Any] = outcome.to_json()
    body["file"] = None
    return json.dumps({"store": masked(url), "agent_id": agent_id, **body})


def report_text(url: str, agent_id: str, outcome: Outcome) -> list[str]:
    lines = verify_text(outcome)
    return [
        f"store:      {masked(url)}, agent {agent_id}" if line.startswith("file:") else line
        for line in lines
    ]
