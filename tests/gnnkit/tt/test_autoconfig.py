import math

import pytest

from gnnkit.tt import auto_config
from gnnkit.tt.autoconfig import factor_dim, factor_rows


@pytest.mark.parametrize("n, dim", [(2_449_029, 100), (169_343, 128), (169_343, 64), (1000, 16)])
@pytest.mark.parametrize("target", [100, 1000])
def test_compression_target_is_met_with_the_largest_uniform_rank(n, dim, target):
    try:
        config = auto_config(n, dim, compression=target)
    except ValueError as err:
        assert "out of reach" in str(err)
        return
    assert config.num_embeddings == n and config.embedding_dim == dim
    assert config.capacity >= n and config.compression >= target
    r = max(config.ranks)
    bigger = auto_config(n, dim, rank=r + 1)
    assert bigger.ranks == config.ranks or bigger.compression < target


def test_budget_and_rank_and_defaults():
    config = auto_config(169_343, 64, budget_bytes=64_000)
    assert config.num_params * 4 <= 64_000
    assert auto_config(169_343, 64, rank=5).ranks == (5, 5)
    assert auto_config(169_343, 64).ranks == (16, 16)
    assert auto_config(169_343, 64, num_cores=2, rank=7).ranks == (7,)


def test_shapes_are_balanced():
    assert sorted(factor_dim(100, 3)) == [4, 5, 5]
    assert factor_dim(100, 3)[1] == 4  # the smallest factor in the middle core
    p = factor_rows(2_449_029, 3)
    assert math.prod(p) >= 2_449_029 and max(p) - min(p) <= 2


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(rank=4, compression=10), "at most one"),
        (dict(compression=1e9), "out of reach"),
        (dict(budget_bytes=10), "out of reach"),
        (dict(num_cores=-2), "auto_config: num_cores: expected an integer >= 2, got -2"),  # it looped forever
        (dict(num_cores=0), "num_cores: expected an integer >= 2, got 0"),
        (dict(rank=0), "auto_config: rank: expected an integer >= 1, got 0"),  # it became the default rank
        (dict(compression=0), "auto_config: compression: expected a finite number > 0, got 0"),
        (dict(bytes_per_param=0), "auto_config: bytes_per_param: expected an integer >= 1"),
    ],
)
def test_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        auto_config(169_343, 64, **kwargs)


def test_prime_dimension_is_refused():
    with pytest.raises(ValueError, match="embedding_dim 101"):
        auto_config(1000, 101)


def test_numpy_sizes_are_taken():
    import numpy as np

    assert auto_config(np.int64(1000), np.int64(64)).num_embeddings == 1000
