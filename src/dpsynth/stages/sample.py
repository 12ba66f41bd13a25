"""The sample stage (`dpsynth sample EXPERIMENT`): K synthetic datasets (balanced labels) + a sample grid."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import TYPE_CHECKING

from dpsynth.errors import DpsynthError
from dpsynth.locations import check_apart
from dpsynth.paths import samples_png
from dpsynth.stages.common import DEFAULT_PARAMS, prepare_cpu, get_experiment

if TYPE_CHECKING:
    from dpsynth.config import Params


def run_sample(params: Params, experiment: str, *, source: str = DEFAULT_PARAMS, models: str = "models",
               out: str = "data/synthetic", results: str = "results", private_out: str = "private") -> int:
    """Sample ``params.preset.n_synthetic_sets`` sets of ``n_synthetic`` records from ``experiment``'s
    generator (MODELS/{experiment}/) into OUT/{experiment}/seed{k}.npz, each carrying the generator's
    verified privacy report, and a sample grid RESULTS/runs/{experiment}/samples.png; sets of an
    earlier run that this one did not write are removed. ``source`` names the parameters file in
    the error for an unknown experiment. Neither OUT nor RESULTS may overlap ``private_out`` (the
    private root: checkpoints, diagnostics), either way: what is sampled is released."""
    check_apart(("--private-out", private_out), ("--out", out), ("--results", results))
    exp = get_experiment(params, experiment, source)  # a typo fails here, before torch is imported

    from dpsynth.data.registry import get_spec
    from dpsynth.evaluate.sampling import generate, privacy_caption, sample_grid, write_synthetic
    from dpsynth.io import read_json, sha256_file
    from dpsynth.methods.artifacts import load_generator, writing_to
    from dpsynth.methods.context import GENERATOR_FILE, PRIVACY_FILE

    prepare_cpu(params)
    model_dir = Path(models) / experiment
    privacy_path = model_dir / PRIVACY_FILE
    if not privacy_path.is_file():
        raise DpsynthError(f"{privacy_path}: missing privacy report; refusing to sample from a generator "
                           f"whose guarantee is unknown")
    from dpsynth.privacy.verify import verify_report

    privacy = verify_report(read_json(privacy_path), str(privacy_path))  # recomputed, never trusted
    G, meta = load_generator(model_dir / GENERATOR_FILE)
    gen_hash = sha256_file(model_dir / GENERATOR_FILE)
    out_dir = Path(out) / experiment
    n, k_sets = params.preset.n_synthetic, params.preset.n_synthetic_sets
    spec = get_spec(exp.dataset)
    manifold = None
    if spec.kind == "manifold2d":  # the curve from its definition (public), not the training records
        import numpy as np

        from dpsynth.data.prepare import manifold_points

        manifold = manifold_points(str(spec.options["shape"]), 3000, np.random.default_rng(0))
    written: set[str] = set()
    for k in range(k_sets):
        t0 = time.perf_counter()
        x, y = generate(G, meta, n, seed=k)
        path = out_dir / f"seed{k}.npz"
        with writing_to(path):
            write_synthetic(path, x, y, int(meta["num_classes"]), privacy,
                            {"experiment": experiment, "generator_sha256": gen_hash, "sample_seed": k,
                             "scale": params.scale, "n": n})
        written.add(path.name)
        print(f"{experiment}: synthetic set {k}: {n} samples -> {path} "
              f"({time.perf_counter() - t0:.1f} s)", flush=True)
        if k == 0:
            png = samples_png(results, experiment)
            with writing_to(png):
                sample_grid(x, y, int(meta["num_classes"]), png, class_names=spec.class_names,
                            title=f"{experiment}: {privacy_caption(privacy)}", manifold=manifold,
                            conditional=exp.spec.conditional)
    for stale in remove_stale_sets(out_dir, written):
        print(f"{experiment}: removed {stale} (not a set of this run)")
    sets = f"{len(written)} synthetic set" + ("s" if len(written) != 1 else "")
    print(f"{experiment}: {sets} -> {out_dir}, sample grid -> {samples_png(results, experiment)}", flush=True)
    return 0


_SET = re.compile(r"seed\d+\.npz")
_SET_TEMP = re.compile(r"\.(seed\d+\.npz)\..*\.tmp")  # dpsynth.io.atomic_path's temporaries of a set


def remove_stale_sets(out_dir: Path, keep: set[str]) -> list[Path]:
    """Leave exactly this run's sets: a seed2.npz of an earlier (say paper-scale) run would
    otherwise sit next to them, and a later stage reading every seed*.npz would mix generators.
    Leftover temporaries of such sets go too (those of this run's sets are the atomic writer's
    business). Called only once every new set is written, so a failed run destroys nothing."""
    removed = []
    for path in sorted(out_dir.iterdir()) if out_dir.is_dir() else []:
        if not path.is_file():
            continue
        temp = _SET_TEMP.fullmatch(path.name)
        if (_SET.fullmatch(path.name) and path.name not in keep) or (temp and temp.group(1) not in keep):
            path.unlink(missing_ok=True)
            removed.append(path)
    return removed
