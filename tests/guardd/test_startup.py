"""Startup: data directory and key files, the lines printed, settings from
flags and environment, and the ways to run guardd."""

from __future__ import annotations

import os
import re
import resource
import shutil
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import attrs
import httpx
import pytest

from tests.guardd.conftest import POLICY, Api, assert_error, ok
from tests.support.server import GuardServer, free_port

KEY_FILES = ("audit.key", "token.key", "admin.token")
START_TIMEOUT = 20.0


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def _env(**extra: str) -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("GUARD_")} | extra


@attrs.define
class Run:
    proc: subprocess.Popen[str]
    output: str = ""


@contextmanager
def running(argv: list[str], *, env: dict[str, str], cwd: Path, url: str) -> Iterator[Run]:
    """guardd started with ``argv``, answering at ``url``; SIGTERM-ed after,
    when ``output`` holds what it printed."""
    proc = subprocess.Popen(
        argv, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    run = Run(proc)
    try:
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            assert proc.poll() is None, proc.communicate()[0]
            try:
                if httpx.get(f"{url}/healthz", timeout=0.5).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "guardd did not answer"
            time.sleep(0.05)
        yield run
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        try:
            run.output = proc.communicate(timeout=15)[0]
        except subprocess.TimeoutExpired:
            proc.kill()
            run.output = proc.communicate()[0]


def _startup_lines(output: str) -> list[str]:
    return [line for line in output.splitlines() if not re.match(r"\d{4}-\d\d-\d\d ", line)]


# -- data directory and keys -----------------------------------------------------------------


def test_absent_data_dir_is_created_with_private_key_files(tmp_path: Path) -> None:
    data_dir = tmp_path / "guard-data"
    server = GuardServer(data_dir).start()
    try:
        keys = data_dir / "keys"
        assert _mode(keys) == 0o700
        for name in KEY_FILES:
            assert _mode(keys / name) == 0o600, name
        assert (data_dir / "agents").is_dir()
        assert len((keys / "token.key").read_bytes()) == 32
        assert re.fullmatch(r"[A-Za-z0-9_-]{43}", server.admin_token)
        assert re.fullmatch(r"[0-9a-f]{64}", server.public_key)
        api = Api(server)
        try:
            agent = api.create("first")
            assert _mode(data_dir / "agents" / "first.jsonl") & 0o077 == 0
            assert ok(agent.client.get(agent.path))["public_key"] == server.public_key
        finally:
            api.close()
    finally:
        server.kill()


@pytest.fixture(scope="module")
def prepared(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A data directory that has served once and holds one agent."""
    server = GuardServer(tmp_path_factory.mktemp("prepared") / "guard-data").start()
    api = Api(server)
    try:
        api.create("one")
    finally:
        api.close()
        assert server.stop() == 0
    return server.data_dir


@pytest.mark.parametrize("name", KEY_FILES)
def test_key_file_readable_by_others_makes_startup_fail_naming_file_and_fix(
    prepared: Path, tmp_path: Path, name: str
) -> None:
    data_dir = tmp_path / "guard-data"
    shutil.copytree(prepared, data_dir)
    key = data_dir / "keys" / name
    key.chmod(0o644)
    result = subprocess.run(
        [sys.executable, "-m", "guardd", "--port", str(free_port()), "--data-dir", str(data_dir)],
        env=_env(),
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert result.returncode != 0
    assert str(key) in result.stderr
    assert f"chmod 600 {key}" in result.stderr
    assert "listening" not in result.stdout


# -- what startup prints ---------------------------------------------------------------------


def test_startup_prints_address_console_data_dir_key_token_source_and_counts(
    prepared: Path, tmp_path: Path
) -> None:
    data_dir = tmp_path / "guard-data"
    shutil.copytree(prepared, data_dir)
    server = GuardServer(data_dir).start()
    try:
        lines = _startup_lines(server.read_output())
        assert lines == [
            f"guardd listening on {server.url}",
            f"console: {server.url}/",
            f"data dir: {data_dir}",
            f"public key: {server.public_key}",
            f"admin token: from {data_dir / 'keys' / 'admin.token'}",
            "agents: 1 loaded, 0 quarantined",
        ]
    finally:
        server.kill()


def test_admin_token_from_the_environment_wins_and_is_named_as_source(tmp_path: Path) -> None:
    token = "env-admin-token-for-tests-0123456789"
    server = GuardServer(tmp_path / "guard-data", env={"GUARD_ADMIN_TOKEN": token}).start()
    api = Api(server)
    try:
        assert "admin token: from GUARD_ADMIN_TOKEN" in _startup_lines(server.read_output())
        assert ok(api.admin.get("/v1/agents")) == {"agents": []}
        file_token = (server.data_dir / "keys" / "admin.token").read_text().strip()
        assert_error(api.client(file_token).get("/v1/agents"), 401, "unauthorized")
        api.create("from-env", POLICY)
    finally:
        api.close()
        server.kill()


# -- settings --------------------------------------------------------------------------------


def test_settings_come_from_guard_environment_variables(tmp_path: Path) -> None:
    port = free_port()
    data_dir = tmp_path / "parents" / "absent" / "env-data"
    env = _env(GUARD_HOST="127.0.0.1", GUARD_PORT=str(port), GUARD_DATA_DIR=str(data_dir))
    url = f"http://127.0.0.1:{port}"
    with running([sys.executable, "-m", "guardd"], env=env, cwd=tmp_path, url=url) as run:
        assert ok(httpx.get(f"{url}/v1/public-key"))["algorithm"] == "ed25519"
    assert run.proc.returncode == 0
    assert _mode(data_dir / "keys" / "audit.key") == 0o600
    lines = _startup_lines(run.output)
    assert lines[:3] == [f"guardd listening on {url}", f"console: {url}/", f"data dir: {data_dir}"]


def test_flags_win_over_environment_variables(tmp_path: Path) -> None:
    port, other_port = free_port(), free_port()
    env = _env(GUARD_PORT=str(other_port), GUARD_DATA_DIR=str(tmp_path / "env-data"))
    argv = [sys.executable, "-m", "guardd", "--host", "127.0.0.1", "--port", str(port)]
    argv += ["--data-dir", str(tmp_path / "flag-data")]
    with running(argv, env=env, cwd=tmp_path, url=f"http://127.0.0.1:{port}"):
        pass
    assert (tmp_path / "flag-data" / "keys").is_dir()
    assert not (tmp_path / "env-data").exists()


def test_data_dir_defaults_to_guard_data_in_the_working_directory(tmp_path: Path) -> None:
    port = free_port()
    env = _env(GUARD_PORT=str(port))
    with running(
        [sys.executable, "-m", "guardd"], env=env, cwd=tmp_path, url=f"http://127.0.0.1:{port}"
    ):
        pass
    assert (tmp_path / "guard-data" / "keys" / "admin.token").exists()


@pytest.mark.parametrize("port", ["0", "65536", "http"])
def test_bad_port_is_refused_with_a_message(tmp_path: Path, port: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "guardd", "--port", port, "--data-dir", str(tmp_path / "d")],
        env=_env(),
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert result.returncode != 0
    assert "port" in result.stderr


def test_guardd_console_script_is_installed_beside_the_interpreter() -> None:
    script = Path(sys.executable).parent / "guardd"
    assert script.exists()
    result = subprocess.run(
        [str(script), "--help"], capture_output=True, text=True, timeout=30, check=False
    )
    assert result.returncode == 0
    for flag in ("--host", "--port", "--data-dir"):
        assert flag in result.stdout


@contextmanager
def soft_open_file_limit(limit: int) -> Iterator[None]:
    """Processes started inside inherit this soft limit on open files."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (limit, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_more_agents_than_the_inherited_open_file_limit_are_created_and_loaded(
    tmp_path: Path,
) -> None:
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 400:
        pytest.skip(f"hard limit on open files is {hard}")
    server = GuardServer(tmp_path / "guard-data")
    with soft_open_file_limit(64):
        server.start()
    try:
        with server.client(server.admin_token) as admin:
            for n in range(150):  # one open log each, more than 64
                ok(admin.post("/v1/agents", json={"agent_id": f"a{n}", "policy": POLICY}), 201)
        with soft_open_file_limit(64):
            server.restart()
        with server.client(server.admin_token) as admin:
            agents = ok(admin.get("/v1/agents"))["agents"]
            assert [a["state"] for a in agents] == ["active"] * 150
            ok(admin.post("/v1/agents", json={"agent_id": "one-more", "policy": POLICY}), 201)
    finally:
        assert server.stop() == 0
