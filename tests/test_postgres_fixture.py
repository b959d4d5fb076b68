"""The test PostgreSQL server itself (tests/support/postgres.py): it starts,
answers, gives each test a database of its own and keeps committed rows
across fast and immediate restarts, as the store's fault tests rely on."""

from __future__ import annotations

import os
import pwd
import re
import stat
from urllib.parse import urlsplit

import pytest

from tests.support.postgres import PG_USER, PostgresServer


def dbname(dsn: str) -> str:
    return urlsplit(dsn).path.lstrip("/")


def test_server_answers_on_loopback(postgres_server: PostgresServer, postgres_dsn: str) -> None:
    assert re.fullmatch(r"postgresql://\w+@127\.0\.0\.1:\d+/test_[0-9a-f]{16}", postgres_dsn)
    assert urlsplit(postgres_dsn).port == postgres_server.port
    assert postgres_server.psql("select 1", dbname(postgres_dsn)) == "1\n"
    assert postgres_server.psql("show fsync") == "on\n"
    assert postgres_server.psql("show synchronous_commit") == "on\n"
    # Its own socket directory: never the system's, so it cannot clash with a local server.
    sockets = {p.name for p in postgres_server.socket_dir.iterdir()}
    assert f".s.PGSQL.{postgres_server.port}" in sockets


def test_files_belong_to_a_user_that_may_run_initdb(postgres_server: PostgresServer) -> None:
    mode = os.stat(postgres_server.base).st_mode
    assert stat.S_IMODE(mode) == 0o755
    owner = os.stat(postgres_server.data_dir).st_uid
    if os.geteuid() == 0:
        assert owner == pwd.getpwnam(PG_USER).pw_uid
    else:
        assert owner == os.geteuid()


@pytest.mark.parametrize("turn", [1, 2])
def test_each_test_has_a_fresh_database(
    postgres_server: PostgresServer, postgres_dsn: str, turn: int
) -> None:
    db = dbname(postgres_dsn)
    # Were the database shared, the other turn's table would be here.
    tables = postgres_server.psql("select count(*) from pg_tables where schemaname = 'public'", db)
    assert tables == "0\n"
    insert = f"create table mine (turn int); insert into mine values ({turn:d})"  # noqa: S608
    postgres_server.psql(insert, db)
    assert postgres_server.psql("select turn from mine", db) == f"{turn}\n"


@pytest.mark.parametrize("mode", ["fast", "immediate"])
def test_committed_rows_survive_a_restart(
    postgres_server: PostgresServer, postgres_dsn: str, mode: str
) -> None:
    db = dbname(postgres_dsn)
    postgres_server.psql("create table kept (n int primary key); insert into kept values (7)", db)
    old_pid = postgres_server.pid
    postgres_server.restart(mode)  # type: ignore[arg-type]
    assert postgres_server.pid != old_pid
    assert postgres_server.psql("select n from kept", db) == "7\n"


def test_a_stopped_server_is_down_until_started(
    postgres_server: PostgresServer, postgres_dsn: str
) -> None:
    postgres_server.stop("immediate")
    assert not postgres_server.is_running()
    with pytest.raises(RuntimeError, match="psql failed"):
        postgres_server.psql("select 1")
    postgres_server.ensure_running()
    assert postgres_server.psql("select 1", dbname(postgres_dsn)) == "1\n"
