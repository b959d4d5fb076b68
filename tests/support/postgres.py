"""A real PostgreSQL server from Debian's packages, for tests and benchmarks.

``initdb`` refuses to run as root, so when we are root the server's files
belong to the ``postgres`` user Debian's package creates, and ``initdb`` and
``pg_ctl`` run as that user. Its directory is made 0755 under a parent every
user can traverse: pytest's own temporary directories are 0700 and root's,
which ``postgres`` cannot enter. The server listens on a free loopback TCP
port and on a socket directory of its own (never the system's), with
``fsync`` on, as a production server has it.

No pytest here: the benchmarks start their server with the same class.
``tests/support/postgres_plugin.py`` holds the fixtures.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import signal
import socket
import stat
import subprocess
import tempfile
import time
import uuid
from pathlib import Path
from types import TracebackType
from typing import Any, Literal

SUPERUSER = "guard"
PG_USER = "postgres"  # the account Debian's package creates
PG_GLOB = "/usr/lib/postgresql/*/bin"
ShutdownMode = Literal["smart", "fast", "immediate"]


class PostgresUnavailable(RuntimeError):
    """PostgreSQL's programs, or a user that may run them, are missing here."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def find_bin_dir() -> Path:
    """The newest installed PostgreSQL's bin directory holding initdb and pg_ctl."""
    found = [
        Path(d)
        for d in glob.glob(PG_GLOB)
        if os.access(Path(d) / "initdb", os.X_OK) and os.access(Path(d) / "pg_ctl", os.X_OK)
    ]
    if not found:
        raise PostgresUnavailable(
            f"PostgreSQL's initdb and pg_ctl are not under {PG_GLOB}"
            " (make test installs Debian's postgresql package)"
        )
    return max(found, key=lambda d: _version_key(d.parent.name))


def _version_key(name: str) -> tuple[int, ...]:
    return tuple(int(p) for p in name.split(".") if p.isdigit())


def _traversable_by_others(path: Path) -> bool:
    """Whether every directory from ``path`` up to / lets any user enter it."""
    for directory in [path, *path.parents]:
        if not os.stat(directory).st_mode & stat.S_IXOTH:
            return False
    return True


class PostgresServer:
    """One PostgreSQL cluster in a directory of its own; start, stop, restart,
    a DSN per database, and removal of everything at the end."""

    def __init__(self, parent: Path | None = None, *, port: int | None = None) -> None:
        self.bin_dir = find_bin_dir()
        self.run_as: pwd.struct_passwd | None = None
        if os.geteuid() == 0:
            try:
                self.run_as = pwd.getpwnam(PG_USER)
            except KeyError:
                raise PostgresUnavailable(
                    f"initdb refuses root and there is no {PG_USER!r} user to run it"
                ) from None
        parent = Path(parent or tempfile.gettempdir()).resolve()
        if self.run_as is not None and not _traversable_by_others(parent):
            raise PostgresUnavailable(
                f"{parent} (or a directory above it) is closed to other users:"
                f" the {PG_USER!r} user could not reach the server's files"
            )
        self.base = Path(tempfile.mkdtemp(prefix="guard-pg-", dir=parent))
        # mkdtemp makes it 0700; the server's user must enter it, and it holds no secret.
        os.chmod(self.base, 0o755)  # noqa: S103
        if self.run_as is not None:
            os.chown(self.base, self.run_as.pw_uid, self.run_as.pw_gid)
        self.data_dir = self.base / "data"
        self.socket_dir = self.base / "sock"
        self.log_path = self.base / "server.log"
        self.port = port or free_port()
        self.pid: int | None = None
        self._initialised = False

    # -- addresses ---------------------------------------------------------------

    def dsn(self, dbname: str = "postgres") -> str:
        return f"postgresql://{SUPERUSER}@127.0.0.1:{self.port}/{dbname}"

    # -- lifecycle -----------------------------------------------------------------

    def _run(self, argv: list[str], timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
        """Run one of PostgreSQL's programs as the server's user, in its directory."""
        kwargs: dict[str, Any] = {}
        if self.run_as is not None:
            kwargs = {"user": self.run_as.pw_uid, "group": self.run_as.pw_gid, "extra_groups": []}
        env = {
            "PATH": f"{self.bin_dir}:/usr/bin:/bin",
            "LC_ALL": "C",
            "HOME": str(self.base),
            "PGTZ": "UTC",
        }
        done = subprocess.run(
            argv,
            cwd=self.base,
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            **kwargs,
        )
        if done.returncode != 0:
            raise RuntimeError(
                f"{Path(argv[0]).name} failed ({done.returncode}):\n{done.stdout}{done.stderr}"
                f"{self._log_tail()}"
            )
        return done

    def _log_tail(self, lines: int = 30) -> str:
        if not self.log_path.exists():
            return ""
        tail = self.log_path.read_text(errors="replace").splitlines()[-lines:]
        return "\nserver log:\n" + "\n".join(tail)

    def _initdb(self) -> None:
        self._run(
            [
                str(self.bin_dir / "initdb"),
                "--pgdata",
                str(self.data_dir),
                "--username",
                SUPERUSER,
                "--auth",
                "trust",  # loopback and our own socket only; tests have no passwords
                "--encoding",
                "UTF8",
                "--no-locale",
                "--no-instructions",
            ]
        )
        self.socket_dir.mkdir(mode=0o755)
        if self.run_as is not None:
            os.chown(self.socket_dir, self.run_as.pw_uid, self.run_as.pw_gid)
        settings = {
            "listen_addresses": "'127.0.0.1'",
            "port": str(self.port),
            "unix_socket_directories": f"'{self.socket_dir}'",
            # Several guardd nodes, each pooled, and the benchmark's 64 tasks at once.
            "max_connections": "300",
            "fsync": "on",
            "synchronous_commit": "on",
            "logging_collector": "off",
            "log_min_messages": "warning",
        }
        with (self.data_dir / "postgresql.conf").open("a") as conf:
            conf.write("\n# tests/support/postgres.py\n")
            conf.writelines(f"{key} = {value}\n" for key, value in settings.items())
        self._initialised = True

    def start(self, timeout: float = 60.0) -> PostgresServer:
        """Start the server (``initdb`` first, once) and wait until it accepts connections."""
        if not self._initialised:
            self._initdb()
        self._run(
            [
                str(self.bin_dir / "pg_ctl"),
                "start",
                "-D",
                str(self.data_dir),
                "-l",
                str(self.log_path),
                "-w",
                "-t",
                str(int(timeout)),
            ],
            timeout=timeout + 10,
        )
        self.pid = self._read_pid()
        return self

    def _read_pid(self) -> int | None:
        pid_file = self.data_dir / "postmaster.pid"
        try:
            return int(pid_file.read_text().split("\n", 1)[0])
        except (OSError, ValueError):
            return None

    def is_running(self) -> bool:
        pid = self._read_pid() or self.pid
        return pid is not None and _alive(pid)

    def stop(self, mode: ShutdownMode = "fast", timeout: float = 60.0) -> None:
        """``pg_ctl stop -m mode``; the postmaster killed by PID if that fails."""
        if not self._initialised or not self.is_running():
            self.pid = None
            return
        pid = self._read_pid() or self.pid
        argv = [str(self.bin_dir / "pg_ctl"), "stop", "-D", str(self.data_dir), "-m", mode]
        try:
            self._run([*argv, "-w", "-t", str(int(timeout))], timeout=timeout + 10)
        except (RuntimeError, subprocess.TimeoutExpired):
            if pid is not None:
                _kill(pid)
        self.pid = None

    def restart(self, mode: ShutdownMode = "fast") -> None:
        """Stop with ``mode`` (``immediate``: crash recovery at the next start) and start."""
        self.stop(mode)
        self.start()

    def ensure_running(self) -> None:
        if not self.is_running():
            self.start()

    def cleanup(self) -> None:
        """Stop the server and remove its directory."""
        try:
            self.stop("fast")
        finally:
            shutil.rmtree(self.base, ignore_errors=True)

    def __enter__(self) -> PostgresServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.cleanup()

    # -- databases -------------------------------------------------------------------

    def psql(self, sql: str, dbname: str = "postgres") -> str:
        """Run ``sql`` with psql (no driver needed); its unaligned output."""
        done = subprocess.run(
            [
                str(self.bin_dir / "psql"),
                "--no-psqlrc",
                "-q",
                "-A",
                "-t",
                "-v",
                "ON_ERROR_STOP=1",
                "-d",
                self.dsn(dbname),
                "-c",
                sql,
            ],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(f"psql failed ({done.returncode}): {done.stderr.strip()}")
        return done.stdout

    def create_database(self, name: str | None = None) -> str:
        """A new empty database; returns its DSN."""
        name = name or f"test_{uuid.uuid4().hex[:16]}"
        if not name.replace("_", "").isalnum() or not name.isascii():
            raise ValueError(f"database name {name!r}: letters, digits and _ only")
        self.psql(f'CREATE DATABASE "{name}"')
        return self.dsn(name)

    def drop_database(self, name: str) -> None:
        # FORCE: a test may leave connections behind (a killed guardd's sessions linger).
        self.psql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs; a zombie (not ours to reap) counts as gone."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def _kill(pid: int, grace: float = 10.0) -> None:
    """SIGQUIT (PostgreSQL's immediate shutdown), then SIGKILL if it lingers."""
    for sig in (signal.SIGQUIT, signal.SIGKILL):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            if not _alive(pid):
                return
            time.sleep(0.05)


def run_sql(dsn: str, statement: str, *args: object) -> None:
    """Run one statement on a fresh connection (to change rows behind guardd)."""
    import asyncio

    import asyncpg

    async def run() -> None:
        conn = await asyncpg.connect(dsn)
        try:
            await conn.execute(statement, *args)
        finally:
            await conn.close()

    asyncio.run(run())


def store_lines(dsn: str, agent_id: str) -> list[bytes]:
    """The lines the PostgreSQL store holds for ``agent_id``, in seq order."""
    import asyncio

    import asyncpg

    async def fetch() -> list[bytes]:
        conn = await asyncpg.connect(dsn)
        try:
            rows = await conn.fetch(
                "select line from guard_logs where agent_id = $1 order by seq", agent_id
            )
        finally:
            await conn.close()
        return [bytes(r["line"]) for r in rows]

    return asyncio.run(fetch())
