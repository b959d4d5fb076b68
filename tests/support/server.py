"""A real guardd in a subprocess on a free loopback port, for tests."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class GuardServer:
    """Start, stop, kill and restart guardd on one data directory."""

    def __init__(
        self,
        data_dir: Path,
        *,
        env: dict[str, str] | None = None,
        args: list[str] | None = None,
    ) -> None:
        self.data_dir = data_dir
        self.port = free_port()
        self.extra_env = dict(env or {})
        self.extra_args = list(args or [])  # more guardd flags, after the usual ones
        self.proc: subprocess.Popen[bytes] | None = None
        self.output = b""

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def admin_token(self) -> str:
        if "GUARD_ADMIN_TOKEN" in self.extra_env:
            return self.extra_env["GUARD_ADMIN_TOKEN"]
        return (self.data_dir / "keys" / "admin.token").read_text().strip()

    @property
    def public_key(self) -> str:
        return (self.data_dir / "keys" / "audit.pub").read_text().strip()

    def start(self, timeout: float = 20.0) -> GuardServer:
        # Neither the GUARD_* nor the OTEL_* variables of the shell that runs the
        # tests: a test gives guardd those it means (OTEL_* turns traces on).
        env = {
            k: v for k, v in os.environ.items() if not k.startswith(("GUARD_", "OTEL_"))
        } | self.extra_env
        self._log = (self.data_dir.parent / f"guardd-{self.port}.out").open("ab")
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "guardd",
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--data-dir",
                str(self.data_dir),
                *self.extra_args,
            ],
            env=env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self._log.close()
                raise RuntimeError(
                    f"guardd exited with {self.proc.returncode}:\n{self.read_output()}"
                )
            try:
                if httpx.get(f"{self.url}/healthz", timeout=0.5).status_code == 200:
                    return self
            except httpx.TransportError:
                pass
            time.sleep(0.05)
        self.kill()
        raise RuntimeError(f"guardd did not answer within {timeout}s:\n{self.read_output()}")

    def read_output(self) -> str:
        path = self.data_dir.parent / f"guardd-{self.port}.out"
        return path.read_text(errors="replace") if path.exists() else ""

    def stop(self, timeout: float = 15.0) -> int:
        """SIGTERM and wait; returns the exit code."""
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()
        return self.proc.returncode

    def kill(self) -> None:
        """SIGKILL, as a crash."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self._log.close()

    def restart(self) -> GuardServer:
        self.stop()
        return self.start()

    def client(self, token: str | None = None, **kwargs: object) -> httpx.Client:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=30.0, **kwargs)  # type: ignore[arg-type]
