"""Remote features on 2 gloo ranks (``sampled_worker.py``): the rows of remote nodes are the whole
graph's, cached rows are never fetched, and the fetch counters say so."""

from __future__ import annotations

import pytest
import torch

from gnnkit.partitioned.remote_features import decode_rows, encode_rows, hot_halo, wire_dtype
from pipeline.partitioned import Partition


def test_remote_rows_are_the_whole_graphs(sampled_ranks):
    for result in sampled_ranks:
        assert result["batches"]["x"]  # features of every sampled node, labels of the seeds
        assert result["fetched_rows"] == result["remote_nodes"]  # no cache: every remote row fetched


def test_cached_rows_are_never_fetched(sampled_ranks):
    for result in sampled_ranks:
        cache = result["cache"]
        assert cache["rows"] > 0 and cache["equal"]
        assert cache["hits"] == cache["asked"] == 5 and cache["fetched"] == 0 and cache["fetched_bytes"] == 0
        assert cache["fetched_after_uncached"] == cache["uncached_asked"] > 0


def test_sixteen_bit_rows_are_the_roundings_of_the_remote_rows(sampled_ranks):
    for result in sampled_ranks:
        half = result["half"]
        assert half["equal"] and half["cache_dtype"] == "torch.float16" and half["row_bytes"] == 2 * half["width"]
        assert half["fetched_bytes"] == half["fetched_rows"] * half["row_bytes"] > 0


def test_eight_bit_rows_are_the_codecs_roundings_of_the_remote_rows(sampled_ranks):
    for result in sampled_ranks:
        eight, half = result["int8"], result["half"]
        assert eight["equal"] and eight["cache_dtype"] == "torch.int8" and eight["row_bytes"] == half["width"] + 4
        assert eight["fetched_bytes"] == eight["fetched_rows"] * eight["row_bytes"] > 0


def test_eight_bit_rows_round_each_value_to_its_rows_scale():
    torch.manual_seed(0)
    rows = torch.randn(50, 33) * torch.logspace(-3, 3, 50).unsqueeze(1)  # rows of very different sizes
    rows[7] = 0.0
    packed = encode_rows(rows, torch.int8)
    assert packed.dtype == torch.int8 and packed.shape == (50, 37)
    back = decode_rows(packed, torch.float32)
    bound = rows.abs().amax(dim=1, keepdim=True) / 254  # half a step of max |x| / 127
    assert bool(((back - rows).abs() <= bound * (1 + 1e-5)).all()) and bool((back[7] == 0).all())
    assert torch.equal(decode_rows(encode_rows(rows, torch.float16), torch.float32), rows.half().float())


def test_an_unknown_remote_dtype_is_one_line():
    with pytest.raises(ValueError, match=r"data.remote_dtype: expected one of float32, float16, bfloat16, int8 or "
                                         r"null, got 'int4'"):
        wire_dtype("int4")
    assert wire_dtype(None) is None and wire_dtype("bfloat16") == torch.bfloat16 and wire_dtype("int8") == torch.int8


def test_the_cache_takes_the_most_referenced_halo_nodes():
    part = Partition(owned=torch.arange(4), indptr=None, indices=None, x=None, y=None, split={},
                     halo=torch.tensor([5, 7, 9, 11]), halo_owner=None, halo_refs=torch.tensor([1, 4, 2, 4]),
                     row_start=None, owner=None, meta={})
    assert hot_halo(part, 3).tolist() == [7, 9, 11]  # ascending ids of the 3 hottest
    assert hot_halo(part, 1).tolist() == [7]  # ties: the lower id
    assert hot_halo(part, 10).tolist() == [5, 7, 9, 11] and hot_halo(part, 0).numel() == 0


def test_fetch_counts_carry_over_a_resume_and_a_sanity_check_counts_none():
    """A resumed run's report counted only the fetches after the resume (15,266 remote rows against
    41,866 uninterrupted); with the checkpoint's counts added, it also must not count the fetches of
    the sanity check it makes again, which the uninterrupted run gives back too."""
    from types import SimpleNamespace

    from gnnkit.data.datamodule import GraphDataModule
    from gnnkit.partitioned.remote_features import BATCH_COUNTS, FetchStats

    earlier = FetchStats(remote_rows=10, cache_hits=4, fetched_rows=6, fetched_bytes=96, served_rows=7, cache_rows=3)
    assert set(earlier.batch_counts()) == set(BATCH_COUNTS) and "cache_rows" not in earlier.batch_counts()
    dm = GraphDataModule.__new__(GraphDataModule)  # only the fetch bookkeeping is exercised
    dm._restored_fetches, dm._fetches_before_sanity_check, dm._remote = earlier.batch_counts(), None, None
    dm._add_restored_fetches()  # no remote features yet (the checkpoint restored before setup made them)
    dm._remote = SimpleNamespace(stats=FetchStats(cache_rows=5))
    dm._add_restored_fetches()
    assert dm._remote.stats.remote_rows == 10 and dm._remote.stats.served_rows == 7 and dm._remote.stats.cache_rows == 5
    dm._before_sanity_check, dm._prefetchers = {}, {}
    dm._fetches_before_sanity_check = dm._remote.stats.batch_counts()
    dm._remote.stats.add_batch_counts({"remote_rows": 3, "fetched_rows": 3})  # the check's own fetches
    dm.rewind_sanity_check()
    assert dm._remote.stats.batch_counts() == earlier.batch_counts()
