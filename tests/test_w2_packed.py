"""The W2-vs-noise sweep trained by the packed trainer (evaluate/w2_packed.py): the per-run sweep's rows, its
cache, resumable packs, and the paper_gpu scale that uses it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.conftest import REPO
from dpsynth.config import load_params

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _half_circle(rng: np.random.Generator, n: int) -> np.ndarray:
    t = rng.uniform(0.0, np.pi, n)
    return np.c_[np.cos(t), np.sin(t)]


def test_a_packed_sweep_writes_the_per_run_sweeps_rows_and_resumes_from_its_cache(tmp_path: Path) -> None:
    """Smoke size: two losses, two levels, two seeds and the step checks (12 runs) in packs of 3; the rows have
    the per-run sweep's keys and order, every run its own; the cache keeps them apart from the per-run rows
    (other draws) and a second call trains nothing; no member checkpoint is left once its row is cached."""
    from dpsynth.evaluate.w2 import noise_sweep

    rng = np.random.default_rng(0)
    train, ref = _half_circle(rng, 300), _half_circle(rng, 120)
    kw = dict(losses=["entropic", "exact"], steps=3, batch_size=40, sinkhorn_iters=10, n_eval=40, check_level=0.3,
              seeds=(0, 1))
    cache = tmp_path / "runs"
    steps: list[int] = []
    packed = noise_sweep(train, ref, [0.1, 0.3], pack=3, cache_dir=cache, on_step=lambda: steps.append(1), **kw)
    alone = noise_sweep(train, ref, [0.1, 0.3], cache_dir=cache, **kw)
    assert len(steps) == 2 * (4 * 3 + 2 * 6)  # every member-step: 4 figure runs x 3 and 2 checks x 6, per seed
    assert [list(r) for r in packed] == [list(r) for r in alone]
    assert [(r["loss"], r["noise_std"], r["role"], r["seed"], r["steps"]) for r in packed] == \
        [(r["loss"], r["noise_std"], r["role"], r["seed"], r["steps"]) for r in alone]
    assert all(np.isfinite(r["w2"]) and r["w2_draws"] == 8 for r in packed)
    assert packed[0]["w2"] != alone[0]["w2"]  # other draws, other training: keyed apart in the cache
    assert len(list(cache.glob("*.json"))) == 24 and not list((cache / "packed").glob("*.pt"))
    steps.clear()
    again = noise_sweep(train, ref, [0.1, 0.3], pack=3, cache_dir=cache, on_step=lambda: steps.append(1), **kw)
    strip = lambda rows: [{k: v for k, v in r.items() if k != "seconds"} for r in rows]  # noqa: E731
    assert strip(again) == strip(packed) and not steps
    # a pack of 3 and a pack of 10 give the same rows: a member's draws are its own
    whole = noise_sweep(train, ref, [0.1, 0.3], pack=10, **kw)
    np.testing.assert_allclose([r["w2"] for r in whole], [r["w2"] for r in packed], rtol=1e-4)


def test_a_cut_pack_resumes_from_its_members_checkpoints(tmp_path: Path) -> None:
    """A pack stopped mid-way (its members' checkpoints on disk) ends where an uncut one ends."""
    from dpsynth.evaluate.w2 import privatized_records, sweep_runs
    from dpsynth.evaluate.w2_packed import train_packed

    def packed(**kw):
        return train_packed(runs, todo, train, settings, privatize=privatized_records, pack=4, **kw)

    rng = np.random.default_rng(1)
    train = _half_circle(rng, 200)
    settings = {"generator": "mlp", "batch_size": 40, "lr": 1e-3, "optimizer": "adam", "sinkhorn_iters": 10,
                "sinkhorn_scaling": None}
    runs = sweep_runs([0.1, 0.3], ["entropic"], 6, check_level=0.3)
    todo = list(range(len(runs)))
    whole = {i: g.state_dict() for i, g, _ in packed()}

    class Cut(Exception):
        pass

    count = [0]

    def stop() -> None:
        count[0] += 1
        if count[0] == 3 * 4:  # four members at their third step
            raise Cut

    folder = tmp_path / "packed"
    with pytest.raises(Cut):
        list(packed(folder=folder, save_seconds=0.0, on_step=stop))
    assert len(list(folder.glob("*.pt"))) == 3  # two figure runs and the step check, saved at step 2
    resumed = {i: g.state_dict() for i, g, _ in packed(folder=folder)}
    assert sorted(resumed) == sorted(whole)
    for i, state in whole.items():
        for name, value in state.items():
            np.testing.assert_allclose(resumed[i][name].numpy(), value.numpy(), rtol=0, atol=1e-6)


def test_paper_gpu_trains_figs_5_and_11_with_ten_runs_per_cell_at_20000_steps() -> None:
    p = load_params(REPO / "params.yaml", scale="paper_gpu")
    preset, sweep = p.preset, p.w2_noise["mnist"]
    assert "paper_gpu" in sweep.scales
    assert preset.w2_noise_steps is not None and preset.w2_noise_steps >= 20000
    assert preset.w2_noise_seeds is not None and len(preset.w2_noise_seeds) >= 10
    assert preset.w2_noise_pack is not None and preset.w2_noise_train_subset is None
    # paper_cpu keeps the committed target's settings
    cpu = load_params(REPO / "params.yaml", scale="paper_cpu").preset
    assert (cpu.w2_noise_steps, cpu.w2_noise_seeds, cpu.w2_noise_pack) == (None, None, None)
