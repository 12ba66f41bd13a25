"""A swept value takes effect at a small scale, or the sweep is refused (issue: sweeps that mean what
the user wrote).

Real training at the smoke scale on the bundled 28x28 digits (no download, ~0.3 s per step): a
sweep over lr and one over sigma, each cell trained by `dpsynth train` (in-process), and the lr, sigma and steps
each cell's train_summary.json says it trained with compared with the rule params.yaml states:
lr is the experiment's times the scale's lr_multiplier; a sigma cell trains budget x N(cell) / N(base)
steps (N: the steps its own target allows, sigma given) with sigma calibrated to the same epsilon.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from dpsynth.config import parse_params
from dpsynth.errors import ConfigError
from dpsynth.privacy import accounting as acc
from tests.conftest import REPO, digits28_smoke_params, with_digits28

BUDGET = 6  # the smoke scale's step budget here


def _train_cells(tmp_path: Path, processed: Path, grid: dict) -> dict[str, dict]:
    p = digits28_smoke_params("dps_d28", BUDGET)
    p["sweeps"]["sw"] = {"base": "dps_d28", "grid": grid}
    p["pipeline"]["sweeps"] = ["sw"]
    p["data"]["root"] = str(tmp_path / "data")
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(p))
    with_digits28(processed, tmp_path / "data")  # the session's prepared digits28
    from dpsynth.cli import main

    out = {}
    for cell in parse_params(p).cells_of("sw"):
        # `dpsynth train` in this process: the same parser and stage a job runs, without a job's ~5 s of
        # start-up (torch, scikit-learn, dp-accounting) per cell; what is checked is what each cell trained
        rc = main(["train", cell, "--params", str(path), "--out", str(tmp_path / "models"),
                   "--private-out", str(tmp_path / "private"), "--no-progress"])
        assert rc == 0, cell
        out[cell] = json.loads((tmp_path / "models" / cell / "train_summary.json").read_text())
    return out


@pytest.mark.slow
def test_an_lr_sweep_trains_each_cell_at_its_lr_times_the_multiplier(tmp_path: Path, digits28_processed: Path) -> None:
    shipped = yaml.safe_load((REPO / "params.yaml").read_text())
    factor = shipped["scales"]["smoke"]["lr_multiplier"]["dp_sinkhorn"]
    runs = _train_cells(tmp_path, digits28_processed, {"lr": [1.0e-5, 3.0e-5]})
    trained = {name: s["hparams"]["lr"] for name, s in runs.items()}
    assert trained == {"sw-lr1e-05": pytest.approx(1e-5 * factor), "sw-lr3e-05": pytest.approx(3e-5 * factor)}
    # the ratio the user swept is the ratio trained (before the multiplier, every cell trained at one lr)
    assert trained["sw-lr3e-05"] / trained["sw-lr1e-05"] == pytest.approx(3.0)
    assert all(s["steps"] == BUDGET and s["scale_overrides"]["lr"]["paper"] in (1e-5, 3e-5) for s in runs.values())


@pytest.mark.slow
def test_a_sigma_sweep_keeps_the_papers_trade_at_a_step_budget(tmp_path: Path, digits28_processed: Path) -> None:
    """Each cell spends the same epsilon 10; a larger sigma buys more steps, in the ratio the papers'
    way (steps derived from sigma) gives, and trains with a larger calibrated sigma."""
    runs = _train_cells(tmp_path, digits28_processed, {"sigma": [0.9, 1.1, 1.5]})
    n = len(np.load(tmp_path / "data/processed/digits28.npz")["y_train"])
    q = 50 / n  # the experiment's batch (below the smoke cap) over the training records

    def allowed(sigma: float) -> int:
        return acc.max_steps(sigma, q, 1e-5, 10.0, conversion="classic", sampling="poisson")

    steps = {float(name.removeprefix("sw-sigma")): s["steps"] for name, s in runs.items()}
    assert steps == {s: max(1, round(BUDGET * allowed(s) / allowed(1.1))) for s in (0.9, 1.1, 1.5)}
    assert steps[0.9] < steps[1.1] == BUDGET < steps[1.5]
    sigma = {float(name.removeprefix("sw-sigma")): s["sigma"] for name, s in runs.items()}
    assert sigma[0.9] < sigma[1.1] < sigma[1.5]
    for s in runs.values():  # every cell meets, and does not exceed, its target
        eps = acc.epsilon(s["sigma"], q, s["steps"], 1e-5, sampling="poisson")["rdp_classic"]
        assert 9.0 < eps <= 10.0 + 1e-9, s


def test_a_sweep_the_scale_cannot_honour_is_refused_naming_key_and_scale() -> None:
    p = yaml.safe_load((REPO / "params.yaml").read_text())
    p["pipeline"]["sweeps"] = ["batch_sigma_mnist"]  # ICLR Table 5: batch 50, 100, 200 x sigma
    with pytest.raises(ConfigError, match=r"sweeps.batch_sigma_mnist: at scale 'quick', batch_size 100 and 200 would "
                       r"both train with batch_size 64 \(scales.quick.max_batch_size caps it\)"):
        parse_params(p)
    assert parse_params(p, scale="paper").pipeline.sweeps == ["batch_sigma_mnist"]
    p["scales"]["quick"]["hparams"]["dp_sinkhorn"]["lr"] = 1e-3  # the old way: replaced every lr
    with pytest.raises(ConfigError, match=r"scales.quick.hparams.dp_sinkhorn.lr: a scale does not replace"):
        parse_params(p, scale="paper")
