"""Member-steps/s of the packed entropic-WGAN trainer (methods/entropic_wgan/packed.py) at several K, beside the
per-run trainer, on Reshetova et al.'s MNIST MLP (section 4.5: 2 -> 500 -> 500 -> 784, b = 200, L = 200 at a
fixed temperature; arXiv:2306.09547). MNIST-shaped stand-in records (60,000 x 784, uniform in [-1, 1] plus the
sigma = 1 noise): the step's cost does not depend on their values. On CUDA it first holds the pack at K = 1 to the
per-run trainer with its own draws (the weights after 3 steps), the check a GPU run of the target relies on.

    python benchmarks/ewgan_packed.py --device cuda --ks 1 16 150 --loss entropic --out results.json

The costs book's ``entropic_mlp_packed_*_gpu`` entries are assumptions until such a file exists (issue 68).
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from datetime import datetime, timezone

import numpy as np
import torch

from dpsynth.config import EntropicWGANHparams
from dpsynth.methods.entropic_wgan import EWGANTrainer, LossSpec, generator_arch
from dpsynth.methods.entropic_wgan.packed import Member, PackedEWGAN
from dpsynth.nets import build_seeded_generator

SHAPE = (1, 28, 28)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def _rate(step, k: int, steps: int, device: torch.device) -> float:
    step()  # warm-up (allocations, kernel selection)
    _sync(device)
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    _sync(device)
    return k * steps / (time.perf_counter() - t0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--ks", type=int, nargs="+", default=[1, 4, 16])
    ap.add_argument("--loss", default="entropic", choices=["entropic", "exact", "sinkhorn_divergence"])
    ap.add_argument("--steps", type=int, default=20, help="timed packed steps per K (the per-run trainer: the same)")
    ap.add_argument("--out", default=None, help="write the rates as JSON here")
    a = ap.parse_args()
    device = torch.device(a.device)
    rng = np.random.default_rng(0)
    recs = torch.tensor(rng.uniform(-1, 1, (60000, 784)) + rng.normal(0, 1, (60000, 784)), dtype=torch.float32,
                        device=device)
    hp = EntropicWGANHparams(batch_size=200, lr=1e-4, optimizer="adam", generator="mlp", loss=a.loss)
    spec = LossSpec(loss=a.loss, p=2, temperature=2.0, n_iter=200, scaling=None)
    out: dict = {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "device": str(device),
                 "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor(),
                 "torch_threads": torch.get_num_threads(), "loss": a.loss, "steps": a.steps, "member_steps_per_s": {}}
    gen = build_seeded_generator(generator_arch("mlp", SHAPE), 0, device)
    run = EWGANTrainer(gen, recs, spec, hp, 0)
    if device.type == "cuda":  # the pack at K = 1 is the per-run trainer (its own draws): weights after 3 steps
        pack = PackedEWGAN([Member("m0", 0, recs, 2.0)], SHAPE, spec, hp, device=device, draws="torch")
        for _ in range(3):
            run.step()
            pack.step()
        diff = max(float((v - pack.model.member_state(0)[k]).abs().max()) for k, v in gen.state_dict().items())
        out["k1_max_abs_weight_difference_after_3_steps"] = diff
    out["per_run_steps_per_s"] = _rate(run.step, 1, a.steps, device)
    for k in a.ks:
        pack = PackedEWGAN([Member(f"m{i}", i, recs, 2.0) for i in range(k)], SHAPE, spec, hp, device=device)
        out["member_steps_per_s"][str(k)] = _rate(pack.step, k, a.steps, device)
        print(f"K = {k}: {out['member_steps_per_s'][str(k)]:.1f} member-steps/s", flush=True)
    print(f"per-run: {out['per_run_steps_per_s']:.1f} steps/s", flush=True)
    if a.out:
        with open(a.out, "w") as fh:
            json.dump(out, fh, indent=1)


if __name__ == "__main__":
    main()
