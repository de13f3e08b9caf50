"""The strategy's options are checked alike for every mode; a mode that cannot reduce sparse
gradients says so before training."""

from __future__ import annotations

import warnings

import lightning.pytorch as pl
import pytest
import torch
from lightning.pytorch.demos.boring_classes import BoringModel
from torch import nn

from gnnkit.comm import GnnkitStrategy
from gnnkit.comm.mode_options import sparse_gradient_layers


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"comm": "topk_a2a", "density": "0.05"}, r"density: expected a fraction in \(0, 1\], got '0.05'"),
    ({"comm": "topk_a2a", "density": True}, r"density: expected a fraction in \(0, 1\], got True"),
    ({"comm": "signsgd", "sign_momentum": None}, r"sign_momentum: expected a number in \[0, 1\), got None"),
    ({"comm": "signsgd", "sign_error_feedback": "false"}, "sign_error_feedback: expected true or false, got 'false'"),
    ({"fixed_buckets": "no"}, "fixed_buckets: expected true, false or null, got 'no'"),
    ({"static_graph": 1}, "static_graph: expected true or false, got 1"),
    ({"bucket_mb": 1e15}, r"bucket_mb: expected 'auto' or a size in MiB in \(0, 1048576\], got 1000000000000000.0"),
    ({"comm": "allreduce", "density": None}, "density: expected a fraction"),  # checked whatever the mode
])
def test_bad_values_are_one_line_errors_for_every_mode(kwargs, message):
    """Text gave a raw comparison TypeError, 'false' turned error feedback on, 1e15 MiB failed in DDP."""
    with pytest.raises(ValueError, match=message) as error:
        GnnkitStrategy(**kwargs)
    assert "\n" not in str(error.value)


def test_an_option_of_another_mode_is_named_in_a_warning():
    with pytest.warns(UserWarning, match=r"GnnkitStrategy\(comm='signsgd'\) does not use density=0.05 \(read by "
                                         r"topk_a2a, topk_allgather\); powersgd_rank=4 \(read by powersgd\)"):
        GnnkitStrategy(comm="signsgd", density=0.05, powersgd_rank=4)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        GnnkitStrategy(comm="topk_a2a", density=0.05, gather="dense", warmup_steps=3, bucket_mb=4)


def test_sparse_gradient_layers_are_found_by_name():
    model = nn.Sequential(nn.Embedding(5, 2, sparse=True), nn.Linear(2, 2), nn.EmbeddingBag(4, 2, sparse=True))
    assert sparse_gradient_layers(model) == ["0", "2"]
    assert sparse_gradient_layers(nn.Embedding(5, 2)) == []


class SparseBoring(BoringModel):
    def __init__(self) -> None:
        super().__init__()
        self.embedding = nn.Embedding(10, 32, sparse=True)

    def training_step(self, batch, batch_idx):
        return super().training_step(batch + self.embedding(torch.zeros(1, dtype=torch.long)), batch_idx)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def test_a_lossy_mode_refuses_sparse_gradients_before_training(tmp_path):
    """They crashed in backward with unrelated errors (as_strided on SparseCPU, slice bounds)."""
    trainer = pl.Trainer(accelerator="cpu", devices=1, strategy=GnnkitStrategy(comm="topk_a2a", density=0.5),
                         max_steps=1, logger=False, enable_progress_bar=False, enable_checkpointing=False,
                         enable_model_summary=False, default_root_dir=str(tmp_path))
    try:
        with pytest.raises(ValueError, match=r"GnnkitStrategy\(comm='topk_a2a'\): layers \['embedding'\] give "
                                             r"sparse gradients, which only comm='allreduce' reduces"):
            trainer.fit(SparseBoring())
    finally:  # the one-rank group the strategy started would make later tests in this worker skip
        if torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()
