"""The authors' published DP-Sinkhorn step (nv-tlabs/DP-Sinkhorn_code, sinkhorn_poisson.py),
modelled as the baseline the fast step is timed against: :class:`ReferenceStep` and the
published code's default cost, :func:`published_cost`. It trains nothing that is released.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # imported where used: importing the harness does not pay for torch
    import torch


def published_cost(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """The published code's default p=2 cost: ``||x||^2 - 2 x.y + ||y||^2`` (no 1/2, no clamp)."""
    if x.dim() == 2:
        return (x * x).sum(-1).unsqueeze(1) - 2 * x @ y.T + (y * y).sum(-1).unsqueeze(0)
    return (x * x).sum(-1).unsqueeze(2) - 2 * x @ y.transpose(1, 2) + (y * y).sum(-1).unsqueeze(1)


class ReferenceStep:
    """A model of the authors' published per-step code (nv-tlabs/DP-Sinkhorn_code; see
    :mod:`dpsynth.bench.dp_sinkhorn`): the baseline the fast step's speed-up is measured against.
    It is not a DP-Sinkhorn path of this project -- it trains nothing that is released -- and
    lives here, in the benchmark."""

    def __init__(self, G: torch.nn.Module, opt: torch.optim.Optimizer, x_all: torch.Tensor, y_all: torch.Tensor,
                 s: dict[str, Any], gens: dict[str, torch.Generator]) -> None:
        from geomloss import SamplesLoss

        self.G, self.opt, self.x_all, self.y_all, self.s, self.gens = G, opt, x_all, y_all, s, gens
        self.n, self.n_extra = s["batch_size"], int(math.floor(s["p"] * s["batch_size"] + 1e-9))
        self.loss_fn = SamplesLoss(loss="sinkhorn", debias=False, p=2, blur=math.sqrt(s["eps"]), scaling=0.5,
                                   backend="tensorized", cost=published_cost)
        self.last: dict[str, float] = {}

    def _hook(self, g: torch.Tensor) -> torch.Tensor:
        import torch

        n, s = self.n, self.s
        priv, extra = g[:n], g[n:]
        clean = priv.norm().item()
        priv = priv * min(s["clip"] / (clean + 1e-6), 1.0)
        noise = (torch.randn(priv.shape, generator=self.gens["noise_cpu"]) * s["clip"] * s["sigma"] * 2).to(g.device)
        self.last["gnorm_clean"] = clean
        self.last["gnorm_noise"] = noise.norm().item()
        en = extra.norm().item()
        extra = extra * min(s["clip"] / (en + 1e-6), 1.0)
        return torch.cat([priv + noise, extra])

    def __call__(self) -> float:
        import torch

        s, G, n, ne = self.s, self.G, self.n, self.n_extra
        mask = torch.rand(self.x_all.shape[0], generator=self.gens["data"], device=self.x_all.device) < self.s["q"]
        idx = mask.nonzero().squeeze(1)
        img, label = self.x_all[idx], self.y_all[idx]
        z = G.sample_latent(n + ne, self.gens["model"])
        gl = G.sample_labels(n, self.gens["model"])
        gl = torch.cat([gl, gl[:ne]])  # the published script: the n' extra images take the first n' labels
        gen = G(z, gl)
        gen.register_hook(self._hook)
        nc = s["num_classes"]
        gen_feat = torch.cat([gen.view(n + ne, -1), s["alpha_c"] * torch.nn.functional.one_hot(gl, nc).float()], 1)
        real_feat = torch.cat([img.view(img.shape[0], -1), s["alpha_c"] * torch.nn.functional.one_hot(label, nc).float()], 1)
        loss = -self.loss_fn(gen_feat[:n], gen_feat[ne:])
        if img.shape[0]:
            loss = loss + 2 * self.loss_fn(gen_feat[:n], real_feat)
        self.last["g_loss"] = loss.data.cpu().item()
        self.opt.zero_grad()
        loss.backward()
        self.opt.step()
        return self.last["g_loss"]
