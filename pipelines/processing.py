"""Page processing: decoding, extraction, robots directives and fingerprints.

Pure functions, no I/O and no settings: the storage pipeline
(:mod:`pipelines.storage`) calls :func:`extract` in a thread for every page.

* Decoding (:func:`decode_html`) follows the HTML encoding sniffing order that
  w3lib implements: a byte-order mark, then the HTTP ``Content-Type`` charset,
  then ``<meta charset>``, then detection (charset-normalizer); undecodable
  bytes become U+FFFD, so no byte sequence raises.
* Extraction (:func:`extract`) is a lean lxml extractor: title, meta
  description, canonical link, language, outlinks with anchor text and
  ``rel=nofollow``, meta robots and ``X-Robots-Tag``, and the main text with
  boilerplate (navigation, headers, footers, asides, forms, link lists and
  elements whose class or id says ``nav``, ``menu``, ``cookie``...) removed.
  ``bench/pipeline.py`` compares it with trafilatura and resiliparse.
* Fingerprints: :func:`content_hash` (SHA-256 of the normalized text) for
  exact duplicates and :func:`simhash` (64 bits over word 3-shingles) for near
  duplicates, compared by :func:`hamming`.
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING
from urllib.parse import urljoin, urlsplit

import lxml.etree
import mmh3
from w3lib.encoding import html_to_unicode, resolve_encoding
from w3lib.url import safe_url_string

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence

    from lxml.etree import _Element

# Elements whose text is never page content.
_DROP_TAGS = frozenset(
    {
        "script",
        "style",
        "noscript",
        "template",
        "svg",
        "math",
        "iframe",
        "object",
        "embed",
        "canvas",
        "select",
        "button",
        "head",
    }
)
# Elements that are boilerplate by their role in a page layout.
_BOILERPLATE_TAGS = frozenset({"nav", "header", "footer", "aside", "form", "dialog"})
_BOILERPLATE_ROLES = frozenset(
    {"navigation", "banner", "contentinfo", "complementary", "search", "menu"}
)
# class/id words that mark boilerplate blocks (matched as whole words).
_BOILERPLATE_RE = re.compile(
    r"(?:^|[\s_-])(?:nav|navbar|navigation|menu|menubar|footer|header|sidebar|"
    r"breadcrumbs?|cookies?|consent|banner|advert|ads|ad|sponsor|promo|share|"
    r"social|related|comments?|widget|popup|modal|newsletter|subscribe|"
    r"pagination|pager|skip|toc)(?:$|[\s_-])",
    re.IGNORECASE,
)
_MAIN_XPATH = (
    "//main | //article | //*[@role='main'] | //*[@id='content'] | "
    "//*[@id='main'] | //*[@itemprop='articleBody']"
)
# Block elements: their text starts a new line.
_BLOCK_TAGS = frozenset(
    {
        "p",
        "div",
        "section",
        "article",
        "main",
        "h1",
        "h2",
        "h3",
        "h4",
        "h5",
        "h6",
        "li",
        "ul",
        "ol",
        "dl",
        "dt",
        "dd",
        "pre",
        "blockquote",
        "table",
        "tr",
        "td",
        "th",
        "br",
        "hr",
        "figure",
        "figcaption",
        "address",
        "body",
    }
)
# A container whose text is mostly anchor text is a link list (menus, tag
# clouds, "related" boxes); 0.6 keeps prose paragraphs that cite many links.
_LINK_DENSITY_MAX = 0.6
_LINK_LIST_TAGS = frozenset({"ul", "ol", "div", "section", "table", "p", "dl"})
_WS_RE = re.compile(r"\s+")
# Marks block boundaries in the serialized text (a private-use character).
_BLOCK_MARK = "\ue000"
# Characters XML (and so lxml) refuses in text.
_CONTROL_RE = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")
_WORD_RE = re.compile(r"\w+", re.UNICODE)
_SHINGLE = 3
_MASK64 = (1 << 64) - 1


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
    """
    if (
        declared
        and (not content_type or "charset" not in content_type.lower())
        and resolve_encoding(declared)
    ):
        content_type = f"text/html; charset={declared}"
    encoding, text = html_to_unicode(
        content_type, body, auto_detect_fun=_detect_encoding
    )
    return encoding, text


def _robots_tokens(values: Iterable[str]) -> set[str]:
    """Directives of meta robots / X-Robots-Tag values that apply to every
    crawler (``googlebot: noindex`` names another crawler and is ignored).

    >>> sorted(_robots_tokens(["NoIndex, follow", "otherbot: nofollow"]))
    ['follow', 'noindex']
    >>> sorted(_robots_tokens(["none"]))
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


def _clean(text: str | None) -> str:
    return _WS_RE.sub(" ", text or "").strip()


def _parse(text: str) -> _Element | None:
    parser = lxml.etree.HTMLParser(
        encoding="utf-8", remove_comments=True, remove_pis=True, recover=True
    )
    text = _CONTROL_RE.sub("", text.replace(_BLOCK_MARK, " "))
    data = text.encode("utf-8", "replace")
    try:
        root = lxml.etree.fromstring(data, parser) if data.strip() else None
    except (lxml.etree.ParserError, ValueError):
        return None
    if root is None or not isinstance(root.tag, str):
        return None
    return root


def _is_boilerplate(el: _Element) -> bool:
    if el.tag in _BOILERPLATE_TAGS:
        return True
    attrib = el.attrib
    if not attrib:
        return False
    if (attrib.get("role") or "").lower() in _BOILERPLATE_ROLES:
        return True
    if "hidden" in attrib or attrib.get("aria-hidden") == "true":
        return True
    marker = f"{attrib.get('class') or ''} {attrib.get('id') or ''}"
    return bool(marker.strip()) and _BOILERPLATE_RE.search(marker) is not None


def _text_of(el: _Element) -> str:
    return _clean("".join(el.itertext()))


def _remove_keep_tail(el: _Element) -> None:
    parent = el.getparent()
    if parent is None:
        return
    tail = el.tail
    prev = el.getprevious()
    parent.remove(el)
    if tail:
        if prev is not None:
            prev.tail = (prev.tail or "") + tail
        else:
            parent.text = (parent.text or "") + tail


def _prune(el: _Element) -> tuple[int, int, bool]:
    """Remove boilerplate below ``el`` in one pass; return the text length
    and anchor-text length left under it, and whether ``el`` itself is a link
    list its parent should remove."""
    total = len((el.text or "").strip())
    linked = 0
    for child in list(el):
        if isinstance(child.tag, str):
            if child.tag in _DROP_TAGS or _is_boilerplate(child):
                tail = len((child.tail or "").strip())
                _remove_keep_tail(child)
                total += tail
                continue
            sub_total, sub_linked, link_list = _prune(child)
            if link_list:
                tail = len((child.tail or "").strip())
                _remove_keep_tail(child)
                total += tail
                continue
            total += sub_total
            linked += sub_linked
        total += len((child.tail or "").strip())
    if el.tag == "a":
        linked = total
    link_list = (
        el.tag in _LINK_LIST_TAGS and total > 0 and linked / total > _LINK_DENSITY_MAX
    )
    return total, linked, link_list


def _main_text(root: _Element) -> str:
    body = root.find("body")
    scope = body if body is not None else root
    # Prefer the page's declared main content when it holds real text.
    candidates = [
        el for el in scope.xpath(_MAIN_XPATH) if isinstance(el, lxml.etree._Element)
    ]
    if candidates:
        best = max(candidates, key=lambda el: len(_text_of(el)))
        if len(_text_of(best)) >= 0.25 * len(_text_of(scope)):
            scope = best
    _prune(scope)
    # Mark block boundaries with newlines, then let libxml2 serialize the text.
    for el in scope.iter(*_BLOCK_TAGS):
        el.text = _BLOCK_MARK + (el.text or "")
        el.tail = _BLOCK_MARK + (el.tail or "")
    text = lxml.etree.tostring(
        scope, method="text", encoding="unicode", with_tail=False
    )
    cleaned = (_clean(line) for line in text.split(_BLOCK_MARK))
    return "\n".join(line for line in cleaned if line)


def _absolute(base: str, href: str) -> str | None:
    href = href.strip()
    if not href or href.startswith(("#", "javascript:", "mailto:", "tel:", "data:")):
        return None
    try:
        url = safe_url_string(urljoin(base, href))
    except ValueError:
        return None
    if urlsplit(url).scheme not in {"http", "https"}:
        return None
    return url.split("#", 1)[0]


def extract(
    body: bytes,
    url: str,
    headers: Mapping[str, Sequence[str | bytes]] | None = None,
    encoding: str | None = None,
) -> Extracted:
    """Extract what the pipeline stores and the crawler follows from a page.

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
    header_robots = _robots_tokens(header_values(headers, "X-Robots-Tag"))
    out.noindex = "noindex" in header_robots
    out.nofollow = "nofollow" in header_robots
    root = _parse(text)
    if root is None:
        out.text = _clean(text.replace("\x00", ""))
        return out
    base = url
    for el in root.iter("base"):
        if el.get("href"):
            base = urljoin(url, el.get("href", ""))
            break
    title = root.find(".//title")
    if title is not None:
        out.title = _text_of(title)
    meta_robots: list[str] = []
    for meta in root.iter("meta"):
        name = (meta.get("name") or meta.get("property") or "").lower()
        content = meta.get("content") or ""
        if name == "description" and not out.description:
            out.description = _clean(content)
        elif name in {"robots", "*"}:
            meta_robots.append(content)
        elif (
            meta.get("http-equiv") or ""
        ).lower() == "content-language" and not out.language:
            out.language = _clean(content).split(",")[0] or None
    tokens = _robots_tokens(meta_robots)
    out.noindex = out.noindex or "noindex" in tokens
    out.nofollow = out.nofollow or "nofollow" in tokens
    for link in root.iter("link"):
        rels = (link.get("rel") or "").lower().split()
        if "canonical" in rels and link.get("href"):
            out.canonical = _absolute(base, link.get("href", ""))
            break
    lang = root.get("lang") or root.get("{http://www.w3.org/XML/1998/namespace}lang")
    if lang:
        out.language = _clean(lang) or out.language
    for a in root.iter("a", "area"):
        href = a.get("href")
        if href is None:
            continue
        absolute = _absolute(base, href)
        if absolute is None:
            continue
        rel = (a.get("rel") or "").lower().split()
        out.links.append(Link(absolute, _text_of(a), "nofollow" in rel))
    out.text = _main_text(root)
    return out


def normalize_text(text: str) -> str:
    """Lower-cased words joined by single spaces: what the fingerprints see.

    >>> normalize_text("  Hello,\\n  WORLD!  ")
    'hello world'
    """
    return " ".join(_WORD_RE.findall(text.lower()))


def content_hash(text: str) -> str:
    """SHA-256 (hex) of the normalized text.

    >>> content_hash("Hello  world") == content_hash("hello, WORLD")
    True
    """
    return hashlib.sha256(normalize_text(text).encode("utf-8")).hexdigest()


def shingles(words: Sequence[str], size: int = _SHINGLE) -> Counter[str]:
    """Word shingles with their counts (the whole text when it is shorter).

    >>> sorted(shingles("a b c d".split()))
    ['a b c', 'b c d']
    """
    if len(words) < size:
        return Counter([" ".join(words)]) if words else Counter()
    return Counter(" ".join(words[i : i + size]) for i in range(len(words) - size + 1))


# _BIT_TABLES[b] maps a byte to 1 when its bit b is set, else to 0.
_BIT_TABLES = [bytes((v >> b) & 1 for v in range(256)) for b in range(8)]


def simhash(text: str) -> int:
    """64-bit SimHash of the text's word 3-shingles (MurmurHash3 x64).

    Near-identical texts differ in few bits; an empty text hashes to 0.

    >>> words = [f"w{i}" for i in range(3000)]
    >>> a = simhash(" ".join(words))
    >>> b = simhash(" ".join(words[:1500] + ["changed"] + words[1501:]))
    >>> hamming(a, a), hamming(a, b) <= 3, simhash("")
    (0, True, 0)
    """
    grams = shingles(normalize_text(text).split())
    if not grams:
        return 0
    # Lay the hashes out as bytes (a shingle seen w times is repeated w
    # times), then count, for each of the 64 bits, how many hashes have it
    # set: one C-speed translate + count per bit over a byte column, instead
    # of a Python loop over 64 bits per shingle.
    data = b"".join(
        mmh3.hash64(gram, signed=False)[0].to_bytes(8, "little") * weight
        for gram, weight in grams.items()
    )
    total = len(data) // 8
    result = 0
    for i in range(8):
        column = data[i::8]
        for bit in range(8):
            # A bit is set when more than half of the weight votes for it.
            if 2 * column.translate(_BIT_TABLES[bit]).count(1) > total:
                result |= 1 << (8 * i + bit)
    return result & _MASK64


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
