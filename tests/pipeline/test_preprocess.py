import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from pipeline import DatasetError, PreprocessOptions, cache, preprocess
from pipeline.fingerprint import cache_key


def test_second_run_is_a_cache_hit(make_ogb_folder, tmp_path):
    folder = make_ogb_folder()
    root = tmp_path / "cache"
    first = preprocess(str(folder), cache_root=root)
    start = time.perf_counter()
    second = preprocess(str(folder), cache_root=root)
    assert time.perf_counter() - start < 1.0
    assert second.path == first.path
    assert first.manifest["stats"]["build_s"] >= 0 and first.manifest["stats"]["peak_rss_mb"] > 0


def test_a_damaged_hit_is_built_again_not_served(make_ogb_folder, tmp_path, gnnkit_log):
    """An array deleted or cut short after publishing: preprocess warns and rebuilds the entry (it
    reported a cache hit, and training then failed in pyarrow)."""
    folder = make_ogb_folder()
    root = tmp_path / "cache"
    first = preprocess(str(folder), cache_root=root)
    (first.path / "arrays" / "y.arrow").unlink()
    (first.path / "manifest.json").write_text("[]")
    again = preprocess(str(folder), cache_root=root)
    assert again.path == first.path and again.open().num_nodes == 200
    assert "manifest.json: malformed manifest: expected a JSON object, got []" in gnnkit_log.text
    assert "building it again" in gnnkit_log.text


def test_a_hit_whose_features_were_written_to_is_built_again(make_ogb_folder, tmp_path, gnnkit_log):
    """A byte flipped in x.arrow after publishing was served as a cache hit, and trained on."""
    folder = make_ogb_folder()
    root = tmp_path / "cache"
    first = preprocess(str(folder), cache_root=root)
    x = first.open().x.clone()
    path = first.path / "arrays" / "x.arrow"
    offset = path.read_bytes().find(x[3, 1].numpy().tobytes())
    with open(path, "r+b") as handle:
        handle.seek(offset + 3)
        handle.write(bytes([path.read_bytes()[offset + 3] ^ 0x40]))
    again = preprocess(str(folder), cache_root=root)
    assert "arrays/x.arrow: checksum mismatch; building it again" in gnnkit_log.text
    assert np.array_equal(again.open().x.numpy(), x.numpy())


def test_a_same_size_raw_edit_that_keeps_the_modification_time_is_a_new_key(make_ogb_folder, tmp_path):
    """The digest memo knew files by size and mtime: such an edit (rsync -a, cp -p, touch -r) hit the
    entry of the old content."""
    folder = make_ogb_folder(binary=True)
    root = tmp_path / "cache"
    first = preprocess(str(folder), cache_root=root)
    raw = folder / "raw" / "node-label.npz"
    before = raw.stat()
    with np.load(raw) as npz:
        labels = {name: npz[name].copy() for name in npz.files}
    name = next(iter(labels))
    labels[name][0] = (labels[name][0] + 1) % 4
    np.savez(raw, **labels)  # uncompressed: the same size
    os.utime(raw, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert raw.stat().st_size == before.st_size
    again = preprocess(str(folder), cache_root=root)
    assert again.key != first.key and again.open().y[0] == labels[name].reshape(-1)[0]


def test_key_ignores_location_and_mtime_but_not_content_or_options(make_ogb_folder, tmp_path):
    folder = make_ogb_folder()
    root = tmp_path / "cache"
    key = preprocess(str(folder), cache_root=root).key
    moved = tmp_path / "elsewhere" / folder.name
    shutil.copytree(folder, moved)
    os.utime(moved / "raw" / "edge.csv.gz", (1, 1))
    assert preprocess(str(moved), cache_root=root).key == key
    assert preprocess(str(moved), PreprocessOptions(undirected=True), cache_root=root).key != key
    other = make_ogb_folder(labels=np.ones(200, dtype=int))
    dest = tmp_path / "third" / folder.name
    shutil.copytree(other, dest)
    assert preprocess(str(dest), cache_root=root).key != key


def test_an_edited_meta_json_is_a_new_entry(make_ogb_folder, tmp_path):
    """The key covered raw/ and split/ only: a changed metric or task count was served the old entry."""
    folder, root = make_ogb_folder(), tmp_path / "cache"
    first = preprocess(str(folder), cache_root=root)
    meta = json.loads((folder / "meta.json").read_text())
    (folder / "meta.json").write_text(json.dumps({**meta, "eval metric": "rocauc"}))
    second = preprocess(str(folder), cache_root=root)
    assert second.key != first.key and second.manifest["meta"]["eval_metric"] == "rocauc"


def test_feature_normalisation_is_part_of_the_key(make_ogb_folder, tmp_path):
    folder = make_ogb_folder()
    root = tmp_path / "cache"
    keys = {how: preprocess(str(folder), PreprocessOptions(normalize_features=how), cache_root=root).key
            for how in ("none", "row", "column")}
    assert len(set(keys.values())) == 3
    assert preprocess(str(folder), cache_root=root).key == keys["none"]
    assert preprocess(str(folder), PreprocessOptions(normalize_features=True), cache_root=root).key == keys["column"]


#: Keys of fixed inputs computed by the code before ``normalize_features`` took "row": entries built
#: with the default options (or with ``normalize_features: true``) must keep them, or every cache
#: entry on users' disks would be rebuilt.
PINNED_KEYS = [
    ({}, "c4dae42d4fdebda50ad3"),
    ({"undirected": True}, "aadf4b3103e1f011cf8b"),
    ({"normalize_features": True}, "eecedfb0e569cc410b15"),
    ({"normalize_features": "column"}, "eecedfb0e569cc410b15"),
    ({"normalize_features": "none"}, "c4dae42d4fdebda50ad3"),
    ({"undirected": True, "normalize_features": True, "self_loops": "remove", "reorder": "rcm"}, "71356b07e0d3f34e0459"),
]


@pytest.mark.parametrize("options,key", PINNED_KEYS)
def test_keys_of_existing_entries_are_unchanged(options, key):
    inputs = {"dataset": "d", "source": "ogb-dir", "source_version": "v", "raw": {"raw/edge.csv.gz": "0" * 64},
              "schema_version": 1, "options": PreprocessOptions(**options).key_fields()}
    assert cache_key(inputs) == key


def test_bad_folder_publishes_nothing(make_ogb_folder, tmp_path):
    folder = make_ogb_folder(edge_index=np.array([[0, 500], [1, 2]]))
    root = tmp_path / "cache"
    with pytest.raises(DatasetError, match="edge.csv.gz"):
        preprocess(str(folder), cache_root=root)
    assert cache.entries(root) == [] and cache.stale_temps(root) == []


def test_force_rebuilds(make_ogb_folder, tmp_path):
    folder = make_ogb_folder()
    root = tmp_path / "cache"
    first = preprocess(str(folder), cache_root=root)
    created = first.manifest["created"]
    rebuilt = preprocess(str(folder), cache_root=root, force=True)
    assert rebuilt.path == first.path and cache.verify(rebuilt) == []
    assert created  # manifest kept its fields
    out_of_core = preprocess(str(folder), PreprocessOptions(memory_budget_mb=256), cache_root=root, force=True)
    assert out_of_core.path == first.path and cache.verify(out_of_core) == []
    assert out_of_core.manifest["stats"]["out_of_core"]["budget_mb"] == 256  # the old entry was replaced
    assert [p.name for p in first.path.parent.iterdir()] == [first.path.name]  # nothing left beside it


KILL_SCRIPT = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from pipeline import preprocess
    from pipeline.progress import setup_logging
    setup_logging()
    preprocess(sys.argv[1], cache_root=Path(sys.argv[2]))
    """
)


def test_sigkill_during_preprocess_leaves_no_valid_entry(make_ogb_folder, tmp_path):
    rng = np.random.default_rng(0)
    n = 400_000
    folder = make_ogb_folder(
        binary=True, num_nodes=n, edge_index=rng.integers(0, n, (2, 2_000_000)),
        labels=rng.integers(0, 4, n), node_feat=rng.standard_normal((n, 64)).astype(np.float32),
        split={"train": np.arange(0, 1000), "valid": np.arange(1000, 2000), "test": np.arange(2000, 3000)},
    )
    root = tmp_path / "cache"
    proc = subprocess.Popen([sys.executable, "-c", KILL_SCRIPT, str(folder), str(root)],
                            stderr=subprocess.PIPE, text=True)
    for line in proc.stderr:
        if "writing array " in line:  # the features, 102 MB (smaller arrays are written without a line)
            proc.send_signal(signal.SIGKILL)
            break
    proc.wait()
    assert proc.returncode == -signal.SIGKILL
    assert [e for e in cache.entries(root)] == []
    stale = cache.stale_temps(root)
    assert stale, "the killed run's temp folder should be recognisable as stale"
    assert all(f".tmp-{proc.pid}@" in p.name for p in stale)  # named after its owner
    entry = preprocess(str(folder), cache_root=root)
    assert cache.verify(entry) == []
    assert cache.stale_temps(root) == [] and not any(p.exists() for p in stale)  # the next run removed it
    assert entry.open().num_nodes == n


def test_memory_budget_is_no_part_of_the_key_and_is_validated(make_ogb_folder, tmp_path):
    folder = make_ogb_folder()
    root = tmp_path / "cache"
    key = preprocess(str(folder), cache_root=root).key
    budgeted = PreprocessOptions(memory_budget_mb=512)
    assert budgeted.key_fields() == PreprocessOptions().key_fields()
    assert preprocess(str(folder), budgeted, cache_root=root).key == key  # a cache hit
    assert PreprocessOptions.from_dict({"memory_budget_mb": 64}, "reg").memory_budget_mb == 64
    for bad in (0, -5, 1.5, True, "2048"):
        with pytest.raises(DatasetError, match=r"^reg.memory_budget_mb: expected a whole number of MiB >= 1"):
            PreprocessOptions.from_dict({"memory_budget_mb": bad}, "reg")


def test_cli_memory_budget_flag(make_ogb_folder, capsys):
    from gnnkit.cli import main

    folder = make_ogb_folder()
    assert main(["preprocess", str(folder), "--memory-budget-mb", "256", "--force"]) == 0
    path = Path(capsys.readouterr().out.splitlines()[-1])
    manifest = cache.load_entry(path).manifest
    assert manifest["stats"]["out_of_core"]["budget_mb"] == 256
    assert main(["preprocess", str(folder), "--memory-budget-mb", "0"]) == 2
    assert "preprocess.memory_budget_mb: expected a whole number" in capsys.readouterr().err


def test_notes_backups_and_hidden_files_beside_the_raw_files_keep_the_key(make_ogb_folder, tmp_path):
    """A notes.txt (or an editor's backup) in raw/ changed the key: the entry was built again."""
    folder = make_ogb_folder()
    root = tmp_path / "cache"
    key = preprocess(str(folder), cache_root=root).key
    for junk in ("notes.txt", "edge.csv.gz.bak", "edge.csv.gz~", ".DS_Store", "README", ".ipynb_checkpoints/x.csv.gz"):
        (folder / "raw" / junk).parent.mkdir(exist_ok=True)
        (folder / "raw" / junk).write_text("mine")
    assert preprocess(str(folder), cache_root=root).key == key
    (folder / "raw" / "extra.csv.gz").write_bytes(b"")  # what a reader might read still counts
    assert preprocess(str(folder), cache_root=root).key != key
