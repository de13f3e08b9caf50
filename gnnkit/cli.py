"""The ``gnnkit`` command: run recipes, list and preprocess datasets, check the cache."""

from __future__ import annotations

import argparse
import errno
import os
import re
import signal
import sys
import threading
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any, NoReturn

from gnnkit.import_gc import import_without_gc

#: Subcommand -> (module that defines it with ``add_parser(subparsers)``, help shown by ``--help``).
#: A module is imported only when one of its commands runs, so ``gnnkit --help`` and the dataset
#: commands never import torch or Lightning. A test keeps the help lines equal to the modules'.
COMMANDS: dict[str, tuple[str, str]] = {
    "run": ("gnnkit.run_command", "train and test a recipe (LightningCLI arguments follow)"),
    "datasets": ("gnnkit.data.cli", "list registry entries and their cache state"),
    "import": ("gnnkit.data.cli", "write a graph (or a graph dataset) of your own, from PyG, as a dataset folder "
                                  "to train on"),
    "preprocess": ("gnnkit.data.cli", "build (or find) the cache entry of a dataset"),
    "partition": ("gnnkit.data.cli", "split a node dataset into P METIS partition entries in the cache"),
    "cache": ("gnnkit.data.cli", "inspect the preprocessed cache and the batch caches"),
    "comm": ("gnnkit.comm.cli", "gradient communication tools"),
    "formats": ("gnnkit.sparse.cli", "SpMM formats: list, explain a dataset, calibrate the selector"),
    "doctor": ("gnnkit.doctor", "versions, threads and the native kernels of this installation"),
}


#: ``OSError`` numbers that say a path the user gave is wrong (status 2, as other bad input); others
#: (a full disk, an I/O error) are the machine's (status 1).
USER_PATH_ERRORS = frozenset({errno.ENOENT, errno.ENOTDIR, errno.EISDIR, errno.EEXIST, errno.EACCES, errno.EPERM,
                              errno.EROFS})


#: What ``gnnkit --help`` says above the commands (plain text: argparse prints it as written).
DESCRIPTION = ("Train graph neural networks on OGB graphs (or a folder in OGB's layout) with PyTorch Lightning: "
               "run a recipe, prepare and inspect datasets and their cache, tune SpMM formats and gradient "
               "communication, check the installation.")


def _command(argv: list[str]) -> str | None:
    """The subcommand ``argv`` names (the top-level parser has no options but ``-h``)."""
    first = next((a for a in argv if not a.startswith("-")), None)
    return first if first in COMMANDS else None


class CommandParser(argparse.ArgumentParser):
    """argparse's parser for gnnkit's commands (and theirs, which argparse makes of the same class):
    a mistake is one line, ``gnnkit: error: ...`` and status 2, as ``gnnkit run``'s are (argparse
    printed its usage block first), and options are not taken by their abbreviations (``preprocess
    --forc`` rebuilt the entry; ``gnnkit run`` refuses them too)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"gnnkit: error: {message} (see {self.prog} --help)\n")


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The ``gnnkit`` parser, complete for the command ``argv`` names; the others are listed only.

    Args:
        argv: The arguments to be parsed (default ``sys.argv[1:]``); ``[]`` lists every command.
    """
    parser = CommandParser(prog="gnnkit", description=DESCRIPTION)
    sub = parser.add_subparsers(dest="command", required=True, metavar="{" + ",".join(COMMANDS) + "}")
    command = _command(sys.argv[1:] if argv is None else argv)
    if command is not None:
        import_without_gc(COMMANDS[command][0]).add_parser(sub)
    for name, (_, text) in COMMANDS.items():
        if name not in sub.choices:
            sub.add_parser(name, help=text, add_help=False)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``gnnkit`` console script."""
    from pipeline import DatasetError, setup_logging
    from pipeline.errors import WRITE_ERRORS

    setup_logging()
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser(argv).parse_args(argv)
    ctrl_c: list[int] = []  # the Ctrl-Cs the command got
    try:
        with _noting_ctrl_c(ctrl_c), _gnnkit_warnings_in_one_line():
            return args.func(args)
    except KeyboardInterrupt:  # Ctrl-C: what was being written is a temp, removed on the way out
        print("gnnkit: interrupted", file=sys.stderr)
        return 128 + signal.SIGINT
    except SystemExit as stop:  # Lightning's SIGTERMException exits without a code: status 0, a success
        if type(stop).__name__ == "SIGTERMException":
            return _stopped_by_signal("stopped by SIGTERM", signal.SIGTERM, stop)
        if ctrl_c and stop.code == 1:  # Lightning's exit(1) after its Ctrl-C shutdown
            return _stopped_by_signal("interrupted", signal.SIGINT, stop)
        raise
    except BrokenPipeError:  # `gnnkit datasets | head`: the reader left, as for any Unix tool
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # nothing left to flush at exit
        return 128 + signal.SIGPIPE
    except DatasetError as err:
        print(f"gnnkit: error: {err}", file=sys.stderr)
        return 2
    except OSError as err:  # a path the system refused: `--run_dir /proc/x`, `--out` under a file, a full disk
        where = err.filename if err.filename is not None else \
            getattr(err, "gnnkit_run_dir", None) if err.errno in WRITE_ERRORS else None  # a write in the run
        if where is None:
            raise
        print(f"gnnkit: error: {where}: {err.strerror or err}", file=sys.stderr)
        return 2 if err.errno in USER_PATH_ERRORS else 1
    except FloatingPointError as err:  # a training that diverged (K-FAC's factors): one line, not Lightning's traceback
        print(f"gnnkit: error: {err}", file=sys.stderr)
        return 1
    except MemoryError as err:  # an allocation the machine cannot hold: one line, not numpy's traceback
        print(f"gnnkit: error: out of memory: {str(err) or type(err).__name__}", file=sys.stderr)
        return 1
    except RuntimeError as err:
        if (line := out_of_memory_line(err, training=args.command == "run")) is not None:
            print(f"gnnkit: error: {line}", file=sys.stderr)
            return 1
        if not getattr(err, "gnnkit_comm_failure", False):  # set by gnnkit.comm.failures
            raise
        print(f"gnnkit: error: {err}", file=sys.stderr)
        return 1


def _stopped_by_signal(what: str, signum: int, err: BaseException) -> int:
    """One line for a command a signal stopped, naming the run folder to continue where the run
    noted it on ``err`` (:func:`gnnkit.run.run`); the status a shell gives such a stop."""
    from pipeline import is_rank_zero

    if is_rank_zero():  # every rank of a run gets the signal; one line says it
        run_dir = getattr(err, "gnnkit_run_dir", None)
        hint = f"gnnkit run --resume {run_dir} continues it" if run_dir else \
            "gnnkit run --resume RUN_DIR continues a run"
        print(f"gnnkit: {what} ({hint})", file=sys.stderr)
    return 128 + signum


@contextmanager
def _gnnkit_warnings_in_one_line() -> Iterator[None]:
    """Show gnnkit's own warnings (their text starts ``gnnkit: ``, as the native kernels' fallback)
    as that one line, not as Python's ``file:line: RuntimeWarning: ...`` and the source line after it."""
    shown = warnings.showwarning

    def show(message, category, filename, lineno, file=None, line=None):  # noqa: ANN001 - warnings' signature
        if str(message).startswith("gnnkit: "):
            print(message, file=sys.stderr if file is None else file)
        else:
            shown(message, category, filename, lineno, file, line)

    warnings.showwarning = show
    try:
        yield
    finally:
        warnings.showwarning = shown


@contextmanager
def _noting_ctrl_c(ctrl_c: list[int]) -> Iterator[None]:
    """Note each Ctrl-C (SIGINT) in ``ctrl_c`` before Python raises ``KeyboardInterrupt`` for it, as
    it would: Lightning catches that in a fit, shuts down and exits with status 1, which then reads
    as the interruption it was. Only where Python's own handler is installed, in the main thread."""
    if threading.current_thread() is not threading.main_thread() or \
            signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        yield
        return

    def note(signum: int, frame: FrameType | None) -> None:
        ctrl_c.append(signum)
        signal.default_int_handler(signum, frame)

    signal.signal(signal.SIGINT, note)
    try:
        yield
    finally:  # Python's own again (Lightning ignores Ctrl-C while it shuts down: that is over now)
        signal.signal(signal.SIGINT, signal.default_int_handler)


def out_of_memory_line(err: RuntimeError, training: bool = True) -> str | None:
    """One line for torch's failed allocations (``torch.OutOfMemoryError`` on a GPU, the CPU
    allocator's ``RuntimeError``), with what to make smaller in a ``training`` run; ``None`` for
    other errors."""
    text = " ".join(str(err).split())
    if type(err).__name__ != "OutOfMemoryError" and "DefaultCPUAllocator: can't allocate memory" not in text:
        return None
    text = re.sub(r"^\[enforce fail at [^\]]*\]\s*err == 0\.\s*", "", text)  # the CPU allocator's source line
    text = text.split(" Including non-PyTorch memory")[0].split(" If reserved but unallocated")[0]  # CUDA's details
    advice = ("; a smaller data.batch_size, data.num_neighbors, data.eval_batch_size or model.hidden_channels "
              "needs less, as does model.aggregation gnnkit (PyG's layers hold a message per edge)") if training else ""
    return f"out of memory: {text.rstrip('. ')}{advice}"


if __name__ == "__main__":
    sys.exit(main())
