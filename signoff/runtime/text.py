"""Plain-text helpers shared by tools, cards and notifications: shortening, URL masking,
host names as they will be contacted (`ascii_host`), and what a person is shown of text
an agent wrote (`shown`)."""

from __future__ import annotations

import difflib
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
_AFTER_SCHEME = re.compile(r"[^\s<>\"'`]+")
# After "://": user info (up to the authority's last "@"), host[:port], path, query
# (after the first "?"), fragment (after the first "#" — a "?" in it is no query).
_PARTS = re.compile(r"([^/?#]*@)?([^/?#]*)([^?#]*)(?:\?([^#]*))?(?:#(.*))?", re.DOTALL)
_DOTS = re.compile("[.\u3002\uff0e\uff61]")  # the dots IDNA splits a host name on
_LABEL_MAX, _HOST_MAX = 63, 253  # DNS limits (RFC 1035)


def mask_url(url: str) -> str:
    """``url`` with its user info and its query and fragment values replaced by ``•••``,
    and an internationalized host name shown as punycode.

    ``https://bob:pw@h/p?token=abc&x`` → ``https://•••@h/p?token=•••&•••``: a parameter
    keeps its name (a person should see *what* is sent), never its value; a bare query
    item may itself be the secret, so it is masked whole. A fragment's ``name=value``
    pairs are masked (OAuth puts ``#access_token=`` there); a bare anchor (``#usage``)
    is a place in a page and stays. ``https://раураl.com`` → ``https://xn--....com``:
    a look-alike host shows as what it is.
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
    every surface.

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


# A query or fragment item's value (after its first "="), and a query's bare item (no
# "="): it may itself be the secret, so it is masked whole; a fragment's is an anchor
# and stays. Each a single pass in C with a plain replacement (no group references:
# those take the slow path), whatever the length.
_PARAM_VALUE = re.compile(r"=[^&;]*")
_BARE_ITEM = re.compile(r"(?:^|(?<=[&;]))[^&;=]+(?=[&;]|$)")


def _mask_params(text: str, *, bare: bool = True) -> str:
    """``a=1&b`` → ``a=•••&•••`` (``a=•••&b`` with ``bare=False``); empty stays empty."""
    if not text:
        return text
    masked, pairs = _PARAM_VALUE.subn("=" + MASK, text)
    if not bare or pairs == text.count("&") + text.count(";") + 1:
        return masked  # every item was a pair: no bare item to look for
    return _BARE_ITEM.sub(MASK, masked)


def mask_urls(text: str, budget: _Budget | None = None) -> str:
    """Every URL inside ``text`` masked (`mask_url`); the rest of the text as it was.

    Linear in ``len(text)`` whatever it holds (see the note above `MASK`)."""
    if "://" not in text:
        return text  # the common case, without a scan
    budget = budget or _Budget()
    out: list[str] = []
    done = 0  # text[:done] is in out already
    at = text.find("://")
    while at != -1:
        after = _AFTER_SCHEME.match(text, at + 3) if _has_scheme(text, at, done) else None
        if after is None:  # no scheme before it (checked first: then the scan after
            at = text.find("://", at + 3)  # "://" is never repeated), or nothing after
            continue
        end = after.end()
        # Prose ends a URL with punctuation ("see https://h/p?t=1."): keep that outside.
        rest = after.group().rstrip(".,;:!?)]}")
        out += (text[done:at + 3], _masked_rest(rest, budget), text[at + 3 + len(rest):end])
        done = end
        at = text.find("://", end)
    out.append(text[done:])
    return "".join(out)


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
    hosts as punycode) and invisible characters made visible (`visible`); through
    dicts, lists and tuples like `mask`."""
    budget = _Budget()  # one for the whole value
    return _walk(value, lambda text: visible(mask_urls(text, budget)))
