"""The barriers that read whole private records rather than generated images: DP-MERF's one release of
the label-conditional mean embedding (:class:`MeanEmbeddingSanitizer`), DP-SGD's per-example
gradients (:class:`PerExampleGradSanitizer`, DP-CGAN's discriminator) and the central baseline's one
release of class moments (:class:`ClassMomentsSanitizer`). All are subclasses of
``sanitizer_base.Sanitizer`` (checks, generator, statistics) and all are audited in
``privacy/audit.py``; ``privacy.sanitizers`` re-exports them, the one import every method uses."""

from __future__ import annotations

import math

import torch

from dpsynth.errors import PrivacyError
from dpsynth.privacy.sanitizer_base import (
    Sanitizer,
    check_pos,
    check_positive_int,
    clip_rows,
    draw_noise,
    require_finite,
)

__all__ = ["CLASS_MOMENT_SENSITIVITY", "CLASS_MOMENT_WEIGHTS", "ClassMomentsSanitizer", "MeanEmbeddingSanitizer",
           "PerExampleGradSanitizer", "class_moment_stds"]


def _refuse_a_chunk(released: bool, what_was: str, added: int, new: int, n_records: int) -> None:
    """The one-pass releases' rule for a chunk of records: none after the release (that would need a second one),
    and never more records than the noise is scaled for (n is public and fixes the sensitivity)."""
    if released:
        raise PrivacyError(f"{what_was} already released; adding records afterwards would need a second release")
    if added + new > n_records:
        raise PrivacyError(f"more records added ({added + new}) than the {n_records} the noise is scaled for")


class MeanEmbeddingSanitizer(Sanitizer):
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
        if not isinstance(generator, torch.Generator):  # before the counts: the same first refusal as every barrier
            raise PrivacyError("a torch.Generator is required for the noise (reproducibility and resume)")
        check_positive_int("n_records", n_records)
        super().__init__(sigma, generator)
        self.bound = check_pos("feature norm bound", bound)
        self.n_records, self.num_classes = n_records, int(num_classes)
        self.added = 0
        self.released = False
        self.max_clean_norm = 0.0
        self._sum: torch.Tensor | None = None

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
        noise = draw_noise(mean.shape, self.noise_std, self.generator, mean)
        released = mean + noise

        def last(t: torch.Tensor) -> torch.Tensor:  # the last trial's (classes x D) block
            return t.reshape(-1, t.shape[-2] * t.shape[-1])[-1]

        require_finite(released, "noisy mean embedding")
        self._record(clean_norm=self.max_clean_norm, clipped=last(mean), noise=last(noise), released=last(released),
                     was_clipped=self.max_clean_norm > self.bound)
        return released

    def add(self, features: torch.Tensor, labels: torch.Tensor) -> None:
        """Accumulate a chunk of records: ``features`` (B, D), ``labels`` (B,) in [0, classes)."""
        _refuse_a_chunk(self.released, "the mean embedding was", self.added, len(features), self.n_records)
        if features.ndim != 2 or labels.shape != (features.shape[0],):
            raise PrivacyError(f"expected features (B, D) and labels (B,), got {tuple(features.shape)} and "
                               f"{tuple(labels.shape)}")
        require_finite(features, "feature row")
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
        self.releases += 1
        out = self._noised_mean(self._sum[None])[0].float()
        self._sum = None
        return out

    def release_batch(self, features: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """``features`` (trials, n, D) of n = n_records records with shared ``labels`` (n,): one
        independent release per trial (the audit's vectorised path; the object's state is untouched)."""
        require_finite(features, "feature row")
        sums, norms = self._class_sums(features, labels)
        self.max_clean_norm = float(norms.max())
        return self._noised_mean(sums).float()


class PerExampleGradSanitizer(Sanitizer):
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
        super().__init__(sigma, generator, clip=clip)
        self.expected_batch = check_pos("expected batch size", expected_batch)

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
        require_finite(norms, "per-example parameter gradient")
        total = clipped.reshape(t, b, p).sum(dim=1).to(torch.float64)  # rows of norm <= C: float32 sum
        noise = draw_noise(total.shape, self.noise_std, self.generator, total)
        released = ((total + noise) / self.expected_batch).to(grads.dtype)
        require_finite(released, "sanitized mean gradient")
        norms = norms.reshape(t, b)
        self._record(clean_norm=float(norms[-1].max()) if b else 0.0,  # the largest per-example norm
                     clipped=total[-1], noise=noise[-1], released=released[-1],
                     was_clipped=bool((norms[-1] > self.clip).any()) if b else False)
        return released

    def clip_mean(self, public: torch.Tensor) -> torch.Tensor:
        """Mean of (k, P) per-example gradients of a term free of private data, each clipped to C; no noise.

        No privacy bound rests on this clip (it only balances the two loss terms), so it scales the
        rows inside one matrix product instead of ``clip_rows``' float64 copy of the whole tensor."""
        norms = torch.linalg.vector_norm(public, dim=1)
        require_finite(norms, "per-example gradient of the public term")
        scale = (self.clip / norms.clamp_min(1e-30)).clamp(max=1.0)
        return (scale @ public) / public.shape[0]


#: Each query's share w_j of the one mechanism's 1 / sigma^2 (the class sums carry the most signal per record).
CLASS_MOMENT_WEIGHTS = {"second_moment": 0.25, "counts": 0.05, "sums": 0.4, "projected": 0.3}
#: The L2 sensitivity of each query when one record (in the unit ball) is replaced by another: it may leave one
#: class and join another, or change within one (||z z^T - z' z'^T||_F <= 2, ||z - z'|| <= 2, two counts move by 1).
CLASS_MOMENT_SENSITIVITY = {"second_moment": 2.0, "counts": math.sqrt(2.0), "sums": 2.0, "projected": 2.0}


def class_moment_stds(sigma: float) -> dict[str, float]:
    """The noise std of each query of :class:`ClassMomentsSanitizer` for the one mechanism's multiplier
    ``sigma``: Delta_j sigma / sqrt(w_j), so sum_j (Delta_j / s_j)^2 = 1 / sigma^2 (0 for a non-private run)."""
    sigma = check_pos("noise multiplier sigma", sigma, allow_zero=True)
    return {k: CLASS_MOMENT_SENSITIVITY[k] * sigma / math.sqrt(w) for k, w in CLASS_MOMENT_WEIGHTS.items()}


class ClassMomentsSanitizer(Sanitizer):
    """The central baseline's barrier (``methods/central_baseline.py``): the moments of a class-conditional
    Gaussian, released ONCE as one Gaussian mechanism of multiplier ``sigma``.

    Each record z (a row; the caller scales images into the unit ball, and the ball is enforced here: rows are
    clipped to norm 1, not assumed inside it) with label y enters four queries:

    - ``second_moment``: sum_i z_i z_i^T over every record, its upper triangle (diagonal included) noised and
      mirrored (d(d+1)/2 released numbers); its top ``rank`` eigenvectors are the ``basis`` (post-processing);
    - ``counts``: the class counts;
    - ``sums``: sum_{i in c} z_i per class;
    - ``projected``: the upper triangle of sum_{i in c} (V^T z_i)(V^T z_i)^T per class, V the released basis
      (adaptive composition; ||V^T z|| <= ||z|| <= 1 whatever V is).

    Neighbours replace one record (the record count is public); the sensitivities are
    ``CLASS_MOMENT_SENSITIVITY``. Query j is noised with std ``class_moment_stds(sigma)[j]`` = Delta_j sigma /
    sqrt(w_j), sum_j w_j = 1: the four together are ONE Gaussian mechanism of multiplier sigma (Dwork and Roth,
    "The Algorithmic Foundations of Differential Privacy", FnT-TCS 2014, Thm. A.1 on the vector of every query
    scaled by 1 / s_j; Mironov, "Renyi Differential Privacy", CSF 2017, Prop. 7 for the composition).

    :meth:`add` takes the records in chunks (only the per-class second moments, sums and counts are kept: the
    data is read once); :meth:`release` noises them once and refuses a second release, a release before all
    ``n_records`` records were added, and non-finite values. ``release_batch`` is the same math with a leading
    trials axis, for the Monte-Carlo audit.
    """

    def __init__(self, sigma: float, n_records: int, num_classes: int, dim: int, rank: int,
                 generator: torch.Generator) -> None:
        if not isinstance(generator, torch.Generator):  # before the counts: the same first refusal as every barrier
            raise PrivacyError("a torch.Generator is required for the noise (reproducibility and resume)")
        for name, v in (("n_records", n_records), ("num_classes", num_classes), ("dim", dim), ("rank", rank)):
            check_positive_int(name, v)
        if rank > dim:
            raise PrivacyError(f"rank {rank} must be at most the records' dimension {dim}")
        super().__init__(sigma, generator)
        self.n_records, self.num_classes, self.dim, self.rank = n_records, num_classes, dim, rank
        self.stds = class_moment_stds(self.sigma)
        self.added = 0
        self.released = False
        self.max_clean_norm = 0.0
        self._moments: torch.Tensor | None = None  # (classes, D, D) float64: sum of z z^T per class
        self._sums: torch.Tensor | None = None  # (classes, D)
        self._counts: torch.Tensor | None = None  # (classes,)

    @property
    def noise_std(self) -> float:
        """The class sums' noise std (each query's: ``stds``)."""
        return self.stds["sums"]

    def _accumulate(self, records: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """``records`` (T, n, D) sharing ``labels`` (n,): per trial the per-class second moments (T, C, D, D),
        sums (T, C, D) and counts (C,) of the rows clipped to the unit ball, float64; and the clean norms."""
        t, n, d = records.shape
        z, norms = clip_rows(records.reshape(t * n, d), 1.0)
        z = z.to(torch.float64).reshape(t, n, d)
        labels = labels.to(records.device).long()
        rows = [z[:, labels == c] for c in range(self.num_classes)]
        moments = torch.stack([r.transpose(1, 2) @ r for r in rows], 1)
        sums = torch.stack([r.sum(1) for r in rows], 1)
        counts = torch.bincount(labels, minlength=self.num_classes).to(torch.float64)
        return moments, sums, counts, norms

    def _sym_noise(self, lead: tuple[int, ...], d: int, std: float, like: torch.Tensor) -> torch.Tensor:
        """Noise on the upper triangle (diagonal included), mirrored: d(d+1)/2 released numbers per matrix."""
        g = torch.triu(draw_noise(torch.Size((*lead, d, d)), std, self.generator, like))
        return g + torch.triu(g, 1).transpose(-1, -2)

    def _noised(self, moments: torch.Tensor, sums: torch.Tensor, counts: torch.Tensor) -> dict[str, torch.Tensor]:
        s, t = self.stds, moments.shape[0]
        noise = {"second_moment": self._sym_noise((t,), self.dim, s["second_moment"], moments)}
        second = moments.sum(1) + noise["second_moment"]
        require_finite(second, "noisy second moment")
        basis = torch.linalg.eigh(second)[1].flip(-1)[..., :self.rank]  # post-processing of a released matrix
        counts = counts.expand(t, -1)
        noise["counts"] = draw_noise(counts.shape, s["counts"], self.generator, counts)
        noise["sums"] = draw_noise(sums.shape, s["sums"], self.generator, sums)
        clean_proj = basis.transpose(1, 2)[:, None] @ moments @ basis[:, None]  # (T, C, r, r)
        noise["projected"] = self._sym_noise((t, self.num_classes), self.rank, s["projected"], clean_proj)
        out = {"second_moment": second, "basis": basis, "counts": counts + noise["counts"],
               "sums": sums + noise["sums"], "projected": clean_proj + noise["projected"]}
        for k, v in out.items():
            require_finite(v, f"noisy {k}")
        clean = {"second_moment": moments.sum(1), "counts": counts, "sums": sums, "projected": clean_proj}

        def last(parts: dict[str, torch.Tensor]) -> torch.Tensor:  # the last trial's four queries, flattened
            return torch.cat([parts[k][-1].reshape(-1) for k in CLASS_MOMENT_WEIGHTS])

        self._record(clean_norm=self.max_clean_norm, clipped=last(clean), noise=last(noise), released=last(out),
                     was_clipped=self.max_clean_norm > 1.0)
        return out

    def add(self, records: torch.Tensor, labels: torch.Tensor) -> None:
        """Accumulate a chunk of records: ``records`` (B, D), ``labels`` (B,) in [0, classes)."""
        _refuse_a_chunk(self.released, "the class moments were", self.added, len(records), self.n_records)
        if records.ndim != 2 or records.shape[1] != self.dim or labels.shape != (records.shape[0],):
            raise PrivacyError(f"expected records (B, {self.dim}) and labels (B,), got {tuple(records.shape)} and "
                               f"{tuple(labels.shape)}")
        require_finite(records, "record")
        moments, sums, counts, norms = self._accumulate(records[None], labels)
        if self._moments is None or self._sums is None or self._counts is None:
            self._moments, self._sums, self._counts = moments[0], sums[0], counts
        else:
            self._moments += moments[0]
            self._sums += sums[0]
            self._counts += counts
        self.added += len(records)
        if len(records):
            self.max_clean_norm = max(self.max_clean_norm, float(norms.max()))

    def release(self) -> dict[str, torch.Tensor]:
        """The noisy statistics, float64: ``second_moment`` (D, D), its top-``rank`` eigenvectors ``basis``
        (D, r), ``counts`` (C,), ``sums`` (C, D), ``projected`` (C, r, r); once."""
        if self.released:
            raise PrivacyError("the class moments are released once; a second release would spend the budget again")
        if self.added != self.n_records or self._moments is None or self._sums is None or self._counts is None:
            raise PrivacyError(f"{self.added} of {self.n_records} records added; the noise is scaled for all of them")
        self.released = True
        self.releases += 1
        out = self._noised(self._moments[None], self._sums[None], self._counts)
        self._moments = self._sums = self._counts = None
        return {k: v[0] for k, v in out.items()}

    def release_batch(self, records: torch.Tensor, labels: torch.Tensor) -> dict[str, torch.Tensor]:
        """``records`` (trials, n, D) sharing ``labels`` (n,): one independent release per trial (the audit's
        vectorised path; the object's state is untouched)."""
        require_finite(records, "record")
        moments, sums, counts, norms = self._accumulate(records, labels)
        self.max_clean_norm = float(norms.max())
        return self._noised(moments, sums, counts)
