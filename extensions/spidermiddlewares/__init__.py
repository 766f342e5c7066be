"""webcrawl's spider middlewares, and the one table of their order."""

SPIDER_MIDDLEWARES: dict[str, int | None] = {
    # Outermost of all: a middleware further out that dropped an item this
    # one counted would leave its lease waiting (Scrapy's own run from 25 to
    # 1000).
    "extensions.spidermiddlewares.leases.LeaseSpiderMiddleware": -1000,
    # Replaced by TrapFilter's url_too_long (same setting, plus a record).
    "scrapy.spidermiddlewares.urllength.UrlLengthMiddleware": None,
    "extensions.spidermiddlewares.traps.TrapFilter": 450,
    # Near the spider: its seeds then pass every other middleware's
    # process_start (Scrapy's StartSpiderMiddleware marks them
    # is_start_request).
    "extensions.spidermiddlewares.seeds.SeedFeed": 950,
}
