"""Page processing: decoding, extraction, robots directives, fingerprints."""

from __future__ import annotations

import codecs
from urllib.parse import urljoin

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from w3lib.url import safe_url_string

from pipelines.processing import (
    _absolute,
    _base_dir,
    content_hash,
    decode_html,
    extract,
    hamming,
    simhash,
)


@pytest.mark.parametrize(
    ("body", "ctype", "expected"),
    [
        ("é".encode("cp1252"), "text/html; charset=windows-1252", "é"),
        ("é".encode(), "text/html; charset=utf-8", "é"),
        (b'<meta charset="koi8-r">' + "ж".encode("koi8-r"), None, "ж"),
        (b"\xef\xbb\xbf" + "é".encode(), "text/html; charset=latin-1", "é"),
        ("Grüße aus München, schöne Grüße".encode("cp1252"), None, "München"),
    ],
)
def test_decoding_order(body: bytes, ctype: str | None, expected: str) -> None:
    assert expected in decode_html(body, ctype)[1]


@pytest.mark.parametrize(
    ("ctype", "declared"),
    [
        ("text/html; charset=undefined", None),
        (None, "undefined"),
        ("text/html; charset=no-such-charset", None),
    ],
)
def test_a_label_that_cannot_decode_falls_back(
    ctype: str | None, declared: str | None
) -> None:
    """Issue 21: Python's ``undefined`` codec is a text codec that refuses
    every byte, and the page was stored as status 0."""
    body = "<p>Grüße".encode()
    encoding, text = decode_html(body, ctype, declared)
    assert codecs.lookup(encoding).name == "utf-8" and "Grüße" in text


@given(st.binary(max_size=2000))
@settings(max_examples=150, deadline=None)
def test_never_crashes_on_bytes(body: bytes) -> None:
    page = extract(body, "http://a.test/", {"Content-Type": ["text/html"]})
    assert isinstance(page.text, str)


def test_extraction_and_boilerplate() -> None:
    html = b"""<html lang="de"><head><title>T</title>
    <meta name="description" content=" A  page ">
    <link rel="canonical" href="/canon"></head><body>
    <div class="site-menu"><a href="/a">A</a> <a href="/b">B</a></div>
    <ul><li><a href="/1">one</a></li><li><a href="/2">two</a></li></ul>
    <article><h1>Head</h1><p>Main text here with
    <a href="http://x.test/y#frag" rel="nofollow noopener">a link</a>.</p></article>
    <div id="cookie-banner">We use cookies</div><footer>Imprint</footer>
    <script>var x = 1;</script></body></html>"""
    page = extract(html, "http://a.test/dir/p", {"X-Robots-Tag": ["noindex"]})
    assert page.title == "T" and page.description == "A page"
    assert page.canonical == "http://a.test/canon" and page.language == "de"
    assert page.text == "Head\nMain text here with a link."
    assert page.noindex and not page.nofollow
    urls = [link.url for link in page.links]
    assert "http://x.test/y" in urls and "http://a.test/1" in urls
    assert [link.url for link in page.follow_links()] == [
        "http://a.test/a",
        "http://a.test/b",
        "http://a.test/1",
        "http://a.test/2",
    ]


def test_nofollow_meta_and_agent_specific_header() -> None:
    page = extract(
        b'<meta name="robots" content="none"><a href="/x">x</a>',
        "http://a.test/",
        {"x-robots-tag": ["otherbot: noarchive"]},
    )
    assert page.noindex and page.nofollow and page.follow_links() == []


def test_fingerprints() -> None:
    text = " ".join(f"word{i}" for i in range(2000))
    assert content_hash(text) == content_hash(text.upper() + "  ")
    edited = text.replace("word1000 ", "changed ")
    assert hamming(simhash(text), simhash(edited)) <= 3
    other = " ".join(f"other{i}" for i in range(2000))
    assert hamming(simhash(text), simhash(other)) > 10


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # Values of webcrawl 0.1's per-shingle loop (mmh3 + Counter): the
        # vectorised SimHash keeps every bit, so an index in Redis built by
        # older workers stays valid.
        (" ".join(f"word{i}" for i in range(2000)), 0x9DBB1A118ACCDB6E),
        ("Grüße aus München, schöne Grüße", 0xF75197A6EE68F7C6),
        ("a b", 0x2DB63EAFFC6CC969),
        ("one two three one two three", 0x6A94842E4D11A064),
    ],
)
def test_simhash_bits_are_stable(text: str, expected: int) -> None:
    assert simhash(text) == expected


def _absolute_slow(base: str, href: str) -> str | None:
    """The general path: urljoin, then w3lib's safe_url_string."""
    href = href.strip()
    if not href or href.startswith(("#", "javascript:", "mailto:", "tel:", "data:")):
        return None
    try:
        url = safe_url_string(urljoin(base, href))
    except ValueError:
        return None
    return url.split("#", 1)[0] if url.startswith(("http://", "https://")) else None


BASES = [
    "http://a.test/dir/p.html",
    "https://b.test:8080/",
    "http://a.test",
    "http://a.test/d/?q=1#f",
    "http://a.test/ü/x",
    "http://A.test/x/y",
]


@given(
    st.sampled_from(BASES),
    st.text(alphabet="ab/.:?#%-_~ü +[]|\\@=&;,!$'()*\"<>`{}^", max_size=20)
    | st.sampled_from(
        [
            "../x",
            "./y",
            "x/../y",
            "http://c.test/z",
            "http://c.test/z?",
            "http://c.test/z?#f",
            "http://c.test/a/../b",
            "//c.test/",
            "=?",
            "a?#b",
            "a?b?",
            "a//b",
            "=//",
            "a?x//y",
        ]
    ),
)
@settings(max_examples=500, deadline=None)
def test_link_fast_path_equals_the_general_path(base: str, href: str) -> None:
    # extract() joins plain links by concatenation (no urljoin, no w3lib):
    # the URL must be the one the general path gives.
    assert _absolute(base, href, _base_dir(base)) == _absolute_slow(base, href)


@pytest.mark.parametrize("max_links", [0, 2, 5, 6, None])
def test_extract_stops_after_max_links_anchors(max_links: int | None) -> None:
    body = (
        b'<p><a href="/1">1</a><b><a>no href</a><area href="/2"></b></p>'
        b'<div><a href="javascript:x">js</a><p><a href="/3">3</a></p></div>'
        b'<a href="/4">4</a><a href="/5" rel="nofollow">5</a>'
    )
    every = extract(body, "http://a.test/")
    page = extract(body, "http://a.test/", max_links=max_links)
    examined = 6 if max_links is None else min(max_links, 6)
    # The first anchors in document order; the javascript: one yields no link.
    assert page.links == every.links[: len(page.links)]
    assert len(page.links) == examined - (examined >= 4)
    assert page.links_unexamined == 6 - examined
    assert every.links_unexamined == 0 and len(every.links) == 5
