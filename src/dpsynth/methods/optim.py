"""The one optimizer factory every generator's training uses (DP-Sinkhorn, its batched sweep and
adversary, GS-WGAN, the entropic WGAN), so an optimizer setting means the same in every method."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import torch

from dpsynth.errors import ConfigError

OPTIMIZERS = ("adam", "rmsprop", "sgd")


def make_optimizer(params: Iterable[torch.Tensor], kind: str, *, lr: float, betas: Sequence[float] = (0.9, 0.999),
                   weight_decay: float = 0.0, capturable: bool = False, fused: bool = False) -> torch.optim.Optimizer:
    """``kind`` in adam | rmsprop | sgd. ``capturable`` (CUDA only) keeps Adam's/RMSprop's step
    counter on the device, which a CUDA graph needs; the update is the same (SGD has no such state).
    ``fused`` (Adam only): torch's one-kernel Adam, the same update up to rounding order."""
    if fused and kind != "adam":
        raise ConfigError(f"the fused optimizer is Adam's; optimizer {kind!r} has none")
    if kind == "adam":
        return torch.optim.Adam(params, lr=lr, betas=(float(betas[0]), float(betas[1])), weight_decay=weight_decay,
                                capturable=capturable, **({"fused": True} if fused else {}))
    if kind == "rmsprop":
        return torch.optim.RMSprop(params, lr=lr, weight_decay=weight_decay, capturable=capturable)
    if kind == "sgd":
        return torch.optim.SGD(params, lr=lr, weight_decay=weight_decay)
    raise ConfigError(f"unknown optimizer {kind!r}; choose one of {', '.join(OPTIMIZERS)}")
