import json
import os
import shutil

import numpy as np
import pyarrow as pa
import pytest
import torch

from pipeline import DatasetError, cache, checked_stamps


def _publish(root, key="k1", dataset="g", **extra):
    arrays = {
        "indptr": np.array([0, 1, 3, 3], dtype=np.int64),
        "indices": np.array([2, 0, 1], dtype=np.int64),
        "y": np.array([0, 1, -1], dtype=np.int64),
        "x": np.arange(12, dtype=np.float32).reshape(3, 4),
        "split.train": np.array([0], dtype=np.int64),
        "split.valid": np.array([1], dtype=np.int64),
        "split.test": np.array([], dtype=np.int64),
        **extra,
    }
    meta = {"num_classes": 2, "num_tasks": 1, "task_type": "multiclass classification", "eval_metric": "acc", "name": dataset}
    return cache.publish(root, key, {"dataset": dataset}, arrays, meta)


def test_publish_then_open_round_trips(tmp_path):
    entry = _publish(tmp_path)
    assert entry.path == tmp_path / "g" / "k1"
    graph = entry.open()
    assert graph.num_nodes == 3 and graph.num_edges == 3
    assert torch.equal(graph.x, torch.arange(12, dtype=torch.float32).view(3, 4))
    assert graph.split["test"].numel() == 0
    manifest = json.loads((entry.path / "manifest.json").read_text())
    assert manifest["arrays"]["x"]["shape"] == [3, 4] and manifest["arrays"]["x"]["dtype"] == "float32"
    assert len(manifest["arrays"]["x"]["sha256"]) == 64
    assert not cache.stale_temps(tmp_path)


def test_open_is_zero_copy(tmp_path):
    big = np.random.default_rng(0).standard_normal((20000, 64)).astype(np.float32)
    entry = _publish(tmp_path, x=big, indptr=np.zeros(20001, dtype=np.int64),
                     y=np.zeros(20000, dtype=np.int64), indices=np.zeros(0, dtype=np.int64))
    before = pa.total_allocated_bytes()
    tensor = entry.array("x")
    assert pa.total_allocated_bytes() == before  # nothing was copied into Arrow's heap
    assert np.array_equal(tensor.numpy(), big)
    assert _mapped_file(tensor.data_ptr()) == str(entry.path / "arrays" / "x.arrow")


def _mapped_file(address):
    """The file whose memory mapping holds ``address`` (Linux /proc/self/maps)."""
    with open("/proc/self/maps") as maps:
        for line in maps:
            fields = line.split()
            lo, hi = (int(v, 16) for v in fields[0].split("-"))
            if lo <= address < hi:
                return fields[5] if len(fields) > 5 else None
    return None


def test_verify_detects_corruption(tmp_path):
    entry = _publish(tmp_path)
    assert cache.verify(entry) == []
    path = entry.path / "arrays" / "x.arrow"
    data = bytearray(path.read_bytes())
    offset = data.find(np.float32(5).tobytes())
    data[offset:offset + 4] = np.float32(99).tobytes()
    path.write_bytes(bytes(data))
    assert cache.verify(entry) == ["arrays/x.arrow: checksum mismatch"]


def test_truncated_array_is_reported(tmp_path):
    entry = _publish(tmp_path)
    path = entry.path / "arrays" / "indices.arrow"
    path.write_bytes(path.read_bytes()[:40])
    problems = cache.verify(entry)
    assert problems and problems[0].startswith("arrays/indices.arrow: unreadable")


def test_temp_folders_are_never_entries(tmp_path):
    import os


    legacy = tmp_path / "g" / ".tmp-k1-abc"  # an older version's unowned temp: stale by age only
    (legacy / "arrays").mkdir(parents=True)
    owned = tmp_path / "g" / ".k1.tmp-1234567@another-host.abcdefgh"
    (owned / "arrays").mkdir(parents=True)
    assert cache.lookup(tmp_path, "g", "k1") is None
    assert cache.entries(tmp_path) == []
    assert cache.stale_temps(tmp_path) == []  # fresh, owners not known to be gone
    os.utime(legacy, (1.0, 1.0))
    assert cache.stale_temps(tmp_path) == [legacy]
    assert cache.clear(tmp_path) == 1 and (tmp_path / "g").is_dir()  # another host's build may still run
    os.utime(owned, (1.0, 1.0))
    assert cache.clear(tmp_path) == 1 and not (tmp_path / "g").exists()


def test_failed_write_leaves_nothing(tmp_path):
    with pytest.raises(Exception):
        _publish(tmp_path, **{"extra.bad": np.array([object()], dtype=object)})
    assert cache.lookup(tmp_path, "g", "k1") is None
    assert cache.stale_temps(tmp_path) == []


def test_manifest_for_another_key_is_refused(tmp_path):
    entry = _publish(tmp_path)
    entry.path.rename(tmp_path / "g" / "k2")
    with pytest.raises(DatasetError, match="manifest.json"):
        cache.load_entry(tmp_path / "g" / "k2")


def test_builder_streams_arrays_and_orders_the_manifest(tmp_path):
    x = np.arange(12, dtype=np.float32).reshape(4, 3)
    with cache.building(tmp_path, "k2", {"dataset": "g"}) as entry:
        entry.add("y", np.arange(4))
        with entry.stream("x", x.shape, np.float32) as out:
            out.write(x[:1])
            out.write(x[1:])
        published = entry.publish({"num_classes": 2}, {"build_s": 1}, order=["x", "y"])
    assert list(published.manifest["arrays"]) == ["x", "y"]
    assert np.array_equal(published.numpy("x"), x) and cache.verify(published) == []
    whole = _publish(tmp_path, key="k3", x=x)
    assert published.manifest["arrays"]["x"] == whole.manifest["arrays"]["x"]


def test_builder_leaves_nothing_when_a_stream_is_incomplete(tmp_path):
    with pytest.raises(ValueError, match="1 of 4 values written"):
        with cache.building(tmp_path, "k4", {"dataset": "g"}) as entry:
            with entry.stream("y", (4,), np.int64) as out:
                out.write(np.arange(1))
    assert cache.entries(tmp_path) == [] and not (tmp_path / "g").exists()  # nor the folder made for it


@pytest.mark.parametrize(("edit", "message"), [
    (lambda m: [], "malformed manifest: expected a JSON object, got \\[\\]"),
    (lambda m: {k: v for k, v in m.items() if k != "schema_version"}, "malformed manifest: no schema_version"),
    (lambda m: {**m, "schema_version": 0}, "an entry of cache schema 0; this gnnkit reads schema 1 .*'gnnkit cache clear'"),
    (lambda m: {**m, "key": "k9"}, "the entry of key 'k9', not of its folder's name 'k1' \\(a copied or renamed entry"),
    (lambda m: {**m, "arrays": {**m["arrays"], "y": {k: v for k, v in m["arrays"]["y"].items() if k != "sha256"}}},
     "malformed manifest: arrays.y.sha256 must be a str"),
    (lambda m: {k: v for k, v in m.items() if k != "arrays"}, "malformed manifest: 'arrays' must map"),
    (lambda m: {**m, "inputs": ["g"]}, "malformed manifest: 'inputs' must be a mapping"),
    (lambda m: {**m, "arrays": {**m["arrays"], "x": {**m["arrays"]["x"], "shape": "3x4"}}},
     "malformed manifest: arrays.x.shape must be a list"),
    (lambda m: {**m, "arrays": {**m["arrays"], "x": {**m["arrays"]["x"], "dtype": "float33"}}},
     "malformed manifest: arrays.x.dtype must name a numpy number dtype, not 'float33'"),
    (lambda m: {**m, "arrays": {**m["arrays"], "x": {**m["arrays"]["x"], "dtype": "O"}}},
     "malformed manifest: arrays.x.dtype must name a numpy number dtype, not 'O'"),
    (lambda m: {**m, "arrays": {**m["arrays"], "x": {**m["arrays"]["x"], "shape": [10**30, 4]}}},
     r"malformed manifest: arrays.x.shape must list sizes"),
    (lambda m: {**m, "arrays": {**m["arrays"], "x": {**m["arrays"]["x"], "dtype": "float64"}}},
     r"malformed manifest: arrays.x.bytes must be its shape's size times its dtype's \(48 is not\)"),
    (lambda m: {**m, "arrays": {**m["arrays"], "x": {**m["arrays"]["x"], "shape": [3, -4]}}},
     r"malformed manifest: arrays.x.shape must list sizes \(integers >= 0\), not \[3, -4\]"),
    (lambda m: {**m, "inputs": {**m["inputs"], "dataset": "h"}},
     "the entry of dataset 'h', not of its folder's name 'g' \\(a moved or edited entry"),
    (lambda m: {**m, "meta": {**m["meta"], "num_classes": 3}},
     "damaged manifest: it changed after it was written \\(its digest does not match\\); 'gnnkit preprocess --force'"),
    (lambda m: {**m, "arrays": {**m["arrays"], "x": {**m["arrays"]["x"], "dtype": "int32"}}},
     "damaged manifest: it changed after it was written"),
], ids=["a list", "no schema", "another schema", "another key", "no checksum", "no arrays", "inputs a list",
        "shape a string", "no dtype", "object dtype", "huge size", "bytes of another dtype", "negative size",
        "another dataset", "meta edited", "dtype of the same size"])
def test_a_damaged_manifest_is_one_line_naming_it(tmp_path, edit, message):
    """The cache commands list such an entry as CORRUPT; they raised AttributeError and KeyError, and
    `cache verify` a TypeError for a dtype numpy does not know (the entries after it went unchecked); an
    edited num_classes trained silently, an edited dtype of the same size failed deep in the run."""
    entry = _publish(tmp_path)
    file = entry.path / "manifest.json"
    file.write_text(json.dumps(edit(json.loads(file.read_text()))))
    with pytest.raises(DatasetError, match=f"manifest.json: .*{message}"):
        cache.load_entry(entry.path)
    assert cache.entries(tmp_path) == [entry.path]


def test_a_hit_with_an_array_gone_or_cut_short_is_damaged_and_an_unreadable_array_names_its_file(tmp_path):
    entry = _publish(tmp_path)
    assert cache.lookup(tmp_path, "g", "k1") is not None and cache.damaged_arrays(entry) == []
    x = entry.path / "arrays" / "x.arrow"
    x.write_bytes(x.read_bytes()[:20])
    with pytest.raises(DatasetError, match=r"k1: damaged entry: arrays/x.arrow truncated \(20 bytes, holds 48"):
        cache.lookup(tmp_path, "g", "k1")
    with pytest.raises(DatasetError, match=r"x.arrow: unreadable array \(.*\); 'gnnkit preprocess --force'"):
        entry.numpy("x")
    indices = entry.path / "arrays" / "indices.arrow"
    indices.write_bytes(indices.read_bytes()[:-9])  # still longer than its values: its footer is cut
    assert cache.damaged_arrays(entry)[0].startswith("arrays/indices.arrow unreadable (")
    indices.write_bytes(b"")
    (entry.path / "arrays" / "y.arrow").unlink()
    assert cache.damaged_arrays(entry) == ["arrays/indices.arrow truncated (0 bytes, holds 24 of values)",
                                           "arrays/y.arrow missing",
                                           "arrays/x.arrow truncated (20 bytes, holds 48 of values)"]


@pytest.mark.parametrize(("arrays", "problem"), [
    ({"indices": np.array([2, 0, 7], dtype=np.int64)}, r"its CSR holds node ids outside \[0, 3\)"),
    ({"indptr": np.array([0, 2, 1, 3], dtype=np.int64)}, "its CSR row offsets do not run from 0 to 3 edges"),
])
def test_a_csr_damaged_past_its_checksums_is_one_line_when_opened(tmp_path, arrays, problem):
    """A byte flipped in indices.arrow came out of a run as a traceback from the adjacency's check
    (`Adjacency: indices must lie in [0, 3000)`), with a run folder left behind."""
    entry = _publish(tmp_path, **arrays)
    with pytest.raises(DatasetError, match=f"k1: damaged entry: {problem}; 'gnnkit cache verify' checks it, "
                                           "'gnnkit preprocess --force' builds it again$"):
        entry.open()


def test_a_folder_without_a_manifest_at_the_key_is_replaced_by_the_next_build(tmp_path):
    """Entries appear whole by a rename, so such a folder is debris; publishing failed on it
    (``Directory not empty``)."""
    (tmp_path / "g" / "k1" / "arrays").mkdir(parents=True)
    assert cache.lookup(tmp_path, "g", "k1") is None
    entry = _publish(tmp_path)
    assert entry.open().num_nodes == 3


def _flip(path, value=5.0):
    """Write another value over ``value`` in place, keeping the file's size and modification time."""
    before = path.stat()
    data = path.read_bytes()
    with open(path, "r+b") as handle:
        handle.seek(data.find(np.float32(value).tobytes()))
        handle.write(np.float32(-value).tobytes())
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))


def test_a_hit_checksums_the_arrays_changed_since_they_were_checked(tmp_path):
    """A flipped byte in the features was read as data: the hit checked sizes and footers only."""
    entry = _publish(tmp_path)
    assert checked_stamps.changed(entry.path, ["arrays/x.arrow", "arrays/y.arrow"]) == []  # stamped when published
    _flip(entry.path / "arrays" / "x.arrow")
    with pytest.raises(DatasetError, match=r"k1: damaged entry: arrays/x.arrow: checksum mismatch$"):
        cache.lookup(tmp_path, "g", "k1")


def test_a_hit_after_a_touch_or_a_copy_checksums_once_and_stamps_again(tmp_path, monkeypatch):
    entry = _publish(tmp_path)
    os.utime(entry.path / "arrays" / "y.arrow")
    shutil.copytree(entry.path, tmp_path / "copy" / "g" / "k1")  # another cache: every inode is new
    checked = []
    real = cache.verify
    monkeypatch.setattr(cache, "verify", lambda entry, names=None: checked.append(names) or real(entry, names))
    said = []
    monkeypatch.setattr(cache, "PROGRESS_BYTES", 40)
    assert cache.lookup(tmp_path, "g", "k1", said.append) is not None
    assert cache.lookup(tmp_path / "copy", "g", "k1", said.append) is not None
    assert cache.lookup(tmp_path / "copy", "g", "k1", said.append) is not None  # stamped: nothing to checksum
    assert checked[0] == ["y"] and sorted(checked[1]) == sorted(entry.manifest["arrays"]) and len(checked) == 2
    assert said == [f"checksumming 7 arrays of {tmp_path / 'copy' / 'g' / 'k1'} (0 MB): unchecked since they last "
                    "changed (written to or copied, or an entry of an older gnnkit)"]


def test_verify_stamps_only_the_intact_arrays(tmp_path):
    entry = _publish(tmp_path)
    (entry.path / checked_stamps.STAMPS).unlink()
    _flip(entry.path / "arrays" / "x.arrow")
    assert cache.verify(entry) == ["arrays/x.arrow: checksum mismatch"]
    files = [info["file"] for info in entry.manifest["arrays"].values()]
    assert checked_stamps.changed(entry.path, files) == ["arrays/x.arrow"]


def test_an_entry_of_an_older_gnnkit_without_a_manifest_digest_still_opens(tmp_path):
    entry = _publish(tmp_path)
    file = entry.path / "manifest.json"
    file.write_text(json.dumps({k: v for k, v in json.loads(file.read_text()).items() if k != "digest"}))
    assert cache.load_entry(entry.path).open().num_nodes == 3


def test_clear_leaves_the_temp_of_a_build_that_still_runs(tmp_path):
    """`gnnkit cache clear` during a preprocess deleted its temp folder: the build failed with a
    46-line traceback (FileNotFoundError, masked by a BufferError)."""
    from pipeline import temp_paths

    _publish(tmp_path)
    running = temp_paths.make_temp_dir(tmp_path / "g" / "k2")  # this process: alive
    left = tmp_path / "g" / f".k3{temp_paths.MARK}999999999@{temp_paths._host()}.x"  # its owner is gone
    left.mkdir()
    assert cache.clear(tmp_path, "g") == 2
    assert sorted(p.name for p in (tmp_path / "g").iterdir()) == [running.name]
    temp_paths.remove(running)
    assert cache.clear(tmp_path) == 0 and list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(("arrays", "problem"), [
    ({"y": np.array([0, 7, -1], dtype=np.int64)}, r"its class labels leave \[-1, 2\)"),
    ({"y": np.array([0, 1, -9], dtype=np.int64)}, r"its class labels leave \[-1, 2\)"),
    ({"split.train": np.array([0, 3], dtype=np.int64)}, r"its train split holds node ids outside \[0, 3\)"),
    ({"split.test": np.array([-2], dtype=np.int64)}, r"its test split holds node ids outside \[0, 3\)"),
])
def test_labels_and_splits_damaged_past_their_checksums_are_one_line_when_opened(tmp_path, arrays, problem):
    """A flipped byte in y.arrow or split.train.arrow (a disk's, which no stamp sees) failed deep in a
    run: `IndexError: Target 69 is out of bounds`, or an IndexError in the homophily measure."""
    entry = _publish(tmp_path, **arrays)
    with pytest.raises(DatasetError, match=f"k1: damaged entry: {problem}; 'gnnkit cache verify' checks it"):
        entry.open()


def test_clear_unlinks_a_link_in_a_dataset_folder_and_leaves_what_it_points_to(tmp_path):
    _publish(tmp_path / "cache")
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "cache" / "g" / "linked").symlink_to(tmp_path / "elsewhere")  # rmtree refused it
    assert cache.clear(tmp_path / "cache") == 1
    assert (tmp_path / "elsewhere").is_dir() and not (tmp_path / "cache" / "g").exists()
