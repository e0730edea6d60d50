"""The e-mail links' tokens: what they claim is what was signed, and nothing else verifies."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from signoff.adapters.email import tokens
from signoff.adapters.email.messages import card_message, decided_message
from signoff.runtime.models import Scope
from signoff.testing import sample_card

SECRET = b"s" * 32


def new_key() -> bytes:
    """A fresh card's key, derived as the surface derives it."""
    return tokens.card_key(SECRET, "a-1", tokens.new_card_id())


CLAIM = tokens.LinkClaim(approval_id="a-1", scope=Scope.ONCE, address="alice@example.com",
                         expires_at=datetime(2026, 11, 30, 12, 30, tzinfo=UTC))


def test_a_signed_claim_verifies_to_itself() -> None:
    """sign then verify with the same key gives the claim back."""
    key = new_key()
    assert tokens.verify(tokens.sign(CLAIM, key), key) == CLAIM


def test_another_key_or_any_changed_part_fails() -> None:
    """Another card's key, or a token whose payload was re-signed for more, is refused."""
    key = new_key()
    token = tokens.sign(CLAIM, key)
    with pytest.raises(tokens.BadToken):
        tokens.verify(token, new_key())
    for changed in (
        tokens.LinkClaim("a-2", CLAIM.scope, CLAIM.address, CLAIM.expires_at),
        tokens.LinkClaim(CLAIM.approval_id, Scope.ALWAYS, CLAIM.address, CLAIM.expires_at),
        tokens.LinkClaim(CLAIM.approval_id, CLAIM.scope, "mallory@example.com",
                         CLAIM.expires_at),
        tokens.LinkClaim(CLAIM.approval_id, CLAIM.scope, CLAIM.address,
                         datetime(2027, 1, 1, tzinfo=UTC)),
    ):
        forged = f"{tokens.sign(changed, b'x').partition('.')[0]}.{token.partition('.')[2]}"
        with pytest.raises(tokens.BadToken):
            tokens.verify(forged, key)


@pytest.mark.parametrize("garbage", ["", ".", "abc", "abc.def", "!!!.x", "e30.x"])
def test_garbage_is_a_bad_token(garbage: str) -> None:
    """Anything that is not one of our tokens raises BadToken, never another error."""
    with pytest.raises(tokens.BadToken):
        tokens.verify(garbage, new_key())


def test_every_card_gets_its_own_key() -> None:
    """Card ids are drawn fresh and keys derived per card (a link of one request proves
    nothing about another); the same card gives the same key on every node."""
    assert len({new_key() for _ in range(50)}) == 50
    card = tokens.new_card_id()
    assert tokens.card_key(SECRET, "a-1", card) == tokens.card_key(SECRET, "a-1", card)
    assert tokens.card_key(SECRET, "a-1", card) != tokens.card_key(SECRET, "a-2", card)
    assert tokens.card_key(SECRET, "a-1", card) != tokens.card_key(b"t" * 32, "a-1", card)


def test_a_card_id_of_0_2_checks_no_link() -> None:
    """A card mailed by 0.2 stored its key as the card id: that id checks no link now."""
    with pytest.raises(tokens.BadToken, match="expired"):
        tokens.card_key(SECRET, "a-1", "x" * 43)


def test_the_mail_escapes_card_text_in_html() -> None:
    """A card's text reaches the HTML part escaped; the plain part keeps it as written."""
    card = sample_card(why="<script>alert(1)</script>")
    mail = card_message(card, sender="s@example.com", to="alice@example.com",
                        links={Scope.ONCE: "https://s.example.com/email/confirm?token=t"})
    html = mail.get_body(preferencelist=("html",)).get_content()  # type: ignore[union-attr]
    assert "<script>" not in html and "&lt;script&gt;" in html
    assert "<script>alert(1)</script>" in mail.get_body(  # type: ignore[union-attr]
        preferencelist=("plain",)).get_content()
    reply = decided_message(card, sender="s@example.com", to="alice@example.com")
    assert reply["In-Reply-To"] == mail["Message-ID"]
