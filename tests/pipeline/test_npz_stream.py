"""npz members streamed in and out: what numpy.load and numpy.savez see, chunk by chunk."""

from __future__ import annotations

import time
import zipfile

import numpy as np
import pytest

from pipeline.errors import DatasetError
from pipeline.npz_stream import NpzReader, NpzWriter, member_headers, save_npz

ARRAYS = {
    "edge_index": np.random.default_rng(0).integers(0, 1000, (2, 5000)),
    "node_feat": np.random.default_rng(1).standard_normal((777, 5)).astype(np.float32),
    "node_year": np.arange(777, dtype=np.int32).reshape(-1, 1),
}


@pytest.mark.parametrize("save", [np.savez, np.savez_compressed])
@pytest.mark.parametrize("chunk", [1, 97, 10**6])
def test_chunks_are_numpys_values(tmp_path, save, chunk):
    save(tmp_path / "a.npz", **ARRAYS)
    with NpzReader(tmp_path / "a.npz") as npz:
        assert npz.names() == list(ARRAYS)
        for name, array in ARRAYS.items():
            flat = array.reshape(-1)
            got = np.concatenate(list(npz.chunks(name, 0, flat.size, chunk)))
            assert np.array_equal(got, flat) and got.dtype == array.dtype
        # A range in the middle, as the edge reader takes row 1 of edge_index.
        row1 = np.concatenate(list(npz.chunks("edge_index", 5000, 5000, chunk)))
        assert np.array_equal(row1, ARRAYS["edge_index"][1])
    headers = member_headers(tmp_path / "a.npz")
    assert headers["node_feat"].shape == (777, 5) and not headers["node_feat"].fortran
    assert headers["edge_index"].rows == 2 and headers["node_year"].size == 777


def test_writer_writes_what_numpy_loads(tmp_path):
    with NpzWriter(tmp_path / "a.npz") as npz:
        with npz.member("edge_index", (2, 5000), np.int64) as sink:
            sink.write(ARRAYS["edge_index"][0])
            sink.write_bytes(ARRAYS["edge_index"][1].tobytes())
        with npz.member("node_feat", (777, 5), np.float32) as sink:
            for start in range(0, 777, 100):
                sink.write(ARRAYS["node_feat"][start:start + 100])
        npz.write("node_year", ARRAYS["node_year"])
    with np.load(tmp_path / "a.npz") as loaded:
        assert list(loaded) == list(ARRAYS)
        for name, array in ARRAYS.items():
            assert np.array_equal(loaded[name], array) and loaded[name].dtype == array.dtype
    with zipfile.ZipFile(tmp_path / "a.npz") as archive:  # stored, as numpy.savez writes
        assert {info.compress_type for info in archive.infolist()} == {zipfile.ZIP_STORED}


@pytest.mark.parametrize("compressed", [False, True])
def test_save_npz_is_numpys_archive_and_the_same_bytes_at_any_time(tmp_path, monkeypatch, compressed):
    """What ``numpy.load`` reads back; written a day later, the same bytes (numpy's own archive
    carries the second it was written at)."""
    save_npz(tmp_path / "a.npz", ARRAYS, compressed)
    monkeypatch.setattr(time, "time", lambda: 86400.0 * 20000)
    save_npz(tmp_path / "b.npz", ARRAYS, compressed)
    assert (tmp_path / "a.npz").read_bytes() == (tmp_path / "b.npz").read_bytes()
    with np.load(tmp_path / "a.npz") as loaded:
        assert list(loaded) == list(ARRAYS) and all(np.array_equal(loaded[k], v) for k, v in ARRAYS.items())
    with zipfile.ZipFile(tmp_path / "a.npz") as archive:
        assert {info.compress_type for info in archive.infolist()} == \
            {zipfile.ZIP_DEFLATED if compressed else zipfile.ZIP_STORED}


def test_short_members_and_bad_archives_are_named(tmp_path):
    with pytest.raises(ValueError, match="edge_index: wrote 3 values, the header says 10"):
        with NpzWriter(tmp_path / "a.npz") as npz, npz.member("edge_index", (2, 5), np.int64) as sink:
            sink.write(np.arange(3))
    np.savez(tmp_path / "b.npz", x=np.arange(10))
    with NpzReader(tmp_path / "b.npz") as npz, pytest.raises(DatasetError, match="array 'x' is truncated"):
        list(npz.chunks("x", 5, 10, 4))
    (tmp_path / "c.npz").write_bytes(b"not a zip")
    with pytest.raises(DatasetError, match="c.npz: unreadable npz archive"):
        NpzReader(tmp_path / "c.npz")
