"""The rule for committed results (docs/privacy.md, "Committed results"): `docs/results/` holds copies of a run's
tables, figures and raw rows in git, outside DVC's push flags, so a test holds them to the release rule by hand:
only datasets the shipped params.yaml declares public, every noise-free part labelled, nothing from private/."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from tests.conftest import REPO

RESULTS = REPO / "docs" / "results"
#: A committed file's dataset, from its name (``w2_noise_mnist.csv``, ``reshetova_fig11_mnist.md``).
NAMED = re.compile(r"_(?P<dataset>[a-z0-9]+)(?:_samples)?\.(?:csv|json|md|png)$")


def _folders() -> list[Path]:
    return sorted(p for p in RESULTS.iterdir() if p.is_dir())


def test_committed_results_are_of_public_datasets_and_label_what_has_no_noise() -> None:
    shipped = yaml.safe_load((REPO / "params.yaml").read_text(encoding="utf-8"))
    public, datasets = set(shipped["data"]["public"]), set(shipped["datasets"]) | set(shipped["data"]["public"])
    assert _folders(), f"{RESULTS}: no committed results to check"
    for folder in _folders():
        files = [f for f in folder.rglob("*") if f.is_file()]
        named = {m["dataset"] for f in files if (m := NAMED.search(f.name)) and m["dataset"] in datasets}
        assert named and named <= public, (folder.name, named - public)
        readme = (folder / "README.md").read_text(encoding="utf-8")
        assert "outside the privacy guarantee" in readme and "public" in readme, folder
        for f in files:
            assert "private" not in f.relative_to(folder).parts, f  # no copy of the private root
            if f.suffix == ".md" and ("reference: clean training records" in (text := f.read_text(encoding="utf-8"))
                                      or "w2_noise" in text):
                assert "outside the privacy guarantee" in text, f  # quotes the noise-free sweep: labelled
