"""gnnkit's dropout: identity in evaluation, repeatable under torch's seed, p dropped in training."""

from __future__ import annotations

import pytest
import torch

from gnnkit.models.dropout import dropout


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])  # native kernel, torch's fallback
def test_training_drops_about_p_and_evaluation_is_identity(dtype: torch.dtype) -> None:
    x = torch.rand(200, 500, dtype=dtype) + 0.5
    assert dropout(x, 0.5, training=False) is x
    out = dropout(x, 0.25, training=True)
    kept = out != 0
    assert abs(float(kept.double().mean()) - 0.75) < 0.01
    torch.testing.assert_close(out[kept], x[kept] / 0.75)


def test_runs_repeat_under_the_same_torch_seed() -> None:
    x = torch.rand(1000, 64) + 0.5
    torch.manual_seed(0)
    first = dropout(x, 0.5, training=True)
    second = dropout(x, 0.5, training=True)
    torch.manual_seed(0)
    assert torch.equal(dropout(x, 0.5, training=True), first)
    assert not torch.equal(first, second)
