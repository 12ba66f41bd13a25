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
    :mod:`dpsynth.bench.dp_sinkhorn`)."""

    def __init__(self, G: torch.nn.Module, opt: torch.optim.Optimizer, total: int, gen: torch.Generator) -> None:
        self.G, self.opt, self.total, self.gen = G, opt, total, gen

    def __call__(self) -> None:
        from dpsynth.methods.dp_sinkhorn.step import fast_forward

        z = self.G.sample_latent(self.total, self.gen)
        labels = self.G.sample_labels(self.total, self.gen)
        self.opt.zero_grad(set_to_none=False)
        fast_forward(self.G, z, labels).square().mean().backward()
        self.opt.step()


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
