"""The trivial private baselines as one path of the pipeline: the evaluate stage of every run trained on locally
privatized records fits them to THAT run's privatized file (``evaluate.baselines.run_baselines``) and scores them
as it scores the run's generator, into the run's metrics.json; both runners give that job the privatized file; the
Fig. 11 and 2-D tables render the rows with their privacy and decide "the generator is closer to the clean data
than the baselines" per measure with the one claim checker (Reshetova, Chen, Ozgur, "Training generative models
from privatized data via entropic optimal transport", ISIT 2024, arXiv:2306.09547)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from dpsynth.config import parse_params, resolve_run
from dpsynth.errors import DataError
from dpsynth.methods.local_baselines import GAUSSIAN, codebook_name
from tests.conftest import REPO
from tests.test_reshetova_fig11 import half_circle  # noqa: F401  (the fixture)

NAMES = [codebook_name(10), codebook_name(100), GAUSSIAN]


# --------------------------------------------------------------------------- the evaluate stage


def test_the_evaluate_stage_writes_a_local_runs_baselines_fitted_to_its_privatized_file(
        half_circle: Any, tmp_path: Path) -> None:  # noqa: F811
    """A tiny local-DP run (1,000 privatized 2-D points, one synthetic set): its metrics.json gets a
    ``baselines`` record -- each baseline fitted to the run's own privatized file with the run's seed and scored
    exactly as the run's generator (the same set count and size, the same W2 subsample) -- at the privatization's
    epsilon and delta, labelled post-processing; the report reads it back, and refuses an edited one."""
    from dpsynth.data.dataset import load_processed
    from dpsynth.evaluate.baselines import HeldOut, scored_like_a_run
    from dpsynth.evaluate.record import MetricsError, MetricsRecord
    from dpsynth.methods.local_baselines import fit_local_baselines, read_privatized
    from dpsynth.paths import privatized_file
    from dpsynth.stages.evaluate import run_evaluate
    from dpsynth.stages.privatize import privatize
    from tests.test_reshetova_figures import _fabricate

    params, _, _ = half_circle
    name, root = "n_test-n1000", Path(params.data.root)
    _fabricate(params, tmp_path / "results", root, name, 0.5, np.random.default_rng(5))
    privatized_file(root, name).unlink()  # the fabricated stand-in: the privatize stage makes the real one
    report = privatize(params, name)
    assert run_evaluate(params, name, synthetic=str(root / "synthetic"), models=str(tmp_path / "models"),
                        results=str(tmp_path / "results"), private_out=str(tmp_path / "private"), device="cpu") == 0
    rec = json.loads((tmp_path / "results" / "runs" / name / "metrics.json").read_text())
    base = rec["baselines"]
    seed = resolve_run(params, name).seed
    assert base["available"] and set(base["models"]) == set(NAMES) and base["n_records"] == 1000
    assert base["epsilon"] == report["epsilon"] and base["delta"] == report["delta"] and base["seed"] == seed
    assert base["privatized"] == str(privatized_file(root, name))
    assert "none (reproducible noise - not private)" == base["privacy"]  # the fixture's noise is reproducible
    assert (base["n_synthetic"], base["n_synthetic_sets"]) == (rec["n_synthetic"], rec["n_synthetic_sets"])
    # each is what the run's own privatized records give, scored as the generator was
    priv = read_privatized(privatized_file(root, name))
    test = HeldOut.of(load_processed(root / "processed" / "manifold2d_half_circle.npz"))
    for bname, model in fit_local_baselines(priv.records, priv.noise_var, seed=seed, domain=priv.domain).items():
        again = scored_like_a_run(model, test, record_shape=priv.record_shape, n_synthetic=rec["n_synthetic"],
                                  n_sets=rec["n_synthetic_sets"], seed=seed)
        got = base["models"][bname]
        assert got["mean"] == pytest.approx(again["mean"], rel=1e-9) and got["n"] == rec["n_synthetic_sets"]
        assert got["n_points"] == rec["w2"]["n_points"] and got["reference_split"] == rec["w2"]["reference_split"]
    assert len({base["models"][b]["mean"] for b in NAMES}) == 3  # three fits, three numbers
    MetricsRecord.from_dict(rec)  # the format's owner reads it
    bad = json.loads(json.dumps(rec))
    bad["baselines"]["models"][GAUSSIAN]["mean"] = -1.0
    with pytest.raises(MetricsError, match=r"baselines\.models\.baseline: Gaussian"):
        MetricsRecord.from_dict(bad)
    bad = json.loads(json.dumps(rec))
    del bad["baselines"]["privacy"]
    with pytest.raises(MetricsError, match=r"baselines\.privacy"):
        MetricsRecord.from_dict(bad)
    # a run without its privatized records is one line naming the file, not a metrics.json without baselines
    privatized_file(root, name).unlink()
    with pytest.raises(DataError, match=r"n_test-n1000\.npz: the privatized records this run trained on"):
        run_evaluate(params, name, synthetic=str(root / "synthetic"), models=str(tmp_path / "models"),
                     results=str(tmp_path / "results"), private_out=str(tmp_path / "private"), device="cpu")


@pytest.fixture(scope="module")
def digits_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from dpsynth.data.prepare import Sources, prepare

    root = tmp_path_factory.mktemp("data")
    prepare("digits28", Sources(root=root))
    return root


def test_the_baselines_never_read_the_clean_training_records(digits_root: Path) -> None:
    """Images privatized by the privatize stage (secret noise): with the clean records' folder removed and the
    dataset passed in poisoned (NaN training records, which a fit would refuse), the baselines still fit and score,
    to the same numbers as with the clean dataset -- only its test split reaches them. Images get the second measure
    (KID, precision, recall) as the run's generator does."""
    from dpsynth.data.dataset import Dataset, load_processed
    from dpsynth.evaluate.baselines import run_baselines
    from dpsynth.paths import privatized_file
    from dpsynth.stages.privatize import privatize

    raw = yaml.safe_load((REPO / "params.yaml").read_text())
    raw["data"]["root"] = str(digits_root)
    raw.update(scale="smoke", privacy_noise="secret")
    raw["experiments"]["g28"] = {
        "method": "entropic_wgan", "dataset": "digits28",
        "local": {"mechanism": "gaussian", "epsilon": 2000.0, "delta": 1e-4, "radius": 28.0, "seed": 5},
        "hparams": {"generator": "dcgan", "loss": "entropic"}}
    rep = privatize(parse_params(raw), "g28")
    clean = load_processed(digits_root / "processed" / "digits28.npz")
    shutil.rmtree(digits_root / "processed")
    poisoned = Dataset(clean.name, np.full_like(clean.x_train, np.nan, dtype=np.float64), clean.y_train,
                       clean.x_test, clean.y_test, clean.num_classes)
    npz = privatized_file(digits_root, "g28")
    out = run_baselines(npz, poisoned, n_synthetic=200, n_sets=1, seed=3)
    assert out["available"] and list(out["models"]) == NAMES and out["epsilon"] == rep["epsilon"] == 2000.0
    assert "ε = 2000" in out["privacy"] and "post-processing of the privatized records" in out["privacy"]
    assert {"kid", "precision", "recall"} <= set(out["models"][GAUSSIAN]["closeness"])
    same = run_baselines(npz, clean, n_synthetic=200, n_sets=1, seed=3)
    for b, m in out["models"].items():
        assert m["mean"] == pytest.approx(same["models"][b]["mean"], rel=1e-9)
        assert m["closeness"]["kid"]["mean"] == pytest.approx(same["models"][b]["closeness"]["kid"]["mean"], rel=1e-9)
    assert not (digits_root / "processed").exists()  # nothing recreated it either


def test_the_baselines_say_why_a_codebook_or_all_of_them_cannot_fit(tmp_path: Path, half_circle: Any) -> None:  # noqa: F811
    """A codebook needs at least k records (a cell of 60 records keeps the Gaussian and k = 10, and says why k =
    100 is left out); records in the DCT domain get no baselines, with the reason; the report shows such a reason."""
    from dpsynth.data.dataset import load_processed
    from dpsynth.evaluate.baselines import run_baselines
    from dpsynth.io import read_json, write_json
    from dpsynth.paths import privatized_file
    from dpsynth.stages.privatize import privatize
    from tests.test_reshetova_fig11 import _raw, _with_sweep

    params, _, _ = half_circle
    raw = _with_sweep(_raw(), [60, 1000])
    raw.update(scale="smoke", privacy_noise="reproducible")
    raw["data"]["root"] = params.data.root
    small = parse_params(raw, source="fixture")
    privatize(small, "n_test-n60")
    real = load_processed(Path(params.data.root) / "processed" / "manifold2d_half_circle.npz")
    npz = privatized_file(params.data.root, "n_test-n60")
    out = run_baselines(npz, real, n_synthetic=100, n_sets=2, seed=0)
    assert list(out["models"]) == [codebook_name(10), GAUSSIAN] and out["models"][GAUSSIAN]["n"] == 2
    assert out["skipped"] == {codebook_name(100): "a codebook of k = 100 needs at least 100 privatized records, "
                                                  "the file has 60"}
    js = npz.with_suffix(".json")
    write_json(js, {**read_json(js), "dct": True})
    dct = run_baselines(npz, real, n_synthetic=100, n_sets=1, seed=0)
    assert dct["available"] is False and "DCT" in dct["reason"] and "models" not in dct
    from dpsynth.report.runs import Run
    from dpsynth.report.tables.baselines import baselines_of_runs

    rows, notes = baselines_of_runs([(Run("n_test-n60", npz, {"baselines": dct}), {"n": 60.0}),
                                     (Run("n_test-n1000", npz, {"baselines": out}), {"n": 1000.0})])
    assert notes == [f"Ours: n_test-n60 has no trivial baselines: {dct['reason']}."]
    assert list(rows["loss"]) == [codebook_name(10), GAUSSIAN] and set(rows["n"]) == {1000.0}


# --------------------------------------------------------------------------- both runners


def test_both_runners_give_a_local_runs_evaluate_job_its_privatized_records() -> None:
    """DVC: the runs on privatized records evaluate in a group of their own (every item of a foreach has the same
    dependencies) whose jobs depend on the run's privatized file; the other runs' do not. (That Snakemake's evaluate
    rule asks for the same file is tests/test_workflow_sync.py's job-by-job comparison.)"""
    from dpsynth.config import load_params
    from dpsynth.workflow.dvc import dvc_stages

    stages = dvc_stages(load_params(REPO / "params.yaml"))["stages"]
    local, other = stages["evaluate_local"], stages["evaluate"]
    assert set(local["foreach"]) == {"ewgan_half_circle_gauss"} and "ewgan_half_circle_gauss" not in other["foreach"]
    assert "data/privatized/${key}.npz" in local["do"]["deps"]
    assert not any(d.startswith("data/privatized") for d in other["do"]["deps"])
    assert local["do"]["cmd"] == other["do"]["cmd"]  # the same evaluate command


# --------------------------------------------------------------------------- the tables


def _baselines(seed: int, w2: dict[str, float], closeness: dict[str, dict[str, float]] | None = None
               ) -> dict[str, Any]:
    """A run's ``baselines`` record as the evaluate stage writes it (one synthetic set per baseline)."""
    def summary(v: float) -> dict[str, Any]:
        return {"mean": v, "std": 0.0, "n": 1, "values": [v]}

    models = {name: {**summary(v), "n_points": 1000, "reference_split": "test (clean)",
                     **({"closeness": {k: summary(x) for k, x in closeness[name].items()}} if closeness else {})}
              for name, v in w2.items()}
    return {"available": True, "privatized": "data/privatized/x.npz", "n_records": 1000, "mechanism": "gaussian",
            "epsilon": 5.0, "delta": 1e-4, "private": True, "seed": seed, "n_synthetic": 500, "n_synthetic_sets": 1,
            "privacy": "ε = 5, δ = 0.0001 (local gaussian: post-processing of the privatized records)",
            "models": models, "seconds": 0.1}


def _with(path: Path, **keys: Any) -> None:
    """Add ``keys`` to a fabricated metrics.json; ``closeness`` goes under its ``w2``."""
    rec = json.loads(path.read_text())
    close = keys.pop("closeness", None)
    if close is not None:
        rec["w2"]["closeness"] = {k: {"mean": v, "std": 0.0, "n": 1, "values": [v]} for k, v in close.items()}
    path.write_text(json.dumps({**rec, **keys}))


def test_the_fig11_table_renders_baseline_rows_and_a_claim_per_measure(tmp_path: Path) -> None:
    """Fig. 11 on the half circle with three runs per n: a baseline row per (baseline, n) under each n, naming the
    runs it was fitted to, with its privacy; and one claim per measure (W2, KID, precision, recall) from the one
    checker (Welch per n). Generators clearly closer on W2 and precision: holds; a baseline clearly closer on KID and
    recall: does not hold."""
    from dpsynth.paths import metrics_file
    from dpsynth.report.tables import build_table
    from dpsynth.report.tables.train_size import seed_of
    from tests.test_reshetova_figures import _fabricate

    raw = yaml.safe_load((REPO / "params.yaml").read_text())
    raw["data"]["root"] = str(tmp_path / "data")
    raw["sweeps"]["n_half_circle"]["grid"] = {"n": [1000, 60000], "seed": [0, 1, 2]}
    params = parse_params(raw, source="fixture")
    results, rng = tmp_path / "results", np.random.default_rng(0)
    cells = params.cells_of("n_half_circle")
    assert len(cells) == 6
    for i, name in enumerate(cells):
        jitter = 0.001 * (i % 3)
        _fabricate(params, results, tmp_path / "data", name, 0.10 + jitter, rng)
        seed = seed_of(params, name)
        _with(metrics_file(results, name), closeness={"kid": 2e-3 + 1e-5 * (i % 3), "precision": 0.5 + jitter,
                                                      "recall": 0.1 + jitter},
              baselines=_baselines(seed, {n: w + jitter for n, w in zip(NAMES, (0.30, 0.20, 0.40))},
                                   {n: {"kid": k + 1e-5 * (i % 3), "precision": 0.2 + jitter, "recall": 0.3 + jitter}
                                    for n, k in zip(NAMES, (1e-3, 3e-3, 4e-3))}))
    built = build_table("reshetova_fig11", params, results)
    f = built.frame
    assert list(f["n"]) == ["1,000"] * 4 + ["60,000"] * 4
    rows = f[f["Run"].str.startswith("baseline: ")]
    assert len(rows) == 6 and set(rows["Privacy"]) == {_baselines(0, {})["privacy"]}
    first = rows[rows["Run"].str.startswith(codebook_name(10) + " (")].iloc[0]
    ones = sorted(c for c in cells if params.all_experiments()[c].train_size == 1000)
    assert first["Run"] == f"{codebook_name(10)} (fitted to the privatized records of {', '.join(ones)})"
    assert first["W2 to clean held-out ours"] == "0.301 ± 0.001 (3 runs)" and first["W2 paper"] == "not reported"
    assert first["W2 to clean train (private)"] == "n/a"
    claims = [n for n in built.notes if n.startswith("Claim (ours, beside Reshetova et al., Figure 11): every "
                                                     "generator is closer")]
    assert [c.split(", on ")[1].split(".")[0] for c in claims] == ["W2 to the clean data", "KID ×10³ to the clean data",
                                                                   "precision", "recall"]
    w2, kid, precision, recall = claims
    assert "Ours: holds" in w2 and f"n=1,000: entropic - {codebook_name(100)}" in w2 and "Welch" in w2
    assert "Ours: does not hold" in kid and f"entropic - {codebook_name(10)}" in kid  # the best on KID
    assert "Ours: holds" in precision and "Ours: does not hold" in recall
    assert any(n.startswith("Ours: the 'baseline' rows are trivial generators that `dpsynth evaluate`")
               for n in built.notes)


def test_the_2d_figure_renders_each_panels_baselines_and_decides_the_claim_by_seed(tmp_path: Path) -> None:
    """Fig. 1: the baseline rows under each panel with their privacy, and "the generator is closer than the
    baselines" per measure from the one checker -- paired by seed over a panel's three runs (each baseline fitted
    to the run's own privatized records), "cannot decide" for a panel with one run, which says why. A generator
    clearly closer than every baseline: holds; a baseline clearly closer: does not hold."""
    from dpsynth.paths import metrics_file
    from dpsynth.report.tables import build_table
    from dpsynth.report.tables.train_size import seed_of
    from tests.test_reshetova_figures import _fabricate, _runs

    raw = yaml.safe_load((REPO / "params.yaml").read_text())
    raw["data"]["root"] = str(tmp_path / "data")
    raw["sweeps"]["hc_gauss_seeds"] = {"base": "ewgan_half_circle_gauss", "grid": {"seed": [1, 2]}}
    params = parse_params(raw, source="fixture")
    results, rng = tmp_path / "results", np.random.default_rng(0)
    gauss = _runs(params, "reshetova_fig1")[("gaussian", "entropic")]
    laplace = _runs(params, "reshetova_fig1")[("laplace", "entropic")]
    reps = params.replicates_of(gauss)
    assert len(reps) == 3

    def fabricate(gen_w2: float, best: float, one_run_panel: bool = True) -> None:
        # a seed shifts the generator and its baselines alike (its noise instance): paired, the gap is tight
        for i, name in enumerate(reps):
            shift = (-0.05, 0.0, 0.05)[i]
            _fabricate(params, results, tmp_path / "data", name, gen_w2 + shift, rng)
            _with(metrics_file(results, name), baselines=_baselines(seed_of(params, name), {
                codebook_name(10): 0.9 + shift, codebook_name(100): best + shift + 0.001 * i, GAUSSIAN: 1.2 + shift}))
        if one_run_panel:
            _fabricate(params, results, tmp_path / "data", laplace, 0.3, rng)
            _with(metrics_file(results, laplace), baselines=_baselines(seed_of(params, laplace),
                                                                       dict.fromkeys(NAMES, 0.8)))

    fabricate(0.2, 0.5)
    built = build_table("reshetova_fig1", params, results)
    f = built.frame
    base = f[f["Loss"].str.startswith("baseline: ")]
    assert len(base) == 6 and set(base["Privacy"]) == {_baselines(0, {})["privacy"]}
    assert set(base["Trained on"]) == {"n/a"} and set(base["Mechanism"]) == {"Gaussian ε=5, δ=0.0001", "Laplace ε=5"}
    k100 = base[(base["Loss"] == codebook_name(100)) & (base["Mechanism"] == "Gaussian ε=5, δ=0.0001")].iloc[0]
    assert k100["Run"] == ", ".join(reps) and k100["W2 to clean data ours"].endswith("(3 runs)")
    gen = f[f["Run"] == gauss].iloc[0]
    assert gen["Privacy"] == _baselines(0, {})["privacy"]  # the generator is post-processing of the same records
    # the panels (the figure) are the four runs only
    assert len(built.panels) == 4
    claim = next(n for n in built.notes if n.startswith("Claim (ours, beside Reshetova et al., Figure 1): every "
                                                        "generator is closer"))
    assert "on W2 to the clean data" in claim and "paired by seed" in claim
    assert f"Gaussian ε=5, δ=0.0001: entropic 2-W - {codebook_name(100)} = -0.301" in claim
    # the one-run panel: cannot decide, saying why; so the claim over every panel is undecided
    assert "Laplace ε=5: entropic 1-W - " in claim and "no noise estimate" in claim
    assert "Ours: undecided" in claim
    # a baseline clearly closer in a panel: does not hold, whatever the one-run panel says
    fabricate(0.6, 0.3)
    claim = next(n for n in build_table("reshetova_fig1", params, results).notes
                 if n.startswith("Claim (ours, beside Reshetova et al., Figure 1): every generator"))
    assert "Ours: does not hold" in claim and f"entropic 2-W - {codebook_name(100)} = +0.299" in claim
    # and with the one-run panel gone, generators clearly closer: holds
    metrics_file(results, laplace).unlink()
    fabricate(0.2, 0.5, one_run_panel=False)
    claim = next(n for n in build_table("reshetova_fig1", params, results).notes
                 if n.startswith("Claim (ours, beside Reshetova et al., Figure 1): every generator"))
    assert "Ours: holds" in claim
