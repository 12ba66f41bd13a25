"""An entropic-WGAN sweep trained together (methods/entropic_wgan/together.py; Reshetova et al.'s Fig. 11 cells on
the GPU target): each cell privatized by its own job, the cells trained in one packed job, each released by its
own `dpsynth train` from its finished checkpoint -- weights equal to the pack's members trained directly."""

from __future__ import annotations

import csv
import os
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from tests.conftest import REPO

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _params(tmp: Path) -> Path:
    p = yaml.safe_load((REPO / "params.yaml").read_text())
    p["scale"], p["privacy_noise"], p["datasets"] = "smoke", "reproducible", ["manifold2d_half_circle"]
    p["data"]["root"] = str(tmp / "data")
    p["experiments"] = {"ew2d": {
        "method": "entropic_wgan", "dataset": "manifold2d_half_circle", "description": "packed sweep test",
        "local": {"mechanism": "gaussian", "epsilon": 5, "delta": 1.0e-4, "radius": 1.0},
        "hparams": {"batch_size": 32, "lr": 1.0e-3, "optimizer": "adam", "generator": "mlp", "loss": "entropic",
                    "sinkhorn_iters": 10, "sinkhorn_scaling": None, "max_steps": 4}}}
    p["sweeps"] = {"sw": {"base": "ew2d", "grid": {"n": [300, 500], "seed": [0, 1]}, "train_together": True}}
    p["pipeline"] = {"experiments": [], "sweeps": [], "tables": []}
    p["tables"], p["w2_noise"] = {}, {}
    p["evaluation"]["real_datasets"] = []
    p["data"]["public"] = ["manifold2d_half_circle"]
    path = tmp / "params.yaml"
    path.write_text(yaml.safe_dump(p))
    return path


def test_cells_trained_together_release_through_their_own_train_jobs(tmp_path: Path, monkeypatch) -> None:
    from dpsynth.cli import main
    from dpsynth.config import EntropicWGANHparams
    from dpsynth.methods.artifacts import TOGETHER_KEY, load_generator
    from dpsynth.methods.entropic_wgan import LossSpec
    from dpsynth.methods.entropic_wgan.packed import Member, PackedEWGAN

    monkeypatch.chdir(tmp_path)
    params = str(_params(tmp_path))
    dirs = ["--out", str(tmp_path / "models"), "--private-out", str(tmp_path / "private")]
    assert main(["data", "prepare", "manifold2d_half_circle", "--params", params]) == 0
    from dpsynth.config import load_params

    cells = load_params(params).cells_of("sw")
    assert len(cells) == 4
    for cell in cells:  # each cell's own privatize job (its own release)
        assert main(["privatize", cell, "--params", params]) == 0
    assert main(["train-sweep", "sw", "--params", params, "--no-progress", *dirs]) == 0
    for cell in cells:
        ckpt = torch.load(tmp_path / "private" / "runs" / cell / "checkpoint.pt", weights_only=False)
        steps = ckpt["total_steps"]  # the smoke scale's step budget
        assert ckpt["done"] and ckpt[TOGETHER_KEY] and ckpt["step"] == steps and ckpt["draws"] == "counter"
        assert main(["train", cell, "--params", params, "--no-progress", *dirs]) == 0
        log = list(csv.DictReader(open(tmp_path / "models" / cell / "train_log.csv")))
        assert [int(r["step"]) for r in log][-1] == steps and all(np.isfinite(float(r["loss"])) for r in log)
    # the released generators are the pack's members: the same pack, trained here directly, gives their weights
    members = []
    for cell in cells:
        rec = np.load(tmp_path / "data" / "privatized" / f"{cell}.npz")["x_train"]
        import re

        n, seed = int(re.search(r"-n(\d+)", cell).group(1)), int(re.search(r"-seed(\d+)", cell).group(1))
        members.append(Member(cell, seed, torch.tensor(rec[:n], dtype=torch.float32), 0.0))
    hp = EntropicWGANHparams(batch_size=32, lr=1e-3, optimizer="adam", generator="mlp", loss="entropic")
    from dpsynth.methods.entropic_wgan import local_noise
    from dpsynth.config import LocalMechanism

    s = local_noise(LocalMechanism(mechanism="gaussian", epsilon=5, delta=1e-4, radius=1.0))["noise_scale"]
    members = [Member(m.name, m.seed, m.records, 2 * s ** 2) for m in members]
    pack = PackedEWGAN(members, (2,), LossSpec("entropic", 2, 2 * s ** 2, 10, None), hp)
    pack.run(steps)
    for k, cell in enumerate(cells):
        gen, _ = load_generator(tmp_path / "models" / cell / "generator.pt")
        for name, value in pack.model.member_state(k).items():
            torch.testing.assert_close(gen.state_dict()[name], value, rtol=0, atol=1e-6)
    assert os.path.isfile(tmp_path / "private" / "sweeps" / "sw" / "group.json")
