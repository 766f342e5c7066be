"""webcrawl's Scrapy commands (``COMMANDS_MODULE``): one module per command,
run from the project directory with the workers' ``-s`` settings."""
