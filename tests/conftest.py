from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.server import GuardServer

# A real PostgreSQL for the store's tests: postgres_server, postgres_dsn, the "postgres" marker.
# A real OpenID provider for the sign-in tests: oidc_provider.
pytest_plugins = ["tests.support.postgres_plugin", "tests.support.oidc_plugin"]


@pytest.fixture
def guard_server(tmp_path: Path) -> Iterator[GuardServer]:
    """A running guardd on a fresh data directory in tmp_path."""
    server = GuardServer(tmp_path / "guard-data").start()
    try:
        yield server
    finally:
        server.kill()
