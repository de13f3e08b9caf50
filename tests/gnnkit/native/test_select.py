"""Native magnitude selection (the candidate step of top-k compression) against torch's mask and nonzero."""

from __future__ import annotations

import pytest
import torch

from gnnkit.native import ops


def reference(x: torch.Tensor, threshold: float) -> tuple[torch.Tensor, torch.Tensor]:
    indices = (x.abs() >= threshold).nonzero().flatten()
    return indices, x[indices]


@pytest.mark.parametrize("n", [0, 1, 1000, (1 << 16) + 3, 300_000])
@pytest.mark.parametrize("quantile", [0.0, 0.5, 0.99, 1.0])
def test_select_magnitude_matches_mask_and_nonzero(ext, n: int, quantile: float) -> None:
    x = torch.randn(n, generator=torch.Generator().manual_seed(n))
    if n > 10:
        x[::7] = 0.0  # ties at zero
        x[3] = -x.abs().max() - 1  # the largest magnitude is negative
    threshold = float(x.abs().quantile(quantile)) if n else 0.5
    indices, values = ops.select_magnitude(x, threshold)
    expected_indices, expected_values = reference(x, threshold)
    assert indices.dtype == torch.int64 and torch.equal(indices, expected_indices)
    assert torch.equal(values, expected_values)


def test_select_magnitude_is_independent_of_threads(ext) -> None:
    x = torch.randn(500_000, generator=torch.Generator().manual_seed(0))
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = ops.select_magnitude(x, 2.0)
        torch.set_num_threads(max(2, threads))
        many = ops.select_magnitude(x, 2.0)
    finally:
        torch.set_num_threads(threads)
    assert all(torch.equal(a, b) for a, b in zip(one, many))


def test_select_magnitude_skips_nan_and_reads_strided_views(ext) -> None:
    x = torch.tensor([1.0, float("nan"), -3.0, float("inf"), 0.1, -float("inf")])
    indices, values = ops.select_magnitude(x, 1.0)
    assert indices.tolist() == [0, 2, 3, 5] and values.tolist() == [1.0, -3.0, float("inf"), -float("inf")]
    base = torch.arange(20, dtype=torch.float32)
    indices, values = ops.select_magnitude(base[::2], 10.0)  # a non-contiguous view
    assert indices.tolist() == [5, 6, 7, 8, 9] and values.tolist() == [10.0, 12.0, 14.0, 16.0, 18.0]
