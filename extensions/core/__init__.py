"""The distributed core: the scheduler, the frontier and its structures in
Redis, the seed list and the Bloom filter (see ``docs/frontier.md``)."""
