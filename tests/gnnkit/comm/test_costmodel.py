"""The cost model's formulas against hand-computed values, and ``gnnkit comm plan``."""

from __future__ import annotations

import pytest

from gnnkit.cli import main
from gnnkit.comm.costmodel import Calibration, estimate, fit_alpha_beta, plan


def test_allreduce_is_the_ring_formula() -> None:
    cal = Calibration(alpha=1e-5, beta=1e-9)
    est = estimate("allreduce", 1000, 4, cal)
    assert est.latency == pytest.approx(6 * 1e-5)
    assert est.bandwidth == pytest.approx(2 * 3 / 4 * 4000 * 1e-9)
    assert estimate("dear", 1000, 4, cal).total == pytest.approx(est.total)


def test_topk_a2a_bytes_and_window() -> None:
    cal = Calibration(alpha=0.0, beta=1e-9, topk_s=0.0)
    n, p, d = 1e6, 4, 0.01
    a2a = estimate("topk_a2a", n, p, cal, density=d)
    assert a2a.bytes_per_rank == pytest.approx((3 / 4 * 2 * d * n + 3 * 2 * d * n) * 4)
    # dense gather regime (paper): beats all-gather top-k above density 1/(2(P-1))
    dense = estimate("topk_a2a", n, p, cal, density=0.3)
    assert dense.bytes_per_rank == pytest.approx((3 / 4 * 2 * 0.3 * n + 3 * n / 4) * 4)
    assert dense.total < estimate("topk_allgather", n, p, cal, density=0.3).total
    assert dense.total < estimate("allreduce", n, p, cal).total


def test_multistream_gains_only_with_parallelism() -> None:
    one = Calibration(alpha=0.0, beta=1e-9, stream_parallelism=1.0)
    two = Calibration(alpha=0.0, beta=1e-9, stream_parallelism=2.0)
    base = estimate("allreduce", 1e6, 2, one).total
    assert estimate("multistream", 1e6, 2, one, streams=4).total == pytest.approx(base)
    assert estimate("multistream", 1e6, 2, two, streams=4).total == pytest.approx(base / 2)
    linked = two.with_bandwidth(1.0)
    assert estimate("multistream", 1e6, 2, linked, streams=4).bandwidth == pytest.approx(
        estimate("allreduce", 1e6, 2, linked).bandwidth)  # the link is shared


def test_fit_alpha_beta_recovers_constants() -> None:
    samples = [(6.0, b, 6.0 * 2e-5 + b * 3e-9) for b in (1e3, 1e5, 1e7)]
    alpha, beta = fit_alpha_beta(samples)
    assert alpha == pytest.approx(2e-5) and beta == pytest.approx(3e-9)
    with pytest.raises(ValueError, match="two different sizes"):
        fit_alpha_beta([(1.0, 1.0, 1.0)])


def test_fit_alpha_beta_weighs_every_size_alike() -> None:
    """With the largest size 20% off the alpha-beta line, no size is fitted 10% off: plain least
    squares would follow the largest size and miss the smallest by 18%."""
    samples = [(6.0, b, (6.0 * 2e-5 + b * 3e-9) * (1.2 if b == 1e7 else 1.0)) for b in (1e3, 1e4, 1e5, 1e7)]
    alpha, beta = fit_alpha_beta(samples)
    assert max(abs(x * alpha + y * beta - t) / t for x, y, t in samples) < 0.1


def test_plan_scales_to_1024_ranks() -> None:
    for ranks in (2, 64, 1024):
        rows = plan(25e6, ranks, Calibration().with_bandwidth(10.0))
        assert [r.total for r in rows] == sorted(r.total for r in rows)
    with pytest.raises(ValueError, match="ranks"):
        estimate("allreduce", 10, 1, Calibration())


def test_comm_plan_cli(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["comm", "plan", "--params", "25e6", "--ranks", "4", "--bandwidth", "1"]) == 0
    out = capsys.readouterr().out
    assert "topk_a2a" in out and "is fastest" in out and "vs allreduce" in out


def test_calibration_files(tmp_path) -> None:
    import json

    cal = Calibration(alpha=1e-4, beta=2e-9)
    cal.save(tmp_path / "cal.json")
    assert Calibration.load(tmp_path / "cal.json") == cal
    bench = {"summary": {}, "calibration": {"loopback": {"alpha": 1e-6}, "1gbit": {"alpha": 2e-6}}}
    (tmp_path / "bench.json").write_text(json.dumps(bench))
    assert Calibration.load(tmp_path / "bench.json").alpha == 1e-6
    assert Calibration.load(tmp_path / "bench.json", "1gbit").alpha == 2e-6
    with pytest.raises(ValueError, match=r"bench.json: no network 'wifi'; it has \['1gbit', 'loopback'\]"):
        Calibration.load(tmp_path / "bench.json", "wifi")


@pytest.mark.parametrize(("args", "message"), [
    (["--ranks", "1"], "argument --ranks: expected a value >= 2 and <= 1024, got 1"),
    (["--bandwidth", "0"], "argument --bandwidth: expected a value > 0, got 0"),
    (["--streams", "0"], "argument --streams: expected a value >= 1, got 0"),
    (["--density", "2"], "argument --density: expected a value > 0 and <= 1, got 2"),
    (["--latency", "nan"], "argument --latency: expected a value >= 0, got nan"),
    (["--ranks", "four"], "argument --ranks: expected an integer, got 'four'"),
])
def test_comm_plan_refuses_values_that_have_no_plan(capsys, args, message) -> None:
    """They were tracebacks (ZeroDivisionError, ValueError) or tables of nan and negative times."""
    with pytest.raises(SystemExit) as done:
        main(["comm", "plan", "--params", "1e6", "--ranks", "4", *args])
    err = capsys.readouterr().err
    assert done.value.code == 2 and err == f"gnnkit: error: {message} (see gnnkit comm plan --help)\n"


@pytest.mark.parametrize(("text", "message"), [
    (None, "unreadable calibration"), ("[1]", "expected a calibration object"), ("{not json", "unreadable calibration"),
    ('{"alpha": 1, "zzz": 2}', "got zzz (unknown)"), ('{"alpha": "fast"}', "got other values"),
])
def test_a_bad_calibration_file_is_one_line_naming_it(tmp_path, capsys, text, message) -> None:
    file = tmp_path / "cal.json"
    if text is not None:
        file.write_text(text)
    assert main(["comm", "plan", "--params", "1e6", "--ranks", "4", "--calibration", str(file)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"gnnkit: error: {file}: ") and message in err and "\n" not in err
    assert main(["comm", "plan", "--params", "1e6", "--ranks", "4", "--network", "1gbit"]) == 2
    assert "give --calibration" in capsys.readouterr().err
