"""One exception type for every user-facing failure.

The CLI turns a ``DpsynthError`` into a one-line message and exit code 2, so a user
sees *which* file, key or value is wrong instead of a traceback. Anything else that
escapes is a bug and keeps its traceback.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class DpsynthError(Exception):
    """A problem with the user's input, data or environment, stated for humans."""


class ConfigError(DpsynthError):
    """params.yaml (or an override) is invalid; the message names the key path."""


class DataError(DpsynthError):
    """A dataset file is missing, corrupt, or fails its checksum."""


class PrivacyError(DpsynthError):
    """A privacy parameter is out of its domain, or a budget would be exceeded."""


def did_you_mean(name: str, known: Iterable[str], n: int = 1) -> str:
    """``"; did you mean 'x'?"`` for the closest of ``known`` (difflib), or ``""`` when none is close.

    Here, below every layer, so that config validation (a misspelt ``pipeline.experiments`` entry)
    and the stages (a misspelt ``--experiment``) suggest names the same way."""
    close = difflib.get_close_matches(name, [str(k) for k in known], n=n)
    if not close:
        return ""
    return f"; did you mean {' or '.join(repr(c) for c in close)}?"
