"""report.json and curves.png: written by global rank 0 only, since all ranks share the run folder."""

import logging
import warnings
from types import SimpleNamespace

import pytest

from gnnkit.report import EpochTimer, plot_curves, write_report


def _timer(times, train_times, batches):
    timer = EpochTimer()
    timer.times, timer.train_times, timer.train_batches = times, train_times, batches
    return timer


def _parts(rank_zero: bool):
    model = SimpleNamespace(evaluator=SimpleNamespace(eval_metric="acc"), hparams=SimpleNamespace(model="sage"),
                            num_params=10)
    data = SimpleNamespace(describe=lambda: {"name": "synthetic-tiny"})
    trainer = SimpleNamespace(checkpoint_callback=None, current_epoch=2, strategy=None, is_global_zero=rank_zero)
    return trainer, model, data, _timer([1.0, 2.0], [0.5, 1.5], [10, 10])


@pytest.mark.parametrize("rank_zero", [True, False])
def test_only_rank_zero_writes(tmp_path, rank_zero):
    (tmp_path / "metrics.csv").write_text("epoch,train_loss,val_loss\n0,1.0,1.1\n1,0.5,0.7\n")
    trainer, model, data, timer = _parts(rank_zero)
    report = write_report(tmp_path, trainer=trainer, model=model, datamodule=data, test=0.5, timer=timer)
    assert report["test"] == 0.5 and report["epoch_time_s"] == 1.5
    assert report["train_epoch_time_s"] == 1.0 and report["train_batches_per_s"] == 10.0
    assert "peak_gpu_mb" not in report  # trained on the CPU
    assert (tmp_path / "report.json").exists() == rank_zero
    assert (tmp_path / "curves.png").exists() == rank_zero


def test_a_panel_without_figures_is_drawn_without_a_legend_warning(tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # matplotlib's "No artists with labels found" on the empty metric panel
        plot_curves([{"epoch": 0, "train_loss": 1.0}, {"epoch": 1, "train_loss": 0.5}], "acc", tmp_path / "c.png")
    assert (tmp_path / "c.png").read_bytes()[:4] == b"\x89PNG"


def test_epoch_timer_times_training_to_the_last_batch_without_validation(monkeypatch):
    """Training time runs from the epoch's start to its last batch's end, less validation before it
    (the module then scores the epoch's training predictions, and validation follows); an epoch cut
    short (no last batch) trains until its end, less validation."""
    # epoch 0: starts 0, validates 1-3 mid-epoch, last batch ends 3.5, validates 3.6-3.8, ends 4;
    # epoch 1: 10-15, cut short
    clock = iter([0.0, 1.0, 3.0, 3.5, 3.6, 3.8, 4.0, 10.0, 15.0])
    monkeypatch.setattr("gnnkit.device_clock.time.perf_counter", lambda: next(clock))
    timer, trainer = EpochTimer(), SimpleNamespace(current_epoch=0, is_last_batch=False, max_epochs=2)
    timer.on_train_epoch_start(trainer, None)
    for _ in range(3):
        timer.on_train_batch_end(trainer, None)
    timer.on_validation_start(trainer, None)
    timer.on_validation_end(trainer, None)
    trainer.is_last_batch = True
    timer.on_train_batch_end(trainer, None)
    timer.on_validation_start(trainer, None)
    timer.on_validation_end(trainer, None)
    timer.on_train_epoch_end(trainer, None)
    trainer.is_last_batch = False
    timer.on_train_epoch_start(trainer, None)
    timer.on_train_batch_end(trainer, None)
    timer.on_train_epoch_end(trainer, None)
    assert timer.times == [4.0, 5.0] and timer.train_times == [1.5, 5.0] and timer.train_batches == [4, 1]
    assert timer.summary() == {"epoch_time_s": 4.5, "train_epoch_time_s": 3.25, "train_time_s": 6.5,
                               "train_batches_per_s": 0.769, "train_epoch_times_s": [1.5, 5.0]}


def test_epoch_timer_leaves_out_a_native_build(monkeypatch):
    """The first run's 35 s kernel build landed in epoch 1: train_time_s 35.5 for 0.8 s of training."""
    clock = iter([0.0, 40.0, 41.0])
    built = iter([0.0, 35.0, 35.0])
    monkeypatch.setattr("gnnkit.device_clock.time.perf_counter", lambda: next(clock))
    monkeypatch.setattr("gnnkit.native.loader.build_seconds", lambda: next(built))
    timer, trainer = EpochTimer(), SimpleNamespace(current_epoch=0, is_last_batch=True)
    timer.on_train_epoch_start(trainer, None)
    timer.on_train_batch_end(trainer, None)  # the batch that built the kernels ends at 40
    timer.on_train_epoch_end(trainer, None)
    assert timer.times == [6.0] and timer.train_times == [5.0]


def test_epoch_timer_waits_for_the_gpu_at_each_boundary(monkeypatch):
    """On a GPU an epoch ends when its kernels have run, not when they were queued: every clock
    reading of the timer synchronises the module's device first (and none on the CPU)."""
    import torch

    synced = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: synced.append(device))
    trainer = SimpleNamespace(current_epoch=0)
    for device, expected in ((torch.device("cuda", 0), 4), (torch.device("cpu"), 0)):
        synced.clear()
        timer, module = EpochTimer(), SimpleNamespace(device=device)
        timer.on_train_epoch_start(trainer, module)
        timer.on_validation_start(trainer, module)
        timer.on_validation_end(trainer, module)
        timer.on_train_epoch_end(trainer, module)
        assert synced == [device] * expected


def test_the_last_epoch_line_says_why_training_stopped_before_max_epochs():
    """max_steps, max_time and EarlyStopping end a fit early; Lightning told only max_steps, in a line
    printed before gnnkit's last epoch line."""
    import lightning.pytorch as pl
    from lightning.pytorch.callbacks import EarlyStopping

    from gnnkit.report import stop_reason

    trainer = pl.Trainer(max_epochs=9, max_steps=5, logger=False, enable_progress_bar=False)
    assert stop_reason(trainer) is None  # no step yet
    trainer.fit_loop.epoch_loop.manual_optimization.optim_step_progress.total.completed = 5
    trainer.fit_loop.epoch_loop.automatic_optimization.optim_progress.optimizer.step.total.completed = 5
    assert stop_reason(trainer) == "max_steps=5 reached"
    stopper = EarlyStopping(monitor="val_metric", mode="max", patience=2)
    stopper.stopped_epoch, stopper.wait_count = 4, 2
    trainer = pl.Trainer(max_epochs=9, callbacks=[stopper], logger=False, enable_progress_bar=False)
    assert stop_reason(trainer) == "early, val_metric did not improve for 2 checks (patience 2)"
    timer = EpochTimer(log_lines=True)
    timer.times = [0.5]
    trainer.callback_metrics["train_loss"] = 0.25
    seen: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: seen.append(record.getMessage())  # type: ignore[method-assign]
    log = logging.getLogger("gnnkit")  # its own handler may be set, without propagation (setup_logging)
    level = log.level
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    try:
        timer._log_epoch(trainer, 5, force=True)
    finally:
        log.removeHandler(handler)
        log.setLevel(level)
    assert seen == [("epoch 5/9 train_loss=0.2500 (0.50s); stopped: early, val_metric did not improve for 2 "
                     "checks (patience 2)")]


def test_long_epochs_get_a_line_every_half_minute_between_the_five_percent_ones(monkeypatch, gnnkit_log):
    """sage_heterophilous on a modest graph: 5 s a step, one step an epoch, a line every 50 of its
    1000 epochs, so nothing for four minutes."""
    now = [0.0]
    monkeypatch.setattr("gnnkit.report.time.monotonic", lambda: now[0])
    gnnkit_log.set_level(logging.INFO, logger="gnnkit")
    timer = EpochTimer(log_lines=True)
    timer.times = [5.0]
    trainer = SimpleNamespace(max_epochs=1000, callback_metrics={"train_loss": 0.5})
    for epoch in range(1, 13):  # 5 s each
        now[0] += 5.0
        timer._log_epoch(trainer, epoch)
    lines = dict.fromkeys(r.getMessage() for r in gnnkit_log.records)  # caplog may see a record twice
    assert [line.split()[1] for line in lines] == ["6/1000", "12/1000"]


def test_with_a_progress_bar_the_stop_reason_has_a_line_of_its_own(monkeypatch):
    """On a terminal (a progress bar, no epoch lines) the reason is still told, once training ends."""
    from gnnkit import report

    lines: list[str] = []
    monkeypatch.setattr(report.log, "info", lambda message, *args: lines.append(message % args))
    monkeypatch.setattr(report, "stop_reason", lambda trainer: "max_steps=7 reached")
    monkeypatch.setattr(report, "peak_gpu", lambda module: {})
    trainer = SimpleNamespace(current_epoch=3, max_epochs=9)
    timer = EpochTimer(log_lines=False)
    timer.load_state_dict({"times": [0.5] * 3})
    timer.on_fit_end(trainer, None)  # a resume of a finished run: no epoch of its own
    assert lines == ["nothing to train: the checkpoint has 3 of 9 epochs (max_steps=7 reached)"]
    lines.clear()
    timer._epochs_here = 3  # as if it had trained them
    timer.on_fit_end(trainer, None)
    assert lines == ["training stopped at epoch 3/9: max_steps=7 reached"]
    lines.clear()
    timer = EpochTimer(log_lines=True)  # the last epoch line says it instead
    timer.times, timer._epochs_here = [0.5], 1
    trainer.callback_metrics = {}
    timer.on_train_end(trainer, None)
    timer.on_fit_end(trainer, None)
    assert lines == ["epoch 3/9  (0.50s); stopped: max_steps=7 reached"]


def test_an_undefined_score_is_null_in_the_report_with_a_warning(gnnkit_log):
    """A one-class test split gave rocauc NaN, written as JSON's non-standard NaN without a word."""
    from gnnkit.report import _score

    assert _score(0.12345678, "acc", "test") == 0.123457 and _score(None, "acc", "validation") is None
    assert _score(float("nan"), "rocauc", "test") is None
    assert "the test rocauc is undefined (nan): its split holds one class only" in gnnkit_log.text


def test_epoch_timer_state_carries_the_epochs_timed_over_a_resume():
    """A resumed run's report timed only the last process's epochs (0.40 s of 76.9 s)."""
    timer = EpochTimer()
    timer.times, timer.train_times, timer.train_batches = [2.0, 3.0], [1.5, 2.5], [4, 4]
    resumed = EpochTimer()
    resumed.load_state_dict(timer.state_dict())
    assert resumed.summary() == timer.summary() and resumed.summary()["train_time_s"] == 4.0


def test_a_resumed_run_logs_no_line_for_the_epoch_it_restored(monkeypatch):
    """Its first epoch start logged "epoch 3/5  (1.90s)": no metrics, the previous process's time."""
    from gnnkit import report

    lines: list[str] = []
    monkeypatch.setattr(report.log, "info", lambda message, *args: lines.append(message % args))
    timer = EpochTimer(log_lines=True)
    timer.load_state_dict({"times": [1.9] * 3, "train_times": [1.5] * 3, "train_batches": [4] * 3})
    timer.on_train_epoch_start(SimpleNamespace(current_epoch=3, max_epochs=5, callback_metrics={}), None)
    assert lines == []


def test_testing_an_earlier_checkpoint_keeps_every_epoch_timed(tmp_path):
    """``trainer.test(ckpt_path=best)`` restores callbacks too: the timer took the best epoch's lists,
    and a 20-epoch run whose best was epoch 9 reported 9 epochs (its train_time_s less than half)."""
    import lightning.pytorch as pl
    from lightning.pytorch.callbacks import ModelCheckpoint
    from lightning.pytorch.demos.boring_classes import BoringModel

    timer = EpochTimer()
    every = ModelCheckpoint(dirpath=tmp_path, save_top_k=-1, every_n_epochs=1, filename="{epoch}")
    trainer = pl.Trainer(max_epochs=3, limit_train_batches=2, limit_val_batches=1, limit_test_batches=1,
                         callbacks=[timer, every], logger=False, enable_progress_bar=False,
                         enable_model_summary=False, accelerator="cpu")
    trainer.fit(BoringModel())
    assert len(timer.times) == 3
    trainer.test(BoringModel(), ckpt_path=str(tmp_path / "epoch=0.ckpt"), verbose=False)
    assert len(timer.times) == len(timer.train_times) == 3  # not the 1 that epoch 0's checkpoint holds
    resumed = EpochTimer()  # a fit resumed from it still takes them
    trainer = pl.Trainer(max_epochs=2, limit_train_batches=2, limit_val_batches=1, callbacks=[resumed], logger=False,
                         enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                         accelerator="cpu", default_root_dir=tmp_path)
    trainer.fit(BoringModel(), ckpt_path=str(tmp_path / "epoch=0.ckpt"))
    assert len(resumed.times) == 2 and resumed.times[0] == timer.times[0]
