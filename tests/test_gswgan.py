"""GS-WGAN: stacked networks, shards, the privacy barrier, warm start + train + exact resume.

Networks run at tiny widths (model_dim 4) so the file stays fast on a shared 2-core machine;
the published width (64) is only instantiated for its parameter counts.
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from dpsynth.cli import main as cli_main
from dpsynth.data.prepare import Sources, prepare
from dpsynth.errors import DataError, DpsynthError
from dpsynth.methods.artifacts import load_generator
from dpsynth.methods.gs_wgan import generator_step, train, train_step
from dpsynth.methods.gswgan_critics import CriticBank, critic_step, make_shards
from dpsynth.nets import build_generator
from dpsynth.nets.gswgan import GSWGANGenerator, StackedCritics
from dpsynth.privacy.sanitizers import PerSampleSanitizer

REPO = Path(__file__).resolve().parents[1]
D = 4  # model_dim for speed


def _count(m: torch.nn.Module) -> int:
    return sum(p.numel() for p in m.parameters())


# --------------------------------------------------------------------------- networks


def test_published_widths_parameter_counts_and_output_range() -> None:
    g = build_generator("resnet28")  # registered name; latent 10, 10 classes, d = 64
    # DingfanChen/GS-WGAN source/models.py GeneratorResNet: fc 20*4096+4096 | three GBlocks 256->256
    # (two 3x3 convs + a 1x1 shortcut, with biases) | conv 3x3 256->1; spectral norm adds buffers only
    assert _count(g) == 86_016 + 3 * (2 * 590_080 + 65_792) + 2_305 == 3_826_177
    assert not any(isinstance(m, torch.nn.BatchNorm2d) for m in g.modules())  # pixel norm, not batch norm
    sn_vectors = [n for n, _ in g.named_buffers() if n.endswith("_u")]
    assert len(sn_vectors) == 2 + 3 * 3  # every layer spectrally normalised (fc, out, 3 per block)
    c = StackedCritics(1)
    # conv 1->64, 64->128, 128->256 (5x5) + linear 4096->1 + class embedding 10x4096
    assert _count(c) == 1_664 + 204_928 + 819_456 + 4_097 + 40_960 == 1_071_105
    gen = torch.Generator().manual_seed(0)
    z = g.sample_latent(6, gen)
    assert set(z.unique().tolist()) <= {0.0, 1.0}  # Bernoulli(0.5) latent
    x, y = g.sample(6, gen)
    assert x.shape == (6, 1, 28, 28) and y is not None and 0 <= x.min() and x.max() <= 1  # sigmoid


def test_generator_layers_are_spectrally_normalised_and_sampling_is_deterministic() -> None:
    """Every layer's effective weight has spectral norm ~1 once the power iteration has run (train
    mode); eval mode leaves the u vectors alone, so a released generator samples reproducibly."""
    g = GSWGANGenerator(model_dim=D, init_seed=3).train()
    z, y = g.sample_latent(4, torch.Generator().manual_seed(0)), torch.arange(4)
    for _ in range(300):  # power iteration converges geometrically (slowly when the top two are close)
        g(z, y)
    for part in (g.io, g.block1, g.block2, g.block3):
        for name in part.shapes:
            w = part.w(name).detach()
            top = torch.linalg.matrix_norm(w.reshape(w.shape[0], w.shape[1], -1), ord=2)
            assert torch.allclose(top, torch.ones_like(top), atol=0.01), name  # the estimate from below, within 1 %
    g.eval()
    before = {n: b.clone() for n, b in g.named_buffers()}
    a, b = g(z, y), g(z, y)
    assert torch.equal(a, b) and all(torch.equal(before[n], t) for n, t in g.named_buffers())


def test_stacked_copies_equal_lone_networks() -> None:
    """Copy k of a stacked generator/critic computes exactly what a lone network with its weights does."""
    k, b = 3, 5
    gs = GSWGANGenerator(model_dim=D, copies=k, init_seed=1).eval()  # eval: no power iteration
    cs = StackedCritics(k, model_dim=D, init_seed=2)
    z = torch.randint(0, 2, (k, b, 10)).float()
    y = torch.randint(0, 10, (k, b))
    out = gs.forward_stacked(z, y)
    scores = cs(out, y, cs.weights(power_iteration=False))
    for i in range(k):
        g1 = GSWGANGenerator(model_dim=D, copies=1).eval()
        assert all(v.shape[0] == k for v in gs.state_dict().values())  # every tensor is stacked
        g1.load_state_dict({name: v[i : i + 1] for name, v in gs.state_dict().items()})
        lone = g1(z[i], y[i])
        assert torch.allclose(lone, out[i], atol=1e-5)
        bank = CriticBank(cs, 1e-4, (0.5, 0.9)).take(i, i + 1)
        s1 = bank.critics(out[i : i + 1], y[i : i + 1], bank.critics.weights(power_iteration=False))
        assert torch.allclose(s1[0], scores[i], atol=1e-5)


def test_batched_critic_step_equals_one_critic_at_a_time() -> None:
    """The batched update (summed per-critic losses, stacked Adam) == stepping each critic alone.

    Compared on Adam's moments (linear/quadratic in the gradient) after one step: parameters
    themselves move by ~lr * sign(g) on the first Adam step, so float round-off on a near-zero
    gradient element could flip a sign there without any bug. Relative (norm) tolerance 1e-4:
    float32 sums are taken in a different order by grouped vs plain convolution.
    """
    k, b = 3, 4
    bank = CriticBank(StackedCritics(k, model_dim=D, init_seed=0), 1e-3, (0.5, 0.9))
    loop = [bank.take(i, i + 1) for i in range(k)]
    real, fake = torch.rand(k, b, 1, 28, 28), torch.rand(k, b, 1, 28, 28)
    y = torch.randint(0, 10, (k, b))
    alpha = torch.rand((k, b, 1, 1, 1))
    critic_step(bank, real, y, fake, 10.0, 1e-3, torch.Generator(), alpha=alpha)
    for i, one in enumerate(loop):
        critic_step(one, real[i : i + 1], y[i : i + 1], fake[i : i + 1], 10.0, 1e-3, torch.Generator(),
                    alpha=alpha[i : i + 1])
        for name in bank.opt.m:
            for mom in ("m", "v"):
                a, ref = getattr(one.opt, mom)[name][0], getattr(bank.opt, mom)[name][i]
                assert float((a - ref).norm()) <= 1e-4 * float(ref.norm()) + 1e-12, (mom, name)
        assert torch.allclose(one.critics.conv2_u[0], bank.critics.conv2_u[i], atol=1e-6)  # power iteration
        assert float(one.opt.steps[0]) == float(bank.opt.steps[i]) == 1.0
    assert float(bank.opt.m["conv1_w"].abs().max()) > 0  # the step did move something


def test_bank_take_put_touches_only_the_chosen_critic() -> None:
    bank = CriticBank(StackedCritics(4, model_dim=D, init_seed=0), 1e-3, (0.5, 0.9))
    before = {k: v.clone() for k, v in bank.critics.state_dict().items()}
    one = bank.take(2, 3)
    critic_step(one, torch.rand(1, 4, 1, 28, 28), torch.randint(0, 10, (1, 4)), torch.rand(1, 4, 1, 28, 28),
                10.0, 1e-3, torch.Generator().manual_seed(0))
    assert torch.equal(bank.critics.conv1_w, before["conv1_w"])  # take() copies
    bank.put(2, one)
    after = bank.critics.state_dict()
    assert not torch.equal(after["conv1_w"][2], before["conv1_w"][2])
    for i in (0, 1, 3):
        assert torch.equal(after["conv1_w"][i], before["conv1_w"][i])
    assert bank.opt.steps.tolist() == [0, 0, 1, 0]  # per-critic Adam step counts


# --------------------------------------------------------------------------- shards and bad input


def test_shards_disjoint_fixed_by_seed_and_bad_sizes() -> None:
    s = make_shards(1000, 10, 32, seed=3)
    assert s.shape == (10, 100) and len(np.unique(s)) == 1000
    assert np.array_equal(s, make_shards(1000, 10, 32, seed=3))
    assert not np.array_equal(s, make_shards(1000, 10, 32, seed=4))
    with pytest.raises(DataError, match="larger than the dataset"):
        make_shards(100, 101, 1, seed=0)
    with pytest.raises(DataError, match="smaller than the batch size 32"):
        make_shards(1000, 40, 32, seed=0)  # 25 records per shard


# --------------------------------------------------------------------------- the privacy barrier


def _private_setup(scale: float, seed: int):
    """A critic bank + shards over a synthetic 'private' dataset; ``scale`` changes the data wildly."""
    rng = np.random.default_rng(seed)
    x = (rng.random((256, 1, 28, 28)) * 255 * scale).clip(0, 255).astype(np.uint8)
    y = rng.integers(0, 10, 256)
    bank = CriticBank(StackedCritics(2, model_dim=D, init_seed=seed), 1e-2, (0.5, 0.9))
    shards = torch.from_numpy(make_shards(256, 2, 32, seed=0))
    return bank, torch.from_numpy(x), torch.from_numpy(y), shards


def test_sanitizer_is_the_only_path_from_private_data_to_the_generator() -> None:
    """Close the barrier (clip 1e-30, no noise): whatever the private data and critics, the
    generator gradient vanishes and whole training runs release the SAME generator. Open it
    (clip 1): the generator does depend on the data. A leak around the barrier (a missing
    detach, a real batch reaching G) would make the closed-barrier runs differ."""
    h = argparse.Namespace(batch_size=32, critic_steps=1, gp_weight=10.0, drift=1e-3)

    def run(clip: float, scale: float, data_seed: int) -> dict[str, torch.Tensor]:
        bank, x, y, shards = _private_setup(scale, data_seed)
        G = GSWGANGenerator(model_dim=D, init_seed=7)
        opt = torch.optim.Adam(G.parameters(), lr=1e-3, betas=(0.5, 0.9))
        gens = {n: torch.Generator().manual_seed(i) for i, n in enumerate(("pick", "data", "noise"))}
        san = PerSampleSanitizer(clip, 0.0, 32, generator=gens["noise"])
        for _ in range(2):
            train_step(G, opt, bank, x, y, shards, h, gens, san)
            assert san.last is not None and san.last.clipped_norm <= clip / 32  # per-sample bound C/B
            if clip < 1e-20:
                assert max(float(p.grad.abs().max()) for p in G.parameters() if p.grad is not None) < 1e-20
        return {k: v.clone() for k, v in G.state_dict().items()}

    closed_a, closed_b = run(1e-30, 1.0, 1), run(1e-30, 0.01, 2)
    for k in closed_a:
        assert torch.allclose(closed_a[k], closed_b[k], rtol=0, atol=1e-12), k
    open_a, open_b = run(1.0, 1.0, 1), run(1.0, 0.01, 2)
    assert any(not torch.allclose(open_a[k], open_b[k]) for k in open_a if open_a[k].is_floating_point())


def test_generator_step_leaves_critic_without_gradient_and_bounds_release() -> None:
    bank, *_ = _private_setup(1.0, 0)
    one = bank.take(0, 1)
    one.critics.spectral_norm = False  # (spectral norm would undo the scaling below)
    with torch.no_grad():  # an extreme critic: huge gradients must not matter after clipping
        one.critics.lin_w.mul_(1e6)
    G = GSWGANGenerator(model_dim=D, init_seed=1)
    opt = torch.optim.SGD(G.parameters(), lr=0.0)
    san = PerSampleSanitizer(1.0, 0.0, 32, generator=torch.Generator().manual_seed(0))
    generator_step(G, opt, one, 32, torch.Generator().manual_seed(1), san)
    assert all(p.grad is None for p in one.critics.parameters())
    assert san.releases == 1 and san.last is not None and san.last.clean_norm > 1.0 / 32  # it had to clip
    assert san.last.clipped_norm <= 1.0 / 32


# --------------------------------------------------------------------------- pipeline: warm start, train, resume


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("gswgan")
    prepare("digits28", Sources(root=root / "data"))
    raw = yaml.safe_load((REPO / "params.yaml").read_text())
    raw["data"]["root"] = str(root / "data")
    raw["scale"] = "smoke"
    raw["privacy_noise"] = "reproducible"  # runs are compared bit for bit
    raw["scales"]["smoke"].update(train_steps=4, warmup_steps=1, n_critics=4, train_subset=2000)
    raw["experiments"]["gsw"] = {
        "method": "gs_wgan", "dataset": "digits28", "privacy": {"epsilon": 10, "delta": 1e-5, "sigma": 1.07},
        "hparams": {"batch_size": 32, "lr": 1e-4, "betas": [0.5, 0.9], "generator": "resnet28", "clip": 1.0,
                    "model_dim": D}}
    (root / "params.yaml").write_text(yaml.safe_dump(raw))
    return root


def _ctx(root: Path, out: str, max_steps: int | None = None):
    from dpsynth.stages.train import build_context

    ctx = build_context("gsw", params_file=str(root / "params.yaml"), out=str(root / out), private_out=str(root / out),
                        device="cpu", progress=False, checkpoint_every=2)
    ctx.max_steps_this_run = max_steps
    return ctx


def test_train_without_warm_start_fails_clearly(workspace: Path) -> None:
    with pytest.raises(DpsynthError, match="warm-started critics not found; run `dpsynth warmstart gsw`"):
        train(_ctx(workspace, "empty_models"))


def test_warmstart_train_resume_bit_identical(workspace: Path, capsys: pytest.CaptureFixture[str]) -> None:
    params = str(workspace / "params.yaml")
    assert cli_main(["warmstart", "gsw", "--params", params, "--private-out", str(workspace / "m_full"), "--no-progress"]) == 0
    capsys.readouterr()
    assert cli_main(["warmstart", "gsw", "--params", params, "--private-out", str(workspace / "m_full"), "--print-path"]) == 0
    ws = Path(capsys.readouterr().out.strip())
    assert ws == workspace / "m_full" / "warmstart" / "gsw" and (ws / "critics.pt").is_file()
    assert json.loads((ws / "warmstart.json").read_text())["settings"]["n_critics"] == 4
    shutil.copytree(ws.parent, workspace / "m_resume" / "warmstart")  # the same artifact for the resumed run

    full = train(_ctx(workspace, "m_full"))
    assert full["finished"] and full["steps"] == 4 and full["schedule"] == "sound"
    # The published main.py builds new critic optimisers after loading the warm start: the Adam step
    # counts are the 4 steps x critic_steps of training only (the warm start's 4 critics x 1 step are not there)
    ctx = _ctx(workspace, "m_full")
    adam = torch.load(ctx.checkpoint_path, weights_only=False)["critics"]["adam"]
    assert float(adam["steps"].sum()) == 4 * ctx.experiment.hparams.critic_steps
    part = train(_ctx(workspace, "m_resume", max_steps=3))  # "killed" after 3 steps (checkpoint at 2, then 3)
    assert (part["experiment"], part["steps"], part["finished"]) == ("gsw", 3, False)
    resumed = train(_ctx(workspace, "m_resume"))
    assert resumed["finished"] and resumed["steps"] == 4
    a = torch.load(workspace / "m_full/gsw/generator.pt", weights_only=True)["state_dict"]
    b = torch.load(workspace / "m_resume/gsw/generator.pt", weights_only=True)["state_dict"]
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    pa = json.loads((workspace / "m_full/gsw/privacy.json").read_text())
    pb = json.loads((workspace / "m_resume/gsw/privacy.json").read_text())
    assert pa["epsilon"] == pb["epsilon"]
    # Both accountings reported; the target is held by the sound one (calibrated sigma).
    assert {"sound.rdp_classic", "as_published.rdp_classic"} <= set(pa["epsilon"])
    assert pa["headline"] == "sound.rdp_classic" and 9.0 < pa["epsilon"]["sound.rdp_classic"] <= 10.0
    def log_rows(out: str) -> list[list[str]]:  # all but the wall-clock column (steps_per_s)
        return [r.split(",")[:-1] for r in (workspace / out / "gsw/train_log.csv").read_text().splitlines()]

    assert log_rows("m_resume") == log_rows("m_full") and len(log_rows("m_full")) == 2

    G, meta = load_generator(workspace / "m_full/gsw/generator.pt")
    assert meta["output_range"] == "sigmoid" and meta["released"] == "ema"
    with torch.no_grad():
        x, _ = G.sample(4, torch.Generator().manual_seed(0))
    assert x.shape == (4, 1, 28, 28) and 0 <= float(x.min()) and float(x.max()) <= 1
    again = train(_ctx(workspace, "m_full"))  # finished: no retraining
    assert again.get("already_done") is True


def test_warmstart_keeps_its_private_losses_out_of_the_output(workspace: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    """The warm start's critic losses are computed on the private shards without noise (issue 45,
    fault 11): they stay in warmstart.json under the private root and never reach stdout or stderr
    (the job's log, outside the private folder) -- not even with --json."""
    params, private = str(workspace / "params.yaml"), workspace / "m_json"
    assert cli_main(["warmstart", "gsw", "--params", params, "--private-out", str(private), "--no-progress",
                     "--json"]) == 0
    printed = capsys.readouterr()
    record = json.loads(printed.out)
    assert record["experiment"] == "gsw" and "last" not in record
    for word in ("d_loss", "wasserstein"):
        assert word not in printed.out and word not in printed.err
    kept = json.loads((private / "warmstart" / "gsw" / "warmstart.json").read_text())
    assert set(kept["last"]) == {"d_loss", "wasserstein"}


def test_bad_warmstart_inputs_cli(workspace: Path, capsys: pytest.CaptureFixture[str]) -> None:
    raw = yaml.safe_load((workspace / "params.yaml").read_text())
    for n_critics, msg in ((5000, "larger than the dataset"), (100, "smaller than the batch size")):
        raw["scales"]["smoke"]["n_critics"] = n_critics
        p = workspace / f"bad{n_critics}.yaml"
        p.write_text(yaml.safe_dump(raw))
        assert cli_main(["warmstart", "gsw", "--params", str(p), "--private-out", str(workspace / "bad"), "--no-progress"]) == 2
        assert msg in capsys.readouterr().err


def test_paper_sigma_is_held_to_the_sound_accountant():
    """sigma 1.07 at N_d 1000, B 32: the sound epsilon after ~20,000 steps is ~369, so a target of 10
    cannot be met (refused, with the reason) while a stated target of 370 derives ~20,000 steps."""
    from types import SimpleNamespace

    from dpsynth.config import PrivacyPlan
    from dpsynth.errors import ConfigError
    from dpsynth.methods.gs_wgan import privacy_schedule
    from dpsynth.privacy.gswgan_accounting import gswgan_epsilon

    def ctx(eps):
        return SimpleNamespace(name="g", experiment=SimpleNamespace(hparams=SimpleNamespace(batch_size=32)),
                               privacy_plan=PrivacyPlan(mode="derive_steps", epsilon=eps, delta=1e-5, sigma=1.07))

    with pytest.raises(ConfigError, match="sound GS-WGAN accountant"):
        privacy_schedule(ctx(10.0), 1000)
    sigma, steps, guard, schedule = privacy_schedule(ctx(370.0), 1000)
    assert schedule == "sound" and 19_000 <= steps <= 21_000 and guard.budget == steps
    assert gswgan_epsilon(1.07, 1000, 32, steps, 1e-5)["sound"]["rdp_classic"] <= 370.0


def test_a_scale_that_cuts_the_critics_says_so_in_scale_overrides() -> None:
    """The quick scale's 10 critics warmed up for 20 steps (the paper: 1,000 and 2,000) reach
    train_summary.json's scale_overrides, and from there the tables' notes (issue 46)."""
    from dpsynth.methods.gs_wgan import warm_start_overrides

    assert warm_start_overrides({"n_critics": 10, "warmup_steps": 20}) == {
        "n_critics": {"paper": 1000, "this_scale": 10}, "warmup_steps": {"paper": 2000, "this_scale": 20}}
    assert warm_start_overrides({"n_critics": 1000, "warmup_steps": 2000}) == {}
