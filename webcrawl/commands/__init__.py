"""The project's ``scrapy`` commands (``COMMANDS_MODULE`` in
:mod:`webcrawl.settings`): one module per command, each a ``Command`` class."""
