"""The trivial private baselines (``methods.local_baselines``) scored exactly as the generators beside them.

Issue 69 item 3: a table of generators trained on locally privatized records (Reshetova, Chen, Ozgur, "Training
generative models from privatized data via entropic optimal transport", ISIT 2024, arXiv:2306.09547) gets rows
for a k-means codebook (k = 10, 100) and a Gaussian fitted with the noise removed, fitted to the SAME privatized
records the generators of that cell trained on and scored by the SAME path: ``w2.score_sampler`` (the W2 to
``n_eval`` clean held-out records over ``draws`` sample draws, the seeds a generator of that seed uses) and the
same second measure on the first draw (``closeness.CloseToClean``: KID, precision, recall). A row is a training
run's analogue: the baseline fitted on one seed's privatized records, so the rows of a (baseline, noise level)
are independent draws in the way the generators' runs are.

Every run trained on locally privatized records gets its baselines in the evaluate stage (:func:`run_baselines`,
written as its ``metrics.json``'s ``baselines`` record): fitted to that run's own privatized file
(``data/privatized/<run>.npz``, ``paths.privatized_file``) and scored as that run's generator is
(:func:`scored_like_a_run`: the run's set count and size, seeds from the run's seed). The Fig. 11 and 2-D tables
read them from there; ``scripts/reshetova-mnist-fig11-baselines.py`` calls the same function for the committed
runs.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from dpsynth.errors import DataError
from dpsynth.evaluate.w2 import W2_DRAWS, privatized_records, score_sampler
from dpsynth.methods.local_baselines import CODEBOOK_KS, Baseline, codebook_name, fit_local_baselines

__all__ = ["BASELINE", "SWEEP_PRIVACY", "HeldOut", "baseline_rows", "run_baselines", "sweep_baseline_rows", "sampler",
           "scored_like_a_run"]

#: The role of a baseline's row in a sweep's CSV (beside ``figure``, ``step_check``, ``reference``).
BASELINE = "baseline"
#: The privacy cell of the W2 sweep's baselines: its privatization adds seeded Gaussian noise with no projection
#: (section 4.5), so the baselines, like the generators beside them, carry no guarantee.
SWEEP_PRIVACY = ("none: post-processing of the sweep's privatized records (N(0, σ²) per coordinate, no "
                 "projection, seeded noise), outside the guarantee like the generators beside them")


def sampler(model: Baseline) -> Callable[[int, int], np.ndarray]:
    """``(n, seed) -> n records``: the baseline's samples, seeded (its randomness protects no one)."""
    return lambda n, seed: model.sample(n, np.random.default_rng([seed, 0xBA5E]))


def baseline_rows(privatized: np.ndarray, noise_var: float, clean_ref: np.ndarray, *, seed: int, n_eval: int,
                  noise_std: float, privacy: str, draws: int = W2_DRAWS,
                  domain: tuple[float, float] | None = None,
                  extra: Callable[[np.ndarray, int], dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """One row per baseline fitted to ``privatized`` (record space) with noise variance ``noise_var`` per
    coordinate: ``loss`` (its name), ``noise_std``, ``role`` = ``baseline``, ``seed``, ``w2``, ``w2_draw_std``,
    ``w2_draws``, the second measure's columns when ``extra`` is given, ``n_eval``, ``privacy``. ``clean_ref``:
    the clean held-out records the generators are scored against (record space)."""
    rows = []
    for name, model in fit_local_baselines(privatized, noise_var, seed=seed, domain=domain).items():
        fake, w2s = score_sampler(sampler(model), clean_ref, seed=seed, n_eval=n_eval, draws=draws)
        rows.append({"loss": name, "noise_std": float(noise_std), "role": BASELINE, "seed": int(seed), **w2s,
                     **(extra(fake, seed) if extra is not None else {}), "n_eval": n_eval, "privacy": privacy})
    return rows


def sweep_baseline_rows(clean_train: np.ndarray, clean_ref: np.ndarray, noise_levels: Sequence[float],
                        seeds: Sequence[int], *, n_eval: int, draws: int = W2_DRAWS,
                        extra: Callable[[np.ndarray, int], dict[str, Any]] | None = None,
                        on_row: Callable[[dict[str, Any]], None] | None = None) -> list[dict[str, Any]]:
    """The W2 sweep's baselines (Fig. 5): per seed and noise level, the baselines fitted to the very records that
    seed's generators at that level trained on (``w2.privatized_records``; the sweep privatizes in-process, so
    the clean records pass through here only to be noised, as they do for its generators)."""
    from dpsynth.methods.entropic_wgan import to_records

    train, ref = to_records(clean_train), to_records(clean_ref)
    domain = (-1.0, 1.0) if np.asarray(clean_train).ndim == 4 else None
    rows: list[dict[str, Any]] = []
    for seed in seeds:
        for level, s in enumerate(noise_levels):
            noisy = privatized_records(train, float(s), int(seed), level)
            for row in baseline_rows(noisy, float(s) ** 2, ref, seed=int(seed), n_eval=n_eval, noise_std=float(s),
                                     privacy=SWEEP_PRIVACY, draws=draws, domain=domain, extra=extra):
                rows.append(row)
                if on_row is not None:
                    on_row(row)
    return rows


def scored_like_a_run(model: Baseline, real: Any, *, record_shape: tuple[int, ...], n_synthetic: int, n_sets: int,
                      seed: int) -> dict[str, Any]:
    """A baseline scored as a run's evaluate stage scores its generator (``metrics.json``'s ``w2`` record, e.g.
    Reshetova et al.'s Fig. 11 cells): ``n_sets`` synthetic sets of ``n_synthetic`` records, images stored as the
    sampling stage stores a generator's (``sampling.to_storage``: uint8), then ``metrics.w2_scores`` (the W2 to the
    clean test split) and, for images, ``closeness.closeness_of_sets`` (KID, precision, recall)."""
    import torch

    from dpsynth.evaluate.closeness import closeness_of_sets
    from dpsynth.evaluate.metrics import w2_scores
    from dpsynth.evaluate.sampling import to_storage

    image = len(record_shape) >= 2
    draw = sampler(model)
    sets = []
    for k in range(n_sets):
        x = torch.from_numpy(draw(n_synthetic, seed + 1 + 7919 * k))
        sets.append(to_storage(x.reshape(n_synthetic, *record_shape), "tanh") if image
                    else to_storage(x, "identity"))
    out = w2_scores(sets, real)
    if image:
        out["closeness"] = closeness_of_sets(sets, real.x_test, real.y_test, real.num_classes)
    return out


@dataclass(frozen=True)
class HeldOut:
    """The clean held-out records a run is scored against, and nothing else of its dataset: what
    :func:`run_baselines` passes to the scoring, so no path from there reaches a clean training record."""

    x_test: Any
    y_test: Any
    num_classes: int

    @classmethod
    def of(cls, real: Any) -> HeldOut:
        return cls(real.x_test, real.y_test, int(real.num_classes))


def run_baselines(privatized: str | Path, real: Any, *, n_synthetic: int, n_sets: int, seed: int,
                  ks: tuple[int, ...] = CODEBOOK_KS) -> dict[str, Any]:
    """The ``baselines`` record of a run trained on locally privatized records: every baseline
    (``methods.local_baselines``) fitted to the run's own privatized file ``privatized`` alone
    (``read_privatized``: the records and their privacy report; k-means seeded with ``seed``, the run's) and
    scored as the run's generator is (:func:`scored_like_a_run`: ``n_sets`` sets of ``n_synthetic`` records, the
    same W2 subsamples of the clean test split, KID / precision / recall for images). ``real``: the clean dataset
    whose TEST split the run is scored against -- only that split goes on (:class:`HeldOut`).

    Returns ``{"available": True, "privatized", "n_records", "mechanism", "epsilon", "delta", "private", "privacy",
    "seed", "n_synthetic", "n_synthetic_sets", "models": {name: the run's ``w2`` record's shape}, "skipped":
    {name: why}, "seconds"}``; ``privacy`` is the baselines' own: post-processing of the privatized records at the
    privatization's (epsilon, delta). ``{"available": False, "reason", "privatized"}`` for records the baselines
    cannot fit (DCT coefficients). A missing privatized file is a ``DataError`` naming it."""
    from dpsynth.io import read_json
    from dpsynth.methods.local_baselines import read_privatized

    npz = Path(privatized)
    if not npz.is_file() or not npz.with_suffix(".json").is_file():
        raise DataError(f"{npz}: the privatized records this run trained on (and their report, "
                        f"{npz.with_suffix('.json').name}) are needed to fit its trivial private baselines; run its "
                        "privatize stage first (`dpsynth privatize <run>`)")
    if (read_json(npz.with_suffix(".json")) or {}).get("dct"):
        return {"available": False, "privatized": str(npz),
                "reason": "the privatized records are DCT coefficients (local.dct): the baselines fit records in "
                          "pixels, where the noise covariance is known"}
    t0 = time.perf_counter()
    priv = read_privatized(npz)
    n = len(priv.records)
    fit = tuple(k for k in ks if k <= n)
    skipped = {codebook_name(k): f"a codebook of k = {k} needs at least {k} privatized records, the file has {n}"
               for k in ks if k > n}
    test = HeldOut.of(real)
    models = {name: scored_like_a_run(model, test, record_shape=priv.record_shape, n_synthetic=n_synthetic,
                                      n_sets=n_sets, seed=seed)
              for name, model in fit_local_baselines(priv.records, priv.noise_var, seed=seed, ks=fit,
                                                     domain=priv.domain).items()}
    return {"available": True, "privatized": str(npz), "n_records": n, "mechanism": priv.mechanism,
            "epsilon": float(priv.epsilon), "delta": float(priv.delta), "private": priv.private,
            "privacy": priv.privacy, "seed": int(seed), "n_synthetic": int(n_synthetic),
            "n_synthetic_sets": int(n_sets), "models": models, **({"skipped": skipped} if skipped else {}),
            "seconds": round(time.perf_counter() - t0, 2)}
