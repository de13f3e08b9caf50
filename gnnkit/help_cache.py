"""``gnnkit run [RECIPE] --help``, kept: LightningCLI builds that text from the recipe's classes, which
takes importing torch and Lightning (about 5 s on a 2-core machine); a repeat of the same request
prints the kept text at once.

The text is kept under ``GNNKIT_HOME/help/`` by a key of everything it is made of: the arguments, the
recipe's bytes, the terminal's width, Python's and the parsing packages' versions, and the size and
time of every source file of gnnkit. A recipe (or override) that names a class outside gnnkit, torch,
PyG and Lightning (a user's own module, whose source the key does not cover) is never kept. A
kept text that cannot be read is made again; one that cannot be written is only not kept.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import io
import json
import os
import re
import shutil
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import yaml

from pipeline.atomic import atomic_write_text
from pipeline.errors import DatasetError
from pipeline.paths import gnnkit_home

#: The distributions whose code writes the help: LightningCLI, jsonargparse and what it reads docstrings
#: and signatures with, and the libraries of the classes a recipe names.
DISTRIBUTIONS = ("lightning", "jsonargparse", "docstring-parser", "typeshed-client", "torch", "torch_geometric")

#: Modules whose classes a kept help may describe (their source is covered by the key).
KNOWN_MODULES = ("gnnkit.", "pipeline.", "torch.", "torch_geometric.", "lightning.")

#: The newest kept texts; older ones are removed when a new one is written.
KEEP = 32

_PACKAGE_ROOTS = (Path(__file__).resolve().parent, Path(__file__).resolve().parent.parent / "pipeline")
_DOTTED = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)+")


def _version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "-"


def _sources() -> list[str]:
    """``path size mtime`` of every Python source file of gnnkit and its pipeline."""
    found = []
    for root in _PACKAGE_ROOTS:
        for path in sorted(root.rglob("*.py")):
            stat = path.stat()
            found.append(f"{path} {stat.st_size} {stat.st_mtime_ns}")
    return found


def _values(node: Any) -> Iterator[str]:
    """Every string among a parsed YAML document's keys and values, nested ones too."""
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _values(key)
            yield from _values(value)
    elif isinstance(node, list):
        for item in node:
            yield from _values(item)
    elif isinstance(node, str):
        yield node


def names_other_classes(recipe: str, args: list[str]) -> bool:
    """Whether a dotted name among ``recipe``'s values (``class_path: mypkg.Model``, in any YAML
    style) or ``args`` (``--optimizer mypkg.Opt``) lies outside :data:`KNOWN_MODULES` (a bare
    ``Adam`` is torch's), or the recipe is no YAML gnnkit can read here."""
    try:
        values = list(_values(yaml.safe_load(recipe))) if recipe else []
    except yaml.YAMLError:
        return True
    names = [v.strip() for v in values] + [arg.split("=")[-1] for arg in args]
    return any(_DOTTED.fullmatch(name) and not name.startswith(KNOWN_MODULES) for name in names)


def names_other_files(args: list[str], config: str | None) -> bool:
    """Whether ``args`` name a config file besides ``config`` (``--config extra.yaml``, ``--data
    data.yaml``): the key holds the recipe's bytes, not theirs."""
    return any(Path(arg.split("=")[-1]).suffix.lower() in (".yaml", ".yml", ".json") and arg.split("=")[-1] != config
               for arg in args)


def help_key(args: list[str], config: str | None) -> str | None:
    """The key of ``gnnkit run`` ``args``'s help, for the recipe (or run config) ``config``; ``None``
    when it must not be kept (:func:`names_other_classes`, :func:`names_other_files`) or the recipe
    cannot be read."""
    try:
        recipe = Path(config).read_text() if config else ""
    except (OSError, UnicodeDecodeError):
        return None
    if names_other_classes(recipe, args) or names_other_files(args, config):
        return None
    parts = {
        "args": args,
        "recipe": recipe,
        "columns": shutil.get_terminal_size().columns,
        "python": sys.version,
        "versions": [_version(dist) for dist in DISTRIBUTIONS],
        "env": sorted((k, v) for k, v in os.environ.items() if k.startswith("JSONARGPARSE_")),
        "sources": _sources(),
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:32]


def _folder() -> Path:
    return gnnkit_home() / "help"


def kept_help(key: str) -> str | None:
    """The text kept under ``key``, or ``None`` (none kept, or one that cannot be read)."""
    try:
        kept = json.loads((_folder() / f"{key}.json").read_text())
    except (OSError, ValueError, DatasetError):
        return None
    return kept["text"] if isinstance(kept, dict) and kept.get("key") == key and isinstance(kept.get("text"), str) \
        else None


def keep_help(key: str, text: str) -> None:
    """Keep ``text`` under ``key`` (written whole or not at all), and only the :data:`KEEP` newest."""
    try:
        folder = _folder()
        folder.mkdir(parents=True, exist_ok=True)
        atomic_write_text(folder / f"{key}.json", json.dumps({"key": key, "text": text}))
        kept = sorted(folder.glob("*.json"), key=lambda path: path.stat().st_mtime_ns, reverse=True)
        for old in kept[KEEP:]:
            old.unlink(missing_ok=True)
    except (OSError, DatasetError):
        pass  # a read-only home only costs the next request its 5 s


def printed_help(make: Callable[[], object]) -> str:
    """What ``make`` prints on standard output before it exits with status 0, as argparse's help does.

    Raises:
        SystemExit: ``make`` exited with another status (what it printed is printed first).
    """
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            make()
    except SystemExit as stop:
        if stop.code not in (0, None):
            sys.stdout.write(out.getvalue())
            raise
    return out.getvalue()
