import threading

import pytest
import torch

from gnnkit import checkpoint_io
from gnnkit.checkpoint_io import AtomicCheckpointIO, host_copy, tensor_bytes


def _checkpoint(value: float) -> dict:
    return {"state_dict": {"w": torch.full((4, 4), value)}, "epoch": int(value), "nested": [torch.ones(2) * value]}


def test_background_save_writes_what_the_tensors_held_when_saved(tmp_path):
    """The copy is taken at the save: an in-place update right after it (the next optimizer step)
    does not reach the file."""
    io = AtomicCheckpointIO()
    checkpoint = _checkpoint(1.0)
    io.save_checkpoint(checkpoint, tmp_path / "last.ckpt")
    checkpoint["state_dict"]["w"].add_(100.0)
    loaded = io.load_checkpoint(tmp_path / "last.ckpt")  # waits for the write
    assert torch.equal(loaded["state_dict"]["w"], torch.full((4, 4), 1.0)) and loaded["epoch"] == 1
    io.teardown()


def test_a_queued_save_of_the_same_path_is_replaced_by_the_newer_one(tmp_path, monkeypatch):
    """While the writer is busy, saves of one path coalesce: the newest is written, the older never,
    and the training thread does not wait."""
    started, release = threading.Event(), threading.Event()
    written: list[tuple[str, int]] = []
    real_write = checkpoint_io._write

    def slow_write(path, checkpoint):
        if not started.is_set():
            started.set()
            release.wait(10)
        written.append((path.name, checkpoint["epoch"]))
        real_write(path, checkpoint)

    monkeypatch.setattr(checkpoint_io, "_write", slow_write)
    io = AtomicCheckpointIO()
    io.save_checkpoint(_checkpoint(1.0), tmp_path / "last.ckpt")
    assert started.wait(10)  # the writer holds epoch 1
    for epoch in (2.0, 3.0, 4.0):
        io.save_checkpoint(_checkpoint(epoch), tmp_path / "last.ckpt")
    io.save_checkpoint(_checkpoint(9.0), tmp_path / "best.ckpt")
    release.set()
    io.wait()
    assert written == [("last.ckpt", 1), ("last.ckpt", 4), ("best.ckpt", 9)]
    assert torch.load(tmp_path / "last.ckpt", weights_only=True)["epoch"] == 4
    io.teardown()


def test_a_failed_write_is_raised_in_the_training_thread(tmp_path):
    (tmp_path / "a-folder").mkdir()
    io = AtomicCheckpointIO()
    io.save_checkpoint(_checkpoint(1.0), tmp_path / "a-folder")  # the rename over a folder fails
    with pytest.raises(RuntimeError, match="writing a checkpoint failed"):
        io.wait()
    io.save_checkpoint(_checkpoint(2.0), tmp_path / "last.ckpt")  # the error was said once
    io.teardown()
    assert torch.load(tmp_path / "last.ckpt", weights_only=True)["epoch"] == 2


def test_large_checkpoints_are_written_in_the_callers_thread(tmp_path, monkeypatch):
    monkeypatch.setattr(checkpoint_io, "BACKGROUND_LIMIT_BYTES", 10)
    io = AtomicCheckpointIO()
    io.save_checkpoint(_checkpoint(3.0), tmp_path / "last.ckpt")
    assert io._executor is None and (tmp_path / "last.ckpt").is_file()
    assert torch.load(tmp_path / "last.ckpt", weights_only=True)["epoch"] == 3


def test_tensor_bytes_and_host_copy_cover_nested_tensors():
    checkpoint = _checkpoint(2.0)
    assert tensor_bytes(checkpoint) == 16 * 4 + 2 * 4
    copy = host_copy(checkpoint)
    assert copy["nested"][0].data_ptr() != checkpoint["nested"][0].data_ptr()
    assert torch.equal(copy["nested"][0], checkpoint["nested"][0]) and copy["epoch"] == 2


@pytest.mark.gpu
def test_a_gpu_checkpoint_is_copied_to_the_host_and_loads(tmp_path):
    io = AtomicCheckpointIO()
    weights = torch.arange(8.0, device="cuda")
    io.save_checkpoint({"state_dict": {"w": weights}}, tmp_path / "last.ckpt")
    weights.zero_()
    loaded = io.load_checkpoint(tmp_path / "last.ckpt")
    assert loaded["state_dict"]["w"].device.type == "cpu" and torch.equal(loaded["state_dict"]["w"], torch.arange(8.0))
    io.teardown()


def test_a_write_error_does_not_replace_the_exception_that_ends_the_run(tmp_path, caplog):
    """Lightning tears down while it handles SIGTERM, Ctrl-C or an error: that exception stays the
    one raised, and the write's error is a log line."""
    (tmp_path / "a-folder").mkdir()
    io = AtomicCheckpointIO()
    io.save_checkpoint(_checkpoint(1.0), tmp_path / "a-folder")
    with pytest.raises(KeyboardInterrupt):
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt:
            io.teardown()
            raise
    assert "writing a checkpoint failed" in caplog.text


def test_saves_after_the_end_of_a_fit_are_written_at_once(tmp_path):
    io = AtomicCheckpointIO()
    io.teardown()
    io.save_checkpoint(_checkpoint(5.0), tmp_path / "after.ckpt")
    assert io._executor is None and torch.load(tmp_path / "after.ckpt", weights_only=True)["epoch"] == 5


def test_a_state_dict_keeps_its_module_versions():
    state = torch.nn.BatchNorm1d(3).state_dict()
    assert host_copy({"state_dict": state})["state_dict"]._metadata == state._metadata
