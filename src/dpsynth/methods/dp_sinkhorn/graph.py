"""Capturing one training step in a CUDA graph: the one path the fast step, the batched sweep and the
benchmark's generator floor share.

Why a warm-up and a restore: a step captured cold would record the allocator's first allocations, cuDNN's
plan search and the optimizer's lazy state creation; three eager steps on a side stream do those first.
But those steps move the weights, the BatchNorm statistics and the optimizer's moments, so they are put
back in place afterwards (a fresh optimizer's state back to step 0 and zero moments): the first replayed
step starts from exactly the state the caller handed over. Then the step is captured once; replaying the
graph repeats it on whatever the caller copied into the static inputs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any

import torch
from torch import Tensor

__all__ = ["capture_step", "warm_up", "WARMUP_STEPS"]

#: Eager steps on a side stream before the capture.
WARMUP_STEPS = 3


def warm_up(step: Callable[[], Any], *, keep: Iterable[Tensor] = (),
            optimizers: Sequence[torch.optim.Optimizer] = (),
            stream: Callable[[], AbstractContextManager[Any]] = nullcontext) -> None:
    """Run ``step`` ``WARMUP_STEPS`` times inside ``stream()`` (a CUDA side stream for a capture), then put
    ``keep`` and ``optimizers``' state back as they were (a fresh optimizer's: step 0, zero moments)."""
    fresh = not any(opt.state for opt in optimizers)
    tensors = [*keep, *(v for opt in optimizers for state in opt.state.values() for v in state.values()
                        if isinstance(v, Tensor))]
    saved = [t.detach().clone() for t in tensors]
    with stream():
        for _ in range(WARMUP_STEPS):
            step()
    with torch.no_grad():
        for t, v in zip(tensors, saved):
            t.copy_(v)
        if fresh:  # the warm-up created the state: a fresh optimizer's is step 0 and zero moments
            for opt in optimizers:
                for state in opt.state.values():
                    for v in state.values():
                        if isinstance(v, Tensor):
                            v.zero_()


@contextmanager
def _side_stream() -> Iterator[None]:
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        yield
    torch.cuda.current_stream().wait_stream(side)


def capture_step(step: Callable[[], Any], *, keep: Iterable[Tensor] = (),
                 optimizers: Sequence[torch.optim.Optimizer] = (),
                 before_capture: Callable[[], None] = lambda: None) -> tuple[torch.cuda.CUDAGraph, Any]:
    """Warm ``step`` up on a side stream and undo its changes (:func:`warm_up`), call ``before_capture``
    (e.g. clear a sanitizer's flag the warm-up set), capture ``step`` once; returns (graph, what the
    captured ``step`` returned: its static outputs)."""
    warm_up(step, keep=keep, optimizers=optimizers, stream=_side_stream)
    before_capture()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = step()
    return graph, out
