"""Typed, ranged settings: the vocabulary the defaults modules are written in.

Each library package keeps its settings in one ``defaults`` module (as
``scrapy/settings/default_settings.py`` and ``rq/defaults.py`` do): one
documented default per setting, its type and allowed range declared next to
it with :data:`typing.Annotated`::

    # Requests leased per round trip to Redis.
    FRONTIER_BATCH_SIZE: Annotated[int, Range(1, 10_000)] = 32

A setting without an annotation takes the type of its default and any value
of that type. :func:`install` puts a module's defaults into a ``Settings``
(the add-on does it for every package, at ``default`` priority, so a user's
value always wins); :func:`check` reads every setting back with the typed
getter its type names and returns one sentence per value outside its range.

This module lives in ``extensions`` (the lower of the two library packages:
``pipelines`` already uses its connection and key layout) so both can declare
their settings with it without an import cycle.
"""

from __future__ import annotations

import difflib
import os
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Collection, Iterable
    from types import ModuleType

    from scrapy.settings import BaseSettings


class SettingsError(ValueError):
    """A setting holds a value outside its declared type or range.

    The message is one line naming the setting, the value and what is allowed.
    """


@dataclass(frozen=True)
class Range:
    """Allowed numbers: ``low <= value <= high``, ``above < value < below``
    (``None``: that side unbounded).

    >>> Range(1).describe()
    'a number >= 1'
    >>> Range(0, 9).describe()
    'a number >= 0 and <= 9'
    >>> Range(above=0, below=1).describe()
    'a number > 0 and < 1'
    """

    low: float | None = None
    high: float | None = None
    above: float | None = None
    below: float | None = None

    def allows(self, value: Any) -> bool:
        return (
            (self.low is None or value >= self.low)
            and (self.high is None or value <= self.high)
            and (self.above is None or value > self.above)
            and (self.below is None or value < self.below)
        )

    def describe(self) -> str:
        bounds = [
            f"{op} {bound:g}"
            for op, bound in (
                (">=", self.low),
                (">", self.above),
                ("<=", self.high),
                ("<", self.below),
            )
            if bound is not None
        ]
        return "a number " + " and ".join(bounds) if bounds else "a number"


@dataclass(frozen=True)
class OneOf:
    """Allowed values: exactly one of ``choices``.

    >>> OneOf("host", "ip").describe()
    "one of 'host', 'ip'"
    """

    choices: tuple[str, ...]

    def __init__(self, *choices: str) -> None:
        object.__setattr__(self, "choices", choices)

    def allows(self, value: Any) -> bool:
        return value in self.choices

    def describe(self) -> str:
        return "one of " + ", ".join(repr(c) for c in self.choices)


@dataclass(frozen=True)
class AnyOf:
    """Allowed values: one or more of ``choices``, comma-separated, each once.

    >>> rule = AnyOf("host", "ip")
    >>> rule.allows("host"), rule.allows("ip, host"), rule.allows("host,host")
    (True, True, False)
    >>> rule.allows(""), rule.allows("port")
    (False, False)
    >>> rule.describe()
    "one or more of 'host', 'ip', comma-separated"
    """

    choices: tuple[str, ...]

    def __init__(self, *choices: str) -> None:
        object.__setattr__(self, "choices", choices)

    def allows(self, value: Any) -> bool:
        parts = [p.strip() for p in str(value).split(",")]
        return all(p in self.choices for p in parts) and len(set(parts)) == len(parts)

    def describe(self) -> str:
        return (
            "one or more of "
            + ", ".join(repr(c) for c in self.choices)
            + ", comma-separated"
        )


@dataclass(frozen=True)
class Each:
    """Every member of a list passes ``rule``.

    >>> Each(Range(100, 599)).describe()
    'a list of: a number >= 100 and <= 599'
    """

    rule: Range | OneOf

    def allows(self, value: Any) -> bool:
        return all(self.rule.allows(v) for v in value)

    def describe(self) -> str:
        return f"a list of: {self.rule.describe()}"


Rule = Range | OneOf | AnyOf | Each


@dataclass(frozen=True)
class Spec:
    """One setting: its name, default, base type and optional rule."""

    name: str
    default: Any
    type: type
    rule: Rule | None = None

    def read(self, settings: BaseSettings) -> Any:
        """The setting's value through the typed getter of its type.

        Raises ``ValueError`` when the value cannot be read as that type.
        """
        if self.type is bool:
            return settings.getbool(self.name, self.default)
        if self.type is int:
            value = settings.get(self.name, self.default)
            if isinstance(value, float) and not value.is_integer():
                raise ValueError(value)
            return settings.getint(self.name, self.default)
        if self.type is float:
            return settings.getfloat(self.name, self.default)
        if self.type is dict:
            return settings.getdict(self.name, self.default)
        if self.type is list:
            values = settings.getlist(self.name, self.default)
            if self.rule is not None and values and isinstance(self.default, list):
                kind = type(self.default[0]) if self.default else str
                values = [kind(v) for v in values]
            return values
        value = settings.get(self.name, self.default)
        return "" if value is None else str(value)

    def type_name(self) -> str:
        names = {bool: "True or False", int: "an integer", float: "a number"}
        names |= {list: "a list", dict: "a dict"}
        return names.get(self.type, "a string")


def specs(module: ModuleType) -> list[Spec]:
    """The settings declared in a defaults ``module``, in file order."""
    hints = typing.get_type_hints(module, include_extras=True)
    out = []
    for name, default in vars(module).items():
        if not name.isupper() or name.startswith("_"):
            continue
        hint = hints.get(name)
        rule = None
        base: Any = type(default)
        if hint is not None:
            args = typing.get_args(hint)
            if typing.get_origin(hint) is typing.Annotated:
                base = args[0]
                rule = next(
                    (
                        a
                        for a in args[1:]
                        if isinstance(a, Range | OneOf | AnyOf | Each)
                    ),
                    None,
                )
            else:
                base = hint
        base = typing.get_origin(base) or base
        out.append(Spec(name, default, base, rule))
    return out


def install(
    settings: BaseSettings, module: ModuleType, priority: str = "default"
) -> None:
    """Put every default of ``module`` into ``settings`` at ``priority``.

    A value already set at a higher priority (project, ``-s``, a spider's
    ``custom_settings``) is kept.
    """
    settings.setdict({s.name: s.default for s in specs(module)}, priority=priority)


def problems(settings: BaseSettings, module: ModuleType) -> list[str]:
    """One sentence per setting of ``module`` whose value is not allowed.

    The settings are ``module``'s own and the Scrapy settings its
    ``scrapy_rules`` list bounds.

    >>> from scrapy.settings import Settings
    >>> import extensions.settings.defaults as d
    >>> problems(Settings({"FRONTIER_BATCH_SIZE": "0"}), d)
    ['FRONTIER_BATCH_SIZE=0 is not allowed: use a number >= 1 and <= 100000']
    >>> problems(Settings({"POLITENESS_KEY": "bogus"}), d)  # doctest: +ELLIPSIS
    ["POLITENESS_KEY='bogus' is not allowed: use one or more of 'host', 'domain', ..."]
    """
    found = []
    for spec in [*specs(module), *getattr(module, "scrapy_rules", [])]:
        raw = settings.get(spec.name, spec.default)
        shown = raw if isinstance(raw, str) and spec.type is not str else repr(raw)
        try:
            value = spec.read(settings)
        except (TypeError, ValueError):
            found.append(f"{spec.name}={shown} is not {spec.type_name()}")
            continue
        if spec.rule is not None and not spec.rule.allows(value):
            found.append(
                f"{spec.name}={shown} is not allowed: use {spec.rule.describe()}"
            )
    return found


# How close (difflib's ratio) an unknown name must be to a known one to be
# taken for a typo of it: DOWNLOAD_DELAYY is 0.97 from DOWNLOAD_DELAY, while
# names of one's own (MY_PIPELINE_OPTION) stay far from every known one.
TYPO_CUTOFF = 0.85


def misspelled(names: Iterable[str], known: Collection[str]) -> dict[str, str]:
    """The ``names`` not in ``known`` that are close to one that is, each
    with the closest (:mod:`difflib`).

    >>> misspelled(["DOWNLOAD_DELAYY", "DOWNLOAD_DELAY", "MY_OWN"],
    ...            ["DOWNLOAD_DELAY", "RETRY_TIMES"])
    {'DOWNLOAD_DELAYY': 'DOWNLOAD_DELAY'}
    """
    found = {}
    for name in names:
        if name in known:
            continue
        close = difflib.get_close_matches(name, known, n=1, cutoff=TYPO_CUTOFF)
        if close:
            found[name] = close[0]
    return found


def check(settings: BaseSettings, *modules: ModuleType) -> None:
    """Raise :class:`SettingsError` (one line) if any setting is not allowed."""
    found = [p for m in modules for p in problems(settings, m)]
    if found:
        raise SettingsError("; ".join(found))


def setting_or_env(settings: BaseSettings | None, name: str) -> str:
    """The value of ``name``: one function for "setting, else environment".

    In order: the setting when set above ``default`` priority (project
    settings, ``-s``, scrapyd's ``setting=``, a spider's ``custom_settings``);
    else the environment variable ``name``; else the contents of the file the
    environment variable ``name + "_FILE"`` names (a container secret, e.g.
    ``REDIS_URL_FILE=/run/secrets/redis_url``), trailing newline stripped;
    else the setting's default (or ``""``).

    >>> import os
    >>> from scrapy.settings import Settings
    >>> s = Settings()
    >>> s.set("WEBCRAWL_HOME", ".webcrawl", priority="default")
    >>> os.environ["WEBCRAWL_HOME"] = "/var/lib/webcrawl"
    >>> setting_or_env(s, "WEBCRAWL_HOME")
    '/var/lib/webcrawl'
    >>> s.set("WEBCRAWL_HOME", "/srv/crawl", priority="cmdline")
    >>> setting_or_env(s, "WEBCRAWL_HOME")
    '/srv/crawl'
    >>> del os.environ["WEBCRAWL_HOME"]
    """
    value = settings.get(name) if settings is not None else None
    if value and settings is not None and (settings.getpriority(name) or 0) > 0:
        return str(value)
    if os.environ.get(name):
        return os.environ[name]
    path = os.environ.get(f"{name}_FILE")
    if path:
        try:
            return Path(path).read_text().strip()
        except OSError as exc:
            raise SettingsError(
                f"{name}_FILE={path} cannot be read: {exc.strerror}"
            ) from None
    return "" if value is None else str(value)


def require(settings: BaseSettings, module: ModuleType) -> None:
    """Raise :class:`SettingsError` unless ``module``'s defaults are installed.

    A component reads its settings without a fallback of its own; without
    the defaults a missing ``ROBOTS_ENABLED`` would read as False and switch
    a guarantee off in silence, so it refuses to start instead.
    """
    missing = [s.name for s in specs(module) if settings.get(s.name) is None]
    if missing:
        raise SettingsError(
            f"{missing[0]} is not set: the defaults of {module.__name__} are not "
            "installed (enable the webcrawl add-on, or call "
            f"extensions.settings.config.install(settings, {module.__name__}))"
        )
