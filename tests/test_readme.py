"""The README's and docs' numbers that the code can give, held to the code (issues 46, 59 and 62): the job count
of `make run`, how many of those are submitted with a GPU, the runs of the pipeline, the methods an experiment may
name, the privacy mutations, the test functions, the params.yaml keys `dvc exp show` lists, the quick scale's step
counts, the runs of the MNIST W2-vs-noise sweep, and the quick-scale accuracy ranges against the runs recorded in
benchmarks/results/quick_runs.json; plus what a newcomer relies on: every relative link resolves, the layout names
every module, the sweep-cell names shown exist, the papers' titles agree with CITATION.cff, and the README's first
screen says what it must. Read from params.yaml, the method registry, the mutation script's own list, the run
record and the sources -- no pipeline runs (tests/test_workflow_sync.py keeps `pipeline_jobs` equal to Snakemake's
DAG)."""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from dpsynth.config import load_params
from dpsynth.config.methods import METHOD_SPECS
from dpsynth.config.run import resolve_run
from dpsynth.workflow.budget import planned_steps
from dpsynth.workflow.settings import pipeline_jobs
from tests.conftest import REPO

README = (REPO / "README.md").read_text()
DOCS = {p.relative_to(REPO).as_posix(): p.read_text() for p in sorted((REPO / "docs").glob("*.md"))}
PAGES = {"README.md": README, **DOCS}
WORDS = {w: i for i, w in enumerate("zero one two three four five six seven eight nine ten eleven twelve".split())}
#: every quick-scale MNIST run whose accuracies were recorded (see its "about")
QUICK_RUNS = REPO / "benchmarks" / "results" / "quick_runs.json"
#: the rows of the README's and docs/methods.md's quick-scale tables, and the experiment each reports
QUICK_ROWS = {"DP-Sinkhorn": "dps_mnist", "GS-WGAN": "gswgan_mnist", "DP-MERF": "merf_mnist",
              "class-conditional Gaussian, trivial baseline": "cgauss_mnist"}
COLUMN_NAMES = {"logreg": "LogReg", "mlp": "MLP", "cnn": "CNN"}


def _number(s: str) -> int:
    return WORDS[s.lower()] if s.lower() in WORDS else int(s.replace(",", ""))


def _find(pattern: str, pages: dict[str, str] = PAGES) -> list[tuple[str, str]]:
    """(page, first group) of every match, with line breaks and indentation read as one space."""
    return [(name, m.group(1)) for name, text in pages.items()
            for m in re.finditer(pattern, re.sub(r"\s*\n\s*", " ", text))]


@pytest.fixture(scope="module")
def params():
    return load_params(REPO / "params.yaml")


@pytest.fixture(scope="module")
def jobs(params) -> list[tuple[str, str]]:
    return pipeline_jobs(params)


def test_the_job_counts_are_the_pipelines(params, jobs: list[tuple[str, str]]) -> None:
    """Every "N jobs" of the pipeline (not a dated measurement's "over N jobs") is its job count: one per
    (stage, name) plus Snakemake's `all`."""
    said = _find(r"(?<!over )\b(\d+) jobs\b")
    assert said and {int(n) for _, n in said} == {len(jobs) + 1}, said
    runs = _find(r"the (\d+) runs of the pipeline")
    assert runs and {int(n) for _, n in runs} == {len(params.pipeline_targets())}, runs
    datasets = _find(r"prepare (\w+) datasets")
    assert datasets and {_number(n) for _, n in datasets} == {len(params.datasets)}, datasets


def test_the_gpu_jobs_are_the_ones_sbatch_gets(params, jobs: list[tuple[str, str]]) -> None:
    """The rules whose paper row in workflow/resources.yaml asks for a GPU, less `train_sweep` where no pipeline
    sweep trains together (its jobs then only write a marker and ask for none: workflow/rules/common.smk
    sweep_gpu): their jobs are the ones submitted with a GPU, listed in the table's order; the marker-only
    train_sweep jobs are counted apart."""
    table = yaml.safe_load((REPO / "workflow" / "resources.yaml").read_text())
    gpu_rules = [rule for rule, row in table.items() if row.get("paper", {}).get("gpu")]
    together = any(params.sweeps[s].train_together for s in params.pipeline.sweeps)
    submitted = [r for r in gpu_rules if together or r != "train_sweep"]
    listed = r",\s+".join(f"`{rule}`" for rule in submitted[:-1]) + rf"\s+and\s+`{submitted[-1]}`"
    said = _find(rf"the (\d+) {listed} jobs are submitted with one GPU each")
    with_gpu = sum(stage in submitted and (stage != "train_sweep" or params.sweeps[name].train_together)
                   for stage, name in jobs)
    assert said and {int(n) for _, n in said} == {with_gpu}, (listed, said)
    markers = _find(r"the (\d+) `train_sweep` jobs of the pipeline's\s+sweeps train nothing")
    if together:
        assert not markers, "a pipeline sweep trains together: its train_sweep jobs ask for a GPU"
    else:
        assert markers and {int(n) for _, n in markers} == {sum(s == "train_sweep" for s, _ in jobs)}, markers
        assert "none of `pipeline.sweeps` sets it today" in DOCS["docs/gpu-cluster.md"]


def test_the_method_lists_are_the_registry(params) -> None:
    registry = list(METHOD_SPECS)
    m = re.search(r"names one of (\w+) methods: ([^.]*)\.", re.sub(r"\s+", " ", README))
    assert m and _number(m.group(1)) == len(registry) and re.findall(r"`(\w+)`", m.group(2)) == registry, m
    config = re.search(r"each with `method` \(([^)]*)\)", DOCS["docs/configuration.md"])
    assert config and re.findall(r"`(\w+)`", config.group(1)) == registry
    # what `make run` trains: the README's "the first N", and the methods page's table
    trained = {params.all_experiments()[name].method for name in params.pipeline_targets()}
    first = re.search(r"`make run` trains the first (\w+);", README)
    assert first and set(registry[:_number(first.group(1))]) == trained, (first, trained)
    rows = dict(re.findall(r"^\| `(\w+)` \|(?:[^|]*\|){2} (yes|no)\b", DOCS["docs/methods.md"], re.M))
    assert list(rows) == registry, rows
    assert {k for k, v in rows.items() if v == "yes"} == trained, rows


def test_the_mutation_count_is_the_scripts() -> None:
    listed = subprocess.run([sys.executable, str(REPO / "scripts" / "privacy-mutations.py"), "--list"],
                            capture_output=True, text=True, timeout=60, cwd=REPO)
    assert listed.returncode == 0, listed.stderr
    n = len(listed.stdout.splitlines())
    said = _find(r"applies (\d+) mutations")
    assert {p for p, _ in said} >= {"docs/privacy.md", "docs/architecture.md"}, said
    assert all(int(x) == n for _, x in said), f"the docs say {said} mutations; scripts/privacy-mutations.py --list has {n}"


def _test_functions() -> tuple[int, int]:
    """`def test_...` at module level or in a class, over tests/test_*.py: (functions, files)."""
    files = sorted((REPO / "tests").glob("test_*.py"))
    n = 0
    for f in files:
        tree = ast.parse(f.read_text())
        bodies = [tree.body] + [c.body for c in tree.body if isinstance(c, ast.ClassDef)]
        n += sum(isinstance(d, ast.FunctionDef | ast.AsyncFunctionDef) and d.name.startswith("test")
                 for body in bodies for d in body)
    return n, len(files)


def test_the_test_count_is_the_suites() -> None:
    m = re.search(r"The suite has ([\d,]+) test functions in (\d+) files", DOCS["docs/tests.md"])
    assert m, "docs/tests.md no longer says how many test functions the suite has"
    assert (_number(m.group(1)), int(m.group(2))) == _test_functions(), \
        f"docs/tests.md says {m.group(0)!r}; tests/ has {_test_functions()} (functions, files)"


def test_dvc_exp_show_lists_every_params_key() -> None:
    """Plain `dvc exp show` has a column per key of params.yaml, flattened as DVC flattens it."""
    from dvc.utils.flatten import flatten

    keys = len(flatten(yaml.safe_load((REPO / "params.yaml").read_text())))
    said = _find(r"every key of `params.yaml` as a column \(([\d,]+) keys today\)")
    assert said and {_number(n) for _, n in said} == {keys}, (said, keys)


def test_the_sweep_cell_names_shown_exist(params) -> None:
    text = DOCS["docs/configuration.md"]
    shown = re.findall(r"`(\w+-(?:[a-z_]+[\w.+-]*?)+)`", text)
    cells = [s for s in shown if re.search(r"-[a-z_]+\d", s)]
    assert "opt_lr_mnist-lr1e-05-optimizeradam" in cells, cells
    unknown = [c for c in cells if c not in params.all_experiments()]
    assert not unknown, f"docs/configuration.md names sweep cells that do not exist: {unknown}"


def _slug(heading: str) -> str:
    """GitHub's anchor of a Markdown heading."""
    s = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return s.replace(" ", "-")


def test_every_relative_link_resolves() -> None:
    broken = []
    for name, text in PAGES.items():
        base = (REPO / name).parent
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target):
                continue
            path, _, anchor = target.partition("#")
            dest = (base / path).resolve() if path else REPO / name
            if not dest.exists():
                broken.append(f"{name}: {target}")
            elif anchor and dest.suffix == ".md":
                heads = {_slug(h) for h in re.findall(r"^#+ (.*)$", dest.read_text(), re.M)}
                if anchor not in heads:
                    broken.append(f"{name}: {target} (no such heading)")
    assert not broken, broken


def test_the_layout_names_every_module() -> None:
    layout = DOCS["docs/layout.md"]
    entries = [p.name for p in (REPO / "src" / "dpsynth").iterdir()
               if p.name not in ("__init__.py", "py.typed", "__pycache__") and (p.suffix == ".py" or p.is_dir())]
    missing = [e for e in entries if not re.search(rf"(?<![\w/]){re.escape(e)}/?(?!\w)", layout)]
    assert not missing, f"docs/layout.md does not name src/dpsynth/{missing}"
    methods = [p.name for p in (REPO / "src" / "dpsynth" / "methods").iterdir() if p.is_dir() and p.name != "__pycache__"]
    assert all(f"{m}/" in layout for m in methods), methods
    for pin in ("PyWavelets", "torch", "dvc", "snakemake"):
        version = re.search(rf"^{pin}==(\S+)$", (REPO / "requirements.lock").read_text(), re.M | re.I)
        assert version, pin
    assert re.search(r"PyWavelets [\d.]+", layout).group(0) == "PyWavelets " + re.search(
        r"^PyWavelets==(\S+)$", (REPO / "requirements.lock").read_text(), re.M).group(1)


def test_the_papers_are_cited_alike() -> None:
    """Each reference of CITATION.cff is in docs/references.md under the same title and arXiv id; any title of
    Reshetova et al. written out in the README or docs is the published one; DP-CGAN is among the references."""
    cff = yaml.safe_load((REPO / "CITATION.cff").read_text())
    assert cff["cff-version"] == "1.2.0"
    refs = re.sub(r"\s+", " ", DOCS["docs/references.md"])
    for ref in cff["references"]:
        assert ref["title"] in refs, ref["title"]
        arxiv = [i["value"] for i in ref.get("identifiers", []) if i["value"].startswith("arXiv:")]
        assert arxiv and all(a in refs for a in arxiv), ref["title"]
    assert any(r["title"].startswith("DP-CGAN") for r in cff["references"])
    title = next(r["title"] for r in cff["references"] if r["authors"][0]["family-names"] == "Reshetova")
    for name, text in PAGES.items():
        for found in re.findall(r"training generative models from privatized data via entropic optimal transport",
                                re.sub(r"\s+", " ", text), re.I):
            assert found == title, f"{name}: {found!r} is not CITATION.cff's {title!r}"


def test_the_first_screen_says_what_a_newcomer_needs() -> None:
    lines = README.splitlines()
    assert len(lines) <= 250, len(lines)
    first = "\n".join(lines[:40])
    for needed in ("make run", "make test", "results/report.html", "apt-get", "slurm-wlm", "munge",
                   "chromium-headless-shell", "npm", "Python 3.11", "quick scale is, and is not"):
        assert needed in first, needed
    assert re.search(r"\d+:\d\d on\s+2026-\d\d-\d\d", first), "the run's time with its date"
    section = README.split("## Reshetova et al. on MNIST at the paper's settings\n", 1)[1].strip().split("\n\n")[0]
    # the named target: its command, its measured time with date and commit, where its committed results are
    assert "make reshetova-mnist" in section and "reshetova_mnist" in (REPO / "Makefile").read_text()
    assert re.search(r"\d+:\d\d on the 2-core machine \(2026-\d\d-\d\d, commit [0-9a-f]{7}\)", section), section
    assert "docs/results/reshetova-mnist/" in section and "docs/reshetova-mnist.md" in section
    for name in ("README.md", "local_privacy_w2_mnist.md", "reshetova_fig11_mnist.md", "w2_noise_mnist.png",
                 "reshetova_fig11_mnist.png", "w2_noise_mnist.csv"):
        assert (REPO / "docs" / "results" / "reshetova-mnist" / name).is_file(), name
    for word in ("landing", "the issue's"):
        assert not [n for n, t in PAGES.items() if word in t and n != "docs/deviations.md"], word
    # docs cite no note, log or person a reader does not have
    for words in ("engineer", "session note", "the session that", "the session reported"):
        assert not [n for n, t in PAGES.items() if words in re.sub(r"\s+", " ", t)], words


def _span(lo: float, hi: float) -> str:
    return f"{lo:.1f}" if lo == hi else f"{lo:.1f}-{hi:.1f}"


def quick_cell(records: list[dict], columns: list[str]) -> str:
    """A quick-scale table's cell for one row, from its recorded runs: for each set of columns the same runs
    recorded, the range of each over those runs, with their count, dates and commits (a commit's run count in
    brackets where it has several). The README and docs/methods.md print exactly this, so a run added to the
    record changes what they must say."""
    groups: dict[tuple[int, ...], list[str]] = {}
    for c in columns:
        having = tuple(i for i, r in enumerate(records) if r["accuracy"].get(c) is not None)
        if having:
            groups.setdefault(having, []).append(c)
    parts = []
    for having, cols in groups.items():
        rs = [records[i] for i in having]
        values = " / ".join(_span(min(r["accuracy"][c][0] for r in rs), max(r["accuracy"][c][1] for r in rs))
                            for c in cols)
        named = "" if len(groups) == 1 else " / ".join(COLUMN_NAMES[c] for c in cols) + " "
        n = sum(r["runs"] for r in rs)
        dates = sorted(d for r in rs for d in r["dates"])
        when = dates[0] if dates[0] == dates[-1] else f"{dates[0]} to {dates[-1]}"
        commits = ", ".join(r["commit"] + (f" ({r['runs']} runs)" if r["runs"] > 1 else "") for r in rs)
        parts.append(f"{named}{values} ({n} run{'s' * (n > 1)}, {when}, commit{'s' * (len(rs) > 1)} {commits})")
    return "; ".join(parts)


def test_the_quick_ranges_are_the_recorded_runs() -> None:
    """Each quick-scale accuracy the README and docs/methods.md state for DP-Sinkhorn, GS-WGAN, DP-MERF and the
    trivial central-DP baseline is the range over every run benchmarks/results/quick_runs.json records, with their count, dates and commits; the
    first screen's DP-Sinkhorn range and deviations row 8's GS-WGAN range are those runs' too. A run outside a
    stated range (the one of 2026-11-28 was, for all three rows) fails here until the pages say it."""
    book = json.loads(QUICK_RUNS.read_text())
    columns = book["columns"]
    by: dict[str, list[dict]] = {}
    for r in book["runs"]:
        assert r["runs"] >= 1 and re.fullmatch(r"[0-9a-f]{7}", r["commit"]), r
        assert all(re.fullmatch(r"2\d{3}-\d\d-\d\d", d) for d in r["dates"]), r
        assert all(v is None or v[0] <= v[1] for v in r["accuracy"].values()), r
        by.setdefault(r["experiment"], []).append(r)
    assert set(by) == set(QUICK_ROWS.values()), set(by)
    for page in ("README.md", "docs/methods.md"):
        labels = "|".join(re.escape(label) for label in QUICK_ROWS)
        rows = dict(re.findall(rf"^\| ({labels}) \| ([^|]+) \|", PAGES[page], re.M))
        for method, experiment in QUICK_ROWS.items():
            expected = quick_cell(by[experiment], columns)
            assert rows.get(method, "").strip() == expected, f"{page}, row {method}: write {expected!r}"
    dps = by["dps_mnist"]
    lo = min(r["accuracy"][c][0] for r in dps for c in columns)
    hi = max(r["accuracy"][c][1] for r in dps for c in columns)
    n = sum(r["runs"] for r in dps)
    first = re.sub(r"\s+", " ", "\n".join(README.splitlines()[:40]))
    said = re.search(r"DP-Sinkhorn on MNIST scores ([\d.]+)-([\d.]+) % over (\w+) quick runs", first)
    assert said and (float(said[1]), float(said[2]), _number(said[3])) == (lo, hi, n), (said, lo, hi, n)
    gswgan = [r["accuracy"]["logreg"] for r in by["gswgan_mnist"] if r["accuracy"]["logreg"]]
    row8 = _find(r"\| 8 \| GS-WGAN privacy accounting \|.*?LogReg ([\d.]+ to [\d.]+ % over \w+) runs",
                 {"docs/deviations.md": DOCS["docs/deviations.md"]})
    assert row8 and row8[0][1] == f"{min(v[0] for v in gswgan):.1f} to {max(v[1] for v in gswgan):.1f} % over " \
        f"{'zero one two three four five six seven eight nine ten'.split()[len(gswgan)]}", row8


def test_the_quick_step_counts_are_the_scales() -> None:
    """The quick scale's steps, critics, warm-up, width and batch cap as the README, docs/methods.md and
    deviations row 9 state them, and DP-CGAN's (the run `dpsynth train cgan_mnist` makes, whose collapse the
    docs describe), are the ones params.yaml's quick scale gives each run."""
    quick = load_params(REPO / "params.yaml", scale="quick")
    preset = quick.scales["quick"]
    dps = planned_steps(quick, "dps_mnist")
    said = _find(r"\b([\d,]+) DP-Sinkhorn steps\b")
    assert {p for p, _ in said} >= {"README.md", "docs/deviations.md"} and {_number(n) for _, n in said} == {dps}
    assert _find(r"\| DP-Sinkhorn steps \(MNIST, epsilon 10\) \| ([\d,]+) ", {"m": DOCS["docs/methods.md"]}) == \
        [("m", f"{dps:,}")]
    gs = (preset.n_critics, preset.warmup_steps, planned_steps(quick, "gswgan_mnist"),
          preset.hparams["gs_wgan"]["model_dim"])
    table = re.search(r"\| GS-WGAN \| (\d+) critics, (\d+) warm-up steps, (\d+) generator steps, width (\d+) \|",
                      DOCS["docs/methods.md"])
    assert table and tuple(map(int, table.groups())) == gs, (table, gs)
    row9 = re.search(r"GS-WGAN width (\d+) \(published 64\), (\d+) steps after a (\d+)-step warm-up with (\d+) critics"
                     r"(?:.*?)batch ≤ (\d+)", DOCS["docs/deviations.md"])
    assert row9 and tuple(map(int, row9.groups())) == (gs[3], gs[2], gs[1], gs[0], preset.max_batch_size), row9
    cgan = (planned_steps(quick, "cgan_mnist"), resolve_run(quick, "cgan_mnist").experiment.hparams.batch_size)
    said = _find(r"DP-CGAN[^.]*?\(([\d,]+) steps of batch (\d+)")
    assert {p for p, _ in said} >= {"README.md", "docs/methods.md"}, said
    stated = {(_number(m[1]), int(m[2])) for _, text in PAGES.items()
              for m in re.finditer(r"\(([\d,]+) steps of batch (\d+)", re.sub(r"\s+", " ", text))}
    assert stated == {cgan}, (stated, cgan)
    # the first screen's sample grids: the steps behind them
    first = re.sub(r"\s+", " ", "\n".join(README.splitlines()[:40]))
    grids = re.search(r"DP-Sinkhorn's, after ([\d,]+) noisy steps, .*?grey blob per label.*?GS-WGAN's, after "
                      r"([\d,]+) steps.*?grey noise", first)
    assert grids and (_number(grids[1]), _number(grids[2])) == (dps, gs[2]), grids


def test_the_mnist_w2_sweep_runs_are_the_ones_it_trains(params) -> None:
    """Every "N generators" / "N runs" the docs say Reshetova et al.'s MNIST Fig. 5 sweep trains is the number
    `dpsynth w2noise mnist` trains (figure points and step checks, every seed)."""
    from dpsynth.evaluate.w2 import sweep_runs

    w = params.w2_noise["mnist"]
    runs = sweep_runs(w.noise_levels, w.losses, w.steps, w.check_noise_level, w.seeds)
    said = _find(r"MNIST Fig\. 5 sweep's (\d+) generators") + _find(r"The (\d+) runs train in two processes") + \
        _find(r"\(MNIST: (\d+) generators")
    assert {p for p, _ in said} >= {"docs/deviations.md", "docs/reshetova-mnist.md", "docs/gpu-cluster.md",
                                    "docs/outputs.md"}, said
    assert {int(n) for _, n in said} == {len(runs)}, (said, len(runs))
    comment = re.search(r"Two worker processes train its (\d+) runs", (REPO / "params.yaml").read_text())
    assert comment and int(comment[1]) == len(runs)


def test_the_gpu_figures_the_docs_state_are_the_committed_measurements() -> None:
    """docs/performance.md's and docs/gpu-cluster.md's GPU figures are those of the newest committed GPU JSONs
    (benchmarks/results/gpu-2026-11-28/; issue 70 item 4: two measurements, not one)."""
    gpu = REPO / "benchmarks" / "results" / "gpu-2026-11-28"
    sweep = json.loads((gpu / "gpu_step_sweep_200steps.json").read_text())
    slice_rate = json.loads((gpu / "gpu_train_slice.json").read_text())["steps_per_s"]
    perf = re.sub(r"\s*\n\s*", " ", DOCS["docs/performance.md"])
    steps = {k: v["steps_per_s"] for k, v in sweep["steps"].items()}
    for said, value in [
            (r"the graphed fast step ([\d.]+) steps/s", steps["fast"]),
            (r"the same step eager ([\d.]+)", steps["fast_eager"]),
            (r"the reference ([\d.]+), the generator floor", steps["reference"]),
            (r"the generator floor in its CUDA graph ([\d.]+)", steps["generator_floor"]),
            (r"8 configurations packed into one step ([\d.]+) packed steps/s", sweep["sweep"]["trials"]["batched"]["steps_per_s"]),
            (r"packed steps/s, ([\d,]+) configuration-steps/s", sweep["sweep"]["config_steps_per_s"]["batched"])]:
        m = re.search(said, perf)
        assert m, said
        assert float(m.group(1).replace(",", "")) == pytest.approx(value, abs=0.051 if "." in m.group(1) else 0.51), said
    assert f"`dpsynth train` {slice_rate} steps/s" in perf
    assert "Measured twice" in perf and "Measured once" not in perf
    cluster = re.sub(r"\s*\n\s*", " ", DOCS["docs/gpu-cluster.md"])
    assert f"ran at {slice_rate} steps/s" in cluster and "the one GPU measurement" not in cluster


def test_the_w2_spread_the_docs_state_is_the_committed_sweeps() -> None:
    """docs/reshetova-mnist.md's "the three losses lie within X W2 of each other at every σ (Y at σ = 2)", from
    the committed sweep's rows (docs/results/reshetova-mnist/w2_noise_mnist.csv, role figure, mean over seeds)."""
    import pandas as pd

    rows = pd.read_csv(REPO / "docs" / "results" / "reshetova-mnist" / "w2_noise_mnist.csv")
    means = rows[rows["role"] == "figure"].groupby(["noise_std", "loss"])["w2"].mean().unstack()
    spread = means.max(axis=1) - means.min(axis=1)
    m = re.search(r"lie within ([\d.]+) W2 of each other at every σ \(([\d.]+) at σ = 2\)",
                  re.sub(r"\s*\n\s*", " ", DOCS["docs/reshetova-mnist.md"]))
    assert m, "docs/reshetova-mnist.md no longer states the losses' spread"
    bound, at_two = float(m.group(1)), float(m.group(2))
    assert spread.max() <= bound < spread.max() + 0.01 and round(spread.loc[2.0], 3) == at_two


def _clock(seconds: float) -> str:
    return f"{int(seconds) // 60}:{int(seconds) % 60:02d}"


def test_the_make_run_time_is_the_newest_quiet_measurement(params, jobs: list[tuple[str, str]]) -> None:
    """README's `make run` time is the newest committed fresh-clone measurement taken alone on the machine
    (benchmarks/results/make_run_<date>.json; a *_shared.json run had other work on its cores), with its date,
    commit and job count -- and at most 35 minutes, the first command's budget."""
    runs = sorted(p for p in (REPO / "benchmarks/results").glob("make_run_*.json") if not p.stem.endswith("_shared"))
    assert runs, "no committed make_run_<date>.json"
    newest = json.loads(runs[-1].read_text())
    readme = (REPO / "README.md").read_text()
    clock = _clock(newest["elapsed_seconds"])
    said = re.sub(r"\s*\n\s*", " ", readme)
    assert f"`make run` {clock} on {newest['date']}" in said and f"(commit {newest['commit']}" in said, (
        f"README.md should state `make run` {clock} on {newest['date']} (commit {newest['commit']}: "
        f"{runs[-1].relative_to(REPO)})")
    assert runs[-1].name in readme
    assert newest["elapsed_seconds"] <= 35 * 60, f"{runs[-1].name}: make run took {clock}, over 35 minutes"
    # the measured run ran the pipeline README describes: its jobs (the 'all' target aside) are today's
    assert newest["jobs"] == len(jobs), (
        f"{runs[-1].name} ran {newest['jobs']} jobs besides `all`, the quick pipeline now has {len(jobs)}: measure "
        "again")
