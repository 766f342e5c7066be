"""Signals through which the parts of webcrawl meet without importing each other.

``items_stored``
    Sent by a storage pipeline, on the reactor thread, once a batch of items is
    durable in the store. Arguments: ``items`` (a list of the stored items).
    The frontier listens to it to acknowledge the lease of each page's request
    (an opaque token the spider copies into the item's ``lease`` field): a
    crash between fetch and flush therefore loses nothing.
"""

items_stored = object()
