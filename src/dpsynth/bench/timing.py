"""Timing tools of the step benchmark: interleaved trials with the median rate, device
synchronisation, the generator's convolution FLOPs, a large matmul's FLOP/s (the device's
peak, for comparison) and :class:`GeneratorFloor`, the generator-only step no step can beat."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # imported where used: importing the harness does not pay for torch
    import torch


def _sync(dev: torch.device) -> None:
    import torch

    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def conv_flops(G: torch.nn.Module, z: torch.Tensor, labels: torch.Tensor | None) -> float:
    """Floating-point operations of G's convolutions for one forward, from the layer shapes
    (2 per multiply-add; transposed convolutions counted input-centric, border taps included)."""
    import torch

    total = 0.0

    def hook(mod: torch.nn.Module, inp: tuple[torch.Tensor, ...], out: torch.Tensor) -> None:
        nonlocal total
        k = mod.kernel_size[0] * mod.kernel_size[1] // mod.groups
        if isinstance(mod, torch.nn.ConvTranspose2d):
            total += 2.0 * inp[0].numel() * mod.out_channels * k
        else:
            total += 2.0 * out.numel() * mod.in_channels * k

    handles = [m.register_forward_hook(hook) for m in G.modules() if isinstance(m, (torch.nn.Conv2d, torch.nn.ConvTranspose2d))]
    try:
        with torch.no_grad():
            G(z, labels)
    finally:
        for h in handles:
            h.remove()
    return total


def matmul_rate(dev: torch.device, size: int = 2048, reps: int = 5) -> float:
    """FLOP/s of a ``size``-square float32 matmul on ``dev`` (a reference for the device's peak)."""
    import torch

    a = torch.randn(size, size, device=dev)
    b = torch.randn(size, size, device=dev)
    a @ b
    _sync(dev)
    t0 = time.perf_counter()
    for _ in range(reps):
        a @ b
    _sync(dev)
    return reps * 2.0 * size**3 / (time.perf_counter() - t0)


class GeneratorFloor:
    """Generator forward + trivial backward + Adam on the same batch shape (see
    :mod:`dpsynth.bench.dp_sinkhorn`). ``cuda_graph``: captured in one CUDA graph the way the fast
    step runs in production (latents drawn outside into static buffers; the optimizer must be
    capturable), so the floor and the step are measured alike. ``tuning``: the GPU levers it runs with."""

    def __init__(self, G: torch.nn.Module, opt: torch.optim.Optimizer, total: int, gen: torch.Generator, *,
                 cuda_graph: bool = False, tuning: Any = None) -> None:
        from dpsynth.methods.dp_sinkhorn.tuning import StepTuning

        self.G, self.opt, self.total, self.gen, self.cuda_graph = G, opt, total, gen, cuda_graph
        self.tuning = tuning or StepTuning()
        self._graph: Any = None
        self._static: tuple[torch.Tensor, torch.Tensor | None] | None = None

    def _body(self, z: torch.Tensor, labels: torch.Tensor | None) -> None:
        from dpsynth.methods.dp_sinkhorn.step import fast_forward

        with self.tuning.kernels():
            self.opt.zero_grad(set_to_none=False)
            fast_forward(self.G, z, labels, self.tuning).square().mean().backward()
        self.opt.step()

    def _capture(self, z: torch.Tensor, labels: torch.Tensor | None) -> None:
        from dpsynth.methods.dp_sinkhorn.graph import capture_step

        self._static = (z.clone(), None if labels is None else labels.clone())
        static = self._static
        self._graph, _ = capture_step(lambda: self._body(*static), keep=[*self.G.parameters(), *self.G.buffers()],
                                      optimizers=[self.opt])

    def __call__(self) -> None:
        z = self.G.sample_latent(self.total, self.gen)
        labels = self.G.sample_labels(self.total, self.gen)
        if not self.cuda_graph:
            self._body(z, labels)
            return
        if self._graph is None:
            self._capture(z, labels)
        assert self._static is not None
        self._static[0].copy_(z)
        if labels is not None and self._static[1] is not None:
            self._static[1].copy_(labels)
        self._graph.replay()


def interleaved(contenders: dict[str, Callable[[], Any]], steps: int, trials: int, warmup: int,
                dev: torch.device) -> dict[str, dict[str, Any]]:
    """Median steps/s over interleaved trials; each trial runs ``steps`` steps of every contender."""
    names = list(contenders)
    for name in names:
        for _ in range(warmup):
            contenders[name]()
        _sync(dev)
    rates: dict[str, list[float]] = {k: [] for k in names}
    for t in range(trials):
        for name in (names if t % 2 == 0 else names[::-1]):
            _sync(dev)
            t0 = time.perf_counter()
            for _ in range(steps):
                contenders[name]()
            _sync(dev)
            rates[name].append(steps / (time.perf_counter() - t0))
    return {k: {"steps_per_s": statistics.median(v), "trials": [round(r, 4) for r in v]} for k, v in rates.items()}
