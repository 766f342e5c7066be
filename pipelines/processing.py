"""Page processing: decoding, extraction, robots directives and fingerprints.

Pure functions, no I/O and no settings. The ``web`` spider calls
:func:`extract` once per HTML page (its links and robots directives) and
hands the result to the storage pipeline in the item
(``PageItem.extracted``); the pipeline (:mod:`pipelines.storage`, in a
thread) fingerprints it, and extracts only items that arrive without it.

* Decoding (:func:`decode_html`) follows the HTML encoding sniffing order that
  w3lib implements: a byte-order mark, then the HTTP ``Content-Type`` charset,
  then ``<meta charset>``, then detection (charset-normalizer); undecodable
  bytes become U+FFFD, so no byte sequence raises.
* Extraction (:func:`extract`) parses the page once with resiliparse (lexbor,
  a C HTML5 parser): title, meta description, canonical link, language,
  outlinks with anchor text and ``rel=nofollow``, the robots directives of
  ``<meta name=robots>`` and ``X-Robots-Tag`` (one rule for the spider and
  the pipeline, :func:`robots_directives`),
  and the main text by resiliparse's main-content heuristics
  (:func:`main_text`, the one place the extractor is chosen). The choice was
  measured against the previous lxml extractor and trafilatura on
  python3-doc, postgresql-doc and sandbox pages: ``python -m bench.extractors``,
  table in bench/RESULTS.md.
* Fingerprints: :func:`content_hash` (SHA-256 of the normalized text) for
  exact duplicates and :func:`simhash` (64 bits over word 3-shingles) for near
  duplicates, compared by :func:`hamming`; :func:`fingerprints` gives both
  from one tokenization. SimHash hashes its shingles and counts their bits
  without a Python-level loop per shingle (numpy), with the same bits as the
  per-shingle loop it replaced.
"""

from __future__ import annotations

import hashlib
import itertools
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import urljoin

import mmh3
import numpy as np
from resiliparse.extract.html2text import extract_plain_text
from resiliparse.parse.html import HTMLTree
from w3lib.encoding import html_to_unicode, resolve_encoding
from w3lib.url import safe_url_string

from extensions.downloadermiddlewares.charsets import (
    fallback_encoding,
    is_text_encoding,
)

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator, Mapping, Sequence

    from resiliparse.parse.html import DocumentNode, ElementNode

_PAGE_CHROME = ["body > header", "body > footer", "body > nav", "body > aside"]
# An absolute http(s) URL that safe_url_string would return unchanged.
_PLAIN_URL_RE = re.compile(
    # Not "x?" nor "x?#f" (urljoin drops an empty query), nor a query with no
    # path (w3lib adds the "/").
    r"(?![^#]*\?(?:#|\Z))https?://[a-z0-9.-]+(?::[0-9]{1,5})?(?:/[A-Za-z0-9._~!$&()*+,=:@/?%-]*)?"
    r"(?:#.*)?\Z",
    re.DOTALL,
)
# A relative reference that joins a base directory by concatenation: no
# scheme, no leading "/", ".", "?" or "#", no dot segment, no empty segment
# ("a//b": urljoin drops it), no empty query, no ";" (urljoin's path
# parameters), nothing to quote (w3lib quotes "'" in a query).
_PLAIN_REF_RE = re.compile(
    r"(?![^/?#]*:)(?!.*(?:^|/)\.\.?(?:[/?#]|\Z))(?![^#]*\?(?:#|\Z))"
    r"(?![^?#]*//)[A-Za-z0-9_~!$&()*+,=@%-][A-Za-z0-9._~!$&()*+,=:@/?%-]*(?:#.*)?\Z",
    re.DOTALL,
)
_WORD_RE = re.compile(r"\w+", re.UNICODE)
_SHINGLE = 3


@dataclass(frozen=True)
class Link:
    """One outlink: absolute URL, anchor text and whether it is nofollow."""

    url: str
    text: str = ""
    nofollow: bool = False


@dataclass
class Extracted:
    """What :func:`extract` finds in one page."""

    encoding: str = "utf-8"
    title: str = ""
    description: str = ""
    canonical: str | None = None
    language: str | None = None
    text: str = ""
    links: list[Link] = field(default_factory=list)
    # Anchors past extract()'s ``max_links``, never turned into links.
    links_unexamined: int = 0
    noindex: bool = False
    nofollow: bool = False

    def follow_links(self) -> list[Link]:
        """The links a crawler may follow: none when the page says
        ``nofollow``, else those without ``rel=nofollow``."""
        if self.nofollow:
            return []
        return [link for link in self.links if not link.nofollow]


def header_values(headers: Mapping[str, Sequence[str | bytes]], name: str) -> list[str]:
    """All values of one header, whatever the case of its name.

    >>> header_values({"content-type": [b"text/html"]}, "Content-Type")
    ['text/html']
    """
    wanted = name.lower()
    out: list[str] = []
    for key, values in headers.items():
        key_s = key.decode("latin-1") if isinstance(key, bytes) else key
        if key_s.lower() != wanted:
            continue
        for value in [values] if isinstance(values, str | bytes) else values:
            out.append(
                value.decode("latin-1") if isinstance(value, bytes) else str(value)
            )
    return out


def _detect_encoding(body: bytes) -> str | None:
    try:
        from charset_normalizer import from_bytes
    except ImportError:  # pragma: no cover - optional
        return None
    best = from_bytes(body[:65536]).best()
    return best.encoding if best is not None else None


def decode_html(
    body: bytes, content_type: str | None = None, declared: str | None = None
) -> tuple[str, str]:
    """Decode an HTML body: BOM, HTTP charset, ``<meta charset>``, detection.

    ``declared`` (e.g. the encoding Scrapy already found) is used as the HTTP
    charset when ``content_type`` names none. Returns ``(encoding, text)``;
    never raises on bad bytes.

    >>> decode_html("café".encode("latin-1"), "text/html; charset=ISO-8859-1")
    ('cp1252', 'café')
    >>> decode_html(b'<meta charset="utf-8"><p>caf\\xc3\\xa9')[1][-4:]
    'café'
    >>> decode_html(b"\\xef\\xbb\\xbfhi", "text/html; charset=latin-1")
    ('utf-8', 'hi')
    >>> decode_html(b"ok \\xff bad", "text/html; charset=utf-8")
    ('utf-8', 'ok \\ufffd bad')
    >>> decode_html(b"<p>caf\\xc3\\xa9", "text/html; charset=base64")
    ('utf-8', '<p>café')
    >>> decode_html(b'<meta charset="rot13"><p>ok')[0]
    'utf-8'
    """
    if (
        declared
        and (not content_type or "charset" not in content_type.lower())
        and resolve_encoding(declared)
    ):
        content_type = f"text/html; charset={declared}"
    try:
        return html_to_unicode(content_type, body, auto_detect_fun=_detect_encoding)
    except (LookupError, UnicodeError):
        # A label naming a codec that is no text encoding (charset=base64,
        # <meta charset=rot13>) or one that decodes nothing (charset=undefined:
        # UnicodeError whatever the error handler): decode as
        # extensions.downloadermiddlewares.charsets would.
        fallback = declared if is_text_encoding(declared) else fallback_encoding(body)
        return html_to_unicode(f"text/html; charset={fallback}", body)


def robots_tokens(values: Iterable[str]) -> set[str]:
    """Directives of meta robots / X-Robots-Tag values that apply to every
    crawler (``googlebot: noindex`` names another crawler and is ignored).

    >>> sorted(robots_tokens(["NoIndex, follow", "otherbot: nofollow"]))
    ['follow', 'noindex']
    >>> sorted(robots_tokens(["none"]))
    ['nofollow', 'noindex', 'none']
    """
    tokens: set[str] = set()
    for value in values:
        for raw in value.split(","):
            token = raw.strip().lower()
            if ":" in token:
                agent, _, rest = token.partition(":")
                # "unavailable_after: <date>" is a directive, not an agent.
                if agent.strip() in {"unavailable_after", "max-snippet"}:
                    continue
                if agent.strip() not in {"*", "all"}:
                    continue
                token = rest.strip()
            if token:
                tokens.add(token)
    if "none" in tokens:
        tokens |= {"noindex", "nofollow"}
    return tokens


def robots_directives(
    headers: Mapping[str, Sequence[str | bytes]], meta_contents: Iterable[str]
) -> tuple[bool, bool]:
    """``(noindex, nofollow)`` of a page: the one rule the spider (which links
    to follow) and the pipeline (what to index) share. ``X-Robots-Tag``
    headers and ``<meta name=robots>`` contents add up; ``none`` means both.

    >>> robots_directives({"X-Robots-Tag": ["noindex"]}, ["nofollow"])
    (True, True)
    >>> robots_directives({}, ["none"])
    (True, True)
    >>> robots_directives({}, ["otherbot: none", "index, follow"])
    (False, False)
    """
    tokens = robots_tokens(
        itertools.chain(header_values(headers, "X-Robots-Tag"), meta_contents)
    )
    return "noindex" in tokens, "nofollow" in tokens


def _clean(text: str | None) -> str:
    # str.split() splits on the characters \s matches; 6x faster than re.sub.
    return " ".join(text.split()) if text else ""


def main_text(tree: HTMLTree) -> str:
    """The page's main text, one line per block: resiliparse's main-content
    extraction (navigation, headers, footers, asides, boilerplate classes and
    link lists dropped). The one function that picks the extractor; see
    ``bench/extractors.py`` for why this one."""
    text = extract_plain_text(
        tree,
        main_content=True,
        list_bullets=False,
        alt_texts=False,
        comments=False,
        # A page's own banner and footer (children of <body>) are never its
        # content; the heuristics keep e.g. a site name in a banner.
        skip_elements=_PAGE_CHROME,
    )
    # _clean of each line, with C functions only (no Python frame per line).
    return "\n".join(
        filter(None, map(" ".join, map(str.split, str(text).splitlines())))
    )


def _base_dir(base: str) -> str | None:
    """The directory of a plain base URL, to which a plain relative reference
    is appended (None: resolve with urljoin).

    >>> _base_dir("http://a.test/d/p.html?q#f"), _base_dir("http://a.test")
    ('http://a.test/d/', 'http://a.test/')
    """
    base = base.split("#", 1)[0].split("?", 1)[0]
    if _PLAIN_URL_RE.match(base) is None:
        return None
    if "/" not in base.partition("://")[2]:
        return base + "/"
    return base[: base.rindex("/") + 1]


def _absolute(base: str, href: str, base_dir: str | None = None) -> str | None:
    """The absolute http(s) URL of a link, without its fragment, or None.

    >>> _absolute("http://a.test/d/p", "../x y.html#f")
    'http://a.test/x%20y.html'
    >>> _absolute("http://a.test/d/p", "q.html", "http://a.test/d/")
    'http://a.test/d/q.html'
    >>> _absolute("http://a.test/", "mailto:x@a.test") is None
    True
    """
    href = href.strip()
    if not href or href.startswith(("#", "javascript:", "mailto:", "tel:", "data:")):
        return None
    try:
        # Most links are plain (a relative path without dot segments, or an
        # absolute URL with nothing to quote): join them by concatenation and
        # skip urljoin and w3lib's safe_url_string, which together cost more
        # than parsing the page. Anything else takes the general path.
        if _PLAIN_URL_RE.match(href) is not None:
            url = href
        elif base_dir is not None and _PLAIN_REF_RE.match(href) is not None:
            url = base_dir + href
        else:
            url = urljoin(base, href)
            if _PLAIN_URL_RE.match(url) is None:
                url = safe_url_string(url)
    except ValueError:
        return None
    if not url.startswith(("http://", "https://")):
        return None
    return url.split("#", 1)[0]


def _parse(text: str) -> HTMLTree | None:
    # lexbor parses any string (HTML5 error recovery); NUL bytes are the one
    # thing it refuses.
    try:
        tree = HTMLTree.parse(text.replace("\x00", ""))
    except (ValueError, RuntimeError):
        return None
    return tree if tree.document is not None else None


_ANCHORS = "a[href], area[href]"
_ANCHOR_TAGS = frozenset({"a", "area"})


def _first_anchors(root: DocumentNode, limit: int) -> list[ElementNode]:
    """The first ``limit`` elements matching ``_ANCHORS`` under ``root``, in
    document order, found by a walk that stops there: building the whole
    collection of a page with 100,000 links holds the GIL for most of a second.

    >>> tree = HTMLTree.parse(
    ...     '<p><a href="1">x</a><b><a>no</a><area href="2"></b></p><a href="3">y</a>'
    ... )
    >>> [a.getattr("href") for a in _first_anchors(tree.document, 2)]
    ['1', '2']
    >>> [a.getattr("href") for a in _first_anchors(tree.document, 9)]
    ['1', '2', '3']
    """
    found: list[ElementNode] = []
    # Any: the stubs type a parent as a plain Node, without element siblings.
    node: Any = root.first_element_child
    while node is not None and len(found) < limit:
        if node.tag in _ANCHOR_TAGS and node.hasattr("href"):
            found.append(node)
        child = node.first_element_child
        if child is not None:
            node = child
            continue
        # No child: the next sibling of the node or of its nearest ancestor.
        while node is not None and node != root:
            sibling = node.next_element_sibling
            if sibling is not None:
                node = sibling
                break
            node = node.parent
        else:
            node = None
    return found


def extract(
    body: bytes,
    url: str,
    headers: Mapping[str, Sequence[str | bytes]] | None = None,
    encoding: str | None = None,
    max_links: int | None = None,
) -> Extracted:
    """Extract what the pipeline stores and the crawler follows from a page,
    with one parse.

    ``max_links`` stops link extraction after that many anchors (in document
    order; ``links_unexamined`` counts the rest): turning a link into an
    absolute URL is the costly part of a page with 100,000 links.

    Malformed HTML yields what can be extracted; bytes never raise.

    >>> page = extract(
    ...     b'<html lang="en"><head><title> Hi </title>'
    ...     b'<meta name="robots" content="nofollow"></head><body>'
    ...     b'<nav><a href="/">Home</a></nav><p>Hello <a href="b" rel="nofollow">'
    ...     b'world</a></p><footer>(c) us</footer>',
    ...     "http://a.test/x/",
    ... )
    >>> page.title, page.language, page.text, page.nofollow, page.noindex
    ('Hi', 'en', 'Hello world', True, False)
    >>> page.links[1]
    Link(url='http://a.test/x/b', text='world', nofollow=True)
    >>> extract(b"<p>unclosed <b>bold", "http://a.test/").text
    'unclosed bold'
    """
    headers = headers or {}
    ctype = next(iter(header_values(headers, "Content-Type")), None)
    enc, text = decode_html(body, ctype, encoding)
    out = Extracted(encoding=enc)
    tree = _parse(text)
    doc = tree.document if tree is not None else None
    if tree is None or doc is None:
        out.noindex, out.nofollow = robots_directives(headers, ())
        out.text = _clean(text.replace("\x00", ""))
        return out
    base = url
    base_el = doc.query_selector("base[href]")
    if base_el is not None:
        base = urljoin(url, base_el.getattr("href", "") or "")
    base_dir = _base_dir(base)
    out.title = _clean(tree.title)
    meta_robots: list[str] = []
    for meta in doc.get_elements_by_tag_name("meta").values():
        name = (meta.getattr("name") or meta.getattr("property") or "").lower()
        content = meta.getattr("content") or ""
        if name == "description" and not out.description:
            out.description = _clean(content)
        elif name in {"robots", "*"}:
            meta_robots.append(content)
        elif (
            meta.getattr("http-equiv") or ""
        ).lower() == "content-language" and not out.language:
            out.language = _clean(content).split(",")[0] or None
    out.noindex, out.nofollow = robots_directives(headers, meta_robots)
    for link in doc.get_elements_by_tag_name("link").values():
        href = link.getattr("href")
        if href and "canonical" in (link.getattr("rel") or "").lower().split():
            out.canonical = _absolute(base, href, base_dir)
            break
    html = doc.query_selector("html")
    lang = html.getattr("lang") or html.getattr("xml:lang") if html else None
    if lang:
        out.language = _clean(lang) or out.language
    # .values(): iterating a resiliparse DOMCollection item by item costs
    # O(n) per item (6 s for 1,300 links); values() builds the list in C.
    anchors = doc.query_selector_all(_ANCHORS)
    total = len(anchors)  # no Python object per anchor: cheap
    if max_links is not None and total > max_links:
        first = _first_anchors(doc, max_links)
        out.links_unexamined = total - max_links
    else:
        first = anchors.values()
    for a in first:
        absolute = _absolute(base, a.getattr("href") or "", base_dir)
        if absolute is None:
            continue
        rel = (a.getattr("rel") or "").lower().split()
        out.links.append(Link(absolute, _clean(a.text), "nofollow" in rel))
    out.text = main_text(tree)
    return out


def normalize_text(text: str) -> str:
    """Lower-cased words joined by single spaces: what the fingerprints see.

    >>> normalize_text("  Hello,\\n  WORLD!  ")
    'hello world'
    """
    return " ".join(_WORD_RE.findall(text.lower()))


def fingerprints(text: str) -> tuple[str, int]:
    """:func:`content_hash` and :func:`simhash` of a text, tokenized once.

    >>> fingerprints("Hello, world") == (content_hash("hello world"),
    ...                                  simhash("HELLO world"))
    True
    """
    words = _WORD_RE.findall(text.lower())
    digest = hashlib.sha256(" ".join(words).encode("utf-8")).hexdigest()
    return digest, _simhash_words(words)


def content_hash(text: str) -> str:
    """SHA-256 (hex) of the normalized text.

    >>> content_hash("Hello  world") == content_hash("hello, WORLD")
    True
    """
    return hashlib.sha256(normalize_text(text).encode("utf-8")).hexdigest()


def shingles(words: Sequence[str], size: int = _SHINGLE) -> Iterator[str]:
    """Word shingles, one per position (the whole text when it is shorter).

    >>> list(shingles("a b c d".split()))
    ['a b c', 'b c d']
    >>> list(shingles(["a", "b"])), list(shingles([]))
    (['a b'], [])
    """
    if len(words) < size:
        return iter([" ".join(words)] if words else [])
    # map/zip run in C: no Python frame per shingle.
    return map(" ".join, zip(*(words[i:] for i in range(size)), strict=False))


def simhash(text: str) -> int:
    """64-bit SimHash of the text's word 3-shingles (MurmurHash3 x64, the
    first 64 bits of ``mmh3.hash64``), a shingle counted once per occurrence.

    Near-identical texts differ in few bits; an empty text hashes to 0. The
    bits are those of webcrawl 0.1's per-shingle loop (the tests pin values),
    so a duplicate index built by older workers stays valid.

    >>> words = [f"w{i}" for i in range(3000)]
    >>> a = simhash(" ".join(words))
    >>> b = simhash(" ".join(words[:1500] + ["changed"] + words[1501:]))
    >>> hamming(a, a), hamming(a, b) <= 3, simhash("")
    (0, True, 0)
    """
    return _simhash_words(_WORD_RE.findall(text.lower()))


def _simhash_words(words: Sequence[str]) -> int:
    grams = shingles(words)
    # One C-level pass hashes every shingle: hash_bytes gives the 128-bit
    # MurmurHash3 as 16 little-endian bytes, whose first 8 are
    # hash64(...)[0], the shingle's hash (no int or tuple object per shingle)
    # ...
    digests = np.frombuffer(b"".join(map(mmh3.hash_bytes, grams)), dtype="<u8")
    if not digests.size:
        return 0
    hashes = np.ascontiguousarray(digests[::2])
    # ... then count, for each of the 64 bits, how many hashes have it set:
    # bit p of a little-endian word is bit p % 8 of its byte p // 8.
    bits = np.unpackbits(
        hashes.view(np.uint8).reshape(-1, 8), axis=1, bitorder="little"
    )
    counts = bits.sum(axis=0, dtype=np.int64)
    # A bit is set when more than half of the shingles vote for it.
    voted = np.packbits(2 * counts > hashes.size, bitorder="little")
    return int(voted.view("<u8")[0])


def hamming(a: int, b: int) -> int:
    """Number of differing bits.

    >>> hamming(0b1011, 0b0001)
    2
    """
    return (a ^ b).bit_count()


def simhash_blocks(value: int) -> list[int]:
    """The four 16-bit blocks of a SimHash, low block first: two hashes within
    Hamming distance 3 share at least one block (pigeonhole).

    >>> [hex(b) for b in simhash_blocks(0x1111222233334444)]
    ['0x4444', '0x3333', '0x2222', '0x1111']
    """
    return [(value >> (16 * i)) & 0xFFFF for i in range(4)]
