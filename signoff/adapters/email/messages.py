"""The e-mail card (plain text + HTML) and the confirmation pages, as pure functions.

Every value from a card is passed through `e()` (html.escape) before it reaches HTML.
The mail has one link per allowed decision; the pages a link opens show the request and
one POST button — a GET never decides, because mail scanners open links.
"""

from __future__ import annotations

import html
from collections.abc import Mapping
from email.message import EmailMessage
from email.utils import format_datetime

from signoff.bot.cards import BUTTON_LABELS, decides_here, why_line
from signoff.bot.ports import ApprovalCard
from signoff.runtime.models import Scope

CONFIRM_PATH = "/email/confirm"

# What each link does, in words: the label alone ("Always") does not say enough in a mail.
LINK_WORDS = {
    Scope.ONCE: "Approve once",
    Scope.SESSION: "Approve for this session",
    Scope.ALWAYS: "Approve always (this exact action, from now on)",
    Scope.DENY: "Deny",
}


def e(value: object) -> str:
    """Escape anything for HTML text and attribute values."""
    return html.escape("" if value is None else str(value), quote=True)


def _facts(card: ApprovalCard) -> list[tuple[str, str]]:
    facts = [("Action", card.title), ("Risk", card.risk), ("Where", card.origin)]
    if card.goal:
        facts.append(("Goal", card.goal))
    facts.extend(card.details)
    why = why_line(card)
    if why:
        label, _, words = why.partition(": ")
        facts.append((label, words))
    facts.append(("Expires", f"{card.expires_at:%Y-%m-%d %H:%M} UTC"))
    return facts


def _preview_text(card: ApprovalCard) -> list[str]:
    """The preview (a diff, the whole command) for the plain-text part, as it is."""
    if card.preview is None:
        return []
    return ["", f"{card.preview.label}:", *card.preview.text.splitlines()]


def _preview_html(card: ApprovalCard) -> str:
    """The preview for the HTML part and the confirmation page: escaped, in a <pre>."""
    if card.preview is None:
        return ""
    return (f"<h3>{e(card.preview.label)}</h3><pre style='overflow:auto;padding:8px;"
            f"border:1px solid #ccc'>{e(card.preview.text)}</pre>")


def decides(card: ApprovalCard) -> bool:
    """True when the mail offers decision links: a mail has no length limit, but a card
    whose content was cut when it was made, or a step-up request, is decided in the
    console only (`cards.decides_here`)."""
    return decides_here(card, None)


def message_id(card: ApprovalCard, sender: str, kind: str) -> str:
    """The same id for every sending of one mail (a retry is then one message to mail
    clients), and the card's own for the "decided" mail to reply to."""
    domain = sender.rpartition("@")[2] or "signoff.invalid"
    return f"<signoff.{card.approval_id}.{kind}@{domain}>"


def card_message(card: ApprovalCard, *, sender: str, to: str,
                 links: Mapping[Scope, str]) -> EmailMessage:
    """The mail for one approver: the card's facts and one link per allowed decision."""
    msg = EmailMessage()
    msg["From"] = sender
    msg["To"] = to
    msg["Subject"] = f"Approval needed: {card.title}"[:200]
    msg["Date"] = format_datetime(card.requested_at)
    msg["Message-ID"] = message_id(card, sender, "card")
    facts = _facts(card)
    lines = [f"{label}: {value}" for label, value in facts]
    lines.extend(_preview_text(card))
    lines.append("")
    hint = "Each link opens a page where you confirm; opening it decides nothing."
    if not decides(card):
        links = {}
        why = "step-up" if card.step_up else "too long to show whole in a mail"
        hint = (f"This request is decided in the signoff console only ({why}): "
                f"{card.confirm_url or 'open the console'}")
    lines.append(hint)
    for scope, url in links.items():
        lines.append(f"{LINK_WORDS[scope]}: {url}")
    msg.set_content("\n".join(lines) + "\n")
    rows = "".join(f"<tr><th align='left'>{e(k)}</th><td>{e(v)}</td></tr>" for k, v in facts)
    buttons = " ".join(
        f"<a href='{e(url)}' style='display:inline-block;padding:8px 14px;margin:4px;"
        f"border:1px solid #333;border-radius:4px;text-decoration:none'>"
        f"{e(LINK_WORDS[scope])}</a>" for scope, url in links.items())
    msg.add_alternative(
        f"<!doctype html><html><body><h2>{e(card.title)}</h2><table>{rows}</table>"
        f"{_preview_html(card)}"
        f"<p>{e(hint)}</p>"
        f"<p>{buttons}</p></body></html>", subtype="html")
    return msg


def decided_message(card: ApprovalCard, *, sender: str, to: str,
                    undo_url: str | None = None) -> EmailMessage:
    """A short reply to the card's mail once the request is answered: its links are spent.

    A held request (approved, in its undo window) gets one of its own first, saying when
    the action runs and where to undo it (``undo_url``, the console's card: a mail link
    cannot undo by itself, for the reason no link decides); the final outcome follows.
    Each has its own Message-ID, so that mail clients keep both."""
    msg = EmailMessage()
    msg["From"] = sender
    msg["To"] = to
    msg["Subject"] = f"Re: Approval needed: {card.title}"[:200]
    msg["Date"] = format_datetime(card.decided_at or card.requested_at)
    msg["Message-ID"] = message_id(card, sender, "held" if card.held else "decided")
    msg["In-Reply-To"] = msg["References"] = message_id(card, sender, "card")
    outcome = card.outcome or card.status
    undo = ""
    if card.held:
        where = f"open {undo_url} or press" if undo_url else "press"
        undo = f"To stop it before then, {where} Undo on the console or a chat card.\n"
    msg.set_content(f"{outcome}\n\n{card.title}\n{card.origin}\n\n{undo}"
                    "The links of the first mail no longer decide anything.\n")
    return msg


def _page(title: str, body: str) -> str:
    return ("<!doctype html><html lang='en'><head><meta charset='utf-8'>"
            "<meta name='viewport' content='width=device-width, initial-scale=1'>"
            "<meta name='referrer' content='no-referrer'>"
            f"<title>{e(title)} · signoff</title></head>"
            "<body style='font-family:sans-serif;max-width:40em;margin:1em auto;padding:0 1em'>"
            f"<h1>{e(title)}</h1>{body}</body></html>")


def confirm_page(card: ApprovalCard, scope: Scope, address: str, token: str) -> str:
    """The page a link opens: the request, the decision, one POST button."""
    rows = "".join(f"<tr><th align='left'>{e(k)}</th><td>{e(v)}</td></tr>"
                   for k, v in _facts(card))
    return _page(
        f"Confirm: {LINK_WORDS[scope]}",
        f"<table>{rows}</table>{_preview_html(card)}"
        f"<p>You are answering as <b>email:{e(address)}</b>.</p>"
        # Relative: the page's own path, also behind a proxy that serves us under a prefix.
        f"<form method='post' action='{CONFIRM_PATH.rpartition('/')[2]}'>"
        f"<input type='hidden' name='token' value='{e(token)}'>"
        f"<button type='submit' style='font-size:1.2em;padding:10px 18px'>"
        f"{e(BUTTON_LABELS[scope])}: {e(LINK_WORDS[scope])}</button></form>")


def message_page(title: str, text: str) -> str:
    """A page that only says something: the outcome, or why the link does not work."""
    return _page(title, f"<p>{e(text)}</p>")
