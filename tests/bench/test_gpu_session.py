"""bench/gpu_session.sh, the lent GPU machine's script, run here against a stand-in ``python3`` that
records its command lines: which steps run what, the background preprocessing, and the call's
time limit. (The steps themselves need a GPU; a lent machine runs them.)"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "gpu_session.sh"

pytestmark = pytest.mark.skipif(shutil.which("bash") is None or shutil.which("timeout") is None,
                                reason="needs bash and coreutils' timeout")


def _session(tmp_path: Path, *steps: str, fail: str = "",
             **env: str) -> tuple[subprocess.CompletedProcess, list[str], str]:
    """Run the script with ``python3`` recording its arguments (and failing for command lines that
    contain ``fail``; the script's own JSON checks run in this Python); (process, the recorded
    command lines, session.log)."""
    stub = tmp_path / "bin"
    stub.mkdir()
    calls = tmp_path / "calls.txt"
    failing = f'case "$*" in *"{fail}"*) exit 1 ;; esac\n' if fail else ""
    (stub / "python3").write_text(f'#!/usr/bin/env bash\ncase "$*" in *json.load*) exec {sys.executable} "$@" ;; esac\n'
                                  f'echo "$*" >> {calls}\n{failing}')
    (stub / "python3").chmod(0o755)
    out = tmp_path / "out"
    environ = {**os.environ, "PATH": f"{stub}:{os.environ['PATH']}", "OUT": str(out),
               "GNNKIT_HOME": str(tmp_path / "home"), **env}
    environ.pop("GNNKIT_NATIVE_CACHE", None)
    proc = subprocess.run(["bash", str(SCRIPT), *steps], capture_output=True, text=True, env=environ, timeout=120)
    recorded = calls.read_text().splitlines() if calls.exists() else []
    log = (out / "session.log").read_text() if (out / "session.log").exists() else ""
    return proc, recorded, log


def test_the_tier_runs_every_gpu_test_and_the_native_checks_on_the_images_torch(tmp_path):
    proc, calls, log = _session(tmp_path, "tests")
    assert proc.returncode == 0, log
    tier = next(c for c in calls if "pytest" in c and "-m gpu tests" in c)
    assert "-n 16" in tier  # the stand-in imports xdist
    assert any("pytest" in c and "-m not gpu tests/gnnkit/native" in c for c in calls)


def test_the_benchmarks_datasets_are_preprocessed_in_the_background_before_they_train(tmp_path):
    proc, calls, log = _session(tmp_path, "setup", "gpu", GNNKIT_GPU_FAMILIES="gcn sage")
    assert proc.returncode == 0, log
    prep = [c for c in calls if c.startswith("-m gnnkit.cli preprocess")]
    assert sorted(prep) == ["-m gnnkit.cli preprocess synthetic-arxiv", "-m gnnkit.cli preprocess synthetic-products"]
    bench = next(i for i, c in enumerate(calls) if c.startswith("bench/gpu.py"))
    assert all(calls.index(c) < bench for c in prep) and "--families gcn sage" in calls[bench]
    assert log.index("== prep: done waiting") < log.index("== bench-gpu")
    assert (tmp_path / "home" / "results").is_dir()  # where the next call on this machine finds the results


@pytest.mark.parametrize("complete", [False, True])
def test_a_second_call_on_the_same_machine_goes_on_from_the_first_calls_results(tmp_path, complete):
    """An unfinished table of an earlier call is resumed; a finished one (an earlier session's, from the
    tree) is not, and is not sent back as this call's."""
    kept = tmp_path / "home" / "results"
    kept.mkdir(parents=True)
    (kept / "gpu.json").write_text(f'{{"complete": {str(complete).lower()}, "rows": ["from an earlier call"]}}')
    proc, calls, log = _session(tmp_path, "gpu", GNNKIT_GPU_FAMILIES="reuse")
    assert proc.returncode == 0, log
    bench = next(c for c in calls if c.startswith("bench/gpu.py"))
    out = tmp_path / "out" / "gpu.json"
    if complete:
        assert "--resume" not in bench and not out.exists()  # the stand-in wrote none
    else:
        assert out.read_text() == (kept / "gpu.json").read_text() and f"--resume {out}" in bench


def test_steps_without_training_preprocess_nothing(tmp_path):
    proc, calls, _ = _session(tmp_path, "setup", "tests")
    assert proc.returncode == 0 and not [c for c in calls if "preprocess" in c]


def test_a_step_past_the_calls_limit_is_skipped_and_counted(tmp_path):
    proc, calls, log = _session(tmp_path, "tests", GNNKIT_CALL_S="20")
    assert proc.returncode == 2 and "SKIPPED" in log and not [c for c in calls if "pytest" in c]


def test_an_unknown_step_is_refused_before_anything_runs(tmp_path):
    proc, calls, _ = _session(tmp_path, "setup", "bogus")
    assert proc.returncode == 2 and "unknown step 'bogus'" in proc.stdout and calls == []


def test_a_failed_setup_skips_the_benchmarks_but_not_the_tier(tmp_path):
    """Without the native build (or the carried wheels) gnnkit falls back to pure PyTorch: the tier
    still runs and shows why, the benchmarks do not publish the fallback's numbers."""
    proc, calls, log = _session(tmp_path, "setup", "tests", "native", "gpu", fail="native.get()")
    assert proc.returncode == 3, log  # build, bench-native and bench-gpu
    assert "== bench-native: SKIPPED (setup step 'build' failed" in log and "== bench-gpu: SKIPPED" in log
    assert any("-m gpu tests" in c for c in calls) and not [c for c in calls if c.startswith("bench/")]
