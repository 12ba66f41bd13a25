"""DP-CGAN (DP-SGD GAN) on the one training path: the privacy wiring of a real step, exact resume, and
the released epsilon against the accountant and the budget guard.

Tiny data (200 random 28x28 records), an expected batch of 20 (q = 0.1) and width-16 MLPs keep each
test to a few seconds."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch.nn import functional as F

from dpsynth.config import Experiment, ScalePreset, resolve_privacy
from dpsynth.data.dataset import Dataset
from dpsynth.errors import PrivacyError
from dpsynth.methods import dp_cgan
from dpsynth.methods.context import TrainContext
from dpsynth.privacy import accounting as acc
from dpsynth.privacy.audit import AUDITS
from dpsynth.privacy.randomness import NoiseSource
from dpsynth.privacy.sanitizers import PerExampleGradSanitizer

pytestmark = pytest.mark.usefixtures("one_torch_thread")

N_RECORDS, BATCH = 200, 20


def _data() -> Dataset:
    rng = np.random.default_rng(0)
    x = rng.integers(0, 256, (N_RECORDS, 1, 28, 28), dtype=np.uint8)
    y = rng.integers(0, 10, N_RECORDS).astype(np.int64)
    return Dataset("synthetic", x, y, x[:0], y[:0], 10)


def _ctx(out: Path, *, privacy: dict[str, Any], steps: int | None = None, noise: NoiseSource | None = None,
         max_steps_this_run: int | None = None, **hparams: Any) -> TrainContext:
    if steps is not None and privacy.get("enabled", True) and "sigma" not in privacy:
        privacy = {**privacy, "steps": steps}  # sigma calibrated to this step budget
    exp = Experiment.model_validate({"method": "dp_cgan", "dataset": "synthetic", "privacy": privacy,
                                     "hparams": {"batch_size": BATCH, "hidden": 16, "latent_dim": 8, **hparams}})
    preset = ScalePreset(n_synthetic=10, n_synthetic_sets=1, classifier_max_epochs=1, fid_samples=10,
                         train_steps=None if privacy.get("enabled", True) else steps)
    return TrainContext("c", exp, preset, "smoke", 0, _data(), out, resolve_privacy(exp, preset), progress=False,
                        checkpoint_every=3, max_steps_this_run=max_steps_this_run,
                        noise=noise or NoiseSource("reproducible", 0))


@dataclass(frozen=True)
class RecordingNoise(NoiseSource):
    """The production (secret) NoiseSource, recording every generator it hands out."""

    handed: tuple[list[torch.Generator], ...] = ([],)

    def torch_generator(self, device: torch.device | str, stream: int) -> torch.Generator:
        gen = super().torch_generator(device, stream)
        self.handed[0].append(gen)
        return gen


def _one_record_grad(D: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Independent reference: plain autograd of ONE real record's discriminator loss term."""
    D.zero_grad(set_to_none=True)
    logit = D(x[None], y[None])
    F.binary_cross_entropy_with_logits(logit, torch.ones_like(logit)).backward()
    out = torch.cat([p.grad.reshape(-1) for p in D.parameters()])
    D.zero_grad(set_to_none=True)
    return out


def test_wiring_of_a_real_step(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Spy on a real (secret-noise) run: the Poisson sample comes from a secret generator at q = B / N;
    the sanitizer gets exactly the real records' per-example loss gradients; its release is
    (sum of those rows clipped to C + N(0, (C sigma)^2)) / B with sigma from privacy.json."""
    clip, steps = 0.01, 3  # every per-example gradient is far above C: a skipped clip cannot hide
    noise = RecordingNoise()
    ctx = _ctx(tmp_path, privacy={"epsilon": 10, "delta": 1e-5}, steps=steps, noise=noise, clip=clip)
    seen: dict[str, Any] = {"samples": [], "releases": []}
    real_sample = dp_cgan.DPCGANStepper.poisson_sample
    real_release = PerExampleGradSanitizer.release

    def poisson_sample(self: dp_cgan.DPCGANStepper) -> tuple[torch.Tensor, torch.Tensor]:
        seen["stepper"] = self
        state = self.gens["sample"].get_state()
        xr, yr = real_sample(self)
        seen["samples"].append((state, xr, yr))
        return xr, yr

    def release(self: PerExampleGradSanitizer, rows: torch.Tensor) -> torch.Tensor:
        stepper = seen["stepper"]
        _, xr, yr = seen["samples"][-1]
        expected_rows = torch.stack([_one_record_grad(stepper.D, xr[i], yr[i]) for i in range(len(xr))])
        state = self.generator.get_state()
        out = real_release(self, rows)
        seen["releases"].append((self, rows.clone(), expected_rows, state, out.clone()))
        return out

    monkeypatch.setattr(dp_cgan.DPCGANStepper, "poisson_sample", poisson_sample)
    monkeypatch.setattr(PerExampleGradSanitizer, "release", release)
    result = dp_cgan.train(ctx)
    assert result["finished"] and result["steps"] == steps
    report = json.loads(ctx.privacy_path.read_text())
    sigma, q = report["sigma"], report["q"]
    assert report["noise"]["mode"] == "secret" and report["sampling"] == "poisson" and report["clip"] == clip
    assert q == pytest.approx(BATCH / N_RECORDS)

    stepper, handed = seen["stepper"], noise.handed[0]
    assert any(stepper.gens["sample"] is g for g in handed) and any(stepper.gens["noise"] is g for g in handed)
    assert stepper.gens["sample"] is not stepper.gens["noise"]
    assert not any(stepper.gens["latent"] is g for g in handed)  # latents/labels: seeded, never the data
    assert type(stepper.sanitizer) in AUDITS and stepper.sanitizer.releases == steps

    # the Poisson sample: replaying the secret generator's state gives exactly the records used, at rate q
    x_all = torch.from_numpy(ctx.data.x_train).float().div(255.0)
    for state, xr, yr in seen["samples"]:
        g = torch.Generator().set_state(state)
        mask = torch.rand(N_RECORDS, generator=g) < q
        assert torch.equal(xr, x_all[mask]) and torch.equal(yr, torch.from_numpy(ctx.data.y_train)[mask])

    assert len(seen["releases"]) == steps
    residuals = []
    for san, rows, expected_rows, state, out in seen["releases"]:
        assert san.generator is stepper.gens["noise"] and san.clip == clip and san.sigma == sigma
        # exactly the real records' own loss gradients, one row per sampled record
        assert rows.shape == expected_rows.shape
        torch.testing.assert_close(rows, expected_rows, rtol=1e-4, atol=1e-6)
        norms = torch.linalg.vector_norm(expected_rows.double(), dim=1)
        assert bool((norms > 10 * clip).all())
        clipped_sum = (expected_rows.double() * (clip / norms).clamp(max=1.0)[:, None]).sum(0)
        residual = out.double() * BATCH - clipped_sum  # must be the noise on the sum, nothing else
        g = torch.Generator().set_state(state)
        drawn = torch.randn(out.shape, generator=g, dtype=torch.float64) * clip * sigma
        torch.testing.assert_close(residual, drawn, rtol=1e-3, atol=1e-4 * clip * sigma)
        residuals.append(residual)
    std = float(torch.cat(residuals).std())
    assert std == pytest.approx(clip * sigma, rel=0.03)  # ~38k coordinates: SE of the std ~0.4%


def test_kill_and_resume_is_bit_identical(tmp_path: Path) -> None:
    privacy = {"epsilon": 10, "delta": 1e-5}
    full = dp_cgan.train(_ctx(tmp_path / "full", privacy=privacy, steps=6))
    assert full["finished"] and full["steps"] == 6
    part = dp_cgan.train(_ctx(tmp_path / "resume", privacy=privacy, steps=6, max_steps_this_run=4))
    assert (part["steps"], part["finished"]) == (4, False)  # "killed" after 4 (checkpoint at 3, then 4)
    resumed = dp_cgan.train(_ctx(tmp_path / "resume", privacy=privacy, steps=6))
    assert resumed["finished"] and resumed["steps"] == 6 and resumed["resumed_from"] == 4
    a = torch.load(tmp_path / "full/generator.pt", weights_only=True)["state_dict"]
    b = torch.load(tmp_path / "resume/generator.pt", weights_only=True)["state_dict"]
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    ca = torch.load(tmp_path / "full/private/checkpoint.pt", weights_only=False)
    cb = torch.load(tmp_path / "resume/private/checkpoint.pt", weights_only=False)
    assert all(torch.equal(ca["discriminator"][k], cb["discriminator"][k]) for k in ca["discriminator"])
    assert all(torch.equal(ca["rng"]["generators"][k], cb["rng"]["generators"][k]) for k in ca["rng"]["generators"])
    pa, pb = (json.loads((tmp_path / d / "privacy.json").read_text()) for d in ("full", "resume"))
    assert pa["epsilon"] == pb["epsilon"] and pa["sigma"] == pb["sigma"]

    def log_rows(d: str) -> list[list[str]]:  # all but the wall-clock column (steps_per_s)
        return [r.split(",")[:-1] for r in (tmp_path / d / "train_log.csv").read_text().splitlines()]

    assert log_rows("resume") == log_rows("full")


def test_released_epsilon_is_the_accountants_and_the_guard_refuses_past_the_target(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # derive_steps: sigma 1.0 at q = 0.1 affords exactly 2 steps at (3, 1e-5)
    privacy = {"epsilon": 3, "delta": 1e-5, "sigma": 1.0}
    budget = acc.max_steps(1.0, BATCH / N_RECORDS, 1e-5, 3.0, conversion="classic", sampling="poisson")
    assert budget == 2
    ctx = _ctx(tmp_path / "ok", privacy=privacy)
    result = dp_cgan.train(ctx)
    assert result["finished"] and result["steps"] == budget
    rep = json.loads(ctx.privacy_path.read_text())
    want = acc.epsilon(1.0, BATCH / N_RECORDS, budget, 1e-5, sampling="poisson")
    assert rep["headline"] == "rdp_classic" and rep["epsilon"]["rdp_classic"] == want["rdp_classic"]
    assert (rep["sigma"], rep["steps"], rep["batch_size"], rep["dataset_size"]) == (1.0, budget, BATCH, N_RECORDS)
    assert rep["epsilon"]["rdp_classic"] <= 3.0 and result["epsilon"] == rep["epsilon"]
    assert torch.load(ctx.checkpoint_path, weights_only=False)["guard"]["steps_spent"] == budget

    real = dp_cgan.privacy_schedule

    def one_step_too_many(c: TrainContext) -> Any:
        sigma, steps, guard = real(c)
        return sigma, steps + 1, guard  # a plan past the target: the guard must stop it

    monkeypatch.setattr(dp_cgan, "privacy_schedule", one_step_too_many)
    over = _ctx(tmp_path / "over", privacy=privacy)
    with pytest.raises(PrivacyError, match="privacy budget exhausted: step 3 would exceed epsilon 3"):
        dp_cgan.train(over)
    assert not over.generator_path.exists() and not over.privacy_path.exists()


def test_sampled_images_are_conditional_28x28_in_unit_range(tmp_path: Path) -> None:
    from dpsynth.methods.artifacts import load_generator

    ctx = _ctx(tmp_path, privacy={"enabled": False}, steps=2)
    assert dp_cgan.train(ctx)["finished"]
    G, meta = load_generator(ctx.generator_path)
    assert meta["output_range"] == "sigmoid" and meta["num_classes"] == 10
    with torch.no_grad():
        x, y = G.sample(5, torch.Generator().manual_seed(0))
    assert x.shape == (5, 1, 28, 28) and y is not None and 0 <= float(x.min()) and float(x.max()) <= 1


def test_the_discriminator_steps_on_the_sanitized_gradient(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """D's update is exactly -lr x (the sanitizer's release for the real records + the clipped mean of
    the fake rows), the two outputs the sanitizer handed back this step: the sanitizer running while D
    steps on the clean real gradient would pass every other test. With C tiny every real row is
    clipped, so the clean gradient is far from the sanitized one."""
    ctx = _ctx(tmp_path, privacy={"epsilon": 10, "delta": 1e-5}, steps=2, clip=0.01)
    seen: dict[str, Any] = {"steps": []}
    release, clip_mean, step = (PerExampleGradSanitizer.release, PerExampleGradSanitizer.clip_mean,
                                dp_cgan.DPCGANStepper.step)

    def spy_release(self: PerExampleGradSanitizer, rows: torch.Tensor) -> torch.Tensor:
        seen["released"] = release(self, rows)
        return seen["released"]

    def spy_clip_mean(self: PerExampleGradSanitizer, rows: torch.Tensor) -> torch.Tensor:
        seen["fake"] = clip_mean(self, rows)
        return seen["fake"]

    def spy_step(self: dp_cgan.DPCGANStepper) -> dict[str, Any]:
        before = torch.cat([p.detach().reshape(-1) for p in self.D.parameters()]).clone()
        lr = self.d_lr_at(self.steps_done)
        out = step(self)
        after = torch.cat([p.detach().reshape(-1) for p in self.D.parameters()])
        seen["steps"].append((before, after, lr, seen.pop("released"), seen.pop("fake")))
        return out

    monkeypatch.setattr(PerExampleGradSanitizer, "release", spy_release)
    monkeypatch.setattr(PerExampleGradSanitizer, "clip_mean", spy_clip_mean)
    monkeypatch.setattr(dp_cgan.DPCGANStepper, "step", spy_step)
    assert dp_cgan.train(ctx)["finished"]
    assert len(seen["steps"]) == 2
    for before, after, lr, released, fake in seen["steps"]:
        torch.testing.assert_close(after, before - lr * (released + fake), rtol=0, atol=1e-6)


def test_a_failed_release_is_redone_without_spending_a_step(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A full disk while writing generator.pt, after the last step: the trained state is already in the
    checkpoint, so the rerun re-releases it -- no step trained, the guard's count unchanged -- and the
    release is the one an uninterrupted run makes."""
    import errno

    from dpsynth.methods import loop

    privacy, noise = {"epsilon": 10, "delta": 1e-5}, NoiseSource("reproducible", 3)
    clean = dp_cgan.train(_ctx(tmp_path / "clean", privacy=privacy, steps=4, noise=noise))
    real_save = loop.save_generator

    def disk_full(path: Path, *a: Any) -> None:
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr(loop, "save_generator", disk_full)
    ctx = _ctx(tmp_path / "full", privacy=privacy, steps=4, noise=noise)
    with pytest.raises(OSError, match="No space left"):
        dp_cgan.train(ctx)
    assert not ctx.generator_path.exists() and not ctx.privacy_path.exists()
    monkeypatch.setattr(loop, "save_generator", real_save)
    steps_run: list[int] = []
    step = dp_cgan.DPCGANStepper.step
    monkeypatch.setattr(dp_cgan.DPCGANStepper, "step", lambda self: steps_run.append(1) or step(self))
    again = dp_cgan.train(_ctx(tmp_path / "full", privacy=privacy, steps=4, noise=noise))
    assert again["finished"] and again["resumed_from"] == 4 and again["steps_this_run"] == 0 and steps_run == []
    assert torch.load(ctx.checkpoint_path, weights_only=False)["guard"]["steps_spent"] == 4
    assert again["epsilon"] == clean["epsilon"]
    a = torch.load(tmp_path / "clean/generator.pt", weights_only=True)["state_dict"]
    b = torch.load(ctx.generator_path, weights_only=True)["state_dict"]
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_a_non_private_run_does_not_claim_private_noise(tmp_path: Path) -> None:
    """Issue 45, fault 12: a non-private run drew no privacy noise, so its report says private false
    (with the reason) even with the secret noise source -- never ``noise.private: true``."""
    from dpsynth.evaluate.sampling import privacy_caption
    from dpsynth.privacy.randomness import NO_NOISE_LABEL

    ctx = _ctx(tmp_path, privacy={"enabled": False}, steps=2, noise=NoiseSource())
    assert dp_cgan.train(ctx)["finished"]
    rep = json.loads(ctx.privacy_path.read_text())
    assert rep["headline"] == "non_private"
    assert rep["noise"]["private"] is False and rep["noise"]["label"] == NO_NOISE_LABEL and rep["noise"]["mode"] == "secret"
    assert "reproducible" not in privacy_caption(rep)
