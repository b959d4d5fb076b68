"""open_store builds any store from where it is, connecting to nothing;
without the PostgreSQL driver it says in one line how to install it."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from agents_runtime.errors import StoreError
from agents_runtime.log.files.store import FileStore
from agents_runtime.log.postgres.store import PgStore
from agents_runtime.log.stores import open_database, open_store

NO_DRIVER = (
    "the PostgreSQL store needs its driver, asyncpg, which is not installed;"
    " install it with: .venv/bin/pip install -e '.[postgres]'"
)
URL = "postgresql://guard@127.0.0.1:1/nowhere"  # never connected to


def test_a_path_gives_the_file_store_and_touches_nothing(tmp_path: Path) -> None:
    store = open_store(tmp_path / "guard-data")
    assert isinstance(store, FileStore)
    assert store.describe() == f"files in {tmp_path / 'guard-data' / 'agents'}"
    assert not (tmp_path / "guard-data").exists()


@pytest.mark.parametrize("url", [URL, URL.replace("postgresql", "postgres", 1)])
def test_a_url_gives_the_postgresql_store_and_connects_to_nothing(url: str, tmp_path: Path) -> None:
    store = open_store(url, checkpoint_dir=tmp_path / "checkpoints")
    assert isinstance(store, PgStore)
    assert store.default_checkpoint_dir() == tmp_path / "checkpoints"
    store.close()


def test_without_the_driver_the_error_names_the_install_command(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setitem(sys.modules, "asyncpg", None)  # import asyncpg now fails
    monkeypatch.delitem(sys.modules, "agents_runtime.log.postgres.store")
    with pytest.raises(StoreError) as refused:
        open_store(URL, checkpoint_dir=tmp_path)
    assert str(refused.value) == NO_DRIVER
    assert refused.value.__cause__ is None
    assert refused.value.__suppress_context__  # printed as one line, no chained traceback


def test_open_database_refuses_what_is_not_a_database_url(tmp_path: Path) -> None:
    with pytest.raises(
        StoreError, match=r"^not a PostgreSQL URL: 'guard-data' \(postgresql://...\)$"
    ):
        open_database("guard-data", checkpoint_dir=tmp_path)
