"""Item pipelines and page stores."""
