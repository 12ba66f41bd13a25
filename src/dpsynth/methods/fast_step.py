"""A fast DP-Sinkhorn training step with the trainer's math (DESIGN 10).

The step is tiny (60 generated vs ~50 real points), so its cost is overhead plus the
generator's convolutions. What this module changes, and why each change keeps the math:

* **The loss** is :func:`dpsynth.ot.losses.semi_debiased_loss`: one stacked Sinkhorn solve
  for both OT terms, through the one loop of ``ot/sinkhorn.py``, never reading the host.
* **The generator forward** (DCGAN only) runs in ``channels_last`` and replaces the last
  ``ConvTranspose2d(k3, s1, p1)`` -- which PyTorch runs on a slow col2im path on CPU -- by
  the equivalent ``Conv2d`` with transposed, flipped weights. Both use the generator's own
  parameters, so its state dict and optimizer are untouched.
* **The sanitizer** is :class:`~dpsynth.privacy.sanitizers.WholeBatchSanitizer` -- the one
  the audit checks -- with its check deferred: its release never syncs with the host, and
  :meth:`FastStep.check` reads its flag (one sync) and refuses with PrivacyError. On CPU the
  check runs inside every step, before the optimizer moves.
* **On CUDA** (untested on hardware here: no GPU in the development environment) the real
  batch has a fixed capacity, filled without host syncs (cumsum + scatter), and the whole
  step -- forward, loss, sanitizer, backward, Adam(capturable) -- is captured in one CUDA
  graph; latents, labels, the Poisson draw and the noise are drawn outside the graph into
  static buffers from the same generators.

Nothing here knows about checkpoints or logs: :class:`FastStep` is a drop-in replacement
for ``dp_sinkhorn._step`` given the same generator, optimizer, data and torch.Generators.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from dpsynth.errors import ConfigError, PrivacyError
from dpsynth.nets.dcgan import DCGANGenerator
from dpsynth.ot.costs import MixedL2L1Cost
from dpsynth.ot.losses import semi_debiased_loss
from dpsynth.ot.sinkhorn import check_solver_args
from dpsynth.privacy.sanitizers import WholeBatchSanitizer

__all__ = [
    "StepSpec",
    "FastStep",
    "fast_forward",
    "poisson_fixed",
    "poisson_capacity",
]


@dataclass(frozen=True)
class StepSpec:
    """Everything one DP-Sinkhorn step needs besides tensors (mirrors ``dp_sinkhorn.train``)."""

    n: int  # generated points that meet real data (= batch_size)
    n_extra: int  # n' = floor(p n)
    num_classes: int | None  # None: unconditional (no label embedding)
    alpha_c: float
    eps: float  # entropic temperature, in the cost's units
    n_iter: int
    scaling: float | None
    m: float  # L1 weight of the ground cost (0: pure squared L2)
    clip: float
    sigma: float | None  # None: non-private (no sanitizer)
    q: float  # Poisson sampling rate

    def __post_init__(self) -> None:
        check_solver_args(self.eps, self.n_iter, self.scaling, None)
        if self.n < 1 or self.n_extra < 0 or self.n_extra > self.n:
            raise ConfigError(f"StepSpec: need n >= 1 and 0 <= n' <= n, got n={self.n}, n'={self.n_extra}")
        if not (0.0 < self.q <= 1.0):
            raise ConfigError(f"StepSpec: sampling rate q must lie in (0, 1], got q={self.q}")
        if not (self.m >= 0 and math.isfinite(self.m)):
            raise ConfigError(f"StepSpec: cost mixing weight m must be finite and >= 0, got m={self.m}")
        if self.sigma is not None and not (self.sigma >= 0 and self.clip > 0):
            raise ConfigError(f"StepSpec: need sigma >= 0 and clip > 0, got sigma={self.sigma}, clip={self.clip}")


# --------------------------------------------------------------------------- generator


def _last_as_conv(x: Tensor, ct: nn.ConvTranspose2d) -> Tensor:
    """``ConvTranspose2d(k, stride 1, padding p)`` == ``Conv2d(k, padding k-1-p)`` with the
    in/out axes swapped and the kernel flipped (the adjoint of a correlation)."""
    w = ct.weight.transpose(0, 1).flip(-1, -2)
    pad = ct.kernel_size[0] - 1 - ct.padding[0]
    return F.conv2d(x, w, ct.bias, padding=pad)


def fast_forward(G: nn.Module, z: Tensor, labels: Tensor | None) -> Tensor:
    """``G(z, labels)`` computed faster where we know how; the same function of G's parameters.

    For :class:`DCGANGenerator`: channels_last activations, and a stride-1 last transposed
    convolution run as a plain convolution. Other generators use their own forward.
    """
    if not isinstance(G, DCGANGenerator):
        return G(z, labels)
    G._check_inputs(z, labels)
    h = z if G.embed is None else torch.cat([z, G.embed(labels)], dim=1)
    h = h[:, :, None, None]
    layers = list(G.net)
    for i, layer in enumerate(layers):
        last_conv = i == len(layers) - 2 and isinstance(layer, nn.ConvTranspose2d)
        if last_conv and layer.stride == (1, 1) and layer.output_padding == (0, 0) and layer.dilation == (1, 1):
            h = _last_as_conv(h, layer)
        else:
            h = layer(h)
        if i == 0 and h.device.type == "cpu":
            h = h.contiguous(memory_format=torch.channels_last)
    return h.contiguous()


# --------------------------------------------------------------------------- Poisson batches


def poisson_capacity(n_records: int, q: float, tail: float = 1e-15) -> int:
    """Smallest multiple of 16 that a Binomial(N, q) batch exceeds with probability < ``tail``
    per step (Chernoff bound), so a fixed-capacity buffer essentially never overflows; an
    overflow is still detected and refused by :meth:`FastStep.check`."""
    mu = n_records * q
    k = mu + math.sqrt(2.0 * mu * math.log(1.0 / tail)) + math.log(1.0 / tail)  # Bernstein-type bound
    return int(min(n_records, max(16, -(-int(math.ceil(k)) // 16) * 16)))


def poisson_fixed(x_all: Tensor, y_all: Tensor, q: float, gen: torch.Generator, capacity: int
                  ) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """Poisson sample into ``capacity`` slots without host syncs: (xs, ys, w, k, overflow).

    The same ``torch.rand(N) < q`` draw as the trainer; members are scattered to their rank
    (cumsum) and the weights are ``1/k`` on the first ``k`` slots, 0 elsewhere.
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


# --------------------------------------------------------------------------- the step


def _embed(points: Tensor, labels: Tensor | None, num_classes: int | None, alpha_c: float) -> Tensor:
    flat = points.reshape(points.shape[0], -1)
    if labels is None or num_classes is None:
        return flat
    onehot = (labels.unsqueeze(-1) == torch.arange(num_classes, device=labels.device)).to(flat.dtype)
    return torch.cat([flat, alpha_c * onehot], dim=-1)


class FastStep:
    """One DP-Sinkhorn step, like ``dp_sinkhorn._step`` for the image sanitizer, the parameter
    sanitizer (``param_sanitizer``, eager only) or none.

    ``gens`` holds the trainer's three torch.Generators (``model``, ``data``, ``noise``),
    consumed in the trainer's order, so a run equals ``dp_sinkhorn.train`` given the same seed
    (up to float rounding: the stacked solve and the rewritten last layer round differently).
    Call it to take a step; it returns ``(loss, k)`` as device tensors (no host sync on CUDA).
    """

    def __init__(self, G: nn.Module, opt: torch.optim.Optimizer, x_all: Tensor, y_all: Tensor, spec: StepSpec,
                 gens: dict[str, torch.Generator], *, cuda_graph: bool | None = None,
                 capacity: int | None = None, param_sanitizer: Any = None) -> None:
        self.G, self.opt, self.x_all, self.y_all, self.spec, self.gens = G, opt, x_all, y_all, spec, gens
        self.device = x_all.device
        self.param_sanitizer = param_sanitizer  # grad_theta ablation: clip+noise the parameter gradient
        if param_sanitizer is not None and spec.sigma is not None:
            raise ConfigError("FastStep: the image sanitizer (spec.sigma) and a parameter sanitizer are exclusive")
        self.cuda_graph = (self.device.type == "cuda") if cuda_graph is None else cuda_graph
        if self.cuda_graph and self.device.type != "cuda":
            raise ConfigError("FastStep: cuda_graph=True needs CUDA tensors")
        if self.cuda_graph and param_sanitizer is not None:
            raise ConfigError("FastStep: the parameter sanitizer runs on the host; use cuda_graph=False")
        self.capacity = capacity or poisson_capacity(x_all.shape[0], spec.q)
        self.conditional = getattr(G, "num_classes", None) is not None
        self.cost = MixedL2L1Cost(spec.m)  # m = 0: the pure squared L2 cost
        self.overflow = torch.zeros((), dtype=torch.bool, device=self.device)
        self.sanitizer: WholeBatchSanitizer | None = None
        if spec.sigma is not None:
            buf = None
            if self.cuda_graph:
                n_priv = spec.n * math.prod(getattr(G, "output_shape", ()))
                buf = torch.zeros((1, n_priv), dtype=torch.float64, device=self.device)
            self.sanitizer = WholeBatchSanitizer(spec.clip, spec.sigma, spec.n, gens["noise"], defer_check=True,
                                                 noise_buffer=buf)
        self._graph: Any = None

    # -- pieces shared by the eager and captured paths
    def _draw(self) -> tuple[Tensor, Tensor | None]:
        total = self.spec.n + self.spec.n_extra
        z = self.G.sample_latent(total, self.gens["model"])
        labels = self.G.sample_labels(total, self.gens["model"])
        return z, labels

    def _loss_backward(self, z: Tensor, labels: Tensor | None, xs: Tensor, ys: Tensor, w: Tensor) -> Tensor:
        s = self.spec
        imgs = fast_forward(self.G, z, labels)
        if self.sanitizer is not None:
            imgs = self.sanitizer.attach(imgs)
        xg = _embed(imgs, labels, s.num_classes if self.conditional else None, s.alpha_c)
        yr = _embed(xs, ys if self.conditional else None, s.num_classes if self.conditional else None, s.alpha_c)
        loss = semi_debiased_loss(xg, yr, real_weights=w, n=s.n, n_extra=s.n_extra, eps=s.eps, cost=self.cost,
                                  n_iter=s.n_iter, scaling=s.scaling, validate=False)
        self.opt.zero_grad(set_to_none=False)
        loss.backward()
        return loss.detach()

    # -- eager (CPU, or CUDA without graphs)
    def _eager(self) -> tuple[Tensor, Tensor]:
        from dpsynth.methods.dp_sinkhorn import _poisson_batch  # same layer; the trainer's exact draw

        xs, ys, w, k = _poisson_batch(self.x_all, self.y_all, self.spec.q, self.gens["data"])
        z, labels = self._draw()
        loss = self._loss_backward(z, labels, xs, ys, w)
        if self.param_sanitizer is not None:
            self.param_sanitizer.sanitize_()  # refuses a non-finite gradient itself (PrivacyError)
        if self.device.type == "cpu":
            self.check()  # free on CPU: refuse before the optimizer moves, like the trainer
        self.opt.step()
        return loss, torch.tensor(k)

    # -- CUDA graph
    def _capture(self) -> None:
        s = self.spec
        xs, ys, w, k, _ = poisson_fixed(self.x_all, self.y_all, s.q, torch.Generator(self.device).manual_seed(0),
                                        self.capacity)
        z, labels = self._draw_static_like()
        st = self._static = {"xs": xs.clone(), "ys": ys.clone(), "w": w.clone(), "k": k.clone(), "z": z,
                             "labels": labels}
        if any(not g.get("capturable", False) for g in self.opt.param_groups):
            raise ConfigError("FastStep(cuda_graph=True) needs an optimizer built with capturable=True")
        # Warm-up steps (allocator, cuDNN plans, Adam state) change weights, BN statistics and
        # Adam moments: snapshot them and restore in place afterwards, so the first replayed
        # step starts from exactly the state the caller handed us.
        fresh_opt = not self.opt.state
        keep = [t for t in (*self.G.parameters(), *self.G.buffers())]
        keep += [v for st in self.opt.state.values() for v in st.values() if isinstance(v, Tensor)]
        saved = [t.detach().clone() for t in keep]
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                self._loss_backward(z, labels, st["xs"], st["ys"], st["w"])
                self.opt.step()
        torch.cuda.current_stream().wait_stream(side)
        with torch.no_grad():
            for t, v in zip(keep, saved):
                t.copy_(v)
            if fresh_opt:  # Adam's fresh state is step 0 and zero moments
                for st_ in self.opt.state.values():
                    for v in st_.values():
                        if isinstance(v, Tensor):
                            v.zero_()
        if self.sanitizer is not None:
            self.sanitizer.reset_check()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            self._loss_out = self._loss_backward(z, labels, st["xs"], st["ys"], st["w"])
            self.opt.step()
        self._graph = graph

    def _draw_static_like(self) -> tuple[Tensor, Tensor | None]:
        s = self.spec
        total = s.n + s.n_extra
        z = torch.zeros((total, self.G.latent_dim), device=self.device)
        labels = torch.zeros(total, dtype=torch.int64, device=self.device) if self.conditional else None
        return z, labels

    def _graphed(self) -> tuple[Tensor, Tensor]:
        if self._graph is None:
            self._capture()
        st = self._static
        xs, ys, w, k, over = poisson_fixed(self.x_all, self.y_all, self.spec.q, self.gens["data"], self.capacity)
        st["xs"].copy_(xs)
        st["ys"].copy_(ys)
        st["w"].copy_(w)
        st["k"].copy_(k)
        self.overflow |= over
        z, labels = self._draw()
        st["z"].copy_(z)
        if labels is not None:
            st["labels"].copy_(labels)
        if self.sanitizer is not None:
            self.sanitizer.draw_noise_()
        self._graph.replay()
        return self._loss_out, st["k"]

    def __call__(self) -> tuple[Tensor, Tensor]:
        return self._graphed() if self.cuda_graph else self._eager()

    def check(self) -> None:
        """Refuse (PrivacyError) if any release saw a non-finite gradient or a batch overflowed."""
        if self.sanitizer is not None:
            self.sanitizer.check()
        if bool(self.overflow):
            raise PrivacyError(f"a Poisson batch exceeded the fixed capacity {self.capacity}; "
                               "the step did not use the whole sample")

    def stats(self) -> dict[str, float]:
        """Last release's norms (one host sync: call at log time only)."""
        last = self.sanitizer.last if self.sanitizer is not None else None
        if last is None:
            return {"clean_norm": float("nan"), "noise_norm": 0.0}
        return {"clean_norm": last.clean_norm, "noise_norm": last.noise_norm}
