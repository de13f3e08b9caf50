import numpy as np
import pytest

from gnnkit.tt.config import TTConfig


def test_numpy_integers_are_integers():
    """auto_config takes numpy's integers; TTConfig refused them as 'expected positive integers'."""
    config = TTConfig(10, tuple(np.array([5, 2])), (np.int32(2), 2), 2)
    assert config.p_shapes == (5, 2) and config.q_shapes == (2, 2)
    assert all(type(v) is int for v in (*config.p_shapes, *config.q_shapes))


@pytest.mark.parametrize("shapes", [(5, 0), (5, True), (5, 2.0), (), "52"])
def test_shapes_that_are_no_positive_integers_are_refused(shapes):
    with pytest.raises(ValueError, match=r"^TTConfig\.p_shapes: expected (a list of )?positive integers"):
        TTConfig(10, shapes, (2, 2), 2)
