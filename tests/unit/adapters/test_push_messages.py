"""What a push notification and an ntfy message carry: small enough for push services,
decisions only where the whole request is shown and its risk is allowed, priority by risk."""

from __future__ import annotations

import json

from signoff.adapters.ntfy.surface import card_message as ntfy_message
from signoff.adapters.ntfy.surface import decided_message as ntfy_decided
from signoff.adapters.webpush import payloads
from signoff.runtime.models import RiskClass, Scope
from signoff.testing import sample_card

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
