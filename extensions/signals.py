"""Signals of the ``extensions`` package.

``items_stored``
    The frontier's acknowledgement protocol. Whoever makes items durable (the
    storage pipeline of :mod:`pipelines.storage`, or any other store) sends it
    on the reactor thread once a batch is stored. Arguments: ``items`` (a list
    of the stored items). The scheduler listens to it to acknowledge the lease
    of each page's request (an opaque token the spider copies into the item's
    ``lease`` attribute): a crash between fetch and flush therefore loses
    nothing.

Why here and not in ``pipelines``: the arrow between the two library packages
points from ``pipelines`` to ``extensions`` (the pipelines use its Redis
connection and key layout). The frontier defines what "durable" must be told
to it, as Scrapy's core defines ``item_scraped`` for extensions to send and
hear; a signal in ``pipelines`` would make the scheduler import ``pipelines``
and close a cycle.
"""

items_stored = object()
