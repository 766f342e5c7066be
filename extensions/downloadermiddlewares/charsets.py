"""Hostile charset labels: a response whose label names no text encoding.

``Content-Type: text/html; charset=base64`` or ``<meta charset=rot13>`` name
Python codecs that are not text encodings (bytes-to-bytes or str-to-str), and
``charset=undefined`` one that refuses every byte, so Scrapy's
``TextResponse.text`` raises ``LookupError`` (``UnicodeError``) and every component
that reads the text (the meta-refresh middleware, the spider's parse) fails:
the page used to be recorded as status 0, its body and links discarded.
:class:`CharsetFallbackMiddleware` gives such a response a text encoding
instead (RFC 9110 lets a recipient ignore a charset it does not support): the
byte-order mark, else the ``<meta>`` label if that one is a text encoding,
else UTF-8 (decoded with replacement characters, as every ``.text`` is).

Order 585 (:data:`extensions.downloadermiddlewares.DOWNLOADER_MIDDLEWARES`): its
``process_response`` runs
after HttpCompressionMiddleware (590) has decoded the body and before
MetaRefreshMiddleware (580) reads the text.

Stats: ``charset/fallback``. The module reads no settings.
"""

from __future__ import annotations

import codecs
from typing import TYPE_CHECKING

from scrapy.http import TextResponse
from w3lib.encoding import html_body_declared_encoding, read_bom, resolve_encoding

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler
    from scrapy.http import Response
FALLBACK_ENCODING = "utf-8"


def is_text_encoding(label: str | None) -> bool:
    """Whether ``label`` names a codec that decodes bytes to text.

    >>> is_text_encoding("windows-1252"), is_text_encoding("utf8")
    (True, True)
    >>> is_text_encoding("base64"), is_text_encoding("rot13")
    (False, False)
    >>> is_text_encoding("no-such-charset"), is_text_encoding(None)
    (False, False)
    >>> is_text_encoding("undefined")  # a text codec that refuses every byte
    False
    """
    encoding = resolve_encoding(label) if label else None
    if encoding is None:
        return False
    try:
        codec = codecs.lookup(encoding)
        if not codec._is_text_encoding:
            return False
        # Python's "undefined" codec is a text codec that raises on any
        # input, even none: so would any codec that cannot decode at all.
        codec.decode(b"")
    except (LookupError, UnicodeError):
        return False
    return True


def fallback_encoding(body: bytes) -> str:
    """The text encoding of a body whose label names none (see module doc).

    >>> fallback_encoding(b'<meta charset="rot13"><p>hi')
    'utf-8'
    >>> fallback_encoding(b'<meta charset="shift_jis"><p>hi')
    'cp932'
    >>> fallback_encoding(b"\\xff\\xfeh\\x00i\\x00")
    'utf-16-le'
    """
    bom, _ = read_bom(body)
    if bom:
        return bom
    meta = html_body_declared_encoding(body)
    if meta and is_text_encoding(meta):
        return meta
    return FALLBACK_ENCODING


class CharsetFallbackMiddleware:
    """Give a text response whose charset label is no text encoding one that
    is (see module doc), so it is parsed, stored with its status and its
    links followed."""

    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> CharsetFallbackMiddleware:
        return cls(crawler)

    def process_response(self, request: Request, response: Response) -> Response:
        if not isinstance(response, TextResponse) or is_text_encoding(
            response.encoding
        ):
            return response
        assert self.crawler.stats is not None
        self.crawler.stats.inc_value("charset/fallback")
        return response.replace(encoding=fallback_encoding(response.body))
