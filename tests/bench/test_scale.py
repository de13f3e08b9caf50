"""bench/scale.py: partitioned against replicated training, end to end on a small graph, and its summary."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


def _row(mode, ranks, mb, epoch_s, test, halo_mb=0.0, rate=None, aggregate=False):
    return {"mode": mode, "ranks": ranks, "graph_feature_mb": mb, "halo_feature_mb": halo_mb,
            "boundary_sampling": rate, "aggregate_input": aggregate, "peak_rss_mb": [1.0] * ranks,
            "epoch_s": epoch_s, "halo_mb_per_epoch": 0.0, "valid": test, "test": test}


def test_summary_compares_the_largest_world(bench):
    scale = bench("scale")
    rows = [_row("replicated", 1, 100.0, 1.0, 0.70), _row("replicated", 4, 100.0, 2.0, 0.70),
            _row("partitioned", 4, 30.0, 1.0, 0.695, halo_mb=20.0), _row("partitioned", 4, 30.0, 1.0, 0.69, 10.0, 0.5)]
    summary = scale.summarise(rows, "loopback")
    assert summary["memory_per_rank_over_replicated_p4"] == 0.5 and summary["memory_bound_1_3_over_p"] == 0.325
    assert summary["memory_per_rank_over_replicated_p4_without_halo"] == 0.3
    assert summary["memory_per_rank_over_replicated_p4_bns0.5"] == 0.4
    assert summary["epoch_partitioned_over_replicated_p4"] == 0.5 and summary["acc_gap"] == 0.5
    assert summary["input_aggregated"] is False
    assert summary["memory_per_rank_over_replicated_p4_every_layer_exchanged"] == 0.5
    # with the input aggregated once, that run leads; the run exchanging every layer stays beside it
    aggregated = scale.summarise([*rows, _row("partitioned", 4, 28.0, 0.8, 0.698, 2.0, aggregate=True)], "loopback")
    assert aggregated["input_aggregated"] is True and aggregated["memory_per_rank_over_replicated_p4"] == 0.3
    assert aggregated["epoch_partitioned_over_replicated_p4"] == 0.4 and aggregated["acc_gap"] == 0.2
    assert aggregated["memory_per_rank_over_replicated_p4_every_layer_exchanged"] == 0.5
    assert aggregated["epoch_partitioned_over_replicated_p4_every_layer_exchanged"] == 0.5
    assert aggregated["acc_gap_every_layer_exchanged"] == 0.5


def _sampled(mode, ranks, network, batch, epoch_s, test, mb=100.0, cache_mb=0.0):
    return {"mode": mode, "ranks": ranks, "network": network, "batch_size": batch, "global_batch": batch * ranks,
            "graph_feature_mb": mb, "cache_mb": cache_mb, "epoch_s": epoch_s, "test": test}


def test_sampled_summary_takes_accuracy_from_the_loopback_runs(bench):
    scale = bench("scale")
    rows = [_sampled("replicated", 4, "1gbit", 8, 10.0, 0.60), _sampled("partitioned", 4, "1gbit", 8, 9.0, 0.61, 20, 5),
            _sampled("single", 1, "loopback", 32, 30.0, 0.80), _sampled("single", 1, "loopback", 8, 40.0, 0.81),
            _sampled("replicated", 4, "loopback", 8, 8.0, 0.79), _sampled("partitioned", 4, "loopback", 8, 10.0, 0.78,
                                                                           20, 5)]
    summary = scale.summarise_sampled(rows)
    assert summary["sampled_memory_per_rank_over_replicated_p4"] == 0.25
    assert summary["sampled_epoch_partitioned_over_replicated_p4"] == 0.9 and summary["sampled_epoch_network"] == "1gbit"
    assert summary["sampled_epoch_partitioned_over_replicated_p4_loopback"] == 1.25
    assert summary["sampled_acc_gap"] == 2.0 and summary["sampled_acc_gap_replicated"] == 1.0  # both 2-epoch runs
    assert summary["sampled_acc_gap_vs_batch8"] == 3.0


@pytest.mark.slow
def test_two_ranks_on_a_small_graph(tmp_path):
    out = tmp_path / "scale.json"
    result = subprocess.run([sys.executable, str(BENCH / "scale.py"), "--dataset", "synthetic-tiny", "--epochs", "2",
                             "--ranks", "1", "2", "--hidden", "16", "--boundary-sampling", "0.5",
                             "--json", str(out)],
                            capture_output=True, text=True, timeout=300, env={**os.environ, "GNNKIT_NATIVE": "0"})
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(out.read_text())
    modes = [(r["mode"], r["ranks"], r["aggregate_input"]) for r in report["rows"]]
    assert modes == [("replicated", 1, False), ("replicated", 2, False), ("partitioned", 2, False),
                     ("partitioned", 2, True), ("partitioned", 2, False)]
    partitioned, aggregated, sampled = report["rows"][2:]
    assert partitioned["halo_mb_per_epoch"] > 0 and partitioned["graph_feature_mb"] < report["rows"][1]["graph_feature_mb"]
    assert 0 < aggregated["halo_mb_per_epoch"] < partitioned["halo_mb_per_epoch"]  # no first-layer exchange
    # the same model; Adam turns float rounding in near-zero gradients into other steps, so the
    # accuracies may differ by a node or two (the exact equality is test_halo.py's)
    assert abs(aggregated["test"] - partitioned["test"]) <= 0.03
    assert sampled["boundary_sampling"] == 0.5 and sampled["halo_mb_per_epoch"] < 0.7 * partitioned["halo_mb_per_epoch"]
    assert "graph+feat MB" in result.stdout and report["summary"]["ranks"] == 2


def test_out_of_core_result_joins_the_summary_and_survives_other_modes(tmp_path):
    out_of_core = {"rows": [], "summary": {"dataset": "synthetic-papers-tiny", "out_of_core_peak_mb": 300.5,
                                           "out_of_core_budget_mb": 2048, "time_ratio": 0.9, "peak_ratio": 0.2,
                                           "byte_identical": True}}
    source, out = tmp_path / "out_of_core.json", tmp_path / "scale.json"
    source.write_text(json.dumps(out_of_core))
    out.write_text(json.dumps({"rows": [], "summary": {"acc_gap": 0.1}, "sampled": {"rows": [], "args": {}}}))
    result = subprocess.run([sys.executable, str(BENCH / "scale.py"), "--out-of-core", "--out-of-core-json", str(source),
                             "--json", str(out), "--png", str(tmp_path / "scale.png")],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["summary"]["acc_gap"] == 0.1 and report["summary"]["out_of_core_peak_mb"] == 300.5
    assert report["summary"]["out_of_core_peak_over_in_memory"] == 0.2 and report["out_of_core"] == out_of_core
    assert "sampled" in report  # the other modes' sections are kept
    assert (tmp_path / "scale.png").read_bytes()[:4] == b"\x89PNG"


def test_plot_draws_the_committed_report(bench, tmp_path):
    scale = bench("scale")
    scale.plot(json.loads((BENCH / "results" / "scale.json").read_text()), tmp_path / "scale.png")
    assert (tmp_path / "scale.png").stat().st_size > 10_000
