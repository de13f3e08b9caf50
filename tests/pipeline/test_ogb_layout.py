import json

import numpy as np
import pytest
import torch

from pipeline import DatasetError
from pipeline.ogb_layout import read_meta_json, read_ogb_folder, write_ogb_folder


@pytest.mark.parametrize("binary", [False, True])
def test_write_then_read_round_trips(make_ogb_folder, binary):
    folder = make_ogb_folder(binary=binary)
    meta = read_meta_json(folder)
    assert meta["binary"] is binary and meta["num_classes"] == 4
    raw = read_ogb_folder(folder, meta)
    assert raw.num_nodes == 200 and raw.edge_index.shape == (2, 1000)
    assert raw.node_feat.shape == (200, 8)
    assert raw.labels.reshape(-1).shape == (200,)
    assert sorted(raw.split) == ["test", "train", "valid"]


def test_add_inverse_edge_doubles_edges(make_ogb_folder):
    folder = make_ogb_folder(meta_changes={"add_inverse_edge": "True"})
    raw = read_ogb_folder(folder, read_meta_json(folder))
    assert raw.edge_index.shape == (2, 2000)
    assert np.array_equal(raw.edge_index[0, 1::2], raw.edge_index[1, 0::2])


def test_existing_target_is_not_overwritten(make_ogb_folder, tmp_path):
    folder = make_ogb_folder()
    with pytest.raises(OSError):
        write_ogb_folder(folder, edge_index=np.zeros((2, 1), int), num_nodes=2, labels=np.zeros(2, int),
                         split={"train": [0], "valid": [1], "test": []}, meta=json.loads((folder / "meta.json").read_text()))
    assert not [p for p in tmp_path.iterdir() if ".tmp-" in p.name]


@pytest.mark.parametrize("key", ["num classes", "eval metric", "split", "binary"])
def test_missing_meta_key_is_named(make_ogb_folder, key):
    folder = make_ogb_folder()
    meta = json.loads((folder / "meta.json").read_text())
    del meta[key]
    (folder / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(DatasetError, match=f"meta.json: missing meta key '{key}'"):
        read_meta_json(folder)


def test_missing_meta_json_and_bad_json(make_ogb_folder):
    folder = make_ogb_folder()
    (folder / "meta.json").write_text("{not json")
    with pytest.raises(DatasetError, match="meta.json: not valid JSON"):
        read_meta_json(folder)
    (folder / "meta.json").unlink()
    with pytest.raises(DatasetError, match="meta.json: missing"):
        read_meta_json(folder)


def test_missing_raw_file_is_named(make_ogb_folder):
    folder = make_ogb_folder()
    (folder / "raw" / "edge.csv.gz").unlink()
    with pytest.raises(DatasetError, match="edge.csv.gz: missing"):
        read_ogb_folder(folder, read_meta_json(folder))


def test_split_dict_pt_from_dataset_saver_is_read_weights_only(make_ogb_folder):
    folder = make_ogb_folder()
    split_dir = folder / "split" / "random"
    split = {k: np.asarray(v) for k, v in read_ogb_folder(folder, read_meta_json(folder)).split.items()}
    for f in split_dir.iterdir():
        f.unlink()
    torch.save(split, split_dir / "split_dict.pt")
    raw = read_ogb_folder(folder, read_meta_json(folder))
    assert all(np.array_equal(raw.split[k], split[k]) for k in split)


def test_pickled_split_with_arbitrary_objects_is_refused(make_ogb_folder):
    folder = make_ogb_folder()
    split_dir = folder / "split" / "random"
    for f in split_dir.iterdir():
        f.unlink()

    class Evil:
        def __reduce__(self):
            return (print, ("owned",))

    torch.save({"train": Evil()}, split_dir / "split_dict.pt")
    with pytest.raises(DatasetError, match="weights_only"):
        read_ogb_folder(folder, read_meta_json(folder))
