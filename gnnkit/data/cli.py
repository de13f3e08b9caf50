"""``gnnkit datasets``, ``gnnkit import``, ``gnnkit preprocess``, ``gnnkit partition`` and ``gnnkit cache``:
the registry, the user's own graphs and the caches.

These commands import :mod:`pipeline` only (no torch, no Lightning) wherever the cache answers, so
they start in a fraction of a second.
"""

from __future__ import annotations

import argparse
import difflib
import math
import os
import shlex
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from gnnkit.data.preprocessing import PREPROCESS_FIELDS, PreprocessOverrides, resolve_options
from gnnkit.tasks import read_recipe
from pipeline import (CacheEntry, DatasetError, cache, load_registry, paths, peak_rss_mb, preprocess, resolve,
                      temp_paths, tree_size)
from pipeline.ogb_layout import EVAL_METRICS
from pipeline.partitioned import is_part_of
from pipeline.registry import looks_like_path, spec_family
from pipeline.batch_cache import find_batch_caches, read_manifest, verify_batch_cache


def _datasets(args: argparse.Namespace) -> int:
    registry = load_registry()
    root = paths.cache_root()
    rows = [("name", "task", "source", "cache", "description")]
    for name, spec in registry.items():
        folder = root / name
        found = [p for p in folder.iterdir() if p.is_dir() and not p.name.startswith(".")] if folder.is_dir() else []
        state = f"{len(found)} entr{'y' if len(found) == 1 else 'ies'}, {tree_size(folder) / 2**20:.0f} MiB" if found else "-"
        rows.append((name, spec_family(spec) or "?", spec.source, state, spec.description))
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    for row in rows:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths)) + "  " + row[4])
    print(f"\ncache: {root}   (any OGB-format folder path is accepted as a dataset too; "
          f"gnnkit import writes one from a PyG graph)")
    return 0


def _recipe_data(path: str | None) -> dict[str, Any]:
    """The ``data:`` section of a recipe YAML (``{}`` without ``--recipe``).

    Raises:
        DatasetError: A file that is missing, no YAML or no recipe with a ``data:`` mapping.
    """
    if path is None:
        return {}
    try:
        config = read_recipe(path)
    except OSError as err:
        raise DatasetError(path, f"expected a recipe YAML ({err.strerror or err})") from None
    except ValueError as err:
        raise DatasetError(path, str(err).removeprefix(f"{path}: ")) from None
    data = config.get("data") if isinstance(config, dict) else None
    if not isinstance(data, dict):
        raise DatasetError(path, "expected a recipe with a data: section")
    return data


def _overrides(data: dict[str, Any], recipe: str | None) -> PreprocessOverrides:
    """A recipe's ``data.preprocess`` (or none)."""
    given = data.get("preprocess") or {}
    if not isinstance(given, dict) or not set(given) <= set(PREPROCESS_FIELDS):
        raise DatasetError(f"{recipe}: data.preprocess",
                           f"expected a mapping of {list(PREPROCESS_FIELDS)}, got {given!r}")
    return PreprocessOverrides(**given)


def _entry_of(args: argparse.Namespace, data: dict[str, Any], force: bool = False) -> CacheEntry:
    """The cache entry the command's dataset and options name: a recipe's (``--recipe``, its ``data``
    section), as its run resolves them (its folders too), with the command's own flags over it; the
    registry's otherwise."""
    dataset = args.dataset or data.get("dataset")
    if dataset is None:
        raise DatasetError("dataset", "expected a registry name or an OGB-format folder (or --recipe with data.dataset)")
    spec = resolve(dataset)
    options = resolve_options(spec.preprocess, _overrides(data, args.recipe), undirected=data.get("undirected"),
                              self_loops=data.get("self_loops"), reorder=data.get("reorder"))
    options = options.replace(undirected=args.undirected, memory_budget_mb=args.memory_budget_mb)
    roots = {name: Path(data[name]) for name in ("data_root", "cache_root") if data.get(name)}
    return preprocess(spec, options, force=force, **roots)


def _preprocess(args: argparse.Namespace) -> int:
    start = time.perf_counter()
    entry = _entry_of(args, _recipe_data(args.recipe), force=args.force)
    seconds = time.perf_counter() - start
    arrays = entry.manifest["arrays"]
    size = sum(a["bytes"] for a in arrays.values())
    print(f"{entry.dataset}: {entry.manifest['meta']['num_nodes']:,} nodes, "
          f"{entry.manifest['meta']['num_edges']:,} edges, {size / 2**20:.0f} MiB "
          f"in {seconds:.2f}s, peak memory {peak_rss_mb():.0f} MiB")
    print(entry.path)
    return 0


def _imported(args: argparse.Namespace) -> Any:
    """Run the import ``--task`` names; what it wrote (:class:`pipeline.graph_import.Imported`)."""
    if args.task != "node" and args.split:
        raise DatasetError("--split", f"picks one of several node masks; a {args.task} import makes its split (--seed)")
    if args.task == "link":
        from pipeline.link_graph_import import LinkImportOptions, import_link_graph

        return import_link_graph(args.source, args.out, LinkImportOptions(args.metric or "rocauc", args.seed))
    if args.task == "graph":
        from pipeline.graph_set_import import GraphSetImportOptions, import_graph_set

        return import_graph_set(args.source, args.out, GraphSetImportOptions(args.metric, args.seed))
    from pipeline.node_graph_import import ImportOptions, import_node_graph

    return import_node_graph(args.source, args.out, ImportOptions(args.split, args.metric, args.seed))


def _import(args: argparse.Namespace) -> int:
    imported = _imported(args)
    print(f"{imported.folder.name}: {imported.summary}")
    recipe, why = _recipe_for(imported.num_nodes, args.task, imported.homophily)
    folder = str(imported.folder)
    if folder in load_registry():  # the registry's entry would be trained, not this folder
        folder = f".{os.sep}{folder}"
    folder = shlex.quote(folder)
    # a learned vector per node instead (a graph task's model has one vector for all featureless nodes)
    features = "" if imported.has_features or args.task == "graph" else " --model.embedding_dim 64"
    print(f"train it: gnnkit run {recipe} --data.dataset {folder}{features}{why}")
    print(imported.folder)
    return 0


#: The recipe named for a graph no recipe of its task is near in size to (the link recipes: the nearest
#: in size), or when the recipes are not beside the package; graph datasets name no reference size: GIN
#: as set for the TU datasets.
FALLBACK_RECIPES = {"node": "quickstart.yaml", "link": "gae_citation.yaml", "graph": "gin_tu.yaml"}


def _recipe_for(num_nodes: int, task: str = "node", homophily: float | None = None) -> tuple[str, str]:
    """The shipped ``task`` recipe set for a graph of ``num_nodes`` nodes (:func:`gnnkit.hints.suggest_recipe`,
    GCN first: the baseline every paper reports), and of the graph's kind when its ``homophily``
    was measured (a heterophilous graph was pointed at gcn_citation: 0.48 where SAGE gave 0.75), with
    a note naming its reference graph; :data:`FALLBACK_RECIPES` when none is near in size or the
    recipes are not beside the package (an installed wheel)."""
    from gnnkit.hints import FAR, suggest_recipe
    from pipeline.homophily import homophily_text, is_heterophilous

    recipes = Path(__file__).resolve().parents[2] / "recipes"
    if not recipes.is_dir():
        return f"recipes/{FALLBACK_RECIPES[task]}", ""
    heterophilous = is_heterophilous(homophily)
    # a link recipe of any size beats none, and so does a heterophily recipe for a heterophilous graph
    far = FAR if task == "node" and not heterophilous else math.inf
    found = suggest_recipe(recipes / "quickstart.yaml", "gcn", num_nodes, heterophilous, task=task, far=far)
    path = found.path if found is not None else recipes / FALLBACK_RECIPES[task]
    shown = path.relative_to(Path.cwd()) if path.is_relative_to(Path.cwd()) else path  # runs from anywhere
    if found is None:
        return str(shown), ""
    kind = f"; heterophilous: adjusted homophily {homophily_text(homophily)} on its training labels" \
        if heterophilous else ""
    return str(shown), f"   (set for {found.reference.graph}, {found.reference.nodes:,} nodes{kind})"


def _partition(args: argparse.Namespace) -> int:
    from pipeline.partitioned import partition_entry

    data = _recipe_data(args.recipe)
    parts = args.parts if args.parts is not None else data.get("partitions")
    seed = args.seed if args.seed is not None else data.get("seed", 0)  # a run partitions with data.seed
    if parts is None:
        raise DatasetError("--parts", "expected a number of partitions (or --recipe with data.partitions)")
    start = time.perf_counter()
    entry = _entry_of(args, data)  # the recipe read once
    try:
        parts = partition_entry(entry, parts, seed=seed)
    except ValueError as err:
        print(f"gnnkit: error: {err}", file=sys.stderr)
        return 2
    seconds = time.perf_counter() - start
    for part in parts:
        meta = part.manifest["meta"]
        size = sum(a["bytes"] for a in part.manifest["arrays"].values())
        print(f"part {meta['part']}/{meta['parts']}: {meta['num_owned']:,} nodes, {meta['num_halo']:,} halo nodes, "
              f"{meta['num_edges']:,} edges, {size / 2**20:.1f} MiB  {part.path}")
    print(f"{entry.dataset}: {len(parts)} parts by METIS, edge cut {parts[0].manifest['meta']['edge_cut']:.4f}, "
          f"in {seconds:.2f}s, peak memory {peak_rss_mb():.0f} MiB")
    return 0


def _batch_caches(args: argparse.Namespace) -> int:
    """List, verify or clear the sampled-batch caches of reuse schedules; returns problems found."""
    bad = 0
    for path in find_batch_caches(paths.batch_root(), args.dataset):
        if args.action == "clear":
            shutil.rmtree(path)
            continue
        problems = verify_batch_cache(path) if args.action == "verify" else []
        bad += bool(problems)
        manifest = read_manifest(path)
        status = "CORRUPT" if problems else ("OK" if args.action == "verify" else "")
        print(f"{status:8} {path} ({manifest['num_batches']} batches, {manifest['bytes'] / 2**20:.1f} MiB)"
              + "".join(f"\n         {p}" for p in problems))
    return bad


def _stale_temps() -> list[Path]:
    """Temps that killed processes left in the raw-data folders and the batch caches (a reuse run
    killed while recording left its shards there, never removed)."""
    return [*temp_paths.stale_temps_under(paths.data_root()), *temp_paths.stale_temps_under(paths.batch_root())]


def _cache_target(dataset: str | None) -> tuple[str | None, Path | None]:
    """The name the caches file ``dataset`` under, and for an OGB-format folder path the folder: a
    name as given, a path by its folder's name (as ``preprocess`` filed it). Never a path as the
    name: ``cache clear`` removes that folder.

    Raises:
        DatasetError: A path that is no dataset folder.
    """
    if dataset is not None and not dataset.strip():  # "" named the current folder's
        raise DatasetError("dataset", f"expected a dataset name or an OGB-format folder, got {dataset!r}")
    if dataset is None or not looks_like_path(dataset):
        return dataset, None
    spec = resolve(dataset)
    return spec.name, spec.path


def _partition_names(root: Path, dataset: str | None) -> list[str]:
    """The cache names of ``dataset``'s partition entries (``<dataset>.part<p>of<P>``) under ``root``."""
    if dataset is None or not root.is_dir():
        return []
    return sorted(p.name for p in root.iterdir() if p.is_dir() and is_part_of(p.name, dataset))


def _say_if_unknown(dataset: str | None, roots: tuple[Path, ...]) -> bool:
    """A line on stderr when ``dataset`` has nothing in the caches under ``roots`` (a typo listed,
    verified and cleared nothing without a word), with the closest name that has; whether it did."""
    if dataset is None:
        return False
    known = sorted({p.name for root in roots if root.is_dir() for p in root.iterdir() if p.is_dir()})
    if any(name == dataset or is_part_of(name, dataset) for name in known):
        return False
    close = difflib.get_close_matches(dataset, known, n=1)
    print(f"gnnkit: no cache entry or batch cache of {dataset!r}" + (f"; did you mean {close[0]!r}?" if close else ""),
          file=sys.stderr)
    return True


def _cache(args: argparse.Namespace) -> int:
    root = paths.cache_root()
    args.dataset, folder = _cache_target(args.dataset)
    unknown = _say_if_unknown(args.dataset, (root, paths.batch_root()))
    if args.action == "clear":
        removed = cache.clear(root, args.dataset, folder)
        for part in _partition_names(root, args.dataset):  # built from the dataset's entry: cleared with it
            removed += cache.clear(root, part)
        _batch_caches(args)
        print(f"removed {removed} cache folder(s) from {root} and the batch caches in {paths.batch_root()}")
        for stale in _stale_temps():
            temp_paths.remove(stale)
            print(f"removed {stale} (left by an interrupted generation, download or batch recording)")
        return 0
    bad = 0
    for item in cache.entries(root):
        name = (item if isinstance(item, Path) else item.path).parent.name  # its folder's: a manifest can lie
        if args.dataset and name != args.dataset and not is_part_of(name, args.dataset):
            continue
        if isinstance(item, Path):
            bad += 1
            print(f"CORRUPT  {item}: {_manifest_problem(item)}")
            continue
        problems = cache.verify(item) if args.action == "verify" else []
        bad += bool(problems)
        status = "CORRUPT" if problems else ("OK" if args.action == "verify" else "")
        print(f"{status:8} {item.path} ({_entry_facts(item)})" + "".join(f"\n         {p}" for p in problems))
    for tmp in cache.stale_temps(root):
        print(f"STALE    {tmp} (left by an interrupted preprocess; 'gnnkit cache clear' removes it)")
    for tmp in _stale_temps():
        print(f"STALE    {tmp} (left by an interrupted generation or batch recording; 'gnnkit cache clear' removes it)")
    bad += _batch_caches(args)
    return 2 if unknown and args.action == "verify" else 1 if bad else 0


def _entry_facts(entry: CacheEntry) -> str:
    """An entry's size, when it was built and from which folder (``cache list`` printed bare paths:
    entries built from a folder's earlier contents could not be told from the current one)."""
    manifest = entry.manifest
    size = sum(info["bytes"] for info in manifest["arrays"].values()) / 2**20
    built = str(manifest.get("created", "?"))[:16].replace("T", " ")
    folder = manifest["meta"].get("folder")
    return f"{size:,.1f} MiB, built {built}" + (f", from {folder}" if folder else "")


def _manifest_problem(entry: Path) -> str:
    """Why the manifest of the entry folder ``entry`` cannot be read (:func:`pipeline.cache.load_entry`)."""
    try:
        cache.load_entry(entry)
    except DatasetError as err:
        return err.problem
    return "unreadable manifest"


def _entry_arguments(p: argparse.ArgumentParser) -> None:
    """The dataset and the preprocessing options of ``preprocess`` and ``partition``."""
    p.add_argument("dataset", nargs="?", help="registry name or OGB-format folder path (default: the recipe's)")
    p.add_argument("--recipe", metavar="YAML",
                   help="take the dataset and preprocessing a recipe's run uses (data.dataset, data.undirected, "
                        "data.self_loops, data.reorder, data.preprocess), so the run finds this entry")
    p.add_argument("--undirected", action=argparse.BooleanOptionalAction, default=None,
                   help="override the registry's (or the recipe's) choice of symmetrising edges")
    p.add_argument("--memory-budget-mb", type=int, default=None, metavar="N",
                   help="build out of core, peak memory under N MiB (node datasets; the same entry as in memory)")


#: ``gnnkit import``'s line in ``gnnkit --help`` (gnnkit.cli.COMMANDS holds the same).
IMPORT_HELP = "write a graph (or a graph dataset) of your own, from PyG, as a dataset folder to train on"


def _seed(text: str) -> int:
    """A random split's seed: a non-negative integer (numpy's generators take no other)."""
    if not text.isdecimal():
        raise argparse.ArgumentTypeError(f"expected a non-negative integer, got {text!r}")
    return int(text)


def add_parser(subparsers: Any) -> None:
    """Add ``datasets``, ``import``, ``preprocess``, ``partition`` and ``cache`` to the ``gnnkit`` command."""
    p = subparsers.add_parser("datasets", help="list registry entries and their cache state")
    p.set_defaults(func=_datasets)
    p = subparsers.add_parser("import", help=IMPORT_HELP, description=IMPORT_HELP + (
        ". Node prediction reads x, edge_index, y and train_mask/val_mask/test_mask (or train_idx/valid_idx/"
        "test_idx; none: a random 50/25/25 split) from a .pt of torch.save(data.to_dict(), path), a one-graph PyG "
        "processed data.pt or an .npz; link prediction reads x and edge_index from the same and splits the edges "
        "85/5/10 with as many random non-edges as negatives (or takes train_test_split_edges' arrays); graph "
        "property prediction reads a PyG dataset's processed data.pt (TUDataset's) or a .pt list of to_dict() "
        "graphs and splits them 80/10/10. Files are loaded weights-only."))
    p.add_argument("source", type=Path, help=".pt or .npz file (a graph dataset: .pt)")
    p.add_argument("out", type=Path, help="the dataset folder to write (must not exist); give it as --data.dataset")
    p.add_argument("--task", choices=("node", "link", "graph"), default="node",
                   help="what the folder trains to predict: node labels (y), links, or a label per graph (default: "
                        "node)")
    p.add_argument("--split", type=int, default=0, help="which split of 2-D node masks ([N, K]: a column)")
    p.add_argument("--metric", default=None, metavar="METRIC",
                   help=f"node: one of {', '.join(EVAL_METRICS)} (default: rocauc for two classes or [N, T] binary "
                        "labels, acc otherwise); link: rocauc (default) or hits@K; graph: acc (default for classes), "
                        "rocauc (default for [G, T] binary labels) or ap")
    p.add_argument("--seed", type=_seed, default=0, help="seed of the random split (and negatives) made when the "
                                                         "file has none")
    p.set_defaults(func=_import)
    p = subparsers.add_parser("preprocess", help="build (or find) the cache entry of a dataset")
    _entry_arguments(p)
    p.add_argument("--force", action="store_true", help="rebuild even if cached")
    p.set_defaults(func=_preprocess)
    p = subparsers.add_parser("partition", help="split a node dataset into P METIS partition entries in the cache")
    _entry_arguments(p)
    p.add_argument("--parts", type=int, default=None,
                   help="number of partitions (one per training rank; default: the recipe's data.partitions)")
    p.add_argument("--seed", type=int, default=None, help="METIS's seed (default: the recipe's data.seed, else 0)")
    p.set_defaults(func=_partition)
    p = subparsers.add_parser("cache", help="inspect the preprocessed cache and the batch caches", description=(
        "list: the cache entries and the sampled-batch caches of reuse runs, and what interrupted builds left; "
        "verify: recompute every checksum and report damaged entries (status 1; 2 for a name with nothing "
        "cached); clear: delete the entries and batch caches (all of them without a name; a build still "
        "running keeps its own), which the next run or preprocess builds again"))
    p.add_argument("action", choices=["list", "verify", "clear"])
    p.add_argument("dataset", nargs="?", help="limit to one dataset (a name, or the OGB-format folder it came from; "
                                              "its partition entries too)")
    p.set_defaults(func=_cache)
