"""Compiling a function once per process with ``torch.compile``, and falling back to it eager when that
fails: the one place the project compiles (the fused Sinkhorn iteration, ``ot/sinkhorn.py``; the
``compiled_generator`` GPU lever, ``methods/dp_sinkhorn/forward.py``).

Why one place: a compile failure (no C++ compiler for Inductor's CPU backend, no Triton, an unsupported
platform) must cost speed, never a run -- the eager function computes the same thing -- and must be said
once, not per step; and Inductor's code should be cached where the project caches machine-wide things.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable
from typing import Any

import torch
from torch.utils._python_dispatch import _get_current_dispatch_mode

__all__ = ["compiled", "compile_failed", "OFF_VAR"]

#: ``DPSYNTH_NO_COMPILE=1`` runs everything eager (the same numbers, slower): the way out where a platform's
#: compiler misbehaves in a way that is not an exception at the first call.
OFF_VAR = "DPSYNTH_NO_COMPILE"

_compiled: dict[tuple[Callable[..., Any], str | None, bool], Callable[..., Any]] = {}
_failed: str | None = None


def compiled(fn: Callable[..., Any], mode: str | None = None, fullgraph: bool = True) -> Callable[..., Any] | None:
    """``fn`` compiled by ``torch.compile(fullgraph=..., dynamic=False, mode=...)`` -- one graph per
    (shapes, dtype, device, Python constants) -- built on first use; None where compiling failed in this
    process (:func:`compile_failed`), where ``$DPSYNTH_NO_COMPILE`` is set (not 0), or cannot apply: under a ``TorchDispatchMode`` (an op counter, a
    fake-tensor trace), which Dynamo does not compile through. ``fn`` must take tensors, modules and
    constants (a new closure per call would recompile every call). Inductor's code goes to
    ``$TORCHINDUCTOR_CACHE_DIR``, by default dpsynth's cache (``~/.cache/dpsynth/inductor``), so later
    jobs on the machine load it instead of compiling again."""
    switched_off = os.environ.get(OFF_VAR, "") not in ("", "0")
    if _failed is not None or switched_off or _get_current_dispatch_mode() is not None:
        return None
    key = (fn, mode, fullgraph)
    if key not in _compiled:
        from dpsynth.cache import cache_dir

        os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(cache_dir("inductor")))
        _compiled[key] = torch.compile(fn, fullgraph=fullgraph, dynamic=False, mode=mode)
    return _compiled[key]


def compile_failed(exc: BaseException) -> None:
    """Stop compiling in this process after ``exc`` and warn once: the eager code is the same
    computation, slower."""
    global _failed
    _failed = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    warnings.warn(f"torch.compile failed ({_failed}); running eager from here on (same numbers, slower)",
                  RuntimeWarning, stacklevel=3)
