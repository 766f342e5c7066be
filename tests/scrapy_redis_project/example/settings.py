"""Settings of a scrapy-redis project, as scrapy-redis's README ("Usage") and
its example project set them. tests/test_redis_spiders.py applies the steps
of docs/migrating-from-scrapy-redis.md to a copy of this file."""

SPIDER_MODULES = ["example.spiders"]
NEWSPIDER_MODULE = "example.spiders"

USER_AGENT = "example (+https://example.com/bot)"

# Enables scheduling storing requests queue in redis.
SCHEDULER = "scrapy_redis.scheduler.Scheduler"
# Ensure all spiders share same duplicates filter through redis.
DUPEFILTER_CLASS = "scrapy_redis.dupefilter.RFPDupeFilter"
# Enables stats shared based on Redis.
STATS_CLASS = "scrapy_redis.stats.RedisStatsCollector"
# Don't cleanup redis queues, allows to pause/resume crawls.
SCHEDULER_PERSIST = True
SCHEDULER_QUEUE_CLASS = "scrapy_redis.queue.PriorityQueue"

ITEM_PIPELINES = {
    "example.pipelines.ExamplePipeline": 300,
    "scrapy_redis.pipelines.RedisPipeline": 400,
}

LOG_LEVEL = "INFO"
DOWNLOAD_DELAY = 1
