"""Which private records one DP-Sinkhorn step sees: a Poisson sample (each record independently
with probability q, the sampling the accountant assumes) or, for the adversarial variant, one of
k fixed partitions. Every batch comes back as ``(xs, ys, w, k)``: records, labels, weights
(``1/k`` on the k members, 0 on padding) and the member count. These draws are secret: the
generator they take is the run's ``NoiseSource`` one.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

#: Pad an eager Poisson batch to a multiple of this many points (zero weights): few distinct shapes.
BUCKET = 16


def poisson_batch(x_all: Tensor, y_all: Tensor, q: float, gen: torch.Generator) -> tuple[Tensor, Tensor, Tensor, int]:
    """Each record independently with probability q, padded with zero-weight points to a bucket.

    An empty batch (k = 0) is a valid step: all weights are 0 and the loss's real term is 0."""
    mask = torch.rand(x_all.shape[0], generator=gen, device=x_all.device) < q
    idx = mask.nonzero().squeeze(1)
    k = int(idx.numel())
    size = max(BUCKET, -(-k // BUCKET) * BUCKET)
    xs = torch.zeros((size, *x_all.shape[1:]), dtype=x_all.dtype, device=x_all.device)
    ys = torch.zeros(size, dtype=y_all.dtype, device=y_all.device)
    w = torch.zeros(size, dtype=x_all.dtype, device=x_all.device)
    if k:
        xs[:k], ys[:k], w[:k] = x_all[idx], y_all[idx], 1.0 / k
    return xs, ys, w, k


def poisson_capacity(n_records: int, q: float, tail: float = 1e-15) -> int:
    """Smallest multiple of 16 that a Binomial(N, q) batch exceeds with probability < ``tail``
    per step (Chernoff bound), so a fixed-capacity buffer essentially never overflows; an
    overflow is still detected and refused by the step's check."""
    mu = n_records * q
    k = mu + math.sqrt(2.0 * mu * math.log(1.0 / tail)) + math.log(1.0 / tail)  # Bernstein-type bound
    return int(min(n_records, max(16, -(-int(math.ceil(k)) // 16) * 16)))


def poisson_fixed(x_all: Tensor, y_all: Tensor, q: float, gen: torch.Generator, capacity: int
                  ) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """Poisson sample into ``capacity`` slots without host syncs (a CUDA graph's batch):
    (xs, ys, w, k, overflow).

    The same ``torch.rand(N) < q`` draw as :func:`poisson_batch`; members are scattered to their
    rank (cumsum) and the weights are ``1/k`` on the first ``k`` slots, 0 elsewhere.
    """
    n = x_all.shape[0]
    mask = torch.rand(n, generator=gen, device=x_all.device) < q
    rank = torch.cumsum(mask.to(torch.int64), 0) - 1
    k = mask.sum()
    slot = torch.where(mask & (rank < capacity), rank, torch.full_like(rank, capacity))  # dump slot
    idx = torch.zeros(capacity + 1, dtype=torch.int64, device=x_all.device)
    idx.scatter_(0, slot, torch.arange(n, device=x_all.device))
    idx = idx[:capacity]
    live = torch.arange(capacity, device=x_all.device) < k
    xs = x_all[idx] * live.reshape(-1, *([1] * (x_all.ndim - 1))).to(x_all.dtype)
    ys = torch.where(live, y_all[idx], torch.zeros_like(y_all[idx]))
    w = live.to(x_all.dtype) / k.clamp_min(1).to(x_all.dtype)
    return xs, ys, w, k, k > capacity


def partition_batch(parts: Tensor, x_all: Tensor, y_all: Tensor, gen: torch.Generator
                    ) -> tuple[Tensor, Tensor, Tensor, int, int]:
    """Adversarial variant: one of the k fixed partitions, drawn uniformly; (xs, ys, w, k, j)
    with ``j`` the partition (its feature extractor plays the adversary this step)."""
    j = int(torch.randint(parts.shape[0], (1,), generator=gen, device=x_all.device))
    idx = parts[j]
    k = int(idx.numel())
    w = torch.full((k,), 1.0 / k, dtype=x_all.dtype, device=x_all.device)
    return x_all[idx], y_all[idx], w, k, j
