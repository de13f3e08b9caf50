"""A file's stamp tells a write, a replacement and a restored modification time apart from no change."""

import os
import shutil

from pipeline import checked_stamps
from pipeline.checked_stamps import changed, record, stamp


def _folder(tmp_path):
    tmp_path.mkdir(exist_ok=True)
    for name in ("a.bin", "b.bin"):
        (tmp_path / name).write_bytes(bytes(range(64)))
    return tmp_path, ["a.bin", "b.bin"]


def test_without_stamps_every_file_has_changed_and_after_recording_none(tmp_path):
    folder, files = _folder(tmp_path)
    assert changed(folder, files) == files
    assert record(folder, {name: stamp(folder / name) for name in files})
    assert changed(folder, files) == []


def test_a_write_that_keeps_the_size_and_the_modification_time_is_seen(tmp_path):
    folder, files = _folder(tmp_path)
    record(folder, {name: stamp(folder / name) for name in files})
    before = os.stat(folder / "a.bin")
    with open(folder / "a.bin", "r+b") as handle:
        handle.seek(10)
        handle.write(b"\xff")
    os.utime(folder / "a.bin", ns=(before.st_atime_ns, before.st_mtime_ns))  # the change time moves on
    assert changed(folder, files) == ["a.bin"]


def test_a_replaced_or_removed_file_is_seen(tmp_path):
    folder, files = _folder(tmp_path)
    record(folder, {name: stamp(folder / name) for name in files})
    shutil.copy2(folder / "b.bin", folder / "b.tmp")
    os.replace(folder / "b.tmp", folder / "b.bin")  # same bytes and times, another inode
    assert changed(folder, files) == ["b.bin"]
    (folder / "a.bin").unlink()
    assert changed(folder, files) == ["a.bin", "b.bin"]


def test_recording_some_files_keeps_the_others_stamps(tmp_path):
    folder, files = _folder(tmp_path)
    record(folder, {"a.bin": stamp(folder / "a.bin")})
    assert changed(folder, files) == ["b.bin"]
    record(folder, {"b.bin": stamp(folder / "b.bin")})
    assert changed(folder, files) == []


def test_unreadable_stamps_count_as_none_and_an_unwritable_folder_keeps_none(tmp_path, monkeypatch):
    folder, files = _folder(tmp_path)
    monkeypatch.setenv("GNNKIT_HOME", str(tmp_path / "home"))
    (folder / checked_stamps.STAMPS).write_text("[1, 2")
    assert changed(folder, files) == files
    (folder / checked_stamps.STAMPS).write_text("[1, 2]")
    assert changed(folder, files) == files

    def refuse(path, text):
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(checked_stamps, "atomic_write_text", refuse)
    assert not record(folder, {"a.bin": stamp(folder / "a.bin")})


def test_the_stamps_of_a_folder_gnnkit_cannot_write_to_are_kept_in_its_home(tmp_path, monkeypatch):
    folder, files = _folder(tmp_path / "shared")
    monkeypatch.setenv("GNNKIT_HOME", str(tmp_path / "home"))
    real = checked_stamps.atomic_write_text

    def read_only(path, text):
        if path.parent == folder:
            raise OSError(30, "Read-only file system", str(path))
        real(path, text)

    monkeypatch.setattr(checked_stamps, "atomic_write_text", read_only)
    assert record(folder, {name: stamp(folder / name) for name in files})
    assert not (folder / checked_stamps.STAMPS).exists() and len(list((tmp_path / "home" / "checked").iterdir())) == 1
    assert changed(folder, files) == []
    (folder / checked_stamps.STAMPS).write_text('{"a.bin": [1, 2, 3, 4]}')  # the folder's own, gone stale
    assert changed(folder, files) == []
