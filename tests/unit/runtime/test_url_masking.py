"""URL masking (runtime/text.py): what people see of a URL, and nothing else changed."""

from __future__ import annotations

import pytest

from signoff.runtime.text import MASK, mask, mask_url, mask_urls


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
