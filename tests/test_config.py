"""params.yaml validation: bad values fail before any work, name the key, and show no traceback."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from dpsynth.config import load_params, parse_params, resolve_privacy
from dpsynth.errors import ConfigError
from tests.conftest import REPO, clear_pipeline, run_cli


def shipped() -> dict:
    return yaml.safe_load((REPO / "params.yaml").read_text())


def write(tmp_path: Path, data: dict) -> Path:
    p = tmp_path / "params.yaml"
    p.write_text(yaml.safe_dump(data))
    return p


def test_shipped_params_are_valid():
    params = load_params(REPO / "params.yaml")
    assert params.scale in ("smoke", "quick", "paper")
    assert set(params.scales) == {"smoke", "quick", "paper", "paper_cpu", "paper_gpu"}
    # the CLI spells the scale names out (no pydantic at parse time): the same names as the config's
    from typing import get_args

    from dpsynth.cli.common import SCALE_CHOICES
    from dpsynth.config import ScaleName
    assert SCALE_CHOICES == get_args(ScaleName)
    # sweep cells are experiments too, with deterministic names
    cells = params.cells_of("pm_fmnist")
    assert len(cells) == 12 and "pm_fmnist-p0.2-m1" in cells and "pm_fmnist-p0.2-m0.3" in cells
    cell = params.all_experiments()["pm_fmnist-p0.2-m1"]
    assert (cell.hparams.p, cell.hparams.m) == (0.2, 1.0)
    assert params.all_experiments()["batch_sigma_mnist-sigma0.9-batch_size100"].privacy.sigma == 0.9


def test_sweep_names_follow_dvc_interpolation():
    """Cell names use str() of the YAML values in canonical key order: what DVC prints in a matrix."""
    from dpsynth.config import Sweep, sweep_cell_name

    assert sweep_cell_name("s", {"m": 1, "p": 0.0}) == "s-p0.0-m1"
    assert sweep_cell_name("s", {"lr": 1.0e-5, "optimizer": "adam"}) == "s-lr1e-05-optimizeradam"
    grid = Sweep(base="b", grid={"p": [0.0, 1.0], "m": [3]})
    assert [sweep_cell_name("s", c) for c in grid.cell_list()] == ["s-p0.0-m3", "s-p1.0-m3"]
    with pytest.raises(ValueError, match="write 1.0e-5"):
        Sweep(base="b", grid={"lr": ["1e-5"]})
    with pytest.raises(ValueError, match="same keys"):
        Sweep(base="b", cells=[{"p": 0.1}, {"m": 1}])
    with pytest.raises(ValueError, match="exactly one of grid"):
        Sweep(base="b")


def _break(data: dict, path: str, value) -> dict:
    node = data
    keys = path.split(".")
    for k in keys[:-1]:
        node = node[k]
    node[keys[-1]] = value
    return data


@pytest.mark.parametrize("path, value, key_in_message, reason", [
    ("experiments.dps_fmnist.privacy.epsilom", 3, "experiments.dps_fmnist.privacy.epsilom", "unknown key"),
    ("experiments.dps_fmnist.hparams.batch_size", "fifty", "experiments.dps_fmnist.hparams.batch_size", "integer"),
    ("experiments.dps_fmnist.privacy.epsilon", -1, "experiments.dps_fmnist.privacy.epsilon", "greater than 0"),
    ("experiments.dps_fmnist.hparams.p", 1.5, "experiments.dps_fmnist.hparams.p", "less than or equal to 1"),
    ("experiments.dps_fmnist.hparams.p", -0.1, "experiments.dps_fmnist.hparams.p", "greater than or equal to 0"),
    ("experiments.dps_fmnist.privacy.delta", 1.5, "experiments.dps_fmnist.privacy.delta", "less than 1"),
    ("sweeps.pm_fmnist.cells", [{"p": 3.0, "m": 1}], "sweeps.pm_fmnist", "less than or equal to 1"),
    ("scale", "huge", "scale", "smoke"),
    ("datasets", ["fashion_mnist", "nope"], "datasets", "unknown dataset 'nope'"),
    ("sweeps.pm_fmnist.base", "missing_exp", "sweeps.pm_fmnist.base", "unknown experiment 'missing_exp'"),
])
def test_bad_values_fail_with_key_and_exit_code(tmp_path, path, value, key_in_message, reason):
    p = write(tmp_path, _break(shipped(), path, value))
    res = run_cli("config", "check", str(p))
    assert res.returncode == 2
    assert key_in_message in res.stderr and reason in res.stderr, res.stderr
    assert "Traceback" not in res.stderr
    assert str(p) in res.stderr  # names the file too


def test_privacy_target_needs_exactly_one_of_sigma_and_steps():
    data = _break(shipped(), "experiments.dps_fmnist.privacy", {"epsilon": 10, "delta": 1e-5})
    with pytest.raises(ConfigError, match="exactly one of sigma"):
        parse_params(data)
    data = _break(shipped(), "experiments.dps_fmnist.privacy", {"enabled": False, "epsilon": 10})
    with pytest.raises(ConfigError, match="non-private"):
        parse_params(data)


def test_missing_file_and_bad_yaml(tmp_path):
    res = run_cli("config", "check", str(tmp_path / "nope.yaml"))
    assert res.returncode == 2 and "no such parameters file" in res.stderr
    bad = tmp_path / "bad.yaml"
    bad.write_text("scale: [unclosed\n")
    res = run_cli("config", "check", str(bad))
    assert res.returncode == 2 and "not valid YAML" in res.stderr and "Traceback" not in res.stderr


def test_scale_resolution_keeps_the_target():
    params = load_params(REPO / "params.yaml", scale="smoke")
    exp = params.experiments["dps_fmnist"]
    plan = resolve_privacy(exp, params.preset).record()
    assert plan == {"enabled": True, "mode": "calibrate_sigma", "epsilon": 10.0, "delta": 1e-5,
                    "steps": params.preset.train_steps, "paper_sigma": 1.1}
    paper = load_params(REPO / "params.yaml", scale="paper")
    assert resolve_privacy(exp, paper.preset).mode == "derive_steps"


def test_config_show_resolves_scale():
    res = run_cli("config", "show", "--scale", "smoke", "--format", "json", "--params", str(REPO / "params.yaml"))
    assert res.returncode == 0, res.stderr
    import json

    out = json.loads(res.stdout)
    assert out["resolved"]["scale"] == "smoke"
    assert out["resolved"]["preset"]["train_steps"] == out["scales"]["smoke"]["train_steps"]
    assert "pm_fmnist-p1.0-m1" in out["resolved"]["experiments"]


def test_scale_overrides_are_validated_and_recorded():
    from dpsynth.config import apply_preset

    params = load_params(REPO / "params.yaml", scale="quick")
    exp, changes = apply_preset(params.all_experiments()["sinkhorn_fmnist_nonprivate"], params.preset)
    assert exp.hparams.batch_size == params.preset.max_batch_size
    assert changes["batch_size"]["paper"] == 500 and changes["lr"]["this_scale"] == exp.hparams.lr
    paper = load_params(REPO / "params.yaml", scale="paper")
    assert apply_preset(paper.experiments["dps_fmnist"], paper.preset) == (paper.experiments["dps_fmnist"], {})
    # a bad override is refused when the file is read, not when a run reaches it
    with pytest.raises(ConfigError, match=r"scales\.quick\.hparams\.dp_sinkhorn\.p: Input should be less than or "
                                          r"equal to 1"):
        parse_params(_set(shipped(), "scales.quick.hparams.dp_sinkhorn", {"p": 7}))


@pytest.mark.parametrize("path, value, message", [
    # a key of another method: refused with its path and its owner, not accepted and ignored
    ("experiments.gswgan_fmnist.hparams.p", 0.5,
     "experiments.gswgan_fmnist.hparams.p: not a gs_wgan setting (it belongs to dp_sinkhorn); remove it"),
    ("experiments.dps_fmnist.hparams.loss", "exact",
     "experiments.dps_fmnist.hparams.loss: not a dp_sinkhorn setting (it belongs to entropic_wgan)"),
    ("experiments.dps_fmnist.hparams.clip_bound", 1.0, "experiments.dps_fmnist.hparams.clip_bound: unknown key"),
    ("experiments.gswgan_fmnist.hparams.optimizer", "sgd", "experiments.gswgan_fmnist.hparams.optimizer: Input "
     "should be 'adam'"),
    ("scales.quick.hparams.gs_wgan", {"temperature": 1.0},
     "scales.quick.hparams.gs_wgan.temperature: not a gs_wgan setting (it belongs to dp_sinkhorn)"),
    ("scales.quick.hparams.dp_sinkhornn", {"lr": 1.0}, "scales.quick.hparams.dp_sinkhornn: unknown method"),
    ("scales.quick.method_train_steps", {"gswgan": 3}, "scales.quick.method_train_steps.gswgan: unknown method"),
    ("experiments.gswgan_fmnist.method", "dp_sinkhorm", "experiments.gswgan_fmnist.method: unknown method (known: "
     "dp_sinkhorn, gs_wgan, entropic_wgan, dp_merf"),
    ("sweeps.gs_p", {"base": "gswgan_fmnist", "grid": {"p": [0.1, 0.2]}},
     "sweeps.gs_p (cell gs_p-p0.1).hparams.p: not a gs_wgan setting (it belongs to dp_sinkhorn)"),
    ("sweeps.gs_together", {"base": "gswgan_fmnist", "grid": {"lr": [1.0e-4, 2.0e-4]}, "train_together": True},
     "sweeps.gs_together.train_together: gs_wgan cells cannot be trained together (only dp_sinkhorn, entropic_wgan)"),
])
def test_each_method_takes_only_its_own_settings(path, value, message):
    """Per-method hyperparameter models (the method registry): before them, ``p`` on a GS-WGAN
    experiment was accepted and silently ignored."""
    with pytest.raises(ConfigError) as err:
        parse_params(_set(shipped(), path, value))
    assert message in str(err.value), str(err.value)


def _set(raw: dict, dotted: str, value) -> dict:
    node = raw
    *head, last = dotted.split(".")
    for k in head:
        node = node[k]
    node[last] = value
    return raw


@pytest.mark.parametrize("path, value, message", [
    ("pipeline.experiments", ["dps_fmnist", "nope"], "pipeline.experiments: unknown experiment 'nope'"),
    ("pipeline.experiments", ["dps_fmnist", "dps_fmnist"], "pipeline.experiments: duplicates in ['dps_fmnist', 'dps_fmnist']"),
    ("pipeline.sweeps", ["nope"], "pipeline.sweeps: unknown sweep 'nope'"),
    ("pipeline.targets", ["dps_fmnist"], "pipeline.targets: unknown key"),
    ("w2_noise.celeba", {"noise_levels": [0.5]}, "w2_noise.celeba: dataset 'celeba' is not in datasets"),
    ("w2_noise.fashion_mnist", {"noise_levels": [0.5, -1.0]}, "w2_noise.fashion_mnist.noise_levels.1"),
    ("w2_noise.fashion_mnist", {"noise_levels": []}, "w2_noise.fashion_mnist.noise_levels"),
    ("w2_noise.fashion_mnist", {"noise_levels": [1.0], "losses": ["exact", "l1"]}, "w2_noise.fashion_mnist.losses.1"),
])
def test_pipeline_target_errors_name_the_key(path, value, message):
    with pytest.raises(ConfigError, match=message.replace(".", r"\.").replace("(", r"\(").replace("[", r"\[")):
        parse_params(_set(shipped(), path, value))


@pytest.mark.parametrize("path, value, message", [
    ("pipeline.experiments", ["dps_fmnist", "dps_mnsit"],
     "params.yaml: pipeline.experiments: unknown experiment 'dps_mnsit'; did you mean 'dps_mnist'?"),
    ("pipeline.sweeps", ["pm_mnist_quik"], "params.yaml: pipeline.sweeps: unknown sweep 'pm_mnist_quik'; did you mean "
     "'pm_mnist_quick'?"),
    ("sweeps.pm_mnist.base", "dps_mnsit", "params.yaml: sweeps.pm_mnist.base: unknown experiment 'dps_mnsit'; did "
     "you mean 'dps_mnist'?"),
    ("tables.t", {"title": "t", "paper": "p", "experiments": ["dps_mnsit"]},
     "params.yaml: tables.t.experiments: unknown experiment 'dps_mnsit'; did you mean 'dps_mnist'?"),
    ("pipeline.experiments", ["zzz"], "params.yaml: pipeline.experiments: unknown experiment 'zzz'"),  # nothing close
])
def test_a_misspelt_name_gets_its_key_and_the_closest_name(path, value, message):
    """One line from the key where the misspelt name is to the name meant; not ``(top level):``,
    what a cross-reference error (found by the model's validator, which has no key) used to read."""
    with pytest.raises(ConfigError) as err:
        parse_params(_set(shipped(), path, value))
    assert str(err.value) == message
    assert "top level" not in str(err.value) and "\n" not in str(err.value)


def test_config_check_names_a_misspelt_experiment_in_one_line(tmp_path):
    p = write(tmp_path, _set(shipped(), "pipeline.experiments", ["dps_mnsit"]))
    res = run_cli("config", "check", str(p))
    assert res.returncode == 2
    line = f"{p}: pipeline.experiments: unknown experiment 'dps_mnsit'; did you mean 'dps_mnist'?"
    assert line in res.stderr and "Traceback" not in res.stderr and "top level" not in res.stderr, res.stderr
    assert len(res.stderr.strip().splitlines()) == 1, res.stderr


def test_sweep_target_on_a_dataset_not_prepared_names_it():
    raw = clear_pipeline(shipped())
    raw["datasets"] = ["fashion_mnist"]
    raw["evaluation"]["real_datasets"] = ["fashion_mnist"]
    raw["pipeline"]["sweeps"] = ["pm_mnist"]
    with pytest.raises(ConfigError, match="pipeline.sweeps: sweep 'pm_mnist' trains on 'mnist', which is not in datasets"):
        parse_params(raw)


def test_pipeline_targets_and_shared_warm_starts():
    """Sweep cells are targets; a GS-WGAN sigma sweep reuses its base's warm start, a batch-size
    sweep (which changes the critics) gets its own per cell."""
    raw = shipped()
    raw["sweeps"]["gs_sigma"] = {"base": "gswgan_fmnist", "grid": {"sigma": [0.8, 1.2]}}
    raw["sweeps"]["gs_batch"] = {"base": "gswgan_fmnist", "grid": {"batch_size": [16]}}
    raw["pipeline"]["sweeps"] = ["pm_fmnist_quick", "gs_sigma", "gs_batch"]
    params = parse_params(raw)
    targets = params.pipeline_targets()
    assert {"dps_fmnist", "gswgan_fmnist", "pm_fmnist_quick-p0.2-m1",
            "gs_sigma-sigma0.8", "gs_sigma-sigma1.2", "gs_batch-batch_size16"} <= set(targets)
    assert targets["gs_sigma-sigma0.8"].warmstart == "gswgan_fmnist"
    assert targets["gs_batch-batch_size16"].warmstart == "gs_batch-batch_size16"
    assert targets["pm_fmnist_quick-p0.2-m1"].warmstart is None
    assert targets["pm_fmnist_quick-p0.2-m1"].data == "processed/fashion_mnist"


def _with_sweep(grid: dict, base: str = "dps_mnist") -> dict:
    raw = yaml.safe_load((REPO / "params.yaml").read_text())
    raw["sweeps"]["s"] = {"base": base, "grid": grid}
    return raw


def test_epsilon_and_seed_sweeps_set_the_target_and_the_training_seed():
    p = parse_params(_with_sweep({"epsilon": [2.0], "seed": [3]}))
    cell = p.all_experiments()["s-epsilon2.0-seed3"]
    assert cell.privacy.epsilon == 2.0 and cell.seed == 3
    assert cell.privacy.delta == p.experiments["dps_mnist"].privacy.delta
    assert resolve_privacy(cell, p.preset).epsilon == 2.0  # sigma is calibrated to the new target


@pytest.mark.parametrize("grid, base, needle", [
    ({"epsilon": [1.0]}, "sinkhorn_mnist_nonprivate", "epsilon swept but base experiment"),
    ({"seed": [1.5]}, "dps_mnist", "seed sweep values must be whole numbers"),
    ({"seed": [-1]}, "dps_mnist", "seed sweep values must be whole numbers"),
])
def test_bad_epsilon_or_seed_sweeps_are_named(grid, base, needle):
    with pytest.raises(ConfigError, match=needle) as err:
        parse_params(_with_sweep(grid, base))
    assert "sweeps.s" in str(err.value)


def test_an_old_params_file_is_told_how_to_move_to_pipeline():
    """params.yaml before `pipeline:` listed targets, privatize, gswgan_targets, warmstarts and
    sweep_targets; loading one names the keys and prints the `pipeline:` line with its own names."""
    raw = shipped()
    raw.pop("pipeline")
    raw["targets"] = {"dps_fmnist": {"dataset": "fashion_mnist", "data": "processed/fashion_mnist"}}
    raw["gswgan_targets"] = {"gswgan_fmnist": {"dataset": "fashion_mnist", "data": "processed/fashion_mnist",
                                               "warmstart": "gswgan_fmnist"}}
    raw["warmstarts"] = {"gswgan_fmnist": "fashion_mnist"}
    raw["sweep_targets"] = ["pm_fmnist_quick"]
    with pytest.raises(ConfigError) as err:
        parse_params(raw, source="old.yaml")
    message = str(err.value)
    assert message.startswith("old.yaml: targets, gswgan_targets, warmstarts, sweep_targets: replaced by one list")
    assert "`pipeline: {experiments: [dps_fmnist, gswgan_fmnist], sweeps: [pm_fmnist_quick]}`" in message
    assert "dpsynth workflow dvc" in message and "\n" not in message


def test_what_is_privatized_and_warm_started_follows_from_the_experiments():
    params = parse_params(shipped())
    assert params.privatized_targets() == {"ewgan_half_circle_gauss": "manifold2d_half_circle"}
    assert params.warm_starts() == {"gswgan_mnist": "mnist", "gswgan_fmnist": "fashion_mnist"}
    targets = params.pipeline_targets()
    assert targets["ewgan_half_circle_gauss"].data == "privatized/ewgan_half_circle_gauss"
    assert targets["gswgan_fmnist"].warmstart == "gswgan_fmnist" and targets["dps_fmnist"].warmstart is None


@pytest.mark.parametrize("p", [0.2, 1e-3])
def test_a_private_adversarial_run_with_extra_images_is_refused_with_the_reason(p: float) -> None:
    """The adversarial variant's n' extra images (p > 0) get their gradient through the critics phi_j, each
    trained without noise on its partition, and the image sanitizer releases those rows clipped but not noised:
    a function of private records, released. Refused at config load, one line naming the key and the value;
    p 0, a non-private run and the param sanitizer (which noises the whole parameter gradient) are accepted."""
    raw = shipped()
    hp = raw["experiments"]["dps_celeba_adv"]["hparams"]
    assert hp["p"] == 0.0 and hp["adversarial"] is True  # the shipped run
    parse_params(raw)
    hp["p"] = p
    with pytest.raises(ConfigError) as exc:
        parse_params(raw, source="params.yaml")
    msg = str(exc.value)
    assert "\n" not in msg and msg.startswith(f"params.yaml: experiments.dps_celeba_adv: hparams.p {p:g}: the "
                                              "adversarial variant needs p 0"), msg
    assert "without noise" in msg
    del hp["p"]  # the default p (0.2) is refused too
    with pytest.raises(ConfigError, match="hparams.p 0.2"):
        parse_params(raw)
    hp["p"] = p
    parse_params({**raw, "experiments": {**raw["experiments"], "dps_celeba_adv": {
        **raw["experiments"]["dps_celeba_adv"], "hparams": {**hp, "sanitizer": "param"}}}})
    raw["experiments"]["sinkhorn_celeba_adv_nonprivate"]["hparams"]["p"] = p
    hp["p"] = 0.0
    parse_params(raw)
