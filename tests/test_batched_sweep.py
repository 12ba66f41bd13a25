"""Batched sweeps: each member of a K-wide sweep equals the same member trained alone."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from dpsynth.errors import ConfigError, PrivacyError
from dpsynth.methods import dp_sinkhorn
from dpsynth.methods.dp_sinkhorn.sweep import BatchedSweep, SweepMember, SweepShared, train_one

ARCH = {"name": "dcgan", "kwargs": {"latent_dim": 12, "num_classes": 10, "embed_dim": 4, "out_channels": 1,
                                    "image_size": 28}}


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(0)
    x = dp_sinkhorn.records_to_float(rng.integers(0, 256, (200, 1, 28, 28), dtype=np.uint8)).double()
    return x, torch.from_numpy(rng.integers(0, 10, 200))


def _shared(**kw) -> SweepShared:
    base = dict(arch=ARCH, n=10, n_extra=2, q=10 / 200, lr=1e-3, weight_decay=2e-5, dtype=torch.float64,
                target_epsilon=10.0)
    base.update(kw)
    return SweepShared(**base)


@pytest.mark.parametrize("mode", ["vmap", "loop"])
def test_each_member_equals_its_one_at_a_time_run(data, mode):
    """Both forward strategies (grouped convolutions / member by member on views); 2 DCGAN members differing in seed, cost weight m, clip and sigma (the non-private member
    is covered by the MLP test below),
    2 steps batched vs each alone (FastStep, itself held to tests/reference_dp_sinkhorn.py): float64, weights and
    BN statistics to 1e-9 (observed ~1e-12; vmap's grouped convolutions only reorder sums)."""
    x, y = data
    shared = _shared()
    members = [SweepMember(seed=0), SweepMember(seed=1, m=1.0, sigma=0.8, clip=0.3)]
    sweep = BatchedSweep(shared, members, x, y, forward_mode=mode)
    assert sweep.forward_mode == mode
    losses = [sweep.step() for _ in range(2)]
    assert all(torch.isfinite(v).all() for v in losses)
    for i, mem in enumerate(members):
        alone = train_one(shared, mem, x, y, 2).state_dict()
        batched = sweep.generator(i).state_dict()
        for k, ref in alone.items():
            assert torch.allclose(batched[k].double(), ref.double(), rtol=0, atol=1e-9), (i, k)
    # members really differ (their own seeds/noise): a mix-up would make two of them equal
    w0, w1 = sweep.generator(0).state_dict(), sweep.generator(1).state_dict()
    assert not torch.allclose(w0["net.0.weight"], w1["net.0.weight"])


MLP = {"name": "mlp", "kwargs": {"latent_dim": 2, "output_dim": 2, "hidden": [32, 32],
                                  "latent_dist": "uniform_symmetric"}}


@pytest.mark.parametrize("mode", ["vmap", "loop"])
def test_each_member_has_its_own_accountant(mode):
    """Spent epsilon follows each member's sigma (smaller sigma, larger epsilon; non-private is
    inf), and a member whose budget is exhausted stops the sweep before the step is taken.
    (A small unconditional MLP on 2-D points: also covers the label-free path.) The MLP sweep
    equals its one-at-a-time runs too (float64, 1e-9)."""
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(300, 2, generator=g, dtype=torch.float64), torch.zeros(300, dtype=torch.int64)
    sweep = BatchedSweep(_shared(arch=MLP, n=20, n_extra=4, q=20 / 300, eps=0.05), [SweepMember(seed=0, sigma=1.5), SweepMember(seed=1, sigma=0.9),
                                     SweepMember(seed=2, sigma=None)], x, y, forward_mode=mode)
    sweep.step()
    sweep.step()
    for i, mem in enumerate(sweep.members):
        alone = train_one(sweep.shared, mem, x, y, 2).state_dict()
        assert all(torch.allclose(sweep.generator(i).state_dict()[k], v, rtol=0, atol=1e-9) for k, v in alone.items())
    e = sweep.epsilons()
    assert 0 < e[0] < e[1] < math.inf and e[2] == math.inf
    tight = BatchedSweep(_shared(arch=MLP, n=20, n_extra=4, q=20 / 300, target_epsilon=0.01),
                         [SweepMember(seed=0, sigma=1.1)], x, y)
    before = tight.member_params[0]["net.0.weight"].detach().clone()
    with pytest.raises(PrivacyError, match="budget"):
        tight.step()
    assert torch.equal(tight.member_params[0]["net.0.weight"], before)


def test_an_empty_sweep_and_an_unknown_forward_mode_are_refused(data):
    with pytest.raises(ConfigError, match="at least one member"):
        BatchedSweep(_shared(), [], *data)
    with pytest.raises(ConfigError, match="forward_mode must be one of.*'grouped'"):
        BatchedSweep(_shared(), [SweepMember(seed=0)], *data, forward_mode="grouped")
    assert BatchedSweep(_shared(), [SweepMember(seed=0)], *data).forward_mode == "loop"  # auto on a CPU


def test_a_cuda_graph_needs_cuda_tensors(data):
    """The graphed sweep (every member's step in one CUDA graph; checked against the eager sweep on a GPU
    in tests/test_fast_step.py) refuses CPU tensors instead of failing inside the capture."""
    x, y = data
    with pytest.raises(ConfigError, match="cuda_graph=True needs CUDA tensors"):
        BatchedSweep(_shared(), [SweepMember(seed=0)], x, y, cuda_graph=True)
    assert BatchedSweep(_shared(), [SweepMember(seed=0)], x, y).cuda_graph is False  # default: on CUDA only


@pytest.mark.parametrize("mode", ["vmap", "loop"])
def test_an_optimizer_by_learning_rate_grid_packs_into_one_sweep(data, mode):
    """ICLR Table 4's grid (optimizer x lr) in ONE batched sweep: each member steps its own optimizer
    over its own parameters, and equals its one-at-a-time run (float64, weights and BN statistics
    to 1e-9, as above). Before, the sweep stepped one shared Adam and refused any other optimizer."""
    x, y = data
    shared = _shared()
    members = [SweepMember(seed=0, optimizer="adam", lr=1e-3), SweepMember(seed=1, optimizer="adam", lr=1e-4),
               SweepMember(seed=2, optimizer="rmsprop", lr=1e-4), SweepMember(seed=3, optimizer="sgd", lr=1e-2)]
    sweep = BatchedSweep(shared, members, x, y, forward_mode=mode)
    assert [type(o).__name__ for o in sweep.opts] == ["Adam", "Adam", "RMSprop", "SGD"]
    assert [o.param_groups[0]["lr"] for o in sweep.opts] == [1e-3, 1e-4, 1e-4, 1e-2]
    for _ in range(2):
        sweep.step()
    for i, mem in enumerate(members):
        alone = train_one(shared, mem, x, y, 2).state_dict()
        batched = sweep.generator(i).state_dict()
        for k, ref in alone.items():
            assert torch.allclose(batched[k].double(), ref.double(), rtol=0, atol=1e-9), (i, k)


@pytest.mark.parametrize("mode", ["vmap", "loop"])
def test_the_packed_sweep_runs_under_the_runs_gpu_levers(data, mode):
    """The batched step takes the one run's levers (tuning.py; issue 42: the packed sweep ignored
    them). bf16 -- the one lever that changes numbers, applicable on a CPU too -- reaches the
    member-by-member forward: the first step's losses move (bf16 rounds the generator's forward) but
    stay within test_fast_step's bound for one run (2e-3 relative), and the images the sanitizers clip
    are float32. Under vmap autocast does not reach functorch's batched convolutions, so the sweep
    drops bf16 (and channels_last) and says so in its tuning rather than claim a lever that changed
    nothing. fused_adam builds every Adam member's optimizer fused in both."""
    from dpsynth.methods.dp_sinkhorn.tuning import StepTuning

    x, y = data[0].float(), data[1]
    shared = _shared(dtype=torch.float32)
    members = [SweepMember(seed=0), SweepMember(seed=1, m=1.0, sigma=0.8, clip=0.3)]
    plain = BatchedSweep(shared, members, x, y, forward_mode=mode).step()
    tuned = BatchedSweep(shared, members, x, y, forward_mode=mode, tuning=StepTuning.of(["bf16"]))
    seen = []
    for san in tuned.sanitizers:
        attach = san.attach
        san.attach = lambda imgs, attach=attach: (seen.append(imgs.dtype), attach(imgs))[1]
    levered = tuned.step()
    assert seen == [torch.float32, torch.float32]
    if mode == "loop":
        assert tuned.tuning.levers == ("bf16",)
        assert not torch.equal(plain, levered), "the bf16 lever did not reach the batched forward"
        assert torch.allclose(levered, plain, rtol=2e-3, atol=0), (levered, plain)
    else:
        assert tuned.tuning.levers == () and torch.equal(plain, levered)
    fused = BatchedSweep(shared, members, x, y, forward_mode=mode, tuning=StepTuning.of(["fused_adam"]))
    assert all(opt.defaults.get("fused") for opt in fused.opts)
