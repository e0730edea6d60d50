"""getUpdates only while this node leads: the request object PTB uses for getUpdates.

Telegram allows one getUpdates consumer per bot. A node frozen (SIGSTOP, a suspended VM)
while it long-polled loses its polling lease to another node; when it thaws, PTB's
polling loop would send its next getUpdates at once — before the lease watcher has had a
chance to notice the lease is gone — and two nodes would consume one bot (each cutting
the other's long poll short with 409 Conflict). So every getUpdates first awaits the
lease's `fence`: after any pause longer than a confirmation holds, it waits for the
watcher's next word and, the lease lost, is refused as a network error (PTB's polling
loop retries it until the surface stops polling; its last offset confirmation on stop is
refused the same way and PTB ignores that).
"""

from __future__ import annotations

from typing import Any

from telegram import error as tg
from telegram.request import HTTPXRequest

from signoff.runtime.leadership import Lease, LeaseLost


class FencedRequest(HTTPXRequest):
    """PTB's HTTPX request, for getUpdates, refusing to send without a fresh lease."""

    def __init__(self, *, timeout: float) -> None:
        super().__init__(connection_pool_size=1, read_timeout=timeout, write_timeout=timeout,
                         connect_timeout=timeout, pool_timeout=timeout)
        self.lease: Lease | None = None  # set while this node holds the polling lease

    async def do_request(self, url: str, method: str, *args: Any,
                         **kwargs: Any) -> tuple[int, bytes]:
        """Send only while this node still leads."""
        lease = self.lease
        if lease is None:
            raise tg.NetworkError("getUpdates refused: this node does not hold the polling "
                                  "lease")
        try:
            await lease.fence()
        except LeaseLost as exc:
            raise tg.NetworkError(f"getUpdates refused: {exc}") from exc
        return await super().do_request(url, method, *args, **kwargs)
