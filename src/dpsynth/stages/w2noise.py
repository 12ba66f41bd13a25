"""The w2noise stage (`dpsynth w2noise DATASET`): Reshetova et al. (arXiv:2306.09547) Fig. 5 as a
pipeline stage.

For every seed, noise level and loss of ``w2_noise.<DATASET>`` in params.yaml: privatize the
clean training records with N(0, s^2) per coordinate, train a generator on them, and measure
its W2 to clean held-out records (the test split, which no generator sees). Writes
``results/w2_noise/<DATASET>.csv`` (one row per seed x noise x loss; the report's table and
curve read it) and a ``.json`` beside it with the settings and timings -- both atomically,
after the last row, so an interrupted sweep leaves no partial file.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING

from dpsynth.errors import ConfigError, DpsynthError, did_you_mean
from dpsynth.locations import check_writable_dir
from dpsynth.stages.common import prepare_cpu, resolve_device

if TYPE_CHECKING:
    from dpsynth.config import Params

FIELDS = ("loss", "noise_std", "role", "seed", "w2", "w2_draw_std", "w2_draws", "kid", "kid_subset_std", "precision",
          "recall", "w2_privatized_data", "entropic_w2_privatized",
          "entropic_w2_privatized_clean", "temperature", "steps", "batch_size", "n_train", "n_eval", "scale", "seconds",
          "privacy")


def sample_key(row: dict) -> str:
    """One run's key in the samples file: role, loss, noise level and seed."""
    return f"{row['role']}|{row['loss']}|{float(row['noise_std']):g}|{int(row['seed'])}"


def run_w2noise(params: Params, dataset: str, *, results: str = "results", out: str | None = None,
                private_out: str = "private") -> int:
    """Run ``w2_noise.<dataset>`` (or, at a scale it is not configured for, write its empty result
    saying so) into RESULTS/w2_noise/DATASET.csv (+ .json), or ``out`` and the .json beside it.
    Finished runs are kept under PRIVATE_OUT/w2_noise/DATASET/, so an interrupted sweep resumes."""
    import numpy as np
    import pandas as pd

    from dpsynth.data import load_processed
    from dpsynth.evaluate.baselines import sweep_baseline_rows
    from dpsynth.evaluate.closeness import FEATURES, ROW_FIELDS, CloseToClean, FeatureSpace
    from dpsynth.evaluate.w2 import STEP_CHECK_TOLERANCE, W2_DRAWS, noise_sweep, sweep_runs
    from dpsynth.evaluate.w2_references import reference_rows
    from dpsynth.io import atomic_open, write_json
    from dpsynth.paths import OUTSIDE_GUARANTEE, w2_noise_csv, w2_noise_runs_dir, w2_noise_samples
    from dpsynth.progress import Progress

    prepare_cpu(params)
    if dataset not in params.w2_noise:
        raise ConfigError(f"w2_noise.{dataset}: no W2-vs-noise sweep configured for this dataset"
                          f"{did_you_mean(dataset, params.w2_noise)} "
                          f"(configured: {sorted(params.w2_noise) or 'none'})")
    cfg, preset = params.w2_noise[dataset], params.preset
    steps = preset.w2_noise_steps or cfg.steps  # the scale's count replaces the sweep's own
    csv_path = Path(out) if out else w2_noise_csv(results, dataset)
    # where it writes, checked before a generator trains: a sweep takes an hour and wrote nothing when its
    # output turned out to be a folder (issue 63 item 9)
    option = "--out" if out else "--results"
    if csv_path.is_dir():
        raise DpsynthError(f"{option} {csv_path}: is a folder; give the CSV file to write, e.g. "
                           f"{csv_path / (dataset + '.csv')} (nothing was run)")
    check_writable_dir(csv_path.parent, option)
    if cfg.scales is not None and params.scale not in cfg.scales:
        # Both DAGs still see the stage's outputs; the report reads the reason from the JSON.
        reason = (f"not run at scale {params.scale!r} (w2_noise.{dataset}.scales: {cfg.scales}; "
                  f"run it with --config scale={cfg.scales[0]} or add {params.scale!r} there)")
        with atomic_open(csv_path) as fh:
            pd.DataFrame([], columns=list(FIELDS)).to_csv(fh, index=False, lineterminator="\n")
        with atomic_open(w2_noise_samples(csv_path), "wb") as fh:
            np.savez_compressed(fh)
        write_json(csv_path.with_suffix(".json"), {
            "dataset": dataset, "scale": params.scale, "settings": cfg.model_dump(mode="json"),
            "skipped": reason})
        print(f"w2noise {dataset}: {reason} -> {csv_path} (no rows)")
        return 0
    rows: list[dict] = []
    data = load_processed(Path(params.data.root) / "processed" / f"{dataset}.npz")
    t0 = time.perf_counter()
    seeds = preset.w2_noise_seeds or (cfg.seeds if cfg.seeds is not None else params.seeds)
    # the packed trainer (scale's w2_noise_pack): the runs train in packs on the GPU when there is one, the
    # workers score them; else one run per worker process
    pack = preset.w2_noise_pack or 0
    device = str(resolve_device("auto")) if pack else "cpu"
    runs = sweep_runs(cfg.noise_levels, cfg.losses, steps, cfg.check_noise_level, seeds)
    # one line every few seconds over all generators, between the per-row lines (with workers, a run's steps
    # count when its row arrives)
    bar = Progress(sum(r.steps for r in runs), f"w2noise {dataset}", bar=False)
    n = len(data.x_train)
    take = preset.w2_noise_train_subset
    idx = np.sort(np.random.default_rng([seeds[0], 0x3F5]).choice(n, take, replace=False)) if take and take < n \
        else np.arange(n)

    def show(row: dict) -> None:
        # which run finished, not its W2s: the sweep trains on the clean records with seeded noise, so its
        # rows are outside the guarantee and never pushed (paths.NOISE_FREE) -- and job logs are not private
        if cfg.workers > 1:
            bar.update(row["steps"])
        check = " (step check)" if row["role"] == "step_check" else ""
        print(f"w2noise {dataset}: seed {row['seed']} noise {row['noise_std']:g} {row['loss']} {row['steps']} steps"
              f"{check}: done ({row['seconds']:.1f} s)", flush=True)

    # The second measure beside W2 (image records with labels): KID, precision and recall in the feature space
    # of a CNN fitted on half of the TEST split (evaluate.closeness: blur does not win there as it does in W2).
    space = FeatureSpace.from_test_split(data.x_test, data.y_test, data.num_classes) if data.is_image else None
    extra = CloseToClean(space) if space is not None else None
    samples: dict[str, np.ndarray] = {}
    for row in noise_sweep(data.x_train[idx], data.x_test, cfg.noise_levels, losses=cfg.losses, steps=steps,
                           batch_size=cfg.batch_size, lr=cfg.lr, sinkhorn_iters=cfg.sinkhorn_iters,
                           seeds=seeds, n_eval=cfg.n_eval, check_level=cfg.check_noise_level,
                           workers=cfg.workers, threads=params.threads, pack=pack, device=device,
                           cache_dir=w2_noise_runs_dir(private_out, dataset),
                           on_row=show, on_step=bar.update if cfg.workers == 1 else None,
                           extra=extra, extra_name=FEATURES if extra is not None else None):
        kept = row.pop("samples", None)
        if kept is not None:
            samples[sample_key(row)] = np.asarray(kept, dtype=np.float32)
        rows.append({**row, "n_train": len(idx), "scale": params.scale})
    rows += [{**r, "n_train": len(idx), "scale": params.scale}
             for r in reference_rows(data.x_train[idx], data.x_test, seed=seeds[0], n_eval=cfg.n_eval, extra=extra)]
    # the trivial private baselines (issue 69 item 3), fitted to each (seed, level)'s privatized records
    rows += [{**r, "n_train": len(idx), "scale": params.scale}
             for r in sweep_baseline_rows(data.x_train[idx], data.x_test, cfg.noise_levels, seeds, n_eval=cfg.n_eval,
                                          extra=extra)]
    bar.close()
    with atomic_open(csv_path) as fh:
        pd.DataFrame(rows, columns=list(FIELDS)).to_csv(fh, index=False, lineterminator="\n")
    with atomic_open(w2_noise_samples(csv_path), "wb") as fh:
        np.savez_compressed(fh, **samples)
    write_json(csv_path.with_suffix(".json"), {
        "dataset": dataset, "scale": params.scale, "settings": cfg.model_dump(mode="json"),
        "steps_this_scale": steps, "seeds": seeds,
        "draws": W2_DRAWS, "samples": str(w2_noise_samples(csv_path)), "clean_reference": "test split",
        "second_measure": None if space is None else {
            "columns": list(ROW_FIELDS), "measured_on": "each generator's first sample draw (the records W2 reads)",
            **space.info},
        "step_check": None if cfg.check_noise_level is None else {
            "noise_level": cfg.check_noise_level, "steps": 2 * steps, "tolerance": STEP_CHECK_TOLERANCE,
            "criterion": f"each loss at noise {cfg.check_noise_level:g} trained at twice the steps ({2 * steps}) "
                         f"moves its W2 to the clean data by at most {STEP_CHECK_TOLERANCE:.0%}"},
        "workers": cfg.workers,
        "trainer": {"packed": pack, "device": device} if pack else "per run",
        "wall_seconds": round(time.perf_counter() - t0, 2)})
    print(f"w2noise {dataset}: {len(rows)} rows ({OUTSIDE_GUARANTEE}: never pushed, not printed) -> {csv_path} "
          f"({time.perf_counter() - t0:.1f} s)")
    return 0
