"""For scrapyd-deploy, which builds eggs through setup.py: the metadata, the
packages and the ``scrapy`` entry point all come from pyproject.toml."""

from setuptools import setup

setup()
