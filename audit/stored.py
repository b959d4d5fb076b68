"""``audit verify --store URL``: verify logs straight from a PostgreSQL store
that guardd nodes share, each agent's lines exactly as they are kept, with
the same checks as a log file.

The trusted public key is ``--public-key`` when given; otherwise the key the
store recorded at its first start, with a warning, since whoever can change
the rows could change that record too.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from audit.errors import InputError, UsageError
from audit.source import LOG, Source
from audit.verification import Outcome, verify_source, verify_text


class StoreError(InputError):
    """The store cannot be read (unreachable, no guard schema, no such agent)."""


def verify_store(
    url: str, *, agent_id: str | None, public_key: bytes | None
) -> Iterator[tuple[str, Outcome]]:
    """Each agent's ID and the outcome of verifying its log, in ID order."""
    try:
        from agents_runtime.errors import LogReadError
        from agents_runtime.log.postgres.store import PgStore, masked
    except ImportError as exc:  # the driver is an optional extra
        raise UsageError(
            f"--store needs the PostgreSQL driver ({exc.name}): "
            "pip install 'agent-action-guard[postgres]'"
        ) from None
    store = PgStore(url, checkpoint_dir=Path("."))
    try:
        try:
            recorded = store.recorded_keys()
            ids = [agent_id] if agent_id is not None else store.scan().agent_ids
        except LogReadError as exc:
            raise StoreError(f"cannot read the store {masked(url)}: {exc}") from None
        warnings: list[str] = []
        key = public_key
        if key is None and recorded.public_key_hex is not None:
            key = bytes.fromhex(recorded.public_key_hex)
            warnings.append(
                "the public key is the one the store records; "
                "give --public-key to check against a key you hold"
            )
        for one in ids:
            try:
                lines = store.read(one).lines
            except LogReadError as exc:
                raise StoreError(f"cannot read agent {one} from the store: {exc}") from None
            if not lines and agent_id is not None:
                raise StoreError(f"the store {masked(url)} has no agent {one}")
            source = Source(path=Path(one), format=LOG, items=list(lines))
            outcome = verify_source(source, public_key=key, log_id=one)
            if warnings:
                outcome = _with_warnings(outcome, warnings)
            yield one, outcome
    finally:
        store.close()


def _with_warnings(outcome: Outcome, warnings: list[str]) -> Outcome:
    import attrs

    return attrs.evolve(outcome, warnings=(*outcome.warnings, *warnings))


def report_json(url: str, agent_id: str, outcome: Outcome) -> str:
    from agents_runtime.log.postgres.store import masked

    body: dict[str, Any] = outcome.to_json()
    body["file"] = None
    return json.dumps({"store": masked(url), "agent_id": agent_id, **body})


def report_text(url: str, agent_id: str, outcome: Outcome) -> list[str]:
    from agents_runtime.log.postgres.store import masked

    lines = verify_text(outcome)
    return [
        f"store:      {masked(url)}, agent {agent_id}" if line.startswith("file:") else line
        for line in lines
    ]
