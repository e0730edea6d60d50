"""Pure network helpers on the ground floor, shared by the config checks, the API and the daemon."""

from __future__ import annotations

import functools
import ipaddress


# Cached: the keyless mode asks it of the Host header and the peer address of every
# request, and parsing an address each time was a visible share of a small request.
@functools.lru_cache(maxsize=256)
def is_loopback(host: str) -> bool:
    """True for 127.0.0.0/8, ::1 and ``localhost`` (the only hosts that may run keyless)."""
    name = host.strip().strip("[]").lower()
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False
