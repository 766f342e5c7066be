"""scrapy-redis's connection settings, as the one Redis URL every client uses.

Settings read: ``REDIS_HOST``, ``REDIS_PORT``, ``REDIS_DB`` and
``REDIS_PARAMS`` (scrapy-redis's names), only when ``REDIS_URL`` is empty.

A project moved from scrapy-redis names its Redis with those settings rather
than a URL. When any of them is set (above ``default`` priority) and
``REDIS_URL`` is not, they are turned into a URL here, once: every client of
the worker, the start-up check, the operator commands and every log line
(password masked by :func:`extensions.utils.redact.redact_url`) then see one
name for the crawl's Redis, and the embedded Redis is not started. As in
scrapy-redis, ``REDIS_HOST``/``REDIS_PORT``/``REDIS_DB`` win over the same
keys of ``REDIS_PARAMS``, and a missing host or port is localhost:6379.

``REDIS_PARAMS`` keys understood: :data:`URL_KEYS` (they become the URL's
user, password, host, port, database, scheme and query arguments, which
redis-py reads back), and the ones scrapy-redis itself sets by default or
that only concern its own client (:data:`IGNORED_KEYS`: webcrawl builds its
own clients, which read bytes and retry by their own rule), each named in
one warning. Any other key is refused: a client option webcrawl would drop
could be one the user's Redis needs.
"""

from __future__ import annotations

import ssl
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlencode

from extensions.settings.config import SettingsError

if TYPE_CHECKING:
    from scrapy.settings import BaseSettings

# The settings this module turns into a URL (scrapy-redis's names).
PARAM_SETTINGS = ("REDIS_HOST", "REDIS_PORT", "REDIS_DB", "REDIS_PARAMS")
# REDIS_PARAMS keys that become part of the URL: the address and
# credentials, TLS (a ``rediss://`` URL), and the client options redis-py
# reads from a URL's query.
ADDRESS_KEYS = ("url", "host", "port", "db", "username", "password", "ssl")
QUERY_KEYS = (
    "socket_timeout",
    "socket_connect_timeout",
    "socket_keepalive",
    "health_check_interval",
    "retry_on_timeout",
    "client_name",
    "ssl_cert_reqs",
    "ssl_ca_certs",
    "ssl_ca_path",
    "ssl_certfile",
    "ssl_keyfile",
    "ssl_password",
    "ssl_check_hostname",
)
URL_KEYS = ADDRESS_KEYS + QUERY_KEYS
# REDIS_PARAMS keys that only concern scrapy-redis's own client, and why
# webcrawl does without them (``encoding`` and the timeouts are in
# scrapy-redis's defaults, so copied settings carry them).
IGNORED_KEYS = {
    "encoding": "webcrawl's clients read bytes (seeds must be UTF-8)",
    "encoding_errors": "webcrawl's clients read bytes (seeds must be UTF-8)",
    "decode_responses": "webcrawl's clients read bytes",
    "redis_cls": "webcrawl builds its own clients (a cluster client on a cluster)",
}
_CERT_REQS = {
    ssl.CERT_NONE: "none",
    ssl.CERT_OPTIONAL: "optional",
    ssl.CERT_REQUIRED: "required",
}


def params_given(settings: BaseSettings) -> list[str]:
    """The scrapy-redis connection settings set above ``default`` priority
    (the project, ``-s``, a spider's ``custom_settings``)."""
    return [n for n in PARAM_SETTINGS if (settings.getpriority(n) or 0) > 0]


def _query_value(key: str, value: Any) -> str:
    """A REDIS_PARAMS value as redis-py reads it back from a URL query.

    >>> _query_value("ssl_cert_reqs", ssl.CERT_NONE), _query_value("socket_timeout", 5)
    ('none', '5')
    >>> _query_value("retry_on_timeout", False)
    'false'
    """
    if key == "ssl_cert_reqs" and value in _CERT_REQS:
        return _CERT_REQS[value]
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def redis_url_from_params(settings: BaseSettings) -> tuple[str, list[str]]:
    """The Redis URL that ``REDIS_HOST``/``PORT``/``DB``/``PARAMS`` name, and
    the REDIS_PARAMS keys ignored (:data:`IGNORED_KEYS`); ``("", [])`` when
    none of them is set. Raises :class:`SettingsError` for a key it does not
    understand.

    >>> from scrapy.settings import Settings
    >>> s = Settings({"REDIS_HOST": "db.example", "REDIS_PARAMS": {
    ...     "password": "p@ss/w", "socket_timeout": 5, "encoding": "utf-8"}})
    >>> redis_url_from_params(s)
    ('redis://:p%40ss%2Fw@db.example:6379/0?socket_timeout=5', ['encoding'])
    >>> redis_url_from_params(Settings({"REDIS_PARAMS": {"ssl": True, "db": 2,
    ...     "username": "bot", "password": "pw", "ssl_cert_reqs": "none"}}))[0]
    'rediss://bot:pw@localhost:6379/2?ssl_cert_reqs=none'
    >>> redis_url_from_params(Settings({"REDIS_PORT": 7000, "REDIS_HOST": "::1"}))
    ('redis://[::1]:7000/0', [])
    >>> redis_url_from_params(Settings({"REDIS_PARAMS": {"retry": 3}}))
    Traceback (most recent call last):
    ...
    extensions...SettingsError: REDIS_PARAMS key 'retry' is not understood ...
    >>> redis_url_from_params(Settings())
    ('', [])
    """
    if not params_given(settings):
        return "", []
    params = dict(settings.getdict("REDIS_PARAMS"))
    unknown = sorted(set(params) - set(URL_KEYS) - set(IGNORED_KEYS))
    if unknown:
        raise SettingsError(
            f"REDIS_PARAMS key {unknown[0]!r} is not understood by webcrawl: use "
            f"{', '.join(URL_KEYS)} (or REDIS_URL)"
        )
    ignored = sorted(k for k in params if k in IGNORED_KEYS)
    if params.get("url"):
        # scrapy-redis's client takes its URL from here too.
        url = str(params["url"])
        extra = {k: v for k, v in params.items() if k in QUERY_KEYS}
        if extra:
            url += ("&" if "?" in url else "?") + urlencode(
                {k: _query_value(k, v) for k, v in extra.items()}
            )
        return url, ignored
    for setting, key in zip(PARAM_SETTINGS[:3], ("host", "port", "db"), strict=True):
        if (settings.getpriority(setting) or 0) > 0:
            params[key] = settings.get(setting)
    host = str(params.get("host") or "localhost")
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"  # an IPv6 address
    try:
        port = int(params.get("port") or 6379)
        db = int(params.get("db") or 0)
    except (TypeError, ValueError):
        raise SettingsError(
            f"REDIS_PORT/REDIS_DB (or REDIS_PARAMS port/db) is not a number: "
            f"{params.get('port')!r}/{params.get('db')!r}"
        ) from None
    userinfo = ""
    if params.get("username") or params.get("password"):
        user = quote(str(params.get("username") or ""), safe="")
        userinfo = f"{user}:{quote(str(params.get('password') or ''), safe='')}@"
    scheme = "rediss" if params.get("ssl") else "redis"
    query = urlencode(
        {k: _query_value(k, params[k]) for k in QUERY_KEYS if params.get(k) is not None}
    )
    url = f"{scheme}://{userinfo}{host}:{port}/{db}"
    return (f"{url}?{query}" if query else url), ignored
