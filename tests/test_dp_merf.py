"""DP-MERF: the one release of the mean embedding, its accounting, its configuration and resume.

Each privacy property is checked where it could break: the sanitizer alone (norm bound, noise std,
one release), a REAL training run spied on (every record goes through the sanitizer, the noise std
is 2 sigma / n for the sigma the report records, the release is the clipped mean plus that noise),
the report (what the accountant says of the recorded sigma; ``verify`` accepts it) and resume (a
resumed run reloads the release instead of reading the data again). The Monte-Carlo audit of the
sanitizer is in tests/test_privacy_audit.py; scripts/privacy-mutations.py runs this file.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from dpsynth.config import Experiment, ScalePreset, load_params, resolve_privacy, resolve_run
from dpsynth.data.dataset import Dataset
from dpsynth.errors import ConfigError, PrivacyError
from dpsynth.methods import dp_merf
from dpsynth.methods.context import TrainContext
from dpsynth.privacy import accounting as acc
from dpsynth.privacy.randomness import NoiseSource
from dpsynth.privacy.sanitizers import MeanEmbeddingSanitizer, clip_rows
from dpsynth.privacy.verify import verify_report

pytestmark = pytest.mark.usefixtures("one_torch_thread")

N_RECORDS, FEATURES, REPO = 300, 2000, Path(__file__).resolve().parents[1]


def _data() -> Dataset:
    rng = np.random.default_rng(0)
    x = rng.integers(0, 256, (N_RECORDS, 1, 28, 28), dtype=np.uint8)
    y = rng.integers(0, 10, N_RECORDS).astype(np.int64)
    return Dataset("synthetic", x, y, x[:0], y[:0], 10)


def _ctx(tmp: Path, *, privacy: dict[str, Any] | None = None, noise: NoiseSource | None = None,
         max_steps_this_run: int | None = None, epochs: int = 2) -> TrainContext:
    exp = Experiment.model_validate({
        "method": "dp_merf", "dataset": "synthetic",
        "privacy": privacy or {"epsilon": 10.0, "delta": 1e-5, "steps": 1},
        "hparams": {"bandwidth_sq": 105, "n_features": FEATURES, "batch_size": 50, "epochs": epochs}})
    preset = ScalePreset(n_synthetic=10, n_synthetic_sets=1, classifier_max_epochs=1, fid_samples=10,
                         train_steps=7, max_batch_size=8)  # neither applies to a method that releases once
    return TrainContext("merf", exp, preset, "smoke", 0, _data(), tmp, resolve_privacy(exp, preset), progress=False,
                        max_steps_this_run=max_steps_this_run, noise=noise or NoiseSource(), checkpoint_every=3)


# --------------------------------------------------------------------------- the sanitizer alone


def test_rows_are_clipped_to_norm_one_before_the_mean():
    """Rows of norm 5 enter the mean at norm 1 (the bound is enforced, not assumed); with sigma 0 the
    release is exactly the clipped per-label mean."""
    rng = torch.Generator().manual_seed(0)
    feats = 5 * torch.nn.functional.normalize(torch.randn(6, 4, generator=rng), dim=1)
    labels = torch.tensor([0, 1, 2, 0, 1, 2])
    san = MeanEmbeddingSanitizer(0.0, 6, 3, torch.Generator().manual_seed(1))
    san.add(feats[:4], labels[:4])
    san.add(feats[4:], labels[4:])
    want = torch.zeros(3, 4).index_add_(0, labels, feats / 5) / 6
    torch.testing.assert_close(san.release(), want)
    assert san.last is not None and san.last.clipped and san.last.clean_norm == pytest.approx(5.0)


def test_release_noise_is_2_sigma_over_n_and_happens_once():
    """Noise std 2 sigma / n per coordinate (replace-one sensitivity of a mean of norm-1 rows):
    120,000 noise draws, so the sample std is within 1% of the truth (its standard error is
    0.2%); a release short of n records, a second release and records after it are refused."""
    sigma, n = 0.7, 4
    san = MeanEmbeddingSanitizer(sigma, n, 3, torch.Generator().manual_seed(2))
    rows, labels = torch.zeros(2000, n, 20), torch.tensor([0, 1, 2, 0])
    noise = san.release_batch(rows, labels)
    assert noise.std().item() == pytest.approx(2 * sigma / n, rel=0.01)
    assert noise.mean().abs().item() < 5 * (2 * sigma / n) / math.sqrt(noise.numel())
    with pytest.raises(PrivacyError, match="records added"):
        san.release()
    san.add(torch.ones(4, 20) / math.sqrt(20), labels)
    san.release()
    with pytest.raises(PrivacyError, match="released once"):
        san.release()
    with pytest.raises(PrivacyError, match="already released"):
        san.add(torch.ones(1, 20), labels[:1])


def test_random_features_have_norm_one_and_approximate_the_gaussian_kernel():
    """||phi(x)|| = 1 exactly (up to float32 rounding), and phi(x).phi(x') estimates
    exp(-||x - x'||^2 / (2 l^2)) with std <= 1/sqrt(D/2) = 0.014 at D = 10,000: 0.06 is > 4 std."""
    feats = dp_merf.RandomFourierFeatures(784, 10_000, 105.0, seed=0, device=torch.device("cpu"))
    x = torch.rand(6, 784, generator=torch.Generator().manual_seed(3))
    x[1] = x[0] + 0.2 * torch.randn(784, generator=torch.Generator().manual_seed(4))  # a near pair
    phi = feats(x)
    torch.testing.assert_close(phi.norm(dim=1), torch.ones(6), atol=1e-5, rtol=0)
    kernel = torch.exp(-torch.cdist(x.double(), x.double()) ** 2 / (2 * 105.0))
    assert (phi.double() @ phi.double().T - kernel).abs().max().item() < 0.06
    assert kernel[0, 1] > 0.3  # the test compares a kernel value that is not ~0


# --------------------------------------------------------------------------- a real run, spied on


def test_a_real_run_releases_the_clipped_mean_plus_2_sigma_over_n_noise_once(tmp_path, monkeypatch):
    """Spies on ``MeanEmbeddingSanitizer`` in a real training run: every record is added once, the
    release happens once, its noise std is 2 sigma / n for the sigma the released report records and
    the accountant calibrated, and release - clipped mean of the run's own features is that noise
    (std within 5%: 20,000 coordinates, standard error 0.5%)."""
    seen: dict[str, Any] = {"added": 0, "released": []}
    add, release = MeanEmbeddingSanitizer.add, MeanEmbeddingSanitizer.release

    def spy_add(self: MeanEmbeddingSanitizer, features: torch.Tensor, labels: torch.Tensor) -> None:
        seen["added"] += len(features)
        add(self, features, labels)

    def spy_release(self: MeanEmbeddingSanitizer) -> torch.Tensor:
        out = release(self)
        seen["released"].append((self, out.clone()))
        return out

    monkeypatch.setattr(MeanEmbeddingSanitizer, "add", spy_add)
    monkeypatch.setattr(MeanEmbeddingSanitizer, "release", spy_release)
    ctx = _ctx(tmp_path, epochs=1)
    summary = dp_merf.train(ctx)
    assert summary["finished"] and summary["steps"] == N_RECORDS // 50  # epochs x n // batch, no scale budget
    rep = json.loads(ctx.privacy_path.read_text())
    assert seen["added"] == N_RECORDS and len(seen["released"]) == 1
    san, released = seen["released"][0]
    sigma = rep["sigma"]
    assert sigma == pytest.approx(acc.calibrate_sigma(1.0, 1, 1e-5, 10.0), rel=1e-12)
    assert san.sigma == sigma and san.noise_std == pytest.approx(2 * sigma / N_RECORDS, rel=1e-12)
    h = ctx.experiment.hparams
    feats = dp_merf.RandomFourierFeatures(784, h.n_features, h.bandwidth_sq, ctx.seed, torch.device("cpu"))
    x = torch.from_numpy(ctx.data.x_train).float().div(255.0)
    clipped, _ = clip_rows(feats(x), 1.0)
    mean = torch.zeros(10, h.n_features, dtype=torch.float64).index_add_(
        0, torch.from_numpy(ctx.data.y_train), clipped.double()) / N_RECORDS
    resid = released.double() - mean
    assert resid.std().item() == pytest.approx(2 * sigma / N_RECORDS, rel=0.05)


def test_the_report_is_the_accountants_one_release_and_verify_accepts_it(tmp_path):
    """privacy.json: one step at q = 1 of the recorded sigma, epsilon as the accountant gives it
    (within the target), the analytic Gaussian epsilon beside it (smaller: it is exact), and
    ``verify_report`` -- what every downstream stage runs -- accepts it and refuses an edit."""
    ctx = _ctx(tmp_path, epochs=1)
    dp_merf.train(ctx)
    rep = json.loads(ctx.privacy_path.read_text())
    assert (rep["mechanism"], rep["steps"], rep["q"], rep["headline"]) == ("gaussian_release", 1, 1.0, "rdp_classic")
    want = acc.epsilon(rep["sigma"], 1.0, 1, 1e-5)["rdp_classic"]
    assert rep["epsilon"]["rdp_classic"] == pytest.approx(want, abs=1e-12) and 9.9 < want <= 10.0
    assert rep["epsilon"]["analytic_gaussian"] < rep["epsilon"]["rdp_classic"]
    verify_report(rep, "privacy.json")
    with pytest.raises(PrivacyError, match="rdp_classic"):
        verify_report({**rep, "epsilon": {**rep["epsilon"], "rdp_classic": 1.0}}, "privacy.json")
    log = (ctx.out_dir / "train_log.csv").read_text().splitlines()
    assert log[0].split(",") == ["step", "epsilon", "loss"]  # post-processing only: released


def test_a_given_sigma_must_meet_the_target(tmp_path):
    ctx = _ctx(tmp_path, privacy={"epsilon": 1.0, "delta": 1e-5, "sigma": 0.5})
    with pytest.raises(ConfigError, match="privacy.sigma"):
        dp_merf.train(ctx)


def test_kill_and_resume_is_bit_identical_and_does_not_release_again(tmp_path, monkeypatch):
    """A run stopped after 4 steps (past its checkpoint at 3) and resumed ends with the same generator
    as an uninterrupted run (replayable noise), and the resumed part never releases again: the
    embedding comes from the checkpoint, so the budget is spent once."""
    releases = []
    release = MeanEmbeddingSanitizer.release

    def spy(self: MeanEmbeddingSanitizer) -> torch.Tensor:
        releases.append(1)
        return release(self)

    monkeypatch.setattr(MeanEmbeddingSanitizer, "release", spy)
    noise = NoiseSource("reproducible", 7)
    dp_merf.train(_ctx(tmp_path / "a", noise=noise))
    first = len(releases)
    part = dp_merf.train(_ctx(tmp_path / "b", noise=noise, max_steps_this_run=4))
    assert part["finished"] is False and len(releases) == first + 1
    done = dp_merf.train(_ctx(tmp_path / "b", noise=noise))
    assert done["finished"] and done["resumed_from"] == 4 and len(releases) == first + 1
    a = torch.load(tmp_path / "a" / "generator.pt", weights_only=False)
    b = torch.load(tmp_path / "b" / "generator.pt", weights_only=False)
    sa, sb = a["state_dict"], b["state_dict"]
    assert sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


# --------------------------------------------------------------------------- configuration


def test_a_scale_keeps_the_authors_settings_and_the_one_release():
    """At the quick scale (a 1,200-step budget, batch capped at 64 for the step-wise methods) DP-MERF
    keeps batch 100 and its one release: its steps are post-processing, not a privacy budget."""
    params = load_params(REPO / "params.yaml", scale="quick")
    run = resolve_run(params, "merf_mnist")
    assert run.experiment.hparams.batch_size == 100 and run.experiment.hparams.n_features == 10_000
    assert run.privacy.mode == "calibrate_sigma" and run.privacy.steps == 1
    assert not run.privacy.scale_budget and run.overrides == {}


def test_configuration_refuses_more_releases_and_a_missing_bandwidth():
    base = {"method": "dp_merf", "dataset": "mnist", "hparams": {"bandwidth_sq": 105}}
    with pytest.raises(ValueError, match="privacy.steps must be 1"):
        Experiment.model_validate({**base, "privacy": {"epsilon": 10, "delta": 1e-5, "steps": 2}})
    with pytest.raises(ValueError, match="bandwidth"):
        Experiment.model_validate({**base, "hparams": {}, "privacy": {"epsilon": 10, "delta": 1e-5, "steps": 1}})


# --------------------------------------------------------------------------- what the run trains against


@dataclass(frozen=True)
class RecordingNoise(NoiseSource):
    """The production (secret) NoiseSource, recording every generator it hands out."""

    handed: tuple[list[torch.Generator], ...] = field(default_factory=lambda: ([],))

    def torch_generator(self, device: torch.device | str, stream: int) -> torch.Generator:
        gen = super().torch_generator(device, stream)
        self.handed[0].append(gen)
        return gen


def _first_release(tmp: Path, monkeypatch: pytest.MonkeyPatch, ctx: TrainContext) -> dict[str, Any]:
    """One step of a real run (the release happens there), spied on: the sanitizer (with its noise
    generator's state before the release), what it released, and the stepper that trains on it."""
    seen: dict[str, Any] = {}
    release, step = MeanEmbeddingSanitizer.release, dp_merf.DPMERFStepper.step

    def spy_release(self: MeanEmbeddingSanitizer) -> torch.Tensor:
        seen["noise_state"] = self.generator.get_state()
        out = release(self)
        seen["sanitizer"], seen["released"] = self, out.clone()
        return out

    def spy_step(self: dp_merf.DPMERFStepper) -> dict[str, Any]:
        seen["stepper"] = self
        return step(self)

    monkeypatch.setattr(MeanEmbeddingSanitizer, "release", spy_release)
    monkeypatch.setattr(dp_merf.DPMERFStepper, "step", spy_step)
    dp_merf.train(ctx)
    monkeypatch.undo()
    return seen


def test_the_release_noise_comes_from_the_runs_secret_source(tmp_path, monkeypatch):
    """The release's noise generator is one the run's NoiseSource handed out (OS entropy), not a
    generator seeded with a constant or with the public run seed: two secret runs of the same seed
    on the same data release different noise, while two reproducible runs (the test mode, labelled
    not private) release the same."""
    noise = RecordingNoise()
    a = _first_release(tmp_path, monkeypatch, _ctx(tmp_path / "a", noise=noise, max_steps_this_run=1))
    assert any(a["sanitizer"].generator is g for g in noise.handed[0])
    assert a["stepper"].gens["noise"] is a["sanitizer"].generator
    b = _first_release(tmp_path, monkeypatch, _ctx(tmp_path / "b", noise=RecordingNoise(), max_steps_this_run=1))
    assert not torch.equal(a["noise_state"], b["noise_state"])
    assert not torch.equal(a["released"], b["released"])
    replay = NoiseSource("reproducible", 5)
    c = _first_release(tmp_path, monkeypatch, _ctx(tmp_path / "c", noise=replay, max_steps_this_run=1))
    d = _first_release(tmp_path, monkeypatch, _ctx(tmp_path / "d", noise=replay, max_steps_this_run=1))
    assert torch.equal(c["released"], d["released"])


def test_the_generator_trains_against_the_sanitizers_release_unchanged(tmp_path, monkeypatch):
    """What the generator is fitted to is exactly what the sanitizer released: no data-dependent,
    un-noised post-processing (e.g. a rescale by the true per-class counts n / n_c) between them.
    The labels are made unbalanced so such a rescale is far from 1."""
    ctx = _ctx(tmp_path, max_steps_this_run=1)
    y = ctx.data.y_train.copy()
    y[: N_RECORDS // 2] = 0  # class 0 holds over half the records
    ctx.data = Dataset("synthetic", ctx.data.x_train, y, ctx.data.x_test, ctx.data.y_test, 10)
    seen = _first_release(tmp_path, monkeypatch, ctx)
    assert torch.equal(seen["stepper"].embedding, seen["released"])


def test_the_feature_map_is_the_public_one_whatever_the_private_images(tmp_path, monkeypatch):
    """The random features a run embeds the private records with depend on the public bandwidth and
    the seed only: the same as ``RandomFourierFeatures`` built from params, for two different private
    datasets (a bandwidth derived from the images, e.g. a median heuristic, would differ)."""
    h, ws = _ctx(tmp_path).experiment.hparams, []
    for k, scale in enumerate((1.0, 0.25)):
        ctx = _ctx(tmp_path / str(k), max_steps_this_run=1)
        x = (ctx.data.x_train.astype(np.float64) * scale).astype(np.uint8)  # darker images, same shape
        ctx.data = Dataset("synthetic", x, ctx.data.y_train, ctx.data.x_test, ctx.data.y_test, 10)
        ws.append(_first_release(tmp_path, monkeypatch, ctx)["stepper"].features.w)
    public = dp_merf.RandomFourierFeatures(784, h.n_features, h.bandwidth_sq, 0, torch.device("cpu"))
    assert torch.equal(ws[0], public.w) and torch.equal(ws[1], public.w)
