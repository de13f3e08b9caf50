"""Known third-party noise is hidden inside ``quiet()`` only, and every filter is restored after."""

from __future__ import annotations

import logging
import warnings

from lightning.pytorch.utilities.rank_zero import rank_zero_info

from gnnkit.quiet import LIGHTNING_LOGGERS, quiet, quietly, resuming

LEAF = "`isinstance(treespec, LeafSpec)` is deprecated, use `isinstance(treespec, TreeSpec) and treespec.is_leaf()` instead."
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
        warnings.warn(LEAF, FutureWarning)
    assert [(str(w.message), w.category) for w in caught] == [
        ("a user's own warning", FutureWarning), (LEAF, FutureWarning)]
    assert warnings.filters == before


def test_lightnings_hardware_lines_tip_and_max_epochs_stop_are_dropped_inside_only():
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
            rank_zero_info("`Trainer.fit` stopped: `max_steps=40` reached.")
        assert all(not logging.getLogger(name).filters for name in LIGHTNING_LOGGERS)
        rank_zero_info("GPU available: False, used: False")
    finally:
        log.removeHandler(handler)
    assert seen == ["`Trainer.fit` stopped: `max_steps=40` reached.", "GPU available: False, used: False"]


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


def test_a_resumed_runs_not_empty_checkpoint_folder_is_not_warned_of_inside_only():
    not_empty = "Checkpoint directory /runs/r/checkpoints exists and is not empty."
    before = list(warnings.filters)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with resuming():
            warnings.warn(not_empty, UserWarning)
            warnings.warn("Checkpoint directory /x is odd", UserWarning)
        warnings.warn(not_empty, UserWarning)
    assert [str(w.message) for w in caught] == ["Checkpoint directory /x is odd", not_empty]
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
