"""bench/graphprop.py on the small twin: both aggregation paths train, the JSON has every figure; an A/A run."""

from __future__ import annotations

import json
from pathlib import Path


def test_small_run_writes_the_table_json(bench, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("GNNKIT_NATIVE", "0")  # no kernel build for a few tiny batches
    graphprop = bench("graphprop")
    out = tmp_path / "g.json"
    result = graphprop.main(["--dataset", "synthetic-molhiv-small", "--batches", "4", "--warmup", "1",
                             "--layers", "2", "--emb-dim", "16", "--json", str(out)])
    assert json.loads(out.read_text()) == json.loads(json.dumps(result))
    assert result["batches_timed"] == 4 and result["batches_per_epoch"] == 10
    for row in [*result["configs"].values(), result["aggregation_only"]]:
        assert row["pyg_s"] > 0 and row["gnnkit_s"] > 0 and row["ratio"] == row["pyg_s"] / row["gnnkit_s"]
    assert set(result["count_baselines"]) == {"size/degree", "bag of atoms"}
    assert result["aa"] is None and "edge embeddings + sums" in capsys.readouterr().out
    assert result["configs"]["GINE (edge features, the recipe)"]["plan_layer0"]["source"] == "selector"  # no native
    assert out.with_suffix(".png").read_bytes()[:4] == b"\x89PNG"


def test_aa_run_times_one_path_on_both_sides(bench, monkeypatch, capsys):
    monkeypatch.setenv("GNNKIT_NATIVE", "0")
    graphprop = bench("graphprop")
    result = graphprop.main(["--dataset", "synthetic-molhiv-small", "--batches", "2", "--warmup", "0",
                             "--layers", "1", "--emb-dim", "8", "--aa", "pyg"])
    assert result["aa"] == "pyg" and "aggregation_only" not in result
    assert all(row["plan_layer0"] is None for row in result["configs"].values())  # no gnnkit layer ran
    assert "pyg (A) s/epoch" in capsys.readouterr().out


def test_plot_redraws_the_committed_runs(bench, tmp_path):
    graphprop = bench("graphprop")
    results = Path(__file__).resolve().parents[2] / "bench" / "results"
    for name in ("graphprop", "graphprop_aa"):
        (tmp_path / f"{name}.json").write_text((results / f"{name}.json").read_text())
        assert graphprop.main(["--plot", str(tmp_path / f"{name}.json")])["dataset"] == "synthetic-molhiv"
        assert (tmp_path / f"{name}.png").stat().st_size > 10_000
