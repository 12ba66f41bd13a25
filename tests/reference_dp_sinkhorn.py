"""An independent, slow, obviously-correct DP-Sinkhorn step: the reference the production step
(``dpsynth.methods.dp_sinkhorn.step.FastStep``) is held to.

Written from the papers' formulas (ICLR 2021 Alg. 1 / App. D; NeurIPS 2021 eq. for S_p) with plain
torch and loops, sharing NO code with ``dpsynth.ot``, ``dpsynth.privacy.sanitizers`` or the step:

* the real batch is exactly the Poisson members (no padding, no stacking);
* each OT term is its own log-domain Sinkhorn, annealed ``eps_k = max(eps, maxC * scaling^k)``,
  with the value taken at the final potential (the envelope theorem: autograd only through the
  last soft c-transform);
* the sanitizer is a tensor hook: the first n image gradients clipped as ONE vector to C plus
  N(0, (2 C sigma)^2) noise, the n' extra ones clipped only; ``clip_param`` instead clips the
  whole parameter gradient (grad_theta ablation).

It consumes the run's three generators in the order the step does (batch draw, then latents and
labels, then noise), so, given the same seeds, both take the same steps; float64 makes the
comparison exact to round-off. Only for tests: it is slow and checks nothing.
"""

from __future__ import annotations

import math

import torch


def _cost(x: torch.Tensor, y: torch.Tensor, m: float) -> torch.Tensor:
    d = x[:, None, :] - y[None, :, :]
    return (d * d).sum(-1) + (m * d.abs().sum(-1) if m else 0.0)


def entropic_ot(x: torch.Tensor, y: torch.Tensor, eps: float, n_iter: int, scaling: float | None,
                m: float = 0.0) -> torch.Tensor:
    """OT_eps between uniform clouds, log-domain Sinkhorn, envelope-theorem gradient."""
    c = _cost(x, y, m)
    cd = c.detach()
    log_a = torch.full((x.shape[0],), -math.log(x.shape[0]), dtype=c.dtype)
    log_b = torch.full((y.shape[0],), -math.log(y.shape[0]), dtype=c.dtype)
    f, g = torch.zeros_like(log_a), torch.zeros_like(log_b)
    cmax = max(float(cd.max()), eps)
    for k in range(n_iter):
        e = eps if scaling is None else max(eps, cmax * scaling**k)
        f = -e * torch.logsumexp(log_b[None, :] + (g[None, :] - cd) / e, dim=1)
        g = -e * torch.logsumexp(log_a[:, None] + (f[:, None] - cd) / e, dim=0)
    f_last = -eps * torch.logsumexp(log_b[None, :] + (g[None, :] - c) / eps, dim=1)  # carries autograd
    return (log_a.exp() * f_last).sum() + (log_b.exp() * g).sum()


def _embed(points: torch.Tensor, labels: torch.Tensor, num_classes: int, alpha_c: float) -> torch.Tensor:
    onehot = torch.nn.functional.one_hot(labels, num_classes).to(points.dtype)
    return torch.cat([points.reshape(points.shape[0], -1), alpha_c * onehot], dim=1)


def _clip(v: torch.Tensor, bound: float) -> torch.Tensor:
    return v * min(1.0, bound / max(float(v.norm()), 1e-300))


def reference_step(G, opt, x_all, y_all, gens, *, n, n_extra, q, num_classes, alpha_c, eps, n_iter, scaling,
                   m=0.0, clip=0.5, sigma=None, clip_param=None) -> tuple[float, int]:
    """One DP-Sinkhorn step (image sanitizer when ``sigma`` and not ``clip_param``; the parameter
    sanitizer with bound ``clip_param``; none when ``sigma`` is None). Returns (loss, k)."""
    mask = torch.rand(x_all.shape[0], generator=gens["data"]) < q
    xs, ys = x_all[mask], y_all[mask]
    k = int(mask.sum())
    z = G.sample_latent(n + n_extra, gens["model"])
    labels = G.sample_labels(n, gens["model"])  # n uniform labels; the n' extra images reuse the first n'
    labels = torch.cat([labels, labels[:n_extra]])  # (the authors' script: the extra images get gen_y[:n'])
    imgs = G(z, labels)
    if sigma is not None and clip_param is None:
        def hook(grad: torch.Tensor) -> torch.Tensor:
            flat = grad.reshape(grad.shape[0], -1).double()
            priv = _clip(flat[:n].reshape(-1), clip)
            noise = torch.randn((1, priv.numel()), generator=gens["noise"], dtype=torch.float64)[0] * 2 * clip * sigma
            extra = _clip(flat[n:].reshape(-1), clip) if n_extra else flat[n:].reshape(-1)
            return torch.cat([priv + noise, extra]).reshape(grad.shape).to(grad.dtype)

        imgs.register_hook(hook)
    xg = _embed(imgs, labels, num_classes, alpha_c)
    x, x2 = xg[:n], xg[n_extra:n + n_extra]
    loss = -entropic_ot(x, x2, eps, n_iter, scaling, m)
    if k:  # an empty Poisson batch: no real term, but the step (and its noise) still counts
        loss = loss + 2.0 * entropic_ot(x, _embed(xs, ys, num_classes, alpha_c), eps, n_iter, scaling, m)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    if sigma is not None and clip_param is not None:
        params = [p for p in G.parameters() if p.requires_grad]
        flat = _clip(torch.cat([p.grad.reshape(-1).double() for p in params]), clip_param)
        flat = flat + torch.randn((1, flat.numel()), generator=gens["noise"], dtype=torch.float64)[0] \
            * 2 * clip_param * sigma
        i = 0
        for p in params:
            p.grad = flat[i:i + p.numel()].view_as(p).to(p.dtype).clone()
            i += p.numel()
    opt.step()
    return float(loss.detach()), k
