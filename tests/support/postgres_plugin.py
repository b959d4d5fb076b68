"""pytest fixtures for a real PostgreSQL: one server a session, a fresh database a test.

A test that asks for ``postgres_dsn`` (or ``postgres_server``) is marked
``postgres``: ``pytest -m "not postgres"`` leaves them out. Without
PostgreSQL they skip, with the reason; under ``CI=true`` they fail instead,
so a CI run never passes without having run them.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest

from tests.support.postgres import PostgresServer, PostgresUnavailable

MARKER = "postgres"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", f"{MARKER}: runs against a real PostgreSQL server (tests/support/postgres.py)"
    )


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "postgres_server" in getattr(item, "fixturenames", ()):
            item.add_marker(MARKER)


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """One PostgreSQL server for the session; a test that stops it has it started again."""
    try:
        server = PostgresServer()
    except PostgresUnavailable as exc:
        if os.environ.get("CI", "").lower() in ("true", "1"):
            pytest.fail(f"CI=true and PostgreSQL is unusable: {exc}", pytrace=False)
        pytest.skip(str(exc))
    try:
        server.start()
        yield server
    finally:
        server.cleanup()


@pytest.fixture
def postgres_dsn(postgres_server: PostgresServer) -> Iterator[str]:
    """The DSN of a new, empty database of this test's own, dropped afterwards."""
    postgres_server.ensure_running()
    dsn = postgres_server.create_database()
    yield dsn
    postgres_server.ensure_running()
    postgres_server.drop_database(urlsplit(dsn).path.lstrip("/"))
