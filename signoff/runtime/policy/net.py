"""Where a network tool's request really goes, and what the policy makes of it.

The policy, not the tool, decides: `NetRule.destination` resolves a URL's host (through a
`Resolver`, injectable for tests) and sorts it into one `NetKind`:

* ``own``: the daemon's own listening address (any loopback or unspecified address, or
  one of the daemon's own, at the daemon's port; and the host and port of
  ``daemon.public_url``) → BLOCK, whatever ``net_allow`` says;
* ``allowed``: listed in ``policy.net_allow`` (a host, ``*.suffix``, or a CIDR / address
  every resolved address is in) → judged as any other destination;
* ``private``: any resolved address is loopback, link-local, private (RFC 1918, CGNAT),
  unique-local or unspecified → never autonomous: asked like a SEND, the card says
  "private network";
* ``public``: the rest (also a name that does not resolve now: it cannot be reached now,
  and the run checks again).

The same rule runs again when the tool connects (`GuardedTransport`): on the first hop
and on every redirect, and the connection goes to the address that was checked (the URL's
host is replaced by that address, the ``Host`` header and TLS server name stay the
name), so a DNS answer that changes between the check and the connection cannot take
the request elsewhere. A private first hop is connected to only when the policy marked
the action private (a person, or their grant, saw "private network"); a redirect is
followed only to a destination that would not need asking.
"""

from __future__ import annotations

import asyncio
import enum
import functools
import ipaddress
import socket
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Protocol

import httpx

from signoff.errors import ToolError

# The capabilities whose targets are URLs a request goes to.
NET_CAPABILITIES = frozenset({"net.fetch", "net.post"})
PRIVATE_NETWORK = "private network"
_SHARED = ipaddress.ip_network("100.64.0.0/10")  # carrier-grade NAT: not the internet either

IpAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IpNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


class Resolver(Protocol):
    """Turns a host name into the addresses a connection would use."""

    async def resolve(self, host: str, port: int) -> tuple[str, ...]:
        """The addresses of ``host`` (empty when it does not resolve)."""
        ...


@dataclass(frozen=True)
class SystemResolver:
    """The operating system's resolver (getaddrinfo, run off the event loop), bounded by
    ``timeout`` seconds: a name that does not answer in time does not resolve."""

    timeout: float = 5.0

    async def resolve(self, host: str, port: int) -> tuple[str, ...]:
        """The addresses of ``host``; () when it does not resolve."""
        try:
            async with asyncio.timeout(self.timeout):
                infos = await asyncio.get_running_loop().getaddrinfo(
                    host, port, type=socket.SOCK_STREAM)
        except (OSError, UnicodeError, TimeoutError):
            return ()
        return tuple(dict.fromkeys(str(info[4][0]) for info in infos))


class NetRefused(ToolError):
    """A network tool was stopped before connecting (a private or the daemon's address)."""


class NetKind(enum.StrEnum):
    """What a destination is, as far as asking goes."""

    PUBLIC = "public"
    ALLOWED = "allowed"
    PRIVATE = "private"
    OWN = "own"


@dataclass(frozen=True)
class Destination:
    """One URL's host, its addresses and what they are."""

    host: str
    port: int
    addresses: tuple[str, ...]
    kind: NetKind

    @property
    def shown(self) -> str:
        """The host and, when it is a name, what it resolved to: "db.test (10.0.0.5)"."""
        first = ", ".join(self.addresses[:3])
        return self.host if not first or first == self.host else f"{self.host} ({first})"


@dataclass(frozen=True)
class NetAllow:
    """``policy.net_allow`` parsed: host names, ``*.suffix`` entries and networks."""

    hosts: frozenset[str] = frozenset()
    suffixes: tuple[str, ...] = ()
    networks: tuple[IpNetwork, ...] = ()

    @classmethod
    def parse(cls, entries: Iterable[str]) -> NetAllow:
        """Parse the entries; ValueError naming the first one that is none of the three."""
        hosts: set[str] = set()
        suffixes: list[str] = []
        networks: list[IpNetwork] = []
        for raw in entries:
            entry = raw.strip().lower().rstrip(".")
            if entry.startswith("*.") and _is_name(entry[2:]):
                suffixes.append(entry[1:])
                continue
            try:
                networks.append(ipaddress.ip_network(entry.strip("[]"), strict=False))
                continue
            except ValueError:
                pass
            if not _is_name(entry):
                raise ValueError(f"{raw!r} is not a host name, '*.suffix', address or CIDR")
            hosts.add(entry)
        return cls(frozenset(hosts), tuple(suffixes), tuple(networks))

    def covers(self, host: str, addresses: tuple[str, ...]) -> bool:
        """Whether the host name, or every one of its addresses, is listed."""
        name = host.lower().rstrip(".")
        if name in self.hosts or any(name.endswith(s) for s in self.suffixes):
            return True
        ips = [_ip(a) for a in addresses]
        return bool(ips) and all(ip is not None and any(ip in n for n in self.networks)
                                 for ip in ips)


@dataclass(frozen=True)
class NetRule:
    """The network part of the policy (see the module docstring)."""

    allow: NetAllow = field(default_factory=NetAllow)
    own_ports: frozenset[int] = frozenset()  # the daemon's listening port(s)
    own_addresses: frozenset[str] = frozenset()  # its non-loopback addresses, if any
    own_urls: frozenset[tuple[str, int]] = frozenset()  # (host, port) of daemon.public_url
    resolver: Resolver = field(default_factory=SystemResolver)

    async def destination(self, url: str) -> Destination:
        """Where ``url`` goes now."""
        host, port = origin(url)
        literal = _ip(host)
        addresses = ((str(literal),) if literal is not None
                     else await self.resolver.resolve(host, port))
        return Destination(host, port, addresses, self.kind_of(host, port, addresses))

    def kind_of(self, host: str, port: int, addresses: tuple[str, ...]) -> NetKind:
        """What ``host`` at these addresses is (own before allowed before private)."""
        # An IPv4 address written as IPv6 (::ffff:127.0.0.1) reaches the IPv4 listener,
        # and Python does not call it loopback: judge it as the IPv4 address it is.
        ips = [_unmapped(ip) for ip in (_ip(a) for a in addresses) if ip is not None]
        if (host.lower().rstrip("."), port) in self.own_urls:
            return NetKind.OWN
        if port in self.own_ports and any(
                ip.is_loopback or ip.is_unspecified or str(ip) in self.own_addresses
                for ip in ips):
            return NetKind.OWN
        if self.allow.covers(host, addresses):
            return NetKind.ALLOWED
        if any(is_private(ip) for ip in ips):
            return NetKind.PRIVATE
        return NetKind.PUBLIC


# Remembered per string: the policy reads the same few URLs on every evaluation, and
# httpx's parser was half of an evaluation's time (bench/policy.py). A URL's parts are a
# pure function of its text; a name's addresses are not, and are never remembered here.
@functools.lru_cache(maxsize=4096)
def url_parts(url: str) -> tuple[str, str, int]:
    """The scheme, host (lower case) and port ``url`` connects to, as httpx reads it: the
    network tools connect with httpx, so the check and the connection never read one URL
    two ways. Raises `httpx.InvalidURL` for a URL httpx cannot read."""
    parsed = httpx.URL(url)
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    return parsed.scheme, parsed.host.lower(), port


def origin(url: str) -> tuple[str, int]:
    """The host (lower case) and port a URL connects to."""
    _, host, port = url_parts(url)
    return host, port


@functools.lru_cache(maxsize=4096)
def is_private(ip: IpAddress) -> bool:
    """Loopback, link-local, private, unique-local, shared or unspecified (an IPv4 address
    written as IPv6, ``::ffff:127.0.0.1``, counts as the IPv4 address)."""
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    if isinstance(ip, ipaddress.IPv4Address) and ip in _SHARED:
        return True
    return (ip.is_loopback or ip.is_link_local or ip.is_private or ip.is_unspecified
            or (isinstance(ip, ipaddress.IPv6Address) and ip.is_site_local))


@functools.lru_cache(maxsize=4096)
def _ip(text: str) -> IpAddress | None:
    try:
        return ipaddress.ip_address(text.strip("[]").split("%", 1)[0])
    except ValueError:
        return None


def _unmapped(ip: IpAddress) -> IpAddress:
    """``::ffff:a.b.c.d`` as ``a.b.c.d``; any other address as it is."""
    mapped = ip.ipv4_mapped if isinstance(ip, ipaddress.IPv6Address) else None
    return mapped if mapped is not None else ip


def _is_name(text: str) -> bool:
    labels = text.split(".")
    return bool(text) and all(
        0 < len(label) <= 63 and label.replace("-", "").replace("_", "").isalnum()
        for label in labels)


def own_addresses(host: str) -> frozenset[str]:
    """The addresses a daemon bound to ``host`` answers on besides loopback: the host's
    own, or every address of this machine's name when it binds all interfaces."""
    literal = _ip(host)
    if literal is not None and not literal.is_unspecified:
        return frozenset({str(literal)})
    name = socket.gethostname() if (literal is not None or not host) else host
    try:
        infos = socket.getaddrinfo(name, None, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        return frozenset()
    return frozenset(str(info[4][0]) for info in infos)


class GuardedTransport(httpx.AsyncBaseTransport):
    """An httpx transport that checks each hop with the `NetRule` and connects to the
    address it checked. One per tool call: its first request is the call's own URL, the
    next ones are redirects."""

    def __init__(self, rule: NetRule, *, private_ok: bool,
                 inner: httpx.AsyncBaseTransport | None = None) -> None:
        self.rule = rule
        self.private_ok = private_ok  # the policy marked this call private: a person saw it
        self.inner = inner or httpx.AsyncHTTPTransport()
        self.hops = 0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        """Check, pin, send."""
        first = self.hops == 0
        self.hops += 1
        dest = await self.rule.destination(str(request.url))
        refusal = self._refusal(dest, str(request.url), first=first)
        if refusal:
            raise NetRefused(refusal)
        if not dest.addresses:
            raise NetRefused(f"{request.url}: the host {dest.host} does not resolve")
        # Connect to the checked address; the Host header (set from the URL by the client)
        # and the TLS server name stay the host's name, so certificates are checked as usual.
        pinned = httpx.Request(request.method, request.url.copy_with(host=dest.addresses[0]),
                               headers=request.headers, stream=request.stream,
                               extensions={**request.extensions, "sni_hostname": dest.host})
        return await self.inner.handle_async_request(pinned)

    def _refusal(self, dest: Destination, url: str, *, first: bool) -> str:
        hop = "" if first else "redirect not followed: "
        if dest.kind is NetKind.OWN:
            return (f"{hop}{url} is the signoff daemon's own address ({dest.shown}); "
                    "tools never reach it")
        if dest.kind is NetKind.PRIVATE and not (first and self.private_ok):
            why = ("it needs approval" if not first else
                   "it was not approved as a private-network request (its address changed?)")
            return f"{hop}{url} is on a {PRIVATE_NETWORK} ({dest.shown}); {why}"
        return ""

    async def aclose(self) -> None:
        """Close the inner transport."""
        await self.inner.aclose()
