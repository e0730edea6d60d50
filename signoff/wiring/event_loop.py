"""The daemon's event loop: uvloop where it is installed (Linux, macOS), asyncio's own
otherwise or when ``daemon.event_loop = "asyncio"`` asks for it.

Why: the daemon's main thread is one event loop that parses every request, runs the
worker and hands results between the database thread and the waiters; with asyncio's
pure-Python loop, ``_run_once`` and its selector were about a fifth of that thread's time
under load (bench/throughput.py). uvloop runs the same loop on libuv, in C.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from signoff.config.settings import EventLoop
from signoff.errors import ConfigError

T = TypeVar("T")


def loop_factory(choice: EventLoop) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """The factory for ``choice`` (None: asyncio's default loop); ConfigError when
    uvloop is asked for by name and cannot be imported."""
    if choice == "asyncio":
        return None
    try:
        import uvloop
    except ImportError as exc:
        if choice == "uvloop":
            raise ConfigError('daemon.event_loop = "uvloop", but uvloop is not installed '
                              '(pip install uvloop), or set it to "auto"') from exc
        return None
    return uvloop.new_event_loop


def loop_name(loop: asyncio.AbstractEventLoop) -> str:
    """``uvloop`` or ``asyncio``: which loop a running daemon is on (its start-up line)."""
    return "uvloop" if type(loop).__module__.startswith("uvloop") else "asyncio"


def run(main: Coroutine[Any, Any, T], choice: EventLoop) -> T:
    """``asyncio.run(main)`` on the loop ``choice`` names."""
    try:
        factory = loop_factory(choice)
    except BaseException:
        main.close()  # never awaited: close it, or Python warns about it at exit
        raise
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(main)
