import lightning.pytorch as pl
import pytest
import torch
from torch_geometric.data import Data

from gnnkit.data.batch_precision import PrecisionBatches, in_precision


def _trainer(precision: str) -> pl.Trainer:
    return pl.Trainer(precision=precision, accelerator="cpu", logger=False, enable_progress_bar=False)


@pytest.mark.parametrize(("precision", "dtype"), [("bf16-true", torch.bfloat16), ("64-true", torch.float64),
                                                  ("32-true", None), ("bf16-mixed", None)])
def test_a_pyg_batch_gets_the_true_precisions_float_dtype_on_a_copy(precision, dtype):
    """Lightning converts plain tensors (and collections of them) for `*-true` precisions before the
    transfer, but not a PyG `Data`; gnnkit's datamodules do, on a copy (a full graph's loader repeats it)."""
    batch = Data(x=torch.randn(4, 3), edge_index=torch.tensor([[0, 1], [1, 2]]), y=torch.tensor([0.0, 1.0, 1.0, 0.0]))
    out = in_precision({"graph": batch}, _trainer(precision))["graph"]
    if dtype is None:
        assert out is batch
        return
    assert out is not batch and batch.x.dtype == batch.y.dtype == torch.float32  # the loader's batch untouched
    assert out.x.dtype == out.y.dtype == dtype and out.edge_index.dtype == torch.int64
    assert torch.equal(out.x, batch.x.to(dtype))


def test_the_datamodules_hook_converts_and_a_detached_one_leaves_the_batch():
    module = PrecisionBatches()
    batch = Data(x=torch.randn(2, 3))
    assert module.on_before_batch_transfer(batch, 0) is batch  # no trainer yet
    module.trainer = _trainer("bf16-true")
    assert module.on_before_batch_transfer(batch, 0).x.dtype == torch.bfloat16
