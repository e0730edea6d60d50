"""Plain-text helpers shared by tools, cards and notifications: shortening, URL masking."""

from __future__ import annotations

import json
import re
from typing import TypeVar, cast

SHORT = 120
T = TypeVar("T")


def shorten(value: object, limit: int = SHORT) -> str:
    """One line, at most ``limit`` characters, with an ellipsis when cut."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


# -- masking ---------------------------------------------------------------------------
# What a person sees of a URL: its scheme, host, port and path. The user info and every
# query (and fragment) value are secrets often enough (tokens, signatures, passwords)
# that they are shown as MASK, at every presentation boundary: cards, notifications, the
# console and API answers (GET /audit excepted). Stored data, the fingerprint and grants
# keep the real value, so a grant still covers the exact URL that was approved.
MASK = "•••"
_URL = re.compile(r"\b[a-zA-Z][a-zA-Z0-9+.-]*://[^\s<>\"'`]+")


def mask_url(url: str) -> str:
    """``url`` with its user info and its query and fragment values replaced by ``•••``.

    ``https://bob:pw@h/p?token=abc&x`` → ``https://•••@h/p?token=•••&•••``: a parameter
    keeps its name (a person should see *what* is sent), never its value; a bare query
    item may itself be the secret, so it is masked whole. A fragment's ``name=value``
    pairs are masked (OAuth puts ``#access_token=`` there); a bare anchor (``#usage``)
    is a place in a page and stays.
    """
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url
    end = len(rest)
    for mark in "/?#":
        found = rest.find(mark)
        if found != -1:
            end = min(end, found)
    authority, tail_ = rest[:end], rest[end:]
    if "@" in authority:
        authority = MASK + "@" + authority.rpartition("@")[2]
    path, qmark, query = tail_.partition("?")
    if qmark:
        query, hashmark, frag = query.partition("#")
    else:
        path, hashmark, frag = path.partition("#")
    fragment = hashmark + _mask_params(frag, bare=False)
    masked_query = qmark + (_mask_params(query) if qmark else "")
    return f"{scheme}://{authority}{path}{masked_query}{fragment}"


def _mask_params(text: str, *, bare: bool = True) -> str:
    """``a=1&b`` → ``a=•••&•••`` (``a=•••&b`` with ``bare=False``); empty stays empty."""
    if not text:
        return text
    out = []
    for item in re.split(r"([&;])", text):
        if item in ("&", ";") or not item:
            out.append(item)
        elif "=" in item:
            out.append(item.partition("=")[0] + "=" + MASK)
        else:
            out.append(MASK if bare else item)
    return "".join(out)


def mask_urls(text: str) -> str:
    """Every URL inside ``text`` masked (`mask_url`); the rest of the text as it was."""
    if "://" not in text:
        return text  # the common case, without a regex scan
    return _URL.sub(_masked_match, text)


def _masked_match(found: re.Match[str]) -> str:
    # Prose ends a URL with punctuation ("see https://h/p?t=1."): keep that outside.
    url = found.group(0)
    core = url.rstrip(".,;:!?)]}")
    return mask_url(core) + url[len(core):]


def mask(value: T) -> T:
    """``value`` with every URL in every string masked, through dicts, lists and tuples
    (keys included); anything else unchanged. For JSON-like data shown to people."""
    if isinstance(value, str):
        return cast(T, mask_urls(value))
    if isinstance(value, dict):
        return cast(T, {mask(k): mask(v) for k, v in value.items()})
    if isinstance(value, list):
        return cast(T, [mask(v) for v in value])
    if isinstance(value, tuple):
        return cast(T, tuple(mask(v) for v in value))
    return value
