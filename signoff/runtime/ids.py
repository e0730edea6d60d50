"""Identifiers: short, random, URL- and callback-safe (Telegram allows 64 bytes of data)."""

from __future__ import annotations

import os
import threading

_ALPHABET = "abcdefghijkmnpqrstuvwxyz23456789"  # no 0/o, 1/l: read aloud from a phone


class _Entropy:
    """Bytes of the system's random source, read 4 KiB at a time.

    One ``getrandom`` system call per id was a hot spot of the per-task path: on the event
    loop's thread every system call also hands the GIL to the database thread, and the
    loop waits to get it back (bench/throughput.py). The bytes are the same os.urandom
    bytes, only read ahead; each is used once. A forked child starts with none, so it
    can never repeat its parent's ids.
    """

    CHUNK = 4096

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._reset()
        os.register_at_fork(after_in_child=self._reset)

    def _reset(self) -> None:
        self._buf = b""
        self._at = 0
        self._lock = threading.Lock()  # a lock held at fork time would stay held

    def take(self, n: int) -> bytes:
        """``n`` fresh random bytes."""
        with self._lock:
            if self._at + n > len(self._buf):
                self._buf, self._at = os.urandom(max(self.CHUNK, n)), 0
            out = self._buf[self._at:self._at + n]
            self._at += n
            return out


_ENTROPY = _Entropy()


def new_id(prefix: str, length: int = 10) -> str:
    """A random id such as ``t-k3x9…``; 10 symbols of 32 = 50 bits."""
    # 5 bits a symbol from one integer, not one random draw a symbol.
    bits = int.from_bytes(_ENTROPY.take((5 * length + 7) // 8), "big")
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
