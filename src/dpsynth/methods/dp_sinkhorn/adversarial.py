"""DP-Sinkhorn's adversarial variant (ICLR 2021, App. D.3) as a variant of the one step.

The records are split into k fixed partitions (the paper's batches-as-records); each step draws one
uniformly (the accountant's sampling without replacement, q = 1/k), and partition j's own feature
extractor phi_j appends ``alpha_a * phi_j(img) / ||phi_j(img)||`` to every point, so the squared L2
cost gains ``alpha_a^2 ||u(a) - u(b)||^2`` (the paper's concatenation). The generator's update is
:class:`~dpsynth.methods.dp_sinkhorn.step.FastStep`'s -- same loss, same sanitizer; then phi_j ascends
the full Sinkhorn loss ``S_p(X, Y) - W(Y, Y)`` on the detached points. phi_j sees partition j's
records, whose step is accounted as a whole, and only the generator is released. One run only (a
FastStep, K = 1: the partition drawn, hence the adversary, is the run's own) and eager only (no CUDA
graph: the partition, hence phi_j, changes).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from dpsynth.errors import ConfigError
from dpsynth.methods.dp_sinkhorn.batch import partition_batch
from dpsynth.methods.dp_sinkhorn.step import FastStep, StepSpec, step_loss
from dpsynth.methods.optim import make_optimizer
from dpsynth.nets.features import FeatureExtractor
from dpsynth.ot.sinkhorn import entropic_ot

__all__ = ["AdversarialStep"]


class AdversarialStep(FastStep):
    """The adversarial variant (see module docstring): FastStep with a partition batch, learned
    features on every point and the adversary's turn after the generator's update."""

    def __init__(self, G: nn.Module, opt: torch.optim.Optimizer, x_all: Tensor, y_all: Tensor, spec: StepSpec,
                 gens: dict[str, torch.Generator], *, partitions: Tensor, alpha_a: float, feature_lr: float,
                 param_sanitizer: Any = None) -> None:
        super().__init__(G, opt, x_all, y_all, spec, gens, cuda_graph=False, param_sanitizer=param_sanitizer)
        if spec.m != 0:
            raise ConfigError("AdversarialStep: the adversarial variant has no L1 cost mix (m must be 0)")
        if x_all.ndim != 4:
            raise ConfigError("AdversarialStep: the adversarial variant needs image records (N, C, H, W)")
        self.parts = partitions
        self.phis = [FeatureExtractor(x_all.shape[1]).to(device=self.device, dtype=x_all.dtype)
                     for _ in range(partitions.shape[0])]
        self.phi_opts: dict[int, torch.optim.Optimizer] = {}
        self.alpha_a, self.feature_lr = float(alpha_a), float(feature_lr)
        self._j = -1
        self._turn: tuple[Tensor, ...] | None = None

    def _batch(self, i: int) -> tuple[Tensor, Tensor, Tensor, int]:
        xs, ys, w, k, self._j = partition_batch(self.parts, self.x_all, self.y_all, self.gens["data"])
        self.phis[self._j].train()
        return xs, ys, w, k

    def _features(self, imgs: Tensor) -> Tensor:
        feat = self.phis[self._j](imgs).reshape(imgs.shape[0], -1)
        return self.alpha_a * feat / feat.norm(dim=-1, keepdim=True).clamp_min(1e-12)

    def _points(self, i: int, imgs: Tensor, labels: Tensor | None, xs: Tensor, ys: Tensor) -> tuple[Tensor, Tensor]:
        xg, yr = super()._points(i, imgs, labels, xs, ys)
        self._turn = (imgs.detach(), xs, xg.detach(), yr.detach())  # what the adversary's turn needs
        return torch.cat([xg, self._features(imgs)], -1), torch.cat([yr, self._features(xs)], -1)

    def _after_update(self) -> None:
        assert self._turn is not None
        imgs, xs, xg, yr = self._turn
        self._turn = None
        j = self._j
        if j not in self.phi_opts:
            self.phi_opts[j] = make_optimizer(self.phis[j].parameters(), "adam", lr=self.feature_lr)
        xa, ya = torch.cat([xg, self._features(imgs)], -1), torch.cat([yr, self._features(xs)], -1)
        w = torch.full((ya.shape[0],), 1.0 / ya.shape[0], dtype=ya.dtype, device=ya.device)
        s = self.spec
        s_adv = step_loss(s, self.cost, xa, ya, w) - entropic_ot(ya, ya, eps=s.eps, cost=self.cost, n_iter=s.n_iter,
                                                                  scaling=s.scaling, validate=False)
        self.phi_opts[j].zero_grad(set_to_none=True)
        (-s_adv).backward()
        self.phi_opts[j].step()

    def adversary_state(self) -> dict[str, Any]:
        """The feature extractors and their optimizers (part of the run's private checkpoint)."""
        return {"phis": [phi.state_dict() for phi in self.phis],
                "opts": {j: o.state_dict() for j, o in self.phi_opts.items()}}

    def load_adversary_state(self, state: dict[str, Any]) -> None:
        for phi, sd in zip(self.phis, state["phis"]):
            phi.load_state_dict(sd)
        for j, sd in state["opts"].items():
            self.phi_opts[j] = make_optimizer(self.phis[j].parameters(), "adam", lr=self.feature_lr)
            self.phi_opts[j].load_state_dict(sd)
