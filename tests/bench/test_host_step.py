"""bench/host_step.py: the batch is gnnkit's sampler's layout, every row steps, and the no-model row
really runs without a model (as CUDA does: its formats timed once per size class among those that
need no conversion)."""

import torch

from gnnkit.sparse import FORMATS
from gnnkit.sparse.selector import current_selector


def test_the_batch_every_row_and_the_model_free_row(bench):
    host_step = bench("host_step")
    batch = host_step.sampled_batch()
    edge_index, nodes = batch["edge_index"], batch["num_sampled_nodes"]
    assert nodes == [8, 24, 72, 216] and edge_index.size(1) == sum(batch["num_sampled_edges"]) == 312
    assert bool((edge_index[1].diff() >= 0).all())  # sorted by destination, as the sampler emits
    threads = torch.get_num_threads()
    rows = host_step.measure(rounds=1, steps=2)
    assert torch.get_num_threads() == threads  # one thread while it measures, the caller's again after
    assert [r["row"] for r in rows] == list(host_step.ROWS) and all(r["us_per_step"] > 0 for r in rows)
    assert rows[0]["vs_pyg"] == 1.0
    with host_step.without_model(True):
        assert current_selector("cpu") is None
        step, model = host_step.step_fn("gnnkit", "auto", batch)
        step()
    assert current_selector("cpu") is not None  # put back
    for layer in model.layers:  # timed, so which formats won depends on the machine
        plan = layer.last_plan
        assert FORMATS[plan.forward].conversion_free and FORMATS[plan.backward].conversion_free
        assert plan.source == "selector" and layer.plan_counts.total() == 1
