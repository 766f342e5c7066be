"""Hide credentials in connection URLs before they reach a log line.

In ``extensions`` because both libraries log URLs (the Redis connection here,
the MongoDB store in ``pipelines``, which may import ``extensions``).
"""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit


def redact_url(url: str) -> str:
    """Return ``url`` with any password replaced by ``***``.

    >>> redact_url("redis://:s3cret@db.example:6379/0")
    'redis://:***@db.example:6379/0'
    >>> redact_url("mongodb://user:pa%40ss@h1,h2/db?replicaSet=rs")
    'mongodb://user:***@h1,h2/db?replicaSet=rs'
    >>> redact_url("redis://127.0.0.1:6379/0")
    'redis://127.0.0.1:6379/0'
    >>> redact_url("not a url")
    'not a url'
    """
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparseable url>"
    if "@" not in parts.netloc:
        return url
    userinfo, _, hostinfo = parts.netloc.rpartition("@")
    user, sep, _password = userinfo.partition(":")
    if not sep and not user:
        return url
    netloc = f"{user}:***@{hostinfo}" if sep else f"***@{hostinfo}"
    if sep and not user:
        netloc = f":***@{hostinfo}"
    return urlunsplit(parts._replace(netloc=netloc))
