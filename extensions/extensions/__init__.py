"""webcrawl's Scrapy extensions: fleet statistics, Prometheus metrics and
continuous crawling."""
