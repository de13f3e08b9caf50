"""Platonov et al.'s heterophilous graphs as OGB-layout folders, one data split each.

"A critical look at the evaluation of GNNs under heterophily" (Platonov et al., ICLR 2023,
<https://arxiv.org/abs/2302.11640>) publishes its graphs as ``data/<name>.npz`` in
github.com/yandex-research/heterophilous-graphs: roman-empire, amazon-ratings, minesweeper,
tolokers, questions, and the de-duplicated ``chameleon_filtered`` / ``squirrel_filtered`` with
actor and the WebKB graphs. This script turns them into the folder layout that
``gnnkit run RECIPE --data.dataset PATH`` reads (:func:`pipeline.ogb_layout.write_ogb_folder`), so
that the recipes can be checked on graphs whose edges mostly join different classes:

* nodes, features and labels as stored; two classes become a binary task scored by ROC-AUC (as the
  paper scores minesweeper, tolokers and questions), more stay multi-class with accuracy;
* edges as stored, marked ``add_inverse_edge`` (the paper symmetrises all but the ``*_directed``
  graphs; the recipes do too);
* split ``--split`` of the ten in the file (``train_masks``/``val_masks``/``test_masks`` rows).

The files are read as ``gnnkit import`` reads them (``numpy.load(allow_pickle=False)``: plain arrays only).

    python bench/heterophilous_to_ogb.py --raw heterophilous-graphs/data --out /tmp/hetero [minesweeper actor ...]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pipeline.array_source import read_arrays  # noqa: E402
from pipeline.errors import DatasetError  # noqa: E402
from pipeline.node_graph_import import ImportOptions, node_graph_parts  # noqa: E402
from pipeline.ogb_layout import write_ogb_folder  # noqa: E402

#: The arrays each file holds.
ARRAYS = ("node_features", "node_labels", "edges", "train_masks", "val_masks", "test_masks")


def read_heterophilous(path: Path, split: int = 0) -> dict[str, Any]:
    """One graph file as :func:`write_ogb_folder`'s arguments, with data split ``split``
    (:func:`pipeline.node_graph_import.node_graph_parts`, edges stored once per pair).

    Raises:
        SystemExit: A file that is missing or unreadable, lacks one of :data:`ARRAYS` or has no split
            ``split``.
    """
    if not path.is_file():
        raise SystemExit(f"{path}: missing; fetch data/{path.name} from github.com/yandex-research/heterophilous-graphs")
    try:
        arrays = read_arrays(path, ARRAYS)
        missing = [name for name in ARRAYS if name not in arrays]
        if missing:
            raise SystemExit(f"{path}: expected the arrays {list(ARRAYS)}, missing {missing}")
        parts = node_graph_parts(arrays, ImportOptions(split=split, add_inverse_edge=True), str(path))
    except DatasetError as err:
        raise SystemExit(str(err)) from None
    del parts["summary"], parts["homophily"]  # what the import tells, not the writer's arguments
    return parts


def edge_homophily(parts: dict[str, Any]) -> float:
    """The share of edges joining two nodes of the same class."""
    labels, (src, dst) = parts["labels"].reshape(-1), parts["edge_index"]
    return float((labels[src] == labels[dst]).mean())


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--raw", type=Path, required=True, help="the repository's data/ folder")
    parser.add_argument("--out", type=Path, required=True, help="where the OGB-layout folders go")
    parser.add_argument("--split", type=int, default=0, help="which of the ten data splits")
    parser.add_argument("names", nargs="*", default=["minesweeper", "tolokers", "chameleon_filtered",
                                                     "squirrel_filtered", "actor"])
    args = parser.parse_args(argv)
    for name in args.names:
        parts = read_heterophilous(args.raw / f"{name}.npz", args.split)
        folder = write_ogb_folder(args.out / name, **parts)
        sizes = {k: len(v) for k, v in parts["split"].items()}
        print(f"{folder}: {parts['num_nodes']:,} nodes, {parts['edge_index'].shape[1]:,} edges, "
              f"{parts['node_feat'].shape[1]:,} features, {parts['meta']['num classes']} classes "
              f"({parts['meta']['eval metric']}), edge homophily {edge_homophily(parts):.3f}, split {sizes}")


if __name__ == "__main__":
    sys.exit(main())
