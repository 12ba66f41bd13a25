"""Faults a user can cause or meet: damaged outputs, a full disk, a bad --device, stale sets.

Each must end in one clear line naming the file, option or value (exit 2, no traceback), must
destroy nothing good and must leave nothing half-written. The CLI runs in-process
(``dpsynth.cli.main``) so a fault can be injected with ``monkeypatch``; where a stray torch
warning could leak to stderr the CLI runs in a subprocess instead (pytest would swallow it).
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from dpsynth.cli import main
from tests.conftest import digits28_smoke_params, run_cli

EXP = "dps_digits"
STEPS = 4
MODELS = Path("models") / EXP
GEN = MODELS / "generator.pt"
PRIVACY = MODELS / "privacy.json"
SUMMARY = MODELS / "train_summary.json"
CKPT = Path("private/runs") / EXP / "checkpoint.pt"
SYNTH = Path("data/synthetic") / EXP
TRAIN = ["train", EXP, "--device", "cpu", "--no-progress", "--checkpoint-every", "2", "--json"]


def _params() -> dict:
    """Shipped params at the smoke scale, one 4-step DP-Sinkhorn experiment on the bundled digits28."""
    return digits28_smoke_params(EXP, STEPS)


def _cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """Run `dpsynth ARGS` in-process; return (exit code, stdout, stderr)."""
    capsys.readouterr()
    rc = main(list(args))
    out, err = capsys.readouterr()
    return rc, out, err


def _clean_failure(rc: int, err: str) -> None:
    assert rc == 2, err
    assert "Traceback" not in err and "weights_only" not in err, err
    assert err.strip().splitlines()[-1].startswith("dpsynth: error: "), err


def _bytes(root: Path, *paths: Path) -> dict[Path, bytes]:
    return {p: (root / p).read_bytes() for p in paths}


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A working directory with digits28 prepared and one finished training run."""
    d = tmp_path_factory.mktemp("finished")
    (d / "params.yaml").write_text(yaml.safe_dump(_params(), sort_keys=False))
    threads = torch.get_num_threads()
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(d)
        assert main(["data", "prepare", "digits28"]) == 0
        assert main(TRAIN) == 0
    torch.set_num_threads(threads)  # main pins torch's threads: a module fixture must not leak that
    for p in (GEN, PRIVACY, SUMMARY, CKPT):
        assert (d / p).is_file(), p
    return d


@pytest.fixture
def run(finished: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A private copy of the finished run, as the current directory."""
    d = tmp_path / "w"
    shutil.copytree(finished, d)
    monkeypatch.chdir(d)
    yield d


# --------------------------------------------------------------------------- 1: a finished run verifies its release


def test_intact_finished_run_is_already_done(run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = _bytes(run, GEN, PRIVACY, SUMMARY, CKPT)
    rc, out, err = _cli(capsys, *TRAIN)
    assert rc == 0, err
    assert json.loads(out)["already_done"] is True and "re-releasing" not in err
    assert _bytes(run, GEN, PRIVACY, SUMMARY, CKPT) == before


@pytest.mark.parametrize("damage", ["garbage", "other_weights", "missing"])
def test_damaged_generator_is_re_released_from_the_checkpoint(run: Path, capsys: pytest.CaptureFixture[str],
                                                              damage: str) -> None:
    """A garbage, foreign or missing generator.pt is not 'already done': the finished checkpoint
    re-releases the very same weights (no new training, no new privacy cost)."""
    good = (run / GEN).read_bytes()
    privacy = (run / PRIVACY).read_bytes()
    if damage == "garbage":
        (run / GEN).write_bytes(b"not a generator at all\n" * 10)
    elif damage == "other_weights":  # a valid generator file, but not the one this configuration released
        from dpsynth.methods.artifacts import load_generator, save_generator

        blob = torch.load(run / GEN, weights_only=True)
        g, _ = load_generator(run / GEN)
        with torch.no_grad():
            for p in g.parameters():
                p.add_(1.0)
        save_generator(run / GEN, g, blob["arch"], blob["meta"])
        assert (run / GEN).read_bytes() != good
    else:
        (run / GEN).unlink()
    rc, out, err = _cli(capsys, *TRAIN)
    assert rc == 0, err
    summary = json.loads(out)
    assert not summary.get("already_done") and summary["finished"] and summary["steps"] == STEPS
    assert "re-releasing from the finished checkpoint" in err and str(CKPT) in err
    assert (run / GEN).read_bytes() == good  # the checkpoint's weights, bit for bit
    assert (run / PRIVACY).read_bytes() == privacy
    assert json.loads((run / SUMMARY).read_text())["steps"] == STEPS
    rc, out, err = _cli(capsys, *TRAIN)  # and now it is done
    assert rc == 0 and json.loads(out)["already_done"] is True, err


@pytest.mark.parametrize("name,content", [("train_summary.json", None), ("train_summary.json", b"{trunc"),
                                          ("privacy.json", b"\x00\x01garbage"), ("privacy.json", None)])
def test_missing_or_unreadable_report_is_not_done(run: Path, capsys: pytest.CaptureFixture[str], name: str,
                                                  content: bytes | None) -> None:
    path = MODELS / name
    good = (run / path).read_bytes()
    if content is None:
        (run / path).unlink()
    else:
        (run / path).write_bytes(content)
    rc, out, err = _cli(capsys, *TRAIN)
    assert rc == 0, err
    assert not json.loads(out).get("already_done") and str(path) in err
    assert json.loads((run / path).read_text())  # rewritten, readable
    if name == "privacy.json":
        assert (run / path).read_bytes() == good


def test_garbage_generator_without_checkpoint_retrains(run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """No finished checkpoint to re-release from: the run trains again (a released file alone proves nothing)."""
    (run / GEN).write_bytes(b"garbage")
    (run / CKPT).unlink()
    rc, out, err = _cli(capsys, *TRAIN)
    assert rc == 0, err
    assert json.loads(out)["finished"] and not json.loads(out).get("already_done")
    from dpsynth.methods.artifacts import load_generator

    load_generator(run / GEN)


def test_garbage_checkpoint_refuses_clearly(run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (run / GEN).write_bytes(b"garbage")
    (run / CKPT).write_bytes(b"\x80\x04garbage checkpoint")
    rc, _, err = _cli(capsys, *TRAIN)
    _clean_failure(rc, err)
    assert f"{CKPT}: not a valid dpsynth checkpoint" in err and "delete it to restart training" in err


# --------------------------------------------------------------------------- 2: loading a bad generator


def _weights_only_refuses(path: Path) -> None:
    """A file only full unpickling could load: torch's refusal advises weights_only=False."""
    torch.save({"format": "dpsynth-generator/1", "arch": argparse.Namespace(name="dcgan")}, path)


@pytest.mark.parametrize("kind", ["garbage", "needs_unpickling", "truncated", "wrong_format", "wrong_weights"])
def test_sample_refuses_a_bad_generator_without_weights_only_advice(run: Path, kind: str) -> None:
    path = run / GEN
    if kind == "garbage":
        path.write_bytes(os.urandom(300))
    elif kind == "needs_unpickling":
        _weights_only_refuses(path)
    elif kind == "truncated":
        data = path.read_bytes()
        path.write_bytes(data[: len(data) // 2])
    elif kind == "wrong_format":
        torch.save({"weights": torch.zeros(3)}, path)
    else:
        blob = torch.load(path, weights_only=True)
        blob["state_dict"] = {k: v[..., :1] if v.dim() else v for k, v in blob["state_dict"].items()}
        torch.save(blob, path)
    res = run_cli("sample", EXP, cwd=run)  # a subprocess: torch's warnings would reach stderr here
    assert res.returncode == 2, res.stderr
    assert "Traceback" not in res.stderr and "weights_only" not in res.stderr, res.stderr
    assert f"dpsynth: error: {GEN}: not a valid dpsynth generator" in res.stderr, res.stderr
    assert f"re-run `dpsynth train {EXP}`" in res.stderr, res.stderr
    assert not (run / SYNTH).exists()


def test_load_errors_never_carry_torch_advice(tmp_path: Path) -> None:
    from dpsynth.errors import DpsynthError
    from dpsynth.methods.artifacts import load_generator
    from dpsynth.methods.checkpoint import Checkpointer
    from dpsynth.methods.gswgan_critics import load_critics

    bad = tmp_path / "run" / "generator.pt"
    bad.parent.mkdir()
    _weights_only_refuses(bad)
    with pytest.raises(DpsynthError) as e:
        load_generator(bad)
    assert "weights_only" not in str(e.value) and str(bad) in str(e.value)
    ckpt = tmp_path / "checkpoint.pt"
    ckpt.write_bytes(b"garbage")
    with pytest.raises(DpsynthError, match="not a valid dpsynth checkpoint") as e:
        Checkpointer(ckpt).load()
    assert "weights_only" not in str(e.value) and str(ckpt) in str(e.value)
    (tmp_path / "ws").mkdir()
    _weights_only_refuses(tmp_path / "ws" / "critics.pt")
    with pytest.raises(DpsynthError, match="not a valid GS-WGAN warm-start artifact") as e:
        load_critics(tmp_path / "ws", {}, "", torch.device("cpu"), "gswgan_x")
    assert "weights_only" not in str(e.value) and "rerun `dpsynth warmstart gswgan_x`" in str(e.value)


# --------------------------------------------------------------------------- 3: a full disk


def _full_savez(fh: object, **arrays: object) -> None:
    """np.savez_compressed that writes a little, then meets a full disk (as the OS reports it)."""
    fh.write(b"PK\x03\x04partial")  # type: ignore[attr-defined]
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def test_disk_full_during_prepare_is_one_clear_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(np, "savez_compressed", _full_savez)
    rc, _, err = _cli(capsys, "data", "prepare", "digits")
    _clean_failure(rc, err)
    npz = Path("data/processed/digits.npz")
    assert f"no space left on device while writing {npz}" in err, err
    assert list((tmp_path / "data/processed").iterdir()) == []  # no half file, no temporary


@pytest.mark.parametrize("edquot", [False, True])
def test_disk_full_while_releasing_keeps_the_good_outputs(run: Path, monkeypatch: pytest.MonkeyPatch,
                                                           capsys: pytest.CaptureFixture[str], edquot: bool) -> None:
    """torch.save into a file handle on a full disk raises the OS's OSError (no file name)."""
    (run / SUMMARY).unlink()  # the finished run re-releases ...
    before = _bytes(run, GEN, PRIVACY, CKPT)
    code = errno.EDQUOT if edquot else errno.ENOSPC

    def full(obj: object, f: object, *a: object, **k: object) -> None:
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(torch, "save", full)  # ... and its generator does not fit
    rc, _, err = _cli(capsys, *TRAIN)
    _clean_failure(rc, err)
    assert f"no space left on device{' (disk quota exceeded)' if edquot else ''} while writing {GEN}" in err, err
    assert _bytes(run, GEN, PRIVACY, CKPT) == before
    assert not [p for p in (run / MODELS).iterdir() if p.name.endswith(".tmp")]


@pytest.mark.parametrize("free", [0, 10 << 30])
def test_torch_runtime_error_on_a_full_disk_names_the_checkpoint(
        finished: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        free: int) -> None:
    """torch.save into a path raises RuntimeError without an errno: the file is named, and it is
    called a full disk when the disk is full, a failed write otherwise."""
    import dpsynth.methods.artifacts as base

    shutil.copytree(finished / "data", tmp_path / "data")
    shutil.copy(finished / "params.yaml", tmp_path)
    monkeypatch.chdir(tmp_path)
    real = torch.save

    def save(obj: object, f: object, *a: object, **k: object) -> None:
        if Path(getattr(f, "name", str(f))).name.startswith(".checkpoint.pt."):
            raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 704 vs 598")
        real(obj, f, *a, **k)

    monkeypatch.setattr(torch, "save", save)
    usage = type(shutil.disk_usage("."))
    monkeypatch.setattr(base.shutil, "disk_usage", lambda p: usage(1 << 40, 1 << 40, free))
    rc, _, err = _cli(capsys, *TRAIN)
    _clean_failure(rc, err)
    if free == 0:
        assert f"no space left on device while writing {CKPT}" in err, err
    else:
        assert f"{CKPT}: writing failed (" in err and "free space" in err, err
    assert not (tmp_path / CKPT).exists() and not (tmp_path / GEN).exists()
    assert not [p for p in (tmp_path / CKPT.parent).iterdir() if p.name.endswith(".tmp")]


# --------------------------------------------------------------------------- 4: re-preparing keeps the old pair


def test_disk_full_while_re_preparing_keeps_the_old_dataset(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["data", "prepare", "digits"]) == 0
    processed = tmp_path / "data/processed"
    before = {p.name: p.read_bytes() for p in processed.iterdir()}
    assert set(before) == {"digits.npz", "digits.json"}
    monkeypatch.setattr(np, "savez_compressed", _full_savez)
    rc, _, err = _cli(capsys, "data", "prepare", "digits")
    _clean_failure(rc, err)
    assert "no space left on device while writing data/processed/digits.npz" in err
    assert {p.name: p.read_bytes() for p in processed.iterdir()} == before  # both intact, no temporaries


def test_failed_re_prepare_never_unlinks_the_old_json(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The order alone, without the CLI: the old pair is untouched until the new one is complete."""
    from dpsynth.data.prepare import Sources, prepare

    prepare("digits", Sources(root=tmp_path))
    processed = tmp_path / "processed"
    before = {p.name: p.read_bytes() for p in processed.iterdir()}
    monkeypatch.setattr(np, "savez_compressed", _full_savez)
    with pytest.raises(OSError) as e:
        prepare("digits", Sources(root=tmp_path))
    assert {p.name: p.read_bytes() for p in processed.iterdir()} == before
    assert e.value.errno == errno.ENOSPC and e.value.filename == str(processed / "digits.npz")


def test_re_preparing_replaces_the_pair(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["data", "prepare", "digits"]) == 0
    processed = tmp_path / "data/processed"
    (processed / "digits.json").write_text("{}")
    assert main(["data", "prepare", "digits"]) == 0
    assert json.loads((processed / "digits.json").read_text())["dataset"] == "digits"
    assert sorted(p.name for p in processed.iterdir()) == ["digits.json", "digits.npz"]


# --------------------------------------------------------------------------- 5: --device


@pytest.mark.parametrize("stage", ["train", "warmstart", "evaluate"])
@pytest.mark.parametrize("device,message", [
    ("tpu", "--device 'tpu': unknown device; use auto"),
    ("cuda:99", "--device 'cuda:99': "),
    ("cpu:3", "--device 'cpu:3': there is one CPU device"),
])
def test_bad_device_is_refused_up_front(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                        capsys: pytest.CaptureFixture[str], stage: str, device: str,
                                        message: str) -> None:
    monkeypatch.chdir(tmp_path)  # no params, no data: the device is checked before anything else
    rc, _, err = _cli(capsys, stage, EXP, "--device", device)
    _clean_failure(rc, err)
    assert message in err and "(available here: auto, cpu" in err, err


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
@pytest.mark.parametrize("stage", ["train", "evaluate"])
def test_cuda_without_a_gpu_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                       capsys: pytest.CaptureFixture[str], stage: str) -> None:
    monkeypatch.chdir(tmp_path)
    rc, _, err = _cli(capsys, stage, EXP, "--device", "cuda")
    _clean_failure(rc, err)
    assert "--device 'cuda': CUDA is not available on this machine (available here: auto, cpu)" in err, err


def test_good_devices_resolve() -> None:
    from dpsynth.stages.common import resolve_device

    assert resolve_device("cpu") == torch.device("cpu")
    assert resolve_device("auto") == torch.device("cuda" if torch.cuda.is_available() else "cpu")


# --------------------------------------------------------------------------- 6: sample leaves exactly its sets


def test_sample_leaves_exactly_the_sets_of_this_run(run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A paper-scale run's seed1..seed4 must not outlive a smoke/quick-scale sample (one set)."""
    synth = run / SYNTH
    synth.mkdir(parents=True)
    for k in range(5):
        (synth / f"seed{k}.npz").write_bytes(b"paper-scale set %d" % k)
    (synth / ".seed1.npz.x1y2.npz.tmp").write_bytes(b"a killed write")
    rc, out, err = _cli(capsys, "sample", EXP)
    assert rc == 0, err
    assert sorted(p.name for p in synth.iterdir()) == ["seed0.npz"]
    assert (synth / "seed0.npz").read_bytes()[:2] == b"PK"  # the new set, not the stale one


def test_sample_removes_stale_sets_only_after_writing(run: Path, monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    synth = run / SYNTH
    synth.mkdir(parents=True)
    stale = {"seed0.npz": b"old 0", "seed1.npz": b"old 1", "seed2.npz": b"old 2", ".seed3.npz.abc.npz.tmp": b"t"}
    for name, data in stale.items():
        (synth / name).write_bytes(data)
    (synth / "README.txt").write_text("not ours to remove")
    # a failed sample (full disk) removes nothing
    monkeypatch.setattr(np, "savez_compressed", _full_savez)
    rc, _, err = _cli(capsys, "sample", EXP)
    _clean_failure(rc, err)
    assert f"no space left on device while writing {SYNTH / 'seed0.npz'}" in err, err
    assert {p.name: p.read_bytes() for p in synth.iterdir() if p.name != "README.txt"} == stale
    monkeypatch.undo()
    monkeypatch.chdir(run)
    rc, out, err = _cli(capsys, "sample", EXP)  # smoke scale: one set
    assert rc == 0, err
    assert sorted(p.name for p in synth.iterdir()) == ["README.txt", "seed0.npz"]
    from dpsynth.evaluate.sampling import load_synthetic

    x, _, _ = load_synthetic(synth / "seed0.npz", (1, 28, 28), 10)
    assert len(x) == 500
    assert "removed" in out and "seed2.npz" in out
