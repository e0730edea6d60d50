"""Identifiers: short, random, URL- and callback-safe (Telegram allows 64 bytes of data)."""

from __future__ import annotations

import secrets

_ALPHABET = "abcdefghijkmnpqrstuvwxyz23456789"  # no 0/o, 1/l: read aloud from a phone


def new_id(prefix: str, length: int = 10) -> str:
    """A random id such as ``t-k3x9…``; 10 symbols of 32 = 50 bits."""
    # One read of the system random source for the whole id (5 bits a symbol), not one a
    # symbol: it was a hot spot of the per-task path.
    bits = secrets.randbits(5 * length)
    return prefix + "".join(_ALPHABET[(bits >> (5 * i)) & 31] for i in range(length))


def task_id() -> str:
    """A new task id."""
    return new_id("t-")


def approval_id() -> str:
    """A new approval id (kept short for chat buttons)."""
    return new_id("a-")


def grant_id() -> str:
    """A new grant id."""
    return new_id("g-")
