"""Reshetova et al.'s (arXiv:2306.09547) 2-D experiments at the paper scale: full batches of 400,000 points, geomloss's
eps-scaling 0.99, the blockwise solver above the dense limit, and the exact loss's limit."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from dpsynth.nets import build_generator
from tests.conftest import REPO


def _spec(loss: str = "entropic", temperature: float = 0.5, geomloss_scaling: float | None = 0.99):
    from dpsynth.methods.entropic_wgan import LossSpec

    return LossSpec(loss=loss, p=2, temperature=temperature, n_iter=50, scaling=None,
                    geomloss_scaling=geomloss_scaling)


def test_the_2d_experiments_follow_section_4_2_at_the_paper_scale() -> None:
    """b = n = 400,000, RMSprop lr 1e-4, geomloss scaling 0.99, an MLP 2x256 on a 2-D latent; the
    quick scale caps the batch (recorded as a scale override); the exact-loss row keeps 1,000."""
    from dpsynth.config import apply_preset, load_params
    from dpsynth.data.registry import get_spec
    from dpsynth.methods.entropic_wgan import generator_arch

    paper = load_params(REPO / "params.yaml", scale="paper")
    quick = load_params(REPO / "params.yaml", scale="quick")
    n = get_spec("manifold2d_half_circle").options["n_train"]
    assert n == 400_000
    for name in ("ewgan_half_circle_gauss", "ewgan_half_circle_gauss_sd", "ewgan_half_circle_laplace"):
        exp, changes = apply_preset(paper.all_experiments()[name], paper.preset)
        h = exp.hparams
        assert (h.batch_size, h.geomloss_scaling, h.optimizer, h.lr) == (n, 0.99, "rmsprop", 1e-4), name
        assert changes == {}
        q_exp, q_changes = apply_preset(quick.all_experiments()[name], quick.preset)
        # the quick scale's own cap for this method (scales.quick.method_max_batch_size), not the image methods' 64
        cap = quick.preset.batch_cap("entropic_wgan")
        assert cap == 256 and quick.preset.max_batch_size == 64
        assert q_exp.hparams.batch_size == cap and q_changes["batch_size"] == {"paper": n, "this_scale": cap}
    exact = paper.all_experiments()["ewgan_half_circle_gauss_exact"].hparams
    assert (exact.loss, exact.batch_size) == ("exact", 1000)
    arch = generator_arch("mlp", (2,))["kwargs"]
    assert (arch["latent_dim"], arch["hidden"], arch["latent_dist"]) == (2, [256, 256], "uniform_symmetric")


def test_geomloss_schedule_matches_geomloss_values() -> None:
    """Our solver on geomloss's schedule (start at the bounding box's largest cost, temperature
    times 0.99^2 per iteration down to lambda) gives geomloss's own OT_eps value. Tolerance 1e-3
    relative: geomloss ends with one extra extrapolation step, and both stop short of convergence
    by the same schedule (measured difference: ~1e-5)."""
    from dpsynth.methods.entropic_wgan import geomloss_schedule
    from dpsynth.ot.geomloss_backend import geomloss_entropic_ot
    from dpsynth.ot.sinkhorn import entropic_ot

    g = torch.Generator().manual_seed(0)
    x = torch.rand(150, 2, generator=g, dtype=torch.float64) * 3
    y = torch.randn(170, 2, generator=g, dtype=torch.float64)
    spec = _spec(temperature=0.05)
    n_iter, ratio = geomloss_schedule(x, y, spec)
    lo, hi = torch.minimum(x.amin(0), y.amin(0)), torch.maximum(x.amax(0), y.amax(0))
    cmax = float(((hi - lo) ** 2).sum())
    assert ratio == pytest.approx(0.99 ** 2)
    assert n_iter == math.ceil(math.log(cmax / 0.05) / math.log(1 / 0.99 ** 2)) + 1
    ours = float(entropic_ot(x, y, eps=0.05, n_iter=n_iter, scaling=ratio))
    theirs = float(geomloss_entropic_ot(x, y, eps=0.05, scaling=0.99))
    assert ours == pytest.approx(theirs, rel=1e-3)


@pytest.mark.parametrize("loss", ["entropic", "sinkhorn_divergence"])
def test_a_step_above_the_dense_limit_runs_blockwise_with_the_same_result(loss: str, monkeypatch) -> None:
    """The trainer's loss switches to the blockwise solver above DENSE_MAX_ENTRIES; with the limit
    lowered so that a small full batch crosses it, one RMSprop step lands on the same parameters
    as the dense solver (float64; tolerance 1e-9, summation order only) -- and the blockwise path
    really ran (its entry point was called)."""
    import dpsynth.methods.entropic_wgan as ew
    import dpsynth.ot.online as online
    from dpsynth.config import EntropicWGANHparams

    records = np.random.default_rng(0).normal(size=(300, 2))
    hp = EntropicWGANHparams(batch_size=300, lr=1e-3, optimizer="rmsprop", generator="mlp", loss=loss, geomloss_scaling=0.9)
    spec = _spec(loss=loss, temperature=0.3, geomloss_scaling=0.9)

    def one_step() -> list[torch.Tensor]:
        torch.manual_seed(0)
        arch = ew.generator_arch("mlp", (2,))
        gen = build_generator(arch["name"], **arch["kwargs"]).double()
        trainer = ew.EWGANTrainer(gen, torch.from_numpy(records), spec, hp, seed=3)
        trainer.step()
        return [p.detach().clone() for p in gen.parameters()]

    dense = one_step()
    calls = []
    name = "online_entropic_loss" if loss == "entropic" else "online_sinkhorn_divergence"
    real = getattr(online, name)
    monkeypatch.setattr(online, name, lambda *a, **k: calls.append(k["block"]) or real(*a, **k))
    monkeypatch.setattr(ew.loss, "DENSE_MAX_ENTRIES", 300 * 300 - 1)  # where ewgan_loss reads it
    blockwise = one_step()
    assert calls and calls[0] < 300
    for a, b in zip(dense, blockwise):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-12)


def test_the_exact_loss_refuses_a_batch_no_network_simplex_can_solve() -> None:
    import dpsynth.methods.entropic_wgan as ew
    from dpsynth.config import EntropicWGANHparams
    from dpsynth.errors import ConfigError

    arch = ew.generator_arch("mlp", (2,))
    gen = build_generator(arch["name"], **arch["kwargs"])
    hp = EntropicWGANHparams(batch_size=400_000, optimizer="rmsprop", generator="mlp", loss="exact")
    with pytest.raises(ConfigError, match="hparams.batch_size: 400000 .* network simplex"):
        ew.EWGANTrainer(gen, torch.zeros(400_000, 2), _spec(loss="exact"), hp, seed=0)


def test_geomloss_scaling_and_a_fixed_iteration_count_are_one_too_many() -> None:
    from pydantic import ValidationError

    from dpsynth.config import EntropicWGANHparams

    with pytest.raises(ValidationError, match="drop sinkhorn_iters"):
        EntropicWGANHparams(geomloss_scaling=0.99, sinkhorn_iters=100)
