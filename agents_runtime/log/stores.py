"""``open_store``: any store, built from where it is, in one place.

A data directory's path gives the file store; a ``postgresql://`` (or
``postgres://``) URL gives the PostgreSQL store. guardd, ``guardd migrate``
and the audit tool build their stores here and nowhere else.

This is the one module of the log layer that knows both stores (the
import-linter contracts in pyproject.toml let it, and no other): the rest of
log knows neither, and each store knows only itself. The PostgreSQL store
is imported only when a URL asks for it, so the file store needs no
database driver; without the driver, ``StoreError`` says in one line how
to install it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from agents_runtime.errors import StoreError
from agents_runtime.log.files.datadir import DataDir
from agents_runtime.log.files.logfile import FileIO
from agents_runtime.log.files.store import FileStore
from agents_runtime.log.store import LogStore

if TYPE_CHECKING:
    from collections.abc import Callable

    from agents_runtime.log.postgres.store import PgStore

URL_SCHEMES = ("postgresql://", "postgres://")
# How to install the PostgreSQL driver in a clone of this repository.
INSTALL_POSTGRES = ".venv/bin/pip install -e '.[postgres]'"


def is_database_url(where: str | os.PathLike[str]) -> bool:
    """Whether ``where`` names a database rather than a data directory."""
    return isinstance(where, str) and where.startswith(URL_SCHEMES)


def open_store(
    where: str | os.PathLike[str],
    *,
    checkpoint_dir: Path | None = None,
    io_for: Callable[[str], FileIO] | None = None,
) -> LogStore:
    """The store at ``where``: a data directory's path (the file store, its
    logs written with ``io_for``'s system calls) or a database URL (the
    PostgreSQL store, whose node keeps its checkpoints in
    ``checkpoint_dir``). Nothing is read, created or connected yet.
    StoreError when the store's driver is not installed."""
    if is_database_url(where):
        return open_database(str(where), checkpoint_dir=checkpoint_dir or Path("."))
    return FileStore(DataDir(Path(where)), io_for=io_for)


def open_database(url: str, *, checkpoint_dir: Path) -> PgStore:
    """The PostgreSQL store at ``url`` (``open_store`` for a URL, typed for
    the callers that need what only it has: its schema, its recorded keys).
    StoreError when ``url`` is not a database URL or the driver is missing."""
    if not is_database_url(url):
        raise StoreError(f"not a PostgreSQL URL: {url!r} (postgresql://...)")
    try:
        from agents_runtime.log.postgres.store import PgStore
    except ImportError as exc:
        if exc.name is None or exc.name.split(".")[0] != "asyncpg":
            raise
        raise StoreError(
            "the PostgreSQL store needs its driver, asyncpg, which is not installed;"
            f" install it with: {INSTALL_POSTGRES}"
        ) from None
    return PgStore(url, checkpoint_dir=checkpoint_dir)
