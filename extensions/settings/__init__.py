"""The ``extensions`` package's settings: their defaults (:mod:`.defaults`)
and the typed, ranged vocabulary they are written in (:mod:`.config`)."""
