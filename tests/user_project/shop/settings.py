"""A user's project: its own spider, items and pipeline, and one line for
the fleet (the add-on). Nothing else of webcrawl's."""

BOT_NAME = "shop"
SPIDER_MODULES = ["shop.spiders"]
ROBOTSTXT_OBEY = True
ADDONS = {"webcrawl.addon.Webcrawl": 0}
ITEM_PIPELINES = {"shop.pipelines.JsonLinesPipeline": 300}
