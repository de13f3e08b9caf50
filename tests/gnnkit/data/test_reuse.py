"""The reuse schedule: record, replay bit-identically in a new order, refuse stale caches,
re-sample damaged shards, DALI = torch, and resume mid-schedule from a checkpoint."""

import json

import lightning.pytorch as pl
import pytest
import torch

from gnnkit.data.datamodule import GraphDataModule
from gnnkit.data.reuse import ReuseConfig
from gnnkit.module import NodeClassifier
from pipeline.errors import DatasetError
from pipeline.shard_reader import dali_available


def _datamodule(tmp_path, folder, **reuse) -> GraphDataModule:
    config = ReuseConfig(**{"epochs": 3, "feature_dtype": "float32", "shard_mb": 0.2, "loader": "torch",
                            "workers": 0, "cache_dir": str(tmp_path / folder), **reuse})
    return GraphDataModule("synthetic-tiny", batch_size=64, num_neighbors=[5, 5], reuse=config)


def _key(batch) -> tuple[int, ...]:
    return tuple(batch.input_id.tolist())


def _assert_identical(a, b) -> None:
    assert set(a.keys()) == set(b.keys())
    for key in a.keys():
        if isinstance(a[key], torch.Tensor):
            assert a[key].dtype == b[key].dtype and torch.equal(a[key], b[key]), key
        else:
            assert a[key] == b[key], key


def test_phases_of_the_schedule():
    config = ReuseConfig(epochs=6, factor=3)
    assert [config.phase(e) for e in range(8)] == [
        ("record", 0), ("replay", 0), ("replay", 0), ("record", 3), ("replay", 3), ("replay", 3),
        ("fresh", -1), ("fresh", -1)]
    assert [p for p, _ in map(ReuseConfig(epochs=3).phase, range(4))] == ["record", "replay", "replay", "fresh"]
    assert ReuseConfig().phase(0) == ("fresh", -1)


@pytest.mark.parametrize("field,value", [("epochs", -1), ("factor", 0), ("fresh_fraction", 1.5),
                                         ("loader", "nvme"), ("feature_dtype", "int8"), ("device_cache_mb", -1)])
def test_bad_schedule_is_one_line_naming_the_field(field, value):
    with pytest.raises(ValueError, match=f"^data.reuse.{field}: expected"):
        ReuseConfig(**{field: value})


def test_reuse_needs_sampling():
    with pytest.raises(ValueError, match="data.reuse: .*batch_size > 0"):
        GraphDataModule("synthetic-tiny", batch_size=0, reuse=ReuseConfig(epochs=2))


def test_replayed_batches_are_bit_identical_in_a_new_order(tmp_path):
    dm = _datamodule(tmp_path, "c")
    loader = dm.train_dataloader()
    recorded = {_key(b): b for b in loader}
    replayed = list(loader)
    again = list(loader)
    assert len(replayed) == len(recorded) == len(loader)
    for batch in replayed:
        _assert_identical(recorded[_key(batch)], batch)
    assert [_key(b) for b in replayed] != [_key(b) for b in again]  # a new order each epoch
    assert sorted(map(_key, replayed)) == sorted(recorded)
    stats = dm.reuse_stats
    assert stats.batches == {"fresh": len(loader), "recorded": len(loader), "replayed": 2 * len(loader),
                             "resampled": 0}
    assert list(loader)[0].x.dtype == torch.float32 and dm.reuse_stats.epochs["fresh"] == 1


def test_float16_features_replay_close(tmp_path):
    dm = _datamodule(tmp_path, "c", feature_dtype="float16")
    loader = dm.train_dataloader()
    recorded = {_key(b): b for b in loader}
    for batch in loader:
        original = recorded[_key(batch)]
        assert batch.x.dtype == torch.float32
        assert torch.allclose(batch.x, original.x, atol=1e-2, rtol=1e-3)
        assert torch.equal(batch.edge_index, original.edge_index) and torch.equal(batch.n_id, original.n_id)


def test_structure_only_recording_replays_what_fresh_sampling_gives(tmp_path, monkeypatch):
    """Sampling on a GPU, the features and labels are on the device: records keep the structure
    (node ids, edges, counts), replay gathers x and y again (float16 storage never touches them),
    and the cache is a fraction of a whole-batch one."""
    whole = _datamodule(tmp_path, "whole", feature_dtype="float16")
    list(whole.train_dataloader())
    assert "stored" not in whole.reuse_inputs() and whole.reuse_stats.stored == "batches"  # keys as before
    monkeypatch.setattr(GraphDataModule, "_gathered_on_device", lambda self: {"x": self.graph.x, "y": self.graph.y})
    dm = _datamodule(tmp_path, "structure", feature_dtype="float16")
    loader = dm.train_dataloader()
    recorded = {_key(b): b for b in loader}
    replayed = list(loader)
    assert len(replayed) == len(recorded) and dm.reuse_stats.batches["replayed"] == len(replayed)
    for batch in replayed:
        _assert_identical(recorded[_key(batch)], batch)  # x bit-identical: gathered, not stored
    assert dm.reuse_stats.stored == "structure" and dm.reuse_inputs()["stored"] == "structure"
    shard = json.loads((tmp_path / "structure" / "manifest.json").read_text())
    assert shard["inputs"]["stored"] == "structure"
    assert dm.reuse_stats.cache_bytes < 0.5 * whole.reuse_stats.cache_bytes


@pytest.mark.parametrize("structure", [True, False])
def test_shards_kept_on_the_device_replay_the_recording_every_epoch_without_reading_it(tmp_path, monkeypatch,
                                                                                       structure):
    """Replay on a GPU keeps the shards it read (ReuseConfig.device_cache_mb): later replays read
    nothing, and what they yield is still the recording, after the model trained on those batches
    (a kept shard is shared by every replay, float32 features are views of it: nothing may write
    into it). Forced here on the CPU."""
    import gnnkit.data.reuse as reuse
    from gnnkit.models.node_gnn import NodeGNN
    from pipeline.shard_reader import ResidentShardReader

    assert reuse._kept_on_device(reader := object(), None, "cpu") is reader  # the CPU maps the page cache
    assert reuse._kept_on_device(reader, 0, "cuda") is reader  # switched off
    monkeypatch.setattr(reuse, "_kept_on_device", lambda reader, budget, device: ResidentShardReader(reader, 2**30))
    if structure:
        monkeypatch.setattr(GraphDataModule, "_gathered_on_device", lambda self: {"x": self.graph.x, "y": self.graph.y})
    dm = _datamodule(tmp_path, "c", epochs=8, factor=4)
    loader = dm.train_dataloader()
    recorded = {_key(b): b.clone() for b in loader}
    reads = []
    inner = loader.reader.reader
    monkeypatch.setattr(inner, "read",
                        lambda paths, order, read=inner.read: reads.append(list(order)) or read(paths, order))
    model = NodeGNN("sage", dm.num_features, 16, dm.num_classes, num_layers=2, aggregation="gnnkit")
    for epoch in range(3):
        for batch in loader:
            _assert_identical(recorded[_key(batch)], batch)
            out = model(batch.x, batch.edge_index, num_sampled_nodes=batch.num_sampled_nodes,
                        num_sampled_edges=batch.num_sampled_edges)
            out[:batch.batch_size].sum().backward()
            if epoch and not structure:  # the features are the kept bytes themselves
                kept = loader.reader._kept.values()
                assert any(b.data_ptr() <= batch.x.data_ptr() < b.data_ptr() + b.numel() for b in kept)
        assert dm.reuse_stats.device_kept_mb > 0
    shards = len(json.loads((tmp_path / "c" / "manifest.json").read_text())["shards"])
    assert [len(order) for order in reads] == [shards]  # read in the first replay only
    list(loader)  # epoch 4 records anew: the kept shards of the old recording are let go
    assert loader.reader.kept_bytes == 0


def test_node_attrs_must_match_what_the_cache_inputs_say(tmp_path):
    from gnnkit.data.reuse import ReuseLoader, ReuseStats

    dm = _datamodule(tmp_path, "c")
    fresh = dm._sampled_loader("train")
    with pytest.raises(ValueError, match="stored='structure' but node_attrs are not given"):
        ReuseLoader.for_trainer(fresh, dm.reuse, {**dm.reuse_inputs(), "stored": "structure"}, None, ReuseStats(), 0)


@pytest.mark.skipif(not dali_available(), reason="nvidia-dali is not installed")
def test_dali_and_torch_loaders_yield_the_same_batches(tmp_path):
    dm = _datamodule(tmp_path, "c")
    loader = dm.train_dataloader()
    list(loader)  # records
    torch_epoch = list(loader)
    dali = _datamodule(tmp_path, "c", loader="dali", workers=2).train_dataloader()
    dali._iterated = 1  # the same replay epoch as `torch_epoch`
    dali_epoch = list(dali)
    assert dali.reader.name == "dali" and len(dali_epoch) == len(torch_epoch)
    for a, b in zip(torch_epoch, dali_epoch):
        _assert_identical(a, b)


def test_cache_of_another_sampler_setting_is_refused(tmp_path):
    dm = _datamodule(tmp_path, "shared")
    list(dm.train_dataloader())
    other = GraphDataModule("synthetic-tiny", batch_size=64, num_neighbors=[3, 3],
                            reuse=ReuseConfig(epochs=3, loader="torch", cache_dir=str(tmp_path / "shared")))
    loader = other.train_dataloader()
    loader._iterated = 1  # a replay epoch
    with pytest.raises(DatasetError, match=r"made for .*refusing to replay"):
        list(loader)


def test_damaged_shard_is_resampled_not_trained_on(tmp_path):
    dm = _datamodule(tmp_path, "c")
    loader = dm.train_dataloader()
    recorded = {_key(b): b for b in loader}
    manifest = json.loads((tmp_path / "c" / "manifest.json").read_text())
    assert len(manifest["shards"]) > 1
    shard = tmp_path / "c" / manifest["shards"][0]["file"]
    data = bytearray(shard.read_bytes())
    data[-10] ^= 0xFF
    shard.write_bytes(bytes(data))
    replayed = list(loader)
    stats = dm.reuse_stats
    damaged = manifest["shards"][0]["batches"]
    assert stats.corrupt_shards == 1 and stats.batches["resampled"] == damaged
    assert stats.batches["replayed"] == len(loader) - damaged
    assert sorted(map(_key, replayed)) == sorted(recorded)  # the same seeds, sampled afresh


def test_another_runs_recording_in_the_folder_is_recorded_over_not_replayed(tmp_path, gnnkit_log):
    """Two runs of the same settings share the cache folder: a resumed run replayed the other's
    batches (those of another limit_train_batches), without a word."""
    mine = _datamodule(tmp_path, "c")
    loader = mine.train_dataloader()
    list(loader)  # records
    other = iter(_datamodule(tmp_path, "c").train_dataloader())
    for _ in range(3):  # a run of fewer batches an epoch records over it, in the same folder
        next(other)
    other.close()
    replay = list(loader)
    assert mine.reuse_stats.epochs == {"record": 2, "replay": 0, "fresh": 0} and len(replay) == len(loader)
    assert "holds another run's recording, made since this run's" in gnnkit_log.text
    assert list(loader) and mine.reuse_stats.epochs["replay"] == 1  # its own recording again


def test_a_recording_of_the_same_batches_by_another_run_is_replayed(tmp_path, gnnkit_log):
    """An lr sweep's runs share data settings and seed: they record the same batches, the same id."""
    torch.manual_seed(0)  # as seed_everything starts each run
    mine = _datamodule(tmp_path, "c")
    loader = mine.train_dataloader()
    list(loader)
    torch.manual_seed(0)
    list(_datamodule(tmp_path, "c").train_dataloader())  # the same batches, over it
    list(loader)
    assert mine.reuse_stats.epochs == {"record": 1, "replay": 1, "fresh": 0}
    assert "another run's recording" not in gnnkit_log.text


def test_each_rank_keeps_its_own_recording_id_in_checkpoints():
    """Rank 0's id alone made every other rank record anew on a resume."""
    from gnnkit.data.reuse import ReuseStats

    stats = ReuseStats(recording="abc")
    state = stats.checkpoint_state()
    assert state["recording"] == ["abc"]  # gathered: one per rank
    restored = ReuseStats()
    restored.restore(state)
    assert restored.recording == "abc" and restored.state_dict() == stats.state_dict()
    older = ReuseStats()
    older.restore({key: value for key, value in stats.state_dict().items() if key != "recording"})
    assert older.recording == ""  # a checkpoint of before the ids: replayed unchecked


@pytest.mark.parametrize("damage", ["gone", "empty"])
def test_a_recording_without_its_seeds_is_recorded_anew(tmp_path, gnnkit_log, damage):
    """A missing seeds.npy stopped every resumed run with a bare one-line error, an empty one with EOFError."""
    dm = _datamodule(tmp_path, "c")
    loader = dm.train_dataloader()
    list(loader)
    seeds = tmp_path / "c" / "seeds.npy"
    seeds.unlink() if damage == "gone" else seeds.write_bytes(b"")
    assert len(list(loader)) == len(loader) and dm.reuse_stats.epochs == {"record": 2, "replay": 0, "fresh": 0}
    assert "seeds.npy: unreadable" in gnnkit_log.text and "recording anew" in gnnkit_log.text


def test_verify_once_checks_each_shard_in_the_first_replay_only(tmp_path, monkeypatch):
    import zlib

    import pipeline.batch_cache as batch_cache

    checked, crc32 = [], zlib.crc32
    monkeypatch.setattr(batch_cache.zlib, "crc32", lambda data, *crc: checked.append(1) or crc32(data, *crc))
    dm = _datamodule(tmp_path, "c", verify="once", epochs=4)
    loader = dm.train_dataloader()
    list(loader)  # record (checksums written, not checked)
    written = len(checked)
    list(loader)
    shards = len(json.loads((tmp_path / "c" / "manifest.json").read_text())["shards"])
    assert len(checked) - written == shards > 1
    list(loader)
    assert len(checked) - written == shards


def test_fresh_fraction_and_budget_cycling(tmp_path, gnnkit_log):
    dm = _datamodule(tmp_path, "c", fresh_fraction=0.25, disk_budget_mb=0.5)
    loader = dm.train_dataloader()
    list(loader)
    cached = dm.reuse_stats.batches["recorded"]
    assert 0 < cached < len(loader)  # the budget held only part of the epoch
    warned = {r.getMessage() for r in gnnkit_log.records if "disk budget reached" in r.getMessage()}
    assert warned == {f"reuse: disk budget reached; {cached} of {len(loader)} batches cached, so each replay epoch "
                      f"trains {len(loader)} batches cycling through those {cached} ({len(loader) / cached:.1f} "
                      "times each): a larger data.reuse.disk_budget_mb keeps more"}
    replay = list(loader)
    fresh = round(0.25 * len(loader))
    assert len(replay) == len(loader)
    assert dm.reuse_stats.batches["replayed"] == len(loader) - fresh
    assert dm.reuse_stats.batches["fresh"] == 2 * len(loader) - (len(loader) - fresh)


def _fit(dm, max_epochs, root, ckpt=None):
    model = NodeClassifier(model="sage", in_channels=dm.num_features, hidden_channels=16,
                           out_channels=dm.num_classes, num_layers=2, task=dm.task)
    trainer = pl.Trainer(max_epochs=max_epochs, default_root_dir=root, enable_progress_bar=False,
                         enable_model_summary=False, logger=False, num_sanity_val_steps=0)
    trainer.fit(model, datamodule=dm, ckpt_path=ckpt)
    return trainer


def test_resumed_run_continues_the_schedule(tmp_path):
    steps = len(_datamodule(tmp_path, "c").train_dataloader())
    first = _datamodule(tmp_path, "c", epochs=4)
    trainer = _fit(first, 2, tmp_path)  # epoch 0 records, epoch 1 replays
    ckpt = trainer.checkpoint_callback.best_model_path
    assert first.reuse_stats.epochs == {"record": 1, "replay": 1, "fresh": 0}
    resumed = _datamodule(tmp_path, "c", epochs=4)
    _fit(resumed, 5, tmp_path, ckpt=ckpt)  # epochs 2, 3 replay; epoch 4 fine-tunes fresh
    stats = resumed.reuse_stats
    assert stats.epochs == {"record": 1, "replay": 3, "fresh": 1}
    assert stats.batches["replayed"] == 3 * steps and stats.batches["fresh"] == 2 * steps
    assert resumed.report_info()["reuse"]["batches"]["replayed"] == 3 * steps


@pytest.mark.parametrize(("changes", "message"), [
    ({"epochs": 4, "factor": 2.5}, r"data.reuse.factor: expected an integer >= 1 \(or null\), got 2.5"),
    ({"epochs": "2"}, "data.reuse.epochs: expected an integer >= 0, got '2'"),
    ({"epochs": True}, "data.reuse.epochs: expected an integer >= 0, got True"),
    ({"workers": 1.5}, "data.reuse.workers: expected an integer >= 0, got 1.5"),
    ({"shard_mb": float("inf")}, "data.reuse.shard_mb: expected a positive number, got inf"),
    ({"cache_dir": 3}, r"data.reuse.cache_dir: expected a folder path \(or null\), got 3"),
], ids=["fractional factor", "text epochs", "bool epochs", "fractional workers", "endless shards", "number dir"])
def test_reuse_settings_of_the_wrong_kind_are_refused(changes, message):
    """A factor of 2.5 gave fractional recorded epochs; "2" a bare TypeError from a comparison."""
    with pytest.raises(ValueError, match=f"^{message}$"):
        ReuseConfig(**changes)
