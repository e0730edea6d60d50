"""Keeping each chat surface up: the start-up check, retries with backoff, and its health.

A surface is in one of three states, shown by ``GET /health`` under ``surfaces``:

- ``ok``: checked (Slack ``auth.test``, Telegram ``getMe``) and running;
- ``degraded: <why>``: its check or its `run` failed with a retryable error (5xx, 429,
  timeout, refused connection). Its card jobs wait in the outbox (the dispatcher holds
  the surface, so the wait costs none of their attempts), the check is retried with
  backoff — after a 429, exactly as long as the platform asked — and the other surfaces
  carry on. Once the check passes the surface runs again and the waiting cards go out;
- ``disabled: <why>``: a final error (a refused token, a missing scope). Logged as an
  error; the surface is left out until the daemon is restarted with a fixed config, and
  its queued jobs are dropped (the outbox gives them up as "no platform").
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from datetime import timedelta

from signoff.bot.outbox import Dispatcher, backoff
from signoff.bot.ports import DecisionHandler, Surface
from signoff.errors import PlatformError, PlatformRejected, RateLimited
from signoff.runtime.clock import Clock

log = logging.getLogger(__name__)

OK = "ok"
# A run that lasted this long was healthy: its failure starts the backoff afresh.
STEADY = timedelta(minutes=1)

Sleep = Callable[[float], Awaitable[None]]


class Surfaces:
    """Checks, runs and retries every chat surface; knows how each one is doing."""

    def __init__(self, *, surfaces: dict[str, Surface], dispatcher: Dispatcher,
                 clock: Clock, sleep: Sleep = asyncio.sleep) -> None:
        # The flow's own dict: a disabled surface leaves it, so no new job names it.
        self.surfaces = surfaces
        self.dispatcher = dispatcher
        self.clock = clock
        self.sleep = sleep
        self.state: dict[str, str] = dict.fromkeys(surfaces, OK)
        self._failures: dict[str, int] = {}
        self._wait: dict[str, float] = {}

    def health(self) -> dict[str, str]:
        """``{"slack": "degraded: …", "web": "ok", …}`` for ``GET /health``."""
        return dict(self.state)

    async def check_all(self) -> None:
        """The start-up check of every surface, one after the other."""
        for name in list(self.surfaces):
            await self._check(name)

    def service(self, name: str, on_decision: DecisionHandler) -> Callable[[], Awaitable[None]]:
        """The daemon service that keeps surface ``name`` running until cancelled."""
        async def supervise() -> None:
            await self._supervise(name, on_decision)
        return supervise

    async def _supervise(self, name: str, on_decision: DecisionHandler) -> None:
        while (platform := self.surfaces.get(name)) is not None:
            if self.state[name] != OK:
                await self.sleep(self._wait.get(name, 0.0))
                await self._check(name)
                continue
            started = self.clock.now()
            try:
                await platform.run(on_decision)
                return  # run only returns when the surface has nothing left to do
            except PlatformRejected as exc:
                self._disable(name, exc)
            except PlatformError as exc:
                if self.clock.now() - started >= STEADY:
                    self._failures.pop(name, None)
                self._degrade(name, exc, during="run")
            except Exception as exc:  # a bug, not the platform: the daemon logs it
                self.state[name] = f"stopped: {type(exc).__name__} (see the log)"
                raise

    async def _check(self, name: str) -> None:
        platform = self.surfaces.get(name)
        if platform is None:
            return
        try:
            await platform.check()
        except PlatformRejected as exc:
            self._disable(name, exc)
        except PlatformError as exc:
            self._degrade(name, exc, during="check")
        else:
            self._recover(name)

    def _degrade(self, name: str, exc: PlatformError, *, during: str) -> None:
        failures = self._failures.get(name, 0)
        self._failures[name] = failures + 1
        wait = exc.retry_after if isinstance(exc, RateLimited) else backoff(failures)
        self._wait[name] = wait
        self.state[name] = f"degraded: {exc}"
        self.dispatcher.hold(name)
        log.warning(f"surface_degraded surface={name} during={during} retry_in={wait:g}s "
                    f"error={exc}")

    def _recover(self, name: str) -> None:
        was = self.state.get(name, OK)
        self.state[name] = OK
        self._wait.pop(name, None)
        self.dispatcher.release(name)
        if was != OK:
            log.info(f"surface_recovered surface={name}")

    def _disable(self, name: str, exc: PlatformError) -> None:
        # Loud on purpose: nothing will reach this surface until someone fixes the config.
        log.error(f"surface_disabled surface={name} reason={exc}")
        self.state[name] = f"disabled: {exc}"
        self.surfaces.pop(name, None)
        self.dispatcher.release(name)  # its queued jobs are given up, not held forever
