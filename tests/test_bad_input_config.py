"""Bad input that used to pass silently or with a vague message: duplicate YAML keys, duplicate
experiments, numerically equal sweep values, a partial CelebA folder and a mistyped dataset name."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import yaml

from dpsynth.config import UniqueKeyLoader, check_yaml_file, load_params, load_yaml, parse_params
from dpsynth.data.celeba import ATTR_FILE, IMAGE_DIR, PARTITION_FILE
from dpsynth.data.dataset import load_processed
from dpsynth.data.prepare import Sources, prepare
from dpsynth.data.registry import DATASETS, suggest_datasets
from dpsynth.errors import ConfigError, DataError
from tests.conftest import REPO, require, run_cli, venv_bin

SHIPPED = (REPO / "params.yaml").read_text(encoding="utf-8")
EXPERIMENT = "  dps_fmnist:\n    method: dp_sinkhorn\n"


def _line_of(text: str, needle: str) -> int:
    return text[:text.index(needle)].count("\n") + 1


def shipped_with(tmp_path: Path, old: str, new: str) -> tuple[Path, str]:
    """The shipped params.yaml with one edit (asserted to apply), written to tmp_path."""
    assert SHIPPED.count(old) == 1, old
    text = SHIPPED.replace(old, new)
    p = tmp_path / "params.yaml"
    p.write_text(text, encoding="utf-8")
    return p, text


# --------------------------------------------------------------------------- 1. duplicate keys


def _second_privacy(tmp_path: Path) -> tuple[Path, str, tuple[int, int]]:
    """A second `privacy:` in dps_fmnist (before the real one): YAML kept the last one silently."""
    p, text = shipped_with(tmp_path, EXPERIMENT, EXPERIMENT.replace(
        "    method", "    privacy: {epsilon: 1000, delta: 1.0e-5, sigma: 1.1}\n    method"))
    block = text.index(EXPERIMENT.split("\n")[0])
    first = text[:text.index("    privacy:", block)].count("\n") + 1
    second = text[:text.index("    privacy:", text.index("    privacy:", block) + 1)].count("\n") + 1
    return p, text, (first, second)


def test_duplicate_key_is_refused_by_config_check(tmp_path):
    p, _, (first, second) = _second_privacy(tmp_path)
    res = run_cli("config", "check", str(p))
    assert res.returncode == 2, res.stdout + res.stderr
    assert "Traceback" not in res.stderr
    assert str(p) in res.stderr
    assert "duplicate key 'privacy' at experiments.dps_fmnist.privacy" in res.stderr
    assert f"lines {first} and {second}" in res.stderr


def test_duplicate_key_function_names_file_path_and_lines(tmp_path):
    p, _, (first, second) = _second_privacy(tmp_path)
    for fn in (load_yaml, check_yaml_file, load_params):
        with pytest.raises(ConfigError) as info:
            fn(p)
        msg = str(info.value)
        assert msg.startswith(f"{p}: duplicate key 'privacy' at experiments.dps_fmnist.privacy "
                              f"(lines {first} and {second})"), msg


def test_duplicate_keys_anywhere_are_all_reported(tmp_path):
    p = tmp_path / "x.yaml"
    p.write_text("a: 1\nb:\n  c: 2\n  c: 3\nl:\n  - {k: 1, k: 2}\na: 4\n1: x\n1.0: y\n")
    with pytest.raises(ConfigError) as info:
        load_yaml(p)
    msg = str(info.value)
    for want in ("'a' at a (lines 1 and 7)", "'c' at b.c (lines 3 and 4)", "'k' at l[0].k (lines 6 and 6)",
                 "'1.0' at 1.0 (lines 8 and 9)"):
        assert want in msg, msg


def test_merge_key_override_is_not_a_duplicate(tmp_path):
    """`{<<: *anchor, loss: exact}` overrides a merged key on purpose (params.yaml does it)."""
    text = "base: &b {x: 1, y: 2}\nuse: {<<: *b, y: 3}\nagain: *b\n"
    assert yaml.load(text, Loader=UniqueKeyLoader) == {"base": {"x": 1, "y": 2}, "use": {"x": 1, "y": 3},
                                                        "again": {"x": 1, "y": 2}}
    check_yaml_file(REPO / "params.yaml")
    assert load_params(REPO / "params.yaml").model_dump() == parse_params(yaml.safe_load(SHIPPED)).model_dump()


def test_snakemake_refuses_duplicate_key(tmp_path):
    """Snakemake loads params.yaml itself (`configfile:`); the Snakefile runs the same check first. Fails while
    parsing the workflow, so nothing is run."""
    snakemake = venv_bin("snakemake")
    require(Path(snakemake).exists(), f"snakemake not installed at {snakemake} (a dependency: make env installs it)")
    shutil.copy(REPO / "Snakefile", tmp_path / "Snakefile")
    shutil.copytree(REPO / "workflow", tmp_path / "workflow")
    _second_privacy(tmp_path)
    res = subprocess.run([snakemake, "-n"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert res.returncode != 0
    assert "duplicate key 'privacy' at experiments.dps_fmnist.privacy" in res.stdout + res.stderr


def _merge_key_bomb(levels: int = 39) -> str:
    """~2 KB of nested merge keys: each level merges the one below four times (4^39 values once flattened)."""
    lines = ["a0: &a0 {x: 1}"] + [f"a{i}: &a{i} {{<<: [*a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}], y{i}: 1}}"
                                  for i in range(1, levels + 1)]
    return "\n".join(lines) + "\n"


@pytest.mark.timeout(240)  # a fault in the expansion counter hangs: it must fail instead
def test_a_merge_key_bomb_is_refused_in_one_line_before_anything_is_built(tmp_path):
    """Issue 63 item 9: a 2 KB file of nested merge keys (``<<``) hung config check, privatize and `snakemake -n`
    (PyYAML's merge flattening copies each merged mapping). The loader counts what the file's aliases and merge
    keys add on the composed nodes and refuses past a million values; params.yaml's add a few hundred, so the
    limit is far from both. The alias bomb (lists of lists of aliases) is refused the same way."""
    from dpsynth.config.loader import MAX_ALIAS_VALUES, alias_expansion, expanded_size

    shipped = yaml.compose((REPO / "params.yaml").read_text(), Loader=UniqueKeyLoader)
    assert expanded_size(shipped) < 10_000 and alias_expansion(shipped) < 2_000
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text(_merge_key_bomb())
    assert len(bomb.read_bytes()) < 2500
    res = run_cli("config", "check", str(bomb), cwd=tmp_path, timeout=60)
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert res.stderr.strip().splitlines() == [f"dpsynth: error: {bomb}: its aliases and merge keys (<<) expand to "
                                               f"more than {MAX_ALIAS_VALUES:,} values beyond what the file writes "
                                               "out (an alias or merge-key bomb); nothing was built from it"]
    snakemake = venv_bin("snakemake")
    require(Path(snakemake).exists(), f"snakemake not installed at {snakemake} (a dependency: make env installs it)")
    shutil.copy(REPO / "Snakefile", tmp_path / "Snakefile")
    shutil.copytree(REPO / "workflow", tmp_path / "workflow")
    shutil.copy(bomb, tmp_path / "params.yaml")
    res = subprocess.run([snakemake, "-n"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert res.returncode != 0 and "merge-key bomb" in res.stdout + res.stderr


def _bounded(code: str, timeout: float) -> subprocess.CompletedProcess[str]:
    """``code`` in a Python of its own, with a timeout and at most 2 GiB of data: a counter that loops (its stack
    growing without end) fails in seconds instead of hanging, or filling the machine's memory."""
    import resource
    import sys

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_DATA, (2 << 30, 2 << 30))

    try:
        return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout,
                              preexec_fn=limit, env={**os.environ, "OPENBLAS_NUM_THREADS": "1"})
    except subprocess.TimeoutExpired:
        pytest.fail(f"still running after {timeout} s: {code}")


def test_both_bombs_are_refused_in_milliseconds(tmp_path):
    """The merge-key bomb and the alias bomb (lists of lists of aliases): refused in well under a second (measured
    0.01 s; an unmemoized counter runs for hours), each by the limit on what aliases and merge keys add."""
    from dpsynth.config.loader import MAX_ALIAS_VALUES

    bomb = tmp_path / "bomb.yaml"
    bomb.write_text(_merge_key_bomb())
    alias = tmp_path / "alias.yaml"
    alias.write_text("a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{c}: &{c} [*{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}]\n" for p, c in zip("abcdefgh", "bcdefghi")))
    for f in (bomb, alias):
        res = _bounded("import time; from dpsynth.config.loader import load_yaml\nt0 = time.perf_counter()\n"
                       f"try:\n    load_yaml({str(f)!r})\nexcept Exception as e:\n    print(time.perf_counter() - t0, e)",
                       timeout=60)
        took, _, said = res.stdout.strip().partition(" ")
        assert res.returncode == 0 and float(took) < 5, res.stdout + res.stderr[-2000:]
        assert f"expand to more than {MAX_ALIAS_VALUES:,} values beyond" in said, said


def test_the_expansion_counter_stops_on_a_node_that_contains_itself():
    """Behind the event scan (which names the anchor), the counter itself refuses a node inside itself."""
    for text in ("lol: &r [*r]\n", "a: &m\n  b: {c: *m}\n"):
        res = _bounded("import yaml\nfrom dpsynth.config.loader import UniqueKeyLoader, ExpansionError, expanded_size\n"
                       f"try:\n    expanded_size(yaml.compose({text!r}, Loader=UniqueKeyLoader))\n"
                       "except ExpansionError as e:\n    print(e)", timeout=60)
        assert res.returncode == 0 and "contains itself" in res.stdout, res.stdout + res.stderr[-2000:]


@pytest.mark.timeout(240)  # the recursive alias hung every reader: it must fail instead
@pytest.mark.parametrize("text, anchor, line", [("lol: &r [*r]\n", "r", 1),
                                                ("a: 1\nb: &m\n  c: [1, {d: *m}]\n", "m", 2),
                                                ("base: &s\n  x: 1\n  <<: *s\n", "s", 1)])
def test_a_recursive_alias_is_refused_in_one_line_naming_the_anchor(tmp_path, text, anchor, line):
    """Issue 71 item 2: ``lol: &r [*r]`` (13 bytes) made `dpsynth config check`, `dpsynth privatize` and `snakemake
    -n` run until killed, with no output: the expansion counter looped on a node that contains itself. Any alias
    inside the collection its anchor names -- a list, a nested mapping, a merge key -- is refused in one line
    naming the anchor and its line, before anything is built; and the counter itself stops on such a node."""
    path = tmp_path / "params.yaml"
    path.write_text(text)
    want = f"dpsynth: error: {path}: the alias *{anchor} (line "
    res = run_cli("config", "check", str(path), cwd=tmp_path, timeout=60)
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 2 and len(lines) == 1 and lines[0].startswith(want), res.stderr
    assert f"lies inside the anchor &{anchor} it names (line {line}): a recursive alias" in lines[0], lines[0]
    res = run_cli("privatize", "ewgan_half_circle_gauss", "--params", str(path), cwd=tmp_path, timeout=60)
    assert res.returncode == 2 and res.stderr.strip().splitlines()[-1].startswith(want), res.stderr
    snakemake = venv_bin("snakemake")
    require(Path(snakemake).exists(), f"snakemake not installed at {snakemake} (a dependency: make env installs it)")
    shutil.copy(REPO / "Snakefile", tmp_path / "Snakefile")
    shutil.copytree(REPO / "workflow", tmp_path / "workflow")
    res = subprocess.run([snakemake, "-n"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert res.returncode != 0 and f"lies inside the anchor &{anchor}" in res.stdout + res.stderr


@pytest.mark.timeout(240)
def test_a_large_file_with_no_alias_is_no_bomb(tmp_path):
    """A file of more than a million plain values and no alias was refused as "an alias or merge-key bomb": the
    limit counts what aliases and merge keys add, so such a file is read like any other (its size is no bomb;
    here params.yaml's validation then names what is wrong with it)."""
    from dpsynth.config.loader import MAX_ALIAS_VALUES

    path = tmp_path / "params.yaml"
    path.write_text(SHIPPED + "padding: [" + "1, " * (MAX_ALIAS_VALUES + 1000) + "1]\n")
    assert len(load_yaml(path)["padding"]) == MAX_ALIAS_VALUES + 1001
    res = run_cli("config", "check", str(path), cwd=tmp_path, timeout=200)
    assert res.returncode == 2 and "bomb" not in res.stderr and "padding" in res.stderr, res.stderr[-2000:]


# --------------------------------------------------------------------------- 2. an experiment twice


def test_experiment_defined_twice_is_refused(tmp_path):
    again = EXPERIMENT + "    dataset: fashion_mnist\n    privacy: {epsilon: 1000, delta: 1.0e-5, sigma: 1.1}\n"
    p, text = shipped_with(tmp_path, "experiments:\n", "experiments:\n" + again)
    first = _line_of(text, "  dps_fmnist:")
    second = text.count("\n", 0, text.index("  dps_fmnist:", text.index("  dps_fmnist:") + 1)) + 1
    res = run_cli("config", "check", str(p))
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert f"duplicate key 'dps_fmnist' at experiments.dps_fmnist (lines {first} and {second})" in res.stderr


# --------------------------------------------------------------------------- 3. equal sweep values


def _with_sweep(sweep: dict) -> dict:
    raw = yaml.safe_load(SHIPPED)
    raw["sweeps"]["pm_fmnist_quick"] = {"base": "dps_fmnist", **sweep}
    return raw


@pytest.mark.parametrize("values, shown", [([1, 1.0], "1 and 1.0"), ([0.3, 1.0e-5, 0.00001], "1e-05 and 1e-05"),
                                           ([0.5, 1, 1], "1 and 1")])
def test_sweep_grid_with_equal_values_is_refused(values, shown):
    with pytest.raises(ConfigError) as info:
        parse_params(_with_sweep({"grid": {"p": [0.2], "m": values}}))
    msg = str(info.value)
    assert "sweeps.pm_fmnist_quick.grid.m: values" in msg and shown in msg, msg


def test_sweep_cells_with_equal_values_are_refused(tmp_path):
    cells = [{"p": 0.2, "m": 1}, {"p": 0.5, "m": 1}, {"p": 0.2, "m": 1.0}]
    with pytest.raises(ConfigError) as info:
        parse_params(_with_sweep({"cells": cells}))
    msg = str(info.value)
    assert "sweeps.pm_fmnist_quick.cells: cells 0 {'p': 0.2, 'm': 1} and 2 {'p': 0.2, 'm': 1.0} are equal" in msg
    p, _ = shipped_with(tmp_path, "grid: {p: [0.2, 0.5], m: [1]}\n", "grid: {p: [0.2, 0.5], m: [1, 1.0]}\n")
    res = run_cli("config", "check", str(p))
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert "sweeps.pm_mnist_quick.grid.m: values 1 and 1.0" in res.stderr


def test_distinct_sweep_values_still_expand():
    params = parse_params(_with_sweep({"grid": {"p": [0.2, 1.0], "m": [1, 3.0]}}))
    assert len(params.cells_of("pm_fmnist_quick")) == 4


# --------------------------------------------------------------------------- 4. partial CelebA folder


def _celeba_without(root: Path, missing: str) -> None:
    """The three entries in the official layout (the text files in Anno/ and Eval/), less one."""
    root.mkdir()
    if missing != IMAGE_DIR:
        (root / IMAGE_DIR).mkdir()
    for name, sub in ((ATTR_FILE, "Anno"), (PARTITION_FILE, "Eval")):
        if missing != name:
            (root / sub).mkdir()
            (root / sub / name).write_text("1\n")


@pytest.mark.parametrize("missing", [IMAGE_DIR, ATTR_FILE, PARTITION_FILE])
def test_partial_celeba_folder_names_the_missing_entry(tmp_path, missing):
    folder = tmp_path / "celeba"
    _celeba_without(folder, missing)
    with pytest.raises(DataError) as info:
        prepare("celeba", Sources(root=tmp_path / "data", celeba_dir=folder))
    msg = str(info.value)
    assert msg.startswith("CelebA incomplete:"), msg
    lacks = msg.split(f"{folder} lacks ", 1)[1].split(";", 1)[0].split(". Download", 1)[0]
    assert missing in lacks, msg
    assert all(other not in lacks for other in {IMAGE_DIR, ATTR_FILE, PARTITION_FILE} - {missing}), msg
    assert f"{tmp_path / 'data' / 'raw' / 'celeba'} does not exist" in msg  # the other folder searched


def test_missing_celeba_folder_says_it_does_not_exist(tmp_path):
    with pytest.raises(DataError) as info:
        prepare("celeba", Sources(root=tmp_path / "data", celeba_dir=tmp_path / "nowhere"))
    assert str(info.value).startswith(f"CelebA not found: {tmp_path / 'nowhere'} does not exist")


# --------------------------------------------------------------------------- 5. a mistyped dataset name


def test_close_names_are_suggested():
    assert suggest_datasets("fmnist")[0] == "fashion_mnist"
    assert suggest_datasets("FashionMNIST")[0] == "fashion_mnist"
    assert suggest_datasets("celebA") == ["celeba"]
    assert set(suggest_datasets("manifold2d")) == {k for k in DATASETS if k.startswith("manifold2d")}
    assert suggest_datasets("cifar10") == []


def test_evaluate_real_with_unknown_dataset_suggests_the_registered_name(tmp_path):
    res = run_cli("evaluate", "--real", "fmnist", "--params", str(REPO / "params.yaml"), cwd=tmp_path)
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert "unknown dataset 'fmnist' (did you mean 'fashion_mnist'" in res.stderr
    assert "data prepare fmnist" not in res.stderr
    assert all(name in res.stderr for name in DATASETS)


def test_load_processed_of_unknown_name_gives_no_impossible_advice(tmp_path):
    with pytest.raises(DataError) as info:
        load_processed(tmp_path / "fmnist.npz")
    assert "data prepare" not in str(info.value) and "did you mean 'fashion_mnist'" in str(info.value)
    with pytest.raises(DataError, match="run `dpsynth data prepare mnist`"):
        load_processed(tmp_path / "mnist.npz")  # a registered name keeps its advice
    np.savez(tmp_path / "toy.npz", x_train=np.zeros((2, 1, 2, 2), np.uint8), y_train=np.zeros(2, np.int64),
             x_test=np.zeros((1, 1, 2, 2), np.uint8), y_test=np.zeros(1, np.int64), num_classes=1)
    assert load_processed(tmp_path / "toy.npz").num_classes == 1  # an existing file loads, whatever its name


def test_data_prepare_unknown_names_suggest_registered_ones(tmp_path):
    res = run_cli("data", "prepare", "fmnist", "celebA", "--root", str(tmp_path), cwd=tmp_path)
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert "unknown dataset 'fmnist' (did you mean 'fashion_mnist'" in res.stderr
    assert "unknown dataset 'celebA' (did you mean 'celeba'?" in res.stderr
    assert not (tmp_path / "processed").exists()


# --------------------------------------------------------------------------- issue 45: encoding and sizes


@pytest.mark.parametrize("where", ["comment", "value"])
def test_a_non_utf8_byte_is_named_by_file_offset_and_line(tmp_path, where):
    """A Latin-1 byte (a comment or a value saved by an editor in another encoding) is one line naming the
    file, the byte, its offset and line -- never a UnicodeDecodeError traceback."""
    text = SHIPPED.replace(EXPERIMENT, EXPERIMENT + ("    # caf\u00e9\n" if where == "comment" else ""), 1)
    if where == "value":
        text = text.replace("method: dp_sinkhorn\n", "method: dp_sinkhorn\n    note: caf\u00e9\n", 1)
    data = text.encode("latin-1")
    p = tmp_path / "params.yaml"
    p.write_bytes(data)
    offset = data.index(b"\xe9")
    line = data[:offset].count(b"\n") + 1
    with pytest.raises(ConfigError) as info:
        load_params(p)
    msg = str(info.value)
    assert msg.startswith(f"{p}: not UTF-8 text: byte 0xe9 at offset {offset} (line {line})"), msg


def test_sizes_are_bounded_with_a_clear_line():
    """n_synthetic 1e12 passed `config check` and `sample` then failed allocating 7.28 TiB."""
    raw = yaml.safe_load(SHIPPED)
    raw["scales"]["quick"]["n_synthetic"] = 10**12
    with pytest.raises(ConfigError, match=r"scales\.quick\.n_synthetic: Input should be less than or equal to "
                                          r"1000000 \(got 1000000000000\)"):
        parse_params(raw, source="params.yaml")
    raw = yaml.safe_load(SHIPPED)
    raw["scales"]["quick"]["n_synthetic_sets"] = 10**6
    with pytest.raises(ConfigError, match=r"scales\.quick\.n_synthetic_sets: Input should be less than or equal"):
        parse_params(raw, source="params.yaml")
