"""bench/update_rank.py: energy ranks and truncations of a cumulative update."""

import torch


def test_energy_rank_and_truncation_on_a_known_spectrum(bench):
    update_rank = bench("update_rank")
    torch.manual_seed(0)
    q1, _ = torch.linalg.qr(torch.randn(20, 20))
    q2, _ = torch.linalg.qr(torch.randn(12, 12))
    s = torch.tensor([4.0, 2.0, 1.0, 0.5] + [0.0] * 8)  # energies 16, 4, 1, 0.25 of 21.25
    update = q1[:, :12] @ torch.diag(s) @ q2.T
    assert update_rank.energy_rank(update, 0.9) == 2  # 20 / 21.25 = 0.94
    assert update_rank.energy_rank(update, 0.99) == 4  # 21 / 21.25 = 0.988 < 0.99
    two = update_rank.truncated(update, 2)
    assert torch.linalg.matrix_rank(two) == 2
    expected = q1[:, :2] @ torch.diag(s[:2]) @ q2[:, :2].T
    assert torch.allclose(two, expected, atol=1e-5)
    assert torch.allclose(update_rank.truncated(update, 12), update, atol=1e-5)


def test_plot_redraws_the_committed_run(bench, tmp_path, monkeypatch):
    import json
    import sys
    from pathlib import Path

    committed = Path(__file__).resolve().parents[2] / "bench" / "results" / "update_rank.json"
    (tmp_path / "rank.json").write_text(committed.read_text())
    monkeypatch.setattr(sys, "argv", ["update_rank.py", "--plot", str(tmp_path / "rank.json")])
    bench("update_rank").main()
    assert (tmp_path / "rank.png").stat().st_size > 10_000 and json.loads(committed.read_text())["val_truncated"]
