"""TU graph classification datasets (MUTAG, PROTEINS, NCI1, PTC, IMDB-BINARY, IMDB-MULTI), as Xu et al.
trained GIN on them, written through ``gnnkit import --task graph`` into OGB-layout graph folders.

The input is the text format of GIN's reference code (Xu et al., "How Powerful are Graph Neural
Networks?", ICLR 2019, https://arxiv.org/abs/1810.00826; github.com/weihua916/powerful-gnns,
``dataset/<NAME>/<NAME>.txt``): the graph count, then per graph ``n label`` and per node ``tag
degree neighbours...`` (node attributes after them are left out, as that code leaves them out). The
node features are those of that code: the one-hot node tag; for the social graphs (IMDB), whose
nodes carry no tag, the one-hot degree (its ``--degree_as_tag``). Each dataset becomes a list of
PyG-style graph dicts (``x``, ``edge_index``, ``y``), which :func:`pipeline.graph_set_import.import_graph_set`
writes with a seeded 80/10/10 split, exactly as a user's ``gnnkit import graphs.pt DIR --task graph``.

The files are a public benchmark, read by this benchmark script only (gnnkit's users bring PyG's
``TUDataset`` processed files instead).

    python bench/tu_to_ogb.py --raw DIR --out /tmp/tu mutag proteins nci1 imdbbinary
    python bench/citation.py --graphs /tmp/tu --names mutag proteins nci1 imdbbinary --recipes gin_tu

``--no-features`` writes ``<name>_nofeat`` instead: the same graphs, labels and split without node
features, as PyG's ``TUDataset`` gives the social graphs (IMDB): what a user who imports that dataset
trains on.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from pipeline.graph_set_import import GraphSetImportOptions, import_graph_set

#: File names of the datasets in GIN's reference code.
FILES = {"mutag": "MUTAG", "proteins": "PROTEINS", "nci1": "NCI1", "ptc": "PTC", "imdbbinary": "IMDBBINARY",
         "imdbmulti": "IMDBMULTI"}


def read_gin_text(path: Path) -> list[dict[str, np.ndarray]]:
    """The graphs of one dataset file: ``x`` (one-hot tag, or one-hot degree without tags),
    ``edge_index`` (both directions, as the neighbour lists give them) and ``y`` (class id)."""
    lines = iter(path.read_text().split("\n"))
    raw = []
    for _ in range(int(next(lines))):
        n, label = (int(w) for w in next(lines).split())
        tags, edges = [], []
        for node in range(n):
            row = next(lines).split()
            degree = int(row[1])
            tags.append(int(row[0]))
            edges += [(int(v), node) for v in row[2: 2 + degree]]  # messages from each neighbour
        raw.append((np.array(tags), np.array(edges, dtype=np.int64).reshape(-1, 2).T, label))
    if len({int(t) for tags, _, _ in raw for t in tags}) == 1:  # no tags: the degree is the tag
        raw = [(np.bincount(edges[1], minlength=len(tags)), edges, label) for tags, edges, label in raw]
    tag_ids = {t: i for i, t in enumerate(sorted({int(t) for tags, _, _ in raw for t in tags}))}
    label_ids = {c: i for i, c in enumerate(sorted({label for _, _, label in raw}))}
    eye = np.eye(len(tag_ids), dtype=np.float32)
    return [{"x": eye[[tag_ids[int(t)] for t in tags]], "edge_index": edges, "y": np.array([label_ids[label]])}
            for tags, edges, label in raw]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--raw", type=Path, required=True, help="folder of <NAME>.txt files (GIN's code's format)")
    parser.add_argument("--out", type=Path, required=True, help="folder to write <name>/ dataset folders into")
    parser.add_argument("--seed", type=int, default=0, help="seed of the 80/10/10 split")
    parser.add_argument("--no-features", action="store_true", help="leave the node features out (<name>_nofeat)")
    parser.add_argument("names", nargs="+", choices=sorted(FILES))
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    for name in args.names:
        graphs = read_gin_text(args.raw / f"{FILES[name]}.txt")
        if args.no_features:
            graphs = [{"edge_index": g["edge_index"], "y": g["y"], "num_nodes": len(g["x"])} for g in graphs]
            name = f"{name}_nofeat"
        imported = import_graph_set(graphs, args.out / name, GraphSetImportOptions(seed=args.seed))
        print(f"{name}: {imported.summary}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
