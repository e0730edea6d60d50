"""Socket Mode for `SlackSurface`: hold bolt's websocket open until cancelled.

bolt's `AsyncSocketModeHandler` reconnects by itself when Slack asks; what it leaves to us
is closing cleanly: its client loops are cancelled by ``close`` but not awaited, so they
are awaited here and none outlives the surface.
"""

from __future__ import annotations

import asyncio
import logging

from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler
from slack_bolt.async_app import AsyncApp

logger = logging.getLogger(__name__)


async def run_socket(app: AsyncApp, *, app_token: str | None, first_url: str | None,
                     timeout: float) -> None:
    """Connect (to ``first_url`` when we already asked Slack for one) and wait forever."""
    handler = AsyncSocketModeHandler(
        app, app_token=app_token, logger=logging.getLogger(f"{logger.name}.socket"))
    try:
        handler.client.wss_uri = first_url
        await handler.connect_async()
        logger.info("slack_listening mode=socket")
        await asyncio.Event().wait()
    finally:
        await close_socket(handler, timeout)


async def close_socket(handler: AsyncSocketModeHandler, timeout: float) -> None:
    """Close the websocket within ``timeout`` and wait for the client's loops to end."""
    client = handler.client
    try:
        async with asyncio.timeout(timeout):
            await handler.close_async()
    except Exception as exc:  # closing a broken socket must not hide why we stopped
        logger.warning("slack_socket_close_failed error=%s", type(exc).__name__)
    # close() only cancels the client's loops; wait for them so none outlives us.
    loops = [f for f in (client.message_processor, client.message_receiver,
                         client.current_session_monitor) if f is not None]
    for loop in loops:
        loop.cancel()
    await asyncio.gather(*loops, return_exceptions=True)
    logger.info("slack_socket_closed")
