"""One exception type for every user-facing failure.

The CLI turns a ``DpsynthError`` into a one-line message and exit code 2, so a user
sees *which* file, key or value is wrong instead of a traceback. Anything else that
escapes is a bug and keeps its traceback.
"""

from __future__ import annotations


class DpsynthError(Exception):
    """A problem with the user's input, data or environment, stated for humans."""


class ConfigError(DpsynthError):
    """params.yaml (or an override) is invalid; the message names the key path."""


class DataError(DpsynthError):
    """A dataset file is missing, corrupt, or fails its checksum."""


class PrivacyError(DpsynthError):
    """A privacy parameter is out of its domain, or a budget would be exceeded."""
