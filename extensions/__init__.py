"""The Redis scheduler extension: frontier, scheduler, dupefilter, politeness."""
