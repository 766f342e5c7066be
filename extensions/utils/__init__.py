"""Pure helpers: URL and host identity, failure classes, redaction.

Nothing here talks to Redis or reads a setting: every other layer may
import these modules, and they import none of the other layers.
"""
