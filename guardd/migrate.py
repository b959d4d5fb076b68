"""``guardd migrate``: copy every file log of a data dir into a PostgreSQL
store, so that a user moves from one box to several nodes with their history,
and the named (fleet) policies those logs follow, every version, first, and
the operators log (the operator tokens issued and revoked), so that every
token issued still works, a revoked one stays revoked, and the records that
name a token (``by_id: token:<token_id>``) still name one the store knows.

    guardd migrate --data-dir ./guard-data --store postgresql://...

The data dir's lock is held throughout: no guardd may run on it meanwhile.
Each log is verified first (signatures, chain, its checkpoint) and copied
byte for byte, in transactions of at most ``CHUNK_LINES`` lines, and only
then registered in the store: no node serves a log half copied. A log that
fails verification is refused with its reason and the rest are copied; the
exit status is then 1. Running it again is harmless: a log the store holds
whole (or with more that nodes wrote since) is left alone, one it holds the
start of (a copy cut short, or a file that grew since) gets the rest, and
one the store holds differently is refused. The data dir's keys become the
store's (a store that records other keys is refused, as a node with other
keys would be).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from agents_runtime.errors import (
    DataDirError,
    KeyFileError,
    LogReadError,
    LogWriteError,
    StoreError,
)
from agents_runtime.log import canonical
from agents_runtime.log.checkpoint import CheckpointDir, CheckpointFileError
from agents_runtime.log.files.datadir import DataDir
from agents_runtime.log.files.lock import DataDirLock
from agents_runtime.log.files.policies import FilePolicies
from agents_runtime.log.keys import KeyRing, load_keys
from agents_runtime.log.operators import verify_operators
from agents_runtime.log.policies import PolicyStoreError, verify_versions
from agents_runtime.log.record import Head
from agents_runtime.log.store import Committed, HeadGone, HeadMoved, LogContents
from agents_runtime.log.stores import is_database_url, open_database, open_store
from agents_runtime.runtime.replay import quarantine_message, replay

if TYPE_CHECKING:
    from agents_runtime.log.postgres.store import PgStore

CHUNK_LINES = 5000  # lines a transaction copies


def build_parser(env: dict[str, str]) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="guardd migrate",
        description="Copy every log of a data dir into a PostgreSQL store, verified first.",
    )
    parser.add_argument(
        "--data-dir",
        default=env.get("GUARD_DATA_DIR", "guard-data"),
        help="the data dir whose logs to copy (default: guard-data; environment: GUARD_DATA_DIR)",
    )
    parser.add_argument(
        "--store",
        default=env.get("GUARD_STORE"),
        metavar="URL",
        help="the postgresql:// store to copy into (environment: GUARD_STORE)",
    )
    return parser


def main(argv: list[str], out: TextIO = sys.stdout) -> int:
    args = build_parser(dict(os.environ)).parse_args(argv)
    if not args.store or not is_database_url(args.store):
        print("guardd migrate: --store must be a postgresql:// URL", file=sys.stderr)
        return 1
    root = Path(args.data_dir)
    if not (root / "agents").is_dir():
        print(f"guardd migrate: {root} is not a data dir (no agents/)", file=sys.stderr)
        return 1
    data_dir = DataDir(root)
    try:
        # Before the lock: a store that cannot be opened leaves nothing behind.
        store = open_database(args.store, checkpoint_dir=data_dir.checkpoints_dir)
        lock = DataDirLock.acquire(root)
    except (StoreError, DataDirError) as exc:
        print(f"guardd migrate: {exc}", file=sys.stderr)
        return 1
    try:
        return _migrate(data_dir, store, out)
    except (KeyFileError, DataDirError, LogReadError, LogWriteError) as exc:
        print(f"guardd migrate: {exc}", file=sys.stderr)
        return 1
    finally:
        lock.release()


def _migrate(data_dir: DataDir, store: PgStore, out: TextIO) -> int:
    from agents_runtime.log.postgres.schema import SchemaError
    from agents_runtime.log.postgres.store import masked, token_fingerprint

    url = store.url
    ring = load_keys(data_dir.keys_dir)
    try:
        try:
            store.prepare()
        except (LogReadError, SchemaError) as exc:
            raise DataDirError(f"cannot use the store {masked(url)}: {exc}") from None
        store.adopt_keys(ring.public_key_hex, token_fingerprint(ring.token_key))
        return asyncio.run(_copy_all(data_dir, ring, store, out))
    finally:
        store.close()


async def _copy_all(data_dir: DataDir, ring: KeyRing, store: PgStore, out: TextIO) -> int:
    files = open_store(data_dir.root)
    checkpoints = CheckpointDir(data_dir.checkpoints_dir)
    scan = files.scan()
    for line in scan.odd:
        print(line, file=out)
    copied = present = refused = records = 0
    try:
        refused += await _copy_policies(data_dir, ring, store, out)
        refused += await _copy_operators(files.operators_log().read(), ring, store, out)
        for agent_id in scan.agent_ids:
            try:
                stored = checkpoints.read(agent_id)
            except CheckpointFileError as exc:
                print(f"refused: {agent_id}: {exc}", file=out)
                refused += 1
                continue
            # As at startup: a signed checkpoint counts only when it verifies
            # (else the log is verified whole), an older unsigned one as read.
            checkpoint = None
            if stored is not None and not stored.is_signed_note:
                checkpoint = stored.checkpoint
            elif stored is not None:
                checkpoint = stored.trusted(ring.public_key, agent_id)
                if checkpoint is None:
                    why = stored.problem(ring.public_key, agent_id)
                    print(f"{agent_id}: ignoring its checkpoint: {why}", file=out)
            contents = files.read(agent_id)
            loaded = replay(agent_id, contents, ring.public_key, checkpoint=checkpoint)
            if loaded.failure is not None:
                print(f"refused: {agent_id}: {quarantine_message(loaded.failure)}", file=out)
                refused += 1
                continue
            if contents.torn_tail is not None:
                print(f"{agent_id}: a torn final line is not copied (never acknowledged)", file=out)
            lines = contents.lines
            # Rows as they are, registered or not (a copy cut short is not).
            held = await asyncio.to_thread(store.fetch_lines, agent_id, -1, 2**62)
            if held[: len(lines)] == lines and len(held) >= len(lines):
                await store.register(agent_id)
                more = len(held) - len(lines)
                since = f"; {more} more written by nodes since" if more else ""
                print(f"already there: {agent_id} ({len(lines)} records{since})", file=out)
                present += 1
                continue
            if lines[: len(held)] != held:
                print(
                    f"refused: {agent_id}: the store holds another log of this agent"
                    f" ({len(held)} records); nothing copied",
                    file=out,
                )
                refused += 1
                continue
            try:
                await _copy(store, agent_id, held, lines)
            except HeadGone:
                print(
                    f"refused: {agent_id}: rows of this agent were deleted from the store"
                    " while it was copied; run migrate again",
                    file=out,
                )
                refused += 1
                continue
            except HeadMoved:
                print(
                    f"refused: {agent_id}: a node wrote to this agent's log while it was"
                    " copied; run migrate again",
                    file=out,
                )
                refused += 1
                continue
            await store.register(agent_id)
            copied += 1
            records += len(lines) - len(held)
            there = f", {len(held)} were there" if held else ""
            print(f"copied: {agent_id} ({len(lines) - len(held)} records{there})", file=out)
        if records:
            await store.analyze()
    finally:
        await store.aclose()
    print(
        f"migrated {copied} agents ({records} records); {present} already there; {refused} refused",
        file=out,
    )
    return 1 if refused else 0


async def _copy_policies(data_dir: DataDir, ring: KeyRing, store: PgStore, out: TextIO) -> int:
    """Copy the named policies (every version, verified first), before the
    logs that follow them; how many were refused. A name the store holds a
    start of gets the rest; one it holds otherwise is refused."""
    refused = 0
    found = FilePolicies(data_dir.policies_dir).load()
    held_all = await asyncio.to_thread(store.policies.load)
    for name, lines in sorted(found.items()):
        try:
            versions = verify_versions(name, lines, ring.public_key)
        except PolicyStoreError as exc:
            print(f"refused: named policy {name}: {exc}", file=out)
            refused += 1
            continue
        held = held_all.get(name, [])
        if held[: len(lines)] == lines and len(held) >= len(lines):
            print(f"already there: named policy {name} ({len(lines)} versions)", file=out)
            continue
        if lines[: len(held)] != held:
            print(f"refused: named policy {name}: the store holds other versions of it", file=out)
            refused += 1
            continue
        try:
            for version in versions[len(held) :]:
                await store.policies.put(version)
        except PolicyStoreError as exc:
            print(f"refused: named policy {name}: {exc}", file=out)
            refused += 1
            continue
        print(f"copied: named policy {name} ({len(versions) - len(held)} versions)", file=out)
    return refused


async def _copy_operators(lines: list[bytes], ring: KeyRing, store: PgStore, out: TextIO) -> int:
    """Copy the operators log, verified first; 1 when it is refused, else 0.
    A store holding its start gets the rest; one holding another log (the
    tokens of other nodes, issued before this copy) is refused, as a node
    could not trust both."""
    if not lines:
        return 0
    report = verify_operators(lines, public_key=ring.public_key)
    if report.failure is not None:
        failure = report.failure
        where = f"line {failure.line}" + (
            f" (seq {failure.seq})" if failure.seq is not None else ""
        )
        print(f"refused: the operators log: {where}: {failure.reason}", file=out)
        return 1
    log = store.operators_log()
    held = await asyncio.to_thread(log.read)
    if held[: len(lines)] == lines and len(held) >= len(lines):
        print(f"already there: the operators log ({len(lines)} records)", file=out)
        return 0
    if lines[: len(held)] != held:
        print(
            f"refused: the operators log: the store holds another one ({len(held)} records);"
            " nothing copied",
            file=out,
        )
        return 1
    try:
        await log.append(lines[len(held) :], len(held) - 1)
    except HeadMoved:
        print(
            "refused: the operators log: a node wrote to it while it was copied; run migrate again",
            file=out,
        )
        return 1
    print(f"copied: the operators log ({len(lines) - len(held)} records)", file=out)
    return 0


async def _copy(store: PgStore, agent_id: str, held: list[bytes], lines: list[bytes]) -> None:
    """Append ``lines`` after the ``held`` ones, a chunk a transaction; the
    agent is registered only afterwards (by the caller)."""
    start = len(held)
    log = store.open(agent_id, LogContents.of_lines(held), writable=True)
    size = sum(len(line) + 1 for line in held)
    head = Head.empty()
    if held:
        last = canonical.loads(held[-1])
        head = Head(last["seq"], last["hash"])
    while start < len(lines):
        chunk = lines[start : start + CHUNK_LINES]
        data = b"".join(line + b"\n" for line in chunk)
        await log.append(data, Committed(head, size))
        last = canonical.loads(chunk[-1])
        head = Head(last["seq"], last["hash"])
        start += len(chunk)
        size += len(data)
