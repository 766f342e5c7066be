"""No form of a Redis or MongoDB URL that the clients accept leaks a secret."""

from __future__ import annotations

import pytest
from scrapy.settings import Settings

from extensions.connection import RedisUnavailable, check_redis
from extensions.utils.redact import redact_url
from webcrawl.operate import client_for

SECRET = "s3cr3t"


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("redis://:s3cr3t@h:6379/0", "redis://:***@h:6379/0"),
        ("redis://alice:s3cr3t@h:6379/0", "redis://alice:***@h:6379/0"),
        ("rediss://alice:s3cr3t@h:6380/0", "rediss://alice:***@h:6380/0"),
        ("redis://h:6379/0?password=s3cr3t", "redis://h:6379/0?password=***"),
        (
            "redis://h/0?username=alice&password=s3cr3t&db=2",
            "redis://h/0?username=alice&password=***&db=2",
        ),
        (
            "rediss://h/0?ssl_password=s3cr3t&ssl_cert_reqs=none",
            "rediss://h/0?ssl_password=***&ssl_cert_reqs=none",
        ),
        (
            "unix:///run/redis.sock?db=0&password=s3cr3t",
            "unix:///run/redis.sock?db=0&password=***",
        ),
        (
            "unix://alice:s3cr3t@/run/redis.sock?db=0",
            "unix://alice:***@/run/redis.sock?db=0",
        ),
        ("redis://s3cr3t@h:6379", "redis://***@h:6379"),
        ("redis://:s3/cr3t@h:6379/0", "redis://:***@h:6379/0"),
        ("redis://:s3?cr#3t@h:6379/0", "redis://:***@h:6379/0"),
        ("redis://:s3@cr3t@h:6379/0", "redis://:***@h:6379/0"),
        (
            "mongodb://u:s3cr3t@h1:27017,h2/db?replicaSet=rs",
            "mongodb://u:***@h1:27017,h2/db?replicaSet=rs",
        ),
        (
            "mongodb+srv://u:s3cr3t@cluster.example/db",
            "mongodb+srv://u:***@cluster.example/db",
        ),
        (
            "mongodb://h/?authMechanism=MONGODB-AWS&authMechanismProperties=AWS_SESSION_TOKEN:s3cr3t",
            "mongodb://h/?authMechanism=MONGODB-AWS&authMechanismProperties=***",
        ),
        (
            "mongodb://h/?tls=true&tlsCertificateKeyFilePassword=s3cr3t",
            "mongodb://h/?tls=true&tlsCertificateKeyFilePassword=***",
        ),
        ("redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/0"),
        # The host forgotten: the password stands where a port would.
        ("redis://alice:s3cr3t", "redis://alice:***"),
        ("redis://:s3cr3t/0", "redis://:***/0"),
        ("mongodb://u:s3cr3t/db", "mongodb://u:***/db"),
        ("redis://[::1]:6379/0", "redis://[::1]:6379/0"),
    ],
)
def test_no_secret_reaches_the_log(url: str, expected: str) -> None:
    assert redact_url(url) == expected
    assert SECRET not in redact_url(url)
    assert "cr3t" not in redact_url(url)


@pytest.mark.parametrize("url", ["redis://alice:s3cr3t", "redis://:s3cr3t/0"])
def test_a_malformed_redis_url_keeps_its_password_out_of_the_error(url: str) -> None:
    """redis-py's own message quotes the "port" it could not read."""
    with pytest.raises(RedisUnavailable, match="is not a Redis URL") as info:
        check_redis(url, timeout=0.5)
    assert "cr3t" not in str(info.value)


@pytest.mark.parametrize("url", ["redis://alice:s3cr3t", "redis://:s3cr3t/0"])
def test_an_operator_command_keeps_a_malformed_urls_password_out(url: str) -> None:
    """The commands' client (``scrapy status``, ``dlq``, ``reset``, the
    status page) reads the URL before building a client: one line, no
    password, rather than redis-py's ValueError quoting it."""
    with pytest.raises(RedisUnavailable, match="is not a Redis URL") as info:
        client_for(Settings({"REDIS_URL": url}))
    assert "cr3t" not in str(info.value)
