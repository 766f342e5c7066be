from scrapy.linkextractors import LinkExtractor
from scrapy.spiders import Rule
from scrapy_redis.spiders import RedisCrawlSpider


class MyCrawler(RedisCrawlSpider):
    """Reads its start URLs from mycrawler:start_urls and follows every link."""

    name = "mycrawler_redis"
    redis_key = "mycrawler:start_urls"

    rules = (Rule(LinkExtractor(), callback="parse_page", follow=True),)

    def __init__(self, *args, **kwargs):
        domain = kwargs.pop("domain", "")
        self.allowed_domains = [d for d in domain.split(",") if d]
        super().__init__(*args, **kwargs)

    def parse_page(self, response):
        return {"name": response.css("title::text").get(), "url": response.url}
