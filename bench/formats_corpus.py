"""Rebuild the shipped SpMM format selector: generate the corpus, label it by measurement, train.

The offline step of Qiu, You and Wang, "Optimizing Sparse Matrix Multiplications for Graph Neural
Networks", LCPC 2021 <https://arxiv.org/abs/2111.00352>, on gnnkit's generated corpus
(:mod:`gnnkit.sparse.corpus`). Labelling appends to a JSON-lines file and resumes where a killed
run stopped; training cross-validates by matrix and writes the model JSON.

Examples::

    python bench/formats_corpus.py label --count 300 --labels bench/results/formats_labels.jsonl
    python bench/formats_corpus.py relabel --formats native_csr  # after a kernel changed speed
    python bench/formats_corpus.py train --labels bench/results/formats_labels.jsonl \\
        --out gnnkit/sparse/selector_model.json
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gnnkit.sparse.calibrate import label_corpus, read_records, relabel_formats, train_and_save  # noqa: E402
from gnnkit.sparse.corpus import sample_specs  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="action", required=True)
    p = sub.add_parser("label", help="measure every format on the corpus (resumable)")
    p.add_argument("--count", type=int, default=300, help="corpus matrices")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--min-rows", type=int, default=1_000)
    p.add_argument("--max-rows", type=int, default=1_000_000)
    p.add_argument("--max-nnz", type=int, default=3_000_000)
    p.add_argument("--large-fraction", type=float, default=0.1)
    p.add_argument("--widths-per-matrix", type=int, default=2)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--labels", type=Path, default=Path("bench/results/formats_labels.jsonl"))
    p = sub.add_parser("relabel", help="time some formats again on the labelled matrices, keep the rest")
    p.add_argument("--formats", nargs="+", required=True)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--labels", type=Path, default=Path("bench/results/formats_labels.jsonl"))
    p = sub.add_parser("train", help="fit the selector on the labels and write its JSON")
    p.add_argument("--labels", type=Path, default=Path("bench/results/formats_labels.jsonl"))
    p.add_argument("--out", type=Path, default=Path("gnnkit/sparse/selector_model.json"))
    p.add_argument("--folds", type=int, default=5)
    args = parser.parse_args(argv)

    if args.action == "label":
        specs = sample_specs(args.count, seed=args.seed, min_rows=args.min_rows, max_rows=args.max_rows,
                             max_nnz=args.max_nnz, large_fraction=args.large_fraction)
        records = label_corpus(
            specs, args.labels, widths_per_matrix=args.widths_per_matrix, repeats=args.repeats, seed=args.seed,
            progress=lambda i, n, s, sec: print(f"[{i}/{n}] {s.name} {sec:.1f}s", flush=True),
        )
        print(f"{len(records)} samples from {len({r['matrix'] for r in records})} matrices in {args.labels}")
        return 0
    if args.action == "relabel":
        records = relabel_formats(args.labels, args.formats, repeats=args.repeats,
                                  progress=lambda i, n, name, sec: print(f"[{i}/{n}] {name} {sec:.1f}s", flush=True))
        print(f"{', '.join(args.formats)} re-timed on {len(records)} samples in {args.labels}")
        return 0
    records = read_records(args.labels)
    selector = train_and_save(records, args.out, folds=args.folds, meta={"corpus": str(args.labels)})
    shown = {k: v for k, v in selector.meta.items() if k.startswith(("cv_", "train_", "samples", "matrices"))}
    print(f"{selector} -> {args.out}\n{shown}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
