"""report.json and curves.png: written by global rank 0 only, since all ranks share the run folder."""

from types import SimpleNamespace

import pytest

from gnnkit.report import write_report


def _parts(rank_zero: bool):
    model = SimpleNamespace(evaluator=SimpleNamespace(eval_metric="acc"), hparams=SimpleNamespace(model="sage"),
                            num_params=10)
    data = SimpleNamespace(describe=lambda: {"name": "synthetic-tiny"})
    trainer = SimpleNamespace(checkpoint_callback=None, current_epoch=2, strategy=None, is_global_zero=rank_zero)
    return trainer, model, data, SimpleNamespace(times=[1.0, 2.0])


@pytest.mark.parametrize("rank_zero", [True, False])
def test_only_rank_zero_writes(tmp_path, rank_zero):
    (tmp_path / "metrics.csv").write_text("epoch,train_loss,val_loss\n0,1.0,1.1\n1,0.5,0.7\n")
    trainer, model, data, timer = _parts(rank_zero)
    report = write_report(tmp_path, trainer=trainer, model=model, datamodule=data, test=0.5, timer=timer)
    assert report["test"] == 0.5 and report["epoch_time_s"] == 1.5
    assert (tmp_path / "report.json").exists() == rank_zero
    assert (tmp_path / "curves.png").exists() == rank_zero
