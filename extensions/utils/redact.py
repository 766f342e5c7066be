"""Hide credentials in connection URLs before they reach a log line.

In ``extensions`` because both libraries log URLs (the Redis connection here,
the MongoDB store in ``pipelines``, which may import ``extensions``).

Every form redis-py and pymongo accept carries its secret in one of two
places: the userinfo before the host (``redis://:pw@h``, ``redis://u:pw@h``,
``rediss://``, ``unix://u:pw@/path``, ``mongodb://u:pw@h1,h2``,
``mongodb+srv://u:pw@cluster``) or a query argument (``?password=``,
``ssl_password=``, ``tlsCertificateKeyFilePassword=``,
``authMechanismProperties=AWS_SESSION_TOKEN:...``). The userinfo is cut at
the *last* ``@`` of the URL without parsing it: a password with an unescaped
``/``, ``?``, ``#`` or ``@`` would make a URL parser take part of it for the
host or path and log it.
"""

from __future__ import annotations

import re

# Query arguments whose value is a secret: any name with "password",
# "secret" or "token" in it, and pymongo's authMechanismProperties (it may
# hold an AWS session token).
_SECRET_QUERY = re.compile(
    r"(?i)([?&;](?:[^=&;#]*(?:password|passwd|secret|token)[^=&;#]*"
    r"|authmechanismproperties)=)[^&;#]*"
)


def redact_url(url: str) -> str:
    """Return ``url`` with every password replaced by ``***``.

    >>> redact_url("redis://:s3cret@db.example:6379/0")
    'redis://:***@db.example:6379/0'
    >>> redact_url("mongodb://user:pa%40ss@h1,h2/db?replicaSet=rs")
    'mongodb://user:***@h1,h2/db?replicaSet=rs'
    >>> redact_url("redis://127.0.0.1:6379/0")
    'redis://127.0.0.1:6379/0'
    >>> redact_url("redis://db.example:6379/0?password=s3cret&db=1")
    'redis://db.example:6379/0?password=***&db=1'
    >>> redact_url("redis://:pa/ss?w#rd@db.example/0")
    'redis://:***@db.example/0'
    >>> redact_url("redis://alice:s3cret/0"), redact_url("redis://[::1]:6379/0")
    ('redis://alice:***/0', 'redis://[::1]:6379/0')
    >>> redact_url("not a url")
    'not a url'
    """
    scheme, sep, rest = url.partition("://")
    if not sep:
        return _SECRET_QUERY.sub(r"\1***", url)
    userinfo, at, tail = rest.rpartition("@")
    if at:
        user, colon, _password = userinfo.partition(":")
        # A lone userinfo may be a token (``redis://TOKEN@host``): hide it too.
        rest = f"{user}:***@{tail}" if colon else f"***@{tail}"
    else:
        # No "@": ``redis://user:pw`` with the host forgotten parses as a host
        # and a port, and the client's error quotes that "port". A port is
        # digits; anything else after the last ":" may be a password.
        netloc = re.split(r"[/?#]", rest, maxsplit=1)[0]
        host, colon, port = netloc.rpartition(":")
        if colon and port and not port.isdigit() and not netloc.endswith("]"):
            rest = f"{host}:***{rest[len(netloc) :]}"
    return scheme + "://" + _SECRET_QUERY.sub(r"\1***", rest)
