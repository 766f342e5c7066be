"""The project's ``scrapy`` commands (``COMMANDS_MODULE`` in
:mod:`webcrawl.settings`): one module per command, each a ``Command`` class.

``scrapy -h`` in the project directory lists them; they take the same
``-s NAME=value`` settings as the workers.
"""
