"""The Redis scheduler extension: webcrawl's distributed Scrapy components.

Shaped as Scrapy's own tree is: :mod:`extensions.core` (the scheduler, the
frontier and its structures, the seed list, the Bloom filter),
:mod:`extensions.dupefilters`, :mod:`extensions.downloadermiddlewares`,
:mod:`extensions.spidermiddlewares`, :mod:`extensions.extensions`, with
:mod:`extensions.connection` (Redis clients, scripts, locks, the embedded
server), :mod:`extensions.settings` and :mod:`extensions.utils` (pure
helpers) below them; :mod:`extensions.keys`, :mod:`extensions.meta` and
:mod:`extensions.signals` are the package's vocabulary.

The flat module paths of before (``extensions.scheduler``,
``extensions.robots``, ...) still import for one release, with a
``DeprecationWarning`` naming the new path (:data:`MOVED`), so a setting
that names a component by its old dotted path keeps working.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import types
import warnings
from typing import Any

# Old module path -> new module path (deprecated in the release after 0.1).
MOVED: dict[str, str] = {
    "extensions.addresses": "extensions.downloadermiddlewares.ssrf",
    "extensions.backoff": "extensions.downloadermiddlewares.backoff",
    "extensions.bloom": "extensions.core.bloom",
    "extensions.canonical": "extensions.utils.url",
    "extensions.charsets": "extensions.downloadermiddlewares.charsets",
    "extensions.config": "extensions.settings.config",
    "extensions.defaults": "extensions.settings.defaults",
    "extensions.dlq": "extensions.core.frontier.deadletters",
    "extensions.dupefilter": "extensions.dupefilters",
    "extensions.embedded_redis": "extensions.connection.embedded",
    "extensions.failures": "extensions.utils.failures",
    "extensions.fleetstats": "extensions.extensions.fleetstats",
    "extensions.frontier": "extensions.core.frontier.frontier",
    "extensions.hosts": "extensions.core.frontier.hostrecord",
    "extensions.locks": "extensions.connection.locks",
    "extensions.metrics": "extensions.extensions.metrics",
    "extensions.politeness": "extensions.downloadermiddlewares.politeness",
    "extensions.recrawl": "extensions.extensions.recrawl",
    "extensions.redact": "extensions.utils.redact",
    "extensions.robots": "extensions.downloadermiddlewares.robotstxt",
    "extensions.scheduler": "extensions.core.scheduler",
    "extensions.scoring": "extensions.core.frontier.scoring",
    "extensions.scripts": "extensions.connection.scripts",
    "extensions.seeds": "extensions.core.seeds",
    "extensions.serialization": "extensions.core.frontier.serialization",
    "extensions.spill": "extensions.core.frontier.spill",
    "extensions.traps": "extensions.spidermiddlewares.traps",
}
# Names that did not move with the rest of their old module.
_UTILS_HOSTS = "extensions.utils.hosts"
_UTILS_FAILURES = "extensions.utils.failures"
MOVED_NAMES: dict[tuple[str, str], str] = {
    ("extensions.failures", "FailurePolicyMiddleware"): (
        "extensions.downloadermiddlewares.failurepolicy"
    ),
    ("extensions.failures", "FAILURE_META"): "extensions.meta",
    ("extensions.failures", "DELAY_META"): "extensions.meta",
    ("extensions.backoff", "parse_retry_after"): _UTILS_FAILURES,
    ("extensions.backoff", "CONNECTION_FAILURES"): _UTILS_FAILURES,
    ("extensions.backoff", "DNS_FAILURES"): _UTILS_FAILURES,
    ("extensions.hosts", "host_key"): _UTILS_HOSTS,
    ("extensions.hosts", "host_partition"): _UTILS_HOSTS,
    ("extensions.hosts", "hostname_of"): _UTILS_HOSTS,
    ("extensions.hosts", "registered_domain"): _UTILS_HOSTS,
    ("extensions.hosts", "DEFAULT_PORTS"): _UTILS_HOSTS,
    ("extensions.hosts", "HostDown"): _UTILS_FAILURES,
    ("extensions.hosts", "HostUnresolvable"): _UTILS_FAILURES,
    ("extensions.hosts", "Deferral"): "extensions.downloadermiddlewares",
    ("extensions.hosts", "deferred_copy"): "extensions.downloadermiddlewares",
    ("extensions.hosts", "KEY_MODES"): "extensions.downloadermiddlewares.politeness",
    ("extensions.scheduler", "worker_id"): "extensions.core.frontier.frontier",
}


class _MovedModule(types.ModuleType):
    """An old module path: every attribute is read from where it lives now."""

    def __getattr__(self, name: str) -> Any:
        old = self.__name__
        home = MOVED_NAMES.get((old, name), MOVED[old])
        return getattr(importlib.import_module(home), name)

    def __dir__(self) -> list[str]:
        return sorted(set(dir(importlib.import_module(MOVED[self.__name__]))))


class _MovedFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports an old module path as a :class:`_MovedModule`, with a
    ``DeprecationWarning`` (as Scrapy did when it moved ``scrapy.contrib``)."""

    def find_spec(
        self, fullname: str, path: Any = None, target: Any = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in MOVED:
            return None
        return importlib.machinery.ModuleSpec(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        return _MovedModule(spec.name)

    def exec_module(self, module: types.ModuleType) -> None:
        warnings.warn(
            f"{module.__name__} is deprecated: import from "
            f"{MOVED[module.__name__]} instead",
            DeprecationWarning,
            stacklevel=2,
        )


if not any(isinstance(f, _MovedFinder) for f in sys.meta_path):
    sys.meta_path.append(_MovedFinder())
