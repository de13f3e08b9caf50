import pickle
import warnings
import zipfile
from fractions import Fraction

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


class _Plain:
    """A class pickled by pickle.dump (a user's own object)."""


def test_a_file_torch_did_not_write_says_so(tmp_path):
    """A text file read as 'cannot be read with weights_only=True (KeyError)': a pickling problem, it seemed."""
    (tmp_path / "text.pt").write_text("hello, this is text\n")
    (tmp_path / "empty.pt").write_bytes(b"")
    with open(tmp_path / "pickled.pt", "wb") as f:
        pickle.dump({"x": [_Plain()]}, f, protocol=4)
    cases = {"text.pt": r"this one begins b'hello, this is t'\)$", "empty.pt": r"this one is empty\)$",
             "pickled.pt": r"this one is a pickle without torch's header, as pickle.dump writes: save it with "
                           r"torch.save\)$"}
    for name, message in cases.items():
        with pytest.raises(DatasetError, match=rf"{name}: not a torch file \(torch.save writes a zip archive; "
                                               rf"{message}"):
            load_pt(tmp_path / name)


def test_torch_files_of_either_format_are_torch_files_damaged_too(tmp_path):
    """The legacy format (a pickle after torch's magic number) loads; a damaged zip or a refused object
    in a legacy file still says why it cannot be read."""
    torch.save({"y": torch.arange(3)}, tmp_path / "legacy.pt", _use_new_zipfile_serialization=False)
    assert load_pt(tmp_path / "legacy.pt")["y"].tolist() == [0, 1, 2]
    torch.save({"y": Fraction(1, 3)}, tmp_path / "object.pt", _use_new_zipfile_serialization=False)
    (tmp_path / "cut.pt").write_bytes(b"PK\x03\x04")
    with pytest.raises(DatasetError, match=r"object.pt: cannot be read with weights_only=True \(UnpicklingError: "
                                           r"fractions.Fraction is not allowed\)$"):
        load_pt(tmp_path / "object.pt")
    with pytest.raises(DatasetError, match=r"cut.pt: cannot be read with weights_only=True \(\w+\)$"):
        load_pt(tmp_path / "cut.pt")


def test_torch_warning_on_pickle_protocols_is_silenced_in_the_load_only(tmp_path):
    """'UserWarning: Detected pickle protocol 4' came before the one-line error, twice."""
    with open(tmp_path / "pickled.pt", "wb") as f:
        pickle.dump([_Plain()], f, protocol=4)
    torch.save({"y": torch.arange(3)}, tmp_path / "protocol4.pt", pickle_protocol=4)
    before = list(warnings.filters)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for name in ("pickled.pt", "protocol4.pt"):
            with pytest.raises(DatasetError, match=name):
                load_pt(tmp_path / name)
        assert [str(w.message) for w in caught] == []
        warnings.warn("Detected pickle protocol 4 elsewhere", UserWarning)  # not silenced outside the load
        assert len(caught) == 1
    assert warnings.filters == before
