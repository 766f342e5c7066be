"""Settings of the webcrawl application itself: the ``web`` spider and its seeds.

The library packages keep their own (:mod:`extensions.settings.defaults`,
:mod:`pipelines.defaults`); the add-on installs all three at ``default``
priority and checks every value against the type and range declared beside
its default (:mod:`extensions.settings.config`) before the crawl starts. One comment
line per setting: the README's settings table is generated from them.

Scrapy settings webcrawl also honours: ``DOWNLOAD_DELAY`` (enforced fleet-wide),
``USER_AGENT``, ``DEPTH_LIMIT``, ``REQUEST_FINGERPRINTER_CLASS``.
"""

from __future__ import annotations

from typing import Annotated

import scrapy.linkextractors

from extensions.settings.config import Range, Spec

# Documents among Scrapy's IGNORED_EXTENSIONS that are fetched all the same
# (stored as metadata records: content type, size, hash; no text or links).
_fetched_documents = frozenset(
    {"pdf", "doc", "docx", "odt", "ods", "odp", "xls", "xlsx", "ppt", "pptx"}
)

# --- The web spider (webcrawl.spiders.web) ----------------------------------
# Domains the crawl stays in (empty: the seeds' hosts, see WEB_SCOPE_SEED_HOSTS).
WEB_ALLOWED_DOMAINS: list[str] = []
# Restrict an empty WEB_ALLOWED_DOMAINS to the hosts of the seeds.
WEB_SCOPE_SEED_HOSTS = False
# Link extensions never requested (Scrapy's IGNORED_EXTENSIONS less documents such as pdf), each skip counted in links/skipped/<ext>.
LINK_SKIP_EXTENSIONS: list[str] = [
    ext
    for ext in scrapy.linkextractors.IGNORED_EXTENSIONS
    if ext not in _fetched_documents
]
# HTML bodies this large (bytes) or larger are parsed in a child process, off the reactor (0: never).
PARSE_OFFLOAD_BYTES: Annotated[int, Range(0)] = 128 * 1024
# This worker's name, stored in the worker field of every page it fetches (empty: none).
WEBCRAWL_WORKER_ID = ""

# --- Start-up checks (webcrawl.addon) -----------------------------------------
# Refuse to start (exit 2) when a -s / scrapyd setting is unknown and close to a known name, instead of warning.
SETTINGS_STRICT = False

# Scrapy settings the spider honours, with the values they allow.
scrapy_rules = [Spec("DEPTH_LIMIT", 0, int, Range(0))]
