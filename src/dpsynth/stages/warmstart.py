"""The warmstart stage (`dpsynth warmstart EXPERIMENT`): warm-start a GS-WGAN experiment's N_d critics
(non-private), as GS-WGAN (Chen et al., NeurIPS 2020, arXiv:2006.08265) does before training.

Writes ``{private}/warmstart/{name}/critics.pt`` (+ ``warmstart.json``), ``name`` being the
experiment -- or, for a sweep cell that leaves the critics' settings alone (a sigma sweep), its
base, so the whole sweep reuses one warm start. The artifact records the settings and the data
fingerprint; training refuses a warm start that does not match. ``print_path`` prints the
directory without training. The critics are trained WITHOUT noise on the private data, so they
live under the private root (default ``private/``) and are never released: the run's context is
built like a training run's (``stages.train.build_context``) with nothing to release, so only
``private_out`` is checked (before any record is read).
"""

from __future__ import annotations

import json
import time

from dpsynth.errors import ConfigError
from dpsynth.stages.common import DEFAULT_PARAMS, finish
from dpsynth.stages.train import DEFAULT_OUT, build_context


def run_warmstart(experiment: str, *, private_out: str, params_file: str = DEFAULT_PARAMS, scale: str | None = None,
                  seed: int | None = None, device: str = "auto", progress: bool = True, chunk: int | None = None,
                  compare_loop: int = 0, print_path: bool = False, as_json: bool = False) -> int:
    """The stage: train the critics of ``experiment``'s warm start (or, ``print_path``, print where they go)."""
    from dpsynth.methods.gs_wgan import validate, warmstart_location
    from dpsynth.methods.gswgan_critics import (
        PRIVATE_INFO,
        compare_batched_vs_loop,
        data_fingerprint,
        make_shards,
        save_critics,
        warm_start,
    )
    from dpsynth.progress import Progress, format_duration

    # A warm start writes only under private_out (out is unused: nothing is released) and has no checkpoints.
    ctx = build_context(experiment, out=DEFAULT_OUT, private_out=private_out, params_file=params_file, scale=scale,
                        seed=seed, device=device, progress=progress, releases=False)
    if not ctx.experiment.spec.needs_warm_start:
        raise ConfigError(f"experiment {experiment!r} uses method {ctx.experiment.method!r}, which trains "
                          "without a critic warm start")
    validate(ctx)
    settings, directory = warmstart_location(ctx)
    if print_path:
        print(directory)
        return 0
    if chunk is not None and chunk < 1:
        raise ConfigError(f"--chunk must be >= 1, got {chunk}")
    x, y = ctx.data.x_train, ctx.data.y_train
    shards = make_shards(len(x), settings["n_critics"], settings["batch_size"], settings["seed"])  # errors early
    info: dict = {}
    if compare_loop:
        info["batched_vs_loop"] = compare_batched_vs_loop(x, y, ctx.data.num_classes, settings, ctx.device,
                                                          steps=compare_loop)
        print(json.dumps({"batched_vs_loop": info["batched_vs_loop"]}), flush=True)
    total = settings["n_critics"] * settings["warmup_steps"]
    bar = Progress(total, f"warmstart {ctx.name}", unit="critic-step", bar=None if ctx.progress else False)
    t0 = time.perf_counter()
    try:
        bank, run = warm_start(x, y, ctx.data.num_classes, settings, ctx.device, chunk=chunk, progress=bar.update)
    finally:
        bar.close()
    info.update(run)
    path = save_critics(directory, bank, shards, settings, data_fingerprint(x, y), info)
    seconds = time.perf_counter() - t0
    finish(f"warmstart {ctx.name}: {settings['n_critics']} critics x {settings['warmup_steps']} steps in "
           f"{format_duration(seconds)} -> {path} (+ warmstart.json; trained without noise: private, never release)",
           {"experiment": ctx.name, "critics": str(path), "settings": settings, "wall_seconds": round(seconds, 2),
            **{k: v for k, v in info.items() if k != PRIVATE_INFO}}, as_json)  # losses on private data: file only
    return 0
