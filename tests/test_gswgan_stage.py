"""GS-WGAN's Table 1 protocol through the evaluate and report stages: only the runs of a ``protocol:
gs_wgan`` table compute it, the real row's CNN is the IS network, metrics.json carries the record, and the
table renders the paper's numbers beside ours (Calibrated Acc from the run and the real row). Its IS and FID
are statistics of the training records: released (labelled) only for a dataset declared public, otherwise
kept under the private root, and printed to no job log that the release rule does not allow.

Real stages on scikit-learn's bundled 28x28 digits at the smoke scale (an untrained generator, so the
numbers are a wiring check, not a measurement); ~50 s on one CPU thread."""

from __future__ import annotations

import contextlib
import io
import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import yaml

from dpsynth.config import parse_params
from dpsynth.evaluate.record import GS_WGAN, MetricsRecord, calibrated_accuracy
from dpsynth.evaluate.zoo import available_models
from dpsynth.report.runs import fmt_summary
from dpsynth.methods.artifacts import save_generator
from dpsynth.nets import build_generator
from dpsynth.paths import PUBLIC_TRAINING_SPLIT
from tests.conftest import REPO, clear_pipeline, printed_values, train_split_statistics, with_digits28
from tests.test_evaluate_stage import ARCH, META, PRIVACY, require_fid_weights

TABLE = {"title": "GS-WGAN's protocol on digits (test)", "paper": "GS-WGAN (arXiv:2006.08265) Table 1",
         "published": "gswgan_t1_mnist", "protocol": "gs_wgan",
         "rows": [{"label": "Real data", "real": "digits28", "paper_row": "real"},
                  {"label": "G-PATE", "paper_row": "g_pate"},
                  {"label": "untrained DCGAN", "experiment": "dps_digits", "paper_row": "ours"}]}

# slow; one xdist worker for the module: its module-scoped runs are computed once, not once per worker
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("gswgan_stage")]


def _params(tmp: Path, tables: dict[str, Any]) -> dict[str, Any]:
    p = yaml.safe_load((REPO / "params.yaml").read_text())
    clear_pipeline(p).update(scale="smoke", datasets=["digits28"],
                             pipeline={"experiments": ["dps_digits", "dps_digits_plain"], "sweeps": []})
    p["evaluation"].update(real_datasets=["digits28"], fid_download=False, classifiers=["cnn"])
    p["scales"]["smoke"]["classifier_test_subset"] = 300  # of digits28's 360 test images: a real draw
    for name in ("dps_digits", "dps_digits_plain"):
        p["experiments"][name] = {"method": "dp_sinkhorn", "dataset": "digits28", "privacy": {"enabled": False},
                                  "hparams": {"sanitizer": "none", "max_steps": 1}}
    p["tables"], p["sweeps"] = tables, {}
    return p


def _captured(job: Any) -> str:
    """What ``job()`` printed to stdout and stderr -- a job's log -- with a progress line at every update
    (DPSYNTH_PROGRESS_EVERY=0: every value a progress line ever shows); the job must succeed."""
    out = io.StringIO()
    with pytest.MonkeyPatch.context() as mp, contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        mp.setenv("DPSYNTH_PROGRESS_EVERY", "0")
        assert job() == 0
    return out.getvalue()


@pytest.fixture(scope="module")
def done(tmp_path_factory: pytest.TempPathFactory, digits28_processed: Path) -> dict[str, Any]:
    """digits28 prepared (the session's copy, in the data root ``data``), two untrained generators
    sampled, every evaluate job and the report run, each job's log kept; then ``dps_digits`` evaluated and
    reported again with digits28 NOT declared public (``data.public``) into ``results_private``."""
    from dpsynth.stages.evaluate import run_evaluate
    from dpsynth.stages.report import run_report
    from dpsynth.stages.sample import run_sample

    tmp = tmp_path_factory.mktemp("gswgan")
    raw = _params(tmp, {"gswgan_t1_digits": TABLE})
    params = parse_params(raw, source="test")
    assert Path(params.data.root) == Path("data")  # relative to the working directory: tmp
    assert params.is_public("digits28")  # the shipped file declares the bundled digits public
    raw["data"]["public"] = [d for d in raw["data"]["public"] if d != "digits28"]
    private = parse_params(raw, source="test (digits28 not public)")
    with_digits28(digits28_processed, tmp / "data")
    cwd = os.getcwd()
    os.chdir(tmp)
    logs = {}
    try:
        torch.manual_seed(0)
        for name in ("dps_digits", "dps_digits_plain"):
            save_generator(tmp / f"models/{name}/generator.pt", build_generator(ARCH["name"], **ARCH["kwargs"]), ARCH,
                           META)
            (tmp / f"models/{name}/privacy.json").write_text(json.dumps(PRIVACY))
            assert run_sample(params, name) == 0
        logs["real"] = _captured(lambda: run_evaluate(params, real="digits28"))
        logs["run"] = _captured(lambda: run_evaluate(params, "dps_digits"))
        assert run_evaluate(params, "dps_digits_plain") == 0
        assert run_report(params) == 0
        # the same run, its dataset not declared public (the real row is the same file: copied, not recomputed)
        (tmp / "results_private/real").mkdir(parents=True)
        os.symlink(tmp / "results/real/digits28", tmp / "results_private/real/digits28")
        logs["private"] = _captured(lambda: run_evaluate(private, "dps_digits", results="results_private"))
        assert run_report(private, results="results_private") == 0
    finally:
        os.chdir(cwd)
    read = lambda p: json.loads((tmp / p).read_text())  # noqa: E731
    from dpsynth.report.runs import with_public_training_split

    released = read("results/runs/dps_digits/metrics.json")
    return {"dir": tmp, "params": params, "real": read("results/real/digits28/metrics.json"),
            "released": released,
            # as the report sees it for digits28 declared public: the kept statistics back, labelled
            "run": with_public_training_split(released, tmp / "private", "dps_digits"),
            "plain": read("results/runs/dps_digits_plain/metrics.json"),
            "private_run": read("results_private/runs/dps_digits/metrics.json"), "logs": logs}


def test_only_the_tables_runs_compute_the_protocol(done: dict[str, Any]) -> None:
    params = done["params"]
    assert params.evaluation_protocols(experiment="dps_digits") == [GS_WGAN]
    assert params.evaluation_protocols(real="digits28") == [GS_WGAN]
    assert params.evaluation_protocols(experiment="dps_digits_plain") == []
    assert "protocols" not in done["plain"]  # a run no such table shows pays nothing for it
    assert GS_WGAN in done["run"]["protocols"] and GS_WGAN in done["real"]["protocols"]


def test_the_records_hold_the_protocol(done: dict[str, Any]) -> None:
    require_fid_weights()  # the evaluate jobs found them too (same process, same environment)
    real, run = done["real"]["protocols"][GS_WGAN], done["run"]["protocols"][GS_WGAN]
    smoke = done["params"].scales["smoke"].gs_wgan_eval
    names, _ = available_models()
    for rec in (real, run):
        assert rec["accuracy"]["models"] == [*names, "cnn"]  # the zoo's models and the project's CNN
        assert rec["zoo"]["n_train"] == smoke.zoo_train_subset == 200
        # the smoke cap on the iterative models, recorded per fit; the zoo reads the classifiers' test images
        assert rec["zoo"]["max_iter"] == smoke.zoo_max_iter == 500
        runs = {m: r["runs"][0] for m, r in rec["zoo"]["models"].items()}
        assert runs["linear_svc"]["max_iter"] == runs["logistic_reg"]["max_iter"] == 500
        assert runs["mlp"]["max_iter"] == 200 and "max_iter" not in runs["gaussian_nb"]  # the lower one; none
        assert rec["zoo"]["n_test"] == done["real"]["classifiers"]["cnn"]["runs"][0]["n_test"] == 300  # of 360
        assert rec["accuracy"]["avg"]["mean"] == pytest.approx(np.mean(list(rec["accuracy"]["per_set"][0].values())))
        assert rec["is"]["splits"] == 10 and 1.0 <= rec["is"]["mean"] <= 10.0
        # FID against the training split, and KID / FID-infinity beside it from the same features
        ft = rec["fid_train"]
        assert ft["available"] is True and done["real"]["fid"]["available"] is True, ft.get("reason")
        assert ft["kid"]["available"] is True and ft["fid_inf"]["available"] is True
        assert ft["kid"]["reference_split"] == ft["fid_inf"]["reference_split"] == "train"
        assert ft["kid"]["n_reference"] == ft["fid_inf"]["n_reference"] == ft["n_reference"] == 8
        assert ft["precision"]["available"] and ft["recall"]["reference_split"] == "train"
        assert ft["precision"]["n_generated"] == ft["recall"]["n_reference"] == 8 and ft["recall"]["k"] == 3
    # the real row's CNN fit is the IS network: its evaluate job stored it, the run's loaded it (the same fit:
    # the same hold-out accuracy; no record holds the cache's key, a hash of the network's training records)
    assert real["is"]["classifier"]["cached"] is True and run["is"]["classifier"]["cached"] is True
    assert real["is"]["classifier"]["holdout_accuracy"] == run["is"]["classifier"]["holdout_accuracy"]
    assert "key" not in real["is"]["classifier"] and "key" not in run["is"]["classifier"]
    # digits28 is declared public: the run's training-split statistics are released, labelled as such
    assert run["is"]["privacy"] == run["fid_train"]["privacy"] == PUBLIC_TRAINING_SPLIT
    assert real["is"]["n_images"] == min(smoke.is_samples, 360)  # the real row: the real test split
    assert real["accuracy"]["per_set"][0]["cnn"] == done["real"]["classifiers"]["cnn"]["mean"]
    # real digits are learnable, an untrained generator's noise is not; calibration: real = 100 %
    assert real["accuracy"]["avg"]["mean"] > 0.6 and real["is"]["mean"] > run["is"]["mean"]
    assert calibrated_accuracy(real, real)["mean"] == pytest.approx(1.0, abs=1e-12)
    assert calibrated_accuracy(run, real)["mean"] < 0.5
    # the real row at n vs n: the training-split FID (test images vs training images, covariance
    # factors) is its test-split FID (training images vs test images, eigensolves) the other way round
    assert real["fid_train"]["n_generated"] == real["fid_train"]["n_reference"] == 8
    assert real["fid_train"]["mean"] == pytest.approx(done["real"]["fid"]["mean"], rel=1e-6)
    assert run["fid_train"]["mean"] > real["fid_train"]["mean"]
    # the format owner reads both released files back losslessly, and refuses a record a table would misprint
    for m, name in ((done["released"], "dps_digits"), (done["real"], None)):
        assert MetricsRecord.from_dict(m, real=name is None).to_dict() == m
    bad = json.loads(json.dumps(done["released"]))
    bad["protocols"][GS_WGAN]["accuracy"]["per_set"][0]["mlp"] = float("nan")
    with pytest.raises(Exception, match="protocols.gs_wgan.accuracy.per_set"):
        MetricsRecord.from_dict(bad)


def test_the_table_shows_the_papers_numbers_beside_ours(done: dict[str, Any]) -> None:
    require_fid_weights()
    text = (done["dir"] / "results/tables/gswgan_t1_digits.md").read_text()
    csv = (done["dir"] / "results/tables/gswgan_t1_digits.csv").read_text()
    lines = {ln.split("|")[1].strip(): [c.strip() for c in ln.split("|")[2:-1]] for ln in text.splitlines()
             if ln.startswith("| ") and not ln.startswith("| Method")}
    header = [c.strip() for c in next(ln for ln in text.splitlines() if ln.startswith("| Method")).split("|")[2:-1]]
    real, gpate, ours = (dict(zip(header, lines[k])) for k in ("Real data", "G-PATE", "untrained DCGAN"))
    # the paper's cells exactly as printed ("9.80", "0.60", "100 %": the Markdown keeps them as text)
    assert (real["IS paper"], real["FID paper"], real["Avg Acc paper"], real["Calibrated Acc (%) paper"]) == \
        ("9.80", "1.02", "0.88", "100 %")
    assert (ours["IS paper"], ours["Avg Acc paper"], ours["Calibrated Acc (%) paper"]) == ("9.23", "0.60", "69%")
    assert gpate["IS ours"] == "reported only" and gpate["FID paper"] == "177.16"
    # ours beside them, from the records
    rec, real_rec = done["run"]["protocols"][GS_WGAN], done["real"]["protocols"][GS_WGAN]
    assert ours["IS ours"] == fmt_summary([rec["is"]], digits=2)
    assert ours["MLP Acc ours"] == f"{rec['zoo']['models']['mlp']['mean']:.2f} (1 run)"  # one set: no "± 0.00"
    assert ours["CNN Acc ours"] == f"{done['run']['classifiers']['cnn']['mean']:.2f} (1 run)"
    assert ours["Avg Acc ours"] == f"{rec['accuracy']['avg']['mean']:.2f} (1 run)"
    # KID and FID-infinity beside the training-split FID: from the same features and training images
    ft = rec["fid_train"]
    assert ft["available"] and ft["kid"]["available"] and ft["fid_inf"]["available"], ft.get("reason")
    assert ft["kid"]["reference_split"] == ft["fid_inf"]["reference_split"] == "train"
    assert ft["kid"]["n_reference"] == ft["n_reference"]
    assert ours["FID ours"] == fmt_summary([ft], digits=2)
    assert ours["KID (×10³) ours"] == fmt_summary([ft["kid"]], scale=1000.0, digits=2)
    assert ours["FID∞ ours"] == fmt_summary([ft["fid_inf"]], digits=1)
    assert gpate["KID (×10³) ours"] == "reported only"
    assert ours["Calibrated Acc (%) ours"] == f"{100 * calibrated_accuracy(rec, real_rec)['mean']:.1f} (1 run)"
    assert real["Calibrated Acc (%) ours"] == "100.0 (1 run)" and real["ε paper"] == "not reported"
    assert ours["Precision ours"].startswith(f"{ft['precision']['mean']:.2f}")  # a fraction, 2 digits
    assert ours["Recall ours"].startswith(f"{ft['recall']['mean']:.2f}")
    assert gpate["KID (×10³) ours"] == gpate["Recall ours"] == "reported only"
    assert ours["ε paper"] == "10 (δ=1e-05)"
    # the notes say how ours were computed: sizes, network, models, what differs from the authors
    assert "200 images of each synthetic set" in text and "VGG11" in text and "SAMME" in text
    assert "LeNet-5" in text and "Calibrated Acc ours: per synthetic set" in text
    assert "9.80" in csv and "100 %" in csv
    # labelled: the training-split columns of a public dataset's run are outside the guarantee
    assert "IS, FID, KID (×10³) and FID∞ ours of dps_digits: computed on the real training split of digits28 " \
           "without noise, shown because data.public declares it public" in text


def test_a_dataset_not_declared_public_keeps_is_and_fid_under_the_private_root(done: dict[str, Any]) -> None:
    """No run's released metrics.json holds a statistic of the training records, its dataset declared public or
    not (issue 63: no order of declaring, evaluating, un-declaring and pushing may push one): its IS and FID against
    the training split name the private file that keeps them, labelled outside the guarantee; the report shows
    them, labelled, for a dataset data.public declares public when it is built, and otherwise its cells say they
    are kept private. The rest of the protocol (scored on the test split) is released as before. A record that
    holds them, labelled or not, or the IS network's key, is refused by key."""
    from dpsynth.evaluate.record import MetricsError
    from dpsynth.paths import OUTSIDE_GUARANTEE, gswgan_train_file, release_rule
    from dpsynth.report.tables.gswgan import KEPT_PRIVATE

    require_fid_weights()
    m, public = done["private_run"], done["run"]
    assert train_split_statistics(m) == [] == train_split_statistics(done["released"])
    for key in ("is", "fid_train"):  # data.public changes nothing the record says about them
        assert m["protocols"][GS_WGAN][key] == done["released"]["protocols"][GS_WGAN][key]
    assert train_split_statistics(public) != []  # (the check sees them where the report puts them back)
    rec = m["protocols"][GS_WGAN]
    where = str(gswgan_train_file("private", "dps_digits"))
    for key in ("is", "fid_train"):
        assert rec[key]["available"] is False and rec[key]["private"] == where and "where data.public declares " \
            "digits28 public" in rec[key]["reason"]
    assert rec["accuracy"] == public["protocols"][GS_WGAN]["accuracy"]  # test-split scores: released as before
    kept = json.loads((done["dir"] / where).read_text())
    assert kept["privacy"] == OUTSIDE_GUARANTEE and not release_rule(where).push and not release_rule(where).cache
    for key in ("is", "fid_train"):  # the very numbers the public run released, moved, not dropped
        assert kept["gswgan_train"][key]["mean"] == public["protocols"][GS_WGAN][key]["mean"]
    text = (done["dir"] / "results_private/tables/gswgan_t1_digits.md").read_text()
    header = [c.strip() for c in next(ln for ln in text.splitlines() if ln.startswith("| Method")).split("|")[2:-1]]
    ours = dict(zip(header, [c.strip() for c in next(ln for ln in text.splitlines()
                                                     if ln.startswith("| untrained DCGAN")).split("|")[2:-1]]))
    for col in ("IS ours", "FID ours", "KID (×10³) ours", "FID∞ ours"):
        assert ours[col] == KEPT_PRIVATE, (col, ours[col])
    assert ours["Avg Acc ours"] == f"{rec['accuracy']['avg']['mean']:.2f} (1 run)"
    assert f"kept under the private root ({where})" in text
    # a record holding them -- labelled public (an older evaluate's) or not (a hand edit) -- or the network's key:
    # refused
    for label in (True, False):
        bad = json.loads(json.dumps(public))
        if not label:
            del bad["protocols"][GS_WGAN]["is"]["privacy"]
        with pytest.raises(MetricsError, match=r"protocols\.gs_wgan\.is.*never in a run's metrics.json"):
            MetricsRecord.from_dict(bad)
    bad = json.loads(json.dumps(done["real"]))  # the real row's record, which may hold its IS (never pushed)
    bad["protocols"][GS_WGAN]["is"]["classifier"]["key"] = "0123456789abcdef0123"
    with pytest.raises(MetricsError, match=r"protocols\.gs_wgan\.is\.classifier\.key"):
        MetricsRecord.from_dict(bad, real=True)


def test_the_job_logs_show_no_statistic_that_stays_on_this_machine(done: dict[str, Any]) -> None:
    """Job logs are not private (``paths.release_rule``): the real-data row's log names its file but prints none
    of its scores, nor do its progress lines (its classifiers' and zoo's accuracies); a run's log never prints
    its IS and training-split FID (kept under the private root, declared public or not), only where they are."""
    require_fid_weights()
    real, logs = done["real"], done["logs"]
    assert "the real-data row is" in logs["real"] and "results/real/digits28/metrics.json" in logs["real"]
    gs = real["protocols"][GS_WGAN]
    values = [real["classifiers"]["cnn"]["mean"], real["fid"]["mean"], gs["is"]["mean"], gs["fid_train"]["mean"],
              *(r["mean"] for r in gs["zoo"]["models"].values())]
    assert printed_values(values, logs["real"]) == []
    kept = done["private_run"]["protocols"][GS_WGAN]["is"]["private"]
    private = json.loads((done["dir"] / kept).read_text())["gswgan_train"]
    assert printed_values([private["is"]["mean"], private["fid_train"]["mean"]], logs["private"]) == []
    assert f"kept under {kept}" in logs["private"]
    rec = done["run"]["protocols"][GS_WGAN]  # digits28 declared public: still not in the job's log
    assert printed_values([rec["is"]["mean"], rec["fid_train"]["mean"]], logs["run"]) == []
    # the released scores are printed: the check sees a printed value
    assert printed_values([done["run"]["classifiers"]["cnn"]["mean"]], logs["run"])


def test_an_unavailable_training_split_fid_reads_unavailable(done: dict[str, Any]) -> None:
    """Where FID could not be computed, its cell and the KID and FID-infinity cells beside it read
    "unavailable" (and the notes say why), never a number: the record of the run with its training-split
    FID replaced by an "unavailable" one, through the cells and notes the table is built from."""
    from dpsynth.report.runs import Run
    from dpsynth.report.tables.gswgan import gswgan_cell, gswgan_notes

    m = json.loads(json.dumps(done["run"]))
    m["protocols"][GS_WGAN]["fid_train"] = {"available": False, "fid": None, "reason": "no Inception weights offline"}
    run = Run("dps_digits", done["dir"] / "results/runs/dps_digits/metrics.json", m)
    real = Run("real_digits28", done["dir"] / "results/real/digits28/metrics.json", done["real"])
    assert gswgan_cell(run, real, "kid") == gswgan_cell(run, real, "fid_inf") == "unavailable"
    assert gswgan_cell(run, real, "precision") == gswgan_cell(run, real, "recall") == "unavailable"
    assert gswgan_cell(run, real, "fid") == "unavailable"
    assert gswgan_cell(run, real, "is") != "unavailable"  # the other cells still come from the record
    notes = gswgan_notes([("untrained DCGAN", run), ("Real data", real)], real, "digits28")
    assert "FID unavailable for untrained DCGAN (dps_digits): no Inception weights offline" in notes


def test_the_protocols_sizes_reach_exactly_those_jobs_fingerprints() -> None:
    """Snakemake's fingerprint (and DVC's settings files, the same dictionaries): a size edit re-runs the
    protocol's evaluate jobs and the report; listing one more run re-runs that run's evaluation only."""
    from dpsynth.fingerprint import fingerprint

    base = _params(Path("."), {"t": TABLE})
    jobs = [("evaluate", "dps_digits"), ("evaluate", "dps_digits_plain"), ("evaluate_real", "digits28"),
            ("train", "dps_digits"), ("sample", "dps_digits"), ("report", "")]

    def changed(edit: Any) -> set[tuple[str, str]]:
        raw = json.loads(json.dumps(base))
        edit(raw)
        a, b = parse_params(base, source="a"), parse_params(raw, source="b")
        return {j for j in jobs if fingerprint(a, *j) != fingerprint(b, *j)}

    # declaring the dataset public, or no longer, re-runs the report alone (it decides whether to show the kept IS
    # and FID); no evaluate job's output depends on it
    private = changed(lambda p: p["data"].update(public=[d for d in p["data"]["public"] if d != "digits28"]))
    assert private == {("report", "")}
    size = changed(lambda p: p["scales"]["smoke"]["gs_wgan_eval"].update(zoo_train_subset=321))
    assert size == {("evaluate", "dps_digits"), ("evaluate_real", "digits28"), ("report", "")}
    assert changed(lambda p: p["scales"]["smoke"]["gs_wgan_eval"].update(zoo_max_iter=None)) == size
    listed = changed(lambda p: p["tables"]["t"]["rows"].append({"label": "x", "experiment": "dps_digits_plain"}))
    assert listed == {("evaluate", "dps_digits_plain"), ("report", "")}
    other = changed(lambda p: p["scales"]["quick"]["gs_wgan_eval"].update(is_samples=7))
    assert other == {("report", "")}  # a scale not running
