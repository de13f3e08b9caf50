"""Feature standardisation: numpy and DALI backends agree with a float64 reference; bad input."""

import numpy as np
import pytest

from pipeline.errors import DatasetError
from pipeline.feature_prep import column_stats, resolve_backend, standardize_file
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


def test_option_is_validated_and_keeps_old_cache_keys():
    assert "normalize_features" not in PreprocessOptions().key_fields()
    assert PreprocessOptions(normalize_features=True).key_fields()["normalize_features"] is True
    with pytest.raises(DatasetError, match="preprocess.normalize_features: expected true or false"):
        PreprocessOptions(normalize_features="yes")


def test_preprocess_option_standardises_the_cached_features(make_ogb_folder, tmp_path):
    from pipeline import preprocess

    folder = make_ogb_folder()
    plain = preprocess(str(folder), cache_root=tmp_path / "c").open().x.numpy()
    entry = preprocess(str(folder), PreprocessOptions(normalize_features=True), cache_root=tmp_path / "c")
    x = entry.open().x.numpy()
    assert entry.manifest["inputs"]["options"]["normalize_features"] is True
    np.testing.assert_allclose(x, _reference(plain), atol=1e-4)
