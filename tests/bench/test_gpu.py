"""bench/gpu.py: its rows' command lines, the summary, and one family end to end on the CPU (the GPU
figures come from a lent GPU machine, bench/gpu_session.sh)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


def _row(family, label, epoch, total=None, test=0.7):
    return {"family": family, "label": label, "train_epoch_s": epoch, "train_time_s": total or epoch, "test": test}


def test_summary_keys_of_the_issue(bench):
    gpu = bench("gpu")
    rows = [_row("sage", "gnnkit", 1.0), _row("sage", "gnnkit, no prefetch", 1.25),
            _row("sage", "gnnkit, CPU sampling", 6.0), _row("sage", "PyG", 5.0),
            _row("gcn", "gnnkit", 0.05), _row("gcn", "PyG", 0.06),
            _row("reuse", "reuse", 1.0, total=20.0, test=0.795), _row("reuse", "fresh sampling", 1.5, total=30.0, test=0.8)]
    assert gpu.summarise(rows) == {"sage_products_epoch_s": 1.0, "gpu_sampling_speedup": 6.0, "prefetch_speedup": 1.25,
                                   "sage_gnnkit_over_pyg_speedup": 5.0, "gcn_gnnkit_over_pyg_epoch": 0.8333,
                                   "reuse_end_to_end_speedup": 1.5, "reuse_acc_gap": 0.5}
    assert gpu.summarise(rows[:1])["gpu_sampling_speedup"] is None  # a family that did not run


def test_rows_differ_only_in_their_path(bench):
    gpu = bench("gpu")
    args = gpu.argparse.Namespace(epochs=3, reuse_epochs=20, device="cuda", dataset_sampled=None, dataset_full="x",
                                  test_batches=54, cpu_workers=8, profile_steps=30)
    sage = [gpu.command(c, args, Path("r")) for c in gpu.configs(["sage"])]
    assert all(c[c.index("--trainer.callbacks.init_args.steps") + 1] == "30" for c in sage)  # sampled rows profile
    assert all("--trainer.accelerator" in c and c[c.index("--trainer.max_epochs") + 1] == "3" for c in sage)
    assert [c[c.index("--data.sampler_device") + 1] for c in sage] == ["auto", "auto", "cpu", "cpu"]
    assert [c[c.index("--data.prefetch") + 1] if "--data.prefetch" in c else None for c in sage] == [
        None, "0", None, None]  # the recipe's default, and the row without it
    assert all(c[c.index("--trainer.limit_test_batches") + 1] == "54" for c in sage)
    workers = [c[c.index("--data.num_workers") + 1] if "--data.num_workers" in c else None for c in sage]
    assert workers == [None, None, "8", "8"]
    assert [c[c.index("--model.aggregation") + 1] for c in sage] == ["gnnkit", "gnnkit", "gnnkit", "pyg"]
    assert all(c[c.index("--trainer.callbacks.init_args.epoch") + 1] == "0" for c in sage)
    reuse = [gpu.command(c, args, Path("r")) for c in gpu.configs(["reuse"])]
    assert "--data.reuse" not in reuse[0] and reuse[1][reuse[1].index("--data.reuse") + 1] == "null"
    assert reuse[0][reuse[0].index("--trainer.max_epochs") + 1] == "20"
    assert all(c[c.index("--trainer.callbacks.init_args.epoch") + 1] == "2" for c in reuse)  # a replay epoch
    gcn = gpu.command(gpu.configs(["gcn"])[0], args, Path("r"))
    assert gcn[gcn.index("--data.dataset") + 1] == "x" and "--trainer.limit_test_batches" not in gcn
    assert not any("StepProfile" in a for a in gcn)  # one step an epoch


def test_a_profiled_rows_phases_are_printed(bench, capsys):
    gpu = bench("gpu")
    profile = {"epoch": 0, "steps": 30, "host_ms": {"data": 2.0, "forward": 1.0, "backward": 1.5, "optimizer": 0.5, "step": 5.0},
               "gpu_ms": {"data": 0.5, "forward": 1.0, "backward": 1.5, "optimizer": 0.5, "step": 3.5},
               "syncs": {"data": 4.0, "forward": 0.0, "backward": 0.0, "optimizer": 0.0, "step": 4.0},
               "sync_sites": {"gnnkit/data/device_sampling.py:120 sample": 4.0},
               "operators": [{"name": "spmm_csr_cuda", "calls": 15, "self_ms": 3.25}],
               "whole_epoch": {"steps": 192, "first_ms": 45.2, "median_ms": 7.3, "mean_ms": 8.2,
                               "slowest": [[12, 60.1], [3, 20.0]], "window": [10, 45]}}
    formats = gpu.layer_formats({"layer0": {"forward": "segment", "counts": {"segment/gather_scatter": 12}}})
    gpu.print_profiles([{**_row("sage", "gnnkit", 1.0), "step_profile": profile, "formats": formats},
                        _row("gcn", "gnnkit", 1.0)])
    out = capsys.readouterr().out
    assert "sage / gnnkit: a step's phases in epoch 0, median of 30 steps" in out and "gcn" not in out
    assert "sage / gnnkit: SpMM formats (forward/backward) layer0 segment/gather_scatter x12" in out
    assert [line.split() for line in out.splitlines() if line.startswith("data")] == [["data", "2.000", "0.500", "4.0"]]
    assert "3.250 ms      15 calls  spmm_csr_cuda" in out
    assert "4.00 syncs a step at gnnkit/data/device_sampling.py:120 sample" in out
    assert ("whole epoch, host clock: 192 steps, the first 45.2 ms from the epoch's start, then median 7.30 ms, "
            "mean 8.20 ms; slowest 60.1 (step 12), 20.0 (step 3); steps 10-44 were the profile's (slower)") in out


def _fake_run(gpu, ran):
    """A stand-in for ``gpu.run`` that records which rows ran and returns a row for each."""
    def run(config, args, workdir):
        ran.append((config.family, config.label))
        return {**_row(config.family, config.label, 1.0), "batches_per_s": 1.0, "peak_gpu_mb": None,
                "peak_rss_mb": 1.0, "sampler_device": "cpu"}
    return run


def test_families_span_calls_by_resuming_an_unfinished_result(bench, tmp_path):
    """Each row is written as it finishes; a later call with --resume runs only the missing rows of
    its families and keeps the earlier ones, in table order; the result is complete once all are."""
    gpu, ran = bench("gpu"), []
    gpu.run = _fake_run(gpu, ran)
    out = tmp_path / "gpu.json"
    base = ["--device", "cpu", "--json", str(out), "--epochs", "2"]
    gpu.main([*base, "--families", "gcn"])
    first = json.loads(out.read_text())
    assert ran == [("gcn", "gnnkit"), ("gcn", "PyG")] and first["complete"] is False
    assert first["args"]["families"] == ["gcn"]
    partial = tmp_path / "partial.json"
    partial.write_text(json.dumps({**first, "rows": first["rows"][:1]}))  # as if cut short after one row
    gpu.main([*base, "--families", "sage", "gcn", "reuse", "--resume", str(partial)])
    result = json.loads(out.read_text())
    assert ran[2:] == [("sage", "gnnkit"), ("sage", "gnnkit, no prefetch"), ("sage", "gnnkit, CPU sampling"),
                       ("sage", "PyG"), ("gcn", "PyG"), ("reuse", "reuse"), ("reuse", "fresh sampling")]
    in_order = [(c.family, c.label) for c in gpu.configs(gpu.FAMILIES)]
    assert [(r["family"], r["label"]) for r in result["rows"]] == in_order
    assert result["complete"] is True and result["summary"]["gcn_gnnkit_over_pyg_epoch"] == 1.0


def test_a_failed_row_is_recorded_and_the_others_still_run(bench, tmp_path):
    gpu, ran = bench("gpu"), []
    fake, failing = _fake_run(gpu, ran), ["gnnkit, CPU sampling"]  # fails the first time only

    def run(config, args, workdir):
        if config.label in failing:
            failing.remove(config.label)
            raise RuntimeError("bench/gpu.py: sage / gnnkit, CPU sampling failed (exit 1):\nboom")
        return fake(config, args, workdir)

    gpu.run = run
    out = tmp_path / "gpu.json"
    gpu.main(["--device", "cpu", "--json", str(out), "--families", "sage", "gcn"])
    result = json.loads(out.read_text())
    failed = [r for r in result["rows"] if "error" in r]
    assert [r["label"] for r in failed] == ["gnnkit, CPU sampling"] and "boom" in failed[0]["error"]
    assert ran == [("sage", "gnnkit"), ("sage", "gnnkit, no prefetch"), ("sage", "PyG"), ("gcn", "gnnkit"),
                   ("gcn", "PyG")]
    assert result["summary"]["gpu_sampling_speedup"] is None and result["complete"] is False
    gpu.main(["--device", "cpu", "--json", str(out), "--families", "sage", "--resume", str(out)])  # runs it again
    assert ran[-1] == ("sage", "gnnkit, CPU sampling")


@pytest.mark.parametrize("change", [["--epochs", "3"], ["--dataset-full", "other"], "complete"])
def test_resume_refuses_a_result_of_other_arguments_or_a_complete_one(bench, tmp_path, change, capsys):
    gpu, ran = bench("gpu"), []
    gpu.run = _fake_run(gpu, ran)
    out = tmp_path / "gpu.json"
    gpu.main(["--device", "cpu", "--json", str(out), "--epochs", "2", "--families", "gcn"])
    if change == "complete":
        out.write_text(json.dumps({**json.loads(out.read_text()), "complete": True}))
        change = []
    with pytest.raises(SystemExit) as exit_info:
        gpu.main(["--device", "cpu", "--epochs", "2", "--families", "reuse", "--resume", str(out), *change])
    assert exit_info.value.code == 2 and f"--resume {out}" in capsys.readouterr().err
    assert ran == [("gcn", "gnnkit"), ("gcn", "PyG")]


def test_a_report_that_timed_fewer_epochs_than_it_trained_fails_its_row(bench, tmp_path, monkeypatch):
    """A report cut back to its best epoch (the test restored the best checkpoint's timer) gave a 2.1x
    reuse speedup that was 9 epochs against 18: such a row is an error, not a figure."""
    import argparse
    from types import SimpleNamespace

    gpu = bench("gpu")
    timed = [1.0, 1.0, 1.0]

    def train(cmd, **kwargs):
        run_dir = Path(cmd[cmd.index("--run_dir") + 1])
        run_dir.mkdir(parents=True, exist_ok=True)
        report = {"epochs": 3, "train_epoch_time_s": 1.0, "train_time_s": sum(timed), "train_epoch_times_s": timed,
                  "train_batches_per_s": 5.0, "peak_rss_mb": 1.0, "metric": "acc", "test": 0.5}
        (run_dir / "report.json").write_text(json.dumps(report))
        return SimpleNamespace(returncode=0)

    monkeypatch.setattr(gpu.subprocess, "run", train)
    args = argparse.Namespace(epochs=3, reuse_epochs=3, dataset_sampled=None, dataset_full=None, device="cpu",
                              test_batches=1, cpu_workers=0, profile_steps=0, timeout=60)
    config = gpu.configs(["gcn"])[0]
    assert gpu.run(config, args, tmp_path)["train_epoch_times_s"] == timed
    timed.pop()
    with pytest.raises(RuntimeError, match="report.json timed 2 of its 3 epochs"):
        gpu.run(config, args, tmp_path)


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="the refusal is for machines without CUDA")
def test_cuda_without_a_gpu_is_one_clear_line(tmp_path):
    result = subprocess.run([sys.executable, str(BENCH / "gpu.py"), "--families", "gcn"], capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 2 and "--device cuda: no CUDA device here" in result.stderr


@pytest.mark.slow
def test_one_family_end_to_end_on_the_cpu(tmp_path):
    out = tmp_path / "gpu.json"
    result = subprocess.run([sys.executable, str(BENCH / "gpu.py"), "--device", "cpu", "--families", "gcn",
                             "--epochs", "2", "--dataset-full", "synthetic-tiny", "--workdir", str(tmp_path / "w"),
                             "--json", str(out), "--png", str(tmp_path / "gpu.png")], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    report = json.loads(out.read_text())
    assert [r["label"] for r in report["rows"]] == ["gnnkit", "PyG"]
    assert sum(report["rows"][0]["formats"]["layer0"].values()) > 0 and "formats" not in report["rows"][1]
    assert all(r["train_epoch_s"] > 0 and r["epochs"] == 2 and 0 <= r["test"] <= 1 for r in report["rows"])
    assert all(len(r["train_epoch_times_s"]) == 2 for r in report["rows"])
    assert report["summary"]["gcn_gnnkit_over_pyg_epoch"] > 0 and "gcn (cpu)" in result.stdout
    assert (tmp_path / "gpu.png").read_bytes()[:4] == b"\x89PNG"
