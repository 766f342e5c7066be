"""webcrawl: a distributed, polite web crawler built on Scrapy and Redis."""
