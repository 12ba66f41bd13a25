"""Reshetova, Chen, Ozgur, "Training generative models from privatized data via entropic optimal transport"
(ISIT 2024, arXiv:2306.09547), Figs. 1, 6, 7: the runs behind each manifold figure, the `reshetova`
Snakemake target that plans them, and the figure and claim rendered from fabricated run outputs."""

from __future__ import annotations

import json
import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pandas as pd
import pytest
import yaml

from dpsynth.config import load_params, parse_params, resolve_run
from dpsynth.errors import ConfigError
from tests.conftest import REPO, venv_bin
from tests.pipelines import run

#: The manifold figures of params.yaml and the dataset each draws.
FIGURES = {"reshetova_fig1": "manifold2d_half_circle", "reshetova_fig6_7_ellipse": "manifold2d_ellipse",
           "reshetova_fig6_7_rectangle": "manifold2d_rectangle"}
PANELS = {("laplace", "entropic"), ("laplace", "exact"), ("gaussian", "entropic"), ("gaussian", "exact")}


def _raw() -> dict[str, Any]:
    return yaml.safe_load((REPO / "params.yaml").read_text(encoding="utf-8"))


def _runs(params: Any, table: str) -> dict[tuple[str, str], str]:
    exps = params.all_experiments()
    return {(exps[e].local.mechanism, exps[e].hparams.loss): e for e in params.tables[table].experiments}


def test_each_manifold_figure_has_its_mechanism_x_loss_runs_at_the_papers_settings() -> None:
    from dpsynth.data.prepare import manifold_points
    from dpsynth.data.registry import get_spec

    params = load_params(REPO / "params.yaml")
    exps = params.all_experiments()
    seen: set[str] = set()
    for table, dataset in FIGURES.items():
        t = params.tables[table]
        assert t.kind == "manifold" and t.dataset == dataset
        runs = _runs(params, table)
        assert set(runs) == PANELS and len(t.experiments) == 4, (table, runs)
        seen |= set(runs.values())
        clean = manifold_points(str(get_spec(dataset).options["shape"]), 20000, np.random.default_rng(1))
        for (mech, loss), name in runs.items():
            exp = exps[name]
            assert exp.method == "entropic_wgan" and exp.dataset == dataset
            hp = exp.hparams
            # Section 4.2: 2x256 MLP (generator "mlp" on points), RMSprop 1e-4, geomloss scaling 0.99
            assert (hp.generator, hp.optimizer, hp.lr, hp.geomloss_scaling) == ("mlp", "rmsprop", 1.0e-4, 0.99)
            # b = n = 400,000 for the entropic loss; the unregularized one keeps its network simplex at 1,000
            assert hp.batch_size == (400000 if loss == "entropic" else 1000), name
            assert exp.local.epsilon == 5 and exp.local.delta == (1.0e-4 if mech == "gaussian" else None)
            # the radius is the manifold's largest l1 / l2 norm (4 digits): the projection moves no clean point
            # farther than 1e-4 of it, and the noise (scaled by the radius) is no larger than it must be
            norm = float((np.abs(clean).sum(1) if mech == "laplace" else np.linalg.norm(clean, axis=1)).max())
            assert norm * (1 - 1e-4) <= exp.local.radius <= norm * (1 + 1e-4), (name, norm, exp.local.radius)
        # ... and both losses of a row privatize with the same mechanism settings
        for mech in ("laplace", "gaussian"):
            assert exps[runs[(mech, "entropic")]].local == exps[runs[(mech, "exact")]].local
    # Kept out of the quick pipeline (time): only the half circle's Gaussian entropic run was there before
    assert seen & set(params.pipeline.experiments) == {"ewgan_half_circle_gauss"}
    assert len(seen) == 12


def test_the_quick_scale_trains_every_panel_at_one_larger_batch_and_other_methods_as_before() -> None:
    quick, paper = load_params(REPO / "params.yaml", scale="quick"), load_params(REPO / "params.yaml", scale="paper")
    for table in FIGURES:
        for (_, loss), name in _runs(quick, table).items():
            b = resolve_run(quick, name).experiment.hparams.batch_size
            assert b == quick.preset.method_max_batch_size["entropic_wgan"] == 256, (name, b)
            assert resolve_run(quick, name).overrides["batch_size"]["this_scale"] == 256
            assert resolve_run(paper, name).experiment.hparams.batch_size == (400000 if loss == "entropic" else 1000)
    # the per-method cap leaves every other method under the scale's max_batch_size
    assert resolve_run(quick, "sinkhorn_mnist_nonprivate").experiment.hparams.batch_size == 64


def test_the_batch_cap_of_one_method_changes_only_that_methods_training_fingerprint() -> None:
    from dpsynth.fingerprint import fingerprint

    raw = _raw()
    with_cap = parse_params(raw, source="params.yaml")
    del raw["scales"]["quick"]["method_max_batch_size"]
    without = parse_params(raw, source="params.yaml (no method cap)")
    assert fingerprint(with_cap, "train", "dps_mnist") == fingerprint(without, "train", "dps_mnist")
    assert fingerprint(with_cap, "train", "gswgan_mnist") == fingerprint(without, "train", "gswgan_mnist")
    assert fingerprint(with_cap, "train", "ewgan_ellipse_gauss") != fingerprint(without, "train", "ewgan_ellipse_gauss")


@pytest.mark.parametrize("edit, message", [
    (lambda t: t["experiments"].__setitem__(1, "ewgan_half_circle_laplace"), "both the laplace x entropic panel"),
    (lambda t: t["experiments"].__setitem__(0, "ewgan_ellipse_laplace"), "not an entropic_wgan run on locally"),
    (lambda t: t["experiments"].__setitem__(0, "ewgan_half_circle_gauss_sd"), "a panel is entropic or exact"),
    (lambda t: t.pop("dataset"), "needs dataset and experiments"),
])
def test_a_manifold_figure_with_a_wrong_panel_is_refused_by_key(edit: Any, message: str) -> None:
    raw = _raw()
    edit(raw["tables"]["reshetova_fig1"])
    with pytest.raises(ConfigError, match=r"tables\.reshetova_fig1") as exc:
        parse_params(raw, source="fixture")
    assert message in str(exc.value)


def test_the_reshetova_target_plans_every_panels_runs() -> None:
    """`snakemake -n reshetova --config scale=quick` (as the README says) plans, per manifold, the data,
    and per run privatize -> train -> sample -> evaluate, then the one report job; nothing of `all`."""
    out = run([venv_bin("snakemake"), "-n", "--forceall", "reshetova", "--config", "scale=quick"], REPO)
    jobs: dict[str, set[str]] = {}
    rule = None
    for line in out.splitlines():
        if m := re.match(r"^(?:local)?rule (\w+):$", line.strip()):
            rule = m.group(1)
            jobs.setdefault(rule, set())
        elif rule and (m := re.match(r"^wildcards: (\w+)=(\S+)$", line.strip())):
            jobs[rule].add(m.group(2))
    params = load_params(REPO / "params.yaml")
    runs = {e for t in FIGURES for e in params.tables[t].experiments}
    assert len(runs) == 12
    runs |= set(params.cells_of("n_half_circle"))  # and Fig. 11's 2-D sweep (tests/test_reshetova_fig11.py)
    for stage in ("privatize", "train", "sample", "evaluate"):
        assert jobs.get(stage) == runs, (stage, sorted(jobs.get(stage, ())))
    assert jobs.get("prepare_data") == set(FIGURES.values())
    assert "reshetova" in jobs and not {"report", "evaluate_real", "w2_noise", "warmstart"} & set(jobs)
    assert re.search(r"^reshetova\s+1$", out, re.M) and re.search(r"^train\s+16$", out, re.M)


# --------------------------------------------------------------------------- rendering fabricated runs


def _local_report(exp: Any, n: int) -> dict[str, Any]:
    """A real local-DP privacy report (the report recomputes epsilon and refuses a fake)."""
    from dpsynth.methods.entropic_wgan import local_noise
    from dpsynth.methods.entropic_wgan.run import _privacy_report
    from dpsynth.privacy.randomness import NoiseSource

    ctx = SimpleNamespace(experiment=exp, noise=NoiseSource("secret", None))
    return json.loads(json.dumps(_privacy_report(ctx, local_noise(exp.local), n).to_dict()))


def _fabricate(params: Any, results: Path, data: Path, name: str, w2: float, rng: np.random.Generator,
              spread: float = 0.0) -> None:
    """A run's metrics.json with W2 ``w2``: one synthetic set, or three at ``w2`` -/+ ``spread`` (a known spread
    over sample draws, which the claim checker can decide with)."""
    from dpsynth.evaluate.sampling import write_synthetic
    from dpsynth.paths import metrics_file

    exp = params.all_experiments()[name]
    privacy = _local_report(exp, 3000)
    path = metrics_file(results, name)
    path.parent.mkdir(parents=True, exist_ok=True)
    values = [w2 - spread, w2, w2 + spread] if spread else [w2]
    path.write_text(json.dumps({
        "experiment": name, "dataset": exp.dataset, "method": exp.method, "scale": "quick", "classifiers": {},
        "fid": {"available": False, "fid": None, "reason": "not an image dataset"}, "privacy": privacy,
        "w2": {"mean": w2, "std": float(np.std(values)), "n": len(values), "values": values, "n_points": 1000,
               "reference_split": "test (clean)"},
        "n_synthetic": 500, "n_synthetic_sets": len(values), "seconds": {},
        "train": {"steps": 900, "hparams": {"batch_size": 256}}}))
    (data / "privatized").mkdir(parents=True, exist_ok=True)
    np.savez(data / "privatized" / f"{name}.npz", x_train=rng.normal(size=(3000, 2)).astype(np.float32))
    sets = data / "synthetic" / name
    sets.mkdir(parents=True, exist_ok=True)
    write_synthetic(sets / "seed0.npz", rng.normal(size=(500, 2)).astype(np.float32), np.zeros(500, np.int64), 1,
                    privacy, {"experiment": name, "sample_seed": 0, "scale": "quick", "n": 500})


def test_figure_and_claim_render_from_fabricated_runs(tmp_path: Path) -> None:
    from dpsynth.report.manifolds import manifold_figure
    from dpsynth.report.tables import build_table

    raw = _raw()
    raw["data"]["root"] = str(tmp_path / "data")
    params = parse_params(raw, source="fixture")
    results, rng = tmp_path / "results", np.random.default_rng(0)
    runs = _runs(params, "reshetova_fig1")
    # the Laplace row shows the claim (entropic closer), the Gaussian row does not; one panel not run
    for cell, w2 in {("laplace", "entropic"): 0.2, ("laplace", "exact"): 0.7, ("gaussian", "entropic"): 0.9,
                     ("gaussian", "exact"): 0.4}.items():
        _fabricate(params, results, tmp_path / "data", runs[cell], w2, rng, spread=0.01)
    built = build_table("reshetova_fig1", params, results)
    f = built.frame
    assert list(f["Run"]) == [runs[("laplace", "entropic")], runs[("laplace", "exact")],
                              runs[("gaussian", "entropic")], runs[("gaussian", "exact")]]
    assert list(f["W2 to clean data ours"]) == [f"{w:.3f} ± 0.008 (1 run, std over 3 sets)" for w in (0.2, 0.7, 0.9, 0.4)]
    assert list(f["Loss"]) == ["entropic 1-W", "unregularized 1-W", "entropic 2-W", "unregularized 2-W"]
    assert set(f["W2 paper"]) == {"not reported (plot only)"} and built.ours == 4
    assert set(f["Trained on"]) == {"n=3,000, b=256, 900 steps"}
    claim = next(n for n in built.notes if n.startswith("Claim (Reshetova et al., Figure 1)"))
    # one run per panel: decided on the spread over its synthetic sets, which the note says is all it knows
    assert "Ours: does not hold -- Laplace ε=5: holds (entropic - exact = -0.500, 95% interval [" in claim, claim
    assert "Gaussian ε=5, δ=0.0001: does not hold (entropic - exact = +0.500" in claim
    assert "1 training run; spread over 3 sample draws only" in claim
    assert [(p["row"], p["col"]) for p in built.panels] == [(0, 0), (0, 1), (1, 0), (1, 1)]

    drawn = manifold_figure(built, params, tmp_path / "with")
    assert drawn.name == "reshetova_fig1.png" and drawn.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # the same panels without the privatized and learned points: a different picture (the points are drawn)
    empty = manifold_figure(built, params, tmp_path / "without", data_root=tmp_path / "nothing")
    assert empty.read_bytes() != drawn.read_bytes()

    # one run gone: its row is not checked, the claim counts the other row only
    (results / "runs" / runs[("gaussian", "exact")] / "metrics.json").unlink()
    built = build_table("reshetova_fig1", params, results)
    assert built.frame["W2 to clean data ours"].iloc[3] == "not run" and built.ours == 3
    assert any("Ours: holds -- Laplace ε=5: holds" in n for n in built.notes), built.notes


def test_the_w2_record_the_evaluate_stage_writes_is_one_the_report_reads(tmp_path: Path) -> None:
    """`w2_scores` once recorded its 1,000-point subsample size as the record's "n" (the number of sets),
    and the report refused every local-DP run's metrics.json; the subsample size is "n_points" now."""
    from dpsynth.data.dataset import Dataset
    from dpsynth.evaluate.metrics import w2_scores
    from dpsynth.paths import metrics_file
    from dpsynth.report.runs import RunStore

    raw = _raw()
    raw["data"]["root"] = str(tmp_path / "data")
    params = parse_params(raw, source="fixture")
    rng = np.random.default_rng(0)
    name = "ewgan_rectangle_gauss"
    _fabricate(params, tmp_path / "results", tmp_path / "data", name, 0.5, rng)
    clean = rng.normal(size=(1500, 2))
    real = Dataset("manifold2d_rectangle", clean, np.zeros(1500, np.int64), clean, np.zeros(1500, np.int64), 1)
    w2 = w2_scores([rng.normal(size=(1200, 2)), rng.normal(size=(1200, 2))], real)
    assert (w2["n"], w2["n_points"], len(w2["values"])) == (2, 1000, 2)
    path = metrics_file(tmp_path / "results", name)
    path.write_text(json.dumps({**json.loads(path.read_text()), "w2": w2}))
    exp = params.all_experiments()[name]
    store = RunStore.load_all(tmp_path / "results", {name: (exp.dataset, exp.method)})  # raises on a bad record
    assert store.experiment(name).metrics["w2"]["mean"] == pytest.approx(w2["mean"])


def test_fig5s_figure_gets_a_third_panel_for_the_second_measure(tmp_path: Path) -> None:
    """Issue 64 item 3: with KID in the sweep's rows, Fig. 5's figure draws it beside W2 and the right panel (a third
    panel: the image one panel wider); without, the figure is as before."""
    from PIL import Image

    from dpsynth.config import load_params
    from dpsynth.report.figures import w2_noise

    params = load_params(REPO / "params.yaml", scale="paper_cpu")
    rows = [dict(loss=loss, noise_std=s, role="figure", seed=seed, w2=12 + 0.1 * s + 0.01 * seed,
                 kid=1e-3 * (2 + s) + 1e-5 * seed, precision=0.3, recall=0.2, w2_privatized_data=18 + 10 * s,
                 entropic_w2_privatized=100 * s + seed, entropic_w2_privatized_clean=99 * s)
            for seed in range(2) for s in (0.5, 1.0) for loss in ("entropic", "exact")]
    rows.append(dict(loss="clean training records", role="reference", seed=0, w2=12.45, kid=0.0))
    widths = []
    for with_kid in (False, True):
        res = tmp_path / f"r{with_kid}"
        (res / "w2_noise").mkdir(parents=True)
        frame = pd.DataFrame(rows)
        (frame if with_kid else frame.drop(columns=["kid", "precision", "recall"])).to_csv(
            res / "w2_noise" / "mnist.csv", index=False)
        drawn = [p for p in w2_noise(params, res, tmp_path / f"f{with_kid}") if isinstance(p, Path)
                 and p.name == "w2_noise_mnist.png"]
        widths.append(Image.open(drawn[0]).size[0])
    assert widths[1] == pytest.approx(1.5 * widths[0], rel=0.02), widths


@pytest.mark.pipeline
def test_snakemake_reshetova_mnist_names_the_missing_sweep_or_the_scale_in_one_line(tmp_path: Path) -> None:
    """Issue 63 item 9: `snakemake reshetova_mnist` without w2_noise.mnist gave a KeyError with a traceback. Now,
    while the DAG is built (no job runs), one error line naming the key; at a scale the sweep does not train, one
    naming the scale to use."""
    import shutil
    import subprocess

    from tests.conftest import require

    snakemake = venv_bin("snakemake")
    require(Path(snakemake).exists(), f"snakemake not installed at {snakemake} (make env installs it)")
    shutil.copy(REPO / "Snakefile", tmp_path / "Snakefile")
    shutil.copytree(REPO / "workflow", tmp_path / "workflow")
    raw = _raw()

    def dry(*config: str) -> str:
        (tmp_path / "params.yaml").write_text(yaml.safe_dump(raw, sort_keys=False))
        res = subprocess.run([snakemake, "-n", "reshetova_mnist", "--cores", "1", "--config", *config], cwd=tmp_path,
                             capture_output=True, text=True, timeout=300)
        assert res.returncode != 0
        return res.stdout + res.stderr

    assert "reshetova_mnist trains at the paper's settings: run it with --config scale=paper_cpu" in dry("scale=quick")
    del raw["w2_noise"]["mnist"]
    out = dry("scale=paper_cpu")
    assert "reshetova_mnist needs the W2-vs-noise sweep w2_noise.mnist in params.yaml" in out and "KeyError" not in out
