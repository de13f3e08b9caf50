import pytest
import torch

from gnnkit.data.datamodule import GraphDataModule
from gnnkit.module import batch_targets


@pytest.fixture(scope="module")
def tiny():
    return GraphDataModule("synthetic-tiny")


def test_shapes_come_from_the_cache(tiny):
    assert tiny.num_features == 32 and tiny.num_classes == 8 and tiny.num_nodes == tiny.graph.num_nodes
    assert tiny.task == {"name": "synthetic-tiny", "eval_metric": "acc", "num_tasks": 1,
                         "task_type": "multiclass classification"}
    assert tiny.full_batch and tiny.describe()["loader"] == "full-batch"


def test_full_batch_loaders_target_each_split(tiny):
    for stage, split in (("train", "train"), ("val", "valid"), ("test", "test")):
        batches = list(getattr(tiny, f"{stage}_dataloader")())
        assert len(batches) == 1
        batch = batches[0]
        assert torch.equal(batch_targets(batch), tiny.graph.split[split])
        assert batch.edge_index.shape == (2, tiny.graph.num_edges)
        assert batch.x.data_ptr() == tiny.graph.x.data_ptr()  # no copy of the features


def test_sampled_loaders_put_seeds_first(tiny):
    dm = GraphDataModule("synthetic-tiny", batch_size=64, num_neighbors=[5, 3])
    assert not dm.full_batch and dm.describe()["loader"] == "neighbor-sampled [5, 3]"
    seen = []
    for batch in dm.train_dataloader():
        assert batch.batch_size <= 64
        assert torch.equal(batch.y[batch_targets(batch)], dm.graph.y[batch.n_id[: batch.batch_size]])
        seen.append(batch.n_id[: batch.batch_size])
    assert torch.equal(torch.cat(seen).sort().values, dm.graph.split["train"].sort().values)


def test_directed_override_changes_the_cache_entry(tiny):
    directed = GraphDataModule("synthetic-tiny", undirected=False)
    assert directed.entry.key != tiny.entry.key
    assert directed.graph.num_edges < tiny.graph.num_edges
