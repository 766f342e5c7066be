"""``scrapy migrate_from_scrapy_redis SPIDER [--dry-run] [--trust-pickle]``

Move the crawl scrapy-redis queued for SPIDER into webcrawl's frontier
(:mod:`extensions.core.migration`): ``<spider>:requests`` is read with
scrapy-redis's own queue class and serializer (``SCHEDULER_QUEUE_CLASS``,
``SCHEDULER_SERIALIZER``, ``SCHEDULER_QUEUE_KEY`` of the project's
settings) and queued per host, as JSON, through the frontier's write-ahead,
dupefilter and commit path; ``<spider>:dupefilter`` is loaded into the Bloom
filter when scrapy-redis's fingerprint is this crawl's, else left alone
(said why); the seed keys are left for the reliable take. Stop the
scrapy-redis workers first; webcrawl workers may run meanwhile.

``--dry-run`` changes nothing: it lists the keys found, their types and
sizes, the queue class, and the serializer the entries are in. Entries in
pickle (scrapy-redis's default) are read only with ``--trust-pickle``:
unpickling data from Redis runs code of whoever could write to it
(CWE-502). The move is safe to run again, and a run stopped midway loses
nothing (a re-run, or a live worker, finishes it).

Exit status: 0 when everything was moved, 1 when entries were left in
scrapy-redis's key (each reason shown), 2 when the move cannot start (pickle
without ``--trust-pickle``, a queue key of another type than the queue class
keeps, no such spider).

Settings read: the project's (scrapy-redis's above, ``DUPEFILTER_CLASS``,
``REQUEST_FINGERPRINTER_CLASS``), those of
:class:`webcrawl.operate.OperatorCommand` (the workers' Redis) and of
:mod:`extensions.core.migration`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from scrapy.crawler import Crawler
from scrapy.exceptions import UsageError
from scrapy.spiderloader import get_spider_loader
from scrapy.statscollectors import MemoryStatsCollector
from scrapy.utils.conf import arglist_to_dict
from scrapy.utils.misc import build_from_crawler, load_object

from extensions.connection import resolve_redis_url
from extensions.utils.redact import redact_url
from webcrawl.operate import OperatorCommand, client_for

if TYPE_CHECKING:
    import argparse
    from collections.abc import Callable

    from scrapy import Request, Spider
    from scrapy.settings import BaseSettings

    from extensions.core.migration import DupefilterReport, Inventory, MoveReport


def render_inventory(inv: Inventory, name: str, where: str) -> list[str]:
    """``--dry-run``'s report."""
    lines = [f"scrapy-redis crawl of spider {name!r} in {where}"]
    for key in inv.keys:
        count = f"{key.count:,}" if key.type != "none" else "-"
        lines.append(f"  {key.key:<28} {key.type:<5} {count:>10}  {key.role}")
    lines.append(f"  queue class  {inv.queue_class}")
    lines.append(
        f"  serializer   {inv.serializer}; entries found: {inv.data_format}"
        + ("; reading them needs --trust-pickle" if inv.needs_trust else "")
    )
    lines += [f"  PROBLEM: {problem}" for problem in inv.problems]
    lines.append("Nothing changed (--dry-run).")
    return lines


def render_move(move: MoveReport, dupes: DupefilterReport, queue_key: str) -> list[str]:
    lines = [
        f"{queue_key}: {move.read:,} read, {move.queued:,} queued in the frontier, "
        f"{move.seen:,} already in it (dropped), {move.left:,} left in {queue_key}"
    ]
    for reason, examples in sorted(move.reasons.items()):
        lines += [f"  left ({reason}): {example}" for example in examples]
    if not dupes.fingerprints:
        lines.append(f"{dupes.key}: none")
    elif dupes.matched:
        lines.append(
            f"{dupes.key}: {dupes.fingerprints:,} fingerprints, {dupes.loaded:,} "
            f"loaded into the Bloom filter ({dupes.known:,} already there, "
            f"{dupes.malformed:,} malformed); the key is left as it was"
        )
    else:
        lines.append(
            f"{dupes.key}: {dupes.fingerprints:,} fingerprints NOT loaded: "
            f"{dupes.why_not}. A fingerprint cannot be turned back into its URL, "
            "so webcrawl's dupefilter does not know the URLs scrapy-redis "
            "fetched: one linked again is fetched once more (then it is known). "
            f"The key is left as it was: delete it when you no longer need it"
        )
    return lines


async def migrate(
    settings: BaseSettings,
    spider: Spider,
    fingerprint: Callable[[Request], bytes],
    dry_run: bool,
    trust_pickle: bool,
) -> tuple[list[str], int]:
    """Run the move (or the dry run) of ``spider``'s crawl; the report's
    lines and the exit status."""
    from extensions.core import migration  # see Command.run

    where = redact_url(resolve_redis_url(settings))
    crawl = migration.ScrapyRedisCrawl(
        client_for(settings), spider, settings, fingerprint, trust_pickle=trust_pickle
    )
    try:
        if dry_run:
            inv = await crawl.inventory()
            return render_inventory(inv, crawl.name, where), 2 if inv.problems else 0
        frontier = await migration.frontier_for(crawl.client, crawl.name, settings)
        move = await crawl.move_requests(frontier)
        dupes = await crawl.load_dupefilter()
    finally:
        await crawl.client.aclose()
    return render_move(move, dupes, crawl.queue_key), 1 if move.left else 0


class Command(OperatorCommand):
    def syntax(self) -> str:
        return "SPIDER [--dry-run] [--trust-pickle] [-a NAME=VALUE]"

    def short_desc(self) -> str:
        return "Move a crawl scrapy-redis queued into webcrawl's frontier"

    def long_desc(self) -> str:
        return str(__doc__).split("Settings read")[0].split("\n", 1)[1].strip()

    def add_options(self, parser: argparse.ArgumentParser) -> None:
        super().add_options(parser)
        parser.add_argument(
            "--dry-run",
            action="store_true",
            help="report what is there, change nothing",
        )
        parser.add_argument(
            "--trust-pickle",
            action="store_true",
            help="read entries in pickle (only if your own workers wrote them)",
        )
        parser.add_argument(
            "-a",
            dest="spargs",
            action="append",
            default=[],
            metavar="NAME=VALUE",
            help="spider argument (the spider is built to read its requests)",
        )

    def run(self, args: list[str], opts: argparse.Namespace) -> None:
        # Imported here, not with the module: every ``scrapy`` invocation (a
        # worker's start among them) imports every command module, and this
        # one's reader brings scrapy-redis.
        from extensions.core.migration import MigrationError

        if len(args) != 1:
            raise UsageError("give the spider whose crawl scrapy-redis queued")
        settings = self.crawl_settings()
        try:
            spidercls = get_spider_loader(settings).load(args[0])
        except KeyError:
            self.refuse(ValueError(f"no spider named {args[0]!r} in this project"))
        try:
            spargs = arglist_to_dict(opts.spargs)
        except ValueError:
            raise UsageError("-a takes NAME=VALUE") from None
        crawler = Crawler(spidercls, settings)
        crawler.stats = MemoryStatsCollector(crawler)
        crawler.request_fingerprinter = build_from_crawler(
            load_object(crawler.settings["REQUEST_FINGERPRINTER_CLASS"]), crawler
        )
        spider = spidercls.from_crawler(crawler, **spargs)
        fingerprint = crawler.request_fingerprinter.fingerprint
        try:
            lines, self.exitcode = self.call(
                lambda _, *a: migrate(crawler.settings, *a),
                spider,
                fingerprint,
                opts.dry_run,
                opts.trust_pickle,
            )
        except MigrationError as exc:
            self.refuse(exc)
        print("\n".join(lines))
