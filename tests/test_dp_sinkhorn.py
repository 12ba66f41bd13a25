"""DP-Sinkhorn trainer: learning, conditioning, privacy plan, exact resume, input validation."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from dpsynth.config import Experiment, ScalePreset, resolve_privacy
from dpsynth.data.dataset import Dataset
from dpsynth.data.prepare import Sources, prepare
from dpsynth.data import load_processed
from dpsynth.errors import DataError, PrivacyError
from dpsynth.methods.dp_sinkhorn import step as fast_step
from dpsynth.methods.dp_sinkhorn.step import FastStep
from dpsynth.privacy.sanitizers import WholeBatchSanitizer
from dpsynth.methods import dp_sinkhorn
from dpsynth.nets import build_generator
from dpsynth.privacy.randomness import NoiseSource
from dpsynth.methods.artifacts import load_generator
from dpsynth.methods.context import TrainContext
from dpsynth.ot import embed_with_labels, sinkhorn_divergence

PRESET = ScalePreset(n_synthetic=10, n_synthetic_sets=1, classifier_max_epochs=1, fid_samples=10)

# One torch and one BLAS thread (conftest): on the shared 2-core CPU a second thread only adds
# contention (the classifier below took 17 s of CPU with two BLAS threads, 1.2 s with one). Every
# bit-for-bit comparison here is between runs made under the same setting.
pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def digits28(digits28_processed) -> Dataset:
    return load_processed(digits28_processed / "digits28.npz")


@pytest.fixture(scope="module")
def half_circle(tmp_path_factory) -> Dataset:
    root = tmp_path_factory.mktemp("data2")
    prepare("manifold2d_half_circle", Sources(root=root))
    return load_processed(root / "processed/manifold2d_half_circle.npz")


def make_ctx(out: Path, data: Dataset, *, privacy: dict, steps: int | None = None, **hparams) -> TrainContext:
    exp = Experiment.model_validate({"method": "dp_sinkhorn", "dataset": data.name, "privacy": privacy,
                                     "hparams": hparams})
    preset = PRESET.model_copy(update={"train_steps": steps})
    train = Dataset(data.name, data.x_train, data.y_train, data.x_test[:0], data.y_test[:0], data.num_classes)
    # reproducible noise: these tests compare runs bit for bit (secret mode is tested separately)
    return TrainContext("t", exp, preset, "smoke", 0, train, out, resolve_privacy(exp, preset), progress=False,
                        checkpoint_every=4, noise=NoiseSource("reproducible", 0))


def _eval_samples(G, n_per_class: int, num_classes: int, seed: int = 5) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    lab = torch.arange(num_classes).repeat(n_per_class)
    with torch.no_grad():
        return G(G.sample_latent(len(lab), g), lab), lab


@pytest.mark.slow
def test_training_moves_digits_towards_data_and_conditions(digits28, tmp_path):
    """Non-private, 100 steps: the Sinkhorn divergence to held-out real digits must drop at least 3x
    (measured at 100 steps, one thread: untrained 441 vs trained 94, 4.7x; ~60-100 after 150 steps), and
    a classifier trained on real digits must label the conditional samples >= 60% right (chance is
    10%; measured 96% after 100 steps, 90-100% after 150-300 steps)."""
    from sklearn.linear_model import LogisticRegression
    from threadpoolctl import threadpool_limits

    ctx = make_ctx(tmp_path / "m", digits28, privacy={"enabled": False}, steps=100, batch_size=20, lr=2e-3,
                   sanitizer="none")
    test = torch.from_numpy(digits28.x_test).float() / 127.5 - 1
    y_test = torch.from_numpy(digits28.y_test)

    def divergence(G) -> float:
        imgs, lab = _eval_samples(G, 30, 10)
        return float(sinkhorn_divergence(embed_with_labels(imgs, lab, 10), embed_with_labels(test, y_test, 10),
                                         eps=5.0, n_iter=200))

    torch.manual_seed(ctx.seed)
    arch = dp_sinkhorn.generator_arch(ctx)
    G0 = build_generator(arch["name"], **arch["kwargs"]).eval()  # the same init train() uses
    before = divergence(G0)
    summary = dp_sinkhorn.train(ctx)
    assert summary["finished"] and summary["steps"] == 100
    G, meta = load_generator(ctx.generator_path)
    after = divergence(G)
    assert after < before / 3, f"Sinkhorn divergence {before:.1f} -> {after:.1f}"
    with threadpool_limits(1):  # lbfgs on two BLAS threads: 17 s of CPU on the shared 2-core machine, 1.2 s on one
        clf = LogisticRegression(max_iter=3000).fit(digits28.x_train.reshape(len(digits28.x_train), -1) / 255.0,
                                                     digits28.y_train)
    imgs, lab = _eval_samples(G, 30, 10)
    acc = (clf.predict(((imgs + 1) / 2).reshape(len(lab), -1).numpy()) == lab.numpy()).mean()
    print(f"divergence {before:.1f} -> {after:.1f}, accuracy {acc:.3f}")
    assert acc >= 0.6, f"conditional accuracy {acc:.2f}"
    assert meta["output_range"] == "tanh" and meta["num_classes"] == 10


@pytest.mark.slow
def test_training_moves_half_circle_towards_data(half_circle, tmp_path):
    """2-D manifold, MLP generator, 150 steps: divergence to held-out points drops >= 5x (measured 40x
    at 150 steps; ~20-50x at 300)."""
    sub = Dataset(half_circle.name, half_circle.x_train[:4000], half_circle.y_train[:4000],
                  half_circle.x_test, half_circle.y_test, 1)
    ctx = make_ctx(tmp_path / "m", sub, privacy={"enabled": False}, steps=150, batch_size=100, lr=1e-3,
                   sanitizer="none", generator="mlp", p=0.2, temperature=0.01)
    test = torch.from_numpy(half_circle.x_test[:500])
    torch.manual_seed(ctx.seed)
    arch = dp_sinkhorn.generator_arch(ctx)
    G0 = build_generator(arch["name"], **arch["kwargs"]).eval()
    g = torch.Generator().manual_seed(3)
    with torch.no_grad():
        before = float(sinkhorn_divergence(G0(G0.sample_latent(500, g)), test, eps=0.01, n_iter=300))
    dp_sinkhorn.train(ctx)
    G, meta = load_generator(ctx.generator_path)
    with torch.no_grad():
        after = float(sinkhorn_divergence(G(G.sample_latent(500, g)), test, eps=0.01, n_iter=300))
    print(f"divergence {before:.4f} -> {after:.4f} ({before / after:.1f}x)")
    assert after < before / 5, f"{before:.4f} -> {after:.4f}"
    assert meta["output_range"] == "identity"


def test_private_run_meets_target_and_reports_both_conversions(digits28, tmp_path):
    ctx = make_ctx(tmp_path / "m", digits28, privacy={"epsilon": 10, "delta": 1e-5, "sigma": 1.1},
                   steps=6, batch_size=10, lr=1e-3)
    assert ctx.privacy_plan.mode == "calibrate_sigma"
    summary = dp_sinkhorn.train(ctx)
    rep = json.loads(ctx.privacy_path.read_text())
    assert rep["steps"] == 6 and rep["q"] == pytest.approx(10 / len(digits28.x_train))
    assert 9.9 <= rep["epsilon"]["rdp_classic"] <= 10.0  # calibrated to the target, never above it
    assert rep["epsilon"]["rdp_modern"] <= rep["epsilon"]["rdp_classic"]
    assert rep["sigma"] == summary["sigma"] and rep["clip"] == 0.5
    assert "image-gradient" in rep["mechanism"]


def _run_killed_at(ctx: TrainContext, kill_step: int, monkeypatch) -> None:
    """Simulate a kill: abort abruptly (no final checkpoint) when step ``kill_step`` starts."""
    # Every variant runs FastStep.__call__ (the adversarial one is its subclass).
    real_fast, calls = FastStep.__call__, {"n": 0}

    def dying(real):
        def step(*a, **k):
            calls["n"] += 1
            if calls["n"] == kill_step:
                raise KeyboardInterrupt("killed")
            return real(*a, **k)
        return step

    monkeypatch.setattr(FastStep, "__call__", dying(real_fast))
    with pytest.raises(KeyboardInterrupt):
        dp_sinkhorn.train(ctx)
    monkeypatch.setattr(FastStep, "__call__", real_fast)


@pytest.mark.parametrize("sanitizer, adversarial", [("image", False), ("param", False), ("image", True)])
def test_kill_and_resume_is_bit_identical(digits28, tmp_path, monkeypatch, sanitizer, adversarial):
    kw = dict(privacy={"epsilon": 10, "delta": 1e-5, "sigma": 1.1}, steps=8, batch_size=10, lr=1e-3,
              sanitizer=sanitizer, adversarial=adversarial, partitions=20 if adversarial else None,
              **({"p": 0.0} if adversarial else {}))  # (a private adversarial run refuses p > 0: test_config)
    a = make_ctx(tmp_path / "a", digits28, **kw)
    dp_sinkhorn.train(a)
    b = make_ctx(tmp_path / "b", digits28, **kw)
    _run_killed_at(b, 7, monkeypatch)  # checkpoint_every=4: resumes from step 4, replays 5-8
    assert not b.generator_path.exists()
    summary = dp_sinkhorn.train(b)
    assert summary["finished"]
    sa = torch.load(a.generator_path, weights_only=True)["state_dict"]
    sb = torch.load(b.generator_path, weights_only=True)["state_dict"]
    assert sa.keys() == sb.keys()
    for k in sa:
        assert torch.equal(sa[k], sb[k]), f"{k} differs after resume"
    assert a.generator_path.read_bytes() == b.generator_path.read_bytes()  # reproducible bytes, not just weights
    def rows(path):  # the log of a resumed run equals the uninterrupted one's, timings aside
        import csv

        with open(path, newline="") as fh:
            return [{k: v for k, v in r.items() if k != "steps_per_s"} for r in csv.DictReader(fh)]

    assert rows(a.log_path) == rows(b.log_path) and len(rows(a.log_path)) > 0
    ra, rb = json.loads(a.privacy_path.read_text()), json.loads(b.privacy_path.read_text())
    assert ra["epsilon"] == rb["epsilon"] and ra["steps"] == rb["steps"] == 8
    if adversarial:  # the feature extractors and their optimizers resume exactly too
        ca = torch.load(a.checkpoint_path, weights_only=False)["adversary"]
        cb = torch.load(b.checkpoint_path, weights_only=False)["adversary"]
        assert ca["opts"].keys() == cb["opts"].keys()
        for pa, pb in zip(ca["phis"], cb["phis"]):
            assert all(torch.equal(pa[k], pb[k]) for k in pa)
    # a finished run is not retrained
    again = dp_sinkhorn.train(b)
    assert again.get("already_done")


def test_changed_configuration_never_resumes_a_stale_checkpoint(digits28, tmp_path, capsys):
    """A finished run's checkpoint must not be reused after a hyperparameter change (it would
    release the old weights under the new configuration): the run starts over."""
    kw = dict(privacy={"epsilon": 10, "delta": 1e-5, "sigma": 1.1}, steps=4, batch_size=10)
    a = make_ctx(tmp_path / "m", digits28, lr=1e-3, **kw)
    dp_sinkhorn.train(a)
    first = torch.load(a.generator_path, weights_only=True)["state_dict"]
    b = make_ctx(tmp_path / "m", digits28, lr=2e-3, m=1.0, **kw)
    summary = dp_sinkhorn.train(b)
    assert summary["finished"] and not summary.get("already_done") and summary["steps"] == 4
    assert "different configuration" in capsys.readouterr().err
    second = torch.load(b.generator_path, weights_only=True)["state_dict"]
    assert any(not torch.equal(first[k], second[k]) for k in first)
    assert json.loads(b.privacy_path.read_text())["extra"]["m"] == 1.0


def test_adversarial_variant_accounts_fixed_size_sampling(digits28, tmp_path):
    """k fixed partitions, one per step: sampling without replacement at rate 1/k (replace-one),
    which costs more than Poisson sampling at the same rate; the report says so."""
    from dpsynth.privacy import accounting as acc

    ctx = make_ctx(tmp_path / "m", digits28, privacy={"epsilon": 10, "delta": 1e-5, "sigma": 1.1},
                   steps=5, batch_size=10, lr=1e-3, adversarial=True, partitions=50, p=0.0)
    summary = dp_sinkhorn.train(ctx)
    rep = json.loads(ctx.privacy_path.read_text())
    assert rep["sampling"] == "without_replacement" and rep["q"] == pytest.approx(1 / 50)
    assert 9.9 <= rep["epsilon"]["rdp_classic"] <= 10.0
    poisson = acc.epsilon(summary["sigma"], 1 / 50, 5, 1e-5)["rdp_classic"]
    assert rep["epsilon"]["rdp_classic"] > poisson
    assert rep["extra"]["partitions"] == 50 and "adversarial" in rep["mechanism"]
    with pytest.raises(DataError, match="at least 2 partitions"):
        dp_sinkhorn.make_partitions(15, 10, None, 0)


def test_empty_poisson_batches_still_count(digits28, tmp_path, monkeypatch):
    """batch_size 1 over ~1,400 records: P(empty batch) = (1 - 1/N)^N ~ e^-1 = 0.37, so ~11 of 30
    steps are empty (binomial sd 2.6; the seed is fixed, >= 5 is far below the mean). Every step,
    empty or not, must be taken, noised and charged to the accountant."""
    ctx = make_ctx(tmp_path / "m", digits28, privacy={"epsilon": 10, "delta": 1e-5, "sigma": 1.1},
                   steps=30, batch_size=1, lr=1e-3)
    ks: list[int] = []
    releases = {"n": 0}
    real_batch, real_release = fast_step.poisson_batch, WholeBatchSanitizer.release_batch

    def spy(*a, **k):
        out = real_batch(*a, **k)
        ks.append(out[3])
        return out

    def release(san, grads):
        releases["n"] += 1
        return real_release(san, grads)

    monkeypatch.setattr(fast_step, "poisson_batch", spy)
    monkeypatch.setattr(WholeBatchSanitizer, "release_batch", release)
    dp_sinkhorn.train(ctx)
    assert len(ks) == 30 and ks.count(0) >= 5 and max(ks) >= 1
    assert releases["n"] == 30  # every step, empty or not, released a noised gradient
    assert json.loads(ctx.privacy_path.read_text())["steps"] == 30


@pytest.mark.parametrize("mutate, message", [
    (lambda d: Dataset(d.name, d.x_train, d.y_train + 5, d.x_test, d.y_test, 10), "labels outside"),
    (lambda d: Dataset(d.name, d.x_train[:, :, :20], d.y_train, d.x_test[:, :, :20], d.y_test, 10), "28x28 and 32x32"),
    (lambda d: Dataset(d.name, d.x_train.astype(np.float32), d.y_train, d.x_test, d.y_test, 10), "uint8"),
    (lambda d: Dataset(d.name, d.x_train[:0], d.y_train[:0], d.x_test, d.y_test, 10), "empty"),
    (lambda d: Dataset(d.name, d.x_train[:5], d.y_train[:5], d.x_test, d.y_test, 10), "larger than the dataset"),
])
def test_bad_input_fails_before_training(digits28, tmp_path, mutate, message):
    ctx = make_ctx(tmp_path / "m", mutate(digits28), privacy={"enabled": False}, steps=5, batch_size=10,
                   sanitizer="none")
    with pytest.raises(DataError, match=message):
        dp_sinkhorn.train(ctx)
    assert not tmp_path.joinpath("m").exists() or not any(tmp_path.joinpath("m").iterdir())


def test_budget_guard_refuses_a_run_past_its_target(digits28, tmp_path):
    """A resumed run whose checkpoint claims more steps than the budget allows is refused."""
    ctx = make_ctx(tmp_path / "m", digits28, privacy={"epsilon": 10, "delta": 1e-5, "sigma": 1.1},
                   steps=4, batch_size=10, lr=1e-3)
    dp_sinkhorn.train(ctx)
    state = torch.load(ctx.checkpoint_path, weights_only=False)
    state["done"] = False
    state["guard"]["steps_spent"] = state["guard"]["budget"] + 1
    torch.save(state, ctx.checkpoint_path)
    with pytest.raises(PrivacyError):
        dp_sinkhorn.train(ctx)


# --------------------------------------------------------------------------- secret noise (issue #15)


def _weights(path: Path) -> dict[str, torch.Tensor]:
    return torch.load(path, weights_only=True)["state_dict"]


def test_secret_noise_runs_differ_resume_exactly_and_release_no_private_values(digits28, tmp_path, monkeypatch):
    import csv
    import shutil

    kw = dict(privacy={"epsilon": 10, "delta": 1e-5, "sigma": 1.1}, steps=10, batch_size=10, lr=1e-3)
    runs = []
    for name in ("a", "b"):
        ctx = make_ctx(tmp_path / name, digits28, **kw)
        ctx.noise = NoiseSource()  # the default: fresh OS entropy per run
        dp_sinkhorn.train(ctx)
        runs.append(ctx)
    a, b = runs
    # same configuration, same model seed: only the secret noise and sampling differ -> other weights
    assert any(not torch.equal(x, y) for x, y in zip(_weights(a.generator_path).values(),
                                                      _weights(b.generator_path).values()))
    # released files: no seed for the noise, the mode stated, only public log columns
    rep = json.loads(a.privacy_path.read_text())
    assert rep["noise"]["mode"] == "secret" and rep["noise"]["private"] is True
    assert "seed" not in json.dumps(rep["noise"])
    with open(a.public_log_path, newline="") as fh:
        public = list(csv.DictReader(fh))
    assert public and set(public[0]) == {"step", "epsilon", "steps_per_s"}
    # the private diagnostics (loss on real data, Poisson batch size, pre-clip norm) stay private
    with open(a.log_path, newline="") as fh:
        private = list(csv.DictReader(fh))
    assert {"loss", "real_batch", "clean_norm"} <= set(private[0])
    assert a.checkpoint_path.parent == a.log_path.parent != a.out_dir

    # exact resume in secret mode: the secret generator states travel in the private checkpoint, so
    # two resumes from one checkpoint give identical weights (but not those of an unrelated run)
    c = make_ctx(tmp_path / "c", digits28, **kw)
    c.noise = NoiseSource()
    _run_killed_at(c, 7, monkeypatch)  # checkpoint at step 4
    saved = tmp_path / "ckpt_copy.pt"
    shutil.copy(c.checkpoint_path, saved)
    dp_sinkhorn.train(c)
    first = _weights(c.generator_path)
    for f in (c.generator_path, c.privacy_path, c.public_log_path):
        f.unlink()
    shutil.copy(saved, c.checkpoint_path)
    dp_sinkhorn.train(c)
    assert all(torch.equal(first[k], v) for k, v in _weights(c.generator_path).items())
