"""A user pipeline that writes each item to a file as it comes."""

from __future__ import annotations

import json
import os
from typing import Any


class JsonLinesPipeline:
    def open_spider(self) -> None:
        directory = os.environ["SHOP_ITEMS_DIR"]
        self.file = open(  # noqa: SIM115
            os.path.join(directory, f"items-{os.getpid()}.jsonl"), "a", encoding="utf-8"
        )

    def close_spider(self) -> None:
        self.file.close()

    def process_item(self, item: Any) -> Any:
        self.file.write(json.dumps(dict(item)) + "\n")
        self.file.flush()
        return item
