"""webcrawl's spider middlewares, and the table of their order."""

SPIDER_MIDDLEWARES: dict[str, int | None] = {
    # Replaced by TrapFilter's url_too_long (same setting, plus a record).
    "scrapy.spidermiddlewares.urllength.UrlLengthMiddleware": None,
    "extensions.spidermiddlewares.traps.TrapFilter": 450,
}
