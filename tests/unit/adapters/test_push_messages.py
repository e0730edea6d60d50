"""What a push notification and an ntfy message carry: small enough for push services,
every target, content line and preview, Once only where all of it is shown uncut and
its risk is allowed (Deny wherever its risk is), priority by risk."""

from __future__ import annotations

import json
from typing import Any

from pywebpush import WebPusher

from signoff.adapters.ntfy.surface import card_message as ntfy_message
from signoff.adapters.ntfy.surface import decided_message as ntfy_decided
from signoff.adapters.webpush import payloads
from signoff.bot.cards import NOTIFICATION_TITLE
from signoff.bot.ports import ApprovalCard
from signoff.runtime.models import RiskClass, Scope
from signoff.runtime.tools.base import args_preview
from signoff.testing import sample_card
from tests.fakes.push_service import Subscriber

SEND = frozenset({RiskClass.SEND})


def test_a_notification_stays_under_the_push_services_limit() -> None:
    """Even a card with long details makes a payload under 4,096 bytes (with two tokens),
    its body cut with an ellipsis."""
    card = sample_card(details=(("Body", "x" * 5000),))
    data = payloads.card_message(card, tokens={Scope.ONCE: "t" * 300, Scope.DENY: "t" * 300},
                                 base="https://s.example", open_url="https://s.example/c")
    assert len(data) < 4096 - 100  # room for aes128gcm's header and padding
    assert json.loads(data)["body"].endswith("…")


def test_decisions_only_for_allowed_risks_shown_whole() -> None:
    """SEND (the default) offers decisions; DESTRUCTIVE, step-up and a card too long to show
    whole offer Open only."""
    assert payloads.offers_decisions(sample_card(), SEND)
    assert not payloads.offers_decisions(sample_card(risk="DESTRUCTIVE"), SEND)
    assert not payloads.offers_decisions(sample_card(step_up=True), SEND)
    assert not payloads.offers_decisions(sample_card(details=(("Body", "x" * 5000),)), SEND)
    data = json.loads(payloads.card_message(sample_card(), tokens={}, base="b", open_url="u"))
    assert data["actions"] == [{"action": "open", "title": "Open"}]


def test_ntfy_priority_follows_the_risk() -> None:
    """DESTRUCTIVE is urgent (5), SEND high (4), anything else the default (3); the
    follow-up of a decision is low (2) with no buttons."""
    def priority(risk: str) -> object:
        return ntfy_message(sample_card(risk=risk), topic="t", urls={}, open_url="u")["priority"]
    assert (priority("DESTRUCTIVE"), priority("SEND"), priority("DRAFT")) == (5, 4, 3)
    done = ntfy_decided(sample_card(status="approved", outcome="Approved once by ntfy:t"),
                        topic="t", open_url="u")
    assert done["priority"] == 2 and "actions" not in done
    assert done["message"] == "Approved once by ntfy:t"


# -- a notification offers Once only when it shows the whole action ----------------------
TO = tuple(f"accounts.payable.{i}@supplier-{i}.example.com" for i in range(9))
ATTACKER = "billing@supp1ier-payments.example"
PAYMENT = "Please wire 48,500 EUR today to IBAN DE89 3704 0044 0532 0130 00."


def outside(**changes: object) -> ApprovalCard:
    """The card of a request from an outside agent (POST /v1/approvals)."""
    asked: dict[str, object] = {"requester": "hermes:alice@laptop", "policy_id": "s-1"}
    return sample_card(task_id=None, **{**asked, **changes})


def pushed(card: ApprovalCard, tokens: dict[Scope, str] | None = None) -> dict[str, Any]:
    """The Web Push message of ``card`` as the service worker reads it."""
    return dict(json.loads(payloads.card_message(card, tokens=tokens or {}, base="b",
                                                 open_url="u")))


def test_a_transfer_asked_from_outside_shows_its_account_and_amount() -> None:
    """An outside agent's ``bank.transfer`` has no targets or content: the notification
    shows its arguments (the card's preview), the account and the amount, before it
    offers Once (they appeared nowhere)."""
    args = {"to_account": "DE89370400440532013000", "amount_eur": 250000}
    card = outside(title="Run bank.transfer", tool="bank.transfer", targets=(), details=(),
                   preview=args_preview(args))
    body = pushed(card)["body"]
    message = ntfy_message(card, topic="t", urls={}, open_url="u")["message"]
    for text in (body, message):
        assert "DE89370400440532013000" in text and "250000" in text
    assert payloads.scopes(card, None, SEND) == (Scope.ONCE, Scope.DENY)


def test_a_title_cut_before_the_last_recipient_offers_deny_and_open_only() -> None:
    """Ten recipients make the title longer than a notification's: it is cut with an
    ellipsis, the body names every recipient, and the notification offers Deny and Open
    but no Once (the title was cut silently and Once offered)."""
    to = (*TO, ATTACKER)
    card = sample_card(title=f"Send email to {', '.join(to)} — subject 'Invoice'",
                       targets=to)
    data = pushed(card, {Scope.DENY: "d"})
    ntfy = ntfy_message(card, topic="t", urls={}, open_url="u")
    for title in (data["title"], ntfy["title"]):
        assert len(title) == NOTIFICATION_TITLE and title.endswith("…")
        assert ATTACKER not in title
    assert ATTACKER in data["body"] and ATTACKER in ntfy["message"]
    assert payloads.scopes(card, None, SEND) == (Scope.DENY,)
    assert not payloads.offers_decisions(card, SEND)
    assert [a["action"] for a in data["actions"]] == ["deny", "open"]


def test_the_callers_own_words_come_after_the_content_they_cannot_push_out() -> None:
    """A requester's name and policy id of the longest kind come last: the payment line
    ending the body is still in the notification, which, cut to fit, offers no Once
    (the origin came first and pushed it out, Once still offered)."""
    body = ("Hi John, here is the report. " * 30)[: 880 - len(PAYMENT)] + PAYMENT
    card = outside(requester="r" * 120, policy_id="p" * 200, why="w" * 200,
                   details=(("body", body),))
    data = pushed(card)
    assert PAYMENT in data["body"] and data["body"].endswith("…")
    assert payloads.scopes(card, None, SEND) == (Scope.DENY,)
    assert PAYMENT in ntfy_message(card, topic="t", urls={}, open_url="u")["message"]


def test_a_reminder_that_makes_the_text_too_long_carries_no_once() -> None:
    """A note before the content that pushes the text past its limit takes Once off
    that notification; without it the same card keeps Once."""
    card = sample_card(details=(("body", "x" * 1000),))
    assert payloads.scopes(card, None, SEND) == (Scope.ONCE, Scope.DENY)
    assert payloads.scopes(card, "Reminder: " + "y" * 150, SEND) == (Scope.DENY,)


def test_only_a_request_decided_here_carries_deny_and_only_an_open_one() -> None:
    """Step-up, a risk class not in ``actions_for`` and a decided request carry no token."""
    for card in (sample_card(step_up=True), sample_card(risk="DESTRUCTIVE"),
                 sample_card(status="approved")):
        assert payloads.scopes(card, None, SEND) == ()


# -- push services and ntfy count bytes, not characters ------------------------------------
# A Cyrillic letter is 2 bytes of UTF-8 (6 as the \uXXXX escape json.dumps wrote), a CJK
# one 3, an emoji 4 (12): a notification cut at 1,200 characters was up to 13 KB, which
# a push service refuses (413) and the approver never sees.
INVOICE = "Оплатите счёт № 4711 поставщику ООО «Ромашка» до пятницы. "  # 58 characters
TOKENS = {Scope.ONCE: "o" * 160, Scope.DENY: "d" * 160}  # as long as `bot.links` makes


def sent(data: bytes) -> tuple[int, dict[str, Any]]:
    """The size of the body pywebpush sends for ``data`` (aes128gcm, the surface's own
    encryption) and the message a browser decrypts from it."""
    browser = Subscriber(endpoint="https://push.example/phone")
    body = WebPusher(browser.subscription).encode(data, "aes128gcm")["body"]
    return len(body), dict(browser.decrypt(body))


def test_long_cyrillic_content_is_pushed_whole_within_a_push_record() -> None:
    """1,100 Cyrillic letters fit as UTF-8: the notification shows them all and offers
    Once, in a message a push service takes (it was 7 KB of escapes, refused)."""
    letter = (INVOICE * 20)[:1100]
    card = sample_card(title="Отправить письмо бухгалтерии", details=(("body", letter),))
    data = payloads.card_message(card, tokens=TOKENS, base="https://signoff.example.com",
                                 open_url="https://signoff.example.com/console/cards/x")
    size, message = sent(data)
    assert len(data) <= payloads.PLAINTEXT and size <= 4096
    assert letter in message["body"] and not message["body"].endswith("…")
    assert message["title"] == "SEND: Отправить письмо бухгалтерии"
    assert [a["action"] for a in message["actions"]] == ["once", "deny"]
    assert payloads.scopes(card, None, SEND) == (Scope.ONCE, Scope.DENY)


def test_emoji_that_do_not_fit_are_cut_and_offer_deny_and_open_only() -> None:
    """1,100 emoji (4,400 bytes) in the content and 200 in the title: the body is cut to
    fit a push record, between two emoji, and the notification carries no Once."""
    card = sample_card(title="🚀" * 300, targets=("ops@example.com",),
                       details=(("body", "🙂" * 1100),))
    assert payloads.scopes(card, None, SEND) == (Scope.DENY,)
    assert not payloads.offers_decisions(card, SEND)
    data = payloads.card_message(card, tokens={Scope.DENY: TOKENS[Scope.DENY]},
                                 base="https://signoff.example.com",
                                 open_url="https://signoff.example.com/console/cards/x")
    size, message = sent(data)
    assert len(data) <= payloads.PLAINTEXT and size <= 4096
    assert message["body"].startswith("Targets: ops@example.com\nbody: 🙂")
    assert message["body"].endswith("🙂…") and message["title"].endswith("🚀…")
    assert [a["action"] for a in message["actions"]] == ["deny", "open"]


def test_a_short_non_ascii_card_offers_once_and_shows_it_whole() -> None:
    """Non-ASCII text that fits is shown as written, not escaped, and offers Once."""
    card = sample_card(title="送信: 請求書 🧾", targets=("бухгалтерия@пример.рф",),
                       details=(("body", INVOICE),))
    data = payloads.card_message(card, tokens=TOKENS, base="b", open_url="u")
    assert "請求書 🧾".encode() in data and b"\\u" not in data
    message = json.loads(data)
    assert message["title"] == "SEND: 送信: 請求書 🧾"
    assert "бухгалтерия@пример.рф" in message["body"] and INVOICE in message["body"]
    assert payloads.scopes(card, None, SEND) == (Scope.ONCE, Scope.DENY)
    assert [a["action"] for a in message["actions"]] == ["once", "deny"]


def test_tokens_too_long_for_their_room_take_once_off_that_message() -> None:
    """A card that fits whole with tokens of the usual size offers Once; given tokens
    far longer (a holder with a very long name) the same card no longer fits, and that
    message carries Deny and Open, not a Once beside a cut body."""
    card = sample_card(details=(("body", (INVOICE * 20)[:1100]),))
    assert payloads.scopes(card, None, SEND) == (Scope.ONCE, Scope.DENY)
    long = {Scope.ONCE: "o" * 2000, Scope.DENY: "d" * 2000}
    data = payloads.card_message(card, tokens=long, base="b", open_url="u")
    message = json.loads(data)
    assert len(data) <= payloads.PLAINTEXT and message["body"].endswith("…")
    assert message["actions"] == [{"action": "deny", "title": "Deny", "token": "d" * 2000},
                                  {"action": "open", "title": "Open"}]


def test_a_cut_never_splits_what_reads_as_one_character() -> None:
    """Cut to fit, a body of thumbs with a skin tone, flags, or letters with a separate
    accent ends after a whole one: never a thumb without its tone, half a flag ("🇩" for
    "🇩🇪") or an "e" for "é"."""
    for unit in ("👍🏽", "🇩🇪", "е\u0301"):
        card = sample_card(targets=(), details=(("body", unit * 1100),))
        body = pushed(card)["body"]
        assert body.endswith(unit + "…"), (unit, body[-6:])
        assert body.count(unit) * len(unit) == len(body) - len("body: …")


def test_an_ntfy_message_stays_under_ntfys_4096_bytes() -> None:
    """ntfy takes a message of 4,096 bytes or more for an attachment: 1,900 emoji (the
    2,000-character cut let 7,600 bytes through) are cut to fit, with an ellipsis, and
    the publish with its buttons stays under ntfy's 8,192 bytes of JSON; so do 1,900 CJK
    characters (5,700 bytes) and 1,900 quotes (escaped in JSON)."""
    url = "https://signoff.example.com/ntfy/decide?token=" + "t" * 180
    for content in ("🙂" * 1900, "中" * 1900, '"' * 1900):
        card = sample_card(title="🚀" * 300, details=(("body", content),))
        publish = ntfy_message(card, topic="alice-approvals", open_url=url,
                               urls={Scope.DENY: url})
        message = str(publish["message"])
        assert len(message.encode()) < 4096
        assert len(json.dumps(publish, ensure_ascii=False, separators=(",", ":")).encode()
                   ) < 8192  # as httpx writes it
        if content != '"' * 1900:
            assert message.endswith(content[0] + "…")


def test_a_lone_surrogate_is_sent_as_the_escape_it_was() -> None:
    """A lone UTF-16 half (which UTF-8 cannot carry) in a card's text is written as its
    JSON escape, as before, rather than failing the push."""
    data = payloads.card_message(sample_card(details=(("body", "a\ud83db"),)),
                                 tokens={}, base="b", open_url="u")
    assert b"a\\ud83db" in data and "a\ud83db" in json.loads(data)["body"]
