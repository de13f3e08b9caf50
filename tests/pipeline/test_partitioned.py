"""Partition entries: every node owned once, rows and halos exact, cached like any entry."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from pipeline import PreprocessOptions, preprocess
from pipeline.partitioned import is_part_of, open_partition, owner_dtype, part_name, partition_entry


@pytest.fixture
def entry(make_ogb_folder, tmp_path):
    return preprocess(str(make_ogb_folder()), PreprocessOptions(undirected=True), cache_root=tmp_path / "cache")


@pytest.mark.parametrize("parts", [1, 2, 3])
def test_partitions_cover_the_graph_exactly(entry, parts):
    graph = entry.open()
    indptr, indices = graph.indptr.numpy(), graph.indices.numpy()
    opened = [open_partition(e) for e in partition_entry(entry, parts)]
    owner = np.full(graph.num_nodes, -1)
    for p, part in enumerate(opened):
        owned = part.owned.numpy()
        assert part.part == p and part.parts == parts and np.all(np.diff(owned) > 0)
        assert (owner[owned] == -1).all()
        owner[owned] = p
    assert (owner >= 0).all()  # every node owned exactly once
    for p, part in enumerate(opened):
        owned = part.owned.numpy()
        for i in (0, len(owned) // 2, len(owned) - 1):  # rows hold the global in-neighbours
            row = part.indices.numpy()[part.indptr[i]:part.indptr[i + 1]]
            assert np.array_equal(row, indices[indptr[owned[i]]:indptr[owned[i] + 1]])
        sources = part.indices.numpy()
        assert np.array_equal(part.halo.numpy(), np.unique(sources[owner[sources] != p]))
        assert np.array_equal(part.halo_owner.numpy(), owner[part.halo.numpy()])
        remote = sources[owner[sources] != p]
        assert part.halo_refs.numpy().tolist() == [int((remote == h).sum()) for h in part.halo.numpy()]
        assert np.array_equal(part.owner.numpy(), owner) and part.owner.dtype == torch.int16
        assert np.array_equal(part.row_start.numpy(), indptr[owned])  # rows sit there in the whole CSR
        assert np.array_equal(part.x.numpy(), graph.x.numpy()[owned])
        assert np.array_equal(part.y.numpy(), graph.y.numpy()[owned])
        assert part.meta["num_halo"] == part.halo.numel() and part.meta["num_nodes"] == graph.num_nodes
    for split, nodes in graph.split.items():
        found = np.concatenate([part.owned.numpy()[part.split[split].numpy()] for part in opened])
        assert np.array_equal(np.sort(found), np.sort(nodes.numpy()))
    cut = opened[0].meta["edge_cut"]
    assert cut == 0.0 if parts == 1 else 0.0 < cut < 1.0


def test_partition_entries_are_cached_and_keyed_by_their_settings(entry):
    first = partition_entry(entry, 2)
    assert [e.path for e in partition_entry(entry, 2)] == [e.path for e in first]  # a cache hit
    assert first[1].dataset == part_name(entry.dataset, 1, 2) and first[1].path.parent.name == first[1].dataset
    assert partition_entry(entry, 2, seed=1)[0].key != first[0].key
    assert partition_entry(entry, 3)[0].path.parent != first[0].path.parent


def test_a_damaged_partition_entry_is_built_again(entry, caplog):
    """A part whose halo array was deleted stopped every run on it ("damaged entry: arrays/halo.arrow
    missing"), and `gnnkit partition` repeated the error; a damaged graph entry is rebuilt."""
    first = partition_entry(entry, 2)
    (first[1].path / first[1].manifest["arrays"]["halo"]["file"]).unlink()
    with caplog.at_level("WARNING", logger="gnnkit"):
        again = partition_entry(entry, 2)
    assert "damaged entry: arrays/halo.arrow missing; partitioning again" in caplog.text
    assert [e.path for e in again] == [e.path for e in first] and open_partition(again[1]).halo is not None


def test_bad_part_counts_are_one_line(entry):
    with pytest.raises(ValueError, match=r"parts: expected 1 to 200 \(the node count\), got 0"):
        partition_entry(entry, 0)
    with pytest.raises(ValueError, match="got 201"):
        partition_entry(entry, 201)


def test_owner_arrays_take_the_smallest_type():
    assert owner_dtype(2) == np.int16 and owner_dtype(32_768) == np.int16 and owner_dtype(32_769) == np.int32


def test_partition_entry_names_are_told_from_other_datasets():
    assert is_part_of(part_name("cora", 1, 4), "cora") and is_part_of("a.b.part0of2", "a.b")
    assert not any(is_part_of(name, "cora") for name in ("cora", "cora2.part0of2", "cora.part0", "coraXpart0of2"))
