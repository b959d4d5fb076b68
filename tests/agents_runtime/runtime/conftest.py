"""Stores for the runtime tests that run on both: ``make_store`` opens a
fresh handle on the same file store or PostgreSQL database each call."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from agents_runtime.log.files.datadir import DataDir
from agents_runtime.log.files.store import FileStore
from agents_runtime.log.store import LogStore
from tests.agents_runtime.support import write_test_keys

OPEN = Callable[[], LogStore]


@pytest.fixture
def file_store(tmp_path: Path) -> OPEN:
    DataDir(tmp_path).prepare()
    return lambda: FileStore(DataDir(tmp_path))


@pytest.fixture
def pg_store(tmp_path: Path, postgres_dsn: str) -> OPEN:
    from agents_runtime.log.postgres.store import PgStore

    write_test_keys(tmp_path)
    store = PgStore(postgres_dsn, checkpoint_dir=tmp_path / "checkpoints")
    store.prepare()
    store.close()
    return lambda: PgStore(postgres_dsn, checkpoint_dir=tmp_path / "checkpoints")


@pytest.fixture(params=["files", "postgres"])
def make_store(request: pytest.FixtureRequest) -> OPEN:
    name = "file_store" if request.param == "files" else "pg_store"
    return request.getfixturevalue(name)  # type: ignore[no-any-return]
