"""Plain-text helpers shared by tools, cards and notifications: shortening, URL masking,
host names as they will be contacted (`ascii_host`), and what a person is shown of text
an agent wrote (`shown`)."""

from __future__ import annotations

import difflib
import functools
import json
import re
from collections.abc import Callable, Iterable
from typing import TypeVar, cast

SHORT = 120
T = TypeVar("T")


def shorten(value: object, limit: int = SHORT) -> str:
    """One line, at most ``limit`` characters, with an ellipsis when cut; for people, so
    its URLs are masked (`mask_urls`) — before the cut: cut first, ``https://bob:pw…``
    has lost the "@" that says its start is a secret."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    text = " ".join(mask_urls(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def did_you_mean(name: str, known: Iterable[str]) -> str:
    """`` — did you mean 'send_email'?`` when a known name is close to ``name``, else ``""``:
    the one rule for suggesting what a misspelt name probably meant."""
    close = difflib.get_close_matches(name, list(known), n=1, cutoff=0.6)
    return f" — did you mean {close[0]!r}?" if close else ""


# -- masking ---------------------------------------------------------------------------
# What a person sees of a URL: its scheme, host, port and path. The user info and every
# query (and fragment) value are secrets often enough (tokens, signatures, passwords)
# that they are shown as MASK, at every presentation boundary: cards, notifications, the
# console, log lines and API answers (GET /audit excepted). Stored data, the fingerprint
# and grants keep the real value, so a grant still covers the exact URL that was approved.
#
# Masking runs on whatever an agent or a caller wrote, so it must stay linear in the
# length of the text: a URL is found from its "://" (a C-speed `str.find`), its scheme
# is looked for in at most _SCHEME_MAX characters before it, and each character after
# it is read once. (A regex that tries a scheme at every word start took seconds on
# ``"a." * 80000 + "://"``: every start scanned to the end of the text.)
MASK = "•••"
_SCHEME_MAX = 32  # longer runs are cut to their tail: the part after "://" is still masked
_SCHEME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789+.-")
_SCHEME_RUN = re.compile(r"[a-zA-Z0-9+.-]+")
_LETTER = re.compile(r"[a-zA-Z]")

# Where a URL in a text ends. The agent writes the text around a URL, and what is
# masked is hidden, so the agent must not choose how much a mask hides. A URL is read in
# printable ASCII, as URLs are written before anyone percent-encodes them: its query
# ends at the first other character (CJK prose, U+2800 between words, any invisible
# one). It ends too where prose ends one (quotes, <, >, a backtick), where a shell ends
# a word or starts a command (; | $ ( ) { }), and at a backslash (an escape: "\n" in a
# JSON view). Its user info and host also end at "&" ("curl https://a&reboot&b@h/" runs
# reboot); in a query, "&" separates the parameters, each value masked on its own. The
# host alone may go on past ASCII, in the letters IDNA takes (`_host_end`): a look-alike
# host is shown as the punycode it is.
_ENDS = "\"'<>`;|$(){}\\"
_URL_ASCII = "".join(c for c in map(chr, range(0x21, 0x7F)) if c not in _ENDS)
_AUTHORITY = re.compile("[" + re.escape(_URL_ASCII.translate({ord(c): None for c in "/?#&"}))
                        + "]*")
_AFTER_AUTHORITY = re.compile("(?:[/?#][" + re.escape(_URL_ASCII) + "]*)?")
_PROSE_END = ".,:!?]"  # "see https://h/p?t=1." — the sentence's, not the URL's
# After "://": user info (up to the authority's last "@"), host[:port], path, query
# (after the first "?"), fragment (after the first "#" — a "?" in it is no query).
_PARTS = re.compile(r"([^/?#]*@)?([^/?#]*)([^?#]*)(?:\?([^#]*))?(?:#(.*))?", re.DOTALL)
_DOTS = re.compile("[.\u3002\uff0e\uff61]")  # the dots IDNA splits a host name on
_LABEL_MAX, _HOST_MAX = 63, 253  # DNS limits (RFC 1035)
# Scripts written without spaces between words: Thai, Lao, Myanmar, Hangul jamo, Khmer,
# CJK radicals and symbols, kana, Bopomofo, Han, Yi, Hangul (with their extensions and
# compatibility forms). Text in them runs straight on from a host or an e-mail address
# ("https://example.comをご覧ください", "tanaka@example.comまで"), so they end a host:
# read into it, a sentence would be shown as punycode the person cannot read. (A host
# written in them shows as written: IDNA takes them, but they are not read into a host.)
_GLUED = ((0x0E00, 0x0EFF), (0x1000, 0x11FF), (0x1780, 0x17FF), (0x2E80, 0x9FFF),
          (0xA000, 0xA4CF), (0xA960, 0xA97F), (0xAC00, 0xD7FF), (0xF900, 0xFAFF),
          (0x16FE0, 0x1B2FF), (0x20000, 0x3FFFF))


def mask_url(url: str) -> str:
    """``url`` with its user info and its query and fragment values replaced by ``•••``,
    and an internationalized host name spelled as it will be contacted (`ascii_host`).

    ``https://bob:pw@h/p?token=abc&x`` → ``https://•••@h/p?token=•••&x``: a parameter
    keeps its name (a person should see *what* is sent), never its value; a query that
    starts with a bare item (``?<signature>``) may have a secret there, so that one is
    masked whole; a bare item after "&" is a name (``&debug``) — or, in a shell command,
    the command "&" starts — and shows. A fragment's ``name=value`` pairs are masked
    (OAuth puts ``#access_token=`` there); a bare anchor (``#usage``) is a place in a
    page and stays. ``https://раураl.com`` → ``https://xn--....com``: a look-alike host
    shows as what it is.
    """
    scheme, sep, rest = url.partition("://")
    return f"{scheme}://{_masked_rest(rest, _Budget())}" if sep else url


class _Budget:
    """How many more non-ASCII host characters may be put into punycode in one masking
    (one `mask_url`, `mask_urls`, `mask` or `shown` call). Punycode takes ~1 ms for one
    63-character label, so a text of many such hosts would take seconds; past the
    budget, hosts are shown with ``\\uXXXX`` escapes instead (linear, in C)."""

    __slots__ = ("left",)

    def __init__(self, left: int = 128) -> None:
        self.left = left  # two full labels: far more than the IDN hosts of a real text


def _masked_rest(rest: str, budget: _Budget) -> str:
    """What follows a URL's ``://``, masked (see `mask_url`)."""
    user, host, path, query, frag = _PARTS.fullmatch(rest).groups()  # type: ignore[union-attr]
    if user is None and query is None and frag is None and host.isascii():
        return rest  # nothing to hide or spell out
    shown = ["" if user is None else MASK + "@", ascii_host(host, budget), path]
    if query is not None:
        shown += ("?", _mask_params(query))
    if frag is not None:
        shown += ("#", _mask_params(frag, bare=False))
    return "".join(shown)


def ascii_host(hostport: str, budget: _Budget | None = None) -> str:
    """``host[:port]`` spelled as it will be contacted: the one spelling of a host name on
    every surface, a URL's and an e-mail address's (`mask_urls`).

    A name with non-ASCII characters is shown in the punycode httpx connects to: IDNA
    2008 of the lowercased name, as ``httpx._urlparse.encode_host`` does (`idna.encode`).
    Python's own "idna" codec is IDNA 2003, which reads "claßic" as "classic" and drops
    a soft hyphen: the person would read another name than the one contacted. A name
    IDNA refuses (httpx would not connect), that no DNS would take (a label over 63
    characters, a name over 253) or past the ``budget`` (punycode takes time quadratic
    in a label's length) shows each non-ASCII character escaped (``\\xdf``) — never
    normalised into another name."""
    if hostport.isascii():
        return hostport
    host, colon, port = hostport.rpartition(":")
    if not (colon and port.isdigit()):
        host, colon, port = hostport, "", ""
    budget = budget or _Budget()
    budget.left -= len(host)
    if (budget.left < 0 or len(host) > _HOST_MAX
            or any(len(label) > _LABEL_MAX for label in _DOTS.split(host))):
        return _escaped(host) + colon + port
    import idna  # here, not at import: most texts hold no such host, and the CLI starts
    try:        # faster without it
        return idna.encode(host.lower()).decode("ascii") + colon + port
    except (idna.IDNAError, UnicodeError):
        return _escaped(host) + colon + port


def _escaped(host: str) -> str:
    # Python escapes in C (\xdf, \u4e00): linear and fast, however many characters.
    return host.encode("ascii", "backslashreplace").decode("ascii")


@functools.cache
def _host_letters() -> str:
    """The non-ASCII characters a host is read with, as the body of a regex character
    class: each character IDNA 2008 takes in a label (its PVALID and CONTEXTO classes,
    the tables httpx's `idna` encodes with), less the _GLUED scripts. Not the joiners
    (CONTEXTJ): they are invisible, and are shown as escapes. Built on first use (~5 ms):
    most texts hold no such host, and the CLI starts faster without `idna`."""
    from idna.idnadata import codepoint_classes  # packed ranges: start << 32 | end + 1
    packed = (*codepoint_classes["PVALID"], *codepoint_classes["CONTEXTO"])
    spans = sorted((max(p >> 32, 0x80), (p & 0xFFFFFFFF) - 1) for p in packed)
    kept: list[tuple[int, int]] = []
    for first, last in spans:
        start = first
        for hole_first, hole_last in _GLUED:  # cut the glued scripts out of each span
            if start <= hole_last and hole_first <= last:
                if start < hole_first:
                    kept.append((start, hole_first - 1))
                start = hole_last + 1
        if start <= last:
            kept.append((start, last))
    return "".join(f"{re.escape(chr(first))}-{re.escape(chr(last))}" for first, last in kept)


# httpx lowercases a host before IDNA: these match in either case (an "İ" as "i").
_HOST_ASCII = "a-z0-9.:\\-"  # letters, digits, "-", "." and a port's ":"


@functools.cache
def _host_run() -> re.Pattern[str]:
    return re.compile(f"[{_HOST_ASCII}{_host_letters()}]*", re.IGNORECASE)


def _host_end(text: str, at: int) -> int:
    """Where a host that goes on past ASCII at ``at`` ends: after the characters httpx
    would read as part of it (`_host_letters`) and after at most _HOST_MAX characters
    (no DNS name is longer)."""
    return _host_run().match(text, at, at + _HOST_MAX + 1).end()  # type: ignore[union-attr]


_AN_ESCAPE = re.compile(r"\[U\+[0-9A-F]{4,6}\]")  # as `visible` writes one


def _url_end(text: str, start: int) -> int:
    """Where the URL whose "://" ends at ``start`` ends (see _ENDS): its authority in
    ASCII (user info, host, port), a host that goes on past ASCII (`_host_end`), then
    its path, query and fragment; and before an escape `visible` wrote (``[U+2800]``):
    it stands for a character that ended the URL, so text shown twice (a web page shows
    a card's texts, shown already) reads the same."""
    end = _AUTHORITY.match(text, start).end()  # type: ignore[union-attr]
    if end < len(text) and not text[end].isascii():
        end = _host_end(text, end)
    end = _AFTER_AUTHORITY.match(text, end).end()  # type: ignore[union-attr]
    escape = text.find("[U+", start, end)
    while escape != -1 and _AN_ESCAPE.match(text, escape) is None:
        escape = text.find("[U+", escape + 1, end)
    return end if escape == -1 else escape


# A query or fragment item's value (after its first "="): masked; an empty one has
# nothing to hide and stays, so masked text masks to itself ("?t=•••" ends at "•" and
# reads as "?t=" then "•••"; cards mask content, then the whole card). Items are
# separated by "&", or by ";" in a URL given whole (`mask_url`: in a text, ";" ends the
# URL). A single pass in C with a plain replacement (no group references: slow path).
_PARAM_VALUE = re.compile(r"=[^&;]+")
_FIRST_ITEM = re.compile(r"[^&;]*")


def _mask_params(text: str, *, bare: bool = True) -> str:
    """``a=1&b=2&c`` → ``a=•••&b=•••&c``; ``tok&b=1`` → ``•••&b=•••`` (``bare``: a query
    whose first item has no "=" may hold a secret there; a fragment's is an anchor);
    empty stays empty."""
    masked = _PARAM_VALUE.sub("=" + MASK, text)
    first = _FIRST_ITEM.match(masked).end()  # type: ignore[union-attr]
    if bare and first and "=" not in masked[:first]:
        return MASK + masked[first:]
    return masked


def mask_urls(text: str, budget: _Budget | None = None) -> str:
    """Every URL inside ``text`` masked (`mask_url`), every e-mail address's domain
    spelled as its host (`ascii_host`); the rest of the text as it was.

    Linear in ``len(text)`` whatever it holds (see the note above `MASK`)."""
    budget = budget or _Budget()
    return _spelled_mail_domains(_masked_urls(text, budget), budget)


def _masked_urls(text: str, budget: _Budget) -> str:
    if "://" not in text:
        return text  # the common case, without a scan
    out: list[str] = []
    done = 0  # text[:done] is in out already
    at = text.find("://")
    while at != -1:
        end = _url_end(text, at + 3) if _has_scheme(text, at, done) else at + 3
        if end == at + 3:  # no scheme before it (checked first: then the scan after
            at = text.find("://", end)  # "://" is never repeated), or nothing after
            continue
        rest = text[at + 3:end].rstrip(_PROSE_END)
        out += (text[done:at + 3], _masked_rest(rest, budget), text[at + 3 + len(rest):end])
        done = end
        at = text.find("://", end)
    out.append(text[done:])
    return "".join(out)


# An e-mail address whose domain goes on past ASCII ("billing@pаypal.com", a Cyrillic
# "а"): an "@" that does not start a word ("(@Иван)" is a mention), then its domain.
# Only these need spelling out. Any other character before the "@" will do: an invisible
# one there must not keep a look-alike domain as written. The "@" first: a pattern that
# starts with a literal is searched for in C.
_NOT_A_WORD_START = "[^\\s(\\[{<\"'‘“«]"
_MAIL_AT = re.compile(f"@(?<={_NOT_A_WORD_START}@)[a-zA-Z0-9.-]*[^\\x00-\\x7f]")


@functools.cache
def _mail_domain() -> re.Pattern[str]:
    # At most _HOST_MAX characters after the first non-ASCII one: no name is longer.
    return re.compile(f"@(?<={_NOT_A_WORD_START}@)([a-z0-9.-]*[{_host_letters()}]"
                      f"[{_HOST_ASCII}{_host_letters()}]{{0,{_HOST_MAX}}})", re.IGNORECASE)


def _spelled_mail_domains(text: str, budget: _Budget) -> str:
    """``text`` with the domain of every e-mail address spelled as its host would be (as
    the mail is delivered: in the domain's punycode)."""
    if "@" not in text or _MAIL_AT.search(text) is None:
        return text  # the common case: one scan in C, no `idna`

    def spelled(found: re.Match[str]) -> str:
        domain = found.group(1)
        name = domain.rstrip(_PROSE_END)  # "mail billing@pаypal.com."
        return "@" + ascii_host(name, budget) + domain[len(name):]

    return _mail_domain().sub(spelled, text)


def _has_scheme(text: str, at: int, done: int) -> bool:
    """Whether a URL scheme ends at ``at``: a run of scheme characters with a letter in
    it, looked for in at most _SCHEME_MAX characters back and never before ``done`` (the
    end of the previous URL). The scheme itself is shown as written."""
    if at == done or text[at - 1] not in _SCHEME_CHARS:
        return False  # the usual case in prose ("a :// b")
    # Read backwards (one match), rather than a search tried from each start.
    run = _SCHEME_RUN.match(text[max(done, at - _SCHEME_MAX):at][::-1])
    return run is not None and _LETTER.search(run.group()) is not None


def mask(value: T) -> T:
    """``value`` with every URL in every string masked, through dicts, lists and tuples
    (keys included); anything else unchanged. For JSON-like data shown to people."""
    budget = _Budget()  # one for the whole value
    return _walk(value, lambda text: mask_urls(text, budget))


def _walk(value: T, change: Callable[[str], str]) -> T:
    """``value`` with ``change`` applied to every string in it, through dicts, lists and
    tuples (keys included); other values as they are. The input is not modified."""
    kind = type(value)  # exact types first, strings without a call: this runs over
    if kind is str:  # every item of a payload
        return cast(T, change(cast(str, value)))
    if kind is dict or isinstance(value, dict):
        return cast(T, {(change(k) if type(k) is str else _walk(k, change)):
                        (change(v) if type(v) is str else _walk(v, change))
                        for k, v in cast(dict[object, object], value).items()})
    if kind is list or isinstance(value, list):
        return cast(T, [change(v) if type(v) is str else _walk(v, change)
                        for v in cast(list[object], value)])
    if isinstance(value, tuple):
        return cast(T, tuple(_walk(v, change) for v in value))
    if isinstance(value, str):  # a str subclass (an Enum's value)
        return cast(T, change(value))
    return value


# -- what people see -------------------------------------------------------------------
# Characters that change how text *looks* without being seen: C0/C1 controls (an ESC
# starts a terminal sequence, a CR overwrites a line), bidi overrides and isolates
# (U+202E shows "txt.exe" as "exe.txt"), zero-width characters, line separators: Unicode
# categories Cc, Cf, Zl and Zp, less tab and newline (diffs and commands keep their
# lines). And the characters Unicode says to draw as nothing (Default_Ignorable_Code_Point:
# a combining grapheme joiner, variation selectors, Hangul fillers) and the blank braille
# pattern U+2800: drawn as a space or as nothing, they join words that look apart
# ("re-enter⠀your⠀password" is one word to every parser) and told apart names that look
# the same. Spelled out rather than built from `unicodedata` at import: that costs 0.2 s
# on every CLI call; a unit test holds this list to the Unicode database.
_INVISIBLE_RANGES = (
    (0x00, 0x08), (0x0B, 0x1F), (0x7F, 0x9F), (0xAD, 0xAD), (0x34F, 0x34F), (0x600, 0x605),
    (0x61C, 0x61C), (0x6DD, 0x6DD), (0x70F, 0x70F), (0x890, 0x891), (0x8E2, 0x8E2),
    (0x115F, 0x1160), (0x17B4, 0x17B5), (0x180B, 0x180F), (0x200B, 0x200F),
    (0x2028, 0x202E), (0x2060, 0x206F), (0x2800, 0x2800), (0x3164, 0x3164),
    (0xFE00, 0xFE0F), (0xFEFF, 0xFEFF), (0xFFA0, 0xFFA0), (0xFFF0, 0xFFFB),
    (0x110BD, 0x110BD), (0x110CD, 0x110CD), (0x13430, 0x1343F), (0x1BCA0, 0x1BCA3),
    (0x1D173, 0x1D17A), (0xE0000, 0xE0FFF))
_INVISIBLE = re.compile("[" + "".join(f"{re.escape(chr(a))}-{re.escape(chr(b))}"
                                      for a, b in _INVISIBLE_RANGES) + "]")
# An emoji's presentation selector (U+FE0E text, U+FE0F emoji: "☕️", "⚠️") right after
# a pictograph changes only how that symbol is drawn, and a person's chat name or our
# own "▶️" has one: kept there. Anywhere else ("pay\ufe0fpal") it is escaped.
_PICTOGRAPHS = "\u00a9\u00ae\u203c\u2049\u2100-\u2bff\u3030\u303d\u3297\u3299\U0001f000-\U0001faff"
_EMOJI_STYLES = ("\ufe0e", "\ufe0f")
_ESCAPES = {code: f"[U+{code:04X}]"
            for first, last in _INVISIBLE_RANGES for code in range(first, last + 1)
            if chr(code) not in _EMOJI_STYLES}
# The selector first: a pattern that starts with a literal is searched for in C.
_STRAY_STYLE = {style: re.compile(f"{style}(?<![{_PICTOGRAPHS}]{style})")
                for style in _EMOJI_STYLES}


def visible(text: str) -> str:
    """``text`` with each invisible or control character (see _INVISIBLE) shown as a
    visible escape, ``[U+202E]``; everything else as it was."""
    if _INVISIBLE.search(text) is None:
        return text  # the common case: one scan in C
    text = text.translate(_ESCAPES)  # also in C, however many there are
    for style, stray in _STRAY_STYLE.items():
        if style in text:
            text = stray.sub(f"[U+{ord(style):04X}]", text)  # a plain replacement: in C
    return text


def shown(value: T) -> T:
    """``value`` as a person is shown it, on every surface: URLs masked (`mask`, IDN
    hosts and e-mail domains as punycode) and invisible characters made visible
    (`visible`); through dicts, lists and tuples like `mask`."""
    budget = _Budget()  # one for the whole value
    return _walk(value, lambda text: visible(mask_urls(text, budget)))
