"""The report page a reader opens (dpsynth.report.page, .html, .not_run): each table as escaped HTML with
its notes, ours beside the papers'; one category per paper, papers and tables with runs of ours first,
by their number in the paper; one not-run list saying what runs each; the claims the tables state; the
category and label files Snakemake reads; and an unconditional generator's grid without class rows.
(The page itself, rendered by `snakemake --report` and opened in headless Chromium after a smoke run:
tests/test_workflow_sync.py::test_report_page_renders.)"""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path
from types import SimpleNamespace

import matplotlib
import numpy as np
import pandas as pd
import pytest

from dpsynth.config import load_params
from dpsynth.report.figures import Figure
from dpsynth.report.html import note_html, table_document, write_page
from dpsynth.report.ledger import LEDGER
from dpsynth.report.page import PAGE_FILE, build_page, table_category, table_labels
from dpsynth.report.plotting import NotDrawn
from dpsynth.report.tables import BuiltTable
from tests.conftest import REPO, venv_bin
from tests.pipelines import run

matplotlib.use("Agg")

#: the tables that get a run of ours in these tests (one per kind of group: a paper with runs, privacy)
RAN = {"table1_fmnist": 3, "pm_grid_fmnist": 1, "gswgan_t1_fmnist": 2, "privacy": 3, LEDGER: 4}
CLAIM = "Claim (Someone et al., Table 9): ours is better. Ours: holds -- `x` 1.0 < 2.0."


def _built(params) -> dict[str, BuiltTable]:  # type: ignore[no-untyped-def]
    """A built table per params.yaml table (plus the ledger), in params.yaml's order, ours where RAN says."""
    out = {}
    for name in [*params.tables, LEDGER]:
        t = params.tables.get(name)
        frame = pd.DataFrame({"Method": ["a", "b"], "FID ours": ["12.5 ± 0.1", "not run"], "FID paper": ["13", "14"]})
        out[name] = BuiltTable(name, t.title if t else "ledger", t.paper if t else "ours", frame,
                               notes=[CLAIM] if name in ("local_privacy_w2", "table1_fmnist") else [],
                               ours=RAN.get(name, 0))
    return out


@pytest.fixture(scope="module")
def params():  # type: ignore[no-untyped-def]
    return load_params(REPO / "params.yaml")


def test_a_table_page_escapes_every_cell_and_note_and_shades_ours_beside_the_papers() -> None:
    frame = pd.DataFrame({"Run": ["<script>alert(1)</script>", "r&d"], "FID ours": ["1.0 ± 0.1", "not run"],
                          "FID paper": ["2", "3"], "Paper source": ["x", "y"]})
    built = BuiltTable("t1", "MNIST <b>bold</b>", "Some paper, Table 1", frame, ours=1,
                       notes=["steps `500` (paper 1,000) <i>", CLAIM])
    page = table_document(built, "Table 1", "quick")
    assert "<script>alert" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "r&amp;d" in page and "MNIST &lt;b&gt;bold&lt;/b&gt;" in page and "<b>bold" not in page
    assert "steps <code>500</code> (paper 1,000) &lt;i&gt;" in page  # the note's code span, its markup escaped
    assert f'<li class="claim">{note_html(CLAIM)}</li>' in page
    # ours (column 2) shaded, the paper's columns (3, 4) beside it in grey
    assert "td:nth-child(2), table.results th:nth-child(2) { background: #dbeafe" in page
    grey = r"td:nth-child\((\d)\), table\.results th:nth-child\(\d\) \{ background: #f1f5f9"
    assert re.findall(grey, page) == ["3", "4"]
    assert "No run of ours" not in page
    empty = table_document(BuiltTable("t2", "T", "p", frame, ours=0), "", "smoke")
    assert "No run of ours at scale <code>smoke</code>" in empty
    assert note_html("a ` b") == "a ` b"  # one backtick: no span


def test_the_page_groups_by_paper_with_runs_first_and_orders_by_number_as_the_menu_sorts(params) -> None:
    built = _built(params)
    page = build_page(params, built, [], runs=["dps_fmnist"])
    cats = [c for c, _ in page.groups]
    assert cats == sorted(cats)  # Snakemake's menu sorts categories as text: the number keeps this order
    assert [c.split(". ", 1)[1] for c in cats] == [
        "DP-Sinkhorn ICLR submission (OpenReview, ICLR 2021)",
        "DP-Sinkhorn NeurIPS 2021 supplementary (Cao et al., arXiv:2111.01177)",
        "GS-WGAN (Chen, Orekondy, Fritz, NeurIPS 2020, arXiv:2006.08265)",
        "Privacy: every run's epsilon, the ledger, utility against epsilon",
        "Reshetova, Chen, Özgür (ISIT 2024, arXiv:2306.09547)"]  # the one paper without a run of ours: last
    order = {c: [e.name for e in es] for c, es in page.groups}
    assert order[cats[0]] == ["table1_fmnist", "table1_mnist", "celeba_iclr", "opt_lr_mnist", "batch_sigma_mnist"]
    assert order[cats[1]] == ["pm_grid_fmnist", "pm_grid_mnist", "celeba_neurips"]  # Table 5 ran: before 4
    # Figures 1, 2, 5, 5, 5, 6-7, 6-7, 8, 11, 11, 11: by number, not as text ("11" < "2"); one figure's tables in
    # params.yaml's order (the CPU and GPU versions of MNIST Figs. 5 and 11)
    assert order[cats[4]] == ["reshetova_fig1", "reshetova_fig2", "local_privacy_w2_mnist", "local_privacy_w2",
                              "local_privacy_w2_mnist_gpu", "reshetova_fig6_7_ellipse", "reshetova_fig6_7_rectangle",
                              "reshetova_fig8", "reshetova_fig11", "reshetova_fig11_mnist", "reshetova_fig11_mnist_gpu"]
    for _, es in page.groups:
        labels = [e.label(page.scale) for e in es]
        assert labels == sorted(labels), labels  # the menu sorts labels as text too
    assert page.groups[0][1][0].label("quick") == "01 Table 1 (table1_fmnist) · ours: 3 of 2 rows"
    assert page.groups[0][1][1].label("quick") == "02 Table 1 (table1_mnist) · not run at quick"


def test_one_not_run_list_says_what_runs_each_table_and_each_figure_not_drawn(params) -> None:
    built = _built(params)
    figs = [Figure(Path("figs/table1_fmnist_samples.png"), "table1_fmnist", "sample grids"),
            Figure(NotDrawn(Path("figs/training_dps_mnist.png"), "training: dps_mnist", "models/...: not run"),
                   None, "training curves"),
            # a table without runs: its figure is not listed apart (the table's line stands for it)
            Figure(NotDrawn(Path("figs/w2_noise_mnist.png"), "W2 vs noise (mnist)", "not run"),
                   "local_privacy_w2_mnist", "W2 against noise"),
            Figure(Path("figs/w2_noise.csv"), None, "W2 against noise")]
    page = build_page(params, built, figs, runs=[])
    not_run = [n.what for n in page.not_run]
    tables = [n for n in built if not built[n].ours]
    assert len(not_run) == len(tables) + 1 and len(set(not_run)) == len(not_run)
    assert all(any(f"({t})" in w for w in not_run) for t in tables)
    assert not_run[-1] == "figure training_dps_mnist.png: training: dps_mnist"
    assert all(n.how for n in page.not_run)
    hows = {re.search(r"\((\w+)\)$", n.what).group(1): n.how for n in page.not_run[:-1]}  # type: ignore[union-attr]
    # each table's build target (the commands themselves are dry-run in tests/test_not_run_commands.py)
    assert hows["reshetova_fig6_7_ellipse"].startswith("`snakemake reshetova_fig6_7 --cores all --config scale=quick` "
                                                       "runs exactly its 8 runs")
    assert ": at quick, w2_noise.mnist.scales: paper, " in hows["local_privacy_w2_mnist"]
    assert hows["celeba_iclr"].startswith("`snakemake iclr_table2_3 --cores all --config scale=quick` runs exactly "
                                          "its 6 runs") and "CelebA's files placed by hand" in hows["celeba_iclr"]
    assert "pipeline.experiments" not in " ".join(hows.values())
    # a drawn figure follows its table in the menu, a CSV is no figure
    assert page.figures == [
        ("table1_fmnist_samples", page.category_of("table1_fmnist"),
         {"table or figure": "01 Table 1 (table1_fmnist) · ours: 3 of 2 rows · figure: sample grids"})]


def test_the_first_page_lists_what_ran_the_claims_and_the_not_run_list_and_snakemake_reads_the_order(
        params, tmp_path: Path) -> None:
    built = _built(params)
    page = build_page(params, built, [], runs=["dps_fmnist", "<gswgan>"])
    written = write_page(page, built, tmp_path)
    assert {p.name for p in written} == {f"{n}.html" for n in built} | {"overview.html", PAGE_FILE}
    overview = (tmp_path / "overview.html").read_text()
    assert "2\nruns of ours evaluated (dps_fmnist, &lt;gswgan&gt;)" in overview
    assert "Table 1 (<code>table1_fmnist</code>: 3 of\n2 rows with our numbers)" in overview
    # the claims, each with the claim checker's verdict, from the notes of the tables with runs of ours
    assert "with the verdict of the claim checker\n(<code>dpsynth.report.claims</code>)" in overview
    assert "Decided claims: not yet" not in overview
    assert f"(<code>table1_fmnist</code>): {note_html(CLAIM)}" in overview
    assert "1 more claim is stated by tables with no run\nof ours at this scale, not checked:\n" \
           "<code>local_privacy_w2</code>" in overview
    not_run = overview.split("<h2>Not run at scale quick</h2>")[1]
    assert not_run.count("<li><b>") == len(page.not_run) == sum(1 for b in built.values() if not b.ours)
    # what workflow/rules/report.smk hands Snakemake: each table's category and label, from page.json
    output = SimpleNamespace(tables=str(tmp_path))
    assert table_category(SimpleNamespace(name="table1_fmnist"), output) == page.category_of("table1_fmnist")
    assert table_labels(SimpleNamespace(name="privacy"), output) == {
        "table or figure": "01 (privacy) · ours: 3 of 2 rows"}
    assert json.loads((tmp_path / PAGE_FILE).read_text())["figures"] == {}
    with pytest.raises(ValueError, match=rf"{PAGE_FILE}: no table 'nope'.*re-run `dpsynth report`"):
        table_category(SimpleNamespace(name="nope"), output)


def test_an_unconditional_generators_grid_has_no_class_rows(tmp_path: Path) -> None:
    from matplotlib.figure import Figure as MplFigure

    from dpsynth.evaluate.sampling import sample_grid

    figures: list = []
    real = MplFigure.savefig

    def spy(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        figures.append(self)
        return real(self, *args, **kwargs)

    x = np.random.default_rng(0).integers(0, 255, (40, 1, 28, 28), dtype=np.uint8)
    y = np.repeat(np.arange(10), 4)[::-1].copy()  # the placeholder labels an unconditional generator's set carries
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(MplFigure, "savefig", spy)
        sample_grid(x, y, 10, tmp_path / "u.png", per_class=4, class_names=[str(k) for k in range(10)],
                    conditional=False)
    ax = figures[-1].axes[0]
    assert [t.get_text() for t in ax.get_yticklabels()] == []
    assert ax.get_xlabel() == "unconditional generator: its first 40 samples (no labels)"
    shown = ax.images[0].get_array()
    # the samples in their order, the placeholder labels ignored
    assert np.array_equal(shown[:28, :28], x[0, 0]) and np.array_equal(shown[28:56, :28], x[4, 0])


# --------------------------------------------------------------------------- the page in a browser

def _page_data(page: str, var: str) -> dict:
    """The report's own data (``var results = {...};``, ``var categories = ...``): what its menu and frames show."""
    m = re.search(rf'<script id="{var}">\s*var {var} = (.*?);\s*</script>', page, re.S)
    assert m, f"no {var} in the report page"
    return json.loads(m.group(1))


def _browser(page: Path, tmp_path: Path, window: tuple[int, int] | None = None) -> str:
    """``page`` rendered by headless Chromium (scripts/report-screenshot.sh) in a ``window`` (width, height; the
    script's default otherwise): its DOM after its scripts ran, as text; the screenshot must not be blank.
    Skips without Chromium, fails under CI."""
    import html
    import os
    import subprocess

    from PIL import Image

    from tests.conftest import require

    shot, dom = tmp_path / f"{page.stem}.png", tmp_path / f"{page.stem}-dom.html"
    env = {**os.environ, **({"REPORT_WINDOW": f"{window[0]},{window[1]}"} if window else {})}
    res = subprocess.run(["bash", str(REPO / "scripts/report-screenshot.sh"), str(page), str(shot), str(dom)],
                         capture_output=True, text=True, timeout=120, env=env)
    require(res.returncode != 3, res.stderr.strip())  # no headless chromium (scripts/system-packages.sh installs it)
    assert res.returncode == 0, res.stderr
    pixels = np.asarray(Image.open(shot).convert("L"), dtype=float)
    assert pixels.shape[0] > 500 and pixels.std() > 10, f"the screenshot of {page.name} is blank"
    body = dom.read_text()
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", body)).split())


def test_report_page_renders(smoke_pipelines, tmp_path: Path) -> None:
    """`snakemake --report` of the finished smoke pipeline, opened in headless Chromium: the first page says
    what ran, where the claims go and what did not run; Table 1 is in the page as HTML (not a download),
    under its paper; opened as the page's frame opens it (its data URI), Chromium shows our numbers of
    Table 1 and every note of its Markdown version; no figure is a "not run" placeholder."""
    ws = smoke_pipelines.snakemake
    page_file = tmp_path / "report.html"
    run([venv_bin("snakemake"), "--report", str(page_file)], ws)
    page = page_file.read_text()
    for table in ("table1_fmnist", "pm_grid_fmnist", "privacy_ledger"):
        assert f'Table <tt class=\\"docutils literal\\">{table}</tt>' in page, table  # its caption
    for fig in ("training_dps_fmnist", "pm_grid_fmnist_heatmap", "w2_noise_fashion_mnist"):
        assert f'Figure <tt class=\\"docutils literal\\">{fig}</tt>' in page, fig
    assert 'Synthetic samples of run <tt class=\\"docutils literal\\">dps_fmnist</tt>' in page
    results, categories = _page_data(page, "results"), _page_data(page, "categories")
    table = "results/tables/table1_fmnist.html"
    assert results[table]["mime_type"] == "text/html" and "results/tables/table1_fmnist.csv" not in results
    where = [c for c, subs in categories.items() if any(table in paths for paths in subs.values())]
    assert where == ["1. DP-Sinkhorn ICLR submission (OpenReview, ICLR 2021)"]
    assert not any(p.endswith("overview.html") for p in results)  # the first page's part, not a result
    manifest = json.loads((ws / "results/tables/page.json").read_text())
    figures = {Path(p).stem for p in results if p.startswith("results/figures/")}
    assert figures == set(manifest["figures"]) and "table1_mnist_samples" not in figures  # drawn ones only

    first = _browser(page_file, tmp_path)
    for words in ("our numbers beside the papers'", "Configuration: scale smoke", "What ran",
                  "Table 1 ( table1_fmnist : 3 of 11 rows with our numbers)", "with the verdict of the claim checker",
                  "Not run at scale smoke", "(table1_mnist) : no run of ours at scale smoke",
                  "with the same accounting code training used", "Where each result lives"):
        assert words in first, words
    assert "independent accountant before" not in first

    # Table 1 as the page's frame loads it
    shown = tmp_path / "table1_fmnist.html"
    shown.write_bytes(base64.b64decode(results[table]["data_uri"].split("base64,", 1)[1]))
    text = _browser(shown, tmp_path)
    csv = pd.read_csv(ws / "results/tables/table1_fmnist.csv", dtype=str, keep_default_na=False)
    ours = csv[csv["Scale"] == "smoke"]
    assert list(ours["Run"]) == ["real_fashion_mnist", "gswgan_fmnist", "dps_fmnist"]
    for col in ("FID ours", "LogReg (%) ours", "MLP (%) ours", "CNN (%) ours", "FID paper"):
        for value in ours[col]:
            assert value in text, (col, value)
    md = (ws / "results/tables/table1_fmnist.md").read_text()
    notes = [" ".join(n[2:].replace("`", "").split())
             for n in md.split("Notes:", 1)[1].splitlines() if n.startswith("- ")]
    assert len(notes) >= 5 and all(n in text for n in notes), [n for n in notes if n not in text]


#: The frame in which `snakemake --report` shows a table's page in a 1400x1000 window (issue 70's measure:
#: 775 px wide beside the menu; the frame is as tall as the window, Tailwind's h-screen).
FRAME = (775, 1000)
#: Added to a copy of a table's page: after layout, the first accuracy cell of the first row, its header
#: and its box, printed into the page as text (the DOM Chromium dumps), so the test reads where it lies.
_MEASURE = """<script>
addEventListener("load", () => {
  const head = [...document.querySelectorAll("table.results thead th")];
  const col = head.findIndex(th => /\\(%\\)|\\bAcc\\b/.test(th.textContent));
  const cell = document.querySelector("table.results tbody tr").children[col];
  const r = cell.getBoundingClientRect();
  const out = document.createElement("pre");
  out.textContent = "first-accuracy " + JSON.stringify({header: head[col].textContent, text: cell.textContent,
    left: r.left, right: r.right, top: r.top, bottom: r.bottom, width: innerWidth, height: innerHeight});
  document.body.appendChild(out);
});
</script>
</body>"""


def first_accuracy_box(built: BuiltTable, tmp_path: Path) -> dict:
    """Where Table 1's first accuracy value lies when its page is opened in the report's frame (``FRAME``)."""
    page = tmp_path / f"{built.name}-measured.html"
    page.write_text(table_document(built, "Table 1", "smoke").replace("</body>", _MEASURE, 1), encoding="utf-8")
    text = _browser(page, tmp_path, FRAME)
    m = re.search(r"first-accuracy (\{.*?\})", text)
    assert m, f"the measuring script did not run: {text[-300:]}"
    return dict(json.loads(m.group(1)))


def test_table1s_first_accuracy_is_on_the_first_screen(tmp_path: Path) -> None:
    """Issue 70: at 1400x1000 Table 1's first accuracy column started ~1,636 px into the report's 775 px frame,
    behind Method, Run, Scale and every epsilon convention. Built from the smoke run's rows (the real data,
    DP-Sinkhorn, GS-WGAN; the fixture metrics of tests/test_report.py, at scale smoke under params.yaml's
    report scale, so the Scale cells are their longest) and opened as the report's frame shows it, the first
    row's first accuracy value lies wholly inside the frame's first screen."""
    from dpsynth.report.tables import build_table
    from tests.test_report import DPS_PRIVACY, GS_PRIVACY, write_metrics

    results = tmp_path / "results"
    write_metrics(results, "real_fashion_mnist", fid=None, scale="smoke",
                  acc={"logreg": (0.8451, 0.0), "mlp": (0.8823, 0.0), "cnn": (0.9081, 0.0)})
    write_metrics(results, "dps_fmnist", privacy=DPS_PRIVACY, scale="smoke")
    write_metrics(results, "gswgan_fmnist", privacy=GS_PRIVACY, scale="smoke")
    built = build_table("table1_fmnist", load_params(REPO / "params.yaml"), results)
    box = first_accuracy_box(built, tmp_path)
    assert (box["width"], box["height"]) == FRAME, box  # the window is the frame
    assert box["header"].startswith("LogReg (%) ours") and box["text"] == "84.5 (1 run, 5 sets, all equal)", box
    assert 0 <= box["left"] and box["right"] <= FRAME[0] and 0 <= box["top"] and box["bottom"] <= FRAME[1], box


def test_no_table_of_the_page_shows_raw_latex(params, tmp_path: Path) -> None:
    """Issue 70: a cell of Table 1 showed the paper's '($\\nabla_{\\theta} \\hat{S}$)'. No cell, header or note
    of any params.yaml table (built with no runs: every paper row and note is there) holds '$' or a backslash."""
    from dpsynth.report.tables import build_tables

    built = build_tables(params, tmp_path)
    shown = {name: [*map(str, b.frame.columns), *map(str, b.frame.to_numpy().ravel()), *b.notes, b.title]
             for name, b in built.items()}
    assert sum(len(v) for v in shown.values()) > 500
    assert {n: [t for t in texts if "$" in t or "\\" in t] for n, texts in shown.items()} == {n: [] for n in shown}
    assert "'DP-Sinkhorn (∇θ Ŝ)'" in " ".join(shown["table1_fmnist"])
