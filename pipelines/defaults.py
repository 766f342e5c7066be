"""The one home of the ``pipelines`` package's settings and their defaults.

One comment line per setting (the README's settings table is generated from
them by :mod:`webcrawl.docs`); type and allowed range beside each default
(see :mod:`extensions.settings.config`). The webcrawl add-on installs them at
``default`` priority and refuses values outside their range at start; used
without the add-on: ``extensions.settings.config.install(settings, pipelines.defaults)``.
"""

from __future__ import annotations

from typing import Annotated

from extensions.settings.config import Range

# --- Page processing and storage (pipelines.storage, pipelines.stores) -------
# Pages written to the page store per batch.
PIPELINE_BATCH_SIZE: Annotated[int, Range(1, 10_000)] = 50
# Seconds a buffered page waits at most before its batch is written.
PIPELINE_FLUSH_INTERVAL: Annotated[float, Range(above=0)] = 5.0
# Pages held at most (buffered + being written) before the engine is paused.
PIPELINE_MAX_BUFFER: Annotated[int, Range(1)] = 200
# zlib level of the stored HTML (0-9).
PIPELINE_ZLIB_LEVEL: Annotated[int, Range(0, 9)] = 6
# Seconds before the first retry of a failed batch write (doubles up to the cap).
PIPELINE_RETRY_INITIAL: Annotated[float, Range(above=0)] = 0.5
# Cap of the wait between retries of a failed batch write.
PIPELINE_RETRY_MAX: Annotated[float, Range(above=0)] = 30.0
# Seconds close waits for buffered pages to be written before giving up on them.
PIPELINE_CLOSE_TIMEOUT: Annotated[float, Range(0)] = 60.0
# Page records passed on to feeds (-o, FEEDS) also carry the decoded body as "body".
PIPELINE_ITEM_BODY = False
# Dotted path of the page store class (empty: MongoStore if MONGO_URI, else SQLiteStore).
PAGE_STORE = ""
# MongoDB URI of the page store (empty: the SQLite store under WEBCRAWL_HOME).
MONGO_URI = ""
# MongoDB database of the page store.
MONGO_DATABASE = "webcrawl"
# Milliseconds pymongo waits for a server before a write counts as failed.
MONGO_TIMEOUT_MS: Annotated[int, Range(1)] = 5000
# Path of the SQLite page store (empty: WEBCRAWL_HOME/pages.sqlite3).
SQLITE_PATH = ""
# Newest pages whose duplicate index Redis caches (about 0.9 KB each), older
# ones are found in the page store: keep it above the pages a fleet checks in
# PIPELINE_FLUSH_INTERVAL (their batches are not written yet).
NEARDUP_CACHE_PAGES: Annotated[int, Range(1)] = 2048
# Check pages against the fleet's exact and near-duplicate index (store and Redis).
NEARDUP_ENABLED = True
# Largest SimHash Hamming distance that counts as a near-duplicate.
NEARDUP_MAX_DISTANCE: Annotated[int, Range(0, 64)] = 3
# Pages with fewer words get no near-duplicate check (SimHash is noisy on them).
NEARDUP_MIN_WORDS: Annotated[int, Range(0)] = 20
# Members read at most from one SimHash band set per check.
NEARDUP_MAX_CANDIDATES: Annotated[int, Range(1)] = 64
# Visits kept in a page's history (fetched at, status, content hash, changed); 0: none.
PAGE_HISTORY_MAX: Annotated[int, Range(0, 10_000)] = 50
