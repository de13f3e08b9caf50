"""The subcommands' numeric flags: refused at the command line when no result could come of them."""

from __future__ import annotations

import argparse

import pytest

from gnnkit.arg_types import in_range
from gnnkit.cli import main


def test_in_range_bounds_and_kinds():
    assert in_range(int, 2, 1024)("4") == 4 and in_range(float, 0, above=True)("1e-3") == 1e-3
    for parse, text, message in [(in_range(int, 2, 1024), "1", ">= 2 and <= 1024, got 1"),
                                 (in_range(float, 0, above=True), "0", "> 0, got 0"),
                                 (in_range(float, 0), "inf", ">= 0, got inf"),
                                 (in_range(int, 1), "2.5", "expected an integer, got '2.5'")]:
        with pytest.raises(argparse.ArgumentTypeError, match=message):
            parse(text)


@pytest.mark.parametrize(("argv", "message"), [
    (["formats", "explain", "synthetic-tiny", "--width", "-3"], "argument --width: expected a value >= 1, got -3"),
    (["formats", "explain", "synthetic-tiny", "--epochs", "-1"], "argument --epochs: expected a value >= 1, got -1"),
    (["formats", "calibrate", "--widths-per-matrix", "9"],
     "argument --widths-per-matrix: expected a value >= 1 and <= 5, got 9"),
], ids=["negative width", "negative epochs", "more widths than there are"])
def test_formats_flags_without_a_result_are_refused(capsys, argv, message):
    """They were tracebacks (a negative tensor dimension, RunLength's check) or ran to no purpose."""
    with pytest.raises(SystemExit) as done:
        main(argv)
    err = capsys.readouterr().err
    assert done.value.code == 2 and err == f"gnnkit: error: {message} (see gnnkit formats {argv[1]} --help)\n"
