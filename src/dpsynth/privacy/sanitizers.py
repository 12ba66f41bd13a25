"""Gradient sanitizers: the only door from private data to the generator.

The building blocks, one per privacy barrier of the methods:

- :class:`WholeBatchSanitizer` (DP-Sinkhorn): the gradient w.r.t. the first ``n``
  generated images is clipped as ONE tensor to ``C`` and gets ``N(0, (2 C sigma)^2)``
  per coordinate; the ``n'`` extra images (which never meet real data) are clipped only.
- :class:`PerSampleSanitizer` (GS-WGAN): each sample's image gradient clipped to
  ``C / B`` and noised with std ``2 (C / B) sigma``.
- :class:`ParamGradSanitizer` (grad_theta ablation): the whole parameter gradient
  (one global norm over all parameters) clipped to ``C`` plus ``2 C sigma`` noise.
- :class:`MeanEmbeddingSanitizer` (DP-MERF): each record's feature row clipped to norm 1,
  the label-conditional mean released once with ``N(0, (2 sigma / n)^2)`` noise.
- :class:`PerExampleGradSanitizer` (DP-CGAN's discriminator, DP-SGD): each real record's
  parameter gradient clipped to ``C``, the sum noised with ``N(0, (C sigma)^2)``, divided by
  the expected Poisson batch size.
- :class:`ClassMomentsSanitizer` (the central baseline): each record clipped to the unit ball, its class
  counts, sums, global and projected per-class second moments released once as one Gaussian mechanism.

The first three (the image and parameter-gradient barriers) are here; the three that read whole
private records (DP-MERF's, DP-SGD's and the central baseline's class moments) are in
``privacy/record_sanitizers.py`` and re-exported here, the one import every method uses. All six subclass ``sanitizer_base.Sanitizer``, which owns the argument checks, the
noise generator, the release count and the release statistics (``ReleaseStats``).

The math lives in ``release_batch`` which takes a leading *trials* axis, so the
Monte-Carlo audit (``privacy/audit.py``) runs the very same code vectorised; the autograd
paths call it with one trial. Every release refuses NaN/Inf (PrivacyError; the whole-batch
one without a host sync, see its docstring), fires at most once per forward, records norms
for logging, and draws noise from an explicit torch.Generator. No training path clips or
noises anywhere else: a new method's barrier is a ``Sanitizer`` subclass, and gets an audit there.
"""

from __future__ import annotations

import itertools

import torch

from dpsynth.errors import PrivacyError
from dpsynth.privacy.record_sanitizers import (
    CLASS_MOMENT_SENSITIVITY,
    CLASS_MOMENT_WEIGHTS,
    ClassMomentsSanitizer,
    MeanEmbeddingSanitizer,
    PerExampleGradSanitizer,
    class_moment_stds,
)
from dpsynth.privacy.sanitizer_base import (
    ReleaseStats,
    Sanitizer,
    check_positive_int,
    clip_rows,
    draw_noise,
    require_finite,
)

__all__ = ["CLASS_MOMENT_SENSITIVITY", "CLASS_MOMENT_WEIGHTS", "ClassMomentsSanitizer", "MeanEmbeddingSanitizer", "ParamGradSanitizer", "PerExampleGradSanitizer", "PerSampleSanitizer",
           "ReleaseStats", "Sanitizer", "WholeBatchSanitizer", "class_moment_stds", "clip_rows"]

class _Barrier(torch.autograd.Function):
    """Identity forward; backward hands the incoming gradient to the sanitizer."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, owner: _ImageSanitizer, token: int) -> torch.Tensor:  # type: ignore[override]
        ctx.owner, ctx.token = owner, token
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:  # type: ignore[override]
        return ctx.owner._on_backward(grad, ctx.token), None, None


class _ImageSanitizer(Sanitizer):
    """Shared plumbing of the image barriers: the exactly-once guard and the autograd barrier."""

    def __init__(self, clip: float, sigma: float, generator: torch.Generator) -> None:
        super().__init__(sigma, generator, clip=clip)  # releases: how many times the backward barrier fired
        self._tokens = itertools.count(1)
        self._pending: int | None = None
        self._shape: torch.Size | None = None

    def attach(self, images: torch.Tensor) -> torch.Tensor:
        """Return ``images`` unchanged, but sanitize its gradient in the backward pass.

        Use the returned tensor (and only it) in the loss. A backward that reaches an
        older attachment, or the same one twice (``retain_graph``), raises PrivacyError.
        """
        if not images.requires_grad:
            raise PrivacyError("attach() needs a tensor that requires grad (the generator output)")
        self._check_shape(images)
        token = next(self._tokens)
        self._pending, self._shape = token, images.shape
        return _Barrier.apply(images, self, token)

    def _on_backward(self, grad: torch.Tensor, token: int) -> torch.Tensor:
        if token != self._pending:
            raise PrivacyError(
                "sanitizer backward fired twice for one forward (or for a stale forward); "
                "refusing a second release of the same private gradient"
            )
        self._pending = None
        out = self.release_batch(grad.unsqueeze(0))[0]
        self.releases += 1
        return out

    def _check_shape(self, images: torch.Tensor) -> None:  # pragma: no cover - overridden
        pass

    def release_batch(self, grads: torch.Tensor) -> torch.Tensor:  # pragma: no cover - abstract
        raise NotImplementedError


class WholeBatchSanitizer(_ImageSanitizer):
    """DP-Sinkhorn image-gradient barrier (ICLR submission App. D; NeurIPS 2021 supplementary): sensitivity 2C, noise std 2 C sigma.

    ``n_private`` is the number of leading images that meet real data; the rest (the
    semi-debiased loss's n' extra images) are clipped as one tensor to C, not noised.

    This is the sanitizer every DP-Sinkhorn path trains with (the fast step, its CUDA graph,
    the batched sweep, the adversarial variant) and the one ``privacy/audit.py`` audits.
    Its release never reads a tensor on the host, so it can run inside a captured CUDA graph:
    a non-finite gradient sets a device-side flag and the release is zeroed (nothing reaches
    the optimizer); :meth:`check` reads the flag and refuses with PrivacyError. Through
    :meth:`attach` the check runs at once after each release unless ``defer_check`` is set,
    in which case the step must call :meth:`check` before it checkpoints or releases anything.

    ``noise_buffer`` (CUDA graphs): the noise is drawn into this fixed float64 buffer by
    :meth:`draw_noise_` outside the graph, from the same generator in the same shape, and the
    release reads it instead of drawing.
    """

    def __init__(self, clip: float, sigma: float, n_private: int, generator: torch.Generator, *,
                 defer_check: bool = False, noise_buffer: torch.Tensor | None = None) -> None:
        super().__init__(clip, sigma, generator)
        self.n_private = check_positive_int("n_private", n_private)
        self.defer_check = defer_check
        self.noise_buffer = noise_buffer
        self._bad: torch.Tensor | None = None  # device flag: some release saw a non-finite value
        self._last: dict[str, torch.Tensor] | None = None  # last trial's tensors (stats on demand)

    @property
    def noise_std(self) -> float:
        return 2.0 * self.clip * self.sigma

    def _check_shape(self, images: torch.Tensor) -> None:
        if images.dim() < 1 or images.shape[0] < self.n_private:
            raise PrivacyError(f"expected at least n_private={self.n_private} images, got shape {tuple(images.shape)}")

    def draw_noise_(self) -> None:
        """Fill ``noise_buffer`` with the next standard-normal draw (outside a CUDA graph)."""
        if self.noise_buffer is None:
            raise PrivacyError("draw_noise_() needs a noise_buffer")
        torch.randn(self.noise_buffer.shape, generator=self.generator, dtype=torch.float64,
                    device=self.noise_buffer.device, out=self.noise_buffer)

    def release_batch(self, grads: torch.Tensor) -> torch.Tensor:
        """Sanitize ``grads`` of shape (trials, n + n', ...); each trial is independent. No host sync."""
        t, n = grads.shape[0], self.n_private
        flat = grads.reshape(t, grads.shape[1], -1)
        priv, priv_norm = clip_rows(flat[:, :n].reshape(t, -1), self.clip)
        if self.noise_buffer is None:
            noise = draw_noise(priv.shape, self.noise_std, self.generator, priv)
        elif self.noise_buffer.shape != priv.shape:  # shapes are host metadata: no sync
            raise PrivacyError(f"noise_buffer has shape {tuple(self.noise_buffer.shape)}, the release needs "
                               f"{tuple(priv.shape)}")
        else:
            noise = (self.noise_buffer * self.noise_std).to(device=priv.device, dtype=priv.dtype)
        released = priv + noise
        parts = [released]
        extra_norm = None
        if flat.shape[1] > n:
            extra, extra_norm = clip_rows(flat[:, n:].reshape(t, -1), self.clip)
            parts.append(extra)
        out = torch.cat(parts, dim=1).reshape(grads.shape)
        bad = ~torch.isfinite(grads).all() | ~torch.isfinite(out).all()
        if self._bad is None or self._bad.device != bad.device:
            self._bad = torch.zeros((), dtype=torch.bool, device=bad.device)
        self._bad.logical_or_(bad)  # in place: a captured graph updates this very tensor on replay
        self._last = {"clean": priv_norm[-1], "priv": priv[-1], "noise": noise[-1], "released": released[-1],
                      "extra": extra_norm[-1] if extra_norm is not None else None}
        # Never let a non-finite value towards the optimizer; check() refuses the run anyway.
        return torch.where(bad, torch.zeros_like(out), out)

    def _on_backward(self, grad: torch.Tensor, token: int) -> torch.Tensor:
        out = super()._on_backward(grad, token)
        if not self.defer_check:
            self.check()
        return out

    def check(self) -> None:
        """Refuse (PrivacyError) if any release so far saw a non-finite value (one host sync)."""
        if self._bad is not None and bool(self._bad):
            raise PrivacyError("refusing to release a non-finite (NaN/Inf) image gradient; the release was "
                               "zeroed and nothing reached the generator; training must stop")

    def reset_check(self) -> None:
        """Clear the non-finite flag (a CUDA graph's warm-up runs before the real steps)."""
        if self._bad is not None:
            self._bad.zero_()

    @property
    def last(self) -> ReleaseStats | None:  # type: ignore[override]
        """Norms of the last release (host syncs: read at log time only)."""
        if self._last is None:
            return None
        d = self._last
        clean = float(d["clean"])
        return ReleaseStats(
            clean_norm=clean,
            clipped_norm=float(torch.linalg.vector_norm(d["priv"].double())),
            noise_norm=float(torch.linalg.vector_norm(d["noise"].double())),
            released_norm=float(torch.linalg.vector_norm(d["released"].double())),
            clipped=clean > self.clip,
            extra_clean_norm=float(d["extra"]) if d["extra"] is not None else 0.0,
        )

    @last.setter
    def last(self, value: ReleaseStats | None) -> None:  # the base class initialises it to None
        if value is not None:
            raise AttributeError("WholeBatchSanitizer.last is computed from the last release")


class PerSampleSanitizer(_ImageSanitizer):
    """GS-WGAN barrier (GS-WGAN, arXiv:2006.08265): per-sample clip to C/B, noise std 2 (C/B) sigma."""

    def __init__(self, clip: float, sigma: float, batch_size: int, generator: torch.Generator) -> None:
        super().__init__(clip, sigma, generator)
        self.batch_size = check_positive_int("batch_size", batch_size)

    @property
    def sample_bound(self) -> float:
        return self.clip / self.batch_size

    @property
    def noise_std(self) -> float:
        return 2.0 * self.sample_bound * self.sigma

    def _check_shape(self, images: torch.Tensor) -> None:
        if images.dim() < 1 or images.shape[0] != self.batch_size:
            raise PrivacyError(
                f"expected a batch of batch_size={self.batch_size} samples, got shape {tuple(images.shape)} "
                "(the accountant's B must be the batch actually released)"
            )

    def release_batch(self, grads: torch.Tensor) -> torch.Tensor:
        """Sanitize ``grads`` of shape (trials, B, ...)."""
        require_finite(grads, "per-sample image gradient")
        t, b = grads.shape[0], grads.shape[1]
        clipped, norms = clip_rows(grads.reshape(t * b, -1), self.sample_bound)
        clipped = clipped.reshape(t, b, -1)
        noise = draw_noise(clipped.shape, self.noise_std, self.generator, clipped)
        released = clipped + noise
        require_finite(released, "sanitized per-sample gradient")
        norms = norms.reshape(t, b)
        self._record(clean_norm=float(norms[-1].max()),  # the largest per-sample norm (and clipped one)
                     clipped=float(torch.linalg.vector_norm(clipped[-1].double(), dim=1).max()),
                     noise=noise[-1], released=released[-1], was_clipped=bool((norms[-1] > self.sample_bound).any()))
        return released.reshape(grads.shape)


class ParamGradSanitizer(Sanitizer):
    """grad_theta ablation: clip ALL parameter gradients by one global norm to C, add 2 C sigma noise.

    Call :meth:`sanitize_` after ``loss.backward()`` and before ``optimizer.step()``. A
    post-accumulate hook on every parameter counts backward passes: a second backward
    before sanitizing (which would double the sensitivity) or sanitizing twice raises.
    """

    def __init__(self, params: list[torch.nn.Parameter], clip: float, sigma: float, generator: torch.Generator) -> None:
        if not isinstance(generator, torch.Generator):  # before the parameters: every barrier's first refusal
            raise PrivacyError("a torch.Generator is required for the noise (reproducibility and resume)")
        self.params = [p for p in params if p.requires_grad]
        if not self.params:
            raise PrivacyError("ParamGradSanitizer needs at least one parameter that requires grad")
        super().__init__(sigma, generator, clip=clip)
        self._hits: dict[int, int] = {}
        self._handles = [p.register_post_accumulate_grad_hook(self._on_accumulate) for p in self.params]

    @property
    def noise_std(self) -> float:
        return 2.0 * self.clip * self.sigma

    def _on_accumulate(self, p: torch.Tensor) -> None:
        n = self._hits.get(id(p), 0) + 1
        if n > 1:
            raise PrivacyError(
                "a second backward accumulated into a parameter gradient before sanitize_(); "
                "that would release two private gradients under one clip"
            )
        self._hits[id(p)] = n

    def remove(self) -> None:
        """Detach the hooks (end of training)."""
        for h in self._handles:
            h.remove()

    def sanitize_(self) -> ReleaseStats:
        """Clip + noise the parameter gradients in place; exactly once per backward."""
        if not self._hits:
            raise PrivacyError("sanitize_() called without a fresh backward pass (would re-release or release nothing)")
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in self.params]
        flat = torch.cat([g.reshape(-1) for g in grads])[None]
        out = self.release_batch(flat)[0]
        offset = 0
        for p in self.params:
            k = p.numel()
            p.grad = out[offset : offset + k].view_as(p).clone()
            offset += k
        self._hits.clear()
        self.releases += 1
        assert self.last is not None
        return self.last

    def release_batch(self, grads: torch.Tensor) -> torch.Tensor:
        """Sanitize flattened parameter gradients of shape (trials, P)."""
        require_finite(grads, "parameter gradient")
        clipped, norms = clip_rows(grads.reshape(grads.shape[0], -1), self.clip)
        noise = draw_noise(clipped.shape, self.noise_std, self.generator, clipped)
        released = clipped + noise
        require_finite(released, "sanitized parameter gradient")
        self._record(clean_norm=float(norms[-1]), clipped=clipped[-1], noise=noise[-1], released=released[-1],
                     was_clipped=bool(norms[-1] > self.clip))
        return released.reshape(grads.shape)
