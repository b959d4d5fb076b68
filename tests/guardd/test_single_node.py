"""One guardd per data dir, honest starts, readiness, TLS and log lines.

Every case runs guardd as a subprocess: what is tested is what an operator
sees when starting it (exit code, the one line it prints, files left behind).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from agents_runtime.log.files.datadir import DataDir
from tests.guardd.conftest import POLICY, Api, assert_error, ok
from tests.support.server import GuardServer, free_port

START_TIMEOUT = 20.0


def _env(**extra: str) -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("GUARD_")} | extra


def _guardd(*args: str, env: dict[str, str] | None = None) -> list[str]:
    return [sys.executable, "-m", "guardd", *args]


def _run(
    args: list[str], *, env: dict[str, str] | None = None, timeout: float = 30.0
) -> tuple[int, str, str]:
    proc = subprocess.run(
        _guardd(*args),
        env=env or _env(),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    return proc.returncode, proc.stdout, proc.stderr


def _tree(root: Path) -> dict[str, tuple[int, int, int]]:
    """Every path under ``root`` with its size, mtime and mode: a change to any shows."""
    out = {}
    for path in sorted(root.rglob("*")):
        st = path.lstat()
        out[str(path.relative_to(root))] = (st.st_size, st.st_mtime_ns, st.st_mode)
    return out


def _checkpointed(data_dir: Path, agent_id: str) -> None:
    """Wait until the running guardd has checkpointed the agent's head: its
    checkpoint rounds write on a timer of their own, and a file written by
    them between two snapshots is not the second guardd's doing."""
    log = data_dir / "agents" / f"{agent_id}.jsonl"
    checkpoint = data_dir / "checkpoints" / f"{agent_id}.checkpoint"
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        size = str(log.read_bytes().count(b"\n"))
        if checkpoint.exists() and checkpoint.read_text().splitlines()[1:2] == [size]:
            return
        time.sleep(0.05)
    raise AssertionError(f"no checkpoint of {agent_id}'s head within {START_TIMEOUT} s")


def _wait_ready(url: str, proc: subprocess.Popen[str], **kwargs: object) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        try:
            if httpx.get(f"{url}/healthz", timeout=0.5, **kwargs).status_code == 200:  # type: ignore[arg-type]
                return
        except httpx.TransportError:
            pass
        time.sleep(0.05)
    raise AssertionError(f"guardd did not answer at {url}")


@contextlib.contextmanager
def _serving(
    args: list[str], url: str, env: dict[str, str] | None = None, **kwargs: object
) -> Iterator[subprocess.Popen[str]]:
    proc = subprocess.Popen(
        _guardd(*args), env=env or _env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        _wait_ready(url, proc, **kwargs)
        yield proc
    finally:
        if proc.poll() is None:
            proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


# -- one guardd per data dir ----------------------------------------------------------


def test_second_guardd_on_the_same_data_dir_exits_naming_the_holder_and_touches_nothing(
    fresh_api: Api,
) -> None:
    api = fresh_api
    agent = api.create()
    ok(agent.act("search"))
    data_dir = api.server.data_dir
    assert api.server.proc is not None
    holder = api.server.proc.pid
    assert (data_dir / "lock").read_text().strip() == str(holder)
    _checkpointed(data_dir, agent.agent_id)
    before = _tree(data_dir)

    code, out, err = _run(["--port", str(free_port()), "--data-dir", str(data_dir)])

    assert code == 1
    assert err == f"guardd: data dir {data_dir} is in use by pid {holder}\n"
    assert out == ""
    assert _tree(data_dir) == before
    ok(agent.act("search"))  # the first one goes on serving


def test_second_guardd_does_not_move_the_torn_tail_of_the_running_one(fresh_api: Api) -> None:
    """A torn-looking tail may be a write in progress of the running guardd."""
    api = fresh_api
    agent = api.create()
    log_path = DataDir(api.server.data_dir).log_path(agent.agent_id)
    with log_path.open("ab") as fh:
        fh.write(b'{"half a rec')
    size = log_path.stat().st_size

    code, _, err = _run(["--port", str(free_port()), "--data-dir", str(api.server.data_dir)])

    assert code == 1
    assert "is in use by pid" in err
    assert log_path.stat().st_size == size
    assert not log_path.with_name(log_path.name + ".torn").exists()


def test_lock_is_released_by_kill_9_and_the_next_guardd_starts(tmp_path: Path) -> None:
    server = GuardServer(tmp_path / "guard-data").start()
    server.kill()
    server.start()
    try:
        assert server.proc is not None
        assert (server.data_dir / "lock").read_text().strip() == str(server.proc.pid)
    finally:
        server.kill()


def test_audit_reads_the_data_dir_of_a_running_guardd(fresh_api: Api) -> None:
    api = fresh_api
    agent = api.create()
    log_path = DataDir(api.server.data_dir).log_path(agent.agent_id)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "audit",
            "verify",
            str(log_path),
            "--public-key",
            api.server.public_key,
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("OK")


# -- nothing changes before the lock and the socket are held ---------------------------


def test_port_in_use_exits_naming_the_address_and_creates_only_the_lock(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        data_dir = tmp_path / "guard-data"
        code, out, err = _run(["--port", str(port), "--data-dir", str(data_dir)])
    assert code == 1
    assert err == f"guardd: cannot listen on 127.0.0.1:{port}: Address already in use\n"
    assert out == ""
    assert sorted(p.name for p in data_dir.iterdir()) == ["lock"]


def test_port_in_use_leaves_an_existing_data_dir_as_it_was(tmp_path: Path) -> None:
    server = GuardServer(tmp_path / "guard-data").start()
    api = Api(server)
    api.create("kept")
    api.close()
    server.stop()
    log_path = DataDir(server.data_dir).log_path("kept")
    with log_path.open("ab") as fh:
        fh.write(b'{"torn')
    before = {k: v for k, v in _tree(server.data_dir).items() if k != "lock"}
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        code, _, err = _run(
            ["--port", str(taken.getsockname()[1]), "--data-dir", str(server.data_dir)]
        )
    assert code == 1
    assert "cannot listen on" in err
    assert {k: v for k, v in _tree(server.data_dir).items() if k != "lock"} == before


def test_connections_made_while_logs_load_wait_and_are_answered_once_serving(
    tmp_path: Path,
) -> None:
    from bench.startup_bench import generate

    root = tmp_path / "guard-data"
    generate(root, agents=16, records=3000, workers=2)
    port = free_port()
    proc = subprocess.Popen(
        _guardd("--port", str(port), "--data-dir", str(root)),
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        deadline = time.monotonic() + START_TIMEOUT
        while True:  # connect as soon as the socket listens: the logs are still loading
            assert time.monotonic() < deadline
            try:
                sock = socket.create_connection(("127.0.0.1", port), timeout=START_TIMEOUT)
                break
            except ConnectionRefusedError:
                time.sleep(0.01)
        with sock:
            connected_at = time.monotonic()
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: guard\r\nConnection: close\r\n\r\n")
            answer = b""
            while chunk := sock.recv(4096):
                answer += chunk
            answered_at = time.monotonic()
        assert proc.stdout is not None
        banner = proc.stdout.readline()
    finally:
        proc.terminate()
        proc.communicate(timeout=15)
    assert answer.startswith(b"HTTP/1.1 200")
    assert banner.startswith("guardd listening on")
    # The connection was accepted by the kernel at once and answered after the load.
    assert answered_at - connected_at > 0.2


# -- the data dir and the admin token --------------------------------------------------


def test_data_dir_that_is_a_file_is_refused_as_not_a_directory(tmp_path: Path) -> None:
    path = tmp_path / "guard-data"
    path.write_text("oops")
    code, _, err = _run(["--port", str(free_port()), "--data-dir", str(path)])
    assert code == 1
    assert err == f"guardd: data dir {path} is not a directory\n"
    assert path.read_text() == "oops"


@pytest.mark.parametrize("token", ["short", "x" * 31])
def test_weak_admin_token_from_the_environment_is_refused_with_the_reason(
    tmp_path: Path, token: str
) -> None:
    data_dir = tmp_path / "guard-data"
    code, _, err = _run(
        ["--port", str(free_port()), "--data-dir", str(data_dir)],
        env=_env(GUARD_ADMIN_TOKEN=token),
    )
    assert code == 1
    assert err.startswith(
        f"guardd: the admin token from GUARD_ADMIN_TOKEN is {len(token)} characters; "
        "it must be at least 32"
    )
    assert not data_dir.exists()


def test_weak_admin_token_file_is_refused_naming_the_file(tmp_path: Path) -> None:
    server = GuardServer(tmp_path / "guard-data").start()
    server.stop()
    token_file = server.data_dir / "keys" / "admin.token"
    token_file.write_text("tiny\n")
    code, _, err = _run(["--port", str(free_port()), "--data-dir", str(server.data_dir)])
    assert code == 1
    assert err.startswith(f"guardd: the admin token from {token_file} is 4 characters;")


def test_help_lists_every_option_with_its_default_and_environment_variable() -> None:
    proc = subprocess.run(
        _guardd("--help"), capture_output=True, text=True, check=True, env=_env(COLUMNS="200")
    )
    text = proc.stdout
    for flag, default, var in [
        ("--host", "127.0.0.1", "GUARD_HOST"),
        ("--port", "9200", "GUARD_PORT"),
        ("--data-dir", "guard-data", "GUARD_DATA_DIR"),
        ("--certfile", "none", "GUARD_CERTFILE"),
        ("--keyfile", "none", "GUARD_KEYFILE"),
        ("--log-format", "text", "GUARD_LOG_FORMAT"),
    ]:
        block = text[text.index(f"  {flag}") :].split("\n  -")[0]
        assert f"(default: {default}; environment: {var})" in " ".join(block.split()), block
    assert "GUARD_ADMIN_TOKEN" in text


# -- a full disk at start --------------------------------------------------------------


@contextlib.contextmanager
def _tmpfs(path: Path, size: str) -> Iterator[Path]:
    path.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
        capture_output=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def _fill(path: Path) -> None:
    """Write ``path`` until its file system is full."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        with contextlib.suppress(OSError):
            while True:
                os.write(fd, b"\0" * 4096)
    finally:
        os.close(fd)


def test_full_disk_at_first_start_names_the_path_that_failed(tmp_path: Path) -> None:
    with _tmpfs(tmp_path / "disk", "64k") as disk:
        _fill(disk / "filler")
        data_dir = disk / "guard-data"
        code, _, err = _run(["--port", str(free_port()), "--data-dir", str(data_dir)])
    assert code == 1
    assert "No space left on device" in err
    assert str(data_dir) in err, err  # names the path, not an empty one


# -- readiness ---------------------------------------------------------------------------


def test_readyz_answers_ready_without_a_token(api: Api) -> None:
    assert ok(api.client().get("/readyz")) == {"ok": True}


def test_readyz_is_unavailable_with_the_reason_while_the_disk_is_full(
    tmp_path: Path,
) -> None:
    with _tmpfs(tmp_path / "disk", "16m") as disk:
        server = GuardServer(disk / "guard-data").start()
        try:
            with httpx.Client(base_url=server.url) as http:
                assert ok(http.get("/readyz")) == {"ok": True}
                _fill(disk / "filler")
                try:
                    time.sleep(1.1)  # readiness is probed at most once a second
                    body = assert_error(http.get("/readyz"), 503, "unavailable")
                    assert body["error"].startswith(
                        f"not ready: the data dir {server.data_dir} does not take writes: "
                    )
                    assert ok(http.get("/healthz")) == {"ok": True}  # alive all the same
                finally:
                    (disk / "filler").unlink()
                time.sleep(1.1)
                assert ok(http.get("/readyz")) == {"ok": True}
        finally:
            server.kill()


def test_readyz_is_unavailable_when_read_only(tmp_path: Path) -> None:
    server = GuardServer(tmp_path / "guard-data").start()
    api = Api(server)
    api.create("one")
    api.close()
    server.stop()
    (server.data_dir / "keys" / "audit.key").unlink()
    server.start()
    try:
        body = assert_error(httpx.get(f"{server.url}/readyz"), 503, "unavailable")
        assert body["error"] == (
            "not ready: read-only: keys/audit.key is missing, so nothing can be written"
        )
    finally:
        server.kill()


# -- network: TLS and a warning without it ---------------------------------------------


def test_non_loopback_address_without_tls_prints_a_warning(tmp_path: Path) -> None:
    port = free_port()
    args = [
        "--host",
        "0.0.0.0",  # noqa: S104 (the warning is the point; traffic stays on loopback)
        "--port",
        str(port),
        "--data-dir",
        str(tmp_path / "d"),
    ]
    with _serving(args, f"http://127.0.0.1:{port}") as proc:
        proc.terminate()
        _, err = proc.communicate(timeout=15)
    assert "listening on 0.0.0.0 without TLS" in err


def test_loopback_without_tls_prints_no_warning(tmp_path: Path) -> None:
    port = free_port()
    with _serving(
        ["--port", str(port), "--data-dir", str(tmp_path / "d")], f"http://127.0.0.1:{port}"
    ) as proc:
        proc.terminate()
        _, err = proc.communicate(timeout=15)
    assert "without TLS" not in err


def _self_signed(tmp_path: Path) -> tuple[Path, Path]:
    if shutil.which("openssl") is None:
        pytest.skip("openssl is needed to make a test certificate")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=localhost",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
            "-keyout",
            str(key),
            "-out",
            str(cert),
        ],
        check=True,
        capture_output=True,
    )
    return cert, key


def test_certfile_and_keyfile_serve_https(tmp_path: Path) -> None:
    cert, key = _self_signed(tmp_path)
    port = free_port()
    data_dir = tmp_path / "guard-data"
    args = [
        "--port",
        str(port),
        "--data-dir",
        str(data_dir),
        "--certfile",
        str(cert),
        "--keyfile",
        str(key),
    ]
    url = f"https://127.0.0.1:{port}"
    tls = ssl.create_default_context(cafile=str(cert))
    with _serving(args, url, verify=tls) as proc:
        token = (data_dir / "keys" / "admin.token").read_text().strip()
        with httpx.Client(base_url=url, verify=tls) as https:
            created = https.post(
                "/v1/agents",
                json={"agent_id": "tls", "policy": POLICY},
                headers={"Authorization": f"Bearer {token}"},
            )
            assert created.status_code == 201, created.text
        with pytest.raises(httpx.TransportError):
            httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2)
        proc.terminate()
        out, _ = proc.communicate(timeout=15)
    assert f"guardd listening on {url}" in out


def test_certfile_without_keyfile_is_refused(tmp_path: Path) -> None:
    code, _, err = _run(["--data-dir", str(tmp_path / "d"), "--certfile", "c.pem"])
    assert code == 1
    assert err == "guardd: --certfile and --keyfile go together: give both or neither\n"


# -- log lines --------------------------------------------------------------------------


def test_json_log_format_writes_one_json_object_per_line(tmp_path: Path) -> None:
    port = free_port()
    args = [
        "--host",
        "0.0.0.0",  # noqa: S104 (for a warning to log; traffic stays on loopback)
        "--port",
        str(port),
        "--data-dir",
        str(tmp_path / "d"),
        "--log-format",
        "json",
    ]
    with _serving(args, f"http://127.0.0.1:{port}") as proc:
        proc.terminate()
        _, err = proc.communicate(timeout=15)
    entries = [json.loads(line) for line in err.splitlines()]
    assert entries, err
    for entry in entries:
        assert {"ts", "level", "logger", "message"} <= set(entry)
    assert any("without TLS" in e["message"] and e["level"] == "WARNING" for e in entries)


def test_a_failed_log_creation_logs_one_line_with_request_id_and_cause(
    fresh_api: Api,
) -> None:
    api = fresh_api
    agents_dir = api.server.data_dir / "agents"
    agents_dir.rename(agents_dir.with_name("agents-away"))
    agents_dir.write_text("not a directory")
    try:
        response = api.admin.post("/v1/agents", json={"agent_id": "doomed", "policy": POLICY})
        error = assert_error(response, 500, "internal")
    finally:
        agents_dir.unlink()
        agents_dir.with_name("agents-away").rename(agents_dir)
    request_id = error["error"].removeprefix("internal error (request id ").removesuffix(")")
    lines = api.server.read_output().splitlines()
    at = next(i for i, line in enumerate(lines) if f"request {request_id} " in line)
    # A log that cannot be created is a failed write, as any other: the line
    # names it and the system's cause.
    failed = f"request {request_id} (POST /v1/agents) failed: LogWriteError: cannot create doomed"
    assert failed in lines[at]
    assert "Not a directory" in lines[at]
