import zipfile

import numpy as np
import pytest
import torch

from pipeline import DatasetError
from pipeline.safe_pt import as_ids, load_pt


def test_numpy_arrays_load_weights_only_empty_ones_too(tmp_path):
    """numpy pickles an empty array's data as bytes(), which the allow-list lacked: 'cannot be read'."""
    path = tmp_path / "split.pt"
    torch.save({"train": np.arange(4), "valid": np.zeros(0, np.int64), "neg": np.zeros((0, 2), np.int32),
                "weight": torch.ones(3)}, path)
    loaded = load_pt(path)
    assert loaded["valid"].shape == (0,) and loaded["neg"].shape == (0, 2) and loaded["train"].tolist() == [0, 1, 2, 3]


def test_objects_and_missing_files_are_refused(tmp_path):
    class Evil:
        def __reduce__(self):
            return (print, ("owned",))

    torch.save({"train": Evil()}, tmp_path / "evil.pt")
    with pytest.raises(DatasetError, match=r"evil.pt: cannot be read with weights_only=True "
                                          r"\(UnpicklingError: print is not allowed\)$"):
        load_pt(tmp_path / "evil.pt")
    with pytest.raises(DatasetError, match="none.pt: missing"):
        load_pt(tmp_path / "none.pt")


def test_ids_must_be_whole_numbers():
    """A test id of 19.9 was cut to 19 silently."""
    assert as_ids(torch.tensor([3.0, 4.0]), "f.pt", "test").tolist() == [3, 4]
    assert as_ids(np.array([1, 2], dtype=np.int32), "f.pt", "test").dtype == np.int64
    with pytest.raises(DatasetError, match=r"f.pt: 'test' must hold whole-number ids, found 19.9 \(dtype float64\)"):
        as_ids(np.array([1.0, 19.9]), "f.pt", "test")
    with pytest.raises(DatasetError, match=r"'train' must hold whole-number ids, found True \(dtype bool\)"):
        as_ids(np.array([True]), "f.pt", "train")


def test_tensors_saved_from_a_gpu_load_on_the_cpu(tmp_path):
    torch.save({"y": torch.arange(3)}, tmp_path / "cpu.pt")
    with zipfile.ZipFile(tmp_path / "cpu.pt") as source, zipfile.ZipFile(tmp_path / "gpu.pt", "w") as target:
        for info in source.infolist():  # the storages' location, as a GPU's torch.save writes it
            data = source.read(info.filename)
            if info.filename.endswith("data.pkl"):
                assert b"X\x03\x00\x00\x00cpu" in data, data  # else the file would not name a GPU
                data = data.replace(b"X\x03\x00\x00\x00cpu", b"X\x06\x00\x00\x00cuda:0")
            target.writestr(info, data)
    assert load_pt(tmp_path / "gpu.pt")["y"].tolist() == [0, 1, 2]
