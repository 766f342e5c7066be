"""Stock spiders and settings the benchmarks run: no webcrawl component in them."""
