"""Known third-party noise is hidden inside ``quiet()`` only, and every filter is restored after."""

from __future__ import annotations

import logging
import warnings

import pytest
from lightning.pytorch.utilities.rank_zero import rank_zero_info
from lightning.pytorch.utilities.warnings import PossibleUserWarning

from gnnkit.quiet import LIGHTNING_LOGGERS, quiet, quietly, resuming, unvalidated

LEAF = "`isinstance(treespec, LeafSpec)` is deprecated, use `isinstance(treespec, TreeSpec) and treespec.is_leaf()` instead."
INTERVAL = ("The number of training batches (5) is smaller than the logging interval Trainer(log_every_n_steps=50). "
            "Set a lower value for log_every_n_steps if you want to see logs for the training epoch.")
TIP = ("💡 Tip: For seamless cloud logging and experiment tracking, try installing "
       "[litlogger](https://pypi.org/project/litlogger/) to enable LitLogger")


def test_known_warnings_are_hidden_inside_only_and_the_filters_restored():
    before = list(warnings.filters)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with quiet():
            warnings.warn(LEAF, FutureWarning)
            warnings.warn(LEAF, DeprecationWarning)
            warnings.warn("a user's own warning", FutureWarning)
            warnings.warn(INTERVAL, PossibleUserWarning)
        warnings.warn(LEAF, FutureWarning)
    assert [(str(w.message), w.category) for w in caught] == [
        ("a user's own warning", FutureWarning), (LEAF, FutureWarning)]
    assert warnings.filters == before


def test_lightnings_hardware_lines_tip_and_max_epochs_or_steps_stop_are_dropped_inside_only():
    seen: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: seen.append(record.getMessage())  # type: ignore[method-assign]
    log = logging.getLogger(LIGHTNING_LOGGERS[0])
    log.addHandler(handler)
    try:
        with quiet():
            rank_zero_info("GPU available: False, used: False")
            rank_zero_info("TPU available: False, using: 0 TPU cores")
            rank_zero_info(TIP)
            rank_zero_info("`Trainer.fit` stopped: `max_epochs=12` reached.")  # gnnkit's "epoch 12/12" says it
            rank_zero_info("`Trainer.fit` stopped: `max_steps=40` reached.")  # "...; stopped: max_steps=40 reached"
            rank_zero_info("`Trainer.fit` stopped: No training batches.")
        assert all(not logging.getLogger(name).filters for name in LIGHTNING_LOGGERS)
        rank_zero_info("GPU available: False, used: False")
    finally:
        log.removeHandler(handler)
    assert seen == ["`Trainer.fit` stopped: No training batches.", "GPU available: False, used: False"]


def test_seed_checkpoint_restore_and_process_group_lines_are_dropped_inside_only(monkeypatch):
    """Lightning's lines without gnnkit's prefix in every run: the seed, the checkpoint restored for
    a resume or a test, on several ranks each rank's process-group banner, and the notices of a
    SIGTERM or Ctrl-C (gnnkit's exit line says it)."""
    from lightning.fabric.utilities.seed import seed_everything

    from tests.conftest import RANK_VARIABLES

    for name in RANK_VARIABLES:  # a rank variable would prefix Lightning's seed line with "[rank: 0] "
        monkeypatch.delenv(name, raising=False)

    seen: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: seen.append(record.getMessage())  # type: ignore[method-assign]
    loggers = [logging.getLogger(name) for name in LIGHTNING_LOGGERS]
    for log in loggers:
        log.addHandler(handler)
        log.setLevel(logging.INFO)
    try:
        with quiet():
            seed_everything(3)
            rank_zero_info("Restoring states from the checkpoint path at /r/checkpoints/best.ckpt")
            rank_zero_info("Loaded model weights from the checkpoint at /r/checkpoints/best.ckpt")
            rank_zero_info("Restored all states from the checkpoint at /r/checkpoints/last.ckpt")
            logging.getLogger(LIGHTNING_LOGGERS[3]).info("Initializing distributed: GLOBAL_RANK: 1, MEMBER: 2/2")
            rank_zero_info(f"{'-' * 100}\ndistributed_backend=gloo\nAll distributed processes registered.")
            logging.getLogger(LIGHTNING_LOGGERS[4]).info("[rank: 0] Received SIGTERM: 15")
            rank_zero_info("\nDetected KeyboardInterrupt, attempting graceful shutdown ...")
            rank_zero_info("Restoring states is a user's line")
        seed_everything(3)
    finally:
        for log in loggers:
            log.removeHandler(handler)
            log.setLevel(logging.NOTSET)
    assert seen == ["Restoring states is a user's line", "Seed set to 3"]


def test_the_decorator_restores_filters_when_the_function_raises():
    before = list(warnings.filters)

    @quietly
    def fails() -> None:
        assert warnings.filters != before
        raise ValueError("boom")

    try:
        fails()
    except ValueError:
        pass
    assert warnings.filters == before and fails.__name__ == "fails"
    assert all(not logging.getLogger(name).filters for name in LIGHTNING_LOGGERS)


NOT_EMPTY = "Checkpoint directory /runs/r/checkpoints exists and is not empty."
NO_VAL_METRIC = ("`ModelCheckpoint(monitor='val_metric')` could not find the monitored key in the returned "
                 "metrics: ['train_loss', 'epoch', 'step']. HINT: Did you call `log('val_metric', value)` in the "
                 "`LightningModule`?")


@pytest.mark.parametrize(("block", "hidden", "kept"), [
    (resuming, NOT_EMPTY, "Checkpoint directory /x is odd"),  # a resumed run's own checkpoint folder
    (unvalidated, NO_VAL_METRIC, "`ModelCheckpoint(monitor='val_loss')` could not find the monitored key"),
], ids=["resuming", "unvalidated"])
def test_a_runs_expected_lightning_warning_is_hidden_inside_only(block, hidden, kept):
    before = list(warnings.filters)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with block():
            warnings.warn(hidden, UserWarning)
            warnings.warn(kept, UserWarning)
        warnings.warn(hidden, UserWarning)
    assert [str(w.message) for w in caught] == [kept, hidden]
    assert warnings.filters == before


def test_filters_that_code_in_the_block_installs_for_the_process_stay():
    """ogb's import, inside a run, turns off the warnings of its background version check, which
    fails after the run on a machine without internet; only gnnkit's own filters are taken away."""

    class VersionCheckWarning(Warning):
        pass

    with warnings.catch_warnings():  # the test's own changes end with it
        before = list(warnings.filters)
        with quiet(), resuming():
            warnings.filterwarnings("ignore", category=VersionCheckWarning)  # as a library's import does
            warnings.filterwarnings("error", message="odd", module="some_lib", lineno=3)
        assert warnings.filters[2:] == before
        assert warnings.filters[0][:3:2] == ("error", Warning) and warnings.filters[0][1].pattern == "odd"
        assert warnings.filters[0][3].pattern == "some_lib" and warnings.filters[0][4] == 3
        assert warnings.filters[1] == ("ignore", None, VersionCheckWarning, None, 0)
        with warnings.catch_warnings(record=True) as caught:
            warnings.warn("Failed to check for latest version of package.", VersionCheckWarning)
        assert caught == []


def _stderr_of(code: str) -> str:
    """Standard error of ``code`` run in a new Python (descriptor 2 is the process's own there)."""
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stderr


NOTICE_CODE = """
import os, sys
from gnnkit.quiet import UNUSED_PARAMETERS_NOTICE as N, native_stderr_without
line = f"[rank0]:[W1128 reducer.cpp:1529] Warning: {N}, but did not find any\\n".encode()
with native_stderr_without(N):
    os.write(2, b"native before\\n")
    os.write(2, line)
    print("python after", file=sys.stderr)
os.write(2, line)
try:
    with native_stderr_without(N):
        os.write(2, b"kept on an error\\n")
        raise ValueError
except ValueError:
    pass
"""

DDP_CODE = """
import os, torch, torch.distributed as dist
from gnnkit.quiet import UNUSED_PARAMETERS_NOTICE as N, native_stderr_without
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=os.environ["PORT"])
dist.init_process_group("gloo", rank=0, world_size=1)
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 2), find_unused_parameters=True)
with native_stderr_without(N if os.environ["HUSH"] == "1" else "nothing"):
    model(torch.randn(3, 4)).sum().backward()
dist.destroy_process_group()
"""


def test_a_native_stderr_line_is_dropped_inside_only_and_the_rest_kept_in_order():
    """Lines written to descriptor 2 in the block, by native code or Python, come out after it, in
    order, without the dropped one (kept outside the block, and written on an error too)."""
    from gnnkit.quiet import UNUSED_PARAMETERS_NOTICE

    notice = f"[rank0]:[W1128 reducer.cpp:1529] Warning: {UNUSED_PARAMETERS_NOTICE}, but did not find any\n"
    assert _stderr_of(NOTICE_CODE) == f"native before\npython after\n{notice}kept on an error\n"


@pytest.mark.parametrize("hush", [True, False])
def test_ddps_own_notice_is_what_the_filter_drops(hush, monkeypatch):
    """torch's DDP with find_unused_parameters=True on a model that uses every parameter prints the
    notice from C++ at its first forward; the filter's text matches it."""
    import socket

    from gnnkit.quiet import UNUSED_PARAMETERS_NOTICE

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        monkeypatch.setenv("PORT", str(sock.getsockname()[1]))
    monkeypatch.setenv("HUSH", "1" if hush else "0")
    assert (UNUSED_PARAMETERS_NOTICE in _stderr_of(DDP_CODE)) is not hush
