"""bench/checkpoint_io.py: each model's checkpoint is Lightning-shaped and loads, and every way of
saving runs its epochs and leaves the last epoch's checkpoint."""

import torch


def test_checkpoints_load_and_every_way_saves_the_last_epoch(bench, tmp_path):
    checkpoint_io = bench("checkpoint_io")
    for label, arguments in checkpoint_io.MODELS.items():
        checkpoint, model = checkpoint_io.checkpoint_of(arguments)
        assert checkpoint["optimizer_states"][0]["state"], label  # Adam's moments are there
        for way in ("training thread", "background"):
            ms = checkpoint_io.epoch_ms(way, checkpoint, model, epochs=3, wait_ms=0.0, folder=tmp_path)
            saved = torch.load(tmp_path / "last.ckpt", weights_only=True)
            assert ms > 0 and saved["epoch"] == 2
            assert torch.equal(saved["state_dict"]["layers.0.bias" if "gcn" in label else "stream.input.bias"],
                               model.state_dict()["layers.0.bias" if "gcn" in label else "stream.input.bias"])
