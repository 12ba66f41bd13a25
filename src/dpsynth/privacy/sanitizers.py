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

The math lives in ``release_batch`` which takes a leading *trials* axis, so the
Monte-Carlo audit (``privacy/audit.py``) runs the very same code vectorised; the autograd
paths call it with one trial. Every release refuses NaN/Inf (PrivacyError; the whole-batch
one without a host sync, see its docstring), fires at most once per forward, records norms
for logging, and draws noise from an explicit torch.Generator. No training path clips or
noises anywhere else: a new method's barrier is a class here, and gets an audit there.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import torch

from dpsynth.errors import PrivacyError

# Multiply the clip factor by (1 - _SAFETY * machine eps) so rounding the clipped
# tensor back to its dtype can never push its norm above the bound.
_SAFETY = 8.0


@dataclass(frozen=True)
class ReleaseStats:
    """Norms of the last release (for logs). ``clean_norm`` is before clipping."""

    clean_norm: float
    clipped_norm: float
    noise_norm: float
    released_norm: float
    clipped: bool
    extra_clean_norm: float = 0.0  # WholeBatch only: the n' noise-free images


def _check_pos(name: str, v: float, allow_zero: bool = False) -> float:
    ok = isinstance(v, (int, float)) and not isinstance(v, bool) and v == v and v != float("inf")
    if not ok or (v < 0 if allow_zero else v <= 0):
        bound = ">= 0" if allow_zero else "> 0"
        raise PrivacyError(f"{name} must be a finite number {bound}, got {v!r}")
    return float(v)


def _require_finite(t: torch.Tensor, what: str) -> None:
    if not bool(torch.isfinite(t).all()):
        raise PrivacyError(f"refusing to release a non-finite (NaN/Inf) {what}; nothing was released")


def clip_rows(g: torch.Tensor, bound: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Clip each row of a 2-D tensor to L2 norm ``bound``; returns (clipped, clean norms).

    Norms are taken in float64 so huge float32 values cannot overflow to inf, and the
    scale carries a safety margin so the result, rounded to ``g.dtype``, is <= bound.
    """
    g64 = g.to(torch.float64)
    norms = torch.linalg.vector_norm(g64, dim=1)
    margin = 1.0 - _SAFETY * torch.finfo(g.dtype).eps
    scale = torch.where(norms > bound, bound * margin / norms.clamp_min(1e-300), torch.ones_like(norms))
    return (g64 * scale[:, None]).to(g.dtype), norms


def _noise(shape: torch.Size, std: float, gen: torch.Generator, like: torch.Tensor) -> torch.Tensor:
    z = torch.randn(shape, generator=gen, device=gen.device, dtype=torch.float64)
    return (z * std).to(device=like.device, dtype=like.dtype)


class _Barrier(torch.autograd.Function):
    """Identity forward; backward hands the incoming gradient to the sanitizer."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, owner: _ImageSanitizer, token: int) -> torch.Tensor:  # type: ignore[override]
        ctx.owner, ctx.token = owner, token
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:  # type: ignore[override]
        return ctx.owner._on_backward(grad, ctx.token), None, None


class _ImageSanitizer:
    """Shared plumbing: the exactly-once guard and the autograd barrier."""

    def __init__(self, clip: float, sigma: float, generator: torch.Generator) -> None:
        if not isinstance(generator, torch.Generator):
            raise PrivacyError("a torch.Generator is required for the noise (reproducibility and resume)")
        self.clip = _check_pos("clip bound C", clip)
        self.sigma = _check_pos("noise multiplier sigma", sigma, allow_zero=True)
        self.generator = generator
        self.last: ReleaseStats | None = None
        self.releases = 0  # how many times the backward barrier fired, ever
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
        if isinstance(n_private, bool) or not isinstance(n_private, int) or n_private < 1:
            raise PrivacyError(f"n_private must be a positive integer, got {n_private!r}")
        self.n_private = n_private
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
            noise = _noise(priv.shape, self.noise_std, self.generator, priv)
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
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise PrivacyError(f"batch_size must be a positive integer, got {batch_size!r}")
        self.batch_size = batch_size

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
        _require_finite(grads, "per-sample image gradient")
        t, b = grads.shape[0], grads.shape[1]
        clipped, norms = clip_rows(grads.reshape(t * b, -1), self.sample_bound)
        clipped = clipped.reshape(t, b, -1)
        noise = _noise(clipped.shape, self.noise_std, self.generator, clipped)
        released = clipped + noise
        _require_finite(released, "sanitized per-sample gradient")
        norms = norms.reshape(t, b)
        self.last = ReleaseStats(
            clean_norm=float(norms[-1].max()),  # the largest per-sample norm
            clipped_norm=float(torch.linalg.vector_norm(clipped[-1].double(), dim=1).max()),
            noise_norm=float(torch.linalg.vector_norm(noise[-1].double())),
            released_norm=float(torch.linalg.vector_norm(released[-1].double())),
            clipped=bool((norms[-1] > self.sample_bound).any()),
        )
        return released.reshape(grads.shape)


class ParamGradSanitizer:
    """grad_theta ablation: clip ALL parameter gradients by one global norm to C, add 2 C sigma noise.

    Call :meth:`sanitize_` after ``loss.backward()`` and before ``optimizer.step()``. A
    post-accumulate hook on every parameter counts backward passes: a second backward
    before sanitizing (which would double the sensitivity) or sanitizing twice raises.
    """

    def __init__(self, params: list[torch.nn.Parameter], clip: float, sigma: float, generator: torch.Generator) -> None:
        if not isinstance(generator, torch.Generator):
            raise PrivacyError("a torch.Generator is required for the noise (reproducibility and resume)")
        self.params = [p for p in params if p.requires_grad]
        if not self.params:
            raise PrivacyError("ParamGradSanitizer needs at least one parameter that requires grad")
        self.clip = _check_pos("clip bound C", clip)
        self.sigma = _check_pos("noise multiplier sigma", sigma, allow_zero=True)
        self.generator = generator
        self.last: ReleaseStats | None = None
        self.releases = 0
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
        _require_finite(grads, "parameter gradient")
        clipped, norms = clip_rows(grads.reshape(grads.shape[0], -1), self.clip)
        noise = _noise(clipped.shape, self.noise_std, self.generator, clipped)
        released = clipped + noise
        _require_finite(released, "sanitized parameter gradient")
        self.last = ReleaseStats(
            clean_norm=float(norms[-1]),
            clipped_norm=float(torch.linalg.vector_norm(clipped[-1].double())),
            noise_norm=float(torch.linalg.vector_norm(noise[-1].double())),
            released_norm=float(torch.linalg.vector_norm(released[-1].double())),
            clipped=bool(norms[-1] > self.clip),
        )
        return released.reshape(grads.shape)


class MeanEmbeddingSanitizer:
    """DP-MERF barrier: the label-conditional mean embedding, released ONCE with the Gaussian mechanism.

    Each record contributes ``phi(x) (x) e_y`` (its feature row in its label's block); its norm
    equals ``||phi(x)||``, which is clipped here to ``bound`` (random Fourier features have norm 1
    by construction, but the bound is enforced, not assumed). Neighbouring datasets replace one
    record (n is public): the mean changes by at most ``2 bound / n`` in L2 -- the two rows of
    norm <= bound may sit at opposite ends of the ball in the same label block -- so the noise is
    ``N(0, (2 bound sigma / n)^2)`` per coordinate: a Gaussian mechanism of multiplier ``sigma``.

    :meth:`add` takes the records in chunks (the (classes x features) sum is all that is kept);
    :meth:`release` noises the mean once and refuses a second release, a release before all ``n``
    records were added, and non-finite values. ``release_batch`` is the same math with a leading
    trials axis, for the Monte-Carlo audit.
    """

    def __init__(self, sigma: float, n_records: int, num_classes: int, generator: torch.Generator,
                 bound: float = 1.0) -> None:
        if not isinstance(generator, torch.Generator):
            raise PrivacyError("a torch.Generator is required for the noise (reproducibility and resume)")
        if isinstance(n_records, bool) or not isinstance(n_records, int) or n_records < 1:
            raise PrivacyError(f"n_records must be a positive integer, got {n_records!r}")
        self.sigma = _check_pos("noise multiplier sigma", sigma, allow_zero=True)
        self.bound = _check_pos("feature norm bound", bound)
        self.n_records, self.num_classes, self.generator = n_records, int(num_classes), generator
        self.added = 0
        self.released = False
        self.max_clean_norm = 0.0
        self._sum: torch.Tensor | None = None
        self.last: ReleaseStats | None = None

    @property
    def noise_std(self) -> float:
        return 2.0 * self.bound * self.sigma / self.n_records

    def _class_sums(self, features: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(..., classes, D) float64 sums of the clipped rows per label, and the rows' clean norms."""
        lead, d = features.shape[:-2], features.shape[-1]
        clipped, norms = clip_rows(features.reshape(-1, d), self.bound)
        clipped = clipped.to(torch.float64).reshape(-1, features.shape[-2], d)
        out = torch.zeros(clipped.shape[0], self.num_classes, d, dtype=torch.float64, device=features.device)
        out.index_add_(1, labels.to(features.device).long(), clipped)
        return out.reshape(*lead, self.num_classes, d), norms

    def _noised_mean(self, total: torch.Tensor) -> torch.Tensor:
        mean = total / self.n_records
        noise = _noise(mean.shape, self.noise_std, self.generator, mean)
        released = mean + noise
        _require_finite(released, "noisy mean embedding")
        def last_norm(t: torch.Tensor) -> float:  # of the last trial's (classes x D) block
            return float(torch.linalg.vector_norm(t.reshape(-1, t.shape[-2] * t.shape[-1])[-1].double()))

        self.last = ReleaseStats(clean_norm=self.max_clean_norm, clipped_norm=last_norm(mean),
                                 noise_norm=last_norm(noise), released_norm=last_norm(released),
                                 clipped=self.max_clean_norm > self.bound)
        return released

    def add(self, features: torch.Tensor, labels: torch.Tensor) -> None:
        """Accumulate a chunk of records: ``features`` (B, D), ``labels`` (B,) in [0, classes)."""
        if self.released:
            raise PrivacyError("the mean embedding was already released; adding records afterwards would "
                               "need a second release")
        if features.ndim != 2 or labels.shape != (features.shape[0],):
            raise PrivacyError(f"expected features (B, D) and labels (B,), got {tuple(features.shape)} and "
                               f"{tuple(labels.shape)}")
        if self.added + len(features) > self.n_records:
            raise PrivacyError(f"more records added ({self.added + len(features)}) than the {self.n_records} "
                               "the noise is scaled for")
        _require_finite(features, "feature row")
        sums, norms = self._class_sums(features[None], labels)
        self._sum = sums[0] if self._sum is None else self._sum + sums[0]
        self.added += len(features)
        self.max_clean_norm = max(self.max_clean_norm, float(norms.max()))

    def release(self) -> torch.Tensor:
        """The noisy (classes, D) mean embedding, float32; once."""
        if self.released:
            raise PrivacyError("the mean embedding is released once; a second release would spend the budget again")
        if self.added != self.n_records or self._sum is None:
            raise PrivacyError(f"{self.added} of {self.n_records} records added; the noise is scaled for all of them")
        self.released = True
        out = self._noised_mean(self._sum[None])[0].float()
        self._sum = None
        return out

    def release_batch(self, features: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """``features`` (trials, n, D) of n = n_records records with shared ``labels`` (n,): one
        independent release per trial (the audit's vectorised path; the object's state is untouched)."""
        _require_finite(features, "feature row")
        sums, norms = self._class_sums(features, labels)
        self.max_clean_norm = float(norms.max())
        return self._noised_mean(sums).float()


class PerExampleGradSanitizer:
    """DP-SGD barrier (Abadi et al., "Deep Learning with Differential Privacy", CCS 2016,
    arXiv:1607.00133), as DP-CGAN's discriminator uses it (Torkzadehmahani, Kairouz, Paten, CVPR
    Workshops 2019, arXiv:2001.09700): each private record's parameter gradient clipped to ``C``, the
    clipped rows summed, ``N(0, (C sigma)^2)`` added per coordinate, the result divided by the
    EXPECTED batch size ``B = q N`` (a public constant, never the realised Poisson count, which is
    private).

    Neighbours add or remove one record (Poisson sampling at rate q): the sum changes by one clipped
    row, L2 sensitivity ``C``, so one release is a Gaussian mechanism of multiplier ``sigma`` and a run
    is the Poisson-subsampled Gaussian the accountant charges. Dividing by the public ``B`` is
    post-processing. :meth:`release` takes the (k, P) per-example gradients of one step (k may be 0:
    an empty Poisson sample still releases the noise); ``release_batch`` is the same math with a
    leading trials axis, for the Monte-Carlo audit. :meth:`clip_mean` is NOT a privacy barrier: it
    clips the per-example gradients of a term that never meets private data (DP-CGAN's fake-sample
    loss) to the same bound, so the two terms keep the balance the reference gave them.
    """

    def __init__(self, clip: float, sigma: float, expected_batch: float, generator: torch.Generator) -> None:
        if not isinstance(generator, torch.Generator):
            raise PrivacyError("a torch.Generator is required for the noise (reproducibility and resume)")
        self.clip = _check_pos("clip bound C", clip)
        self.sigma = _check_pos("noise multiplier sigma", sigma, allow_zero=True)
        self.expected_batch = _check_pos("expected batch size", expected_batch)
        self.generator = generator
        self.last: ReleaseStats | None = None
        self.releases = 0

    @property
    def noise_std(self) -> float:
        """Std of the noise on the SUM of clipped rows (before the division by the expected batch)."""
        return self.clip * self.sigma

    def release(self, per_example: torch.Tensor) -> torch.Tensor:
        """The noisy mean gradient (P,) of one step from its (k, P) per-example gradients."""
        if per_example.ndim != 2:
            raise PrivacyError(f"expected per-example gradients (k, P), got shape {tuple(per_example.shape)}")
        out = self.release_batch(per_example[None])[0]
        self.releases += 1
        return out

    def release_batch(self, grads: torch.Tensor) -> torch.Tensor:
        """Sanitize per-example gradients of shape (trials, k, P); returns (trials, P).

        The finiteness check reads the rows' float64 norms, not the (k, P) input: a row's norm is
        finite exactly when all its entries are (float32 squares cannot overflow float64), and a
        second pass over a (600 x 100k) tensor would cost as much as the clip itself."""
        t, b, p = grads.shape
        clipped, norms = clip_rows(grads.reshape(t * b, p), self.clip)
        _require_finite(norms, "per-example parameter gradient")
        total = clipped.reshape(t, b, p).sum(dim=1).to(torch.float64)  # rows of norm <= C: float32 sum
        noise = _noise(total.shape, self.noise_std, self.generator, total)
        released = ((total + noise) / self.expected_batch).to(grads.dtype)
        _require_finite(released, "sanitized mean gradient")
        norms = norms.reshape(t, b)
        self.last = ReleaseStats(
            clean_norm=float(norms[-1].max()) if b else 0.0,  # the largest per-example norm
            clipped_norm=float(torch.linalg.vector_norm(total[-1])),
            noise_norm=float(torch.linalg.vector_norm(noise[-1])),
            released_norm=float(torch.linalg.vector_norm(released[-1].double())),
            clipped=bool((norms[-1] > self.clip).any()) if b else False,
        )
        return released

    def clip_mean(self, public: torch.Tensor) -> torch.Tensor:
        """Mean of (k, P) per-example gradients of a term free of private data, each clipped to C; no noise.

        No privacy bound rests on this clip (it only balances the two loss terms), so it scales the
        rows inside one matrix product instead of ``clip_rows``' float64 copy of the whole tensor."""
        norms = torch.linalg.vector_norm(public, dim=1)
        _require_finite(norms, "per-example gradient of the public term")
        scale = (self.clip / norms.clamp_min(1e-30)).clamp(max=1.0)
        return (scale @ public) / public.shape[0]
