"""THE DP-Sinkhorn step: every variant, the CUDA graph, the batched sweep and the benchmark run it.

One step: draw the real batch (Poisson at q = B / N, or one fixed partition for the adversarial
variant), generate a FIXED batch of n + n' images (n = B, n' = floor(p n)), embed
(image, alpha_c * onehot), compute the semi-debiased loss ``2 W(X[:n], Y) - W(X[:n],
X[n':n+n'])`` and back-propagate through the sanitizer, which clips the gradient w.r.t. the
first n images as one tensor to C and adds N(0, (2 C sigma)^2) noise (the n' images, which never
meet real data, are clipped only). The ``param`` ablation instead clips and noises the whole
parameter gradient. An empty Poisson batch still counts as a step: the real term contributes
no gradient, the sanitizer still releases noise, and the accountant charges it.

The step is tiny (60 generated vs ~50 real points), so its cost is overhead plus the
generator's convolutions. What keeps it fast, and why each choice keeps the math:

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

:class:`AdversarialStep` is the ICLR adversarial variant as a subclass: its batch is a
partition, its points carry learned features, and after the generator's update the
partition's feature extractor ascends the loss. Nothing here knows about checkpoints or
logs (``run.py``). tests/reference_dp_sinkhorn.py holds this step to an independent,
plain float64 formula.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from dpsynth.errors import ConfigError, PrivacyError
from dpsynth.methods.dp_sinkhorn.batch import partition_batch, poisson_batch, poisson_capacity, poisson_fixed
from dpsynth.methods.dp_sinkhorn.graph import capture_step
from dpsynth.methods.dp_sinkhorn.tuning import StepTuning
from dpsynth.methods.optim import make_optimizer
from dpsynth.nets.dcgan import DCGANGenerator
from dpsynth.nets.features import FeatureExtractor
from dpsynth.ot.costs import MixedL2L1Cost
from dpsynth.ot.losses import semi_debiased_loss
from dpsynth.ot.sinkhorn import check_solver_args, entropic_ot
from dpsynth.privacy.sanitizers import WholeBatchSanitizer

__all__ = ["StepSpec", "StepTuning", "FastStep", "AdversarialStep", "fast_forward", "embed_points", "step_loss"]


@dataclass(frozen=True)
class StepSpec:
    """Everything one DP-Sinkhorn step needs besides tensors (``run.py`` builds it from the plan)."""

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


def fast_forward(G: nn.Module, z: Tensor, labels: Tensor | None, tuning: StepTuning | None = None,
                 vmapped: bool = False) -> Tensor:
    """``G(z, labels)`` computed faster where we know how; the same function of G's parameters.

    For :class:`DCGANGenerator`: channels_last activations (on the CPU always; on a GPU with the
    ``channels_last`` lever), and a stride-1 last transposed convolution run as a plain convolution.
    Other generators use their own forward. The ``bf16`` lever (``tuning.py``) runs it under
    bfloat16 autocast and hands back float32 images, so everything after it stays float32.
    ``vmapped`` (the batched sweep's vmap): the activations keep vmap's layout -- functorch cannot
    query a channels_last one, and it lays out the members' grouped convolutions itself.
    """
    tuning = tuning or StepTuning()
    with tuning.autocast(z.device):
        if isinstance(G, DCGANGenerator):
            out = _dcgan_forward(G, z, labels, None if vmapped else tuning.channels_last)
        else:
            out = G(z, labels)
    return out.float() if out.dtype == torch.bfloat16 else out


def _dcgan_forward(G: DCGANGenerator, z: Tensor, labels: Tensor | None, channels_last: bool | None) -> Tensor:
    """``channels_last``: True/False as the lever says (the CPU always converts); None: never."""
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
        if i == 0 and channels_last is not None and (h.device.type == "cpu" or channels_last):
            h = h.contiguous(memory_format=torch.channels_last)
    return h if channels_last is None else h.contiguous()


# --------------------------------------------------------------------------- the step


def embed_points(points: Tensor, labels: Tensor | None, num_classes: int | None, alpha_c: float) -> Tensor:
    """Joint (record, alpha_c * onehot(label)) space of (N, ...) records; unconditional: the record alone."""
    flat = points.reshape(points.shape[0], -1)
    if labels is None or num_classes is None:
        return flat
    onehot = (labels.unsqueeze(-1) == torch.arange(num_classes, device=labels.device)).to(flat.dtype)
    return torch.cat([flat, alpha_c * onehot], dim=-1)


def step_loss(spec: StepSpec, cost: MixedL2L1Cost, xg: Tensor, yr: Tensor, w: Tensor) -> Tensor:
    """The step's loss on embedded points: ``xg`` (..., n + n', D) generated, ``yr`` (..., M, D)
    real with weights ``w``; a leading axis holds a batched sweep's members."""
    return semi_debiased_loss(xg, yr, real_weights=w, n=spec.n, n_extra=spec.n_extra, eps=spec.eps, cost=cost,
                              n_iter=spec.n_iter, scaling=spec.scaling, validate=False)


class FastStep:
    """One DP-Sinkhorn step with the image sanitizer (``spec.sigma``), the parameter sanitizer
    (``param_sanitizer``, eager only) or none.

    ``gens`` holds the run's three torch.Generators (``model``: latents and labels, seeded;
    ``data``: the batch draw, secret; ``noise``: the sanitizer's noise, secret), each consumed
    in the same order every step, so a resumed run continues exactly. Call it to take a step; it
    returns ``(loss, k)`` as device tensors (no host sync on CUDA). ``tuning``: the GPU speed levers
    it runs with (``tuning.py``; the optimizer's ``fused_adam`` is the caller's to build).
    """

    def __init__(self, G: nn.Module, opt: torch.optim.Optimizer, x_all: Tensor, y_all: Tensor, spec: StepSpec,
                 gens: dict[str, torch.Generator], *, cuda_graph: bool | None = None,
                 capacity: int | None = None, param_sanitizer: Any = None, tuning: StepTuning | None = None) -> None:
        self.G, self.opt, self.x_all, self.y_all, self.spec, self.gens = G, opt, x_all, y_all, spec, gens
        self.tuning = tuning or StepTuning()
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

    # -- pieces shared by the eager and captured paths (and the variants)
    def _draw(self) -> tuple[Tensor, Tensor | None]:
        total = self.spec.n + self.spec.n_extra
        z = self.G.sample_latent(total, self.gens["model"])
        labels = self.G.sample_labels(total, self.gens["model"])
        return z, labels

    def _batch(self) -> tuple[Tensor, Tensor, Tensor, int]:
        """The real batch of an eager step: a Poisson sample (each record with probability q)."""
        return poisson_batch(self.x_all, self.y_all, self.spec.q, self.gens["data"])

    def _points(self, imgs: Tensor, labels: Tensor | None, xs: Tensor, ys: Tensor) -> tuple[Tensor, Tensor]:
        """Generated and real points in the space the loss compares them in."""
        nc = self.spec.num_classes if self.conditional else None
        return (embed_points(imgs, labels, nc, self.spec.alpha_c),
                embed_points(xs, ys if self.conditional else None, nc, self.spec.alpha_c))

    def _loss_backward(self, z: Tensor, labels: Tensor | None, xs: Tensor, ys: Tensor, w: Tensor) -> Tensor:
        with self.tuning.kernels():
            imgs = fast_forward(self.G, z, labels, self.tuning)  # float32 images, whatever the levers
            if self.sanitizer is not None:
                imgs = self.sanitizer.attach(imgs)
            xg, yr = self._points(imgs, labels, xs, ys)
            loss = step_loss(self.spec, self.cost, xg, yr, w)
            self.opt.zero_grad(set_to_none=False)
            loss.backward()
        return loss.detach()

    def _after_update(self) -> None:
        """What a variant does once the generator has moved (the adversary's turn)."""

    # -- eager (CPU, or CUDA without graphs)
    def _eager(self) -> tuple[Tensor, Tensor]:
        xs, ys, w, k = self._batch()
        z, labels = self._draw()
        loss = self._loss_backward(z, labels, xs, ys, w)
        if self.param_sanitizer is not None:
            self.param_sanitizer.sanitize_()  # refuses a non-finite gradient itself (PrivacyError)
        if self.device.type == "cpu":
            self.check()  # free on CPU: refuse before the optimizer moves
        self.opt.step()
        self._after_update()
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

        def step() -> Tensor:  # captured after a warm-up whose changes are undone (graph.capture_step)
            loss = self._loss_backward(z, labels, st["xs"], st["ys"], st["w"])
            self.opt.step()
            return loss

        reset = self.sanitizer.reset_check if self.sanitizer is not None else (lambda: None)
        self._graph, self._loss_out = capture_step(step, keep=[*self.G.parameters(), *self.G.buffers()],
                                                   optimizers=[self.opt], before_capture=reset)

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


class AdversarialStep(FastStep):
    """DP-Sinkhorn's adversarial variant (ICLR 2021, App. D.3) as a variant of the one step.

    The records are split into k fixed partitions (the paper's batches-as-records); each step
    draws one uniformly (the accountant's sampling without replacement, q = 1/k), and partition
    j's own feature extractor phi_j appends ``alpha_a * phi_j(img) / ||phi_j(img)||`` to every
    point, so the squared L2 cost gains ``alpha_a^2 ||u(a) - u(b)||^2`` (the paper's
    concatenation). The generator's update is :class:`FastStep`'s -- same loss, same sanitizer;
    then phi_j ascends the full Sinkhorn loss ``S_p(X, Y) - W(Y, Y)`` on the detached points.
    phi_j sees partition j's records, whose step is accounted as a whole, and only the
    generator is released. Eager only (no CUDA graph: the partition, hence phi_j, changes).
    """

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

    def _batch(self) -> tuple[Tensor, Tensor, Tensor, int]:
        xs, ys, w, k, self._j = partition_batch(self.parts, self.x_all, self.y_all, self.gens["data"])
        self.phis[self._j].train()
        return xs, ys, w, k

    def _features(self, imgs: Tensor) -> Tensor:
        feat = self.phis[self._j](imgs).reshape(imgs.shape[0], -1)
        return self.alpha_a * feat / feat.norm(dim=-1, keepdim=True).clamp_min(1e-12)

    def _points(self, imgs: Tensor, labels: Tensor | None, xs: Tensor, ys: Tensor) -> tuple[Tensor, Tensor]:
        xg, yr = super()._points(imgs, labels, xs, ys)
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
