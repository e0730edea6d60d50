"""Which local user opened a loopback connection: the keyless mode's answer to "who is this?".

Without a key the daemon answers direct loopback requests as ``web:local``, the person
who runs it. On a machine shared with other accounts, every one of them can connect to
127.0.0.1 too, so the keyless mode also asks the kernel who owns the *client's* end of
the connection: the socket whose local address is the request's client address and whose
remote address is the daemon's own (``scope["client"]`` and ``scope["server"]``, the peer
and our end as uvicorn saw them on the socket, never a header).

On Linux the question goes to the kernel's socket-diagnostics netlink family (what ``ss``
uses), which looks up that one connection: a few microseconds, asked once per connection
(`Connection`, which the daemon's HTTP server gives each request of a keep-alive
connection, never keyed by a port another process could reuse). Where netlink is not
allowed, ``/proc/net/tcp`` and ``/proc/net/tcp6`` tell the same, at the price of the
kernel writing out every socket it has (about a millisecond a connection on a busy
machine). Where neither exists (macOS, BSD, a sandbox without /proc)
the owner is unknown and the keyless mode refuses, unless ``[api] keyless_any_local_user
= true`` says every local user may decide.
"""

from __future__ import annotations

import errno
import functools
import ipaddress
import os
import socket
import struct
import sys
import threading
from pathlib import Path

PROC_NET = Path("/proc/net")
_TABLES = ("tcp", "tcp6")
_ESTABLISHED = "01"
_TCP_ESTABLISHED = 1  # the same state, as a number (linux/tcp_states.h)
Address = tuple[str, int]
IP = ipaddress.IPv4Address | ipaddress.IPv6Address


CONNECTION = "signoff.connection"  # the ASGI scope key of a request's `Connection`


class Connection:
    """What one TCP connection has shown of its owner, for as long as it is open.

    The server makes one per connection and puts it in every request's scope under
    `CONNECTION` (signoff.wiring.daemon). A socket's owner is fixed when the socket is
    made, so once the kernel has said that this connection's client is the daemon's own
    user, later requests on it need not ask again: the lookup (two system calls and
    some packing) was a tenth of a keyless ``POST /tasks`` (bench/throughput.py). Only
    that yes is kept: a refusal, or an owner not found, is asked again next time."""

    __slots__ = ("owned",)

    def __init__(self) -> None:
        self.owned = False


@functools.lru_cache(maxsize=64)  # a handful of client addresses, parsed on every request
def _plain(host: str) -> IP | None:
    """An address as the kernel keeps it (an IPv4-mapped IPv6 address as IPv4)."""
    try:
        ip = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return None
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    return ip


def _decode(field: str) -> tuple[IP, int] | None:
    """``0100007F:1F90`` -> (127.0.0.1, 8080): each 32-bit word in the host's byte order."""
    hexaddr, _, hexport = field.partition(":")
    try:
        words = [int(hexaddr[i:i + 8], 16).to_bytes(4, sys.byteorder)
                 for i in range(0, len(hexaddr), 8)]
        packed = b"".join(words)
        ip = ipaddress.ip_address(packed)
        port = int(hexport, 16)
    except ValueError:
        return None
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip, port


def tells_owners(proc_net: Path = PROC_NET) -> bool:
    """True when this system lists TCP sockets with their owners (Linux: netlink is
    asked first, but these tables are there wherever it is)."""
    return (proc_net / "tcp").exists()


# linux/netlink.h, linux/sock_diag.h and linux/inet_diag.h: one request, one answer.
_NETLINK_SOCK_DIAG = 4
_SOCK_DIAG_BY_FAMILY = 20
_NLM_F_REQUEST = 1
_NLMSG_ERROR = 2
_HEADER = struct.Struct("=IHHII")  # nlmsghdr: length, type, flags, sequence, port id
_NO_COOKIE = 0xFFFFFFFF  # INET_DIAG_NOCOOKIE: match by addresses, not by a cookie
_ALL_STATES = 0xFFFFFFFF
# inet_diag_msg: family, state, timer, retransmits, the 48-byte socket id, then expires,
# read queue, write queue, uid and inode.
_MESSAGE = struct.Struct("=BB2x48x12xI")


class _NoNetlink(Exception):
    """The kernel's socket diagnostics cannot be asked here (not Linux, or not allowed)."""


class _Link:
    """One netlink socket kept open for the process's lookups: opening and closing one per
    request doubled the lookup's cost (9 us against 4.6), and each of those system calls
    lets the database thread take the GIL from the event loop.
    Answers are matched to their question by sequence number, so a late answer to an
    abandoned question is never taken for the next one's."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None
        self._seq = 0

    def ask(self, body: bytes) -> bytes:
        with self._lock:
            self._seq = self._seq % 0xFFFFFFFF + 1
            try:
                if self._sock is None:
                    self._sock = socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM,
                                               _NETLINK_SOCK_DIAG)
                    self._sock.settimeout(1.0)  # the kernel answers at once; never hang
                self._sock.send(_HEADER.pack(_HEADER.size + len(body), _SOCK_DIAG_BY_FAMILY,
                                             _NLM_F_REQUEST, self._seq, 0) + body)
                while True:
                    answer = self._sock.recv(8192)
                    if len(answer) < _HEADER.size or _HEADER.unpack_from(answer)[3] == self._seq:
                        return answer
            except (AttributeError, OSError) as exc:  # AttributeError: no AF_NETLINK
                if self._sock is not None:
                    self._sock.close()
                    self._sock = None
                raise _NoNetlink(str(exc)) from exc


_LINK = _Link()


def _ask_kernel(peer: IP, peer_port: int, ours: IP, our_port: int) -> int | None:
    """The uid of the established socket ``peer:peer_port`` -> ``ours:our_port``, from a
    NETLINK_SOCK_DIAG lookup of exactly that connection (None: there is none)."""
    if peer.version != ours.version:
        return None
    family = socket.AF_INET if peer.version == 4 else socket.AF_INET6
    sockid = (struct.pack("!HH", peer_port, our_port) + peer.packed.ljust(16, b"\0")
              + ours.packed.ljust(16, b"\0") + struct.pack("=III", 0, _NO_COOKIE, _NO_COOKIE))
    body = struct.pack("=BBBxI", family, socket.IPPROTO_TCP, 0, _ALL_STATES) + sockid
    answer = _LINK.ask(body)
    if len(answer) < _HEADER.size:
        raise _NoNetlink("a short netlink answer")
    kind = _HEADER.unpack_from(answer)[1]
    if kind == _NLMSG_ERROR:
        code = -struct.unpack_from("=i", answer, _HEADER.size)[0]
        if code == errno.ENOENT:
            return None  # no such connection: gone, or never a socket
        raise _NoNetlink(os.strerror(code))
    if kind != _SOCK_DIAG_BY_FAMILY or len(answer) < _HEADER.size + _MESSAGE.size:
        raise _NoNetlink(f"an unexpected netlink answer (type {kind})")
    _family, state, uid = _MESSAGE.unpack_from(answer, _HEADER.size)
    # A closing or TIME_WAIT socket reports uid 0: only a live connection has an owner.
    return uid if state == _TCP_ESTABLISHED else None


def connection_owner(client: Address | None, server: Address | None,
                     proc_net: Path = PROC_NET) -> int | None:
    """The uid owning the client end of the TCP connection ``client`` -> ``server``.

    None when it cannot be told: no address, no way to ask, or no such socket (the
    client already gone, or a request that did not come over a socket). The kernel is
    asked by netlink; the tables under ``proc_net`` are read where that is not allowed
    (or when a test names other tables)."""
    if not client or not server or not all(isinstance(end[1], int) for end in (client, server)):
        return None  # a Unix socket, or a request that came over no socket at all
    peer, ours = _plain(str(client[0])), _plain(str(server[0]))
    if peer is None or ours is None:
        return None
    if proc_net == PROC_NET:
        try:
            return _ask_kernel(peer, client[1], ours, server[1])
        except _NoNetlink:
            pass  # the tables below tell the same, more slowly
    return _read_tables(peer, client[1], ours, server[1], proc_net)


def _read_tables(peer: IP, peer_port: int, ours: IP, our_port: int,
                 proc_net: Path) -> int | None:
    """The same answer from ``/proc/net/tcp`` and ``tcp6``: every socket, read line by line."""
    wanted = ((peer, peer_port), (ours, our_port))
    for table in _TABLES:
        try:
            lines = (proc_net / table).read_text(encoding="ascii").splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            # sl local rem st tx:rx tr:when retrnsmt uid ...: a row we cannot read is skipped.
            if len(fields) < 8 or fields[3] != _ESTABLISHED:
                continue
            if (_decode(fields[1]), _decode(fields[2])) == wanted and fields[7].isdigit():
                return int(fields[7])
    return None


def owner_refusal(client: Address | None, server: Address | None,
                  proc_net: Path = PROC_NET) -> str | None:
    """Why the client of this connection may not act as the daemon's own user (None: it
    is that user, or root, who could read the daemon's state anyway)."""
    owner = connection_owner(client, server, proc_net)
    if owner is None:
        return ("this system cannot tell which local user opened the connection "
                "(no /proc/net/tcp)" if not tells_owners(proc_net)
                else "the connection's owner could not be found")
    if owner not in (os.geteuid(), 0):
        return f"it came from another local user (uid {owner})"
    return None
