from types import SimpleNamespace

import pytest
import torch

from gnnkit.data.datamodule import GraphDataModule, batches_wanted
from gnnkit.data.preprocessing import PreprocessOverrides
from gnnkit.module import batch_targets
from pipeline import DatasetError
from tests.conftest import graph_arrays


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


def _data_parser():
    from lightning.pytorch.cli import LightningArgumentParser

    parser = LightningArgumentParser(exit_on_error=False)
    parser.add_lightning_class_args(GraphDataModule, "data")
    return parser


def test_preprocess_options_parse_as_recipe_fields():
    """`--data.preprocess.normalize_features row` parses as LightningCLI parses it (None = registry's)."""
    parser = _data_parser()
    config = parser.parse_args(["--data.dataset", "synthetic-tiny", "--data.undirected", "true",
                                "--data.preprocess.normalize_features", "row"])
    assert config.data.undirected is True and config.data.preprocess.normalize_features == "row"
    assert parser.parse_args([]).data.preprocess is None
    assert "normalize_features" in parser.dump(config)
    data = parser.instantiate(config).data
    assert isinstance(data.hparams.preprocess, dict)  # plain types in checkpoints
    facts = data.describe()
    assert facts["normalize_features"] == "row" and facts["graph"] == "symmetrised"
    assert facts["preprocess"]["normalize_features"] == "row"
    assert torch.allclose(data.graph.x.sum(1)[data.graph.x.sum(1) > 0.5], torch.tensor(1.0))


def test_a_recipe_budget_builds_out_of_core_into_the_same_entry(make_ogb_folder):
    # a graph no other test preprocesses: the budgeted build must be the one that makes the entry
    folder = str(make_ogb_folder(**{k: v for k, v in graph_arrays(seed=17).items() if k != "meta"}))
    budgeted = GraphDataModule(folder, preprocess=PreprocessOverrides(memory_budget_mb=256))
    assert budgeted.entry.manifest["stats"]["out_of_core"]["budget_mb"] == 256
    assert GraphDataModule(folder).entry.path == budgeted.entry.path  # the same key: a cache hit
    assert budgeted.hparams.preprocess["memory_budget_mb"] == 256


def test_describe_says_which_graph_was_trained(tiny):
    facts = tiny.describe()
    assert facts["graph"] == "symmetrised" and facts["self_loops"] == "keep" and facts["normalize_features"] == "none"
    assert facts["num_edges"] == tiny.graph.num_edges
    assert facts["raw_edges"] is not None and facts["raw_edges"] < facts["num_edges"] <= 2 * facts["raw_edges"]


def test_a_folder_is_directed_unless_the_recipe_symmetrises_it(make_ogb_folder):
    folder = str(make_ogb_folder())
    directed = GraphDataModule(folder).describe()
    assert directed["graph"] == "directed" and directed["num_edges"] == directed["raw_edges"] == 1000
    symmetrised = GraphDataModule(folder, undirected=True, self_loops="remove").describe()
    assert symmetrised["graph"] == "symmetrised" and symmetrised["self_loops"] == "remove"
    assert 1000 < symmetrised["num_edges"] <= 2000


@pytest.mark.parametrize("args,message", [
    ({"preprocess": PreprocessOverrides(normalize_features="rows")},
     "data.preprocess.normalize_features: expected one of ['none', 'row', 'column', 'auto'], got 'rows'"),
    ({"self_loops": "drop"}, "data.self_loops: expected one of ['keep', 'remove'], got 'drop'"),
    ({"preprocess": PreprocessOverrides(memory_budget_mb=0)},
     "data.preprocess.memory_budget_mb: expected a whole number of MiB >= 1 (or null for in-memory), got 0"),
])
def test_bad_preprocessing_values_name_the_recipe_field(args, message):
    with pytest.raises(DatasetError) as err:
        GraphDataModule("synthetic-tiny", **args)
    assert str(err.value) == message


def test_an_epoch_wants_no_batch_beyond_where_max_steps_ends_the_run():
    trainer = SimpleNamespace(num_training_batches=10, max_steps=-1, global_step=0, accumulate_grad_batches=1)
    assert batches_wanted(trainer) == 10  # no max_steps: the epoch's count (under limit_train_batches)
    trainer.max_steps, trainer.global_step, trainer.accumulate_grad_batches = 7, 3, 2
    assert batches_wanted(trainer) == 8  # 4 optimizer steps left, 2 batches each
    trainer.global_step = 7
    assert batches_wanted(trainer) == 0
    trainer.num_training_batches, trainer.max_steps, trainer.global_step, trainer.accumulate_grad_batches = (
        float("inf"), 5, 2, 1)
    assert batches_wanted(trainer) == 3
    trainer.max_steps = 100
    assert batches_wanted(trainer) == 98
