"""The packed entropic-WGAN trainer (methods/entropic_wgan/packed.py) against the per-run one (fit.EWGANTrainer).

Tolerances: the pack runs the per-run trainer's very operations -- ``baddbmm`` of one matrix per member,
and on the CPU each member's Sinkhorn solve through the per-run code -- so at K = 1 weights after several
steps are held to 1e-6 absolute (measured: bit-identical on the CPU; the margin is for a BLAS that picks
another kernel for a batched product). At K = 2 the same is asked of each member's losses at 1e-6 relative;
weights are compared at K = 1 only, since Adam's normalised step turns any rounding-level difference in a
near-zero gradient into a whole step (a GPU's batched solve is not bit-identical to one problem's).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from dpsynth.config import EntropicWGANHparams
from dpsynth.errors import ConfigError, DataError
from dpsynth.methods.entropic_wgan import EWGANTrainer, LossSpec, generator_arch
from dpsynth.methods.entropic_wgan.packed import CounterDraws, Member, PackedEWGAN
from dpsynth.nets import build_seeded_generator

SHAPE = (1, 28, 28)


@pytest.fixture(autouse=True)
def _one_thread():
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


def _records(seed: int, n: int = 300) -> torch.Tensor:
    rng = np.random.default_rng(seed)
    return torch.tensor(rng.uniform(-1, 1, (n, 784)) + rng.normal(0, 1, (n, 784)), dtype=torch.float32)


def _hp(loss: str) -> EntropicWGANHparams:
    return EntropicWGANHparams(batch_size=50, lr=1e-3, optimizer="adam", generator="mlp", loss=loss)


def _spec(loss: str, temperature: float = 2.0) -> LossSpec:
    return LossSpec(loss=loss, p=2, temperature=temperature, n_iter=20, scaling=None)


def _alone(records: torch.Tensor, loss: str, temperature: float, seed: int, steps: int):
    gen = build_seeded_generator(generator_arch("mlp", SHAPE), seed, "cpu")
    trainer = EWGANTrainer(gen, records, _spec(loss, temperature), _hp(loss), seed)
    return gen, [trainer.step() for _ in range(steps)]


@pytest.mark.parametrize("loss", ["entropic", "exact", "sinkhorn_divergence"])
def test_one_member_reproduces_the_per_run_trainer(loss):
    recs = _records(0)
    pack = PackedEWGAN([Member("a", 3, recs, 0.5)], SHAPE, _spec(loss, 0.5), _hp(loss), draws="torch")
    packed = [float(pack.step()[0]) for _ in range(5)]
    gen, alone = _alone(recs, loss, 0.5, 3, 5)
    np.testing.assert_allclose(packed, alone, rtol=1e-6)
    got = pack.model.member_state(0)
    for name, ref in gen.state_dict().items():
        torch.testing.assert_close(got[name], ref, rtol=0, atol=1e-6)
    # the member's generator, as its run would release it, makes what the per-run generator makes
    z = torch.rand(4, 2)
    torch.testing.assert_close(pack.model.generator(0)(z), gen.eval()(z), rtol=0, atol=1e-6)


@pytest.mark.parametrize("loss", ["entropic", "exact", "sinkhorn_divergence"])
def test_members_of_a_pack_are_their_own_runs(loss):
    """Two members with their own records, seeds and temperatures: each one's losses are its run alone's."""
    recs, temps, seeds = [_records(1), _records(2, 250)], [2.0, 0.5], [5, 6]
    pack = PackedEWGAN([Member(f"m{k}", seeds[k], recs[k], temps[k]) for k in range(2)], SHAPE, _spec(loss),
                       _hp(loss), draws="torch")
    packed = np.array([pack.step().tolist() for _ in range(4)])
    for k in range(2):
        _, alone = _alone(recs[k], loss, temps[k], seeds[k], 4)
        np.testing.assert_allclose(packed[:, k], alone, rtol=1e-6)


def test_counter_draws_are_a_members_own_and_without_replacement():
    sizes = [1000, 300, 60000]
    draws = CounterDraws([0, 1, 2], sizes, 200, (2, "uniform"), "cpu")
    idx, z = draws(7)
    assert idx is not None and idx.shape == (3, 200) and z.shape == (3, 200, 2)
    for k, n in enumerate(sizes):
        row = idx[k]
        assert int(row.min()) >= 0 and int(row.max()) < n and len(set(row.tolist())) == 200
    assert 0.0 <= float(z.min()) and float(z.max()) < 1.0 and abs(float(z.mean()) - 0.5) < 0.05
    # member 2's draws are the same alone as in the pack; another step draws others
    alone_idx, alone_z = CounterDraws([2], [60000], 200, (2, "uniform"), "cpu")(7)
    assert torch.equal(alone_idx[0].sort().values, idx[2].sort().values) and torch.equal(alone_z[0], z[2])
    assert not torch.equal(draws(8)[1], z)
    # uniform over the records: over many steps every record of a 300-record member is drawn about as often
    counts = torch.bincount(torch.cat([CounterDraws([1], [300], 200, (2, "uniform"), "cpu")(t)[0][0]
                                       for t in range(60)]), minlength=300)
    assert int(counts.min()) > 20 and int(counts.max()) < 60  # expected 40 per record


def test_a_cut_pack_resumes_to_the_same_weights(tmp_path):
    recs = [_records(3), _records(4)]
    members = [Member(f"m{k}", k, recs[k], 1.0 + k) for k in range(2)]
    whole = PackedEWGAN(members, SHAPE, _spec("entropic"), _hp("entropic"))
    whole.run(6)
    cut = PackedEWGAN(members, SHAPE, _spec("entropic"), _hp("entropic"))
    cut.run(3, folder=tmp_path)  # saved at its end
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m0.pt", "m1.pt"]
    again = PackedEWGAN(members, SHAPE, _spec("entropic"), _hp("entropic"))
    assert again.resume(tmp_path) == 3
    again.run(6)
    for k in range(2):
        for name, ref in whole.model.member_state(k).items():
            torch.testing.assert_close(again.model.member_state(k)[name], ref, rtol=0, atol=1e-6)
    # a checkpoint of another run is refused, not silently loaded
    other = PackedEWGAN([Member("m0", 9, recs[0], 1.0), members[1]], SHAPE, _spec("entropic"), _hp("entropic"))
    with pytest.raises(DataError, match="another run"):
        other.resume(tmp_path)


def test_smoke_pack_trains():
    """A smoke-size packed run with the device draws: four members lower their loss together."""
    rng = np.random.default_rng(5)  # records around 0.5: a generator starting near 0 has far to go
    recs = torch.tensor(0.5 + 0.05 * rng.normal(size=(400, 784)), dtype=torch.float32)
    members = [Member(f"m{k}", k, recs, t) for k, t in enumerate([0.5, 2.0, 4.5, 8.0])]
    pack = PackedEWGAN(members, SHAPE, _spec("entropic"), EntropicWGANHparams(
        batch_size=50, lr=1e-2, optimizer="adam", generator="mlp", loss="entropic"))
    first = pack.step()
    for _ in range(15):
        last = pack.step()
    assert torch.isfinite(last).all() and bool((last < 0.8 * first).all())
    assert pack.records.shape[0] == 400  # four members, one shared array: stored once


def test_a_pack_refuses_what_it_cannot_train():
    with pytest.raises(ConfigError, match="one batch size"):
        PackedEWGAN([Member("a", 0, _records(0, 300), 1.0), Member("b", 1, _records(1, 20), 1.0)], SHAPE,
                    _spec("entropic"), _hp("entropic"))
    with pytest.raises(ConfigError, match="MLP"):
        PackedEWGAN([Member("a", 0, _records(0, 300), 1.0)], SHAPE, _spec("entropic"),
                    EntropicWGANHparams(batch_size=50, generator="dcgan", loss="entropic"))


@pytest.mark.parametrize("loss", ["entropic", "sinkhorn_divergence"])
def test_the_whole_pack_solve_a_gpu_runs_equals_each_members_own(loss):
    """Off the CPU a pack is solved at once ((K, B, M) costs, K temperatures, no cached kernel); run here on the
    CPU, its losses and gradients equal each member's own per-run loss (which solves with the cached kernel): the
    losses to 1e-4 relative, the gradients to 1e-3 -- the bound tests/test_ot_fast_softmin.py holds the cached
    solve to against the log-domain one (measured 1.1e-4 at lambda = 0.5)."""
    from dpsynth.methods.entropic_wgan.loss import ewgan_loss, ewgan_losses

    gen = torch.Generator().manual_seed(0)
    x = torch.rand(3, 40, 784, generator=gen) * 2 - 1
    y = torch.rand(3, 50, 784, generator=gen) * 2 - 1 + torch.randn(3, 50, 784, generator=gen)
    temps = torch.tensor([0.5, 2.0, 8.0])
    spec = LossSpec(loss=loss, p=2, temperature=1.0, n_iter=200, scaling=None)
    xg = x.clone().requires_grad_(True)
    losses = ewgan_losses(xg, y, spec, temps, whole_pack=True)
    losses.sum().backward()
    for k in range(3):
        xk = x[k].clone().requires_grad_(True)
        own = ewgan_loss(xk, y[k], LossSpec(loss=loss, p=2, temperature=float(temps[k]), n_iter=200, scaling=None))
        own.backward()
        np.testing.assert_allclose(float(losses[k].detach()), float(own.detach()), rtol=1e-4)
        assert float((xg.grad[k] - xk.grad).norm() / xk.grad.norm()) < 1e-3
