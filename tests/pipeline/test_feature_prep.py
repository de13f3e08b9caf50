"""Feature transforms: row normalisation matches PyG's NormalizeFeatures; column standardisation's
numpy and DALI backends agree with a float64 reference; the option and bad input."""

import numpy as np
import pytest
import torch
from torch_geometric.data import Data
from torch_geometric.transforms import NormalizeFeatures

from pipeline.errors import DatasetError
from pipeline.feature_prep import (
    ColumnStats,
    column_stats,
    global_min,
    normalize_features,
    resolve_backend,
    row_normalize_array,
    row_normalize_block,
    standardize_block,
    standardize_file,
)
from pipeline.options import PreprocessOptions
from pipeline.shard_reader import dali_available


@pytest.fixture
def matrix(tmp_path):
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((1000, 7)) * rng.uniform(0.1, 10, 7) + rng.uniform(-5, 5, 7)).astype(np.float32)
    x[:, 3] = 2.5  # a constant column keeps scale 1
    path = tmp_path / "x.npy"
    np.save(path, x)
    return path, x


def _reference(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    std = x.std(0)
    return (x - x.mean(0)) / np.where(std > 1e-12, std, 1.0)


@pytest.mark.parametrize("backend", ["numpy", pytest.param("dali", marks=pytest.mark.skipif(
    not dali_available(), reason="nvidia-dali is not installed"))])
@pytest.mark.parametrize("dtype,atol", [("float32", 1e-5), ("float16", 5e-3)])
def test_backends_match_the_reference(matrix, tmp_path, backend, dtype, atol):
    src, x = matrix
    out = tmp_path / f"out-{backend}.npy"
    info = standardize_file(src, out, dtype=dtype, backend=backend, chunk_rows=300)  # last chunk is partial
    y = np.load(out)
    assert info["backend"] == backend and y.dtype == np.dtype(dtype) and y.shape == x.shape
    np.testing.assert_allclose(y.astype(np.float64), _reference(x), atol=atol * 10, rtol=atol)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_stats_of_a_constant_column():
    mean, scale = column_stats(np.full((10, 2), 3.0, dtype=np.float32))
    assert np.allclose(mean, 3.0) and np.allclose(scale, 1.0)


def test_auto_is_numpy_on_cpu_and_bad_input_is_named(tmp_path):
    assert resolve_backend("auto", "cpu") == "numpy"
    bad = tmp_path / "ints.npy"
    np.save(bad, np.zeros((3, 3), dtype=np.int64))
    with pytest.raises(DatasetError, match="ints.npy: expected a 2-D float32 matrix"):
        standardize_file(bad, tmp_path / "o.npy")
    with pytest.raises(ValueError, match="backend: expected"):
        standardize_file(bad, tmp_path / "o.npy", backend="cupy")


def _pyg_rows(x: np.ndarray) -> np.ndarray:
    return NormalizeFeatures()(Data(x=torch.from_numpy(x.copy()))).x.numpy()


def _count_features(rows: int = 500, cols: int = 40, seed: int = 0) -> np.ndarray:
    """Bag-of-words-like counts with all-zero rows and rows summing to less than 1."""
    rng = np.random.default_rng(seed)
    x = (rng.poisson(0.3, (rows, cols)) * (rng.random((rows, cols)) < 0.3)).astype(np.float32)
    x[::7] = 0.0  # all-zero rows are left as they are
    x[3] = 0.0
    x[3, 5] = 0.25  # a row summing to less than 1 is not scaled up (PyG clamps the sum at 1)
    return x


@pytest.mark.parametrize("make", [
    pytest.param(lambda: _count_features(), id="counts-with-zero-rows"),
    pytest.param(lambda: np.random.default_rng(1).standard_normal((333, 9)).astype(np.float32), id="signed"),
    pytest.param(lambda: np.random.default_rng(2).uniform(2, 3, (50, 4)).astype(np.float32), id="positive-min"),
])
def test_row_normalisation_matches_pyg(make):
    x = make()
    expected = _pyg_rows(x)
    out = np.empty_like(x)
    row_normalize_array(x, out, global_min(x, chunk_rows=64), chunk_rows=64)  # the last chunk is partial
    np.testing.assert_allclose(out, expected, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(normalize_features(x.copy(), "row")[0], expected, rtol=1e-6, atol=1e-7)
    assert out.dtype == np.float32


def test_row_normalisation_leaves_zero_rows_and_sums_the_rest_to_one():
    x = _count_features()
    y, applied = normalize_features(x.copy(), "row")
    assert applied == "row"
    sums = x.sum(1)
    assert np.array_equal(y[sums == 0], x[sums == 0]) and np.array_equal(y[3], x[3])
    np.testing.assert_allclose(y[sums >= 1].sum(1), 1.0, rtol=1e-5)


def test_normalize_features_dispatch():
    x = np.random.default_rng(0).standard_normal((20, 3)).astype(np.float32)
    assert normalize_features(x, "none") == (x, "none")
    x.flags.writeable = False  # a read-only (memory-mapped) matrix is copied, not written
    np.testing.assert_allclose(normalize_features(x, "column")[0], _reference(x), atol=1e-5)
    assert normalize_features(np.zeros((0, 3), np.float32), "row")[0].shape == (0, 3)
    with pytest.raises(ValueError, match=r"normalize_features: expected one of \['none', 'row', 'column', 'auto'\]"):
        normalize_features(x, "l2")


def test_auto_row_normalises_counts_and_keeps_signed_features(gnnkit_log):
    """Row normalisation of signed features (text embeddings) shifted them by their minimum and kept a
    sliver of their variation: GCN's citation recipe scored 0.27 where 0.98 was there to have."""
    counts = _count_features()
    x, applied = normalize_features(counts.copy(), "auto")
    assert applied == "row" and np.array_equal(x, normalize_features(counts.copy(), "row")[0])
    signed = np.random.default_rng(1).standard_normal((40, 6)).astype(np.float32)
    lines: list[str] = []
    x, applied = normalize_features(signed.copy(), "auto", lines.append)
    assert applied == "none" and np.array_equal(x, signed)
    assert "no counts: not row-normalised (normalize_features auto), kept as stored" in lines[0]
    gnnkit_log.set_level("WARNING", logger="gnnkit")
    normalize_features(signed.copy(), "row")  # asked for: done, with a warning
    assert "normalize_features row: the features take negative values" in gnnkit_log.text


def test_option_is_validated_and_keeps_old_cache_keys():
    assert "normalize_features" not in PreprocessOptions().key_fields()
    assert "normalize_features" not in PreprocessOptions(normalize_features="none").key_fields()
    # `true` in a registry file means "column", and "column" enters the key as `true` did.
    assert PreprocessOptions(normalize_features=True).normalize_features == "column"
    assert PreprocessOptions(normalize_features=False) == PreprocessOptions()
    assert PreprocessOptions(normalize_features="column").key_fields()["normalize_features"] is True
    assert PreprocessOptions(normalize_features="row").key_fields()["normalize_features"] == "row"
    with pytest.raises(DatasetError, match=r"preprocess.normalize_features: expected one of \['none', 'row', 'column', 'auto'\]"):
        PreprocessOptions(normalize_features="yes")


@pytest.mark.parametrize("how", ["column", "row"])
def test_preprocess_option_transforms_the_cached_features(make_ogb_folder, tmp_path, how):
    from pipeline import preprocess

    folder = make_ogb_folder()
    plain = preprocess(str(folder), cache_root=tmp_path / "c").open().x.numpy()
    entry = preprocess(str(folder), PreprocessOptions(normalize_features=how), cache_root=tmp_path / "c")
    x = entry.open().x.numpy()
    assert entry.manifest["inputs"]["options"]["normalize_features"] == (True if how == "column" else how)
    np.testing.assert_allclose(x, _reference(plain) if how == "column" else _pyg_rows(plain), atol=1e-5)


def test_column_stats_fed_block_by_block_are_column_stats():
    """The out-of-core build feeds ColumnStats the same blocks: the same bits."""
    x = np.random.default_rng(4).standard_normal((1000, 6)).astype(np.float32) * 50 + 3
    stats = ColumnStats(6)
    for start in range(0, 1000, 64):
        stats.add(x[start:start + 64])
    mean, scale = stats.mean_scale()
    want_mean, want_scale = column_stats(x, chunk_rows=64)
    assert mean.tobytes() == want_mean.tobytes() and scale.tobytes() == want_scale.tobytes()
    block = x[128:192]
    assert np.array_equal(standardize_block(block, mean, scale), ((block - mean) * scale).astype(np.float32))
    out = np.empty_like(x)
    row_normalize_array(x, out, global_min(x), chunk_rows=64)
    assert np.array_equal(row_normalize_block(block, global_min(x)), out[128:192])
