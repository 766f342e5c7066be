"""What the tests share, and nothing else: no test module imports another.

* :mod:`tests.support.fleet`: real ``scrapy crawl web`` workers as
  subprocesses, seeds pushed with ``redis-cli``;
* :mod:`tests.support.localcrawl`: crawl the sandbox web with a local fleet
  and report what the sandbox served (``make demo`` and ``bench/`` use it too);
* :mod:`tests.support.outcomes`: what a crawl left behind (the page store,
  the dead-letter queue, the frontier);
* :mod:`tests.support.cluster`: a throw-away Redis Cluster on loopback;
* the rest: helpers of one area each (frontier, scheduler, host verdicts,
  trap filter, a mockupdb MongoDB, packaging, command-line tools).

Not part of the application: the scrapyd egg holds ``webcrawl``,
``extensions`` and ``pipelines`` only.
"""

import pytest

# The CPU-heavy fleets whose claim CPU starvation could break: several
# workers and many fast requests, judged on a politeness gap, a stall of the
# reactor or a lease timeout of a few seconds. pytest-xdist's --dist
# loadgroup runs every test of one group in one process, one at a time:
# these never share the cores with each other, only with lighter tests (and
# heavy ones whose claims do not depend on timing: the bench smoke test, the
# spill's growth, the other crawls, and those with margins of tens of
# seconds: the robots.txt crash runs, the freshness run). The group is the
# suite's critical path: keep out of it what does not need it. Mark a test
# (or a module: pytestmark).
FLEET = pytest.mark.xdist_group("fleet")
