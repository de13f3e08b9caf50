"""Generate synthetic twins once and print what the registry records about them.

For each preset named (default: the featured big twins), builds the graph once, writes it and its
featureless sibling (``<name>-nofeat``, same graph) to a temp folder in OGB's raw layout, and prints
the content digest of each folder (:func:`pipeline.content_digest.content_digest`, the
``fingerprint`` of ``datasets.yaml``), the raw and symmetrised edge counts and the generation time.
The generator depends on the spec alone, so these figures are the same on every machine.

Examples::

    python bench/twin_fingerprints.py synthetic-arxiv
    python bench/twin_fingerprints.py synthetic-arxiv synthetic-products --json fingerprints.json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from pipeline import atomic_write_text
from pipeline.content_digest import content_digest
from pipeline.synthetic import GENERATOR_VERSION, build, presets, write


def symmetrised_edges(edge_index: np.ndarray, num_nodes: int) -> int:
    """Edges after adding every reverse edge and removing duplicates (self loops counted once)."""
    lo, hi = np.minimum(edge_index[0], edge_index[1]), np.maximum(edge_index[0], edge_index[1])
    pairs = np.unique(lo * num_nodes + hi)
    loops = int(np.count_nonzero(pairs // num_nodes == pairs % num_nodes))
    return 2 * int(pairs.size) - loops


def measure(name: str, root: Path) -> list[dict]:
    """Build ``name`` once; write it and its featureless sibling; return one record per folder."""
    spec = presets()[name]
    start = time.perf_counter()
    graph = build(spec, lambda msg: print(f"  {name}: {msg}", file=sys.stderr))
    seconds = time.perf_counter() - start
    sym = symmetrised_edges(graph["edge_index"], spec.num_nodes)
    records = []
    for variant, vspec in ((name, spec), (f"{name}-nofeat", dataclasses.replace(spec, num_features=0))):
        if variant not in presets() or presets()[variant] != vspec:
            continue
        folder = write(root / variant, vspec, graph)
        records.append({
            "dataset": variant, "generator_version": GENERATOR_VERSION, "fingerprint": content_digest(folder),
            "raw_edges": int(graph["edge_index"].shape[1]), "symmetrised_edges": sym,
            "build_seconds": round(seconds, 1),
        })
    return records


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("presets", nargs="*", default=["synthetic-arxiv", "synthetic-products"])
    parser.add_argument("--json", type=Path, help="also write the records to this file")
    args = parser.parse_args(argv)
    unknown = [p for p in args.presets if p not in presets()]
    if unknown:
        parser.error(f"unknown preset(s) {unknown}; expected some of {sorted(presets())}")
    records = []
    with tempfile.TemporaryDirectory(prefix="twins-") as tmp:
        for name in args.presets:
            records += measure(name, Path(tmp))
    print(f"{'dataset':28} {'raw edges':>12} {'symmetrised':>12} {'build s':>8}  fingerprint")
    for r in records:
        print(f"{r['dataset']:28} {r['raw_edges']:>12,} {r['symmetrised_edges']:>12,} "
              f"{r['build_seconds']:>8}  {r['fingerprint']}")
    if args.json:
        atomic_write_text(args.json, json.dumps(records, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
