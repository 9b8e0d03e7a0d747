"""The CSS selector subset of change alerts, and a schedule's watch as the CLI sets it."""

from __future__ import annotations

import pytest

from crawls.alerts import parse_watch
from crawls.selectors import Selector, page_text

HTML = """<html><head><style>.price{}</style><script>var hidden = 1;</script></head><body>
<main id="top"><div class="card big"><p class="price">10 EUR</p><p>other</p></div></main>
<aside><p class="price">ad 5 EUR</p></aside><p>text <br> after</p></body></html>"""


@pytest.mark.parametrize(("selector", "text"), [
    ("main .price", "10 EUR"),
    (".price", "10 EUR\nad 5 EUR"),
    ("#top div.card.big p.price", "10 EUR"),
    ("aside p, main .price", "10 EUR\nad 5 EUR"),
    ("section .price", None),
])
def test_a_selector_selects_the_text_of_its_elements(selector, text):
    assert Selector.parse(selector).text(HTML) == text


@pytest.mark.parametrize("selector", ["main > p", "a[href]", "p:first-child", "*", "", "a,,b", "#a#b"])
def test_selectors_outside_the_subset_are_refused_with_the_reason(selector):
    with pytest.raises(ValueError, match="supported|empty|two ids|between commas"):
        Selector.parse(selector)


def test_page_text_drops_scripts_and_styles():
    text = page_text(HTML)
    assert "10 EUR" in text and "var hidden" not in text and ".price{}" not in text


def test_a_watch_is_one_of_pages_urls_or_a_selector():
    assert parse_watch() is None
    assert parse_watch(pages=True) == {"pages": True}
    assert parse_watch(urls=["https://example.com/a#x", "https://example.com"]) == {
        "urls": ["https://example.com/a", "https://example.com/"]}
    assert parse_watch(selector="  main   .price ") == {"selector": "main .price"}
    with pytest.raises(ValueError, match="one of them"):
        parse_watch(pages=True, selector="main")
    with pytest.raises(ValueError, match="not an http"):
        parse_watch(urls=["ftp://example.com/"])
