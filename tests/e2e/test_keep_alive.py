"""A real daemon keeps an idle HTTP connection open longer than httpx keeps it in its pool.

Why it matters: uvicorn's default keep-alive timeout (5 s) equals httpx's
``keepalive_expiry``, so a client reusing a connection just under 5 s idle sent its
``POST /tasks`` as the server closed it and got ``httpx.ReadError`` for a request the
daemon never read (seen under bench/cluster.py about once in 2,000-4,000 submissions).
The server must be the side that holds on longer; then the client drops the connection
first and opens a fresh one.
"""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path

import h11
import httpx
import pytest

from signoff.wiring.daemon import server_config
from tests.e2e.daemons import DaemonProcess

# A little past the client's pool expiry: the server must still answer on that connection.
IDLE = (httpx.Limits().keepalive_expiry or 5.0) + 1.5


def _post_task(sock: socket.socket, conn: h11.Connection, host: str, goal: str) -> int:
    body = json.dumps({"goal": goal, "steps": [{"tool": "list_dir", "args": {"path": "."}}]})
    data = body.encode()
    sock.sendall(conn.send(h11.Request(method="POST", target="/tasks", headers=[
        ("Host", host), ("Content-Type", "application/json"),
        ("Content-Length", str(len(data)))])) or b"")
    sock.sendall(conn.send(h11.Data(data=data)) or b"")
    sock.sendall(conn.send(h11.EndOfMessage()) or b"")
    status = 0
    while True:
        event = conn.next_event()
        if event is h11.NEED_DATA:
            chunk = sock.recv(65536)
            if not chunk:
                raise AssertionError("the daemon closed the connection without answering")
            conn.receive_data(chunk)
        elif isinstance(event, h11.Response):
            status = event.status_code
        elif isinstance(event, h11.EndOfMessage):
            conn.start_next_cycle()
            return status


def test_the_daemon_outlasts_the_clients_keep_alive() -> None:
    # The rule itself, so that a change of either default shows up here by name.
    assert server_config(None, "127.0.0.1", 0).timeout_keep_alive > IDLE


@pytest.mark.slow
def test_a_connection_idle_past_the_client_expiry_is_still_answered(tmp_path: Path) -> None:
    daemon = DaemonProcess(tmp_path / "node")
    daemon.start()
    try:
        host = f"127.0.0.1:{daemon.port}"
        with socket.create_connection(("127.0.0.1", daemon.port), timeout=30) as sock:
            conn = h11.Connection(h11.CLIENT)
            assert _post_task(sock, conn, host, "first") == 202
            time.sleep(IDLE)  # idle as long as a pooled httpx connection may be
            assert _post_task(sock, conn, host, "second") == 202
        goals = {t["goal"] for t in httpx.get(f"{daemon.url}/tasks", timeout=10).json()["items"]}
        assert goals == {"first", "second"}
    finally:
        daemon.stop()
