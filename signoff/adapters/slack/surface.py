"""`SlackSurface`: approval cards in a Slack channel, decided by their buttons.

Built on slack-bolt's `AsyncApp`; every Web API call goes to ``api_url`` (a local fake in
tests) with a timeout, and its failures become `RateLimited`, `PlatformUnavailable` or
`PlatformRejected` (see `calls`). While `run` runs, the calls share one aiohttp session
(`kept_session`): without one the SDK opens a session, and a new connection, per call.
Two ways to hear clicks:

- ``socket`` (needs an ``xapp-`` app token; no public URL): `run` opens a Socket Mode
  websocket with bolt's `AsyncSocketModeHandler` and keeps it until cancelled.
- ``http`` (needs the signing secret): the daemon's HTTP app mounts `handle_http` at
  ``POST /slack/events``; `run` only has to be running for clicks to be handled.

A click is acknowledged first (Slack wants the ack within 3 s), then decided: the decision
runs as a task of the TaskGroup `run` owns, so shutdown cancels it instead of leaking it.
A refused decision is told to the clicker alone with ``chat.postEphemeral``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import replace
from typing import Any, Literal, cast

import aiohttp
from slack_bolt.adapter.starlette.async_handler import AsyncSlackRequestHandler
from slack_bolt.async_app import AsyncAck, AsyncApp
from slack_bolt.logger.messages import warning_client_prioritized_and_token_skipped
from slack_sdk.web.async_client import AsyncWebClient
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response

from signoff.adapters.slack.blocks import (
    ACTION_PREFIX,
    card_blocks,
    card_text,
    decides,
    escape,
    person,
)
from signoff.adapters.slack.calls import call, error_code, token_problem
from signoff.adapters.slack.guard import RequestGuard
from signoff.adapters.slack.history import HISTORY_SCOPES, card_metadata, find_copies
from signoff.adapters.slack.listeners import decision_from_action, is_console_link, parse_http_body
from signoff.adapters.slack.socketmode import run_socket
from signoff.bot.names import TtlCache
from signoff.bot.ports import (
    ApprovalCard,
    CardRef,
    DecisionEvent,
    DecisionHandler,
    Route,
    decide_guarded,
    with_people,
)
from signoff.errors import (
    ConfigError,
    PlatformError,
    PlatformRejected,
    PlatformUnavailable,
    RateLimited,
    StoreError,
)
from signoff.runtime.clock import Clock, SystemClock
from signoff.runtime.models import DecisionCode
from signoff.runtime.replay import ReplayLedger

logger = logging.getLogger(__name__)

Mode = Literal["socket", "http"]
REQUIRED_SCOPES = ("chat:write",)
MAX_BODY_BYTES = 1024 * 1024
DEFAULT_API_URL = "https://slack.com/api/"
_CHANNEL_ID = re.compile(r"^[CGD][A-Z0-9]{2,}$")


NAMES_CACHED = 1000  # people whose Slack names are kept (users.info answers)


def _user_name(data: dict[str, Any]) -> str | None:
    """What Slack shows for a user of a ``users.info`` answer: the profile's display
    name, else the real name, else the account name."""
    user = data.get("user")
    if not isinstance(user, dict):
        return None
    found = user.get("profile")
    profile: dict[str, Any] = found if isinstance(found, dict) else {}
    for value in (profile.get("display_name"), profile.get("real_name"),
                  user.get("real_name"), user.get("name")):
        if isinstance(value, str) and value.strip():
            return value.strip()
    return None


class _DropTokenSkipped(logging.Filter):
    """Drops bolt's "As you gave `client` as well, `token` will be unused"."""

    text = warning_client_prioritized_and_token_skipped()

    def filter(self, record: logging.LogRecord) -> bool:
        """Keep every other record."""
        return record.getMessage() != self.text


@contextlib.contextmanager
def _quiet_token_skipped(logger: logging.Logger) -> Iterator[None]:
    """While the bolt app is built: bolt reads ``SLACK_BOT_TOKEN`` from the environment
    when given no token (the documented config takes the token from there) and then warns
    on every start that the client we give it wins, which it must: the client carries our
    base URL, timeout and no-retry policy. Only that one line is dropped, only then."""
    quiet = _DropTokenSkipped()
    logger.addFilter(quiet)
    try:
        yield
    finally:
        logger.removeFilter(quiet)


class SlackSurface:
    """Approval cards as Block Kit messages in one Slack channel (a `Surface`)."""

    name = "slack"
    channel_prefix = "slack"

    def __init__(
        self,
        *,
        bot_token: str,
        channel: str,
        mode: str = "socket",
        app_token: str | None = None,
        signing_secret: str | None = None,
        api_url: str = DEFAULT_API_URL,
        timeout: float = 10.0,
        replay: ReplayLedger | None = None,
        clock: Clock | None = None,
    ) -> None:
        if not bot_token:
            raise ConfigError("slack.bot_token is empty")
        if not channel:
            raise ConfigError("slack.channel is empty")
        if mode not in ("socket", "http"):
            raise ConfigError(f"slack.mode must be 'socket' or 'http', not {mode!r}")
        if mode == "socket" and not app_token:
            raise ConfigError("slack.app_token (xapp-…) is needed in socket mode")
        if mode == "http" and not signing_secret:
            raise ConfigError("slack.signing_secret is needed in http mode")
        if timeout <= 0:
            raise ConfigError("the Slack timeout must be positive")
        self._mode: Mode = cast(Mode, mode)
        self._channel = channel
        self._app_token = app_token
        self._timeout = timeout
        # The SDK joins base_url and the method name without a separator.
        base_url = api_url if api_url.endswith("/") else api_url + "/"
        self._client = AsyncWebClient(
            token=bot_token,
            base_url=base_url,
            # aiohttp takes a float; the SDK's annotation says int.
            timeout=cast(int, timeout),
            # No retries inside the SDK: the outbox owns retry policy for every surface.
            retry_handlers=[],
        )
        bolt_log = logging.getLogger(f"{__name__}.bolt")
        with _quiet_token_skipped(bolt_log):
            self._app = self._bolt_app(bolt_log)
        self._app.action(re.compile(f"^{ACTION_PREFIX}"))(self._on_action)
        self._http = AsyncSlackRequestHandler(self._app)
        self._guard = (RequestGuard(signing_secret, ledger=replay)
                       if self._mode == "http" and signing_secret else None)
        self._active = False
        self._group: asyncio.TaskGroup | None = None
        self._on_decision: DecisionHandler | None = None
        # Learned from Slack: the approvals channel's id (the config may name it "#…")
        # and our bot's id, to find our own cards in the channel's history.
        self._channel_id: str | None = channel if _CHANNEL_ID.match(channel) else None
        self._bot_id: str | None = None
        self._lookup_refused = False
        # users.info answers, by user id: a person's name is asked once a day at most.
        self._names: TtlCache[str] = TtlCache(clock or SystemClock(), size=NAMES_CACHED)

    def _bolt_app(self, bolt_log: logging.Logger) -> AsyncApp:
        return AsyncApp(
            client=self._client,
            name="signoff",
            logger=bolt_log,
            # Signatures are checked by `RequestGuard` (see `handle_http`), which logs a
            # refusal without the body and feeds the replay guard; the socket carries none.
            signing_secret="",
            request_verification_enabled=False,
            # Run the listener to its end before answering: it only acks and hands the
            # decision to our TaskGroup, so the answer is as quick, and bolt neither
            # spawns a task of its own nor polls for the ack every 10 ms.
            process_before_response=True,
        )

    @property
    def mode(self) -> str:
        """``socket`` or ``http``."""
        return self._mode

    @property
    def running(self) -> bool:
        """True while `run` is receiving decisions."""
        return self._group is not None

    # -- outbound -------------------------------------------------------------------------

    def decides(self, card: ApprovalCard) -> bool:
        """Whether this card's message offers decisions (`bot.ports.ShowsCards`)."""
        return decides(card)

    async def post_card(self, card: ApprovalCard) -> CardRef:
        """Post ``card`` to the approvals channel; the ref holds the channel id and ts.

        The message carries the approval id as metadata, so `find_cards` can find it.
        """
        response = await call("chat.postMessage", self._client.chat_postMessage(
            channel=self._channel, text=card_text(card), blocks=card_blocks(card),
            metadata=card_metadata(card.approval_id), unfurl_links=False, unfurl_media=False,
        ))
        # Slack answers with the channel id even when we posted to a "#name": chat.update
        # accepts only the id.
        channel = str(response.get("channel") or self._channel)
        self._channel_id = channel
        ref = CardRef(surface=self.name, channel=channel, message_id=str(response["ts"]))
        logger.info("slack_card_posted approval_id=%s channel=%s ts=%s",
                    card.approval_id, ref.channel, ref.message_id)
        return ref

    async def find_cards(self, card: ApprovalCard) -> list[CardRef]:
        """Copies of ``card`` already in the approvals channel, oldest first (see `history`).

        A lookup Slack refuses (no history scope, a channel known only by name) finds
        nothing, with a warning the first time: posting again beats never posting. Network
        trouble raises, so that the caller tries later instead of posting blind.
        """
        channel = self._channel_id or self._channel
        try:
            found = await find_copies(self._client, channel=channel,
                                      approval_id=card.approval_id, bot_id=self._bot_id)
        except PlatformRejected as exc:
            level = logging.DEBUG if self._lookup_refused else logging.WARNING
            self._lookup_refused = True
            logger.log(level, "slack_card_lookup_refused approval_id=%s error=%s: copies of a"
                       " card cannot be looked for, a failed post may leave a duplicate (the"
                       " bot needs the %s scope)", card.approval_id, exc,
                       " or ".join(HISTORY_SCOPES))
            return []
        refs = [CardRef(self.name, channel, ts) for ts in found]
        logger.info("slack_card_lookup approval_id=%s copies=%d", card.approval_id, len(refs))
        return refs

    async def update_card(self, ref: CardRef, card: ApprovalCard) -> None:
        """Edit the posted card in place with ``chat.update``."""
        if ref.surface != self.name:
            raise PlatformRejected(f"slack: cannot edit a card of surface {ref.surface!r}")
        await call("chat.update", self._client.chat_update(
            channel=ref.channel, ts=ref.message_id, text=card_text(card), blocks=card_blocks(card),
        ))
        logger.info("slack_card_updated approval_id=%s channel=%s ts=%s status=%s",
                    card.approval_id, ref.channel, ref.message_id, card.status)

    async def notify(self, channel: str, text: str, *, thread: CardRef | None = None,
                     mentions: Sequence[str] = ()) -> None:
        """Post one line to ``channel``; with a Slack ``thread``, as a reply under that card.

        A thread reply has to go to the card's own channel, so ``thread.channel`` wins.
        The text is escaped: a goal saying ``<!channel>`` must not page a whole channel.
        ``mentions`` follow it, Slack members as real mentions (``<@U123>``, which notify
        them); a thread reply with mentions is broadcast, so the channel sees it too.
        """
        thread_ts = None
        if thread is not None and thread.surface == self.name:
            channel, thread_ts = thread.channel, thread.message_id
        broadcast = bool(thread_ts and mentions)
        await call("chat.postMessage", self._client.chat_postMessage(
            channel=channel, text=with_people(escape(text), mentions, person),
            thread_ts=thread_ts, reply_broadcast=broadcast or None,
            unfurl_links=False, unfurl_media=False,
        ))
        logger.info("slack_notified channel=%s threaded=%s broadcast=%s mentions=%d", channel,
                    thread_ts is not None, broadcast, len(mentions))

    async def check(self) -> None:
        """Verify the tokens and scopes at start-up; raise `PlatformRejected` saying what to fix.

        ``auth.test`` proves the bot token; its ``x-oauth-scopes`` header lists the granted
        scopes, each of `REQUIRED_SCOPES` must be there. In socket mode the app-level token
        is proved by asking for a websocket URL (``apps.connections.open``), which is
        otherwise harmless. Network trouble raises `PlatformUnavailable` (try again later).
        """
        auth = await call("auth.test", self._client.auth_test())
        self._bot_id = str(auth.get("bot_id") or "") or None
        granted = auth.headers.get("x-oauth-scopes") if auth.headers else None
        if granted is None:
            logger.warning("slack_scopes_unknown: auth.test sent no x-oauth-scopes header")
        else:
            have = {scope.strip() for scope in str(granted).split(",")}
            missing = [scope for scope in REQUIRED_SCOPES if scope not in have]
            if missing:
                raise PlatformRejected(
                    f"the Slack bot token lacks the scope {', '.join(missing)}: add it under"
                    " OAuth & Permissions → Bot Token Scopes and reinstall the app")
            if not have & set(HISTORY_SCOPES):
                logger.warning("slack_history_scope_missing: without %s a card whose post"
                               " failed ambiguously may be posted twice",
                               " or ".join(HISTORY_SCOPES))
        if self._mode == "socket":
            await self._socket_url()
        logger.info("slack_ready team_id=%s bot_user_id=%s mode=%s",
                    auth.get("team_id"), auth.get("user_id"), self._mode)

    async def _socket_url(self) -> str:
        try:
            response = await call("apps.connections.open", self._client.apps_connections_open(
                app_token=cast(str, self._app_token)))
        except PlatformRejected as exc:
            raise PlatformRejected(
                f"{token_problem(error_code(exc.__cause__), 'slack.app_token (xapp-…)')};"
                " it needs the connections:write scope and Socket Mode turned on") from exc
        return str(response["url"])

    # -- inbound --------------------------------------------------------------------------

    async def run(self, on_decision: DecisionHandler) -> None:
        """Hear clicks until cancelled and pass each decision to ``on_decision``.

        In socket mode this connects the websocket first; a refused app token raises
        `PlatformRejected` (the daemon should log it and keep its other surfaces).
        """
        if self._active:
            raise RuntimeError("SlackSurface.run is already running")
        self._active = True
        try:
            async with self.kept_session():
                await self._run(on_decision)
        finally:
            self._active = False

    @contextlib.asynccontextmanager
    async def kept_session(self) -> AsyncIterator[aiohttp.ClientSession]:
        """One aiohttp session for every Web API call made meanwhile, closed at the end.

        The SDK opens a session per call unless it is given one: a TCP connection and a
        session's set-up each time (against a local fake, a post took 3.9 ms without a
        kept session and 1.0-1.5 ms with one; CPU per post halved).
        `run` holds one for as long as it runs, which in the daemon is its whole life (a
        call before or after uses one of its own, as before). The timeout is the
        session's, since the SDK applies its own only to the sessions it opens. A failed
        call leaves the session usable: aiohttp drops a broken connection from the pool.
        """
        session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=self._timeout))
        previous, self._client.session = self._client.session, session
        try:
            yield session
        finally:
            self._client.session = previous
            await session.close()

    async def _run(self, on_decision: DecisionHandler) -> None:
        # Outside the TaskGroup, so that a refused token is raised as itself.
        first_url = await self._first_socket_url() if self._mode == "socket" else None
        async with asyncio.TaskGroup() as group:
            self._group, self._on_decision = group, on_decision
            try:
                if self._mode == "socket":
                    await run_socket(self._app, app_token=self._app_token,
                                     first_url=first_url, timeout=self._timeout)
                else:
                    logger.info("slack_listening mode=http path=/slack/events")
                    await asyncio.Event().wait()
            finally:
                self._group, self._on_decision = None, None

    async def _first_socket_url(self) -> str | None:
        """A websocket URL, or None when Slack is unreachable (the SDK retries then)."""
        # Our own request maps a refused app token to a clear error; the SDK would log
        # and retry it forever.
        try:
            return await self._socket_url()
        except (PlatformUnavailable, RateLimited) as exc:
            logger.warning("slack_socket_url_failed error=%s; the SDK will retry", exc)
        return None

    async def _on_action(self, ack: AsyncAck, body: dict[str, Any]) -> None:
        """Bolt listener for every ``signoff_*`` button: ack at once, decide afterwards."""
        await ack()
        if is_console_link(body):
            return  # Slack opened the console page itself; the click decides nothing
        event = decision_from_action(body)
        if event is None:
            logger.warning("slack_action_malformed: a signoff button click without a"
                           " usable action, value or user; ignored")
            return
        group, handler = self._group, self._on_decision
        if group is None or handler is None:
            logger.warning("slack_action_not_running approval_id=%s", event.approval_id)
            return
        try:
            group.create_task(self._decide(handler, event))
        except RuntimeError:  # the TaskGroup is shutting down
            logger.warning("slack_action_dropped_on_shutdown approval_id=%s", event.approval_id)

    async def _decide(self, handler: DecisionHandler, event: DecisionEvent) -> None:
        event = await self._named(event)
        outcome = await decide_guarded(handler, event, "slack")
        # A refusal, and a partial approval of a quorum ("1 of 2 approvals — waiting for
        # one more"), are told to the clicker; a decision shows on the card itself.
        if not outcome.accepted or outcome.code is DecisionCode.PARTIAL:
            await self._tell(event, outcome.message)

    async def _named(self, event: DecisionEvent) -> DecisionEvent:
        """The click with the person's Slack name (``users.info``: the display name, else
        the real name), cached; the click's own username when Slack does not tell."""
        user = event.actor.user_id
        name = self._names.get(user)
        if name is None:
            try:
                answer = await call("users.info", self._client.users_info(user=user))
            except PlatformError as exc:  # a name is a nicety: the decision goes on
                logger.info("slack_user_name_unknown user=%s error=%s", user, exc)
                return event
            name = _user_name(answer.data if isinstance(answer.data, dict) else {})
            if name is None:
                return event
            self._names.put(user, name)
        return replace(event, actor=replace(event.actor, display=name))

    async def _tell(self, event: DecisionEvent, message: str) -> None:
        """Show ``message`` to the clicker only."""
        if event.ref is None:
            logger.warning("slack_ephemeral_skipped approval_id=%s: no channel in the click",
                           event.approval_id)
            return
        try:
            await call("chat.postEphemeral", self._client.chat_postEphemeral(
                channel=event.ref.channel, user=event.actor.user_id, text=escape(message)))
        except PlatformError as exc:
            logger.warning("slack_ephemeral_failed approval_id=%s error=%s",
                           event.approval_id, exc)

    def routes(self) -> tuple[Route, ...]:
        """``POST /slack/events``: interactivity in http mode (404 in socket mode)."""
        return (Route("POST", "/slack/events", self.handle_http),)

    async def handle_http(self, request: Request) -> Response:
        """Serve ``POST /slack/events`` (http mode) for the daemon's HTTP app.

        401 for a missing, bad or stale signature and for a replayed request; 413 for a
        body over 1 MiB; 400 for a body that is not a Slack payload; 404 in socket mode.
        Before `run` has started (or after it stopped) an authentic request gets 503 and
        is not processed: an early click is refused, never half-handled. Everything else
        goes to bolt, which acks ``signoff_*`` clicks within milliseconds.
        """
        if self._guard is None:
            return PlainTextResponse("Slack HTTP mode is not enabled", status_code=404)
        body = await request.body()
        if len(body) > MAX_BODY_BYTES:
            logger.warning("slack_request_refused reason=too_large bytes=%d", len(body))
            return PlainTextResponse("request too large", status_code=413)
        refusal = self._guard.authentic(body, request.headers)
        if refusal is not None:
            logger.warning("slack_request_refused reason=%s", refusal.value)
            return PlainTextResponse("invalid request", status_code=401)
        try:
            payload = parse_http_body(body, request.headers.get("content-type"))
        except ValueError as exc:
            # The reason names a field, never its value: the body stays out of the log.
            logger.warning("slack_request_malformed reason=%r: signed body is not a usable"
                           " Slack payload", str(exc))
            return PlainTextResponse("malformed payload", status_code=400)
        if self._group is None:
            logger.warning("slack_request_before_run: refused, decisions are not being received")
            return PlainTextResponse("not ready", status_code=503, headers={"Retry-After": "1"})
        try:
            first = await self._guard.record(request.headers, payload)
        except StoreError as exc:  # unrecorded, it could be acted on twice: Slack retries
            logger.warning("slack_request_deferred reason=replay_ledger error=%s", exc)
            return PlainTextResponse("try again", status_code=503, headers={"Retry-After": "1"})
        if not first:
            logger.warning("slack_request_refused reason=replayed")
            return PlainTextResponse("replayed request", status_code=401)
        return await self._bolt(request)

    async def _bolt(self, request: Request) -> Response:
        """Hand an authentic, well-formed request to bolt; its body never causes a 5xx.

        Our only listener acks first and cannot fail before that, so a failure inside bolt
        (an exception, or the 500 it answers when its own matching breaks) comes from a
        payload shape `shape_problem` did not foresee: the sender gets 400, the log says so.
        """
        try:
            response = await self._http.handle(request)
        except Exception as exc:
            logger.warning("slack_request_unprocessable error=%s: bolt could not read a"
                           " signed payload", type(exc).__name__)
            return PlainTextResponse("malformed payload", status_code=400)
        if response.status_code >= 500:
            logger.warning("slack_request_unprocessable status=%d: bolt could not read a"
                           " signed payload", response.status_code)
            return PlainTextResponse("malformed payload", status_code=400)
        return response
