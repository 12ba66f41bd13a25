"""The DP-Sinkhorn step's speed levers on a GPU (``hparams.gpu_levers``; measured one by one by
``dpsynth bench dp-sinkhorn --levers`` and ``benchmarks/gpu.sh``).

Why levers and not one fast setting: measured on one H200 (2026-11-26), the CUDA-graphed step ran at
335 steps/s and the eager generator alone at 389 -- the step is bound by the generator's small
convolutions (batch 60, 7.3 TFLOP/s of the chip's ~50 fp32), not by launches. Which of these moves
that bound is a hardware question the benchmark answers; each is kept only where it measures faster:

* ``cudnn_benchmark``: cuDNN times its convolution algorithms for the step's fixed shapes once (in
  the graph's warm-up) and keeps the fastest, instead of its heuristic pick.
* ``channels_last``: the generator's activations in NHWC, the layout tensor-core convolutions want
  (the CPU path always runs it: oneDNN prefers it too).
* ``fused_adam``: one fused kernel for the whole Adam update instead of a few per parameter.
* ``compiled_generator``: the generator's forward (and so its backward) compiled by ``torch.compile``
  in mode ``max-autotune-no-cudagraphs`` (Inductor tries Triton templates against cuDNN for each
  convolution and GEMM at the step's fixed shapes and keeps the fastest; the step's own CUDA graph
  captures the result, so Inductor's graphs are off). The same function of the same parameters;
  compiling takes a minute or two once per shape (cached in ``~/.cache/dpsynth/inductor``). Not under
  ``vmap`` (a packed sweep's grouped forward), like ``bf16``.
* ``bf16``: the generator's forward (and so its backward) under bfloat16 autocast. The images are
  cast back to float32 BEFORE the sanitizer: the image gradient is clipped and noised in float32
  (the noise itself is drawn in float64), and the loss and the Sinkhorn solve stay float32. This
  is the one lever that changes the numbers beyond rounding order; tests/test_fast_step.py bounds
  how much (loss and sanitized gradient against float32).

Privacy does not move with any of them: the sampling, the clip, the noise, the accountant and the
budget guard are the same code on the same float32 gradient. On the CPU the levers are off (the
CPU step is what the suite tests and the quick scale runs).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, fields

import torch

from dpsynth.config.hparams import GPU_LEVERS as LEVERS  # the float32 levers first, then bf16
from dpsynth.errors import ConfigError

__all__ = ["LEVERS", "StepTuning"]


@dataclass(frozen=True)
class StepTuning:
    """Which levers one step runs with (all off: the step as it always ran)."""

    cudnn_benchmark: bool = False
    channels_last: bool = False
    fused_adam: bool = False
    compiled_generator: bool = False
    bf16: bool = False

    @classmethod
    def of(cls, levers: Iterable[str]) -> StepTuning:
        """The levers named (each of ``LEVERS``), on any device (the benchmark and the tests)."""
        names = list(levers)
        unknown = [n for n in names if n not in LEVERS]
        if unknown:
            raise ConfigError(f"unknown GPU lever(s) {', '.join(map(repr, unknown))}; known: {', '.join(LEVERS)}")
        return cls(**{n: True for n in names})

    @classmethod
    def for_run(cls, levers: Iterable[str], device: torch.device) -> StepTuning:
        """A run's levers: those of ``hparams.gpu_levers`` on CUDA, none elsewhere."""
        tuning = cls.of(levers)
        return tuning if device.type == "cuda" else cls()

    @property
    def levers(self) -> tuple[str, ...]:
        return tuple(f.name for f in fields(self) if getattr(self, f.name))

    @contextlib.contextmanager
    def kernels(self) -> Iterator[None]:
        """cuDNN's algorithm search on for what runs inside (read at each convolution call; a CUDA
        graph keeps the algorithms chosen before its capture). Restores the caller's setting."""
        if not self.cudnn_benchmark:
            yield
            return
        before = torch.backends.cudnn.benchmark
        torch.backends.cudnn.benchmark = True
        try:
            yield
        finally:
            torch.backends.cudnn.benchmark = before

    def autocast(self, device: torch.device) -> contextlib.AbstractContextManager[object]:
        """The generator forward's precision: bfloat16 autocast with ``bf16``, else unchanged. Without
        autocast's weight-cast cache: PyTorch's CUDA-graph notes ask for ``cache_enabled=False`` when a
        graph captures an autocast region (a cached cast would outlive the captured memory)."""
        if not self.bf16:
            return contextlib.nullcontext()
        return torch.autocast(device_type=device.type, dtype=torch.bfloat16, cache_enabled=False)
