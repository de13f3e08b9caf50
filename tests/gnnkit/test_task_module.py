import pytest
import torch
from torch import nn

from gnnkit.metrics import make_evaluator
from gnnkit.task_module import STAGES, TaskModule, gather_rows


class Probe(TaskModule):
    def __init__(self):
        super().__init__()
        self.layer = nn.Linear(3, 2)
        self.frozen = nn.Parameter(torch.zeros(5), requires_grad=False)
        self.evaluator = make_evaluator("probe", "acc", 1)
        self._outputs = {s: [] for s in STAGES}
        self.logged = {}

    def log(self, name, value, **kwargs):
        self.logged[name] = value


def test_epoch_metric_scores_every_step_of_the_stage_and_logs_both_names():
    probe = Probe()
    probe._outputs["val"] += [(torch.tensor([0, 1]), torch.tensor([[2.0, 0.0], [0.0, 1.0]])),
                              (torch.tensor([1, 1]), torch.tensor([[3.0, 0.0], [0.0, 1.0]]))]
    probe.on_validation_epoch_end()
    assert probe.logged == {"val_metric": pytest.approx(0.75), "val_acc": pytest.approx(0.75)}
    assert probe._outputs["val"] == []  # the next epoch starts afresh
    probe.on_test_epoch_end()  # a stage without outputs logs nothing
    assert "test_metric" not in probe.logged


def test_num_params_counts_the_trainable_ones_and_one_process_gathers_itself():
    assert Probe().num_params == 3 * 2 + 2
    t = torch.arange(6).view(3, 2)
    assert gather_rows(t) is t


@pytest.mark.parametrize(("precision", "dtype"), [("bf16-true", torch.bfloat16), ("64-true", torch.float64),
                                                  ("32-true", None), ("bf16-mixed", None)])
def test_a_pyg_batch_gets_the_true_precisions_float_dtype_and_is_copied(precision, dtype):
    """Lightning converts plain tensors (and collections of them) for `*-true` precisions before the
    transfer, but not a PyG `Data`; the module does, on a copy (a full graph's loader repeats it)."""
    import lightning.pytorch as pl
    from torch_geometric.data import Data

    probe = Probe()
    probe.trainer = pl.Trainer(precision=precision, accelerator="cpu", logger=False, enable_progress_bar=False)
    batch = Data(x=torch.randn(4, 3), edge_index=torch.tensor([[0, 1], [1, 2]]), y=torch.tensor([0.0, 1.0, 1.0, 0.0]))
    out = probe.on_before_batch_transfer({"graph": batch}, 0)["graph"]
    if dtype is None:
        assert out is batch
        return
    assert out is not batch and batch.x.dtype == batch.y.dtype == torch.float32  # the loader's batch untouched
    assert out.x.dtype == out.y.dtype == dtype and out.edge_index.dtype == torch.int64
    assert torch.equal(out.x, batch.x.to(dtype))
