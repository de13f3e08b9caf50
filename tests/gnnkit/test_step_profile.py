"""StepProfile: the phases of a window of training steps, the profiler's operators, the report key."""

from __future__ import annotations

import json
import time
from pathlib import Path

import lightning.pytorch as pl
import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from gnnkit.step_profile import PHASES, StepProfile

SAMPLED_RECIPE = Path(__file__).resolve().parents[2] / "recipes" / "sage_synthetic_products.yaml"


class _Tiny(pl.LightningModule):
    """A linear model; ``sync_every_step`` reads the loss on the host (one sync a step on a GPU)."""

    def __init__(self, sync_every_step: bool = False, slow_step: int | None = None, slow_range: str = "") -> None:
        super().__init__()
        self.layer = torch.nn.Linear(8, 2)
        self.sync_every_step = sync_every_step
        self.slow_step = slow_step
        self.slow_range = slow_range

    def training_step(self, batch, batch_idx):
        if batch_idx == self.slow_step:  # 0.3 s: its share of the mean (25 ms in 12 steps) outweighs the
            time.sleep(0.3)              # spread of a loaded machine's steps (CI once had a 20 ms median)
        if self.slow_range:
            with torch.profiler.record_function(self.slow_range):
                time.sleep(0.02)
        x, y = batch
        loss = torch.nn.functional.cross_entropy(self.layer(x), y)
        if self.sync_every_step:
            float(loss)
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def _fit(tmp_path, callback: StepProfile, batches: int = 12, epochs: int = 2, accelerator: str = "cpu",
         **model_args) -> pl.Trainer:
    g = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(batches * 4, 8, generator=g), torch.randint(0, 2, (batches * 4,), generator=g))
    trainer = pl.Trainer(max_epochs=epochs, accelerator=accelerator, devices=1, callbacks=[callback],
                         default_root_dir=tmp_path, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(_Tiny(**model_args), DataLoader(data, batch_size=4))
    return trainer


def test_the_window_times_each_phase_of_the_first_epoch_then_profiles(tmp_path):
    profile = StepProfile(steps=5, skip=2, profiled_steps=3)
    _fit(tmp_path, profile)
    summary = profile.summary()
    assert summary["steps"] == 5 and len(profile.rows) == 5  # the second epoch adds none
    assert set(summary["host_ms"]) == {*PHASES, "step"}
    assert all(r[p] >= 0 for r in profile.rows for p in PHASES)
    assert summary["host_ms"]["step"] >= max(summary["host_ms"][p] for p in PHASES)
    assert "gpu_ms" not in summary and "syncs" not in summary  # CPU: host time only
    assert summary["profiled_steps"] == 3 and summary["operators"]
    assert all({"name", "calls", "self_ms"} <= set(op) for op in summary["operators"])
    table = (tmp_path / "step_profile.txt").read_text()
    assert summary["operators"][0]["name"] in table
    assert json.loads(json.dumps(profile.report_info()))["step_profile"] == summary


def test_the_table_shows_a_long_operator_name_whole(tmp_path):
    """CI once ranked the data loader's 60-character range first; torch's table cut it at 55 characters."""
    name = "gnnkit.test.a_profiled_range_whose_name_is_longer_than_the_55_characters_torch_shows"
    profile = StepProfile(steps=2, skip=1, profiled_steps=2)
    _fit(tmp_path, profile, slow_range=name)
    assert profile.summary()["operators"][0]["name"] == name
    assert name in (tmp_path / "step_profile.txt").read_text()


def test_the_whole_epoch_says_where_time_went_outside_the_median_step(tmp_path):
    """On the H200 a products epoch took 1.59 s where 192 median steps of 7.17 ms make 1.38 s; the
    phase window alone could not say whether the rest was the first step, a few slow ones or all."""
    profile = StepProfile(steps=3, skip=1, profiled_steps=0)
    _fit(tmp_path, profile, batches=12, epochs=2, slow_step=7)
    epoch = profile.summary()["whole_epoch"]
    assert epoch["steps"] == 12 and epoch["first_ms"] > 0 and epoch["window"] == [1, 4]  # epoch 0 only
    assert epoch["slowest"][0][0] == 7 and epoch["slowest"][0][1] >= 50 > epoch["median_ms"]
    assert epoch["mean_ms"] > epoch["median_ms"]


def test_the_whole_epoch_leaves_out_the_profile_s_own_work_and_says_which_steps_it_measured(tmp_path,
                                                                                          monkeypatch):
    """The profiler's teardown (its table, step_profile.txt) was charged to the step after the window,
    which then looked the slowest; an epoch shorter than the window had no whole_epoch at all."""
    stop = StepProfile._stop_profiler

    def slow_stop(self, trainer):
        time.sleep(0.05)
        stop(self, trainer)

    monkeypatch.setattr(StepProfile, "_stop_profiler", slow_stop)
    profile = StepProfile(steps=3, skip=2, profiled_steps=3)
    _fit(tmp_path, profile, batches=20, epochs=1)
    epoch = profile.summary()["whole_epoch"]
    assert epoch["window"] == [2, 8] and epoch["slowest"][0][1] < 50  # no step holds the 50 ms teardown
    short = StepProfile(steps=30, skip=10, profiled_steps=5)
    _fit(tmp_path, short, batches=6, epochs=1)
    assert short.summary()["steps"] == 0 and short.summary()["whole_epoch"]["steps"] == 6
    assert short.summary()["whole_epoch"]["window"] == [6, 6]


def test_an_epoch_shorter_than_the_window_keeps_the_steps_it_had(tmp_path, gnnkit_log):
    profile = StepProfile(steps=20, skip=3, profiled_steps=5)
    _fit(tmp_path, profile, batches=8, epochs=1)
    assert profile.summary()["steps"] == 5 and "operators" not in profile.summary()
    assert profile._profiler is None and profile._catcher is None
    assert ("step profile: epoch 0 had 8 steps, fewer than the 28 asked for (skip 3, steps 20, profiled_steps 5): "
            "5 timed, no step_profile.txt") in gnnkit_log.text  # the missing file was silent


def test_a_window_past_the_first_epoch_times_nothing(tmp_path):
    profile = StepProfile(steps=4, skip=20, profiled_steps=0)
    _fit(tmp_path, profile, batches=6)
    summary = profile.summary()
    assert summary["steps"] == 0 and not (tmp_path / "step_profile.txt").exists()
    assert summary["whole_epoch"]["steps"] == 6 and summary["whole_epoch"]["window"] == [6, 6]  # still clocked


def test_a_later_epoch_is_measured_when_asked_for(tmp_path):
    """A reuse schedule records in its first epoch and replays in the next: ``epoch`` picks which."""
    profile = StepProfile(steps=4, skip=2, profiled_steps=0, epoch=1)
    _fit(tmp_path, profile, batches=8, epochs=3)
    summary = profile.summary()
    assert summary["epoch"] == 1 and summary["steps"] == 4 and len(profile.rows) == 4


def test_a_profiler_that_cannot_start_leaves_the_phases_and_the_run(tmp_path, monkeypatch):
    class Broken:
        def __init__(self, **kwargs):
            pass

        def __enter__(self):
            raise RuntimeError("CUPTI_ERROR_NOT_INITIALIZED")

    monkeypatch.setattr(torch.profiler, "profile", Broken)
    profile = StepProfile(steps=3, skip=1, profiled_steps=2)
    _fit(tmp_path, profile)
    assert profile.summary()["steps"] == 3 and "operators" not in profile.summary()


@pytest.mark.parametrize("name, value", [("steps", 0), ("skip", 0), ("profiled_steps", -1), ("top", 0),
                                         ("epoch", -1)])
def test_bad_settings_name_the_setting(name, value):
    with pytest.raises(ValueError, match=f"StepProfile.{name}: expected an integer >= "):
        StepProfile(**{name: value})


def test_the_run_report_carries_the_profile(tmp_path, monkeypatch):
    from gnnkit.run import run

    monkeypatch.chdir(tmp_path)
    report = run(str(SAMPLED_RECIPE), [
        "--data.dataset", "synthetic-tiny", "--trainer.max_epochs", "1", "--trainer.accelerator", "cpu",
        "--data.batch_size", "64", "--data.num_neighbors", "[5, 5]", "--data.num_workers", "0",
        "--trainer.callbacks+=gnnkit.step_profile.StepProfile", "--trainer.callbacks.init_args.steps", "4",
        "--trainer.callbacks.init_args.skip", "2", "--trainer.callbacks.init_args.profiled_steps", "2",
        "--run_dir", str(tmp_path / "run")])
    written = json.loads((tmp_path / "run" / "report.json").read_text())
    assert written["step_profile"] == report["step_profile"] and report["step_profile"]["steps"] == 4
    assert (tmp_path / "run" / "step_profile.txt").is_file()


def test_torch_s_notice_on_entering_sync_debug_mode_is_no_sync(monkeypatch):
    """Entering the mode warns once that it "does not yet detect all synchronizing operations": a
    count of "synchroniz" took that for a sync (the H200 tier's one failure, in a test that counted so)."""
    import warnings

    monkeypatch.setattr(torch.cuda, "set_sync_debug_mode", lambda mode: None)
    profile = StepProfile(steps=1, skip=1)
    profile._cuda = torch.device("cuda")  # as after on_train_start on a GPU
    profile._count_syncs(True)
    try:
        warnings.warn("Synchronization debug mode is a prototype feature and does not yet detect all "
                      "synchronizing operations (Triggered internally at Module.cpp:1003.)")
        warnings.warn("called a synchronizing CUDA operation (Triggered internally at CUDAFunctions.cpp:162.)")
    finally:
        profile._count_syncs(False)
    assert profile._syncs == 1


@pytest.mark.gpu
def test_on_a_gpu_each_phase_has_its_device_time_and_host_syncs(tmp_path):
    profile = StepProfile(steps=4, skip=2, profiled_steps=2)
    _fit(tmp_path, profile, accelerator="gpu", sync_every_step=True)
    summary = profile.summary()
    assert set(summary["gpu_ms"]) == set(summary["syncs"]) == {*PHASES, "step"} and summary["gpu_ms"]["step"] > 0
    assert summary["syncs"]["forward"] >= 1  # the float(loss) of every training step
    assert any(site.startswith("tests/gnnkit/test_step_profile.py:") and site.endswith(" training_step")
               for site in summary["sync_sites"]), summary["sync_sites"]
    assert torch.cuda.get_sync_debug_mode() == 0  # switched back after the window


def test_syncs_are_the_training_threads(monkeypatch):
    """torch's sync warnings from another thread (a prefetching sampler's, overlapping the step) are
    not counted, but a backward pass's are, on whichever thread autograd runs it (on a GPU its
    device thread); warning filters and the display are the caller's again once counting stops."""
    import threading
    import warnings

    monkeypatch.setattr(torch.cuda, "set_sync_debug_mode", lambda mode: None)
    profile = StepProfile()
    profile._cuda = torch.device("cuda", 0)  # only read as "on a GPU" by the counting
    shown = warnings.showwarning
    profile._count_syncs(True)
    warnings.warn("called a synchronizing CUDA operation")
    warnings.warn("called a synchronizing CUDA operation")
    warnings.warn("something else")
    other = threading.Thread(target=warnings.warn, args=("called a synchronizing CUDA operation",))
    other.start()
    other.join()

    class Syncing(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x.clone()

        @staticmethod
        def backward(ctx, grad):
            warnings.warn("called a synchronizing CUDA operation")
            return grad

    x = torch.ones(2, requires_grad=True)
    backward = threading.Thread(target=lambda: Syncing.apply(x).sum().backward())  # not the training thread
    backward.start()
    backward.join()
    profile._count_syncs(False)
    assert profile._syncs == 3 and warnings.showwarning is shown and x.grad is not None


def _asks_for_a_sync():
    import warnings

    warnings.warn("called a synchronizing CUDA operation")


def test_each_sync_is_traced_to_the_line_that_asked_for_it(monkeypatch):
    """The window's syncs are counted by where they were asked for: the innermost frame that is
    neither the warning's machinery nor torch's own Python, named relative to the repository."""
    monkeypatch.setattr(torch.cuda, "set_sync_debug_mode", lambda mode: None)
    profile = StepProfile()
    profile._cuda = torch.device("cuda", 0)
    profile._count_syncs(True)
    try:
        for _ in range(3):
            _asks_for_a_sync()
    finally:
        profile._count_syncs(False)
    line = _asks_for_a_sync.__code__.co_firstlineno + 3
    assert dict(profile._sync_sites) == {f"tests/gnnkit/test_step_profile.py:{line} _asks_for_a_sync": 3}


def test_a_sync_site_looks_past_torch_and_the_warning_machinery():
    import warnings

    from gnnkit.step_profile import _shown_path, sync_site

    assert _shown_path(torch.__file__) is None and _shown_path(warnings.__file__) is None
    assert _shown_path(torch.nn.functional.__file__) is None
    assert _shown_path(pl.__file__) == "lightning/pytorch/__init__.py"
    import torch_geometric.nn.conv.sage_conv as sage  # its folder's name starts with torch's: a site of its own

    assert _shown_path(sage.__file__) == "torch_geometric/nn/conv/sage_conv.py"
    assert sync_site(None) == "(no Python frame)"
