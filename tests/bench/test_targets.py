"""bench/targets.py: an issue's targets checked against a benchmark's summary, and the target lists
of bench/native.py, bench/formats.py and bench/gpu.py naming keys their summaries have."""

from __future__ import annotations

import math

import pytest


def test_a_target_is_met_on_its_side_of_the_bound_and_unmeasured_without_a_number(bench):
    targets = bench("targets")
    at_least, at_most = targets.Target(("a",), 1.3), targets.Target(("b", "c"), 1.5, at_most=True)
    assert [at_least.met(v) for v in (1.3, 1.29, 2.0)] == [True, False, True]
    assert [at_most.met(v) for v in (1.5, 1.51, 0.2)] == [True, False, True]
    assert at_least.met(None) is None and at_least.met(math.nan) is None
    assert at_most.name == "b[c]"


def test_verdicts_read_nested_keys_and_leave_missing_ones_unmeasured(bench):
    targets = bench("targets")
    checks = [targets.Target(("speedup",), 5.0, what="fast"), targets.Target(("e2e", "gcn full-batch"), 1.0),
              targets.Target(("gap",), 0.5, at_most=True), targets.Target(("absent",), 1.0),
              targets.Target(("label",), 1.0)]
    summary = {"speedup": 6.2, "e2e": {"gcn full-batch": 0.97}, "gap": 0.5, "label": "text"}
    got = targets.verdicts(summary, checks, "issue 16")
    assert [(v["key"], v["value"], v["op"], v["met"]) for v in got] == [
        ("speedup", 6.2, ">=", True), ("e2e[gcn full-batch]", 0.97, ">=", False), ("gap", 0.5, "<=", True),
        ("absent", None, ">=", None), ("label", None, ">=", None)]
    assert got[0]["what"] == "fast" and {v["source"] for v in got} == {"issue 16"}


def test_verdicts_print_as_one_line_each(bench, capsys):
    targets = bench("targets")
    checks = [targets.Target(("x",), 1.3, what="x >= 1.3"), targets.Target(("y",), 2.0, at_most=True),
              targets.Target(("z",), 1.0)]
    targets.print_verdicts(targets.verdicts({"x": 1.41, "y": 2.5}, checks, "issue 17"))
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0] == "targets (issue 17):"
    assert lines[1].split()[:5] == ["x", "1.410", ">=", "1.3", "met"] and lines[1].endswith("x >= 1.3")
    assert lines[2].split()[:5] == ["y", "2.500", "<=", "2", "MISSED"]
    assert lines[3].split()[:4] == ["z", "-", ">=", "1"] and "not measured" in lines[3]
    targets.print_verdicts([])
    assert capsys.readouterr().out == ""


def _native_rows(device):
    """One row of each kind bench/native.py's summary reads, as its benches write them."""
    spmm = [{"kind": "spmm", "graph": g, "threads": 16, "ratio": r}
            for g, r in (("powerlaw-arxiv", 1.4), ("uniform-arxiv", 1.1), ("uniform-1M-nnz8M", 1.0))]
    bandwidth = [{"kind": "bandwidth", "graph": g, "threads": 16, "ratio": r}
                 for g, r in (("uniform-1M-nnz8M F=32", 0.7), ("local-1M-nnz8M F=32", 0.55))]
    tt = {"kind": "tt", "graph": "products-shape", "threads": 16, "ratio": 2.5, "vs_plain": 3.5}
    if device == "cuda":
        tt["vs_embedding"] = 1.2
    return [*spmm, *bandwidth, {"kind": "sampler", "graph": "powerlaw-arxiv", "threads": 16, "ratio": 6.0}, tt]


@pytest.mark.parametrize("device, source", [("cpu", "issue 7"), ("cuda", "issue 17")])
def test_native_summary_checks_its_devices_issue(bench, device, source):
    native = bench("native")
    summary = native.summarise(_native_rows(device), device)
    checks = summary["targets"]
    assert {c["source"] for c in checks} == {source}
    assert all(c["value"] is not None for c in checks), checks  # every target names a key the summary has
    verdict = {c["key"]: c["met"] for c in checks}
    assert summary["spmm_bandwidth_fraction_min"] == 0.55 and summary["spmm_bandwidth_fraction"] == 0.7
    if device == "cuda":  # the GPU's bandwidth target holds on every 1M-row graph, not the best one
        assert verdict == {"spmm_vs_torch_csr_powerlaw": True, "spmm_vs_torch_csr_other_min": True,
                           "spmm_bandwidth_fraction_min": False, "sampler_speedup": True, "tt_vs_plain": True,
                           "tt_vs_embedding": True}
    else:
        assert verdict == {"spmm_vs_torch_csr_powerlaw": True, "spmm_vs_torch_csr_other_min": True,
                           "sampler_speedup": True, "tt_fused_speedup": True, "spmm_bandwidth_fraction": True}


def test_formats_targets_name_keys_of_its_summary(bench):
    formats = bench("formats")
    row = {"matrix": "m", "width": 32, "selected_over_oracle": 1.02, "predicted_over_oracle": 1.1,
           "speedup_vs_csr": 1.2, "speedup_vs_pyg": 1.4, "speedup_vs_pyg_gather_scatter": 3.0, "csr_ms": 2.0,
           "oracle_ms": 1.0, "selected": "csr", "oracle": "csr"}
    summary = {**formats.summarise([row]), "epoch_auto_vs_best_fixed": {"gcn full-batch": 1.01, "sage sampled": 0.9}}
    for targets, source in ((formats.CPU_TARGETS, "issue 3"), (formats.GPU_TARGETS, "issue 17")):
        checks = formats.verdicts(summary, targets, source)
        assert all(c["value"] is not None for c in checks), checks
        assert all(c["met"] for c in checks)


def test_gpu_targets_apply_on_a_gpu_only(bench):
    gpu = bench("gpu")
    rows = [{"family": "sage", "label": "gnnkit", "train_epoch_s": 1.4, "train_time_s": 5.0, "test": 0.8}]
    args = gpu.argparse.Namespace(device="cpu", **{k: None for k in gpu.RECORDED})
    assert "targets" not in gpu.result_of(rows, args)["summary"]
    gpu.machine = lambda a: {"device": "cuda", "gpu": "NVIDIA H200", **{k: None for k in gpu.RECORDED}}
    args.device = "cuda"
    assert [c["key"] for c in gpu.result_of(rows, args)["summary"]["targets"]] == [t.name for t in gpu.GPU_TARGETS]
    summary = gpu.summarise(rows)
    checks = {c["key"]: c for c in gpu.verdicts(summary, gpu.GPU_TARGETS, "issue 16")}
    assert checks["sage_products_epoch_s"]["met"] is True and checks["gpu_sampling_speedup"]["met"] is None
    assert set(checks) == {k for k in summary if k not in ("prefetch_speedup", "sage_gnnkit_over_pyg_speedup")}
