"""The e-mail card shows the preview too: as it is in the plain-text part, escaped in a
<pre> in the HTML part and on the confirmation page."""

from __future__ import annotations

from signoff.adapters.email.messages import card_message, confirm_page
from signoff.runtime.models import Scope
from signoff.runtime.tools.base import Preview
from signoff.testing import sample_card

DIFF = Preview(label="Changes to a.html", kind="diff",
               text="--- a/a.html\n+++ b/a.html\n-<p>old</p>\n+<p>new</p>")


def test_mail_parts_and_confirmation_page_show_the_preview() -> None:
    """Every line of the diff in the text part; escaped in the HTML part and the page."""
    card = sample_card(preview=DIFF)
    mail = card_message(card, sender="signoff@example.com", to="alice@example.com",
                        links={Scope.ONCE: "https://signoff.test/email/confirm?t=x"})
    plain = mail.get_body(("plain",))
    rich = mail.get_body(("html",))
    assert plain is not None and rich is not None
    text = plain.get_content()
    assert "Changes to a.html:\n--- a/a.html\n+++ b/a.html\n-<p>old</p>\n+<p>new</p>\n" in text
    assert "+&lt;p&gt;new&lt;/p&gt;</pre>" in rich.get_content()
    page = confirm_page(card, Scope.ONCE, "alice@example.com", "tok")
    assert "<h3>Changes to a.html</h3>" in page and "-&lt;p&gt;old&lt;/p&gt;" in page


def test_a_card_without_preview_mails_as_before() -> None:
    """No preview, no empty block."""
    mail = card_message(sample_card(), sender="s@example.com", to="a@example.com", links={})
    rich = mail.get_body(("html",))
    assert rich is not None and "<pre" not in rich.get_content()
