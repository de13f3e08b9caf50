"""The chunked reader hands over what OGB's whole-file readers read, in any chunk size."""

from __future__ import annotations

import numpy as np
import pytest

from pipeline.family import read_meta_json
from pipeline.ogb_layout import read_ogb_folder
from pipeline.raw_chunks import RawNodeChunks
from tests.conftest import graph_arrays


def _concat(chunks):
    return np.concatenate(list(chunks))


@pytest.mark.parametrize("binary", [False, True])
@pytest.mark.parametrize("chunk", [1, 333, 10**6])
def test_chunks_concatenate_to_ogbs_arrays(make_ogb_folder, binary, chunk):
    parts = graph_arrays(num_nodes=700, num_edges=2500, num_features=5)
    folder = make_ogb_folder(binary=binary, num_nodes=700, edge_index=parts["edge_index"],
                             labels=parts["labels"], split=parts["split"], node_feat=parts["node_feat"],
                             extra={"node_year": np.arange(700).reshape(-1, 1)},
                             meta_changes={"additional node files": "node_year"})
    meta = read_meta_json(folder)
    whole = read_ogb_folder(folder, meta)
    raw = RawNodeChunks(folder, meta)
    assert (raw.num_nodes, raw.num_edges, raw.feature_shape) == (700, 2500, (700, 5))
    pairs = list(raw.edges(chunk))
    assert max(len(s) for s, _ in pairs) <= chunk
    assert np.array_equal(np.stack([_concat(s for s, _ in pairs), _concat(d for _, d in pairs)]), whole.edge_index)
    features = _concat(raw.features(chunk))
    assert np.array_equal(features.astype(np.float32), whole.node_feat.astype(np.float32))
    labels = _concat(b.reshape(b.shape[0], -1) for b in raw.labels(chunk))
    assert np.array_equal(labels, whole.labels.reshape(700, -1))
    assert np.array_equal(_concat(raw.extra("node_year", chunk)), whole.extra["node_year"])
    assert raw.extra_dtype("node_year") == whole.extra["node_year"].dtype
    split = raw.split(chunk)
    assert all(np.array_equal(split[k], whole.split[k]) for k in split)
    assert raw.files == whole.files


def test_csv_extra_file_with_a_fraction_is_float32_throughout(make_ogb_folder):
    """OGB types a CSV node file by its whole content: one fractional value makes it float32."""
    values = np.arange(200, dtype=np.float64).reshape(-1, 1)
    values[150] = 0.5
    folder = make_ogb_folder(extra={"node_weight": values}, meta_changes={"additional node files": "node_weight"})
    raw = RawNodeChunks(folder, read_meta_json(folder))
    got = _concat(raw.extra("node_weight", 16))
    assert raw.extra_dtype("node_weight") == np.float32 and got.dtype == np.float32
    assert np.array_equal(got, read_ogb_folder(folder, read_meta_json(folder)).extra["node_weight"])
