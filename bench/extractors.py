"""Which main-text extractor, by measurement: ``python -m bench.extractors``.

Runs each candidate over three corpora and prints, per corpus and extractor,
pages per CPU-second of one thread and the agreement of its word bag with two
references:

* *structure*: the page's content element by the way its generator lays it
  out, a reference that needs no judgement: the sandbox's ``<article>``
  (:meth:`sandbox.site.Site.render_html`), Sphinx's ``<div role="main">`` in
  python3-doc, the DocBook ``<body>`` minus its ``navheader`` and
  ``navfooter`` in postgresql-doc;
* *trafilatura-precision*: ``trafilatura.extract(favor_precision=True)``.

Agreement is the F1 of the two multisets of lower-cased words (``\\w+``),
averaged over the pages where the reference has words. Candidates:

* ``lxml``: webcrawl's extractor before this evaluation (kept here, below, as
  the baseline: lxml tree, boilerplate pruning by tag, role, class words and
  link density, main element by ``<main>``/``<article>``/role);
* ``resiliparse``: ``resiliparse.extract.html2text.extract_plain_text`` with
  ``main_content=True`` over an ``HTMLTree`` (lexbor), configured as
  :func:`pipelines.processing.main_text` uses it (no list bullets, no alt
  texts, the page's own ``body > header/footer/nav/aside`` skipped);
* ``resiliparse-defaults``: the same with resiliparse's default options;
* ``resiliparse-all``: the same with ``main_content=False`` (every visible
  text);
* ``trafilatura``: ``trafilatura.extract`` in its default (balanced) mode;
* ``webcrawl extract()``: :func:`pipelines.processing.extract` as a whole
  (decoding, one parse, metadata, links and the main text).

Corpora: ``--pages`` pages of a default sandbox web (rendered in process), and
the first ``--pages`` HTML files (sorted by path) of the Debian packages
python3-doc (``/usr/share/doc/python3/html``) and postgresql-doc
(``/usr/share/doc/postgresql-doc-*/html``); a corpus that is not installed is
skipped with a line saying so. It also compares resiliparse's encoding
detection with :func:`pipelines.processing.decode_html` (w3lib's sniffing).

trafilatura is a development dependency (requirements-dev.txt), used here
only.
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import time
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING

import lxml.etree

from bench.pipeline import DOCS, docs_corpus, sandbox_corpus
from pipelines.processing import decode_html, extract, main_text

if TYPE_CHECKING:
    from collections.abc import Callable

    from lxml.etree import _Element
    from resiliparse.parse.html import HTMLTree

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


def lxml_text(body: bytes) -> str:
    """The baseline: webcrawl's lxml extractor (decode, parse, prune)."""
    _, text = decode_html(body)
    root = _parse(text)
    return _main_text(root) if root is not None else ""


def _tree(body: bytes) -> HTMLTree:
    from resiliparse.parse.encoding import detect_encoding
    from resiliparse.parse.html import HTMLTree

    return HTMLTree.parse_from_bytes(body, detect_encoding(body) or "utf-8")


def resiliparse_text(body: bytes) -> str:
    """resiliparse as :func:`pipelines.processing.main_text` configures it."""
    return main_text(_tree(body))


def resiliparse_defaults(body: bytes) -> str:
    from resiliparse.extract.html2text import extract_plain_text

    return str(extract_plain_text(_tree(body), main_content=True))


def resiliparse_all(body: bytes) -> str:
    from resiliparse.extract.html2text import extract_plain_text

    return str(extract_plain_text(_tree(body), main_content=False))


def webcrawl_text(body: bytes) -> str:
    """What the pipeline stores today (:func:`pipelines.processing.extract`)."""
    return extract(body, "http://b.test/").text


def trafilatura_text(body: bytes, precision: bool = False) -> str:
    import trafilatura

    return trafilatura.extract(body, favor_precision=precision) or ""


def trafilatura_precision(body: bytes) -> str:
    return trafilatura_text(body, precision=True)


_WORDS = re.compile(r"\w+")


def words(text: str) -> Counter[str]:
    return Counter(_WORDS.findall(text.lower()))


def f1(candidate: Counter[str], reference: Counter[str]) -> float:
    """F1 of two word multisets.

    >>> round(f1(Counter("a b c".split()), Counter("a b d".split())), 3)
    0.667
    """
    common = sum((candidate & reference).values())
    if not common:
        return 0.0
    precision = common / sum(candidate.values())
    recall = common / sum(reference.values())
    return 2 * precision * recall / (precision + recall)


def _structure(xpath: str, drop: str = "") -> Callable[[bytes], str]:
    def reference(body: bytes) -> str:
        _, text = decode_html(body)
        root = _parse(text)
        if root is None:
            return ""
        found = root.xpath(xpath)
        if not found:
            return ""
        el = found[0]
        for junk in el.xpath(drop) if drop else []:
            junk.getparent().remove(junk)
        return " ".join(el.itertext())

    return reference


CANDIDATES: dict[str, Callable[[bytes], str]] = {
    "lxml": lxml_text,
    "resiliparse": resiliparse_text,
    "resiliparse-defaults": resiliparse_defaults,
    "resiliparse-all": resiliparse_all,
    "trafilatura": trafilatura_text,
    "trafilatura-precision": trafilatura_precision,
    "webcrawl extract()": webcrawl_text,
}


def corpora(pages: int) -> list[tuple[str, list[bytes], Callable[[bytes], str]]]:
    out = [("sandbox", sandbox_corpus(pages), _structure("//article"))]
    name, docs = docs_corpus(pages)
    if name.startswith("python3-doc"):
        out.append(("python3-doc", docs, _structure("//*[@role='main']")))
    else:
        print(f"skipped python3-doc: not installed at {DOCS}")
    pg = sorted(Path("/usr/share/doc").glob("postgresql-doc-*/html"))
    if pg:
        files = sorted(pg[-1].glob("*.html"))[:pages]
        out.append(
            (
                "postgresql-doc",
                [f.read_bytes() for f in files],
                _structure(
                    "//body",
                    ".//div[@class='navheader' or @class='navfooter']",
                ),
            )
        )
    else:
        print("skipped postgresql-doc: not installed under /usr/share/doc")
    return out


def timed(fn: Callable[[bytes], str], bodies: list[bytes]) -> tuple[list[str], float]:
    for body in bodies[:5]:  # warm-up: imports, caches
        fn(body)
    # Thread CPU time: on a shared machine it measures the work, not the
    # neighbours.
    t = time.thread_time()
    texts = [fn(b) for b in bodies]
    return texts, len(bodies) / (time.thread_time() - t)


def encoding_check(bodies: list[bytes]) -> tuple[float, float, float]:
    """Share of pages that resiliparse's detect_encoding decodes to the same
    text as w3lib's sniffing (:func:`~pipelines.processing.decode_html`), and
    the pages/s of each (detection plus decoding)."""
    from resiliparse.parse.encoding import bytes_to_str, detect_encoding

    def theirs(body: bytes) -> str:
        return str(bytes_to_str(body, detect_encoding(body) or "utf-8"))

    ours, rate_ours = timed(lambda b: decode_html(b)[1], bodies)
    other, rate_theirs = timed(theirs, bodies)
    same = sum(a == b for a, b in zip(ours, other, strict=True))
    return same / len(bodies), rate_ours, rate_theirs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="main-text extractor evaluation")
    parser.add_argument("--pages", type=int, default=100)
    args = parser.parse_args(argv)
    print(
        "| corpus | extractor | pages/s | F1 vs structure "
        "| F1 vs trafilatura-precision |"
    )
    print("|---|---|---|---|---|")
    for name, bodies, structure in corpora(args.pages):
        refs = [words(structure(b)) for b in bodies]
        texts = {label: timed(fn, bodies) for label, fn in CANDIDATES.items()}
        precise = [words(t) for t in texts["trafilatura-precision"][0]]
        for label, (out, rate) in texts.items():
            bags = [words(t) for t in out]
            scores = []
            for ref_bags in (refs, precise):
                pairs = [(c, r) for c, r in zip(bags, ref_bags, strict=True) if r]
                mean = statistics.mean(f1(c, r) for c, r in pairs) if pairs else 0.0
                scores.append(f"{mean:.3f} ({len(pairs)})")
            print(f"| {name} | {label} | {rate:.1f} | {scores[0]} | {scores[1]} |")
        same, ours, theirs = encoding_check(bodies)
        print(
            f"| {name} | encoding: resiliparse agrees with w3lib on {same:.0%} | "
            f"w3lib {ours:.0f} pages/s, resiliparse {theirs:.0f} pages/s | | |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
