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

