from datetime import UTC, datetime


class ExamplePipeline:
    """Stamps each item, as the example project's pipeline does."""

    def process_item(self, item, spider):
        item["crawled"] = datetime.now(UTC).isoformat()
        item["spider"] = spider.name
        return item
