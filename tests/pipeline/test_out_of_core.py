"""Out-of-core preprocessing publishes the in-memory entry, byte for byte, and fails as it fails."""

from __future__ import annotations

import gzip
import os
import re
import zipfile
from pathlib import Path

import numpy as np
import pytest

from pipeline import DatasetError, PreprocessOptions, cache, preprocess
from pipeline.feature_prep import CHUNK_ROWS
from pipeline.out_of_core import MIN_ITEMS, Plan
from tests.conftest import graph_arrays

#: Tiny: every chunk and sort load is MIN_ITEMS, so a 20,000-edge graph takes dozens of loads.
BUDGET = 1


def _leftovers(root: Path) -> list[Path]:
    """Anything under the cache root but published entries and the digest memo."""
    return [p for p in root.rglob("*") if p.name.startswith(".") or p.suffix in (".keys", ".raw")]


def _both(folder: Path, tmp_path: Path, **options) -> tuple[cache.CacheEntry, cache.CacheEntry]:
    memory = preprocess(str(folder), PreprocessOptions(**options), cache_root=tmp_path / "memory")
    streamed = preprocess(str(folder), PreprocessOptions(memory_budget_mb=BUDGET, **options),
                          cache_root=tmp_path / "out-of-core")
    return memory, streamed


def assert_identical(memory: cache.CacheEntry, streamed: cache.CacheEntry) -> None:
    """Same key, every array file equal, the same manifest but for stats and time."""
    assert streamed.key == memory.key
    assert sorted(p.name for p in (streamed.path / "arrays").iterdir()) == sorted(
        p.name for p in (memory.path / "arrays").iterdir())
    for name, info in memory.manifest["arrays"].items():
        assert (streamed.path / info["file"]).read_bytes() == (memory.path / info["file"]).read_bytes(), name
    drop = ("stats", "created")
    assert {k: v for k, v in streamed.manifest.items() if k not in drop} == {
        k: v for k, v in memory.manifest.items() if k not in drop}
    assert list(streamed.manifest["arrays"]) == list(memory.manifest["arrays"])
    assert cache.verify(streamed) == []
    assert _leftovers(streamed.path.parent.parent) == []


def _folder(make_ogb_folder, binary: bool, num_nodes: int = 3000, num_edges: int = 20_000,
            num_features: int = 8, **changes) -> Path:
    parts = graph_arrays(num_nodes=num_nodes, num_edges=num_edges, num_features=num_features, seed=num_nodes)
    parts["edge_index"][:, :40] = parts["edge_index"][0, :40]  # self loops
    parts["edge_index"][:, 40:80] = parts["edge_index"][:, 80:120]  # repeated edges
    parts.update(changes)
    return make_ogb_folder(binary=binary, **parts)


OPTIONS = [
    {},
    {"undirected": True},
    {"self_loops": "remove"},
    {"undirected": True, "self_loops": "remove"},
    {"normalize_features": "row"},
    {"undirected": True, "normalize_features": "column"},
    {"normalize_features": "auto"},
]


@pytest.mark.parametrize("binary", [False, True])
@pytest.mark.parametrize("options", OPTIONS)
def test_entry_is_the_in_memory_entry(make_ogb_folder, tmp_path, binary, options):
    memory, streamed = _both(_folder(make_ogb_folder, binary), tmp_path, **options)
    assert_identical(memory, streamed)
    stats = streamed.manifest["stats"]["out_of_core"]
    assert stats["sort_keys"] == MIN_ITEMS and stats["loads"] > 10 and stats["buckets"] > 40
    assert "memory_budget_mb" not in streamed.manifest["inputs"]["options"]


@pytest.mark.parametrize("binary", [True, False])
def test_features_over_several_blocks_normalise_to_the_same_bits(make_ogb_folder, tmp_path, monkeypatch, binary):
    """Column statistics depend on the blocks they are summed in: both paths use CHUNK_ROWS rows,
    however many rows the out-of-core build parses at a time (here 1000, across block ends)."""
    monkeypatch.setattr(Plan, "feature_rows", lambda self, width: 1000)
    n = CHUNK_ROWS + 4321
    x = np.random.default_rng(5).standard_normal((n, 3)).astype(np.float32) * 1e3 + 7
    folder = _folder(make_ogb_folder, binary, num_nodes=n, num_edges=2000, num_features=3, node_feat=x)
    for how in ("column", "row", "auto") if binary else ("column",):  # auto: signed features, kept as stored
        assert_identical(*_both(folder, tmp_path / how, normalize_features=how))


def test_blocks_are_filled_from_chunks_of_any_size():
    from pipeline.out_of_core import _blocks

    x = np.arange(23 * 2, dtype=np.float64).reshape(23, 2)
    chunks = [x[:3], x[3:3], x[3:12], x[12:13], x[13:]]
    got = [block.copy() for block in _blocks(iter(chunks), 5, 2)]
    assert [len(b) for b in got] == [5, 5, 5, 5, 3] and all(b.dtype == np.float32 for b in got)
    assert np.array_equal(np.concatenate(got), x.astype(np.float32))


def test_features_are_parsed_in_what_the_budget_leaves_beside_a_block():
    small, big = Plan.for_budget(300, 100.0), Plan.for_budget(4096, 100.0)
    assert MIN_ITEMS <= small.feature_rows(128) < big.feature_rows(128) == CHUNK_ROWS
    assert Plan.for_budget(1, 100.0).feature_rows(128) == MIN_ITEMS


def test_inverse_edges_extra_node_files_and_unlabelled_nodes(make_ogb_folder, tmp_path):
    """OGB's add_inverse_edge (CSV), an additional node file (node_year) and NaN labels."""
    n = 3000
    labels = np.random.default_rng(2).integers(0, 4, n).astype(np.float64)
    parts = graph_arrays(num_nodes=n, num_edges=9000)
    labelled = np.concatenate(list(parts["split"].values()))
    labels[np.setdiff1d(np.arange(n), labelled)[:500]] = np.nan
    year = (2000 + np.arange(n) % 20).reshape(-1, 1)
    meta = {"add_inverse_edge": "True", "additional node files": "node_year"}
    for binary in (False, True):
        folder = _folder(make_ogb_folder, binary, num_nodes=n, num_edges=9000, labels=labels,
                         extra={"node_year": year},
                         meta_changes=meta if not binary else {"additional node files": "node_year"})
        memory, streamed = _both(folder, tmp_path / str(binary), undirected=binary)
        assert_identical(memory, streamed)
        assert np.array_equal(streamed.numpy("extra.node_year"), year[:, 0])
        assert streamed.manifest["meta"]["num_raw_edges"] == 9000 * (1 if binary else 2)


def test_multi_task_labels_compressed_npz_and_interleaved_edges(make_ogb_folder, tmp_path):
    """Float [N, T] labels; data.npz deflated; edge_index stored in Fortran order (pairs)."""
    n, tasks = 2000, 3
    labels = np.random.default_rng(3).integers(0, 2, (n, tasks)).astype(np.float32)
    folder = _folder(make_ogb_folder, True, num_nodes=n, num_edges=7000, labels=labels,
                     meta_changes={"num tasks": tasks, "num classes": 2, "task type": "binary classification",
                                   "eval metric": "rocauc"})
    data = folder / "raw" / "data.npz"
    with np.load(data) as npz:
        arrays = {k: npz[k] for k in npz}
    arrays["edge_index"] = np.asfortranarray(arrays["edge_index"])
    np.savez_compressed(data, **arrays)
    with zipfile.ZipFile(data) as archive:
        assert {i.compress_type for i in archive.infolist()} == {zipfile.ZIP_DEFLATED}
    memory, streamed = _both(folder, tmp_path, undirected=True)
    assert_identical(memory, streamed)
    assert streamed.numpy("y").shape == (n, tasks)


def test_the_papers_twin_in_miniature(tmp_path):
    """synthetic-papers-tiny (binary layout, 25% labelled, node_year) from the registry."""
    memory = preprocess("synthetic-papers-tiny", cache_root=tmp_path / "memory")
    streamed = preprocess("synthetic-papers-tiny", PreprocessOptions(undirected=True, memory_budget_mb=BUDGET),
                          cache_root=tmp_path / "out-of-core")
    assert_identical(memory, streamed)
    assert "extra.node_year" in streamed.manifest["arrays"]


def _rewrite_gz(path: Path, edit) -> None:
    lines = gzip.decompress(path.read_bytes()).decode().splitlines()
    path.write_bytes(gzip.compress(("\n".join(edit(lines)) + "\n").encode()))


def _set_line(index: int, text: str):
    return lambda lines: [text if i == index else line for i, line in enumerate(lines)]


def _first_train_node(folder: Path) -> str:
    return gzip.decompress((folder / "split/random/train.csv.gz").read_bytes()).decode().split()[0]


#: case -> (file under raw/, how to break it, what the error says)
BREAKS = {
    "edge id too large": ("edge.csv.gz", _set_line(17, "3,5000"), "edge endpoint 5000 out of range [0, 3000)"),
    "negative edge id": ("edge.csv.gz", _set_line(1234, "-4,2"), "edge endpoint -4 out of range"),
    "non-finite feature": ("node-feat.csv.gz", _set_line(7, ",".join(["nan"] * 8)),
                           "non-finite feature value in row 7"),
    "label out of range": ("node-label.csv.gz", _set_line(3, "9"), "label 9 out of range [0, 4)"),
    "negative label": ("node-label.csv.gz", _set_line(3, "-3"), "negative class label -3"),
    "fractional label": ("node-label.csv.gz", _set_line(3, "1.5"), "class labels must be whole numbers"),
    "two label columns": ("node-label.csv.gz", lambda lines: [f"{line},0" for line in lines],
                          "expected 1 label column(s), got shape [3000, 2]"),
    "split out of range": ("../split/random/valid.csv.gz", _set_line(2, "3000"), "node index 3000 out of range"),
    "split repeats": ("../split/random/test.csv.gz", lambda lines: lines[:1] + lines[:-1],
                      "node indices repeat within the split"),
    "splits overlap": ("../split/random/test.csv.gz", None, "overlaps an earlier split"),
    "extra edge line": ("edge.csv.gz", lambda lines: lines + lines[:3], "has 20003 lines, but num-edge-list"),
    "unlabelled split node": ("node-label.csv.gz", None, "nodes of the 'train' split have no label"),
    "text label": ("node-label.csv.gz", _set_line(3, "cat"), "node-label.csv.gz: labels must be numbers, found 'cat'"),
    "text feature": ("node-feat.csv.gz", _set_line(7, ",".join(["abc"] * 8)),
                     "node-feat.csv.gz: unreadable raw CSV file (could not convert string to float: 'abc')"),
    "text edge": ("edge.csv.gz", _set_line(5, "a,b"), "edge.csv.gz: node ids must be numbers, found 'a'"),
    "fractional edge id": ("edge.csv.gz", _set_line(1500, "3,1.7"),
                           "edge.csv.gz: node ids must be whole numbers, found 1.7 in row 1501"),
    "three edge columns": ("edge.csv.gz", lambda lines: [f"{line},0" for line in lines],
                           "edge.csv.gz: expected two node ids a line (src,dst), found 3"),
    "one edge column": ("edge.csv.gz", lambda lines: [line.split(",")[0] for line in lines],
                        "edge.csv.gz: expected two node ids a line (src,dst), found 1"),
    "huge edge id": ("edge.csv.gz", _set_line(30, "3,99999999999999999999"),
                     "edge.csv.gz: node id 100000000000000000000 in row 31 does not fit in 64 bits"),
    "empty edge id": ("edge.csv.gz", _set_line(9, "3,"), "edge.csv.gz: node ids must be whole numbers, found nan"),
}


@pytest.mark.parametrize("case", sorted(BREAKS))
def test_each_error_is_the_in_memory_error(make_ogb_folder, tmp_path, case):
    folder = _folder(make_ogb_folder, False)
    name, edit, message = BREAKS[case]
    if case == "splits overlap":
        first = _first_train_node(folder)
        edit = lambda lines: lines[:-1] + [first]  # noqa: E731
    elif case == "unlabelled split node":
        edit = _set_line(int(_first_train_node(folder)), "nan")
    _rewrite_gz((folder / "raw" / name).resolve(), edit)
    with pytest.raises(DatasetError, match=re.escape(message)) as in_memory:
        preprocess(str(folder), cache_root=tmp_path / "memory")
    open_files = len(os.listdir("/proc/self/fd"))
    with pytest.raises(DatasetError) as out_of_core:
        preprocess(str(folder), PreprocessOptions(memory_budget_mb=BUDGET), cache_root=tmp_path / "out-of-core")
    assert str(out_of_core.value) == str(in_memory.value)
    root = tmp_path / "out-of-core"
    assert cache.entries(root) == [] and _leftovers(root) == []
    assert not (root / folder.name).exists()  # nor an empty folder for the dataset's entries
    assert len(os.listdir("/proc/self/fd")) == open_files  # no bucket file left open


@pytest.mark.parametrize("name", ["raw/node-label.csv.gz", "split/random/valid.csv.gz"])
def test_a_file_that_is_not_utf8_is_one_line_naming_it(make_ogb_folder, tmp_path, name):
    folder = _folder(make_ogb_folder, False)
    path = (folder / name).resolve()
    path.write_bytes(gzip.compress(gzip.decompress(path.read_bytes()).replace(b"\n", b"\n\xff", 1)))
    for options in (PreprocessOptions(), PreprocessOptions(memory_budget_mb=BUDGET)):
        with pytest.raises(DatasetError, match=re.escape(f"{path.name}: unreadable CSV (not UTF-8 text")):
            preprocess(str(folder), options, cache_root=tmp_path / "c")
    assert not (tmp_path / "c" / folder.name).exists()


@pytest.mark.parametrize("edges,message", [
    (np.array([[0, 1, 2], [1, 2, 250]]), "data.npz: edge endpoint 250 out of range [0, 200)"),
    (np.array([[0, 1, 2]]), "data.npz: expected edges of shape [2, E], got [1, 3]"),
    (np.array([[0, 1, 2], [1, 2.5, 3]]), "data.npz: 'edge_index' must hold integer node ids, got dtype float64"),
])
def test_binary_edge_errors_are_the_in_memory_errors(make_ogb_folder, tmp_path, edges, message):
    folder = make_ogb_folder(binary=True, edge_index=edges.astype(np.int64))
    data = folder / "raw" / "data.npz"
    with np.load(data) as npz:
        np.savez(data, **{**npz, "edge_index": edges})  # as given: float ids stay floats
    with pytest.raises(DatasetError) as in_memory:
        preprocess(str(folder), cache_root=tmp_path / "memory")
    with pytest.raises(DatasetError) as out_of_core:
        preprocess(str(folder), PreprocessOptions(memory_budget_mb=BUDGET), cache_root=tmp_path / "ooc")
    assert str(out_of_core.value) == str(in_memory.value) and str(in_memory.value).endswith(message)


def test_reorder_is_refused_by_name(make_ogb_folder, tmp_path):
    with pytest.raises(DatasetError, match=r"preprocess.reorder: 'rcm' orders the whole graph in memory"):
        preprocess(str(make_ogb_folder()), PreprocessOptions(reorder="rcm", memory_budget_mb=64), cache_root=tmp_path)
    assert _leftovers(tmp_path) == []


def test_fortran_features_are_refused_with_the_fix(make_ogb_folder, tmp_path):
    folder = make_ogb_folder(binary=True)
    data = folder / "raw" / "data.npz"
    with np.load(data) as npz:
        arrays = {k: npz[k] for k in npz}
    arrays["node_feat"] = np.asfortranarray(arrays["node_feat"])
    np.savez(data, **arrays)
    with pytest.raises(DatasetError, match="array 'node_feat' is stored in Fortran order.*numpy.ascontiguousarray"):
        preprocess(str(folder), PreprocessOptions(memory_budget_mb=64), cache_root=tmp_path)


def test_plan_grows_with_the_budget_and_never_below_the_floor():
    small, big = Plan.for_budget(1, 100.0), Plan.for_budget(2048, 100.0)
    assert (small.edge_chunk, small.sort_keys, small.row_chunk) == (MIN_ITEMS,) * 3
    assert big.sort_keys > big.edge_chunk > MIN_ITEMS and big.sort_keys * 20 < (2048 - 100) * 2**20


def test_a_budget_below_what_the_process_holds_is_said(make_ogb_folder, tmp_path, gnnkit_log):
    """It builds in the smallest pieces, as before; the peak it then reports above the budget is no
    longer a surprise."""
    preprocess(str(_folder(make_ogb_folder, False)), PreprocessOptions(memory_budget_mb=1), cache_root=tmp_path)
    assert "preprocess.memory_budget_mb 1: below what the process already holds" in gnnkit_log.text
