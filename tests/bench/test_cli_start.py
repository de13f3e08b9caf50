"""bench/cli_start.py: its table and plot from a result, and the baseline run's stand-in import."""

import json
from pathlib import Path

RESULTS = Path(__file__).resolve().parents[2] / "bench" / "results"


def test_the_committed_result_prints_both_tables_and_redraws(bench, tmp_path, monkeypatch, capsys):
    import sys

    cli_start = bench("cli_start")
    result = json.loads((RESULTS / "cli_start.json").read_text())
    cli_start.print_table(result)
    out = capsys.readouterr().out
    assert "slowest gnnkit command" in out and "gnnkit run quickstart, 1 epoch" in out
    (tmp_path / "start.json").write_text(json.dumps(result))
    monkeypatch.setattr(sys, "argv", ["cli_start.py", "--plot", str(tmp_path / "start.json")])
    cli_start.main()
    assert (tmp_path / "start.png").stat().st_size > 10_000


def test_rows_give_the_median_and_its_ratio(bench):
    row = bench("cli_start")._row("x", [3.0, 1.0, 2.0], 4.0)
    assert row == {"command": "x", "min_s": 1.0, "median_s": 2.0, "ratio_to_baseline": 0.5, "times_s": [3.0, 1.0, 2.0]}


def test_the_baseline_runs_gnnkit_with_a_plain_import(bench):
    """The collector-on baseline swaps gnnkit's import for importlib's before gnnkit.cli binds it."""
    code = bench("cli_start").COLLECTOR_ON
    assert code.index("g.import_without_gc = importlib.import_module") < code.index("from gnnkit.cli import main")
