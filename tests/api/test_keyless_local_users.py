"""Without a key, ``web:local`` is the user who runs the daemon, not every account on its host.

Another local account connecting to 127.0.0.1 used to decide as ``web:local`` too. The
daemon now asks the kernel who owns the client's end of the connection
(`signoff.local_user`); these tests open real connections, one of them from a process
running as ``nobody``, which needs root (CI runs as root).
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from starlette.datastructures import Headers

from signoff.api.middleware import keyless_refusal
from signoff.local_user import CONNECTION, PROC_NET, Connection, connection_owner, owner_refusal
from tests.api.helpers import loopback_socket, make_settings, running_node, serve

NOBODY = 65534
# Run by a plain interpreter as another user: no venv, no signoff, only the standard library.
CLIENT = """
import json, sys, urllib.request, urllib.error
request = urllib.request.Request(sys.argv[1], data=sys.argv[2].encode() or None,
                                 method=sys.argv[3], headers={"Content-Type": "application/json"})
try:
    with urllib.request.urlopen(request, timeout=10) as answer:
        print(json.dumps([answer.status, answer.read().decode()]))
except urllib.error.HTTPError as refused:
    print(json.dumps([refused.code, refused.read().decode()]))
"""
# The test's own interpreter lives under root's home, which nobody may not enter.
SYSTEM_PYTHON = "/usr/bin/python3"
as_root = pytest.mark.skipif(os.geteuid() != 0 or not os.access(SYSTEM_PYTHON, os.X_OK),
                             reason="switching to another user needs root (and the "
                                    "system's python3)")


def as_nobody(url: str, method: str = "GET", body: str = "") -> tuple[int, str]:
    """The status and body another local account gets for ``method url``."""
    done = subprocess.run([SYSTEM_PYTHON, "-I", "-c", CLIENT, url, body, method],
                          user=NOBODY, group=NOBODY, extra_groups=[], capture_output=True,
                          text=True, timeout=30, cwd="/", env={"PATH": "/usr/bin:/bin"},
                          check=True)
    status, text = json.loads(done.stdout)
    return int(status), str(text)


@as_root
async def test_another_local_user_cannot_decide_as_web_local(tmp_path: Path) -> None:
    """Keyless: the daemon's own user lists and submits; ``nobody`` on the same machine
    gets 403 naming why, for reads and writes alike, and nothing it sent is stored."""
    async with running_node(tmp_path, keys=False) as node, serve(node.app) as url, \
            httpx.AsyncClient(base_url=url, timeout=10) as mine:
        assert (await mine.get("/tasks")).status_code == 200
        status, text = await _off_loop(as_nobody, f"{url}/tasks")
        assert status == 403
        assert f"another local user (uid {NOBODY})" in json.loads(text)["detail"]
        assert "api.key" in json.loads(text)["detail"]
        status, _ = await _off_loop(as_nobody, f"{url}/tasks", "POST", '{"goal": "g"}')
        assert status == 403
        assert (await mine.get("/tasks")).json()["items"] == []
        # /health needs no key on a keyed daemon, so no account on a keyless one.
        status, text = await _off_loop(as_nobody, f"{url}/health")
        assert status == 200 and json.loads(text)["status"] == "ok"


@as_root
async def test_keyless_any_local_user_is_an_explicit_opt_in(tmp_path: Path) -> None:
    """With ``[api] keyless_any_local_user = true`` another account is web:local too."""
    settings = make_settings(tmp_path, keys=False)
    settings = settings.model_copy(update={"api": settings.api.model_copy(
        update={"keyless_any_local_user": True})})
    async with running_node(tmp_path, settings=settings) as node, serve(node.app) as url:
        status, text = await _off_loop(as_nobody, f"{url}/tasks")
        assert status == 200 and json.loads(text)["items"] == []


async def test_a_request_over_no_socket_is_not_web_local(tmp_path: Path) -> None:
    """Keyless: a request whose connection the kernel does not list (here one made in
    process, with a made-up 127.0.0.1 peer) is refused: unknown is not the owner."""
    async with running_node(tmp_path, keys=False) as node, \
            node.client(key=None) as in_process:
        refused = await in_process.get("/tasks")
        assert refused.status_code == 403
        assert "owner could not be found" in refused.json()["detail"]


def test_the_owner_of_a_real_connection_is_this_process_user() -> None:
    """Over IPv4 and IPv6 loopback the client's socket is found with this process's uid,
    asked by netlink and read from the /proc tables alike; a made-up pair is nobody's."""
    tables = Path("/proc/self/net")  # the same tables under another name: no netlink
    for family_host in ("127.0.0.1", "::1"):
        server = loopback_socket() if family_host == "127.0.0.1" else _v6_socket()
        server.listen()
        with server, _connect(server) as client, server.accept()[0] as accepted:
            peer, ours = accepted.getpeername()[:2], accepted.getsockname()[:2]
            assert peer == client.getsockname()[:2]
            assert connection_owner(peer, ours) == os.geteuid()
            assert connection_owner(peer, ours, tables) == os.geteuid()
            assert owner_refusal(peer, ours) is None
            for where in (PROC_NET, tables):
                assert connection_owner(ours, (ours[0], 1), where) is None


def test_a_closed_connection_has_no_owner() -> None:
    """Once the client has closed, its socket lingers (FIN_WAIT, TIME_WAIT) and the
    kernel reports uid 0 for it: that must not pass for root's connection."""
    server = loopback_socket()
    server.listen()
    with server, _connect(server) as client, server.accept()[0] as accepted:
        peer, ours = accepted.getpeername()[:2], accepted.getsockname()[:2]
        assert connection_owner(peer, ours) == os.geteuid()
        client.close()
        assert accepted.recv(1) == b""  # the close has reached the server's end
        assert connection_owner(peer, ours) is None
        assert connection_owner(peer, ours, Path("/proc/self/net")) is None


def test_a_table_with_rows_it_cannot_read_and_no_table_at_all(tmp_path: Path) -> None:
    """Garbled rows are skipped; a system without the tables cannot tell, so it refuses."""
    (tmp_path / "tcp").write_text(
        "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid\n"
        "   0: garbage\n"
        "   1: ZZZZ:1F90 0100007F:zz 01 00000000:00000000 00:00000000 00000000 x\n"
        "   2: 0100007F:9C40 0100007F:1F90 01 00000000:00000000 00:00000000 00000000  1000"
        "        0 4242 1 0000000000000000 20 4 30 10 -1\n", encoding="ascii")
    assert connection_owner(("127.0.0.1", 40000), ("127.0.0.1", 8080), tmp_path) == 1000
    assert connection_owner(("127.0.0.1", 40001), ("127.0.0.1", 8080), tmp_path) is None
    assert owner_refusal(("127.0.0.1", 40000), ("127.0.0.1", 8080), tmp_path) == (
        "it came from another local user (uid 1000)")
    empty = tmp_path / "none"
    empty.mkdir()
    assert "cannot tell which local user" in str(
        owner_refusal(("127.0.0.1", 40000), ("127.0.0.1", 8080), empty))


async def _off_loop(call: Callable[..., tuple[int, str]], *args: str) -> tuple[int, str]:
    # The daemon answers on this loop: the other user's client must not block it.
    return await asyncio.to_thread(call, *args)


def _v6_socket() -> socket.socket:
    sock = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    sock.bind(("::1", 0))
    return sock


def _connect(server: socket.socket) -> socket.socket:
    return socket.create_connection(server.getsockname()[:2])


# Two requests over one keep-alive connection, as another user: http.client keeps it open.
KEEP_ALIVE_CLIENT = """
import http.client, json, sys
host, port = sys.argv[1], int(sys.argv[2])
connection = http.client.HTTPConnection(host, port, timeout=10)
answers = []
for _ in range(2):
    connection.request("GET", "/tasks")
    answer = connection.getresponse()
    answers.append([answer.status, answer.read().decode()])
print(json.dumps(answers))
"""


@as_root
async def test_each_connection_is_judged_by_its_own_owner(tmp_path: Path) -> None:
    """The daemon's server asks the kernel once per connection, not once per request: the
    yes its own user's keep-alive connection got covers that connection only. Another
    user's keep-alive connection to the same server is refused on every request."""
    async with running_node(tmp_path, keys=False) as node, \
            serve(node.app, trusted_proxies=[]) as url, \
            httpx.AsyncClient(base_url=url, timeout=10) as mine:
        for _ in range(3):  # one connection, kept alive: the first answer holds
            assert (await mine.get("/tasks")).status_code == 200
        port = url.rsplit(":", 1)[1]

        def nobody_twice() -> list[list[object]]:
            done = subprocess.run([SYSTEM_PYTHON, "-I", "-c", KEEP_ALIVE_CLIENT, "127.0.0.1",
                                   port], user=NOBODY, group=NOBODY, extra_groups=[],
                                  capture_output=True, text=True, timeout=30, cwd="/",
                                  env={"PATH": "/usr/bin:/bin"}, check=True)
            return list(json.loads(done.stdout))

        answers = await _off_loop(nobody_twice)
        assert [status for status, _ in answers] == [403, 403]
        assert all(f"another local user (uid {NOBODY})" in str(text) for _, text in answers)
        assert (await mine.get("/tasks")).status_code == 200


def test_a_connections_yes_is_kept_and_a_no_is_asked_again() -> None:
    """`keyless_refusal` with the server's per-connection `Connection`: the kernel's yes
    for a live connection is kept on it; an owner not found is not, and is asked anew."""
    server = loopback_socket()
    server.listen()
    with server, _connect(server) as client, server.accept()[0] as accepted:
        peer, ours = accepted.getpeername()[:2], accepted.getsockname()[:2]
        mine = Connection()
        scope = {"type": "http", "path": "/tasks", "headers": [], "client": peer,
                 "server": ours, CONNECTION: mine}
        assert keyless_refusal(scope, Headers(scope=scope)) is None
        assert mine.owned
        unknown = Connection()
        gone = {**scope, "client": (ours[0], 1), CONNECTION: unknown}  # no such socket
        for _ in range(2):
            assert "could not be found" in str(keyless_refusal(gone, Headers(scope=gone)))
        assert not unknown.owned
        client.close()
        assert accepted.recv(1) == b""
        # The same connection object keeps its yes (a socket's owner never changes) ...
        assert keyless_refusal(scope, Headers(scope=scope)) is None
        # ... which a request without one does not get: it is asked, and it is closed now.
        bare = {k: v for k, v in scope.items() if k != CONNECTION}
        assert "could not be found" in str(keyless_refusal(bare, Headers(scope=bare)))
