import json

import numpy as np
import pytest
import torch

from pipeline import DatasetError
from pipeline.family import read_meta_json
from pipeline.ogb_layout import read_ogb_folder, write_ogb_folder


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


@pytest.mark.parametrize(("changes", "message"), [
    ({"num classes": 0}, "'num classes' must be >= 2 for multiclass classification, got 0"),
    ({"num classes": 8.7}, "'num classes' must be a whole number, got 8.7"),
    ({"num classes": "four"}, "'num classes' must be a whole number, got 'four'"),
    ({"num tasks": 0}, "'num tasks' must be >= 1, got 0"),
    ({"num classes": True}, "'num classes' must be a whole number, got True"),
    ({"split": "../../raw"}, "'split' must name a folder under split/, got '../../raw'"),
    ({"split": ".."}, "'split' must name a folder under split/, got '..'"),
], ids=["no classes", "fractional", "a word", "no tasks", "a bool", "a path out", "the parent"])
def test_meta_values_are_named_in_meta_json(make_ogb_folder, changes, message):
    """A class count of 0 was reported as a label out of range in the label file, 8.7 was cut to 8,
    and a split of '../../raw' read files outside the dataset folder."""
    folder = make_ogb_folder()
    meta = json.loads((folder / "meta.json").read_text())
    (folder / "meta.json").write_text(json.dumps({**meta, **changes}))
    with pytest.raises(DatasetError, match=f"meta.json: {message}$".replace("(", r"\(").replace(")", r"\)")):
        read_meta_json(folder)
    assert read_meta_json(make_ogb_folder(meta_changes={"num classes": "4"}))["num_classes"] == 4  # OGB's strings


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


def _rewrite_gz(path, transform):
    import gzip

    lines = gzip.decompress(path.read_bytes()).decode().splitlines(keepends=True)
    path.write_bytes(gzip.compress("".join(transform(lines)).encode()))


@pytest.mark.parametrize("name, declared_by", [
    ("edge.csv.gz", "num-edge-list.csv.gz"),
    ("node-feat.csv.gz", "num-node-list.csv.gz"),
    ("node-label.csv.gz", "num-node-list.csv.gz"),
])
@pytest.mark.parametrize("extra", [1, -1])
def test_line_count_disagreeing_with_num_lists_names_file_and_counts(make_ogb_folder, name, declared_by, extra):
    folder = make_ogb_folder()
    expected = 1000 if name.startswith("edge") else 200
    _rewrite_gz(folder / "raw" / name, lambda lines: lines + lines[:1] if extra > 0 else lines[:-1])
    message = f"{name}: has {expected + extra} lines, but {declared_by} says {expected}"
    with pytest.raises(DatasetError, match=message):
        read_ogb_folder(folder, read_meta_json(folder))


def test_trailing_blank_line_and_missing_final_newline_still_count_right(make_ogb_folder):
    folder = make_ogb_folder()
    _rewrite_gz(folder / "raw" / "edge.csv.gz", lambda lines: lines + ["\n", "\n"])
    _rewrite_gz(folder / "raw" / "node-label.csv.gz", lambda lines: lines[:-1] + [lines[-1].rstrip("\n")])
    assert read_ogb_folder(folder, read_meta_json(folder)).edge_index.shape == (2, 1000)


def test_binary_arrays_disagreeing_with_num_lists_are_named(make_ogb_folder):
    folder = make_ogb_folder(binary=True)
    data = folder / "raw" / "data.npz"
    with np.load(data) as npz:
        arrays = dict(npz)
    arrays["num_edges_list"] = np.array([999])
    np.savez(data, **arrays)
    with pytest.raises(DatasetError, match="data.npz: has 1000 edges in 'edge_index', but 'num_edges_list' says 999"):
        read_ogb_folder(folder, read_meta_json(folder))
    arrays["num_edges_list"], arrays["num_nodes_list"] = np.array([1000]), np.array([201])
    np.savez(data, **arrays)
    with pytest.raises(DatasetError, match="data.npz: has 200 rows in 'node_feat', but 'num_nodes_list' says 201"):
        read_ogb_folder(folder, read_meta_json(folder))


def test_cli_reports_extra_edge_lines_in_one_line(make_ogb_folder, capsys):
    from gnnkit.cli import main

    folder = make_ogb_folder()
    _rewrite_gz(folder / "raw" / "edge.csv.gz", lambda lines: lines + lines[:5])
    assert main(["preprocess", str(folder)]) == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("gnnkit: error")]
    assert errors == [f"gnnkit: error: {folder}/raw/edge.csv.gz: has 1005 lines, but num-edge-list.csv.gz "
                      "says 1000 (expected exactly one per edge)"]


def test_an_object_array_in_a_binary_label_file_is_refused_in_one_line(make_ogb_folder):
    """numpy refuses to unpickle it (allow_pickle=False); that refusal was a traceback."""
    folder = make_ogb_folder(binary=True)
    labels = np.empty(200, dtype=object)
    labels[:] = [1] * 200
    np.savez(folder / "raw" / "node-label.npz", node_label=labels)
    with pytest.raises(DatasetError, match=r"node-label.npz: holds Python objects \(a pickle, which gnnkit never"):
        read_ogb_folder(folder, read_meta_json(folder))


def test_edge_ids_written_as_whole_floats_read_as_the_integers(make_ogb_folder):
    """``3.0`` is the id 3 (a float frame's CSV); only a fraction such as ``3.5`` is refused, which
    OGB's reader would cut to 3 silently."""
    folder = make_ogb_folder()
    expected = read_ogb_folder(folder, read_meta_json(folder)).edge_index
    _rewrite_gz(folder / "raw" / "edge.csv.gz",
                lambda lines: [",".join(f"{v}.0" for v in line.strip().split(",")) + "\n" for line in lines])
    np.testing.assert_array_equal(read_ogb_folder(folder, read_meta_json(folder)).edge_index, expected)
    _rewrite_gz(folder / "raw" / "edge.csv.gz", lambda lines: lines[:3] + ["1.0,2.5\n"] + lines[4:])
    with pytest.raises(DatasetError, match=r"edge.csv.gz: node ids must be whole numbers, found 2.5 in row 4$"):
        read_ogb_folder(folder, read_meta_json(folder))


@pytest.mark.parametrize("binary", [False, True])
def test_declared_features_that_are_missing_are_named(make_ogb_folder, binary):
    """OGB's reader skips a missing feature file: the graph trained featureless without a word."""
    folder = make_ogb_folder(binary=binary)
    raw = folder / "raw"
    if binary:
        with np.load(raw / "data.npz") as npz:
            arrays = {k: v for k, v in npz.items() if k != "node_feat"}
        np.savez(raw / "data.npz", **arrays)
        message = r"data.npz: expected an array named 'node_feat' \(meta.json says 'has_node_attr': True\)"
    else:
        (raw / "node-feat.csv.gz").unlink()
        message = r"node-feat.csv.gz: missing \(meta.json says 'has_node_attr': True\)"
    with pytest.raises(DatasetError, match=message):
        read_ogb_folder(folder, read_meta_json(folder))


def test_split_dict_pt_needs_every_split(make_ogb_folder):
    """The graph reader failed on KeyError: 'valid'; the node reader went on without it."""
    folder = make_ogb_folder()
    split_dir = folder / "split" / "random"
    for name in ("train", "valid", "test"):
        (split_dir / f"{name}.csv.gz").unlink()
    torch.save({"train": torch.arange(10), "test": torch.arange(10, 20)}, split_dir / "split_dict.pt")
    with pytest.raises(DatasetError, match=r"split_dict.pt: expected a dict with train/valid/test, missing \['valid"):
        read_ogb_folder(folder, read_meta_json(folder))


@pytest.mark.parametrize(("change", "message"), [
    ({"num_nodes_list": np.array([200.0])}, r"data.npz: 'num_nodes_list' must be a 1-D list of non-negative integer "
                                            r"node counts, got dtype float64 and shape \[1\]"),
    ({"num_edges_list": np.array([[1000]])}, r"'num_edges_list' must be a 1-D list .* shape \[1, 1\]"),
    ({"edge_weight": np.ones(999)}, r"data.npz: has 999 rows in 'edge_weight', but 'num_edges_list' says 1000"),
])
def test_binary_count_lists_and_additional_arrays_are_checked(make_ogb_folder, change, message):
    """A float count list was a TypeError in OGB's reader; an edge_weight of another length passed."""
    folder = make_ogb_folder(binary=True)
    data = folder / "raw" / "data.npz"
    with np.load(data) as npz:
        arrays = {**npz, **change}
    np.savez(data, **arrays)
    with pytest.raises(DatasetError, match=message):
        read_ogb_folder(folder, read_meta_json(folder))


def test_an_empty_file_says_so(make_ogb_folder):
    import gzip

    folder = make_ogb_folder()
    (folder / "split" / "random" / "valid.csv.gz").write_bytes(gzip.compress(b""))  # pandas: "No columns to parse"
    with pytest.raises(DatasetError, match=r"valid.csv.gz: unreadable CSV \(the file holds no line; expected at least"):
        read_ogb_folder(folder, read_meta_json(folder))
