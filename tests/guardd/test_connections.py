"""Connections of clients that went away are let go, not kept for minutes."""

from __future__ import annotations

import socket
import time
from pathlib import Path

from guardd.__main__ import KEEP_ALIVE_TIMEOUT
from tests.support.server import GuardServer

CLOSE_WAIT = "08"  # state column of /proc/net/tcp


def close_wait_sockets(port: int) -> int:
    """Sockets on ``port`` whose peer closed and that we have not closed yet."""
    count = 0
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        local, state = line.split()[1], line.split()[3]
        if int(local.split(":")[1], 16) == port and state == CLOSE_WAIT:
            count += 1
    return count


def test_keep_alive_outlasts_client_pools_but_stays_short() -> None:
    # httpx pools drop idle connections after 5 s: the server must wait longer.
    assert 5 < KEEP_ALIVE_TIMEOUT <= 30


def test_connections_of_clients_that_left_are_closed_within_the_keep_alive_timeout(
    tmp_path: Path,
) -> None:
    server = GuardServer(tmp_path / "guard-data").start()
    try:
        clients = [socket.create_connection(("127.0.0.1", server.port)) for _ in range(32)]
        for client in clients:
            client.sendall(b"GET /healthz HTTP/1.1\r\nHost: guard\r\n\r\n")
        for client in clients:
            assert client.recv(4096).startswith(b"HTTP/1.1 200")
        for client in clients:
            client.close()
        deadline = time.monotonic() + KEEP_ALIVE_TIMEOUT + 10
        while close_wait_sockets(server.port) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert close_wait_sockets(server.port) == 0
    finally:
        assert server.stop() == 0
