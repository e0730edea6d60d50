"""Bot Framework authentication both ways: the JWT on inbound activities, and the bot's
own token for the connector.

Inbound: Teams sends every activity with ``Authorization: Bearer <JWT>``, signed (RS256)
by a key in the JWKS that the OpenID metadata document names. `ActivityVerifier` checks
the signature, the issuer (``https://api.botframework.com``), the audience (our app id),
the expiry against the injected `Clock` (five minutes of skew, as Bot Framework allows),
that the key is endorsed for the activity's channel, and that the token's ``serviceurl``
claim is the activity's ``serviceUrl``. Keys are cached for a day and fetched again when a
token names one we do not know (Microsoft rolls them), at most once a minute.

Outbound: `BotToken` obtains a token with the client-credentials grant from the token URL
and caches it until five minutes before it expires.

Built by hand with PyJWT and httpx, not the Microsoft 365 Agents SDK or botbuilder. The
Agents SDK (microsoft-agents-hosting-core 1.9) installs beside our pins but adds seven
packages (azure-core, opentelemetry-sdk, python-dotenv, …), and its `JwtTokenValidator`
checks expiry with PyJWT's own reading of the system clock (our expiry rule and tests use
the injected `Clock`), fetches keys with PyJWT's blocking `PyJWKClient` inside the event
loop, and leaves the ``serviceurl`` claim to the caller; botbuilder-core is in maintenance
and brings its own aiohttp hosting. What is needed here is a page of specified checks.
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import httpx
import jwt

from signoff.errors import PlatformRejected, PlatformUnavailable, RateLimited
from signoff.runtime.clock import Clock

log = logging.getLogger(__name__)

ISSUER = "https://api.botframework.com"
SCOPE = "https://api.botframework.com/.default"
SKEW = timedelta(minutes=5)
KEYS_TTL = timedelta(hours=24)
REFETCH_GAP = timedelta(minutes=1)  # an unknown kid refetches at most this often
TOKEN_MARGIN = timedelta(minutes=5)


class Unauthenticated(Exception):
    """The activity's token is missing or wrong: answer 401, act on nothing."""


class KeysUnavailable(Exception):
    """The signing keys could not be fetched: nothing can be checked now (503)."""


@dataclass
class _Keys:
    by_kid: dict[str, jwt.PyJWK]
    endorsements: dict[str, list[str]]
    fetched: datetime


class ActivityVerifier:
    """Checks the Bot Framework JWT of one inbound activity."""

    def __init__(self, *, app_id: str, metadata_url: str, clock: Clock,
                 http: httpx.AsyncClient) -> None:
        self._app_id = app_id
        self._metadata_url = metadata_url
        self._clock = clock
        self._http = http
        self._keys: _Keys | None = None
        self._lock = asyncio.Lock()

    async def verify(self, authorization: str | None, activity: dict[str, Any]) -> None:
        """Return when ``authorization`` vouches for ``activity``; raise `Unauthenticated`
        (or `KeysUnavailable` when the keys to check it cannot be fetched)."""
        scheme, _, token = (authorization or "").partition(" ")
        if scheme.lower() != "bearer" or not token:
            raise Unauthenticated("no Bearer token")
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError as exc:
            raise Unauthenticated(f"malformed token: {exc}") from exc
        if header.get("alg") != "RS256":
            raise Unauthenticated(f"algorithm {header.get('alg')!r} is not RS256")
        key, endorsed = await self._key(str(header.get("kid", "")))
        claims = self._decode(token, key)
        channel = activity.get("channelId")
        if endorsed and channel not in endorsed:
            raise Unauthenticated(f"key not endorsed for channel {channel!r}")
        if claims.get("serviceurl") != activity.get("serviceUrl"):
            raise Unauthenticated("serviceUrl does not match the token's serviceurl claim")

    def _decode(self, token: str, key: jwt.PyJWK) -> dict[str, Any]:
        try:
            # Expiry is checked below with our clock, not PyJWT's (the system's).
            claims: dict[str, Any] = jwt.decode(
                token, key=key, algorithms=["RS256"], audience=self._app_id, issuer=ISSUER,
                options={"verify_exp": False, "verify_nbf": False, "verify_iat": False,
                         "require": ["exp", "iss", "aud"]})
        except jwt.PyJWTError as exc:
            raise Unauthenticated(str(exc)) from exc
        now = self._clock.now().timestamp()
        exp, nbf = claims.get("exp"), claims.get("nbf")
        if not isinstance(exp, int | float) or now > exp + SKEW.total_seconds():
            raise Unauthenticated("token expired")
        if isinstance(nbf, int | float) and now < nbf - SKEW.total_seconds():
            raise Unauthenticated("token not valid yet")
        return claims

    async def _key(self, kid: str) -> tuple[jwt.PyJWK, list[str]]:
        async with self._lock:
            now = self._clock.now()
            keys = self._keys
            stale = keys is None or now - keys.fetched > KEYS_TTL
            unknown = keys is not None and kid not in keys.by_kid \
                and now - keys.fetched > REFETCH_GAP
            if stale or unknown:
                self._keys = keys = await self._fetch(now)
            assert keys is not None
        if kid not in keys.by_kid:
            raise Unauthenticated(f"unknown signing key {kid!r}")
        return keys.by_kid[kid], keys.endorsements.get(kid, [])

    async def _fetch(self, now: datetime) -> _Keys:
        try:
            metadata = (await self._http.get(self._metadata_url)).raise_for_status().json()
            jwks = (await self._http.get(metadata["jwks_uri"])).raise_for_status().json()
        except (httpx.HTTPError, ValueError, KeyError, TypeError) as exc:
            log.warning("teams_keys_unavailable url=%s error=%s", self._metadata_url, exc)
            raise KeysUnavailable(f"signing keys unavailable: {type(exc).__name__}") from exc
        by_kid: dict[str, jwt.PyJWK] = {}
        endorsements: dict[str, list[str]] = {}
        for item in jwks.get("keys", []):
            try:
                key = jwt.PyJWK(item, algorithm="RS256")
            except jwt.PyJWTError:
                continue  # a key of another kind: not one that signs activities
            kid = str(item.get("kid", ""))
            by_kid[kid] = key
            endorsements[kid] = [str(e) for e in item.get("endorsements", [])]
        return _Keys(by_kid=by_kid, endorsements=endorsements, fetched=now)


class BotToken:
    """The bot's access token for the connector (client credentials), cached."""

    def __init__(self, *, app_id: str, app_password: str, token_url: str, clock: Clock,
                 http: httpx.AsyncClient) -> None:
        self._form = {"grant_type": "client_credentials", "client_id": app_id,
                      "client_secret": app_password, "scope": SCOPE}
        self._url = token_url
        self._clock = clock
        self._http = http
        self._token: tuple[str, datetime] | None = None
        self._lock = asyncio.Lock()
        self.fetched = 0  # how many tokens were obtained (the cache is observable)

    async def get(self) -> str:
        """A token valid for at least a few more minutes."""
        async with self._lock:
            now = self._clock.now()
            if self._token is not None and now < self._token[1]:
                return self._token[0]
            body = await self._request()
            token = body.get("access_token")
            if not isinstance(token, str) or not token:
                raise PlatformUnavailable("teams: the token endpoint sent no access_token")
            lifetime = timedelta(seconds=float(body.get("expires_in", 3600)))
            self._token = (token, now + max(lifetime - TOKEN_MARGIN, timedelta(0)))
            self.fetched += 1
            return token

    def forget(self) -> None:
        """Drop the cached token (the connector refused it)."""
        self._token = None

    async def _request(self) -> dict[str, Any]:
        try:
            response = await self._http.post(self._url, data=self._form)
        except httpx.HTTPError as exc:
            raise PlatformUnavailable(f"teams: token request failed: {type(exc).__name__}") \
                from exc
        if response.status_code in (400, 401, 403):
            raise PlatformRejected(
                "teams: the token endpoint refused the bot's credentials; check "
                "teams.app_id, teams.app_password and teams.tenant_id")
        raise_for_status(response, "token")
        try:
            body: dict[str, Any] = json.loads(response.content)
        except ValueError as exc:
            raise PlatformUnavailable("teams: the token endpoint sent no JSON") from exc
        return body


def raise_for_status(response: httpx.Response, call: str) -> None:
    """Our error for a failed call: 429 RateLimited, 5xx PlatformUnavailable (retryable),
    any other 4xx PlatformRejected (final)."""
    status = response.status_code
    if status < 400:
        return
    if status == 429:
        wait = _retry_after(response.headers.get("Retry-After"))
        raise RateLimited(f"teams: {call} rate limited; retry in {wait:g}s", retry_after=wait)
    if status >= 500:
        raise PlatformUnavailable(f"teams: {call} failed with {status}")
    raise PlatformRejected(f"teams: {call} was rejected with {status}: "
                           f"{response.text[:200]}")


def _retry_after(value: str | None) -> float:
    try:
        return max(float(value or 1), 0.0)
    except ValueError:
        return 1.0
