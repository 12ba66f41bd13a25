"""The central-DP baseline (method ``class_gaussian``, ``methods/central_baseline.py``): a class-conditional
Gaussian released through one Gaussian mechanism (``privacy.sanitizers.ClassMomentsSanitizer``) as the one step
of the one training loop.

Each privacy property is checked where it could break: the sanitizer alone (the unit ball enforced, one release),
a REAL training run spied on (every record read once, each query's noise std Delta_j sigma / sqrt(w_j) at the
sigma the accountant calibrates to the target, measured on what was released; the noise from the run's secret
NoiseSource; the release drawn only after the stage reserved it), the report (``verify`` accepts it), a failed
release redone from the checkpoint without reading the data again, and the train stage refusing the run under a
dataset budget it does not fit. The Monte-Carlo audit of the sanitizer is in tests/test_privacy_audit.py;
scripts/privacy-mutations.py runs this file."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import yaml

from dpsynth.config import Experiment, ScalePreset, load_params, resolve_privacy, resolve_run
from dpsynth.data.dataset import Dataset, load_processed
from dpsynth.errors import PrivacyError
from dpsynth.methods import central_baseline as cb
from dpsynth.methods.context import TrainContext
from dpsynth.privacy import accounting as acc
from dpsynth.privacy.audit import AUDITS
from dpsynth.privacy.randomness import NoiseSource
from dpsynth.privacy.sanitizers import (
    CLASS_MOMENT_SENSITIVITY,
    CLASS_MOMENT_WEIGHTS,
    ClassMomentsSanitizer,
    class_moment_stds,
)
from dpsynth.privacy.verify import verify_report

pytestmark = pytest.mark.usefixtures("one_torch_thread")

REPO = Path(__file__).resolve().parents[1]
RANK = 5


@pytest.fixture(scope="module")
def digits(tmp_path_factory: pytest.TempPathFactory) -> Dataset:
    """The bundled 28x28 digits (1,797 records): real images, so the covariances are not flat."""
    from dpsynth.data.prepare import Sources, prepare

    root = tmp_path_factory.mktemp("data")
    prepare("digits28", Sources(root=root))
    d = load_processed(root / "processed" / "digits28.npz")
    return Dataset(d.name, d.x_train, d.y_train, d.x_test[:0], d.y_test[:0], d.num_classes)


def _ctx(tmp: Path, data: Dataset, *, noise: NoiseSource | None = None, privacy: dict[str, Any] | None = None,
         before_release: Any = None) -> TrainContext:
    exp = Experiment.model_validate({"method": "class_gaussian", "dataset": "digits28",
                                     "privacy": privacy or {"epsilon": 10.0, "delta": 1e-5, "steps": 1},
                                     "hparams": {"rank": RANK}})
    preset = ScalePreset(n_synthetic=10, n_synthetic_sets=1, classifier_max_epochs=1, fid_samples=10,
                         train_steps=7, max_batch_size=8)  # neither applies to a method that releases once
    return TrainContext("cg", exp, preset, "smoke", 0, data, tmp, resolve_privacy(exp, preset), progress=False,
                        noise=noise or NoiseSource(), before_release=before_release)


@dataclass(frozen=True)
class RecordingNoise(NoiseSource):
    """The production (secret) NoiseSource, recording every generator it hands out."""

    handed: tuple[list[torch.Generator], ...] = field(default_factory=lambda: ([],))

    def torch_generator(self, device: torch.device | str, stream: int) -> torch.Generator:
        gen = super().torch_generator(device, stream)
        self.handed[0].append(gen)
        return gen


def _spied_run(ctx: TrainContext, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """One real training run, the sanitizer spied on: every record added, every release (with the noise
    generator's state before it), and what was released."""
    seen: dict[str, Any] = {"added": 0, "releases": []}
    add, release = ClassMomentsSanitizer.add, ClassMomentsSanitizer.release

    def spy_add(self: ClassMomentsSanitizer, records: torch.Tensor, labels: torch.Tensor) -> None:
        seen["added"] += len(records)
        add(self, records, labels)

    def spy_release(self: ClassMomentsSanitizer) -> dict[str, torch.Tensor]:
        state = self.generator.get_state()
        out = release(self)
        seen["releases"].append((self, state, {k: v.clone() for k, v in out.items()}))
        return out

    monkeypatch.setattr(ClassMomentsSanitizer, "add", spy_add)
    monkeypatch.setattr(ClassMomentsSanitizer, "release", spy_release)
    seen["summary"] = cb.train(ctx)
    monkeypatch.undo()
    return seen


# --------------------------------------------------------------------------- the mechanism and the sanitizer


def test_the_queries_together_are_one_gaussian_mechanism_of_the_accounted_sigma() -> None:
    """sum_j (Delta_j / s_j)^2 = 1 / sigma^2: the joint multiplier is the sigma the accountant accounts."""
    assert sum(CLASS_MOMENT_WEIGHTS.values()) == pytest.approx(1.0, abs=1e-12)
    for sigma in (0.5, 1.0, 3.7):
        s = class_moment_stds(sigma)
        joint = 1.0 / math.sqrt(sum((CLASS_MOMENT_SENSITIVITY[k] / s[k]) ** 2 for k in s))
        assert joint == pytest.approx(sigma, rel=1e-12)


def test_the_unit_ball_is_enforced_and_the_release_happens_once() -> None:
    """Records of norm 5 enter at norm 1 (the bound is enforced, not assumed): with sigma 0 the sums are the
    clipped rows' sums; a release short of n records, a second release and records after it are refused."""
    x = 5 * torch.nn.functional.normalize(torch.randn(6, 4, generator=torch.Generator().manual_seed(0)), dim=1)
    y = torch.tensor([0, 1, 2, 0, 1, 2])
    san = ClassMomentsSanitizer(0.0, 6, 3, 4, 2, torch.Generator().manual_seed(1))
    san.add(x[:4].double(), y[:4])
    with pytest.raises(PrivacyError, match="records added"):
        san.release()
    san.add(x[4:].double(), y[4:])
    out = san.release()
    want = torch.zeros(3, 4, dtype=torch.float64).index_add_(0, y, x.double() / 5)
    torch.testing.assert_close(out["sums"], want, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(out["counts"], torch.tensor([2.0, 2.0, 2.0], dtype=torch.float64))
    assert san.last is not None and san.last.clipped and san.last.clean_norm == pytest.approx(5.0)
    with pytest.raises(PrivacyError, match="released once"):
        san.release()
    with pytest.raises(PrivacyError, match="already released"):
        san.add(x[:1].double(), y[:1])


# --------------------------------------------------------------------------- a real run, spied on


def test_a_real_run_reads_the_data_once_and_releases_each_query_at_its_std(digits: Dataset, tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """Spies on the sanitizer in a real training run: every record is added once, the release happens once,
    sigma is the accountant's calibration to (10, 1e-5) and the one the report records, and each released query
    minus the same query computed here without noise has the std Delta_j sigma / sqrt(w_j). Tolerances: the
    relative standard error of a sample std of k normal values is 1 / sqrt(2k): second moment 307,720 values
    (0.13 %), sums 7,840 (0.8 %), projected 150 (5.8 %) -> 2 %, 4 %, 20 %; counts 10 values: within 6 std. A
    sigma off by 2 (or noise left off) is 50 % off or more."""
    noise = RecordingNoise()
    ctx = _ctx(tmp_path, digits, noise=noise)
    seen = _spied_run(ctx, monkeypatch)
    assert seen["summary"]["finished"] and seen["summary"]["steps"] == 1
    n = len(digits.x_train)
    assert seen["added"] == n and len(seen["releases"]) == 1  # the data read once, released once
    san, _, out = seen["releases"][0]
    rep = json.loads(ctx.privacy_path.read_text())
    sigma = acc.calibrate_sigma(1.0, 1, 1e-5, 10.0)
    assert rep["sigma"] == pytest.approx(sigma, rel=1e-12) and san.sigma == rep["sigma"]
    s = {k: CLASS_MOMENT_SENSITIVITY[k] * sigma / math.sqrt(CLASS_MOMENT_WEIGHTS[k]) for k in CLASS_MOMENT_WEIGHTS}
    assert rep["extra"]["query_stds"] == pytest.approx(s, rel=1e-12)
    assert any(san.generator is g for g in noise.handed[0])  # the run's secret NoiseSource
    # the same queries without noise, here: z = x / sqrt(D) (images in [0, 1] are in the unit ball already)
    z = torch.from_numpy(digits.x_train.reshape(n, -1)).double() / (255.0 * 28.0)
    y = torch.from_numpy(digits.y_train.astype(np.int64))
    d, c = z.shape[1], int(digits.num_classes)
    iu, ir = torch.triu_indices(d, d), torch.triu_indices(RANK, RANK)
    resid = (out["second_moment"] - z.T @ z)[iu[0], iu[1]]
    assert resid.std().item() == pytest.approx(s["second_moment"], rel=0.02)
    sums = torch.zeros(c, d, dtype=torch.float64).index_add_(0, y, z)
    assert (out["sums"] - sums).std().item() == pytest.approx(s["sums"], rel=0.04)
    v = out["basis"]
    assert torch.allclose(v, torch.linalg.eigh(out["second_moment"])[1].flip(-1)[:, :RANK])  # of the release only
    p = z @ v
    clean = torch.stack([p[y == k].T @ p[y == k] for k in range(c)])
    assert (out["projected"] - clean)[:, ir[0], ir[1]].std().item() == pytest.approx(s["projected"], rel=0.2)
    counts = torch.bincount(y, minlength=c).double()
    assert (out["counts"] - counts).abs().max().item() < 6 * s["counts"]
    # the generator holds the fit of the released statistics and nothing else
    G = torch.load(ctx.generator_path, weights_only=True)["state_dict"]
    m = cb.fit(out)
    for k in ("priors", "means", "basis", "factors"):
        torch.testing.assert_close(G[k], getattr(m, k).float())
    assert set(G) == {"priors", "means", "basis", "factors"}


def test_the_report_is_the_accountants_one_release_and_verify_accepts_it(digits: Dataset, tmp_path: Path) -> None:
    ctx = _ctx(tmp_path, digits)
    cb.train(ctx)
    rep = json.loads(ctx.privacy_path.read_text())
    assert (rep["mechanism"], rep["steps"], rep["q"], rep["headline"]) == ("gaussian_release", 1, 1.0, "rdp_classic")
    want = acc.gaussian_release_epsilon(rep["sigma"], 1e-5)["rdp_classic"]
    assert rep["epsilon"]["rdp_classic"] == pytest.approx(want, abs=1e-12) and 9.9 < want <= 10.0  # calibrated
    assert rep["extra"]["baseline"] == cb.NAME and rep["extra"]["rank"] == RANK
    assert rep["noise"]["mode"] == "secret" and "seed" not in json.dumps(rep["noise"])
    verify_report(rep, "privacy.json")
    with pytest.raises(PrivacyError, match="rdp_classic"):
        verify_report({**rep, "epsilon": {**rep["epsilon"], "rdp_classic": 1.0}}, "privacy.json")
    assert (ctx.out_dir / "train_log.csv").read_text().splitlines()[0].split(",") == ["step", "epsilon"]


def test_its_noise_is_secret(digits: Dataset, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two secret runs of the same seed on the same records draw different noise from different generator
    states; two reproducible runs (the test mode, labelled not private) release the same."""
    a = _spied_run(_ctx(tmp_path / "a", digits), monkeypatch)["releases"][0]
    b = _spied_run(_ctx(tmp_path / "b", digits), monkeypatch)["releases"][0]
    assert not torch.equal(a[1], b[1]) and not torch.allclose(a[2]["sums"], b[2]["sums"])
    replay = NoiseSource("reproducible", 5)
    c = _spied_run(_ctx(tmp_path / "c", digits, noise=replay), monkeypatch)["releases"][0]
    d = _spied_run(_ctx(tmp_path / "d", digits, noise=replay), monkeypatch)["releases"][0]
    assert torch.equal(c[2]["sums"], d[2]["sums"])


def test_the_release_is_drawn_only_after_the_run_reserved_it(digits: Dataset, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """The stage's reservation (``ctx.before_release``) comes before the release's noise: the method draws
    nothing in ``train`` before the loop."""
    order: list[str] = []
    release = ClassMomentsSanitizer.release
    monkeypatch.setattr(ClassMomentsSanitizer, "release", lambda self: order.append("release") or release(self))
    cb.train(_ctx(tmp_path, digits, before_release=lambda state: order.append("reserve")))
    assert order == ["reserve", "release"]


def test_a_failed_release_is_redone_from_the_checkpoint_without_reading_the_data(
        digits: Dataset, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A full disk while writing generator.pt, after the release: the statistics are in the checkpoint, so the
    rerun re-releases them -- no record read, no second release -- and the generator is the one an
    uninterrupted run of the same (replayable) noise makes."""
    import errno

    from dpsynth.methods import loop

    noise = NoiseSource("reproducible", 3)
    cb.train(_ctx(tmp_path / "clean", digits, noise=noise))
    real_save = loop.save_generator

    def disk_full(path: Path, *a: Any) -> None:
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr(loop, "save_generator", disk_full)
    ctx = _ctx(tmp_path / "full", digits, noise=noise)
    with pytest.raises(OSError, match="No space left"):
        cb.train(ctx)
    monkeypatch.setattr(loop, "save_generator", real_save)
    released: list[int] = []
    monkeypatch.setattr(cb, "release_statistics", lambda *a: released.append(1) or (_ for _ in ()).throw(
        AssertionError("the data was read again")))
    again = cb.train(_ctx(tmp_path / "full", digits, noise=noise))
    assert again["finished"] and again["resumed_from"] == 1 and again["steps_this_run"] == 0 and released == []
    a = torch.load(tmp_path / "clean/generator.pt", weights_only=True)["state_dict"]
    b = torch.load(ctx.generator_path, weights_only=True)["state_dict"]
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert set(torch.load(ctx.checkpoint_path, weights_only=False)["statistics"]) >= {"basis", "sums", "counts"}


def test_the_released_generator_samples_as_every_generator(digits: Dataset, tmp_path: Path) -> None:
    """Loaded as a released file (``load_generator``) and sampled by the sample stage's ``generate``: balanced
    labels, uint8 images of the records' shape, each class's mean image near that class's released mean."""
    from dpsynth.evaluate.sampling import generate
    from dpsynth.methods.artifacts import load_generator

    ctx = _ctx(tmp_path, digits)
    cb.train(ctx)
    G, meta = load_generator(ctx.generator_path)
    assert type(G).__name__ == "ClassGaussianGenerator" and meta["output_range"] == "sigmoid"
    x, y = generate(G, meta, 500, seed=0)
    assert x.shape == (500, 1, 28, 28) and x.dtype == np.uint8 and np.bincount(y).tolist() == [50] * 10
    assert len({x[i].tobytes() for i in range(len(x))}) == len(x)  # drawn, not one image per class
    for k in range(10):  # the sampled class means follow the released class means (in [0, 255] units)
        released = (G.means[k] * 28.0 * 255.0).clamp(0, 255).numpy()
        assert np.corrcoef(x[y == k].reshape(-1, 784).mean(0), released)[0, 1] > 0.8


def test_the_sanitizer_the_run_builds_is_an_audited_one(digits: Dataset, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    san = _spied_run(_ctx(tmp_path, digits), monkeypatch)["releases"][0][0]
    assert type(san) in AUDITS and san.releases == 1


# --------------------------------------------------------------------------- configuration and the train stage


def test_the_pipelines_runs_release_once_at_table_1s_target_at_every_scale() -> None:
    for scale in ("smoke", "quick", "paper"):
        params = load_params(REPO / "params.yaml", scale=scale)
        for name in ("cgauss_mnist", "cgauss_fmnist"):
            run = resolve_run(params, name)
            assert run.experiment.method == "class_gaussian" and run.experiment.hparams.rank == 20
            assert (run.privacy.mode, run.privacy.steps, run.privacy.epsilon, run.privacy.delta) == (
                "calibrate_sigma", 1, 10.0, 1e-5)
            assert not run.privacy.scale_budget and run.overrides == {}
        assert {"cgauss_mnist", "cgauss_fmnist"} <= set(params.pipeline_targets())


def _stage_params(tmp_path: Path, digits28_processed: Path, **top: Any) -> list[str]:
    from tests.conftest import clear_pipeline, with_digits28

    p = yaml.safe_load((REPO / "params.yaml").read_text())
    p.update(scale="smoke", datasets=["digits28"], **top)
    clear_pipeline(p)
    p["evaluation"]["real_datasets"] = []
    p["experiments"]["cg"] = {**p["experiments"]["cgauss_mnist"], "dataset": "digits28", "hparams": {"rank": RANK}}
    p["data"]["root"] = str(with_digits28(digits28_processed, tmp_path / "data"))
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(p, sort_keys=False))
    return ["train", "cg", "--params", str(tmp_path / "params.yaml"), "--out", str(tmp_path / "models"),
            "--private-out", str(tmp_path / "private"), "--device", "cpu", "--no-progress"]


def test_the_train_stage_refuses_it_under_a_budget_it_does_not_fit_and_records_it_under_one_it_fits(
        tmp_path: Path, digits28_processed: Path, release_ledger: Path, private_reads: list[str],
        capsys: pytest.CaptureFixture[str]) -> None:
    """The train stage's ledger path, as for every method: a dataset budget of epsilon 5 refuses the run in one
    line before any record is read (nothing released, nothing recorded); under epsilon 25 it is reserved, then
    confirmed at the report's epsilon with its RDP curve."""
    from dpsynth.cli import main
    from dpsynth.privacy.ledger_store import ReleaseLedger

    train = _stage_params(tmp_path, digits28_processed, total_budgets={"digits28": {"epsilon": 5.0}})
    private_reads.clear()
    capsys.readouterr()
    assert main(train) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("dpsynth: error: total_budgets.digits28: train cg refused before "
                                               "any noise is drawn"), err
    assert private_reads == [] and not (tmp_path / "models").exists()
    assert ReleaseLedger(release_ledger).read()[0] == []
    train = _stage_params(tmp_path, digits28_processed, total_budgets={"digits28": {"epsilon": 25.0}})
    assert main(train) == 0
    ledger = ReleaseLedger(release_ledger)
    lines = [json.loads(t) for t in ledger.path.read_text().splitlines()]
    assert [e["status"] for e in lines] == ["pending", "confirmed"]
    got = ledger.read()[0][-1]
    rep = json.loads((tmp_path / "models/cg/privacy.json").read_text())
    assert (got.stage, got.dataset, got.mechanism, got.neighbours) == ("train", "digits28", "gaussian_release",
                                                                       "replace one")
    assert got.epsilon == pytest.approx(rep["epsilon"]["rdp_classic"]) and got.rdp is not None
