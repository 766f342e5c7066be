"""A JSON serializer for scrapy-redis's ``SCHEDULER_SERIALIZER``, as its
users write one: the ``json`` module alone cannot hold a request's bytes
(its body, header names and values), so they are tagged and kept as base64.
``tests/test_migration.py`` has scrapy-redis write its queue with it."""

from __future__ import annotations

import base64
import json
from typing import Any


def _plain(value: Any) -> Any:
    if isinstance(value, bytes):
        return {"__bytes__": base64.b64encode(value).decode()}
    if isinstance(value, dict):
        return {
            (k.decode("latin-1") if isinstance(k, bytes) else k): _plain(v)
            for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def _hook(obj: dict[str, Any]) -> Any:
    if set(obj) == {"__bytes__"}:
        return base64.b64decode(obj["__bytes__"])
    return obj


def dumps(obj: Any) -> str:
    return json.dumps(_plain(obj))


def loads(data: str | bytes) -> Any:
    return json.loads(data, object_hook=_hook)
