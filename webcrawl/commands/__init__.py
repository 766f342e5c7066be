"""webcrawl's Scrapy commands (``COMMANDS_MODULE = "webcrawl.commands"``).

One module per command; ``scrapy -h`` in the project directory lists them.
They take the same ``-s NAME=value`` settings as the workers.
"""
