"""``gnnkit run`` on the command line: its parser, and checks of the recipe's path and of the run
folder and checkpoint asked for, made before Lightning is imported, so a mistyped path is one line
at once (not a traceback, or a line, seconds later)."""

from __future__ import annotations

import difflib
import sys
from pathlib import Path
from typing import Any

from gnnkit.import_gc import import_without_gc

#: Where recipes are looked for when a named one does not exist: its own folder and ``./recipes``.
RECIPE_FOLDER = Path("recipes")


def recipe_problem(recipe: str) -> str | None:
    """The line saying why ``recipe`` (the first argument of ``gnnkit run``) cannot be read, with the
    closest recipe names beside it; ``None`` when it is a file, or a flag (``--resume``, ``--help``)."""
    if recipe.startswith("-") or Path(recipe).is_file():
        return None
    path = Path(recipe)
    what = "a folder, not a recipe file" if path.is_dir() else "no such file"
    known: dict[str, list[str]] = {}  # file name -> the paths that have it
    for folder in dict.fromkeys((path.parent, RECIPE_FOLDER)):
        for found in sorted(folder.glob("*.y*ml")) if folder.is_dir() else ():
            known.setdefault(found.name, []).append(str(found))
    close = [p for name in difflib.get_close_matches(path.name, sorted(known), n=2, cutoff=0.8) for p in known[name]]
    hint = f"; did you mean {' or '.join(close)}?" if close else ""
    return f"recipe {recipe}: {what}{hint}"


USAGE = "gnnkit run RECIPE [--section.key VALUE ...] | gnnkit run --resume RUN_DIR [...] | gnnkit run RECIPE --help"


def _run_command(args: Any) -> int:
    if args.recipe is None:
        print(f"gnnkit: error: gnnkit run: expected a recipe or --resume RUN_DIR (usage: {USAGE})", file=sys.stderr)
        return 2
    problem = recipe_problem(args.recipe)
    if problem is not None:
        print(f"gnnkit: error: {problem}", file=sys.stderr)
        return 2
    from gnnkit.resume import ResumeError, plan_command, wants_help

    try:
        plan = plan_command(args.recipe, args.overrides)  # a refused request: one line before Lightning loads
        if plan is None or wants_help(plan.overrides):
            _print_help(args, plan)
        else:
            import_without_gc("gnnkit.run").run(args.recipe, args.overrides, plan=plan)
    except ResumeError as err:
        print(f"gnnkit: error: {err}", file=sys.stderr)
        return 2
    return 0


def _print_help(args: Any, plan: Any) -> None:
    """Print ``gnnkit run [RECIPE] --help``: the kept text (:mod:`gnnkit.help_cache`), or LightningCLI's,
    then kept."""
    from gnnkit.help_cache import help_key, keep_help, kept_help, printed_help

    key = help_key([args.recipe, *args.overrides], plan.config if plan else None)
    text = kept_help(key) if key else None
    if text is None:
        run = import_without_gc("gnnkit.run").run
        text = printed_help(lambda: run(args.recipe, args.overrides, plan=plan))
        if key:
            keep_help(key, text)
    sys.stdout.write(text)


def add_parser(subparsers: Any) -> None:
    """Add ``gnnkit run`` to the ``gnnkit`` command."""
    p = subparsers.add_parser("run", help="train and test a recipe (LightningCLI arguments follow)",
                              prefix_chars="\0", add_help=False, usage=USAGE)  # every --flag goes to LightningCLI
    p.add_argument("recipe", nargs="?")
    p.add_argument("overrides", nargs="...")  # argparse.REMAINDER
    p.set_defaults(func=_run_command)
