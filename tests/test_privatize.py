"""The privatize stage: deterministic given its seed, atomic, and its report matches the mechanism."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import yaml

from dpsynth.stages.privatize import privatize, privatized_paths
from dpsynth.config import parse_params
from dpsynth.data.dataset import load_processed
from dpsynth.data.prepare import Sources, prepare
from dpsynth.errors import ConfigError, PrivacyError
from dpsynth.io import read_json
from dpsynth.methods.entropic_wgan import to_records
from dpsynth.privacy.local import dct_records, gaussian_mechanism, project_l1_ball, project_l2_ball
from tests.conftest import REPO, run_cli


@pytest.fixture(autouse=True)
def _one_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    """CLI subprocesses on the shared 2-core machine: one intra-op thread avoids oversubscription."""
    monkeypatch.setenv("OMP_NUM_THREADS", "1")


@pytest.fixture(scope="module")
def data_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("data")
    prepare("manifold2d_half_circle", Sources(root=root))
    prepare("digits28", Sources(root=root))
    return root


def _params(root: Path, experiments: dict, path: Path | None = None, noise: str = "reproducible"):
    raw = yaml.safe_load((REPO / "params.yaml").read_text())
    raw["data"]["root"] = str(root)
    raw["scale"] = "smoke"
    raw["privacy_noise"] = noise
    raw["experiments"] = {**raw["experiments"], **experiments}
    if path is not None:
        path.write_text(yaml.safe_dump(raw))
    return parse_params(raw)


GAUSS = {"method": "entropic_wgan", "dataset": "manifold2d_half_circle",
         "local": {"mechanism": "gaussian", "epsilon": 5.0, "delta": 1e-4, "radius": 1.0, "seed": 7},
         "hparams": {"generator": "mlp", "loss": "entropic"}}
LAPLACE_DCT = {"method": "entropic_wgan", "dataset": "digits28",
               "local": {"mechanism": "laplace", "epsilon": 50.0, "radius": 140.0, "dct": True, "seed": 3},
               "hparams": {"generator": "dcgan", "loss": "entropic"}}


def _eq5_sigma(eps: float, delta: float, sens: float) -> float:
    """Reshetova et al. (arXiv:2306.09547) Eq. (5), written out again independently of the library."""
    c = math.sqrt(math.log(2.0 / (math.sqrt(16 * delta + 1) - 1)))
    return (c + math.sqrt(c * c + eps)) / (eps * math.sqrt(2)) * sens


def test_gaussian_report_matches_mechanism_and_is_deterministic(data_root: Path) -> None:
    params = _params(data_root, {"g": GAUSS})
    rep = privatize(params, "g")
    npz, js = privatized_paths(data_root, "g")
    assert read_json(js) == rep
    # report: sound sensitivity 2R, paper convention R, epsilon as configured
    assert rep["mechanism"] == "gaussian" and rep["epsilon"] == 5.0 and rep["delta"] == 1e-4
    assert rep["sensitivity"] == 2.0 and rep["sensitivity_paper_convention"] == 1.0
    assert rep["noise_scale"] == pytest.approx(_eq5_sigma(5.0, 1e-4, 2.0), rel=1e-12)
    # the paper's convention (sensitivity R, half the sound 2R) claims a SMALLER epsilon for the same
    # noise; it is the epsilon at which eq. (5) with sensitivity R gives back this noise scale.
    assert rep["epsilon_paper_convention"] < rep["epsilon"]
    assert _eq5_sigma(rep["epsilon_paper_convention"], 1e-4, 1.0) == pytest.approx(rep["noise_scale"], rel=1e-9)
    assert rep["num_records"] == 400000 and rep["dim"] == 2
    assert rep["noise"]["mode"] == "reproducible" and rep["noise"]["private"] is False
    assert rep["noise"]["label"] == "reproducible noise - not private"

    ds = load_processed(npz)
    clean = load_processed(data_root / "processed" / "manifold2d_half_circle.npz")
    assert ds.x_train.dtype == np.float32 and ds.x_train.shape == (400000, 2)
    assert ds.x_test.shape == (0, 2) and ds.y_test.shape == (0,)
    # the added noise has the reported std: 800,000 N(0, s^2) draws -> the sample std's relative
    # standard error is 1/sqrt(2 * 8e5) = 0.08%; 1% is > 10 standard errors.
    noise = ds.x_train.astype(np.float64) - project_l2_ball(to_records(clean.x_train), 1.0)
    assert noise.std() == pytest.approx(rep["noise_scale"], rel=0.01)
    assert abs(noise.mean()) < 5 * rep["noise_scale"] / math.sqrt(noise.size)

    # reproducible mode: deterministic given the seed, the same bytes again; another seed gives other noise
    first = ds.x_train.copy()
    privatize(params, "g")
    assert np.array_equal(load_processed(npz).x_train, first)
    other = _params(data_root, {"g": {**GAUSS, "local": {**GAUSS["local"], "seed": 8}}})
    privatize(other, "g")
    assert not np.array_equal(load_processed(npz).x_train, first)


def test_laplace_dct_records_are_projected_dct_coefficients(data_root: Path) -> None:
    params = _params(data_root, {"l": LAPLACE_DCT})
    rep = privatize(params, "l")
    assert rep["domain"] == "dct" and rep["dct"] is True and rep["dct_quantile"] == 0.8
    assert rep["noise_scale"] == pytest.approx(2 * 140.0 / 50.0)  # Laplace b = 2R / epsilon
    assert rep["epsilon_paper_convention"] == pytest.approx(25.0)  # R / b = epsilon / 2
    ds = load_processed(privatized_paths(data_root, "l")[0])
    clean = load_processed(data_root / "processed" / "digits28.npz")
    assert ds.x_train.shape == (len(clean.x_train), 784)
    assert np.array_equal(ds.y_train, clean.y_train)
    target = project_l1_ball(dct_records(to_records(clean.x_train), (1, 28, 28), 0.8), 140.0)
    noise = ds.x_train.astype(np.float64) - target
    # Laplace(b): mean |noise| = b; ~1.1 M draws -> relative standard error ~0.1%; allow 2%.
    assert np.abs(noise).mean() == pytest.approx(rep["noise_scale"], rel=0.02)


def test_no_partial_output_when_the_write_fails(data_root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    params = _params(data_root, {"g2": GAUSS})
    npz, js = privatized_paths(data_root, "g2")
    js.parent.mkdir(parents=True, exist_ok=True)
    js.write_text("{}")  # a stale report from an earlier run must not survive a failed rerun

    def boom(*a, **k):
        raise OSError("disk full")

    monkeypatch.setattr(np, "savez_compressed", boom)
    with pytest.raises(OSError):
        privatize(params, "g2")
    assert not npz.exists() and not js.exists()
    assert not [p for p in js.parent.iterdir() if p.name.startswith(".g2")]  # no temp files left


def test_bad_inputs_fail_with_clear_errors(data_root: Path, tmp_path: Path) -> None:
    bad = {
        "radius": ({**GAUSS["local"], "radius": 0.0}, "local.radius"),
        "epsilon": ({**GAUSS["local"], "epsilon": -1.0}, "local.epsilon"),
        "delta": ({**GAUSS["local"], "delta": 0.5}, "local.delta"),
        "delta0": ({**GAUSS["local"], "delta": 0.0}, "local.delta"),
    }
    for name, (local, key) in bad.items():
        with pytest.raises(ConfigError, match=key):
            _params(data_root, {"b": {**GAUSS, "local": local}})
    # a mechanism/loss mismatch (Laplace noise, p = 2 cost) is refused unless explicitly allowed
    lap = {**GAUSS, "local": {"mechanism": "laplace", "epsilon": 5.0, "radius": 1.0}}
    params = _params(data_root, {"m": {**lap, "hparams": {"generator": "mlp", "cost_p": 2}}})
    with pytest.raises(ConfigError, match="allow_mismatch"):
        privatize(params, "m")
    ok = _params(data_root, {"m": {**lap, "hparams": {"generator": "mlp", "cost_p": 2, "allow_mismatch": True}}})
    assert privatize(ok, "m")["mechanism"] == "laplace"
    # the library refuses the same domains even when called directly
    with pytest.raises(PrivacyError, match="delta"):
        gaussian_mechanism(np.zeros((2, 2)), 1.0, 5.0, 0.7, 0)
    with pytest.raises(PrivacyError, match="radius"):
        gaussian_mechanism(np.zeros((2, 2)), -1.0, 5.0, 1e-4, 0)

    # through the CLI: exit 2 and the key path in the message
    pfile = tmp_path / "params.yaml"
    _params(data_root, {"ok": GAUSS}, pfile)
    raw = yaml.safe_load(pfile.read_text())
    raw["experiments"]["ok"]["local"]["radius"] = -2
    pfile.write_text(yaml.safe_dump(raw))
    r = run_cli("privatize", "ok", "--params", str(pfile))
    assert r.returncode == 2 and "local.radius" in r.stderr
    raw["experiments"]["ok"]["local"]["radius"] = 1.0
    raw["experiments"]["nolocal"] = {"method": "entropic_wgan", "dataset": "digits28"}
    pfile.write_text(yaml.safe_dump(raw))
    r = run_cli("privatize", "nolocal", "--params", str(pfile))
    assert r.returncode == 2 and "local" in r.stderr


def _keys(obj: object) -> set[str]:
    if isinstance(obj, dict):
        return set(obj) | {k for v in obj.values() for k in _keys(v)}
    if isinstance(obj, list):
        return {k for v in obj for k in _keys(v)}
    return set()


def test_default_secret_noise_differs_between_runs_and_no_seed_is_released(data_root: Path) -> None:
    # issue #15: with seed 0 in the released JSON the noise was regenerated and every record recovered.
    # Secret mode (params.yaml's default) draws from OS entropy: two runs of the same configuration
    # differ, and the released report holds no seed (nor a hash of the private data).
    assert yaml.safe_load((REPO / "params.yaml").read_text())["privacy_noise"] == "secret"
    params = _params(data_root, {"g": GAUSS}, noise="secret")
    rep = privatize(params, "g")
    npz, js = privatized_paths(data_root, "g")
    first = load_processed(npz).x_train.copy()
    privatize(params, "g")
    second = load_processed(npz).x_train
    assert not np.array_equal(first, second)
    # each is still the mechanism: same noise level, different draws (800,000 coordinates each)
    clean = project_l2_ball(to_records(load_processed(data_root / "processed" / "manifold2d_half_circle.npz").x_train), 1.0)
    for x in (first, second):
        assert (x.astype(np.float64) - clean).std() == pytest.approx(rep["noise_scale"], rel=0.01)
    released = read_json(js)
    assert not any("seed" in k.lower() for k in _keys(released))
    assert "sha256" not in json_text(js)
    assert released["noise"] == {"mode": "secret", "private": True, "source": released["noise"]["source"]}
    assert "entropy" in released["noise"]["source"]


def json_text(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def test_secret_laplace_privatize_draws_its_noise_from_the_generator_the_stage_hands_it(
        data_root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The Laplace path at the stage level (the Gaussian one: the secret-noise test above): the privatize stage
    draws a fresh secret generator (NoiseSource.numpy_rng), and the released records are the projection plus
    exactly the Laplace draws of THAT generator -- replayed from a copy of its state taken when it was handed
    over. A mechanism that ignored it (an int seed, a generator of its own) would release other noise, which
    anyone could regenerate from the code."""
    import copy

    from dpsynth.privacy.randomness import NoiseSource

    handed: list[np.random.Generator] = []
    original = NoiseSource.numpy_rng

    def spy(self: NoiseSource, stream: int) -> np.random.Generator:
        rng = original(self, stream)
        handed.append(copy.deepcopy(rng))  # its state before any draw
        return rng

    monkeypatch.setattr(NoiseSource, "numpy_rng", spy)
    lap = {"method": "entropic_wgan", "dataset": "manifold2d_half_circle",
           "local": {"mechanism": "laplace", "epsilon": 5.0, "radius": 1.0},
           "hparams": {"generator": "mlp", "loss": "entropic"}}
    params = _params(data_root, {"lap_secret": lap}, noise="secret")
    rep = privatize(params, "lap_secret")
    assert rep["mechanism"] == "laplace" and rep["noise"]["mode"] == "secret" and len(handed) == 1
    npz, _ = privatized_paths(data_root, "lap_secret")
    released = load_processed(npz).x_train.astype(np.float64)
    clean = to_records(load_processed(data_root / "processed" / "manifold2d_half_circle.npz").x_train)
    proj = project_l1_ball(clean.astype(np.float64), 1.0)
    replay = handed[0].laplace(0.0, rep["noise_scale"], size=proj.shape)
    assert np.allclose(released - proj, replay, rtol=0, atol=1e-5)  # float32 records
    assert not np.allclose(released - proj, np.random.default_rng(0).laplace(0.0, rep["noise_scale"], size=proj.shape),
                           rtol=0, atol=1e-2)
