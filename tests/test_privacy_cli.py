"""`dpsynth privacy ...`: the issue's acceptance commands, table and JSON output, bad input."""

from __future__ import annotations

import json

import pytest

from dpsynth.cli import main


def test_steps_acceptance_command(capsys) -> None:
    rc = main("privacy steps --sigma 1.1 --batch-size 50 --dataset-size 60000 --delta 1e-5 --epsilon 10 --json".split())
    out = json.loads(capsys.readouterr().out)
    assert rc == 0
    assert 3.42e6 <= out["results"]["rdp_classic"] <= 3.50e6
    assert out["results"]["rdp_modern"] > out["results"]["rdp_classic"]


def test_gswgan_epsilon_table_prints_both_ways(capsys) -> None:
    rc = main("privacy epsilon --method gs_wgan --shards 1000 --batch-size 32 --sigma 1.07 --steps 20000 --delta 1e-5".split())
    text = capsys.readouterr().out
    assert rc == 0
    rows = {line.split()[0]: line.split()[1] for line in text.splitlines()[2:] if line.startswith(("as_", "sound"))}
    assert 9.0 <= float(rows["as_published.rdp_classic"]) <= 10.5
    assert 300 <= float(rows["sound.rdp_classic"]) <= 400


def test_sigma_command(capsys) -> None:
    rc = main("privacy sigma --batch-size 50 --dataset-size 60000 --steps 3464000 --delta 1e-5 --epsilon 10 --json".split())
    assert rc == 0
    assert json.loads(capsys.readouterr().out)["results"]["rdp_classic"] == pytest.approx(1.1, rel=2e-3)


@pytest.mark.parametrize(
    "argv",
    [
        "privacy steps --sigma 1.1 --batch-size 50 --dataset-size 60000 --delta 1e-5 --epsilon 0",
        "privacy steps --sigma 0 --batch-size 50 --dataset-size 60000 --delta 1e-5 --epsilon 10",
        "privacy steps --sigma 1.1 --batch-size 50 --dataset-size 60000 --delta 1.5 --epsilon 10",
        "privacy steps --sigma 1.1 --batch-size 70000 --dataset-size 60000 --delta 1e-5 --epsilon 10",
        "privacy epsilon --sigma 1.1 --batch-size 50 --delta 1e-5 --steps 10",
        "privacy epsilon --method gs_wgan --batch-size 32 --sigma 1.07 --steps 10 --delta 1e-5",
    ],
)
def test_bad_input_exit_2_with_message(argv: str, capsys) -> None:
    assert main(argv.split()) == 2
    assert "dpsynth: error:" in capsys.readouterr().err


def test_privacy_ledger_lists_an_empty_ledger_and_refuses_bad_settles_in_one_line(
        tmp_path, release_ledger, monkeypatch, capsys) -> None:
    """`dpsynth privacy ledger` (issue 71 item 5) on an empty ledger, and its refusals: --why without --settle, an
    id no unsettled reservation has, a missing --params file. Settling a real reservation: test_ledger_upkeep."""
    monkeypatch.chdir(tmp_path)
    assert main(["privacy", "ledger"]) == 0
    out = capsys.readouterr().out
    assert f"release ledger {release_ledger / 'releases.jsonl'} ($DPSYNTH_LEDGER)" in out
    assert "no reservation is waiting to be settled" in out
    for argv, said in ((["--why", "x"], "--why and --no-noise-drawn go with --settle ID"),
                       (["--settle", "abc", "--why", "gone"], "no unsettled reservation(s) have an id starting 'abc'"),
                       (["--params", "nope.yaml"], "--params nope.yaml: no such parameters file")):
        assert main(["privacy", "ledger", *argv]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("dpsynth: error: ") and said in err[0], err
