import pytest
import torch
from ogb.nodeproppred import Evaluator

from gnnkit.metrics import MetricEvaluator, evaluate, make_evaluator


def test_ogb_names_get_ogbs_own_evaluator():
    evaluator = make_evaluator("ogbn-arxiv", "acc", 1)
    assert type(evaluator) is Evaluator and evaluator.name == "ogbn-arxiv"


def test_other_graphs_use_the_same_metric_code_without_pretending():
    evaluator = make_evaluator("my-graph", "acc", 1)
    assert isinstance(evaluator, MetricEvaluator) and evaluator.name == "my-graph"
    assert repr(evaluator) == "MetricEvaluator('my-graph', eval_metric='acc', num_tasks=1)"
    logits = torch.tensor([[2.0, 1.0], [0.0, 3.0], [5.0, 0.0], [0.0, 1.0]])
    assert evaluate(evaluator, torch.tensor([0, 1, 1, 1]), logits) == pytest.approx(0.75)


def test_rocauc_matches_ogb():
    torch.manual_seed(0)
    y = torch.randint(0, 2, (50, 3)).float()
    scores = torch.randn(50, 3) + y
    ours = evaluate(make_evaluator("x", "rocauc", 3), y, scores)
    reference = Evaluator("ogbn-proteins")
    reference.num_tasks = 3
    assert ours == pytest.approx(reference.eval({"y_true": y, "y_pred": scores})["rocauc"])


@pytest.mark.parametrize("metric", ["rocauc", "acc"])
def test_16bit_scores_of_mixed_precision_are_evaluated(metric):
    torch.manual_seed(1)
    y = torch.randint(0, 2, (40, 1)).float() if metric == "rocauc" else torch.randint(0, 3, (40,))
    scores = torch.randn(40, 1 if metric == "rocauc" else 3)
    evaluator = make_evaluator("x", metric, 1)
    assert evaluate(evaluator, y, scores.bfloat16()) == pytest.approx(evaluate(evaluator, y, scores.bfloat16().float()))


def test_bfloat16_labels_of_a_bf16_true_batch_are_evaluated():
    """Under `--trainer.precision bf16-true` a batch's float labels (binary tasks) are bfloat16 too."""
    torch.manual_seed(2)
    y, scores = torch.randint(0, 2, (40, 1)).float(), torch.randn(40, 1)
    evaluator = make_evaluator("x", "rocauc", 1)
    assert evaluate(evaluator, y.bfloat16(), scores.bfloat16()) == pytest.approx(
        evaluate(evaluator, y, scores.bfloat16().float()))
