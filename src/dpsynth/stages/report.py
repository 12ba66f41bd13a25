"""The report stage (`dpsynth report`): every table (md/csv/tex, and html for the report page) and figure
from the runs' metrics.json, and the page's first part and order (``dpsynth.report.page``).

Every metrics.json is read and validated before anything is written, and the tables and
figures are built into staging folders beside ``results/tables`` and ``results/figures``
that replace them only when everything succeeded: a bad input or a killed report leaves the
previous complete set, never a mix of old and new files.
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import TYPE_CHECKING

from dpsynth.errors import DpsynthError
from dpsynth.locations import check_writable_dir

if TYPE_CHECKING:
    from dpsynth.config import Params

#: What a folder the report replaces may hold: its own outputs, atomic-write temporaries, and
#: Snakemake's marker of a directory output. Anything else means the folder is not the report's.
_REPORT_SUFFIXES = {".md", ".csv", ".tex", ".html", ".json", ".png", ".tmp"}


def _check_replaceable(folder: Path, flag: str) -> None:
    """Refuse to replace a folder holding files the report did not write (``--tables .`` would
    otherwise move the working directory aside and delete it)."""
    if not (folder.exists() or folder.is_symlink()):
        return
    if not folder.is_dir():
        raise DpsynthError(f"{folder}: not a folder ({flag}); the report writes its files into a folder")
    for entry in sorted(folder.iterdir()):
        ours = entry.suffix in _REPORT_SUFFIXES or entry.name.startswith(".snakemake")
        if not ours or (entry.is_dir() and not entry.is_symlink()):
            raise DpsynthError(f"{folder}: holds {entry.name!r}, which `dpsynth report` does not write; the "
                               f"report replaces this folder as a whole, so it refuses to ({flag}: choose an "
                               f"empty folder or one holding only the report's outputs)")


def run_report(params: Params, *, results: str = "results", models: str = "models", tables: str | None = None,
               figures: str | None = None, private_out: str = "private") -> int:
    """Build every table and figure from RESULTS' metrics.json files into ``tables`` and ``figures``
    (default: RESULTS/tables and RESULTS/figures), each folder replaced as a whole; ``models`` holds
    the runs' training logs (the training curves). The privacy ledger also composes every release the
    release ledger (``ledger_dir``, shared by every workspace) records. ``private_out``: the private root, where
    GS-WGAN's training-split statistics lie; shown for the datasets ``data.public`` declares public now."""
    from dpsynth.io import staged_dir
    from dpsynth.report.figures import make_figures
    from dpsynth.report.html import write_page
    from dpsynth.report.ledger import LEDGER, build_ledger
    from dpsynth.report.page import build_page
    from dpsynth.report.runs import RunStore
    from dpsynth.report.tables import BuiltTable, build_tables, write_index, write_table

    t0 = time.perf_counter()
    results_dir = Path(results)
    tables_dir = Path(tables) if tables else results_dir / "tables"
    figures_dir = Path(figures) if figures else results_dir / "figures"
    same = tables_dir.resolve() == figures_dir.resolve()
    if not same and (tables_dir.resolve() in figures_dir.resolve().parents
                     or figures_dir.resolve() in tables_dir.resolve().parents):
        raise DpsynthError(f"--tables {tables_dir} and --figures {figures_dir}: one folder inside the other; "
                           f"each is replaced as a whole, so give two separate folders (or the same one)")
    _check_replaceable(tables_dir, "--tables")
    _check_replaceable(figures_dir, "--figures")
    check_writable_dir(tables_dir.parent, "--tables" if tables else "--results")
    check_writable_dir(figures_dir.parent, "--figures" if figures else "--results")
    configured = {name: (exp.dataset, exp.method) for name, exp in params.all_experiments().items()}
    # every metrics.json verified and validated, or nothing
    store = RunStore.load_all(results_dir, configured, private=Path(private_out), public=frozenset(params.data.public))
    built = build_tables(params, results_dir, store)  # every table validated before anything is written
    from dpsynth.privacy.ledger_store import ReleaseLedger

    # every release ever made (the release ledger, shared by every workspace), beside the current runs
    ledger = ReleaseLedger.configured(params.ledger_dir)
    frame, notes = build_ledger(results_dir, store.runs(), ever=ledger.read(), ledger=str(ledger.path))
    built[LEDGER] = BuiltTable(LEDGER, "Privacy ledger: every released model per dataset, composed",
                               "ours (no paper counterpart)", frame, notes, ours=len(frame))
    with contextlib.ExitStack() as stack:
        # Exits run in reverse: on success the figures are swapped in, then the tables; on any
        # exception both staging folders are deleted and the previous folders stay as they were.
        tables_stage = stack.enter_context(staged_dir(tables_dir))
        figures_stage = tables_stage if same else stack.enter_context(staged_dir(figures_dir))
        for b in built.values():
            write_table(b, tables_stage, params.scale)
            print(f"report: {b.name}: {len(b.frame)} rows ({b.ours} with our numbers) -> "
                  f"{tables_dir / b.name}.{{md,csv,tex}}")
        write_index(built, tables_stage, params.scale)
        figures = make_figures(params, {k: b for k, b in built.items() if k != LEDGER}, results_dir, figures_stage,
                               store, models=Path(models))
        page = build_page(params, built, figures, [r.name for r in store.runs()])
        write_page(page, built, tables_stage)
    drawn = sum(f.drawn for f in figures)
    print(f"report: {len(built)} tables -> {tables_dir} (start at {tables_dir / 'index.md'}; each also as .html "
          f"for the report page), {drawn} figures -> {figures_dir}; not run at scale {params.scale!r}: "
          f"{len(page.not_run)} tables and figures, listed in {tables_dir / 'overview.html'} "
          f"({time.perf_counter() - t0:.1f} s)")
    return 0
