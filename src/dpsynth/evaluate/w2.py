"""W2 distance between generated records and the CLEAN data (Reshetova et al. (arXiv:2306.09547) Fig. 5), and the
W2-versus-noise sweep over the three losses.

Exact OT (POT's network simplex, ``ot.emd2``) on uniform subsamples of both sides, cost
``||x - y||_2^2``, result ``sqrt`` of the optimal cost -- the paper "approximate[s] the
target distribution by the empirical distribution of the non-privatized data". Subsampling
keeps the O(n^3) solver affordable; the subsample size and seed are part of every result
because the empirical W2 of n points carries an O(n^{-1/d})-type bias (the same for all
compared generators, so comparisons at equal n are fair).

Records live in the method's record space (``entropic_wgan.to_records``: images in
[-1, 1] flattened, points as they are).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from dpsynth.errors import ConfigError, DataError

__all__ = ["w2_distance", "entropic_w2", "w2_to_clean", "noise_sweep", "sweep_runs", "level_stats", "train_and_score",
           "score_sampler", "privatized_records",
           "NoiseRun", "SWEEP_LOSSES", "STEP_CHECK_TOLERANCE"]

SWEEP_LOSSES = ("entropic", "exact", "sinkhorn_divergence")
#: The step count's criterion (Figs. 5 and 11; the papers state no count): twice the steps move no W2 to the
#: clean data by more than this fraction. The stage records it, the report checks it on the step-check runs.
STEP_CHECK_TOLERANCE = 0.05
#: Sample draws per trained generator: each a fresh generated sample and a fresh subsample of the clean records;
#: their spread (``w2_draw_std``) is the estimator's noise, the claim checker's interval where one run is all
#: there is (it cannot see the spread between training runs, and the report says so).
W2_DRAWS = 8
#: Generated records kept per run for the report's sample grids (rounded; the sweep is outside the guarantee).
SAMPLES_KEPT = 36


def _check(x: np.ndarray, name: str) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    if x.ndim != 2 or x.shape[0] == 0:
        raise DataError(f"w2: {name} must be a non-empty (N, D) array, got shape {x.shape}")
    if not np.isfinite(x).all():
        raise DataError(f"w2: {name} contains NaN or Inf")
    return x


def _pair(x: np.ndarray, y: np.ndarray, n: int | None, seed: int, what: str) -> tuple[np.ndarray, np.ndarray]:
    """Both clouds checked, of one dimension, each subsampled to ``n`` rows without replacement
    when larger (``n=None``: everything)."""
    x, y = _check(x, "x"), _check(y, "y")
    if x.shape[1] != y.shape[1]:
        raise DataError(f"{what}: dimensions differ ({x.shape[1]} vs {y.shape[1]})")
    if n is not None and n < 1:
        raise ConfigError(f"{what}: subsample size n must be >= 1 or None, got {n!r}")
    rng = np.random.default_rng(seed)
    if n is not None and x.shape[0] > n:
        x = x[rng.choice(x.shape[0], n, replace=False)]
    if n is not None and y.shape[0] > n:
        y = y[rng.choice(y.shape[0], n, replace=False)]
    return x, y


def w2_distance(x: np.ndarray, y: np.ndarray, *, n: int | None = 1000, seed: int = 0) -> float:
    """``W_2`` between the empirical measures of ``x`` and ``y`` (each subsampled to ``n`` rows
    without replacement when larger; ``n=None`` uses everything)."""
    import ot

    x, y = _pair(x, y, n, seed, "w2")
    m = ot.dist(x, y, metric="sqeuclidean")
    a, b = np.full(x.shape[0], 1.0 / x.shape[0]), np.full(y.shape[0], 1.0 / y.shape[0])
    cost = float(ot.emd2(a, b, m, numItermax=max(100_000, 50 * m.size)))
    return float(np.sqrt(max(cost, 0.0)))


def entropic_w2(x: np.ndarray, y: np.ndarray, temperature: float, *, n: int | None = 1000, seed: int = 0) -> float:
    """Reshetova et al.'s (arXiv:2306.09547) entropy-regularized ``W_{2,lambda}`` (eq. 8) between the empirical measures
    of ``x`` and ``y``: ``min_P <P, ||x - y||^2> + lambda KL(P | a x b)`` (for uniform
    empirical marginals the mutual-information term is that KL), in squared-cost units. 400
    eps-scaled Sinkhorn iterations: measured against 1,600, the value is within 1e-6 (relative)
    on MNIST at lambda = 2 and 1e-5 on the 2-D half circle at lambda = 0.02, its hardest case.
    Same subsampling as ``w2_distance``.

    Fig. 5 (right) reports it against the PRIVATIZED data at lambda = 2 sigma^2: eq. (16) bounds
    the smoothed KL to the clean distribution by its excess over the clean data's own value."""
    import torch

    from dpsynth.ot.sinkhorn import entropic_ot

    if not (np.isfinite(temperature) and temperature > 0):
        raise ConfigError(f"entropic W2: temperature must be a finite number > 0, got {temperature!r}")
    x, y = _pair(x, y, n, seed, "entropic W2")
    with torch.no_grad():
        value = entropic_ot(torch.from_numpy(x).float(), torch.from_numpy(y).float(), eps=float(temperature),
                            n_iter=400, scaling=0.5, cache_kernel=True)
    return float(value)


def w2_to_clean(generator: Any, clean: np.ndarray, *, n: int = 1000, seed: int = 0) -> dict[str, Any]:
    """Sample ``n`` records from a generator and measure W2 to ``n`` clean records (any split)."""
    from dpsynth.methods.entropic_wgan import sample_records, to_records

    clean_rec = to_records(clean)
    gen = sample_records(generator, n, seed)
    return {"w2": w2_distance(gen, clean_rec, n=n, seed=seed), "n": n, "seed": seed}


@dataclass(frozen=True)
class NoiseRun:
    """One generator of the W2-vs-noise sweep (picklable: a worker process may train it). ``role``
    is ``figure`` (a point of Fig. 5) or ``step_check`` (the same run at twice the steps: the
    evidence that the figure's step count has converged)."""

    loss: str
    noise_std: float
    level: int  # index of the noise level in the sweep: with ``seed``, seeds that level's privatization noise
    steps: int
    role: str = "figure"
    seed: int = 0  # one training run: its weights, batches and privatization noise (another seed, another run)


def sweep_runs(noise_levels: Sequence[float], losses: Sequence[str], steps: int,
               check_level: float | None = None, seeds: Sequence[int] = (0,)) -> list[NoiseRun]:
    """Every run of the sweep, in the CSV's order: per seed (one training run of every setting), each (noise
    level, loss) at ``steps``, then, with ``check_level``, each loss at that noise level at ``2 * steps``."""
    levels = [float(s) for s in noise_levels]
    if check_level is not None and float(check_level) not in levels:
        raise ConfigError(f"check_noise_level {check_level!r} is not one of the noise levels {levels}")
    runs = []
    for seed in seeds:
        runs += [NoiseRun(loss, s, k, steps, seed=int(seed)) for k, s in enumerate(levels) for loss in losses]
        if check_level is not None:
            k = levels.index(float(check_level))
            runs += [NoiseRun(loss, levels[k], k, 2 * steps, "step_check", int(seed)) for loss in losses]
    return runs


def privatized_records(train: np.ndarray, s: float, seed: int, level: int) -> np.ndarray:
    """The training records privatized with N(0, s^2) per coordinate (no projection, as in §4.5):
    seeded by (seed, level), so every run of one level -- in any process -- sees the same noise, and so do the
    trivial baselines of that cell (``evaluate.baselines``)."""
    return train + np.random.default_rng([seed, level]).normal(0.0, float(s), train.shape)


def _held_out(ref: np.ndarray, s: float, seed: int, level: int, n_eval: int) -> tuple[np.ndarray, np.ndarray]:
    """Fig. 5 (right)'s validation records: held-out records privatized with their own noise, and other
    held-out records, clean (the same ones would sit next to their own noisy copies and read low)."""
    perm = np.random.default_rng([seed, level, 2]).permutation(len(ref))
    h = min(n_eval, len(ref) // 2)
    noisy = ref[perm[:h]] + np.random.default_rng([seed, level, 1]).normal(0.0, float(s), (h, ref.shape[1]))
    return noisy, ref[perm[h:2 * h]]


def level_stats(clean_train: np.ndarray, clean_ref: np.ndarray, s: float, level: int, *, seed: int,
                n_eval: int) -> dict[str, float]:
    """What one noise level gives without a generator: the W2 of the privatized records themselves to
    the clean held-out ones (what a generator that learnt the noise gets) and the entropic W2 of clean
    held-out records to the privatized held-out ones (what the clean distribution gets, Fig. 5 right)."""
    from dpsynth.methods.entropic_wgan import to_records

    train, ref = to_records(clean_train), to_records(clean_ref)
    noisy_ref, clean_ref_h = _held_out(ref, s, seed, level, n_eval)
    return {"w2_privatized_data": w2_distance(privatized_records(train, s, seed, level), ref, n=n_eval, seed=seed),
            "entropic_w2_privatized_clean": entropic_w2(clean_ref_h, noisy_ref, 2.0 * float(s) ** 2, n=None)}


def score_sampler(sample: Callable[[int, int], np.ndarray], ref: np.ndarray, *, seed: int, n_eval: int,
                  draws: int = W2_DRAWS) -> tuple[np.ndarray, dict[str, Any]]:
    """The sweep's W2 of one model (a trained generator, or a trivial baseline: ``evaluate.baselines``) to the
    clean records ``ref``: ``sample(n, s)`` draws n records seeded by s; the first draw (seed ``seed + 1``) is
    the row's ``w2`` (and the records returned, which the second measure reads), ``draws`` - 1 further draws of
    both sides give ``w2_draw_std``. One path, so every row of a table is scored alike."""
    fake = sample(n_eval, seed + 1)
    w2 = w2_distance(fake, ref, n=n_eval, seed=seed)
    values = [w2] + [w2_distance(sample(n_eval, seed + 1 + 7919 * k), ref, n=n_eval, seed=seed + 7919 * k)
                     for k in range(1, draws)]
    return fake, {"w2": w2, "w2_draw_std": float(np.std(values, ddof=1)) if len(values) > 1 else float("nan"),
                  "w2_draws": len(values)}


def train_and_score(run: NoiseRun, clean_train: np.ndarray, clean_ref: np.ndarray, settings: dict[str, Any],
                    on_step: Callable[[], None] | None = None,
                    extra: Callable[[np.ndarray, int], dict[str, Any]] | None = None, *,
                    generator: Any = None, trained_seconds: float = 0.0) -> dict[str, Any]:
    """Train ``run``'s generator on its privatized records (cost ``||x-y||^2``, temperature
    ``2 s^2``) and score it: W2 to the clean held-out records and the entropic W2 to the privatized
    held-out ones; ``extra(records, seed)`` adds further measures of the same first sample draw W2 reads
    (the second measure, ``closeness.CloseToClean``). Depends only on its arguments (seeded), so it gives the
    same row in any process. ``generator``: ``run``'s generator trained elsewhere (the packed trainer,
    ``w2_packed``, in ``trained_seconds`` per run): only scored, by the same code."""
    import time

    from dpsynth.config import EntropicWGANHparams
    from dpsynth.methods.entropic_wgan import LossSpec, fit, sample_records, to_records

    st = settings
    train, ref = to_records(clean_train), to_records(clean_ref)
    shape = tuple(np.asarray(clean_train).shape[1:])
    lam = 2.0 * run.noise_std**2
    hp = EntropicWGANHparams(batch_size=st["batch_size"], lr=st["lr"], optimizer=st["optimizer"],
                             generator=st["generator"], loss=run.loss)  # type: ignore[arg-type]
    spec = LossSpec(loss=run.loss, p=2, temperature=lam, n_iter=st["sinkhorn_iters"], scaling=st["sinkhorn_scaling"])
    t0 = time.perf_counter()
    if generator is None:
        noisy = privatized_records(train, run.noise_std, run.seed, run.level)
        gen = fit(noisy, shape, spec, hp, steps=run.steps, seed=run.seed, on_step=on_step)
        del noisy
    else:
        gen, t0 = generator, t0 - trained_seconds
    n_eval = st["n_eval"]
    noisy_ref, _ = _held_out(ref, run.noise_std, run.seed, run.level, n_eval)
    fake, w2s = score_sampler(lambda n, s: sample_records(gen, n, s), ref, seed=run.seed, n_eval=n_eval,
                              draws=st.get("draws", W2_DRAWS))
    measures = extra(fake, run.seed) if extra is not None else {}
    return {"loss": run.loss, "noise_std": run.noise_std, "role": run.role, "w2": w2s["w2"], **measures,
            "w2_draw_std": w2s["w2_draw_std"], "w2_draws": w2s["w2_draws"],
            "entropic_w2_privatized": entropic_w2(fake[:len(noisy_ref)], noisy_ref, lam, n=None),
            "temperature": lam, "steps": run.steps, "batch_size": st["batch_size"], "seed": run.seed,
            "n_eval": n_eval, "samples": fake[:SAMPLES_KEPT].round(3).tolist(),
            "seconds": round(time.perf_counter() - t0, 2)}


def noise_sweep(
    clean_train: np.ndarray,
    clean_ref: np.ndarray,
    noise_levels: Sequence[float],
    *,
    losses: Sequence[str] = SWEEP_LOSSES,
    generator: str = "mlp",
    steps: int = 1000,
    batch_size: int = 200,
    lr: float = 1e-4,
    optimizer: str = "adam",
    sinkhorn_iters: int = 200,
    sinkhorn_scaling: float | None = None,
    seeds: Sequence[int] = (0,),
    n_eval: int = 1000,
    draws: int = W2_DRAWS,
    check_level: float | None = None,
    workers: int = 1,
    threads: int = 1,
    pack: int = 0,
    device: str = "cpu",
    cache_dir: str | Path | None = None,
    on_row: Callable[[dict[str, Any]], None] | None = None,
    on_step: Callable[[], None] | None = None,
    extra: Callable[[np.ndarray, int], dict[str, Any]] | None = None,
    extra_name: str | None = None,
) -> list[dict[str, Any]]:
    """Fig. 5: for each Gaussian noise std ``s`` and loss, privatize ``clean_train`` with
    N(0, s^2) per coordinate (no projection, as in §4.5), train a generator with cost
    ``||x-y||_2^2`` and temperature ``2 s^2``, and measure W2 to ``clean_ref``.

    Returns one row per run of :func:`sweep_runs` (each (loss, noise level), then the step check):
    ``loss, noise_std, role, w2, w2_privatized_data`` (the W2 of the noisy records themselves: what a
    generator that learnt the noise gets), Fig. 5's right panel ``entropic_w2_privatized`` --
    ``W_{2,2s^2}`` from the generator to held-out privatized records (``clean_ref`` plus fresh noise,
    which no generator saw) -- and ``entropic_w2_privatized_clean``, the same for the clean held-out
    records themselves (the value a generator equal to the clean distribution would get; by Reshetova
    et al. eq. 16 the excess over it bounds the smoothed KL), plus the settings. Defaults are §4.5's
    (MLP 2x500, latent U[0,1]^2, L = 200, b = 200).

    ``workers`` > 1 trains the runs in that many processes side by side (each with ``threads`` torch
    threads): the rows are the same as with one (every run is seeded by itself). ``cache_dir`` keeps
    each finished run's row (keyed by everything it depends on), so an interrupted sweep resumes with
    the runs it had not finished. ``pack`` > 0 trains the runs in packs of that many on ``device`` instead
    (``w2_packed``: the packed trainer, its own draws, member checkpoints beside the row cache; ``workers``
    then score the trained generators). ``on_row`` sees each row as soon as it exists, ``on_step`` every
    generator step of a run trained in this process (progress). ``extra`` (named ``extra_name``, which keys
    the row cache) adds its measures of each generator's first sample draw to the row (``train_and_score``).
    """
    bad = [loss for loss in losses if loss not in SWEEP_LOSSES]
    if bad or not losses:
        raise ConfigError(f"noise_sweep: losses must be a non-empty subset of {list(SWEEP_LOSSES)}, got {list(losses)}")
    if not noise_levels or any(not np.isfinite(s) or s <= 0 for s in noise_levels):
        raise ConfigError(f"noise_sweep: noise levels must be finite and > 0, got {list(noise_levels)}")
    runs = sweep_runs(noise_levels, losses, steps, check_level, seeds)
    settings = {"generator": generator, "batch_size": batch_size, "lr": lr, "optimizer": optimizer,
                "sinkhorn_iters": sinkhorn_iters, "sinkhorn_scaling": sinkhorn_scaling, "n_eval": n_eval,
                "draws": draws, "extra": extra_name if extra is not None else None,
                **({"trainer": "packed"} if pack else {})}  # the packed trainer's draws: other rows
    cache = _RowCache(cache_dir, settings, clean_train, clean_ref) if cache_dir is not None else None
    stats: dict[tuple[int, int], dict[str, float]] = {}

    def finish(run: NoiseRun, row: dict[str, Any]) -> dict[str, Any]:
        key = (run.seed, run.level)
        if key not in stats:
            stats[key] = level_stats(clean_train, clean_ref, run.noise_std, run.level, seed=run.seed, n_eval=n_eval)
        row = {**row, **stats[key]}
        if on_row is not None:
            on_row(row)
        return row

    done: dict[int, dict[str, Any]] = {}
    for i, run in enumerate(runs):
        row = cache.get(run) if cache is not None else None
        if row is not None:
            done[i] = finish(run, row)
    todo = [i for i in range(len(runs)) if i not in done]
    if pack and todo:
        from dpsynth.evaluate.w2_packed import sweep_packed

        for i, row in sweep_packed(runs, todo, clean_train, clean_ref, settings, pack=pack, device=device,
                                   privatize=privatized_records, score=train_and_score, worker_init=_worker_init,
                                   score_in_worker=_score_trained_in_worker,
                                   cache=cache, workers=workers, threads=threads, extra=extra, on_step=on_step):
            done[i] = finish(runs[i], row)
    elif workers <= 1 or len(todo) <= 1:
        for i in todo:
            row = train_and_score(runs[i], clean_train, clean_ref, settings, on_step, extra)
            if cache is not None:
                cache.put(runs[i], row)
            done[i] = finish(runs[i], row)
    else:
        import multiprocessing as mp
        from concurrent.futures import ProcessPoolExecutor, as_completed

        # spawn: a fresh interpreter per worker (fork would copy torch's thread pools mid-use)
        with ProcessPoolExecutor(max_workers=min(workers, len(todo)), mp_context=mp.get_context("spawn"),
                                 initializer=_worker_init, initargs=(clean_train, clean_ref, threads, extra)) as pool:
            # longest first (steps; the Sinkhorn divergence solves twice), so no worker idles at the end
            cost = {"sinkhorn_divergence": 2.0}
            todo.sort(key=lambda i: -runs[i].steps * cost.get(runs[i].loss, 1.0))
            futures = {pool.submit(_worker_run, runs[i], settings): i for i in todo}
            for fut in as_completed(futures):
                i = futures[fut]
                row = fut.result()
                if cache is not None:
                    cache.put(runs[i], row)
                done[i] = finish(runs[i], row)
    return [done[i] for i in range(len(runs))]


_WORKER_DATA: dict[str, Any] = {}


def _worker_init(clean_train: np.ndarray, clean_ref: np.ndarray, threads: int,
                 extra: Callable[[np.ndarray, int], dict[str, Any]] | None = None) -> None:
    """A sweep worker: the records (and the extra measure) once per process, torch and the BLAS pools at
    ``threads``."""
    import torch
    from threadpoolctl import threadpool_limits

    torch.set_num_threads(threads)
    threadpool_limits(limits=threads)
    _WORKER_DATA.update(train=clean_train, ref=clean_ref, extra=extra)


def _worker_run(run: NoiseRun, settings: dict[str, Any]) -> dict[str, Any]:
    return train_and_score(run, _WORKER_DATA["train"], _WORKER_DATA["ref"], settings, extra=_WORKER_DATA["extra"])


def _score_trained_in_worker(run: NoiseRun, settings: dict[str, Any], arch: dict[str, Any], state: dict[str, Any],
                             secs: float) -> dict[str, Any]:
    """A worker scores one packed-trained generator (``w2_packed``), rebuilt from its weights on the worker's CPU."""
    from dpsynth.nets import build_seeded_generator

    gen = build_seeded_generator(arch, 0, "cpu")
    gen.load_state_dict(state)
    return train_and_score(run, _WORKER_DATA["train"], _WORKER_DATA["ref"], settings, extra=_WORKER_DATA["extra"],
                           generator=gen.eval(), trained_seconds=secs)


class _RowCache:
    """Finished rows of a sweep, one JSON file per run, named by a hash of everything the row depends
    on (the run, the settings, the records' bytes): a re-run with any of them changed misses."""

    def __init__(self, folder: str | Path, settings: dict[str, Any], train: np.ndarray, ref: np.ndarray) -> None:
        import hashlib

        self.folder = Path(folder)
        digest = hashlib.sha256()
        for arr in (train, ref):
            a = np.ascontiguousarray(arr)
            digest.update(f"{a.dtype}{a.shape}".encode())
            digest.update(a.tobytes())
        self.base = {"settings": settings, "records": digest.hexdigest()}

    def _path(self, run: NoiseRun) -> Path:
        import hashlib
        import json
        from dataclasses import asdict

        key = json.dumps({**self.base, "run": asdict(run)}, sort_keys=True)
        return self.folder / f"{run.role}-{run.loss}-s{run.noise_std:g}-{run.steps}-" \
            f"{hashlib.sha256(key.encode()).hexdigest()[:16]}.json"

    def get(self, run: NoiseRun) -> dict[str, Any] | None:
        import json

        try:
            row = json.loads(self._path(run).read_text())
        except (OSError, ValueError):
            return None
        return row if isinstance(row, dict) and "w2" in row else None

    def put(self, run: NoiseRun, row: dict[str, Any]) -> None:
        from dpsynth.io import write_json

        self.folder.mkdir(parents=True, exist_ok=True)
        write_json(self._path(run), row)
