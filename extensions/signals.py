"""Signals of the ``extensions`` package.

``item_held`` and ``items_stored``
    The acknowledgement protocol of a pipeline that writes in batches (the
    storage pipeline of :mod:`pipelines.storage`, or any user pipeline): it
    sends ``item_held`` (argument ``item``) from ``process_item`` for an
    item it keeps until it is durable, and ``items_stored`` (argument
    ``items``, a list) on the reactor thread once they are. The frontier
    lease of the response that yielded such an item ends only then
    (:mod:`extensions.core.scheduler.leases`), so a crash between fetch and flush loses
    nothing. An item is matched to its response by identity (the object the
    spider yielded), else by the lease it names (a ``lease`` attribute or
    key, as :class:`pipelines.items.PageItem` carries). Every other item is
    done when it leaves ``process_item``.

``request_dead``
    A request's story ended in a terminal failure (its retry budget spent, a
    refusal, a redirect loop). Argument: ``letter``, an
    :class:`extensions.core.frontier.deadletters.DeadLetter` (build it with
    :func:`extensions.core.frontier.deadletters.dead_letter`). The scheduler writes it
    to the
    dead-letter queue before it acknowledges the request's lease. The spider
    sends it from its final-failure errback; components that end a request
    elsewhere send it too.

``seeds_settled``
    Seeds taken from the seed list (:mod:`extensions.core.seeds`) no longer need
    their entries: their requests are queued in the frontier (written ahead
    and committed, so a live worker queues them should this one die), or
    were refused before the scheduler (an offsite seed, counted by its
    refuser); sent once a batch's refused part, if any, is in the spill
    store. Argument: ``entries``, the :data:`extensions.meta.SEED_TAKEN`
    values of those requests. The scheduler sends it; whoever took the seeds
    removes the entries from its taken list.

``dead_letters_unrecorded``
    Dead letters written with no page record in the store: by the scheduler
    (a redirect loop, a redirect refused when scheduled) or by a frontier
    script (the host-down sweep of a host's queued and delayed requests, the
    commit's diversion of a down host's new URLs). Argument: ``letters``, a
    list of :class:`extensions.core.frontier.deadletters.DeadLetter` (a page of at most
    ``DeadLetters.unrecorded``'s size). The scheduler sends it once they are
    in the dead-letter queue; whoever records failed pages (the storage
    pipeline) records each, as it does the spider's final failures. Sent
    once per letter: a worker that dies before its store wrote them leaves
    the dead letters without their page records.

Why here and not in ``pipelines``: the arrow between the two library packages
points from ``pipelines`` to ``extensions`` (the pipelines use its Redis
connection and key layout). The frontier defines what "durable" must be told
to it, as Scrapy's core defines ``item_scraped`` for extensions to send and
hear; a signal in ``pipelines`` would make the scheduler import ``pipelines``
and close a cycle.
"""

item_held = object()

items_stored = object()

request_dead = object()

seeds_settled = object()

dead_letters_unrecorded = object()
