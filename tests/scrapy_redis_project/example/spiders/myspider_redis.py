from scrapy_redis.spiders import RedisSpider


class MySpider(RedisSpider):
    """Reads its start URLs from the Redis key myspider:start_urls."""

    name = "myspider_redis"
    redis_key = "myspider:start_urls"

    def __init__(self, *args, **kwargs):
        domain = kwargs.pop("domain", "")
        self.allowed_domains = [d for d in domain.split(",") if d]
        super().__init__(*args, **kwargs)

    def parse(self, response):
        yield {"name": response.css("title::text").get(), "url": response.url}
        yield from response.follow_all(css="a", callback=self.parse)
