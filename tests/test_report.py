"""Report stage: tables built from fixture metrics files, the "not run" rule, mean ± std cells,
the figures, and the papers' numbers checked against the papers' own text (committed verbatim
excerpts of their tables, tests/data/published_tables/)."""

from __future__ import annotations

import copy
import json
import math
import re
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import yaml

from dpsynth.config import parse_params
from dpsynth.errors import ConfigError, DataError
from dpsynth.paths import metrics_file, real_metrics_file, samples_png
from dpsynth.report.published import PUBLISHED_FILE, load_published
from dpsynth.report.runs import fmt_summary
from dpsynth.report.tables import BuiltTable, build_table, build_tables, check_complete, write_table
from tests.conftest import REPO

PAPER_TABLES = Path(__file__).with_name("data") / "published_tables"
# What the transcription is checked against: per paper, a committed verbatim excerpt of its plain text
# holding the caption line and the printed rows of each table published.yaml transcribes (each file's
# '#' header cites the paper): published.yaml's paper key -> its file under PAPER_TABLES.
PAPER_TEXTS = {"dps_iclr": "dps_iclr.txt", "dps_neurips": "dps_neurips.txt", "reshetova": "reshetova.txt",
               "gs_wgan": "gs_wgan.txt"}


def paper_text(paper: str) -> str:
    """The excerpt of ``paper``'s text (a published.yaml paper key)."""
    return (PAPER_TABLES / PAPER_TEXTS[paper]).read_text(encoding="utf-8")


# The `tables:` section proposed for params.yaml (the report's contract with the lead).
PROPOSED_TABLES = yaml.safe_load(r"""
table1_mnist:
  title: MNIST at (epsilon, delta) = (10, 1e-5)
  paper: DP-Sinkhorn ICLR submission, Table 1
  published: iclr_t1
  dataset: mnist
  rows:
    - {label: Real data, real: mnist, paper_row: real}
    - {label: Non-private Sinkhorn, experiment: sinkhorn_mnist_nonprivate, paper_row: sinkhorn_nonpriv}
    - {label: G-PATE, paper_row: g_pate}
    - {label: DP-CGAN, paper_row: dp_cgan}
    - {label: DP-MERF, paper_row: dp_merf}
    - {label: DP-MERF AE, paper_row: dp_merf_ae}
    - {label: GS-WGAN, experiment: gswgan_mnist, paper_row: gs_wgan}
    - {label: DP-Sinkhorn (grad theta), experiment: dps_grad_mnist, paper_row: dps_grad_theta}
    - {label: DP-Sinkhorn, experiment: dps_mnist, paper_row: dps}
table1_fmnist:
  title: Fashion-MNIST at (epsilon, delta) = (10, 1e-5)
  paper: DP-Sinkhorn ICLR submission, Table 1
  published: iclr_t1
  dataset: fashion_mnist
  rows:
    - {label: Real data, real: fashion_mnist, paper_row: real}
    - {label: Non-private Sinkhorn, experiment: sinkhorn_fmnist_nonprivate, paper_row: sinkhorn_nonpriv}
    - {label: G-PATE, paper_row: g_pate}
    - {label: DP-CGAN, paper_row: dp_cgan}
    - {label: DP-MERF, paper_row: dp_merf}
    - {label: DP-MERF AE, paper_row: dp_merf_ae}
    - {label: GS-WGAN, experiment: gswgan_fmnist, paper_row: gs_wgan}
    - {label: DP-Sinkhorn (grad theta), experiment: dps_grad_fmnist, paper_row: dps_grad_theta}
    - {label: DP-Sinkhorn, experiment: dps_fmnist, paper_row: dps}
celeba_iclr:
  title: downsampled CelebA at (10, 1e-6)
  paper: DP-Sinkhorn ICLR submission, Tables 2-3
  published: iclr_t2
  rows:
    - {label: Real data, real: celeba, paper_row: real}
    - {label: Adversarial Sinkhorn (non-private), experiment: sinkhorn_celeba_adv_nonprivate, paper_row: adv_sinkhorn_nonpriv}
    - {label: Pixel Sinkhorn (non-private), experiment: sinkhorn_celeba_nonprivate, paper_row: pixel_sinkhorn_nonpriv}
    - {label: Adversarial DP-Sinkhorn, experiment: dps_celeba_adv, paper_row: adv_dps}
    - {label: Pixel DP-Sinkhorn, experiment: dps_celeba_biggan, paper_row: pixel_dps}
    - {label: DCGAN + DP-Sinkhorn, experiment: dps_celeba_dcgan, paper_row: "iclr_t3:dcgan_dps"}
    - {label: BigGAN + DP-Sinkhorn, experiment: dps_celeba_biggan, paper_row: "iclr_t3:biggan_dps"}
celeba_neurips:
  title: downsampled CelebA at (10, 1e-6)
  paper: DP-Sinkhorn NeurIPS 2021 supplementary, Table 6
  published: neurips_t6
  rows:
    - {label: Real data, real: celeba, paper_row: real}
    - {label: DCGAN + DP-Sinkhorn, experiment: dps_celeba_dcgan, paper_row: dcgan_dps}
    - {label: BigGAN + DP-Sinkhorn, experiment: dps_celeba_biggan, paper_row: biggan_dps}
opt_lr_mnist:
  title: optimizer x learning rate on MNIST (batch 50, epsilon 10)
  paper: DP-Sinkhorn ICLR submission, Table 4
  kind: grid
  published: iclr_t4
  sweeps: [opt_lr_mnist]
batch_sigma_mnist:
  title: batch size x noise multiplier on MNIST (epsilon 10)
  paper: DP-Sinkhorn ICLR submission, Table 5
  kind: grid
  published: iclr_t5
  sweeps: [batch_sigma_mnist]
pm_grid_mnist:
  title: semi-debias p x cost mix m on MNIST
  paper: DP-Sinkhorn NeurIPS 2021 supplementary, Table 4
  kind: grid
  published: neurips_t4
  sweeps: [pm_mnist]
pm_grid_fmnist:
  title: semi-debias p x cost mix m on Fashion-MNIST
  paper: DP-Sinkhorn NeurIPS 2021 supplementary, Table 5
  kind: grid
  published: neurips_t5
  sweeps: [pm_fmnist]
local_privacy_w2:
  title: W2 to the clean data vs Gaussian noise, three losses (MNIST)
  paper: Reshetova et al. (arXiv:2306.09547) Figure 5 (a plot only)
  kind: w2_noise
  published: reshetova_fig5
  dataset: mnist
  experiments: [ewgan_mnist_gauss]
privacy:
  title: every run's epsilon by accountant and convention
  paper: DP-Sinkhorn ICLR submission, Table 1 / Appendix D.4; GS-WGAN (arXiv:2006.08265) Table 1
  kind: privacy
""")

_DPS = {"method": "dp_sinkhorn", "privacy": {"epsilon": 10, "delta": 1.0e-5, "sigma": 1.1},
        "hparams": {"batch_size": 50, "lr": 1.0e-5, "p": 0.0, "m": 0.0}}
_GS = {"method": "gs_wgan", "privacy": {"epsilon": 10, "delta": 1.0e-5, "steps": 20000},
       "hparams": {"batch_size": 32, "lr": 1.0e-4, "betas": [0.5, 0.9]}}
_NP = {"method": "dp_sinkhorn", "privacy": {"enabled": False}, "hparams": {"batch_size": 500, "sanitizer": "none"}}
_CELEBA = {"method": "dp_sinkhorn", "dataset": "celeba", "privacy": {"epsilon": 10, "delta": 1.0e-6, "sigma": 0.8},
           "hparams": {"batch_size": 200, "clip": 0.1}}


def fixture_raw() -> dict[str, Any]:
    """A small, self-contained params mapping with every experiment the proposed tables name."""
    exps: dict[str, Any] = {}
    for ds, short in (("mnist", "mnist"), ("fashion_mnist", "fmnist")):
        exps[f"dps_{short}"] = {**_DPS, "dataset": ds}
        exps[f"dps_grad_{short}"] = {**_DPS, "dataset": ds, "hparams": {**_DPS["hparams"], "sanitizer": "param"}}
        exps[f"sinkhorn_{short}_nonprivate"] = {**_NP, "dataset": ds}
        exps[f"gswgan_{short}"] = {**_GS, "dataset": ds}
    for name in ("dps_celeba_biggan", "dps_celeba_dcgan", "dps_celeba_adv"):
        exps[name] = dict(_CELEBA)
    for name in ("sinkhorn_celeba_nonprivate", "sinkhorn_celeba_adv_nonprivate"):
        exps[name] = {**_NP, "dataset": "celeba"}
    exps["ewgan_mnist_gauss"] = {"method": "entropic_wgan", "dataset": "mnist",
                                 "local": {"mechanism": "gaussian", "epsilon": 30, "delta": 1.0e-4, "radius": 20},
                                 "hparams": {"loss": "entropic"}}
    raw = yaml.safe_load((REPO / "params.yaml").read_text(encoding="utf-8"))
    return {
        "scale": "quick", "datasets": ["mnist", "fashion_mnist"], "scales": raw["scales"],
        "evaluation": {"real_datasets": []}, "experiments": exps,
        "sweeps": {
            "pm_mnist": {"base": "dps_mnist", "grid": {"p": [0.2, 0.3], "m": [0.0, 1.0]}},
            "pm_fmnist": {"base": "dps_fmnist", "cells": [{"p": 0.2, "m": 1.0}]},
            "opt_lr_mnist": {"base": "dps_mnist", "cells": [{"optimizer": "adam", "lr": 1.0e-5},
                                                            {"optimizer": "sgd", "lr": 1.0e-3}]},
            "batch_sigma_mnist": {"base": "dps_mnist", "cells": [{"batch_size": 100, "sigma": 1.1}]},
        },
        "tables": copy.deepcopy(PROPOSED_TABLES),
    }


@pytest.fixture
def params() -> Any:
    return parse_params(fixture_raw(), source="fixture")


def write_metrics(results: Path, name: str, *, acc: dict[str, tuple[float, float]] | None = None,
                  fid: tuple[float, float] | str | None = (100.0, 2.0), privacy: dict[str, Any] | None = None,
                  scale: str = "quick", **extra: Any) -> None:
    acc = acc if acc is not None else {"logreg": (0.812, 0.005), "mlp": (0.80, 0.01), "cnn": (0.79, 0.0)}
    m: dict[str, Any] = {"experiment": name, "scale": scale, "privacy": privacy, **extra,
                         "classifiers": {k: {"mean": v[0], "std": v[1], "n": 5, "values": []} for k, v in acc.items()}}
    if isinstance(fid, tuple):
        m["fid"] = {"available": True, "mean": fid[0], "std": fid[1], "n": 5}
    elif isinstance(fid, str):
        m["fid"] = {"available": False, "fid": None, "reason": fid}
    path = (real_metrics_file(results, name.removeprefix("real_")) if name.startswith("real_")
            else metrics_file(results, name))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(m))


def _dps_privacy(eps: float) -> dict[str, Any]:
    """A REAL report (the report stage recomputes epsilon from the mechanism and refuses a fake):
    sigma calibrated so rdp_classic is eps to 1e-4 (prints as e.g. 10.00)."""
    from dpsynth.privacy.accounting import calibrate_sigma
    from dpsynth.privacy.report import dp_sgd_report

    sigma = calibrate_sigma(50 / 60000, 3000, 1e-5, eps)
    rep = dp_sgd_report(mechanism="image_gradient", sigma=sigma, batch_size=50, dataset_size=60000, steps=3000,
                        delta=1e-5, target_epsilon=eps)
    return json.loads(json.dumps(rep.to_dict()))


def _gs_privacy() -> dict[str, Any]:
    from dpsynth.privacy.gswgan_accounting import gswgan_sound_sigma
    from dpsynth.privacy.report import gswgan_report

    sigma = gswgan_sound_sigma(1000, 32, 3000, 1e-5, 10.0)
    return json.loads(json.dumps(gswgan_report(sigma=sigma, shards=1000, batch_size=32, steps=3000, delta=1e-5,
                                               target_epsilon=10).to_dict()))


DPS_PRIVACY = _dps_privacy(10.0)
GS_PRIVACY = _gs_privacy()
NP_PRIVACY = {"mechanism": "none (non-private)", "sigma": None, "delta": 0.0, "epsilon": {"non_private": math.inf},
              "headline": "non_private"}


def row(frame: pd.DataFrame, col: str, value: str) -> pd.Series:
    hits = frame[frame[col] == value]
    assert len(hits) == 1, f"expected one row with {col} == {value!r}, got {len(hits)}"
    return hits.iloc[0]


# --------------------------------------------------------------------------- published numbers vs the papers' text


def _seed_rows(text: str, caption: str, below: bool = False) -> list[list[str]]:
    """Whitespace tokens of each line of the table whose caption line contains ``caption``
    (footnote marks removed), up to the next line starting with Table/Figure. ``below``: the
    caption follows its table (GS-WGAN's text), whose rows are then the block of non-blank lines
    right above it. Lines starting with '#' (an excerpt's header) are not the paper's: dropped."""
    lines = [line for line in text.splitlines() if not line.startswith("#")]
    starts = [i for i, line in enumerate(lines) if caption in line]
    assert len(starts) == 1, f"caption {caption!r} found {len(starts)} times"
    if below:
        block = list(reversed(lines[:starts[0]]))
        while block and not block[0].strip():
            block.pop(0)
        body = []
        for line in block:
            if not line.strip():
                break
            body.append(line)
        return [re.sub(r"[¹²³]", " ", line).split() for line in reversed(body)]
    out = []
    for line in lines[starts[0] + 1:]:
        if re.match(r"\s*(Table|Figure) \d", line):
            break
        out.append(re.sub(r"[¹²³]", " ", line).split())
    return out


def test_every_published_row_is_a_line_of_its_seed() -> None:
    tables, _ = load_published()
    checked = 0
    for tid, t in tables.items():
        text = paper_text(t.paper)
        seed_rows = _seed_rows(text, t.caption, below=t.caption_below)
        for prow in t.rows.values():
            # a value may be two printed tokens ("100 %"): the row's tokens are compared, as the file says
            expected = prow.left.split() + [tok for c in t.columns for tok in prow.values[c].split()]
            assert expected in seed_rows, f"{tid} row {prow.left!r}: {expected} is not a line of {PAPER_TEXTS[t.paper]}"
            checked += 1
    assert checked == 80  # 9 + 5 + 3 + 3 + 10 + 7 + 19 + 12 rows, GS-WGAN Table 1: 6 + 6


def test_spot_check_cells_against_seed_text() -> None:
    """Independent of the transcription's structure: a few cells grepped in the seed lines."""
    tables, _ = load_published()
    t1 = tables["iclr_t1"]
    seed0 = paper_text("dps_iclr")
    line = next(ln for ln in seed0.splitlines() if ln.startswith("DP-Sinkhorn\t"))
    assert line.split("\t")[3] == t1.value("dps", "logreg", "mnist") == "82.0"
    assert line.split("\t")[6] == t1.value("dps", "fid", "fashion_mnist") == "193.8"
    line = next(ln for ln in seed0.splitlines() if ln.startswith("GS-WGAN\t"))
    assert line.split("\t")[2] == t1.value("gs_wgan", "fid", "mnist") == "61.3"
    assert tables["iclr_t4"].rows["Adam 1e-2"].values["logreg"] == "08.4" and "491\t08.4\t13.2\t10" in seed0
    seed1 = paper_text("dps_neurips")
    assert tables["neurips_t5"].rows["0.2 1"].values["fid"] == "145.1" and "0.2 1 145.1 73.0 72.8 69.3" in seed1
    assert tables["neurips_t4"].rows["0 3"].values["mlp"] == "56.4" and "0 3 65.8 62.1 56.4 64.1" in seed1


def test_published_file_is_well_formed() -> None:
    tables, claims = load_published(PUBLISHED_FILE)
    assert set(tables) >= {"iclr_t1", "iclr_t2", "iclr_t3", "iclr_t4", "iclr_t5", "neurips_t4", "neurips_t5",
                           "neurips_t6", "reshetova_fig5"}
    assert tables["reshetova_fig5"].plot_only and not tables["reshetova_fig5"].rows
    assert claims["gs_wgan/mnist"]["epsilon"] == "10" and "GS-WGAN" in claims["gs_wgan/mnist"]["source"]
    assert tables["iclr_t4"].match({"optimizer": "rmsprop", "lr": 1e-5}).values["fid"] == "135.4"
    assert tables["neurips_t4"].match({"p": 0.0, "m": 0.0}).values["logreg"] == "79.3"
    # GS-WGAN's Table 1: a unit printed apart from its number stays with it ("100 %"), fractions stay as printed
    gs = tables["gswgan_t1_mnist"]
    assert gs.caption_below and gs.dataset == "mnist" and gs.columns == ["is", "fid", "mlp", "cnn", "avg", "calibrated"]
    assert gs.rows["real"].values["calibrated"] == "100 %" and gs.rows["ours"].values["avg"] == "0.60"
    assert tables["gswgan_t1_fmnist"].rows["real"].values["calibrated"] == "100%"


# --------------------------------------------------------------------------- tables from fixture metrics


def test_cells_say_their_counts_and_never_show_a_single_value_as_exact() -> None:
    """Issue 64: one run and one synthetic set reads as one value, never "± 0.0"; the spread over training runs
    (ddof 1) is kept apart from the spread over one generator's synthetic sets."""
    assert fmt_summary([{"mean": 0.311, "std": 0.0, "n": 1, "values": [0.311]}], scale=100) == "31.1 (1 run)"
    assert fmt_summary([{"mean": 81.234, "std": 0.456, "n": 5}]) == "81.2 ± 0.5 (1 run, std over 5 sets)"
    runs = [{"mean": m, "n": 1} for m in (28.6, 31.1, 29.2)]
    assert fmt_summary(runs) == f"29.6 ± {np.std([28.6, 31.1, 29.2], ddof=1):.1f} (3 runs)"
    runs = [{"mean": m, "std": s, "n": 5} for m, s in ((0.1, 0.01), (0.2, 0.03))]
    assert fmt_summary(runs, digits=3) == "0.150 ± 0.071 (2 runs; within a run ± 0.020 over 5 sets)"
    assert fmt_summary([{"mean": math.inf, "n": 1}]) == "∞ (1 run)"


def test_method_table_ours_beside_paper(params: Any, tmp_path: Path) -> None:
    write_metrics(tmp_path, "dps_mnist", privacy=DPS_PRIVACY)
    write_metrics(tmp_path, "gswgan_mnist", privacy=GS_PRIVACY, acc={"logreg": (0.5, 0.0), "mlp": (0.6, 0.02)})
    write_metrics(tmp_path, "sinkhorn_mnist_nonprivate", privacy=NP_PRIVACY, fid="no Inception weights offline",
                  scale="smoke")
    write_metrics(tmp_path, "real_mnist", fid=None, acc={"logreg": (0.9213, 0.0), "mlp": (0.97, 0.0),
                                                         "cnn": (0.99, 0.0)})
    b = build_table("table1_mnist", params, tmp_path)
    f = b.frame
    assert len(f) == 9 and list(f["Method"])[0] == "Real data"
    assert b.ours == 4 and len(b.runs) == 3  # "4 with our numbers": the real row counts (issue 46)
    dps = row(f, "Method", "DP-Sinkhorn")
    assert dps["LogReg (%) ours"] == "81.2 ± 0.5 (1 run, std over 5 sets)" and dps["LogReg (%) paper"] == "82.0"
    assert dps["FID ours"] == "100.0 ± 2.0 (1 run, std over 5 sets)" and dps["FID paper"] == "124.3"
    modern = DPS_PRIVACY["epsilon"]["rdp_modern"]
    # issue 70: the cell shows the table's own convention (the papers' RDP conversion), every one in the notes
    eps = "ε ours (rdp_classic; all: notes)"
    assert dps[eps] == "10.00 (δ=1e-05)"
    assert f"ε ours of DP-Sinkhorn (dps_mnist) in every convention (the cell shows rdp_classic, the papers' RDP " \
           f"conversion): rdp_classic=10.00; rdp_modern={modern:.2f} (δ=1e-05)" in b.notes
    assert dps["ε paper"] == "10 (δ=1e-05)" and dps["Scale"] == "quick"
    gs = row(f, "Method", "GS-WGAN")
    assert gs["CNN (%) ours"] == "not evaluated" and gs["CNN (%) paper"] == "80"
    assert gs[eps] == "10.00 (sound; δ=1e-05)"  # its headline: the sound accounting in the papers' conversion
    gs_note = next(n for n in b.notes if n.startswith("ε ours of GS-WGAN (gswgan_mnist)"))
    assert f"as_published.rdp_classic={GS_PRIVACY['epsilon']['as_published.rdp_classic']:.2f}" in gs_note
    assert "sound.rdp_classic=10.00" in gs_note
    # the result first (issue 70): the method, then accuracy, FID/KID, precision/recall; epsilon, run, scale after
    assert list(f.columns) == [
        "Method", "LogReg (%) ours", "LogReg (%) paper", "MLP (%) ours", "MLP (%) paper", "CNN (%) ours",
        "CNN (%) paper", "FID ours", "FID paper", "KID (×10³) ours", "FID∞ ours", "Precision ours", "Recall ours",
        "Run", "Scale", eps, "ε paper", "Paper source"]
    # no raw LaTeX in a cell: the paper's "DP-Sinkhorn ($\\nabla_{\\theta} \\hat{S}$)" as it prints
    assert row(f, "Method", "DP-Sinkhorn (grad theta)")["Paper source"].endswith("row 'DP-Sinkhorn (∇θ Ŝ)'")
    assert not any("$" in str(v) or "\\" in str(v) for v in f.to_numpy().ravel())
    gp = row(f, "Method", "G-PATE")
    assert gp["CNN (%) ours"] == "reported only" and gp["CNN (%) paper"] == "51/80.9"
    grad = row(f, "Method", "DP-Sinkhorn (grad theta)")
    assert grad["MLP (%) ours"] == "not run" and grad["MLP (%) paper"] == "79.9"
    npr = row(f, "Method", "Non-private Sinkhorn")
    assert npr["FID ours"] == "unavailable" and npr[eps] == "∞ (non-private)"
    assert npr["Scale"] == "smoke (report scale: quick)"
    assert any("no Inception weights offline" in n for n in b.notes)
    real = row(f, "Method", "Real data")
    assert real["LogReg (%) ours"] == "92.1 (1 run, 5 sets, all equal)" and real["LogReg (%) paper"] == "92.2"
    assert real["FID ours"] == "not evaluated" and real["FID paper"] == "1.6"
    # Fashion-MNIST picks the other half of the same published table.
    fm = build_table("table1_fmnist", params, tmp_path).frame
    assert row(fm, "Method", "DP-Sinkhorn")["FID paper"] == "193.8"
    assert row(fm, "Method", "DP-Sinkhorn")["FID ours"] == "not run"


def test_method_table_kid_and_fid_infinity_beside_fid(params: Any, tmp_path: Path) -> None:
    """Ours only (no paper reports them), right after FID: KID, FID-infinity, precision and recall; an
    older record without them reads "not evaluated", an unavailable FID makes them unavailable too, and
    the notes give the protocol."""
    n_values = [50, 64, 79, 93, 107, 121, 136, 150, 164, 179, 193, 207, 221, 236, 250]
    prc = {"available": True, "std": 0.0, "n": 1, "k": 3, "n_generated": 250, "n_reference": 250,
           "reference_split": "test", "implementation": "torch-fidelity 0.4.0 prc_features_to_metric"}
    small = {"kid": {"available": True, "mean": 0.0123, "std": 0.0004, "n": 5, "values": [], "subset_size": 250,
                     "subsets": 1, "n_reference": 250},
             "fid_inf": {"available": True, "mean": 85.04, "std": 1.0, "n": 5, "values": [], "n_values": n_values,
                         "n_reference": 250},
             "precision": {**prc, "mean": 0.712, "values": [0.712]},
             "recall": {**prc, "mean": 0.0952, "values": [0.0952]}}

    def add_small_n(name: str, **override: Any) -> None:
        path = real_metrics_file(tmp_path, "mnist") if name == "real_mnist" else metrics_file(tmp_path, name)
        m = json.loads(path.read_text())
        m["fid"].update({**small, **override})
        path.write_text(json.dumps(m))

    write_metrics(tmp_path, "dps_mnist", privacy=DPS_PRIVACY)
    add_small_n("dps_mnist")
    write_metrics(tmp_path, "gswgan_mnist", privacy=GS_PRIVACY)  # written before KID and FID-infinity
    write_metrics(tmp_path, "sinkhorn_mnist_nonprivate", privacy=NP_PRIVACY, fid="no Inception weights offline")
    write_metrics(tmp_path, "real_mnist", fid=(31.7, 0.0))
    add_small_n("real_mnist", fid_inf={"available": False, "reason": "too few images"},
                recall={"available": False, "reason": "precision and recall need at least k + 1 = 4 features"})
    b = build_table("table1_mnist", params, tmp_path)
    f = b.frame
    cols = list(f.columns)
    assert cols[cols.index("FID paper") + 1:cols.index("FID paper") + 5] == [
        "KID (×10³) ours", "FID∞ ours", "Precision ours", "Recall ours"]
    assert not any(c.startswith(("KID", "FID∞", "Precision", "Recall")) and c.endswith("paper") for c in cols)
    dps = row(f, "Method", "DP-Sinkhorn")
    assert dps["KID (×10³) ours"] == "12.30 ± 0.40 (1 run, std over 5 sets)" and dps["FID∞ ours"] == "85.0 ± 1.0 (1 run, std over 5 sets)"
    assert dps["Precision ours"].startswith("0.71") and dps["Recall ours"].startswith("0.10")  # fractions, 2 digits
    gs = row(f, "Method", "GS-WGAN")
    assert gs["KID (×10³) ours"] == gs["FID∞ ours"] == gs["Precision ours"] == gs["Recall ours"] == "not evaluated"
    npr = row(f, "Method", "Non-private Sinkhorn")
    assert npr["KID (×10³) ours"] == npr["FID∞ ours"] == npr["Recall ours"] == "unavailable"
    assert row(f, "Method", "G-PATE")["FID∞ ours"] == "reported only"
    assert row(f, "Method", "DP-Sinkhorn (grad theta)")["KID (×10³) ours"] == "not run"
    real = row(f, "Method", "Real data")
    assert real["KID (×10³) ours"] == "12.30 ± 0.40 (1 run, std over 5 sets)" and real["FID∞ ours"] == "unavailable"
    assert real["Precision ours"].startswith("0.71") and real["Recall ours"] == "unavailable"
    assert "FID∞ unavailable for Real data (real_mnist): too few images" in b.notes
    assert "Recall unavailable for Real data (real_mnist): precision and recall need at least k + 1 = 4 features" \
        in b.notes
    (prc_note,) = [n for n in b.notes if n.startswith("Precision and recall ours (real_mnist, dps_mnist):")]
    assert "arXiv:1904.06991" in prc_note and "(k = 3)" in prc_note and "the first 250 real test images" in prc_note
    assert "torch-fidelity 0.4.0" in prc_note
    (note,) = [n for n in b.notes if n.startswith("KID and FID∞ ours (dps_mnist):")]
    assert "same 250 real test images as FID" in note
    (real_note,) = [n for n in b.notes if n.startswith("KID ours (real_mnist)")]  # its FID∞ is unavailable
    assert "arXiv:1801.01401" in real_note and "arXiv:1911.07023" not in real_note
    assert "arXiv:1801.01401" in note and "arXiv:1911.07023" in note and "50 to 250 generated (or real training) images" in note
    assert "below 2,048 images" in note  # at these counts FID-infinity is still biased: said so
    # grid tables keep their columns (their figures plot ours against the paper's, metric by metric)
    grid = build_table("pm_grid_mnist", params, tmp_path).frame.columns
    assert not any(c.startswith(("KID", "Precision")) for c in grid)


def test_missing_runs_print_paper_values_with_not_run(params: Any, tmp_path: Path) -> None:
    built = build_tables(params, tmp_path / "nothing")
    assert set(built) == set(PROPOSED_TABLES)
    celeba = built["celeba_iclr"].frame
    assert set(celeba["FID ours"]) == {"not run"}
    assert list(celeba["FID paper"]) == ["1.1", "72.8", "140.7", "187.0", "168.4", "156.7", "168.4"]
    assert set(celeba["LogReg (%) paper"]) == {"not reported"}  # CelebA tables have no LogReg column
    for b in built.values():
        paths = write_table(b, tmp_path / "tables", "quick")
        back = pd.read_csv(paths[1], dtype=str, keep_default_na=False)
        assert (back != "").all().all() and back.shape == b.frame.shape
        md = paths[0].read_text(encoding="utf-8")
        assert "not run" in md and b.title in md
        tex = paths[2].read_text(encoding="utf-8")
        body = tex.split(r"\midrule")[1]
        assert r"\begin{tabular}" in tex and "±" not in tex and "_" not in body.replace(r"\_", "")


def test_grid_table_matches_cells_and_keeps_unswept_paper_rows(params: Any, tmp_path: Path) -> None:
    write_metrics(tmp_path, "pm_mnist-p0.2-m1.0", privacy=DPS_PRIVACY, acc={"logreg": (0.7, 0.01)})
    b = build_table("pm_grid_mnist", params, tmp_path)
    f = b.frame
    # 4 swept cells (p in {0.2, 0.3} x m in {0, 1}); 17 paper rows not swept; 0.2/0 and 0.2/1 matched.
    assert len(f) == 4 + 19 - 2
    hit = f[(f["p"] == "0.2") & (f["m"] == "1")].iloc[0]
    assert hit["LogReg (%) ours"] == "70.0 ± 1.0 (1 run, std over 5 sets)" and hit["LogReg (%) paper"] == "79.5" and hit["FID paper"] == "61.2"
    extra = f[(f["p"] == "0.3") & (f["m"] == "0")].iloc[0]
    assert extra["FID paper"] == "not reported" and extra["FID ours"] == "not run"
    unswept = f[(f["p"] == "0.5") & (f["m"] == "3")].iloc[0]
    assert unswept["Run"] == "not run" and unswept["FID paper"] == "66.2"
    opt = build_table("opt_lr_mnist", params, tmp_path).frame
    sgd = opt[(opt["optimizer"] == "sgd") & (opt["lr"] == "0.001")]
    assert len(opt) == 10 and len(sgd) == 1 and sgd.iloc[0]["FID paper"] == "360"
    assert sgd.iloc[0]["Run"].startswith("opt_lr_mnist-")  # our sweep cell, matched to the paper's row
    bs = build_table("batch_sigma_mnist", params, tmp_path).frame
    hit = bs[(bs["batch_size"] == "100") & (bs["sigma"] == "1.1")]
    assert len(bs) == 7 and len(hit) == 1 and hit.iloc[0]["FID paper"] == "131.4"
    assert hit.iloc[0]["Run"].startswith("batch_sigma_mnist-")


def test_changing_p_adds_rows(tmp_path: Path) -> None:
    raw = fixture_raw()
    before = len(build_table("pm_grid_mnist", parse_params(raw, source="fixture"), tmp_path).frame)
    raw["sweeps"]["pm_mnist"]["grid"]["p"] = [0.2, 0.3, 0.7]
    after = build_table("pm_grid_mnist", parse_params(raw, source="fixture"), tmp_path).frame
    assert len(after) == before + 2 and set(after[after["p"] == "0.7"]["m"]) == {"0", "1"}


def test_privacy_table_lists_every_convention(params: Any, tmp_path: Path) -> None:
    write_metrics(tmp_path, "dps_mnist", privacy=DPS_PRIVACY)
    write_metrics(tmp_path, "gswgan_mnist", privacy=GS_PRIVACY)
    write_metrics(tmp_path, "sinkhorn_mnist_nonprivate", privacy=NP_PRIVACY)
    b = build_table("privacy", params, tmp_path)
    f = b.frame
    assert b.ours == 3 and not b.runs
    gs = row(f, "Run", "gswgan_mnist")
    assert gs["ε as_published.rdp_classic"] == f"{GS_PRIVACY['epsilon']['as_published.rdp_classic']:.2f}"
    assert gs["ε sound.rdp_classic"] == "10.00"
    assert gs["ε rdp_classic"] == "n/a" and gs["Paper ε"] == "10" and gs["Headline"] == "sound.rdp_classic"
    dps = row(f, "Run", "dps_mnist")
    assert dps["ε rdp_modern"] == f"{DPS_PRIVACY['epsilon']['rdp_modern']:.2f}"
    assert dps["σ"] == f"{DPS_PRIVACY['sigma']:.4g}" and dps["Paper σ"] == "1.1"
    assert row(f, "Run", "sinkhorn_mnist_nonprivate")["ε rdp_classic"] == "∞ (non-private)"
    assert row(f, "Run", "gswgan_fmnist")["ε sound.rdp_classic"] == "not run"
    assert row(f, "Run", "dps_celeba_dcgan")["Paper δ"] == "1e-6"


def test_w2_noise_table(params: Any, tmp_path: Path) -> None:
    empty = build_table("local_privacy_w2", params, tmp_path).frame
    assert set(empty["W2 paper"]) == {"not reported (plot only)"} and "not run" in set(empty["W2 to clean data ours"])
    csv = tmp_path / "w2_noise" / "mnist.csv"
    csv.parent.mkdir(parents=True)
    pd.DataFrame({"loss": ["entropic", "entropic", "exact"], "noise_std": [0.5, 0.5, 0.5], "w2": [1.0, 3.0, 4.0],
                  "w2_privatized_data": [9.0, 9.0, 9.0], "seed": [0, 1, 0]}).to_csv(csv, index=False)
    b = build_table("local_privacy_w2", params, tmp_path)
    f = b.frame
    assert b.ours == 2  # two (loss, noise) rows measured; no sample grids
    ent = f[(f["Loss"] == "entropic") & (f["Noise σ"] == "0.5")].iloc[0]
    assert ent["W2 to clean data ours"] == f"2.000 ± {np.std([1.0, 3.0], ddof=1):.3f} (2 runs)" and ent["n"] == "2"
    assert f[f["Loss"] == "exact"].iloc[0]["W2 to clean data ours"] == "4.000 (1 run)"
    # the paper's claim through the claim checker: two runs against one without a spread -> undecided
    claim = next(n for n in b.notes if n.startswith("Claim (Reshetova et al., Fig. 5): the generator"))
    assert "Ours: undecided -- σ=0.5: undecided (entropic - exact = -2.000" in claim and "no noise estimate" in claim
    pd.DataFrame({"loss": ["entropic"] * 3 + ["exact"] * 3, "noise_std": [0.5] * 6, "seed": [0, 1, 2] * 2,
                  "w2": [1.0, 1.1, 0.9, 2.0, 2.1, 1.9]}).to_csv(csv, index=False)
    notes = build_table("local_privacy_w2", params, tmp_path).notes
    assert any("Ours: holds -- σ=0.5: holds (entropic - exact = -1.000, 95% interval [" in n for n in notes), notes
    pd.DataFrame({"loss": ["entropic"], "w2": [1.0]}).to_csv(csv, index=False)
    with pytest.raises(DataError, match="noise"):
        build_table("local_privacy_w2", params, tmp_path)


def test_bad_config_is_named(tmp_path: Path) -> None:
    raw = fixture_raw()
    raw["tables"]["table1_mnist"]["rows"][0]["paper_row"] = "no_such_row"
    with pytest.raises(ConfigError, match=r"tables.table1_mnist.rows\[0\].*no_such_row"):
        build_table("table1_mnist", parse_params(raw, source="fixture"), tmp_path)
    raw = fixture_raw()
    raw["tables"]["table1_mnist"]["rows"][1]["experiment"] = "nope"
    with pytest.raises(ConfigError, match=r"tables.table1_mnist.rows\[1\].experiment"):
        parse_params(raw, source="fixture")
    raw = fixture_raw()
    raw["tables"]["opt_lr_mnist"]["published"] = "iclr_t99"
    with pytest.raises(ConfigError, match="iclr_t99"):
        build_table("opt_lr_mnist", parse_params(raw, source="fixture"), tmp_path)


def test_empty_cell_is_refused() -> None:
    b = BuiltTable("t", "T", "p", pd.DataFrame({"a": ["x", ""]}))
    with pytest.raises(DataError, match="empty cell at row 1"):
        check_complete(b)


def test_cli_writes_tables_and_figures(tmp_path: Path) -> None:
    from dpsynth.cli import main

    raw = fixture_raw()
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(raw), encoding="utf-8")
    res = tmp_path / "results"
    write_metrics(res, "pm_mnist-p0.2-m1.0", privacy=DPS_PRIVACY)
    write_metrics(res, "dps_mnist", privacy=DPS_PRIVACY)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.imsave(samples_png(res, "dps_mnist"), [[0.0, 1.0], [1.0, 0.0]], cmap="gray")
    # an empty release ledger (runs made before it): the privacy ledger's EVER MADE rows still fill every cell
    assert main(["report", "--params", str(tmp_path / "params.yaml"), "--results", str(res)]) == 0
    ledger = pd.read_csv(res / "tables" / "privacy_ledger.csv", dtype=str, keep_default_na=False)
    ever = ledger[ledger["Released model"].str.startswith("EVER MADE")]
    assert list(ever["Dataset"]) == ["mnist"] and ever.iloc[0]["Neighbours"].strip(), ledger.to_string()
    tables = {p.name for p in (res / "tables").iterdir()}
    assert {f"{n}.{e}" for n in PROPOSED_TABLES for e in ("md", "csv", "tex")} <= tables
    figs = {p.name for p in (res / "figures").iterdir()}
    assert {"table1_mnist_samples.png", "pm_grid_mnist_heatmap.png", "w2_noise.csv", "privacy_utility.csv"} <= figs
    assert all((res / "figures" / f).stat().st_size > 0 for f in figs)
    # a table without a run of ours (opt_lr_mnist) has no figure, nor has the W2 sweep that did not run: both
    # are in the report page's one not-run list instead, with what runs them
    assert not {"opt_lr_mnist_heatmap.png", "opt_lr_mnist_samples.png", "w2_noise_mnist.png"} & figs
    overview = (res / "tables" / "overview.html").read_text()
    for table in ("opt_lr_mnist", "local_privacy_w2"):  # the W2 table's line stands for its figure too
        assert f"({table})</b>: no run of ours at scale" in overview, table
    assert "w2_noise_mnist.png" not in overview
    assert {f"{n}.html" for n in PROPOSED_TABLES} <= tables and "page.json" in tables
    assert not any(p.name.endswith(".tmp") for p in (res / "tables").iterdir())


def test_proposed_tables_fit_the_repository_params() -> None:
    """The tables: section handed to the lead validates against the real params.yaml's experiments."""
    raw = yaml.safe_load((REPO / "params.yaml").read_text(encoding="utf-8"))
    missing = {r.get("experiment") for t in PROPOSED_TABLES.values() for r in t.get("rows", [])} - {None}
    missing |= {s for t in PROPOSED_TABLES.values() for s in t.get("sweeps", [])}
    known = set(raw.get("experiments") or {}) | set(raw.get("sweeps") or {})
    assert not missing - known, f"params.yaml does not define {sorted(missing - known)} yet"
    params = parse_params({**raw, "tables": PROPOSED_TABLES}, source="params.yaml + proposed tables")
    built = build_tables(params, Path("/nonexistent-results"))
    for b in built.values():
        check_complete(b)


def two_epsilons(results: Path) -> Any:
    """The fixture params plus dps_mnist at epsilon 1, and metrics for both dps_mnist runs."""
    raw = fixture_raw()
    raw["experiments"]["dps_mnist_eps1"] = {**_DPS, "dataset": "mnist",
                                           "privacy": {"epsilon": 1, "delta": 1.0e-5, "sigma": 3.0}}
    write_metrics(results, "dps_mnist", privacy=DPS_PRIVACY)
    write_metrics(results, "dps_mnist_eps1", privacy=_dps_privacy(1.0), acc={"logreg": (0.5, 0.0)},
                  fid=(200.0, 0.0))
    return parse_params(raw, source="fixture")


def test_privacy_utility_curve_when_several_epsilons(tmp_path: Path) -> None:
    from dpsynth.report.figures import PRIVACY_UTILITY_CSV, privacy_utility

    params = two_epsilons(tmp_path)
    out = privacy_utility(params, tmp_path, tmp_path / "figs")
    assert (tmp_path / "figs" / "privacy_utility_dp_sinkhorn_mnist.png") in out
    df = pd.read_csv(tmp_path / "figs" / PRIVACY_UTILITY_CSV)
    lr = df[(df["metric"] == "logreg")].sort_values("epsilon")
    assert list(lr["epsilon"]) == pytest.approx([1.0, 10.0], rel=1e-3)  # calibrated to rel_tol 1e-4 and list(lr["value"]) == [50.0, 81.2]
    # gs_wgan is configured at one epsilon only: no curve for it.
    assert not (tmp_path / "figs" / "privacy_utility_gs_wgan_mnist.png").exists()


def test_a_cell_swept_by_two_sweeps_is_one_row(tmp_path: Path) -> None:
    """The quick pipeline's share of Table 5 and the full Table 5 list p=0.2, m=1 twice: the
    table shows it once, by the run that exists (or once as "not run")."""
    raw = fixture_raw()
    raw["sweeps"]["pm_fmnist_quick"] = {"base": "dps_fmnist", "grid": {"p": [0.2], "m": [1.0]}}
    raw["tables"]["pm_grid_fmnist"]["sweeps"] = ["pm_fmnist_quick", "pm_fmnist"]
    params = parse_params(raw, source="fixture")
    f = build_table("pm_grid_fmnist", params, tmp_path).frame
    cell = f[(f["p"] == "0.2") & (f["m"] == "1")]
    assert len(cell) == 1 and cell.iloc[0]["Run"] == "pm_fmnist_quick-p0.2-m1.0"
    write_metrics(tmp_path, "pm_fmnist-p0.2-m1.0", privacy=DPS_PRIVACY, acc={"logreg": (0.61, 0.0)})
    f = build_table("pm_grid_fmnist", params, tmp_path).frame
    cell = f[(f["p"] == "0.2") & (f["m"] == "1")]
    assert len(cell) == 1 and cell.iloc[0]["Run"] == "pm_fmnist-p0.2-m1.0" and cell.iloc[0]["LogReg (%) ours"] == "61.0 (1 run, 5 sets, all equal)"


def test_scale_notes_state_what_a_reduced_scale_changed(tmp_path):
    """A quick-scale row says its steps, the hyperparameters the scale overrode (with the paper's
    value) and the classifier budget; paper-scale runs need no such note."""
    from dpsynth.report.runs import Run
    from dpsynth.report.tables import _scale_notes

    train = {"steps": 2000, "scale_overrides": {"lr": {"paper": 1e-5, "this_scale": 1e-3},
                                                "model_dim": {"paper": 64, "this_scale": 32}}}
    preset = {"classifier_max_epochs": 5, "classifier_train_subset": 10000}
    quick = Run("dps_mnist", tmp_path, {"scale": "quick", "train": train, "preset": preset})
    paper = Run("dps_fmnist", tmp_path, {"scale": "paper", "train": train, "preset": preset})
    notes = _scale_notes([quick, paper, None])
    assert notes == ["Ours at scale quick: 2,000 training steps; lr 0.001 (paper 1e-05); model_dim 32 (paper 64); "
                     "MLP/CNN at most 5 epochs on 10000 images (dps_mnist)"]


def test_a_row_with_several_training_runs_says_so_and_composes_their_epsilon(tmp_path: Path) -> None:
    """Issue 64: a sweep over seed alone based on a row's experiment gives the row R training runs: the cell is
    their mean ± std with the count, and the epsilon cell gives what publishing all R costs (each run is its own
    release: the privacy ledger's composition) beside the per-run epsilon."""
    from dpsynth.report.ledger import compose_runs
    from dpsynth.report.runs import RunStore

    raw = fixture_raw()
    raw["sweeps"]["dps_mnist_seeds"] = {"base": "dps_mnist", "grid": {"seed": [1, 2]}}
    params = parse_params(raw, source="fixture")
    assert params.replicates_of("dps_mnist") == ["dps_mnist", "dps_mnist_seeds-seed1", "dps_mnist_seeds-seed2"]
    write_metrics(tmp_path, "dps_mnist", privacy=DPS_PRIVACY, acc={"logreg": (0.20, 0.0)})
    f = build_table("table1_mnist", params, tmp_path).frame
    dps = row(f, "Method", "DP-Sinkhorn")
    assert dps["LogReg (%) ours"] == "20.0 (1 run, 5 sets, all equal)"
    eps = "ε ours (rdp_classic; all: notes)"
    assert "together" not in dps[eps]
    for name, acc in (("dps_mnist_seeds-seed1", 0.30), ("dps_mnist_seeds-seed2", 0.40)):
        write_metrics(tmp_path, name, privacy=DPS_PRIVACY, acc={"logreg": (acc, 0.0)})
    f = build_table("table1_mnist", params, tmp_path).frame
    dps = row(f, "Method", "DP-Sinkhorn")
    assert len(f) == 9  # the seed cells join their row, they are no rows of their own
    assert dps["LogReg (%) ours"] == "30.0 ± 10.0 (3 runs; within a run all equal over 5 sets)"
    store = RunStore(tmp_path)
    together = compose_runs([store.experiment(n) for n in params.replicates_of("dps_mnist")])
    assert together.epsilon > 10.0 + 1.0  # three releases at epsilon 10 cost more than one
    assert dps[eps] == f"per run: 10.00 (δ=1e-05); the 3 runs together: ε={together.epsilon:.2f}"
    b = build_table("table1_mnist", params, tmp_path)
    assert "ε ours of DP-Sinkhorn: the 3 runs together by RDP composition of 3 central run(s)" in " ".join(b.notes)


def test_w2_table_prints_draw_spreads_and_the_reference_rows(params: Any, tmp_path: Path) -> None:
    """Issue 64: one run with its spread over sample draws says so (not '± 0.000', not as if it were runs), and
    the reference rows (real, blurred, shrunk, mean image) stand beside the generators with a note on what W2
    rewards."""
    csv = tmp_path / "w2_noise" / "mnist.csv"
    csv.parent.mkdir(parents=True)
    rows = [{"loss": "entropic", "noise_std": 0.5, "role": "figure", "seed": 0, "w2": 12.1, "w2_draw_std": 0.05,
             "w2_draws": 8},
            {"loss": "exact", "noise_std": 0.5, "role": "figure", "seed": 0, "w2": 12.4, "w2_draw_std": 0.04,
             "w2_draws": 8},
            {"loss": "clean training records", "noise_std": float("nan"), "role": "reference", "seed": 0,
             "w2": 12.44, "w2_draw_std": 0.044, "w2_draws": 8},
            {"loss": "blurred (Gaussian, 1 px)", "noise_std": float("nan"), "role": "reference", "seed": 0,
             "w2": 10.88, "w2_draw_std": 0.057, "w2_draws": 8}]
    pd.DataFrame(rows).to_csv(csv, index=False)
    b = build_table("local_privacy_w2", params, tmp_path)
    f = b.frame
    assert list(f.columns)[:4] == ["Loss", "Noise σ", "W2 to clean data ours", "W2 paper"]  # the result first
    ent = f[(f["Loss"] == "entropic") & (f["Noise σ"] == "0.5")].iloc[0]
    assert ent["W2 to clean data ours"] == "12.100 (1 run; ± 0.050 over 8 sample draws)"
    assert row(f, "Loss", "reference: blurred (Gaussian, 1 px)")["W2 to clean data ours"] == \
        "10.880 (1 run; ± 0.057 over 8 sample draws)"
    assert not any("± 0.000" in str(v) for v in f.to_numpy().ravel())
    assert any("blur and shrinkage score LOWER than real images" in n for n in b.notes)
    claim = next(n for n in b.notes if n.startswith("Claim (Reshetova et al., Fig. 5): the generator"))
    assert "Ours: holds" in claim and "spread over 8 sample draws only" in claim
