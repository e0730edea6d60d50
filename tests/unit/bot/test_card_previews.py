"""Previews and masking on the card as data (bot/cards.py) and as each surface draws it
(Slack blocks, Telegram HTML, the terminal): whole, escaped, bounded, never a token."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from signoff.adapters.slack.blocks import MAX_TEXT as SLACK_TEXT
from signoff.adapters.slack.blocks import card_blocks
from signoff.adapters.telegram.keyboards import MAX_TEXT as TELEGRAM_TEXT
from signoff.adapters.telegram.keyboards import card_html
from signoff.adapters.terminal.surface import render
from signoff.bot.cards import build_card, preview_for
from signoff.runtime.models import Action, Approval, ApprovalStatus, RiskClass
from signoff.runtime.text import MASK
from signoff.runtime.tools.base import PREVIEW_CHARS, Preview
from signoff.testing import sample_card
from tests.fakes.telegram_api import visible_text

AT = datetime(2026, 3, 14, 9, 26, tzinfo=UTC)
URL = "https://bot:pw@hooks.example.com/x?token=t0k3n&v=1"
SHOWN = f"https://{MASK}@hooks.example.com/x?token={MASK}&v={MASK}"
DIFF = Preview(label="Changes to a.html", kind="diff",
               text="--- a/a.html\n+++ b/a.html\n@@ -1 +1 @@\n-<p>old</p>\n+<p>new & `x`</p>")


def approval(status: ApprovalStatus = ApprovalStatus.PENDING) -> Approval:
    action = Action(tool="send_webhook", args={"url": URL, "payload": {"link": URL}},
                    risk=RiskClass.SEND, capability="http.send", targets=(URL,),
                    fingerprint="f" * 64, summary=f"POST a webhook to {URL}",
                    content=("payload",))
    return Approval(id="a-1", action=action, requested_at=AT, expires_at=AT + timedelta(hours=1),
                    status=status, why=f"the docs at {URL} say so", requester="hermes:x",
                    policy_id="s-1", goal=f"deploy {URL}", reason=f"no: {URL}")


def test_build_card_masks_every_text_and_keeps_the_approval_as_it_is() -> None:
    """Title, targets, goal, content lines and why show •••; the approval is untouched."""
    request = approval()
    card = build_card(None, request, preview=Preview(label="Arguments", text=f"url: {URL}"))
    texts = [card.title, *card.targets, card.goal, card.why or "", *(v for _, v in card.details),
             card.preview.text if card.preview else ""]
    assert all("t0k3n" not in t and ":pw@" not in t for t in texts)
    assert card.targets == (SHOWN,) and card.title == f"POST a webhook to {SHOWN}"
    assert request.action.targets == (URL,) and request.action.args["url"] == URL


async def test_a_decided_card_has_no_preview() -> None:
    """Once decided, the action may have run: the card no longer claims a diff."""
    async def previews(action: Action) -> Preview:
        return DIFF

    assert await preview_for(previews, approval()) == DIFF
    assert await preview_for(previews, approval(ApprovalStatus.DENIED)) is None
    assert await preview_for(None, approval()) is None
    decided = build_card(None, approval(ApprovalStatus.DENIED), preview=DIFF)
    assert decided.preview is None and decided.outcome is not None and "t0k3n" not in \
        decided.outcome


def test_slack_shows_the_preview_as_an_escaped_code_block() -> None:
    """A section with the label and a ``` block; mrkdwn control characters escaped."""
    blocks = card_blocks(sample_card(preview=DIFF))
    (section,) = [b for b in blocks if "```" in str(b.get("text", {}).get("text", ""))]
    text = section["text"]["text"]
    assert text.startswith("*Changes to a.html*\n```")
    assert "-&lt;p&gt;old&lt;/p&gt;\n+&lt;p&gt;new &amp; `x`&lt;/p&gt;```" in text


def test_slack_clips_an_odd_preview_inside_the_block_and_says_so() -> None:
    """A preview longer than Slack's field limit still closes its code block."""
    big = Preview(label="Arguments", text="<" * 2000)  # escaped, 8000 characters
    blocks = card_blocks(sample_card(preview=big))
    (section,) = [b for b in blocks if "```" in str(b.get("text", {}).get("text", ""))]
    text = section["text"]["text"]
    assert len(text) <= SLACK_TEXT and text.endswith("&lt;\n… (cut)```")
    assert text.count("&lt;") > 500, "as much of the preview as fits is kept"


def test_telegram_shows_the_preview_in_pre_with_its_lines() -> None:
    """<pre> keeps the line breaks of a diff; its text is escaped HTML Telegram accepts."""
    html = card_html(sample_card(preview=DIFF))
    assert "<b>Changes to a.html</b>\n<pre>--- a/a.html\n+++ b/a.html\n" in html
    assert "-&lt;p&gt;old&lt;/p&gt;\n+&lt;p&gt;new &amp; `x`&lt;/p&gt;</pre>" in html
    assert "+<p>new & `x`</p>" in visible_text(html, "HTML")


def test_telegram_makes_room_for_a_full_preview_and_long_fields() -> None:
    """A full-size preview and long fields still fit 4096 characters, the <pre> closed."""
    full = Preview(label="Changes to big.txt", text="\n".join(["+" + "y" * 40] * 60)[
        :PREVIEW_CHARS])
    card = sample_card(preview=full, goal="g" * 200, why="w" * 200, title="t" * 300)
    html = card_html(card)
    assert len(html) <= TELEGRAM_TEXT and html.count("<pre>") == html.count("</pre>") == 1
    visible_text(html, "HTML")  # parses as Telegram would


def test_terminal_prints_the_preview_indented_under_its_label() -> None:
    """The terminal shows every preview line as it is."""
    text = render(sample_card(preview=DIFF))
    assert "  Changes to a.html:\n    --- a/a.html\n" in text and "    +<p>new & `x`</p>" in text


def test_terminal_action_lines_mask_urls() -> None:
    """The line printed after an action ran shows its URL masked, like its card did."""
    from signoff.adapters.terminal.surface import render_record
    from signoff.runtime.models import ActionRecord

    record = ActionRecord(step=0, tool="http_get", targets=[URL], decision="ALLOW",
                          outcome="ok", output={"body": f"see {URL}"}, at=AT)
    text = render_record(record)
    assert SHOWN in text and "t0k3n" not in text
