"""The serving part every local fake shares: an aiohttp app on a free port of 127.0.0.1.

A fake subclasses `FakeServer` and says what it answers in `app`; `async with fake:`
serves it in the running event loop, ``with fake:`` in a thread of its own (for tests
whose code under test blocks, such as a daemon or a CLI run in a subprocess).
"""

from __future__ import annotations

import asyncio
import threading
from typing import Self

from aiohttp import web


class FakeServer:
    """Start and stop serving `app`; `port` is the one the OS picked."""

    host: str = "127.0.0.1"
    port: int = 0
    # How long stopping waits for requests still being answered (aiohttp's own default);
    # a fake holding long polls open sets less.
    shutdown_timeout: float = 60.0
    _runner: web.AppRunner | None = None
    _thread: tuple[asyncio.AbstractEventLoop, threading.Thread] | None = None

    def app(self) -> web.Application:
        """The routes this fake answers (built anew each start)."""
        raise NotImplementedError

    async def start(self) -> Self:
        """Listen on a free port of `host`."""
        runner = web.AppRunner(self.app(), handle_signals=False, access_log=None,
                               shutdown_timeout=self.shutdown_timeout)
        await runner.setup()
        await web.TCPSite(runner, self.host, 0).start()
        self._runner = runner
        # Port 0 lets the OS pick a free port; read back which one it chose.
        self.port = int(runner.addresses[0][1])
        return self

    async def stop(self) -> None:
        """Stop serving (idempotent); a fake that holds requests releases them first."""
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> Self:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def __enter__(self) -> Self:
        loop = asyncio.new_event_loop()
        thread = threading.Thread(target=loop.run_forever, daemon=True)
        thread.start()
        self._thread = (loop, thread)
        asyncio.run_coroutine_threadsafe(self.start(), loop).result(10)
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._thread is not None, "__exit__ without __enter__"
        loop, thread = self._thread
        asyncio.run_coroutine_threadsafe(self.stop(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()
        self._thread = None
