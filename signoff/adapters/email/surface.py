"""E-mail as an approval surface: a card is a mail to each address, a link a decision.

`post_card` draws a card id (`tokens.new_card_id`), derives the card's key from it and the
server secret (`tokens.card_key`), signs one link per allowed decision for each address
and sends each address its own mail over SMTP (stdlib `smtplib` in a worker thread, as
send_email does). The card id is returned as the card's message id, which the outbox
stores: that is how every node finds it again (the key itself is never stored). An SMTP
failure raises `PlatformUnavailable` (4xx, refused connection, timeout: the outbox
retries with backoff) or `PlatformRejected` (5xx, refused login: given up), like every
other surface. Once the request is decided (`update_card`), each address gets a short
reply saying how.

Its routes, served without the API key (the token is the credential, and it opens
nothing but its own request):

- ``GET /email/confirm?token=…`` shows the request and one POST button, deciding
  nothing — mail scanners open links;
- ``POST /email/confirm`` (form field ``token``) decides as ``email:<address>``; the
  flow checks that actor against the approvers (403 page if it is not one).
"""

from __future__ import annotations

import asyncio
import logging
import smtplib
import ssl
from collections.abc import Sequence
from email.message import EmailMessage
from urllib.parse import parse_qs, urlencode

from starlette.requests import Request
from starlette.responses import HTMLResponse, Response

from signoff.adapters.email import messages, tokens
from signoff.adapters.email.settings import EmailSurfaceSettings
from signoff.bot.cards import card_page
from signoff.bot.links import LinkChecker, LinkRefused
from signoff.bot.ports import (
    Actor,
    ApprovalCard,
    CardLookup,
    CardRef,
    DecidesThroughRoutes,
    DecisionEvent,
    DecisionHandler,
    Route,
)
from signoff.errors import PlatformRejected, PlatformUnavailable
from signoff.runtime.clock import Clock
from signoff.runtime.models import DecisionCode, Scope

log = logging.getLogger(__name__)

NAME = "email"
CHANNEL = "email_to"  # a card's one "channel": the approvals.email_to addresses

# The page status for each refusal the flow can give.
_STATUS = {DecisionCode.NOT_AUTHORIZED: 403, DecisionCode.ALREADY_DECIDED: 409,
           DecisionCode.EXPIRED: 410, DecisionCode.UNKNOWN: 404,
           DecisionCode.SCOPE_NOT_ALLOWED: 409, DecisionCode.NOT_WAITING: 409,
           DecisionCode.ERROR: 503}
# The token is in the URL and the page: never cached, never sent on as a referrer; and the
# one button cannot be framed by another site (clickjacking). No script at all.
_HEADERS = {
    "Cache-Control": "no-store", "Referrer-Policy": "no-referrer",
    "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; "
                               "form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    "X-Frame-Options": "DENY", "X-Content-Type-Options": "nosniff",
}
_MAX_FORM = 4096  # the confirmation form holds one token


async def _form_token(request: Request) -> str:
    """The ``token`` of a small urlencoded form ("" otherwise), read without
    python-multipart (not a dependency), like the console's forms."""
    kind = request.headers.get("content-type", "").partition(";")[0].strip().lower()
    if kind != "application/x-www-form-urlencoded":
        return ""
    body = await request.body()
    if len(body) > _MAX_FORM:
        return ""
    values = parse_qs(body.decode("utf-8", "replace"), max_num_fields=8)
    return (values.get("token") or [""])[0]


class EmailSurface(DecidesThroughRoutes):
    """The ``email`` surface: cards as mails with signed links, decided on our pages."""

    name = NAME
    channel_prefix = None  # no channels: post_message cannot target an inbox

    def __init__(self, *, settings: EmailSurfaceSettings, clock: Clock,
                 lookup: CardLookup, secret: bytes) -> None:
        self.settings = settings
        self.clock = clock
        self.lookup = lookup
        self._secret = secret  # the server secret: each card's key is derived from it
        self.links = LinkChecker(kind=tokens.EMAIL, surface=NAME, secret=secret,
                                 lookup=lookup, clock=clock)

    # -- Surface -----------------------------------------------------------------------
    async def check(self) -> None:
        """Connect to the SMTP server (and log in, when configured) without sending."""
        await asyncio.to_thread(self._smtp_session, None)

    def routes(self) -> tuple[Route, ...]:
        """The confirmation page and its form."""
        return (Route("GET", messages.CONFIRM_PATH, self.confirm_page),
                Route("POST", messages.CONFIRM_PATH, self.confirm))

    def decides(self, card: ApprovalCard) -> bool:
        """Whether this card's mail offers decision links (`bot.ports.ShowsCards`)."""
        return messages.decides(card)

    async def post_card(self, card: ApprovalCard) -> CardRef:
        """Mail the card to every address, each with links of its own."""
        card_id = tokens.new_card_id()
        key = tokens.card_key(self._secret, card.approval_id, card_id)
        mails = [messages.card_message(card, sender=self.settings.sender, to=address,
                                       links=self._links(card, address, key))
                 for address in self.settings.to]
        refused = await asyncio.to_thread(self._smtp_session, mails)
        if refused and len(refused) == len(mails):
            raise PlatformRejected(f"email: the SMTP server refused every address "
                                   f"({'; '.join(refused)})")
        for why in refused:  # the others got theirs: posting again would send them twice
            log.warning("email_card_refused", extra={"approval_id": card.approval_id,
                                                     "error": why})
        log.info("email_card_sent", extra={"approval_id": card.approval_id,
                                           "recipients": len(mails) - len(refused)})
        # The addresses stay in the config (a long list would not fit the channel column).
        return CardRef(surface=NAME, channel=CHANNEL, message_id=card_id)

    async def update_card(self, ref: CardRef, card: ApprovalCard) -> None:
        """A sent mail cannot be edited: once decided, each address gets a short reply
        saying how (an edit of an open card — an escalation — sends nothing); a held
        request gets one when it is approved and one when it runs or is undone."""
        if card.open:
            return
        undo_url = card_page(self.settings.public_url, card.approval_id) if card.held else None
        mails = [messages.decided_message(card, sender=self.settings.sender, to=address,
                                          undo_url=undo_url)
                 for address in self.settings.to]
        refused = await asyncio.to_thread(self._smtp_session, mails)
        for why in refused:
            log.warning("email_outcome_refused", extra={"approval_id": card.approval_id,
                                                        "error": why})

    async def notify(self, channel: str, text: str, *, thread: CardRef | None = None,
                     mentions: Sequence[str] = ()) -> None:
        """No mail for notes: e-mail carries only the cards (see the README)."""

    async def run(self, on_decision: DecisionHandler) -> None:
        """Take decisions from the confirmation form until cancelled."""
        await self.keep_handler(on_decision)

    # -- links and pages ---------------------------------------------------------------
    def _links(self, card: ApprovalCard, address: str, key: bytes) -> dict[Scope, str]:
        base = (self.settings.public_url or "").rstrip("/") + messages.CONFIRM_PATH
        out: dict[Scope, str] = {}
        for scope in card.allowed:
            claim = tokens.LinkClaim(approval_id=card.approval_id, scope=scope,
                                     address=address, expires_at=card.expires_at)
            out[scope] = f"{base}?{urlencode({'token': tokens.sign(claim, key)})}"
        return out

    async def confirm_page(self, request: Request) -> Response:
        """GET: show what the link would decide; decide nothing."""
        token = request.query_params.get("token", "")
        try:
            checked = await self.links.check(token)
        except LinkRefused as refused:
            return _html(refused.status, messages.message_page(refused.title, refused.text))
        claim = checked.claim
        return _html(200, messages.confirm_page(checked.card, claim.scope, claim.address,
                                                token))

    async def confirm(self, request: Request) -> Response:
        """POST: decide as ``email:<address>``, exactly what the token says."""
        try:
            checked = await self.links.check(await _form_token(request))
        except LinkRefused as refused:
            return _html(refused.status, messages.message_page(refused.title, refused.text))
        if self.handler is None:
            return _html(503, messages.message_page(
                "Not ready", "The daemon is starting or stopping; try the link again."))
        claim = checked.claim
        outcome = await self.handler(DecisionEvent(
            approval_id=claim.approval_id, scope=claim.scope,
            actor=Actor(platform=NAME, user_id=claim.address), surface=NAME))
        if outcome.accepted:
            return _html(200, messages.message_page("Done", outcome.message))
        return _html(_STATUS.get(outcome.code, 409),
                     messages.message_page("Not decided", outcome.message))

    # -- SMTP --------------------------------------------------------------------------
    def _smtp_session(self, mails: list[EmailMessage] | None) -> list[str]:
        """Blocking: connect, log in, send each mail (None: only check); worker thread.

        Returns why each refused address was refused (a 5xx for that recipient only).
        """
        s = self.settings
        refused: list[str] = []
        try:
            with smtplib.SMTP(s.host, s.port, timeout=s.timeout.total_seconds()) as client:
                client.ehlo()
                if s.starttls:
                    client.starttls(context=ssl.create_default_context())
                    client.ehlo()
                if s.username:
                    client.login(s.username, s.password or "")
                for mail in mails or ():
                    to = str(mail["To"])
                    try:
                        client.send_message(mail, from_addr=s.sender, to_addrs=[to])
                    except smtplib.SMTPRecipientsRefused as exc:
                        code, reply = exc.recipients.get(to, (550, b"refused"))
                        refused.append(f"{to}: {code} {reply.decode(errors='replace')}")
        except smtplib.SMTPAuthenticationError as exc:
            raise PlatformRejected(f"email: the SMTP server refused the login "
                                   f"({exc.smtp_code})") from exc
        except smtplib.SMTPResponseException as exc:
            said = exc.smtp_error
            said = said.decode(errors="replace") if isinstance(said, bytes) else said
            text = f"email: SMTP {exc.smtp_code} {said}"
            if 500 <= exc.smtp_code < 600:
                raise PlatformRejected(text) from exc
            raise PlatformUnavailable(text) from exc
        except (smtplib.SMTPException, OSError) as exc:  # refused, reset, timeout
            raise PlatformUnavailable(f"email: cannot reach {s.host}:{s.port} "
                                      f"({type(exc).__name__}: {exc})") from exc
        return refused


def _html(status: int, body: str) -> HTMLResponse:
    return HTMLResponse(body, status_code=status, headers=_HEADERS)
