"""Checks on an incoming Slack HTTP request before any of it is believed.

Slack signs every request: ``X-Slack-Signature: v0=HMAC_SHA256(secret, "v0:{ts}:{body}")``
with ``X-Slack-Request-Timestamp: ts``. We refuse:

- a missing or unreadable timestamp, or one more than 5 minutes from our clock (Slack's
  own rule; it bounds how long a captured request stays usable);
- a signature that does not match (checked with `slack_sdk.signature.SignatureVerifier`);
- a replay: the same (timestamp, signature) pair seen before while it is still inside the
  window. A signature covers the timestamp and the body, so an identical pair is the same
  request sent twice; Slack never does that for an interaction, an attacker who captured
  one might — nor, for the Events API, the same ``event_id`` again (Slack retries an
  event it thinks was not acknowledged, with a new timestamp and signature).

Where the request was seen before is the node's `ReplayLedger` when the daemon gives one
(on PostgreSQL a table every node shares, so a copy sent to another node of the cluster
is refused too); without one, a small bounded in-memory set of (timestamp, signature)
pairs: per process, forgotten on restart, which the 5-minute window makes harmless for
all but the last minutes.

The check is ours rather than bolt's middleware so that a refusal is logged without the
request body and the replay set only ever holds authentic requests.
"""

from __future__ import annotations

import enum
import heapq
import time
from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import Any

from slack_sdk.signature import Clock, SignatureVerifier

from signoff.runtime.replay import ReplayLedger

WINDOW_SECONDS = 300
REPLAY_CAPACITY = 10_000
# A copy is refused by the timestamp window once its timestamp is 5 minutes old, and the
# original was accepted at most 5 minutes from its timestamp: keys need not live longer.
REPLAY_TTL = timedelta(seconds=2 * WINDOW_SECONDS)


def replay_keys(headers: Mapping[str, str], payload: Mapping[str, Any]) -> list[str]:
    """The ledger keys of an authentic request: its (timestamp, signature) pair, and its
    ``event_id`` when it is an Events API callback."""
    keys = [f"slack:sig:{headers['x-slack-request-timestamp']}:{headers['x-slack-signature']}"]
    event_id = payload.get("event_id")
    if isinstance(event_id, str) and event_id:
        keys.append(f"slack:event:{event_id}")
    return keys


class Refusal(enum.StrEnum):
    """Why a request was refused; the value is the log event suffix."""

    NO_SIGNATURE = "no_signature"
    STALE = "stale_timestamp"
    BAD_SIGNATURE = "bad_signature"
    REPLAYED = "replayed"


class _CallableClock(Clock):
    """Adapts a ``() -> float`` to the SDK's clock so both checks share one time."""

    def __init__(self, now: Callable[[], float]) -> None:
        self._now = now

    def now(self) -> float:
        return self._now()


class ReplayGuard:
    """Remembers accepted (timestamp, signature) pairs until their timestamp is stale."""

    def __init__(self, *, capacity: int = REPLAY_CAPACITY, window: int = WINDOW_SECONDS,
                 now: Callable[[], float] = time.time) -> None:
        self._capacity = capacity
        self._window = window
        self._now = now
        self._seen: set[tuple[int, str]] = set()
        self._expiry: list[tuple[int, tuple[int, str]]] = []  # heap by expiry time

    def __len__(self) -> int:
        return len(self._seen)

    def first_time(self, timestamp: int, signature: str) -> bool:
        """Record the pair; False if it was already recorded (a replay)."""
        self._forget_stale()
        key = (timestamp, signature)
        if key in self._seen:
            return False
        if len(self._seen) >= self._capacity:
            # Full of live pairs: drop the one closest to going stale. Only a flood of
            # authentic requests can get here, and the oldest pair is the least useful.
            _, oldest = heapq.heappop(self._expiry)
            self._seen.discard(oldest)
        self._seen.add(key)
        heapq.heappush(self._expiry, (timestamp + self._window, key))
        return True

    def _forget_stale(self) -> None:
        now = self._now()
        while self._expiry and self._expiry[0][0] < now:
            _, key = heapq.heappop(self._expiry)
            self._seen.discard(key)


class RequestGuard:
    """Signature, time window and replay checks for one signing secret."""

    def __init__(self, signing_secret: str, *, now: Callable[[], float] = time.time,
                 capacity: int = REPLAY_CAPACITY, ledger: ReplayLedger | None = None) -> None:
        self._now = now
        self._verifier = SignatureVerifier(signing_secret, clock=_CallableClock(now))
        self.replays = ReplayGuard(capacity=capacity, now=now)
        self.ledger = ledger

    def authentic(self, body: bytes, headers: Mapping[str, str]) -> Refusal | None:
        """None when ``body`` was signed by Slack recently; otherwise why not.

        Does not record the request: call `first_time` once it is going to be acted on.
        """
        raw_ts = headers.get("x-slack-request-timestamp")
        signature = headers.get("x-slack-signature")
        if not raw_ts or not signature:
            return Refusal.NO_SIGNATURE
        try:
            timestamp = int(raw_ts)
        except ValueError:
            return Refusal.STALE
        if abs(self._now() - timestamp) > WINDOW_SECONDS:
            return Refusal.STALE
        try:
            valid = self._verifier.is_valid(body, raw_ts, signature)
        except UnicodeDecodeError:  # the SDK decodes the body to sign it; Slack sends UTF-8
            valid = False
        return None if valid else Refusal.BAD_SIGNATURE

    def first_time(self, headers: Mapping[str, str]) -> bool:
        """Record an authentic request in this process; False if the very same one came
        before."""
        timestamp = int(headers["x-slack-request-timestamp"])
        return self.replays.first_time(timestamp, headers["x-slack-signature"])

    async def record(self, headers: Mapping[str, str], payload: Mapping[str, Any]) -> bool:
        """Record an authentic request where the node keeps them (the shared ledger, else
        this process); False if it, or its event, came before. The ledger's
        `StoreError` propagates: the request must then be refused, not acted on."""
        if self.ledger is None:
            return self.first_time(headers)
        return await self.ledger.first_time(replay_keys(headers, payload), ttl=REPLAY_TTL)
