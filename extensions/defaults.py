"""Defaults of the settings the ``extensions`` library reads on its own.

Fleet statistics (:mod:`extensions.fleetstats`). The README's settings table
is generated from the comments here (one comment line per setting).
"""

from __future__ import annotations

# --- Fleet statistics (extensions.fleetstats) ---------------------------------
# Seconds between folds of this worker's stats into Redis (one script call; 0: off).
STATS_FOLD_INTERVAL = 5.0
# Log the fleet's rates, frontier depth and leases every LOGSTATS_INTERVAL seconds.
STATS_LOG_FLEET = True
