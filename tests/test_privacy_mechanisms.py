"""The privacy mechanism registry (``dpsynth.privacy.mechanisms``): it lists every mechanism, each plans
exactly the (sigma, steps, guard) the methods planned before it existed (expected values computed here
with the accounting functions directly, the way each method called them), the local mechanisms carry
what config, the privatize stage and the entropic WGAN's loss used to compare names for, and an
unknown name is one clear error."""

from __future__ import annotations

import re
import subprocess
import sys
from types import SimpleNamespace

import numpy as np
import pytest

from dpsynth.config import PrivacyPlan
from dpsynth.config.run import BudgetReference
from dpsynth.errors import ConfigError, PrivacyError
from dpsynth.privacy import accounting as acc
from dpsynth.privacy import gswgan_accounting as gs
from dpsynth.privacy import mechanisms
from dpsynth.privacy.local import gaussian_mechanism, laplace_mechanism
from tests.conftest import REPO

MNIST_N, DELTA = 60_000, 1e-5


def _derive(sigma: float, eps: float = 10.0, delta: float = DELTA) -> PrivacyPlan:
    return PrivacyPlan(mode="derive_steps", epsilon=eps, delta=delta, sigma=sigma)


def _calibrate(steps: int, eps: float = 10.0, delta: float = DELTA, **kw: object) -> PrivacyPlan:
    return PrivacyPlan(mode="calibrate_sigma", epsilon=eps, delta=delta, steps=steps, **kw)


def _ctx(plan: PrivacyPlan, n: int = MNIST_N, **hparams: object) -> SimpleNamespace:
    """The parts of a TrainContext the methods' privacy schedules read."""
    h = {"batch_size": 50, "adversarial": False, "max_steps": None, **hparams}
    return SimpleNamespace(name="e", privacy_plan=plan, experiment=SimpleNamespace(hparams=SimpleNamespace(**h)),
                           data=SimpleNamespace(x_train=np.zeros((n, 1), np.uint8)))


# --------------------------------------------------------------------------- registry


def test_the_registry_lists_every_mechanism() -> None:
    assert mechanisms.names() == ("subsampled_gaussian", "gs_wgan", "gaussian_release", "local_laplace",
                                  "local_gaussian")
    kinds = {"subsampled_gaussian": mechanisms.SubsampledGaussian, "gs_wgan": mechanisms.GSWGANGaussian,
             "gaussian_release": mechanisms.GaussianRelease, "local_laplace": mechanisms.LocalLaplace,
             "local_gaussian": mechanisms.LocalGaussian}
    for name, kind in kinds.items():
        assert type(mechanisms.get(name)) is kind and mechanisms.get(name, kind).name == name
    assert mechanisms.local("laplace") is mechanisms.get("local_laplace")
    assert mechanisms.local("gaussian") is mechanisms.get("local_gaussian")


def test_unknown_names_are_one_clear_error() -> None:
    with pytest.raises(PrivacyError, match=r"^unknown privacy mechanism 'gs_wgna' \(known: subsampled_gaussian, "
                                           r"gs_wgan, .*\); did you mean 'gs_wgan'\?$"):
        mechanisms.get("gs_wgna")
    with pytest.raises(PrivacyError, match=r"^unknown local mechanism 'gausian' \(known: laplace, gaussian\); "
                                           r"did you mean 'gaussian'\?$"):
        mechanisms.local("gausian")
    with pytest.raises(PrivacyError, match="'gs_wgan' is not a LocalNoise"):
        mechanisms.get("gs_wgan", mechanisms.LocalNoise)
    with pytest.raises(PrivacyError, match="registered twice"):
        mechanisms.register(mechanisms.GaussianRelease)
    with pytest.raises(PrivacyError, match=r"^run.json: unknown privacy mechanism 'local_exponential': no "
                                           r"registered mechanism \(known: subsampled_gaussian, .*\) accounts it"):
        mechanisms.for_report({"mechanism": "local_exponential"}, "run.json")


def test_reports_map_to_their_mechanism() -> None:
    assert mechanisms.for_report({"mechanism": mechanisms.NON_PRIVATE}, "x") is None
    for name in mechanisms.names():
        assert mechanisms.for_report({"mechanism": name}, "x") is mechanisms.get(name)
    # a DP-SGD-style report describes its sanitizer and names its mechanism in mechanism_id
    sg = mechanisms.get("subsampled_gaussian")
    assert mechanisms.for_report({"mechanism": "a new sanitizer", "mechanism_id": sg.name}, "x") is sg
    # reports written before mechanism_id: DP-CGAN's and DP-Sinkhorn's descriptions (a frozen list)
    for legacy in ("dp_cgan: DP-SGD discriminator (per-example clip C, add/remove-one, Poisson)",
                   "dp_sinkhorn image-gradient (whole-batch clip, sensitivity 2C)"):
        assert mechanisms.for_report({"mechanism": legacy}, "x") is sg
    # anything else is refused, never accounted as the subsampled Gaussian
    for report in ({"mechanism": "a new sanitizer"}, {"mechanism": "dp_sinkhorn", "sigma": 1.0},
                   {"mechanism": "dp_cgan: x", "mechanism_id": "subsampled_gausian"}, {"mechanism": 3}):
        with pytest.raises(PrivacyError, match=r"^privacy.json: unknown privacy mechanism .* refusing it$"):
            mechanisms.for_report(report, "privacy.json")


def test_each_mechanism_recomputes_what_its_report_lists() -> None:
    """The reports training writes verify through the registry: the same epsilons, units and relations."""
    from dpsynth.privacy.report import dp_sgd_report, gaussian_release_report, gswgan_report
    from dpsynth.privacy.verify import central_rdp, neighbours, verify_report

    reports = {
        "poisson": dp_sgd_report(mechanism="dp_cgan: DP-SGD", sigma=1.12, batch_size=600, dataset_size=MNIST_N,
                                 steps=500, delta=DELTA, pld=True),
        "partitions": dp_sgd_report(mechanism="dp_sinkhorn, adversarial", sigma=1.1, batch_size=50,
                                    dataset_size=MNIST_N, steps=300, delta=DELTA, sampling="without_replacement",
                                    q=1 / 1_200),
        "gs_wgan": gswgan_report(sigma=1.07, shards=1000, batch_size=32, steps=2_000, delta=DELTA),
        "release": gaussian_release_report(sigma=5.0, dataset_size=MNIST_N, delta=DELTA, bound=1.0),
    }
    units = {"poisson": (1.12, 600 / MNIST_N, "poisson", 500),
             "partitions": (1.1, 1 / 1_200, "without_replacement", 300),
             "gs_wgan": (*gs.gswgan_sound_step(1.07, 1000, 32), "poisson", 2_000), "release": (5.0, 1.0, "poisson", 1)}
    relations = {"poisson": mechanisms.ADD_REMOVE, "partitions": mechanisms.REPLACE_ONE,
                 "gs_wgan": mechanisms.ADD_REMOVE, "release": mechanisms.REPLACE_ONE}
    for key, rep in reports.items():
        d = rep.to_dict()
        mech = mechanisms.for_report(d, key)
        assert mech.recompute(d, key, DELTA) == rep.epsilon, key  # bit for bit: the same accounting calls
        assert verify_report(d, key) is d and neighbours(d) == relations[key]
        sigma, q, sampling, steps = units[key]
        assert mech.composition_unit(d, key) == units[key]
        assert np.array_equal(central_rdp(d, key), acc.one_step_rdp(sigma, q, sampling) * steps)
    for name, sound, paper in (("laplace", 2.0 * 1.5 / 0.6, 1.5 / 0.6), ("gaussian", None, None)):
        noise = {"radius": 1.5, "noise_scale": 0.6}
        d = {"mechanism": f"local_{name}", "sigma": 0.6, "delta": 1e-4 if name == "gaussian" else 0.0,
             "extra": {"local": noise}, "epsilon": {}}
        got = mechanisms.local(name).recompute(d, "x", d["delta"])
        if name == "laplace":
            assert got == {"sound": sound, "paper_convention": paper}
        else:
            from dpsynth.privacy.local import gaussian_epsilon_eq5

            assert got == {"sound": gaussian_epsilon_eq5(0.6, 1e-4, 3.0), "paper_convention":
                           gaussian_epsilon_eq5(0.6, 1e-4, 1.5)}
        assert neighbours(d) == mechanisms.LOCAL and central_rdp(d, "x") is None


# --------------------------------------------------------------------------- the methods' plans, unchanged


def test_dp_sinkhorn_mnist_derives_the_papers_steps() -> None:
    from dpsynth.methods.dp_sinkhorn.plan import privacy_schedule

    q = 50 / MNIST_N
    want = acc.max_steps(1.1, q, DELTA, 10.0, conversion="classic", sampling="poisson")
    assert want == 3_464_988  # sigma 1.1, B 50, N 60,000, (10, 1e-5), classic RDP
    assert privacy_schedule(_ctx(_derive(1.1)), q, "poisson") == (1.1, want)
    sched = mechanisms.get("subsampled_gaussian", mechanisms.SubsampledGaussian).schedule(
        _derive(1.1), who="w", batch_size=50, rate=lambda b: b / MNIST_N, sampling="poisson", default_steps=lambda: None)
    assert (sched.sigma, sched.steps, sched.guard.budget, sched.guard.sampling) == (1.1, want, want, "poisson")


def test_dp_sinkhorn_calibrates_sigma_and_shares_a_scale_budget_as_before() -> None:
    from dpsynth.methods.dp_sinkhorn.plan import privacy_schedule

    q = 50 / MNIST_N
    want = acc.calibrate_sigma(q, 2_000, DELTA, 10.0, conversion="classic", sampling="poisson")
    assert privacy_schedule(_ctx(_calibrate(2_000)), q, "poisson") == (want, 2_000)
    # a sweep cell (batch 100, sigma 0.9) under a scale budget of 200 steps, against its base (batch 50, sigma 1.1)
    plan = _calibrate(200, paper_sigma=0.9, scale_budget=True,
                      reference=BudgetReference(epsilon=10.0, delta=DELTA, sigma=1.1, batch_size=50))
    mine = acc.max_steps(0.9, 100 / MNIST_N, DELTA, 10.0, conversion="classic", sampling="poisson")
    theirs = acc.max_steps(1.1, 50 / MNIST_N, DELTA, 10.0, conversion="classic", sampling="poisson")
    steps = max(1, round(200 * mine / theirs))
    sigma = acc.calibrate_sigma(100 / MNIST_N, steps, DELTA, 10.0, conversion="classic", sampling="poisson")
    assert privacy_schedule(_ctx(plan, batch_size=100), 100 / MNIST_N, "poisson") == (sigma, steps)


def test_dp_sinkhorn_adversarial_partitions_sample_without_replacement_at_a_fixed_rate() -> None:
    from dpsynth.methods.dp_sinkhorn.plan import privacy_schedule

    q = 1 / 1_200  # one of k = N / B partitions, whatever a cell's batch size
    want = acc.max_steps(1.1, q, DELTA, 10.0, conversion="classic", sampling="without_replacement")
    assert privacy_schedule(_ctx(_derive(1.1), adversarial=True), q, "without_replacement") == (1.1, want)
    plan = _calibrate(300, paper_sigma=0.9, scale_budget=True,
                      reference=BudgetReference(epsilon=10.0, delta=DELTA, sigma=1.1, batch_size=50))
    ratio = (acc.max_steps(0.9, q, DELTA, 10.0, conversion="classic", sampling="without_replacement")
             / acc.max_steps(1.1, q, DELTA, 10.0, conversion="classic", sampling="without_replacement"))
    steps = max(1, round(300 * ratio))
    sigma = acc.calibrate_sigma(q, steps, DELTA, 10.0, conversion="classic", sampling="without_replacement")
    assert privacy_schedule(_ctx(plan, batch_size=100, adversarial=True), q, "without_replacement") == (sigma, steps)


def test_dp_cgan_plans_its_dp_sgd_as_before() -> None:
    from dpsynth.methods.dp_cgan import PAPER_STEPS, privacy_schedule

    q = 600 / MNIST_N
    want = acc.max_steps(1.12, q, DELTA, 10.0, conversion="classic", sampling="poisson")
    assert want == 24_702  # the paper's sigma 1.12, q = 600 / 60,000, (10, 1e-5)
    sigma, steps, guard = privacy_schedule(_ctx(_derive(1.12), batch_size=600))
    assert (sigma, steps, guard.budget, guard.q, guard.sampling) == (1.12, want, want, q, "poisson")
    sigma, steps, guard = privacy_schedule(_ctx(_calibrate(500), batch_size=600))
    assert (sigma, steps) == (acc.calibrate_sigma(q, 500, DELTA, 10.0, conversion="classic", sampling="poisson"), 500)
    assert guard.budget >= 500
    non_private = PrivacyPlan(mode="non_private")
    assert privacy_schedule(_ctx(non_private, batch_size=600)) == (None, PAPER_STEPS, None)
    assert privacy_schedule(_ctx(non_private, batch_size=600, max_steps=7)) == (None, 7, None)
    assert privacy_schedule(_ctx(PrivacyPlan(mode="non_private", steps=3), batch_size=600)) == (None, 3, None)
    with pytest.raises(ConfigError, match=r"^experiments\.e\.privacy: sigma 0.01 cannot afford one step"):
        privacy_schedule(_ctx(_derive(0.01, eps=0.01), batch_size=600))


def test_gswgan_plans_with_its_sound_accounting_as_before() -> None:
    from dpsynth.methods.gs_wgan import PAPER_STEPS, privacy_schedule

    want = gs.gswgan_sound_max_steps(1.07, 1000, 32, DELTA, 370.0)
    sigma, steps, guard, way = privacy_schedule(_ctx(_derive(1.07, eps=370.0), batch_size=32), 1000)
    assert (sigma, steps, guard.budget, way) == (1.07, want, want, "sound")
    assert (guard.sigma, guard.q) == gs.gswgan_sound_step(1.07, 1000, 32)
    # the published 20,000 steps cost a sound epsilon of ~369
    assert 369.0 < gs.gswgan_epsilon(1.07, 1000, 32, 20_000, DELTA)["sound"]["rdp_classic"] < 370.0
    sigma, steps, guard, way = privacy_schedule(_ctx(_calibrate(3_000), batch_size=32), 1000)
    assert (sigma, steps, way) == (gs.gswgan_sound_sigma(1000, 32, 3_000, DELTA, 10.0), 3_000, "sound")
    assert privacy_schedule(_ctx(PrivacyPlan(mode="non_private"), batch_size=32), 1000) == (None, PAPER_STEPS,
                                                                                             None, "none")
    with pytest.raises(ConfigError, match="under the sound GS-WGAN accountant sigma 1.07 cannot afford"):
        privacy_schedule(_ctx(_derive(1.07), batch_size=32), 1000)


def test_dp_merf_release_sigma_as_before() -> None:
    from dpsynth.methods.dp_merf import release_sigma

    assert release_sigma(_ctx(_calibrate(1))) == acc.calibrate_sigma(1.0, 1, DELTA, 10.0)
    assert release_sigma(_ctx(_calibrate(1, eps=1.0))) == acc.calibrate_sigma(1.0, 1, DELTA, 1.0)
    assert release_sigma(_ctx(_derive(5.0))) == 5.0
    assert release_sigma(_ctx(PrivacyPlan(mode="non_private"))) == 0.0
    spent = acc.epsilon(0.3, 1.0, 1, DELTA)["rdp_classic"]
    with pytest.raises(ConfigError, match=rf"^experiments\.e\.privacy\.sigma: one release at sigma 0.3 spends "
                                          rf"epsilon {spent:.4g} > the target 10.0"):
        release_sigma(_ctx(_derive(0.3)))


def test_a_non_private_run_without_a_step_count_is_refused() -> None:
    from dpsynth.methods.dp_sinkhorn.plan import privacy_schedule

    assert privacy_schedule(_ctx(PrivacyPlan(mode="non_private"), max_steps=9), 0.1, "poisson") == (None, 9)
    with pytest.raises(ConfigError, match="a non-private run needs hparams.max_steps"):
        privacy_schedule(_ctx(PrivacyPlan(mode="non_private")), 0.1, "poisson")


# --------------------------------------------------------------------------- local mechanisms


def test_local_mechanisms_say_what_config_privatize_and_the_loss_need() -> None:
    lap, gau = mechanisms.local("laplace"), mechanisms.local("gaussian")
    assert (lap.needs_delta, lap.allows_dct, lap.projection_name, lap.matched_p) == (False, True, "l1 ball", 1)
    assert (gau.needs_delta, gau.allows_dct, gau.projection_name, gau.matched_p) == (True, False, "l2 ball", 2)
    assert lap.config_problem(None, True) is None and gau.config_problem(1e-5, False) is None
    assert gau.config_problem(None, False) == "the Gaussian mechanism needs delta in (0, 0.5)"
    assert lap.config_problem(1e-5, False) == "the Laplace mechanism is pure epsilon-DP: remove delta"
    assert gau.config_problem(1e-5, True) == "the DCT option belongs to the Laplace mechanism"


@pytest.mark.parametrize(("local", "message"), [
    ({"mechanism": "gaussian"}, "the Gaussian mechanism needs delta in (0, 0.5)"),
    ({"mechanism": "laplace", "delta": 1e-5}, "the Laplace mechanism is pure epsilon-DP: remove delta"),
    ({"mechanism": "gaussian", "delta": 1e-5, "dct": True}, "the DCT option belongs to the Laplace mechanism"),
])
def test_config_refuses_an_inconsistent_local_section_with_the_mechanisms_line(local: dict, message: str) -> None:
    from pydantic import ValidationError

    from dpsynth.config.experiment import LocalMechanism

    with pytest.raises(ValidationError, match=re.escape(message)):
        LocalMechanism(epsilon=5.0, radius=1.0, **local)


def test_local_privatize_is_the_library_mechanism() -> None:
    x = np.random.default_rng(0).normal(size=(6, 16))
    y, rep = mechanisms.local("laplace").privatize(x, radius=2.0, epsilon=5.0, delta=None, rng=3,
                                                   dct_image_shape=(1, 4, 4), dct_quantile=0.5)
    y0, rep0 = laplace_mechanism(x, 2.0, 5.0, 3, dct_image_shape=(1, 4, 4), dct_quantile=0.5)
    assert np.array_equal(y, y0) and rep == rep0
    y, rep = mechanisms.local("gaussian").privatize(x, radius=2.0, epsilon=5.0, delta=1e-4, rng=3)
    y0, rep0 = gaussian_mechanism(x, 2.0, 5.0, 1e-4, 3)
    assert np.array_equal(y, y0) and rep == rep0
    with pytest.raises(PrivacyError, match="needs delta"):
        mechanisms.local("gaussian").privatize(x, radius=2.0, epsilon=5.0, delta=None, rng=3)


# --------------------------------------------------------------------------- a mechanism added in one file


@pytest.fixture
def registered():
    """Register mechanisms for one test (as a ``@register`` class in privacy/ would), then forget them."""
    from dpsynth.privacy.mechanism_base import _REGISTRY

    added: list[str] = []

    def add(cls: type) -> type:
        mechanisms.register(cls)
        added.append(cls.name)
        return cls

    yield add
    for name in added:
        _REGISTRY.pop(name, None)


def test_a_new_mechanism_is_a_choice_of_the_config_the_cli_and_the_report_with_no_other_edit(registered,
                                                                                          tmp_path) -> None:
    """A local mechanism registered in privacy/ is a ``local: mechanism:`` value, a manifold row, a report's
    mechanism; a central one with a calculator is a ``dpsynth privacy --method``; an unknown name is refused in
    one line naming the key (config) or the argument (CLI)."""
    import yaml

    from dpsynth.cli import build_parser
    from dpsynth.config import parse_params
    from dpsynth.config.experiment import LocalMechanism

    class LocalUniform(mechanisms.LocalLaplace):
        name, config_name, title = "local_uniform_test", "uniform_test", "Uniform"

    class Calc(mechanisms.SubsampledGaussian):
        name, calculator = "calc_test", "calc_test"

    registered(LocalUniform)
    registered(Calc)
    assert LocalMechanism(mechanism="uniform_test", epsilon=1.0, radius=1.0).mechanism == "uniform_test"
    assert mechanisms.local_names() == ("laplace", "gaussian", "uniform_test")
    assert mechanisms.for_report({"mechanism": "local_uniform_test"}, "x") is mechanisms.local("uniform_test")
    args = build_parser().parse_args(["privacy", "steps", "--method", "calc_test", "--sigma", "1", "--epsilon", "1",
                                      "--delta", "1e-5", "--batch-size", "1"])
    assert args.method == "calc_test"
    # unknown: the config's line names the key, the CLI's the argument
    raw = yaml.safe_load((REPO / "params.yaml").read_text())
    exp = next(k for k, v in raw["experiments"].items() if v.get("local"))
    raw["experiments"][exp]["local"]["mechanism"] = "unifrom_test"
    with pytest.raises(ConfigError) as exc:
        parse_params(raw, source="params.yaml")
    assert str(exc.value).startswith(f"params.yaml: experiments.{exp}.local.mechanism: unknown local mechanism "
                                     "'unifrom_test' (known: laplace, gaussian, uniform_test); did you mean "
                                     "'uniform_test'?") and "\n" not in str(exc.value), exc.value
    res = subprocess.run([sys.executable, "-m", "dpsynth.cli", "privacy", "steps", "--method", "dp_sgf", "--sigma",
                          "1", "--epsilon", "1", "--delta", "1e-5", "--batch-size", "1"], capture_output=True,
                         text=True, timeout=60, cwd=tmp_path)
    assert res.returncode == 2 and res.stderr.strip().splitlines()[-1] == (
        "dpsynth privacy steps: error: argument --method: invalid choice: 'dp_sgf' (choose from 'dp_sgd', "
        "'gs_wgan'); did you mean 'dp_sgd'?"), res.stderr


# --------------------------------------------------------------------------- boundaries


def test_no_mechanism_name_is_compared_outside_privacy() -> None:
    """Outside ``src/dpsynth/privacy`` a mechanism is looked up in the registry, never compared by name (the
    comparisons this replaced: ``local.mechanism == "laplace"`` in config, privatize and the loss;
    ``args.method == "gs_wgan"`` in `dpsynth privacy`, which now asks ``mechanisms.calculators()``)."""
    src = REPO / "src" / "dpsynth"
    pattern = re.compile(r"mechanism\s*[!=]=|[!=]=\s*[\w.]*mechanism\b|mechanism\)?\.startswith|"
                         r"[!=]=\s*\"(laplace|gaussian|gaussian_release|subsampled_gaussian|gs_wgan|dp_sgd|local_\w+)\"")
    hits = [f"{p.relative_to(REPO)}:{i}" for p in sorted(src.rglob("*.py")) if "privacy" not in p.parent.parts
            for i, line in enumerate(p.read_text().splitlines(), 1) if pattern.search(line)]
    assert hits == []


def test_no_method_name_is_compared_outside_the_method_registry() -> None:
    """A method is told apart by its spec's properties (``config.methods.MethodSpec``: ``noise_matched_loss``,
    ``approximately_private``, ...), never by comparing its name (what report/tables/wavelet.py's column_of and
    config/params.py's figure checks did)."""
    from dpsynth.config.methods import METHOD_SPECS

    src = REPO / "src" / "dpsynth"
    names = "|".join(map(re.escape, METHOD_SPECS))
    pattern = re.compile(rf"(?:[!=]=|\bin)\s*[(\[{{]?\s*[\"'](?:{names})[\"']|(?:spec\.name|\.method)\s*[!=]=\s*[\"']")
    hits = [f"{p.relative_to(REPO)}:{i}" for p in sorted(src.rglob("*.py")) if p.name != "methods.py"
            for i, line in enumerate(p.read_text().splitlines(), 1) if pattern.search(line)]
    assert hits == []
    assert pattern.search('if exp.spec.name == "wavelet_wgan":') and pattern.search('exp.method != "entropic_wgan"')


def test_the_config_validates_local_mechanisms_without_importing_the_accountant() -> None:
    code = ("import sys; from dpsynth.config.experiment import LocalMechanism; "
            "LocalMechanism(mechanism='gaussian', epsilon=1.0, delta=1e-5, radius=1.0); "
            "print([m for m in ('dp_accounting', 'numpy', 'torch') if m in sys.modules])")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=REPO)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "[]"
