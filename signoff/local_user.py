"""Which local user opened a loopback connection: the keyless mode's answer to "who is this?".

Without a key the daemon answers direct loopback requests as ``web:local``, the person
who runs it. On a machine shared with other accounts, every one of them can connect to
127.0.0.1 too, so the keyless mode also asks the kernel who owns the *client's* end of
the connection: on Linux ``/proc/net/tcp`` and ``/proc/net/tcp6`` list every TCP socket
with its local and remote address and the uid that created it. The client's socket is
the one whose local address is the request's client address and whose remote address is
the daemon's own (``scope["client"]`` and ``scope["server"]``, the peer and our end as
uvicorn saw them on the socket, never a header).

The table is read on each request (a keyless daemon is one person's; a per-connection
cache would have to know when a port is reused by someone else). Where there is no such
table (macOS, BSD, a sandbox without /proc) the owner is unknown and the keyless mode
refuses, unless ``[api] keyless_any_local_user = true`` says every local user may decide.
"""

from __future__ import annotations

import ipaddress
import os
import sys
from pathlib import Path

PROC_NET = Path("/proc/net")
_TABLES = ("tcp", "tcp6")
_ESTABLISHED = "01"
Address = tuple[str, int]
IP = ipaddress.IPv4Address | ipaddress.IPv6Address


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
    """True when this system lists TCP sockets with their owners (Linux)."""
    return (proc_net / "tcp").exists()


def connection_owner(client: Address | None, server: Address | None,
                     proc_net: Path = PROC_NET) -> int | None:
    """The uid owning the client end of the TCP connection ``client`` -> ``server``.

    None when it cannot be told: no address, no /proc table, or no such socket (the
    client already gone, or a request that did not come over a socket)."""
    if not client or not server or not all(isinstance(end[1], int) for end in (client, server)):
        return None  # a Unix socket, or a request that came over no socket at all
    peer, ours = _plain(str(client[0])), _plain(str(server[0]))
    if peer is None or ours is None:
        return None
    wanted = ((peer, client[1]), (ours, server[1]))
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
