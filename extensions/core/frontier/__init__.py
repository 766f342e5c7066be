"""The Redis frontier and the structures it owns: host queues and the ready
schedule (:mod:`.frontier`), the host record (:mod:`.hostrecord`), their
shared Lua (:mod:`.lua`), dead letters (:mod:`.deadletters`), the spill
(:mod:`.spill`), the entry format (:mod:`.serialization`) and priority
scoring (:mod:`.scoring`)."""
