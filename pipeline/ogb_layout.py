"""OGB's raw on-disk layout for node-property datasets: read it with OGB's own readers, write it.

Layout (as produced by OGB's downloads and ``ogb.io.DatasetSaver``)::

    <folder>/meta.json                         OGB's meta_dict keys (for folders given by path)
    <folder>/raw/edge.csv.gz                   CSV layout: one "src,dst" line per edge
    <folder>/raw/num-node-list.csv.gz, num-edge-list.csv.gz
    <folder>/raw/node-feat.csv.gz              optional
    <folder>/raw/node-label.csv.gz
    <folder>/raw/data.npz, node-label.npz      binary layout instead of the CSV files
    <folder>/split/<scheme>/{train,valid,test}.csv.gz   (or split_dict.pt from DatasetSaver)

Reading goes through ``ogb.io.read_graph_raw`` (never OGB's dataset classes, which prompt on stdin
and unpickle their ``processed/`` cache). OGB's readers slice the node and edge files to the counts
of ``num-node-list``/``num-edge-list`` and drop the rest silently, so :func:`check_row_counts`
compares every per-node and per-edge file with those counts first. Every problem raises
:class:`DatasetError` naming the file.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import math
import re
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.errors import DatasetError
from pipeline.graph import SPLITS, whole
from pipeline.npz_stream import member_headers, save_npz
from pipeline.safe_pt import as_ids, load_pt
from pipeline.temp_paths import published_folder

#: meta.json keys a folder must provide (OGB's meta_dict names).
REQUIRED_META = (
    "num tasks",
    "num classes",
    "task type",
    "eval metric",
    "add_inverse_edge",
    "has_node_attr",
    "split",
    "binary",
)
TASK_TYPES = ("multiclass classification", "binary classification")
EVAL_METRICS = ("acc", "rocauc")


@dataclass
class RawGraph:
    """What an OGB folder holds, as numpy arrays, before canonicalisation.

    Attributes:
        edge_index: ``[2, E]`` int64 (source, destination), inverse edges added if meta says so.
        num_nodes: N.
        node_feat: ``[N, F]`` features or ``None``.
        labels: ``[N, T]`` labels as stored (float with NaN for unlabelled, or int).
        split: ``train``/``valid``/``test`` index arrays.
        meta: Normalised meta dict (see :func:`normalise_meta`).
        files: Which file each part came from, for error messages.
        extra: Additional node arrays (``node_year``, ``node_species``, ...).
    """

    edge_index: np.ndarray
    num_nodes: int
    node_feat: np.ndarray | None
    labels: np.ndarray
    split: dict[str, np.ndarray]
    meta: dict[str, Any]
    files: dict[str, str]
    extra: dict[str, np.ndarray] = field(default_factory=dict)


def as_bool(value: Any, where: str) -> bool:
    if isinstance(value, bool):
        return value
    if str(value) in ("True", "true", "1"):
        return True
    if str(value) in ("False", "false", "0"):
        return False
    raise DatasetError(where, f"expected True or False, got {value!r}")


def meta_counts(raw: dict[str, Any], where: str) -> tuple[int, int]:
    """``'num tasks'`` and ``'num classes'`` as whole numbers (OGB writes ints or their strings):
    at least one task, and at least two classes for multi-class classification (OGB's ``-1``
    stands for "not a class count" in other task types).

    Raises:
        DatasetError: Naming the key: not a whole number (``8.7`` was cut to 8), or out of range
            (a multi-class count of 0 was reported as a label out of range in the label file).
    """
    counts = []
    for key in ("num tasks", "num classes"):
        value = raw[key]
        try:
            number = float(value) if not isinstance(value, bool) else math.nan
        except (TypeError, ValueError):
            number = math.nan
        if not number.is_integer():
            raise DatasetError(where, f"'{key}' must be a whole number, got {value!r}")
        counts.append(int(number))
    num_tasks, num_classes = counts
    if num_tasks < 1:
        raise DatasetError(where, f"'num tasks' must be >= 1, got {num_tasks}")
    if str(raw["task type"]) == "multiclass classification" and num_classes < 2:
        raise DatasetError(where, f"'num classes' must be >= 2 for multiclass classification, got {num_classes}")
    return num_tasks, num_classes


def raw_file(raw_dir: Path, meta: dict[str, Any], csv_name: str) -> str:
    """Where a raw array is read from: ``data.npz`` in the binary layout, ``csv_name`` otherwise."""
    return str(raw_dir / ("data.npz" if meta["binary"] else csv_name))


def split_name(raw: dict[str, Any], where: str) -> str:
    """``'split'``: the name of one folder under ``split/`` (never a path out of the dataset folder)."""
    name = str(raw["split"])
    if name in ("", ".", "..") or "/" in name or "\\" in name:
        raise DatasetError(where, f"'split' must name a folder under split/, got {name!r}")
    return name


def as_list(value: Any) -> list[str]:
    if value is None or value == "None" or value == "":
        return []
    if isinstance(value, list):
        return [str(v) for v in value]
    return [v for v in str(value).split(",") if v]


def normalise_meta(raw: dict[str, Any], where: str) -> dict[str, Any]:
    """Check OGB meta_dict keys and convert them to typed values.

    Args:
        raw: The meta dict as OGB writes it (strings ``'True'``/``'False'``, ints or strings).
        where: File name for error messages.

    Returns:
        A dict with ``num_tasks``, ``num_classes``, ``task_type``, ``eval_metric``,
        ``add_inverse_edge``, ``has_node_attr``, ``split``, ``binary``, ``additional_node_files``,
        ``is_hetero`` and the original dict under ``ogb_meta``.
    """
    for key in REQUIRED_META:
        if key not in raw:
            raise DatasetError(where, f"missing meta key '{key}'")
    if str(raw["task type"]) not in TASK_TYPES:
        raise DatasetError(where, f"'task type' must be one of {list(TASK_TYPES)}, got {raw['task type']!r}")
    if str(raw["eval metric"]) not in EVAL_METRICS:
        raise DatasetError(where, f"'eval metric' must be one of {list(EVAL_METRICS)}, got {raw['eval metric']!r}")
    num_tasks, num_classes = meta_counts(raw, where)
    meta = {
        "num_tasks": num_tasks,
        "num_classes": num_classes,
        "task_type": str(raw["task type"]),
        "eval_metric": str(raw["eval metric"]),
        "add_inverse_edge": as_bool(raw["add_inverse_edge"], f"{where}: 'add_inverse_edge'"),
        "has_node_attr": as_bool(raw["has_node_attr"], f"{where}: 'has_node_attr'"),
        "split": split_name(raw, where),
        "binary": as_bool(raw["binary"], f"{where}: 'binary'"),
        "additional_node_files": as_list(raw.get("additional node files")),
        "is_hetero": as_bool(raw.get("is hetero", False), f"{where}: 'is hetero'"),
        "ogb_meta": {k: (v if isinstance(v, (int, float, bool)) else str(v)) for k, v in raw.items()},
    }
    if meta["is_hetero"]:
        raise DatasetError(where, "heterogeneous graphs ('is hetero': True) are not supported")
    return meta


#: Names under ``raw/`` and ``split/<scheme>/`` that no reader reads: hidden files and folders
#: (``.DS_Store``, an editor's swap, ``.ipynb_checkpoints``), backups and notes. Each changed the
#: key, so a ``notes.txt`` beside the data built the entry again.
NOT_DATA = re.compile(r"^\.|~$|\.(bak|orig|rej|swp|swo|tmp|txt|md)$|^readme", re.IGNORECASE)


def raw_files(folder: Path, meta: dict[str, Any]) -> list[Path]:
    """The files of ``folder`` that make up the dataset (for fingerprinting): those below ``raw/``
    and the split's folder, but :data:`NOT_DATA`. Every layout's (node, link, graph)."""
    found = [*(folder / "raw").rglob("*"), *(folder / "split" / meta["split"]).rglob("*")]
    return sorted(p for p in found if p.is_file() and not any(NOT_DATA.search(part) for part in
                                                               p.relative_to(folder).parts[1:]))


@contextlib.contextmanager
def quiet_readers():
    """OGB's readers print and draw bars; keep the CLI's output for gnnkit's own progress."""
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        yield


@contextlib.contextmanager
def _csv_errors(path: Path, where: Path | None = None, problem: str = "unreadable CSV",
                also: tuple[type[BaseException], ...] = ()) -> Iterator[None]:
    """Turn pandas' and gzip's read errors into one :class:`DatasetError` line naming ``where``."""
    import pandas as pd  # here, not at the top: a cache hit needs no CSV reader

    try:
        yield
    except UnicodeDecodeError as err:
        raise DatasetError(where or path, f"{problem} (not UTF-8 text: byte {err.start} of a line)") from None
    except pd.errors.EmptyDataError:  # pandas says "No columns to parse from file"
        raise DatasetError(where or path, f"{problem} (the file holds no line; expected at least one)") from None
    except (pd.errors.ParserError, OSError, EOFError, *also) as err:
        raise DatasetError(where or path, f"{problem} ({str(err).splitlines()[0]})") from None


def numeric(values: np.ndarray, where: str | Path, what: str) -> np.ndarray:
    """``values`` as read, when they are numbers (pandas keeps a column with text in it as objects,
    which fail later at a conversion far from the file).

    Raises:
        DatasetError: Naming ``where``, what was expected and the first non-number.
    """
    if values.dtype.kind in "biuf":
        return values
    for value in values.ravel():  # a column with text in it holds its numbers as text too
        try:
            float(value)
        except (TypeError, ValueError):
            raise DatasetError(where, f"{what} must be numbers, found {str(value)[:40]!r}") from None
    return values.astype(np.float64)


def read_csv(path: Path, blank_is_missing: bool = False) -> np.ndarray:
    """A headerless gzipped CSV of OGB's raw layout as an array (:class:`DatasetError` naming the file);
    with ``blank_is_missing`` a blank line is a row of NaN (a one-column label file's missing label)
    rather than skipped."""
    import pandas as pd

    if not path.is_file():
        raise DatasetError(path, "missing")
    with _csv_errors(path):
        return pd.read_csv(path, compression="gzip", header=None, skip_blank_lines=not blank_is_missing).values


def csv_chunks(path: Path, rows: int, where: Path | None = None, ogb: bool = False,
               convert: Callable[[np.ndarray], np.ndarray] | None = None) -> Iterator[np.ndarray]:
    """:func:`read_csv` in pieces: the values of ``rows`` lines at a time (the same parsing, chunk by chunk).

    Args:
        path: The file.
        rows: Lines per chunk.
        where: What a read error names (default ``path``).
        ogb: The file is one OGB's own reader parses (edges, features, additional node files): its
            errors read as that reader's do (``unreadable raw CSV file``, conversion errors included).
        convert: Applied to each chunk where read errors are caught (a conversion to numbers fails
            on text in the file).
    """
    import pandas as pd

    if not path.is_file():
        raise DatasetError(path, "missing")
    problem, also = ("unreadable raw CSV file", (ValueError,)) if ogb else ("unreadable CSV", ())
    with _csv_errors(path, where, problem, also), \
            pd.read_csv(path, compression="gzip", header=None, chunksize=rows) as reader:
        for frame in reader:
            yield frame.values if convert is None else convert(frame.values)


def read_split(split_dir: Path, chunk_rows: int | None = None) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """A split scheme's ``train``/``valid``/``test`` index arrays (CSV files, or DatasetSaver's
    ``split_dict.pt``), and the file each came from; with ``chunk_rows``, each CSV file is parsed
    that many lines at a time (:func:`csv_chunks`)."""
    pt = split_dir / "split_dict.pt"
    if not (split_dir / "train.csv.gz").exists() and pt.is_file():
        return _read_split_pt(pt), {name: str(pt) for name in SPLITS}
    split, files = {}, {}
    for name in SPLITS:
        path = split_dir / f"{name}.csv.gz"
        values = read_csv(path) if chunk_rows is None else np.concatenate(list(csv_chunks(path, chunk_rows)))
        if values.ndim != 2 or values.shape[1] != 1 or values.dtype.kind not in "iu":
            raise DatasetError(path, "expected one integer node index per line")
        split[name], files[name] = values[:, 0].astype(np.int64), str(path)
    return split, files


@contextlib.contextmanager
def _no_objects(path: Path) -> Iterator[None]:
    """numpy's refusal of an object (pickled) member, as one line naming the file."""
    try:
        yield
    except ValueError as err:
        if "allow_pickle" not in str(err):
            raise
        raise DatasetError(path, "holds Python objects (a pickle, which gnnkit never loads); expected numeric "
                                 "arrays") from None


def _read_split_pt(path: Path) -> dict[str, np.ndarray]:
    """``split_dict.pt`` as DatasetSaver writes it, loaded with the weights-only unpickler."""
    loaded = load_pt(path)
    if not isinstance(loaded, dict):
        raise DatasetError(path, "expected a dict with train/valid/test")
    if missing := [name for name in SPLITS if name not in loaded]:
        raise DatasetError(path, f"expected a dict with train/valid/test, missing {missing}")
    return {name: as_ids(loaded[name], path, name).reshape(-1) for name in SPLITS}



#: Per-edge and per-node files of the CSV layout (besides ``node_*`` additional node files).
EDGE_FILES = ("edge.csv.gz", "edge-feat.csv.gz")
NODE_FILES = ("node-feat.csv.gz", "node-label.csv.gz")


#: Digits of the longest id read without a second look (int64 holds every 18-digit number).
MAX_ID_DIGITS = 18
#: The bytes of a CSV file holding only non-negative integers written as such.
INTEGER_CSV_BYTES = b"0123456789,\r\n"


def count_lines(path: Path, pairs: bool = False) -> int:
    """Lines of a gzipped text file (a last line without a newline counts; trailing blank lines do not).

    Streams the decompressed bytes, so memory stays at one chunk whatever the file's size.

    Args:
        path: The file.
        pairs: The file holds a ``src,dst`` pair of node ids a line (an edge list), which OGB's reader
            casts to int64: ``1.7`` would be cut to ``1``, an empty field become ``-2**63`` and a
            third column or a 20-digit id fail deep inside it. Any byte besides digits, commas and
            line ends, an empty field, a field of more than 18 digits or a comma count other than
            one a line makes :func:`check_id_pairs` parse the file.
    """
    lines, trailing, last, commas, other_bytes = 0, 0, b"\n", 0, False
    try:
        with gzip.open(path, "rb") as handle:
            while chunk := handle.read(1 << 24):
                if pairs:
                    other_bytes = other_bytes or _not_plain_integers(chunk, last)
                    commas += chunk.count(b",")
                lines += chunk.count(b"\n")
                stripped = chunk.rstrip(b"\r\n")
                run = chunk[len(stripped):].count(b"\n")
                trailing = trailing + run if not stripped else run
                last = chunk[-1:]
    except (OSError, EOFError, zlib.error) as err:
        raise DatasetError(path, f"unreadable gzip file ({err})") from None
    if last != b"\n":
        lines += 1
    elif lines:
        lines -= max(0, trailing - 1)  # "a\n\n\n" is one line followed by blank ones
    if pairs and (other_bytes or last == b"," or commas != lines):
        check_id_pairs(path)
    return lines


def _not_plain_integers(chunk: bytes, before: bytes) -> bool:
    """``chunk`` (following the byte ``before``) holds more than integers: another byte, or an empty
    field, which pandas reads as NaN and OGB's reader casts to a huge negative id."""
    if chunk.translate(None, INTEGER_CSV_BYTES):
        return True
    text = np.frombuffer(before + chunk, dtype=np.uint8)
    separator = text < ord("0")  # a comma or a line end, the only other bytes left
    pairs = np.flatnonzero(separator[:-1] & separator[1:])  # "\r\n" and blank lines, or an empty field
    if ((text[pairs] == ord(",")) | (text[pairs + 1] == ord(","))).any():
        return True
    ends = np.flatnonzero(separator)
    return bool(np.diff(ends, prepend=-1, append=text.size).max() > MAX_ID_DIGITS + 1)  # a field and its end


def check_id_pairs(path: Path, rows: int = 1 << 20) -> None:
    """Every line of a headerless gzipped CSV is two whole numbers (``3`` or ``3.0``, not ``3.5``).

    Raises:
        DatasetError: Naming the file and, for a value that is not a whole number, the row and value.
    """
    done = 0
    for values in csv_chunks(path, rows, convert=lambda v: numeric(v, path, "node ids")):
        if values.shape[1] != 2:
            raise DatasetError(path, f"expected two node ids a line (src,dst), found {values.shape[1]}")
        ids = whole(values) if values.dtype.kind == "f" else None
        if ids is not None and not ids.all():
            row, col = (int(i[0]) for i in np.nonzero(~ids))
            raise DatasetError(path, f"node ids must be whole numbers, found {values[row, col].item()!r} in row "
                                     f"{done + row + 1}")
        if values.dtype.kind in "uf" and (huge := np.abs(values) >= 2.0**63).any():
            row = int(np.flatnonzero(huge.any(axis=1))[0])
            raise DatasetError(path, f"node id {values[row][huge[row]][0]:.0f} in row {done + row + 1} does not fit "
                                     "in 64 bits; expected ids in [0, number of nodes)")
        done += values.shape[0]


def _npz_rows(headers: dict[str, Any]) -> dict[str, int]:
    """First-dimension length of every array of an ``.npz`` (edges for ``edge_index``), from its
    members' headers (:func:`pipeline.npz_stream.member_headers`)."""
    return {name: (header.shape[1] if name == "edge_index" and len(header.shape) == 2 else header.rows)
            for name, header in headers.items()}


def _npz_total(path: Path, npz: Any, key: str, what: str) -> int:
    """The sum of a binary layout's count list, after checking it is one 1-D list of counts."""
    counts = npz[key]
    if counts.ndim != 1 or counts.dtype.kind not in "iu" or (counts < 0).any():
        raise DatasetError(path, f"'{key}' must be a 1-D list of non-negative integer {what} counts, got dtype "
                                 f"{counts.dtype} and shape {list(counts.shape)}")
    return int(counts.sum())


def _declared_total(path: Path, what: str) -> int:
    values = read_csv(path)
    if values.ndim != 2 or values.shape[1] != 1 or values.dtype.kind not in "iu" or (values < 0).any():
        raise DatasetError(path, f"expected one non-negative integer {what} count per line")
    return int(values.sum())


def _mismatch(path: Path, found: int, unit: str, declared: int, source: str) -> DatasetError:
    return DatasetError(
        path, f"has {found} {unit}, but {source} says {declared} (expected exactly one per "
        f"{'edge' if 'edge' in source else 'node'})"
    )


def check_row_counts(raw_dir: Path, meta: dict[str, Any]) -> None:
    """Every per-node and per-edge raw file must have exactly as many rows as declared.

    CSV layout: the line counts of ``edge.csv.gz`` (and ``edge-feat.csv.gz`` and the additional edge
    files) must equal the sum of ``num-edge-list.csv.gz``; those of ``node-feat.csv.gz``, ``node-label.csv.gz`` and the
    additional ``node_*`` files the sum of ``num-node-list.csv.gz``. Binary layout: the arrays of
    ``data.npz`` and ``node-label.npz`` against ``num_edges_list``/``num_nodes_list``.

    Args:
        raw_dir: The ``raw/`` folder.
        meta: Normalised meta dict (:func:`normalise_meta`).

    Raises:
        DatasetError: Naming the file, its row count and the declared count.
    """
    if meta["binary"]:
        data = raw_dir / "data.npz"
        headers = member_headers(data)
        rows = _npz_rows(headers)
        if "num_nodes_list" not in rows or "num_edges_list" not in rows:
            raise DatasetError(data, "expected arrays 'num_nodes_list' and 'num_edges_list'")
        if "edge_index" in rows and (kind := headers["edge_index"].dtype).kind not in "iu":
            raise DatasetError(data, f"'edge_index' must hold integer node ids, got dtype {kind}")
        with np.load(data, allow_pickle=False) as npz, _no_objects(data):
            nodes, edges = (_npz_total(data, npz, f"num_{what}s_list", what) for what in ("node", "edge"))
        for key, found in rows.items():  # edge_index, edge_feat, node_feat and additional files (edge_weight)
            if key.startswith(("edge_", "node_")):
                declared, unit, source = ((edges, "edges" if key == "edge_index" else "rows", "num_edges_list")
                                          if key.startswith("edge_") else (nodes, "rows", "num_nodes_list"))
                if found != declared:
                    raise _mismatch(data, found, f"{unit} in '{key}'", declared, f"'{source}'")
        labels = raw_dir / "node-label.npz"
        if labels.is_file():
            found = _npz_rows(member_headers(labels)).get("node_label")
            if found is not None and found != nodes:
                raise _mismatch(labels, found, "rows in 'node_label'", nodes, "data.npz 'num_nodes_list'")
        return
    edge_list, node_list = raw_dir / "num-edge-list.csv.gz", raw_dir / "num-node-list.csv.gz"
    edges, nodes = _declared_total(edge_list, "edge"), _declared_total(node_list, "node")
    checks = [(raw_dir / name, edges, edge_list) for name in EDGE_FILES]
    node_names = [*NODE_FILES, *(f"{f}.csv.gz" for f in meta["additional_node_files"])]
    checks += [(raw_dir / name, nodes, node_list) for name in node_names]
    for path, declared, source in checks:
        if path.is_file() and (found := count_lines(path, pairs=path.name == "edge.csv.gz")) != declared:
            raise _mismatch(path, found, "lines", declared, source.name)
    for name in meta.get("additional_edge_files", ()):  # ogbl-collab's edge_weight, edge_year
        path = raw_dir / f"{name}.csv.gz"
        if not path.is_file():
            raise DatasetError(path, "missing (listed in 'additional edge files')")
        if (found := count_lines(path)) != edges:  # edges: edge.csv.gz's lines, checked above
            raise DatasetError(path, f"has {found} lines, but edge.csv.gz has {edges} (expected one per edge)")


def check_raw_folder(raw_dir: Path, meta: dict[str, Any]) -> None:
    """The graph files a ``raw/`` folder needs are there (``data.npz``, or the edge list and the
    count lists) and every per-node and per-edge file has as many rows as declared
    (:func:`check_row_counts`); the in-memory and the out-of-core reader both start with it."""
    if meta["binary"]:
        data = raw_dir / "data.npz"
        if not data.is_file():
            raise DatasetError(data, "missing (meta.json says 'binary': True)")
        if meta["add_inverse_edge"]:
            raise DatasetError(data, "binary layout cannot use add_inverse_edge")
    else:
        for name in ("edge.csv.gz", "num-node-list.csv.gz", "num-edge-list.csv.gz"):
            if not (raw_dir / name).is_file():
                raise DatasetError(raw_dir / name, "missing")
    check_declared_features(raw_dir, meta)
    check_row_counts(raw_dir, meta)


def check_declared_features(raw_dir: Path, meta: dict[str, Any]) -> None:
    """The feature files ``meta.json`` declares (``has_node_attr``/``has_edge_attr`` True) are there:
    OGB's reader skips a missing one, and the graph trained featureless without a word."""
    for key, name, member in (("has_node_attr", "node-feat.csv.gz", "node_feat"),
                              ("has_edge_attr", "edge-feat.csv.gz", "edge_feat")):
        if not (meta.get(key) and key in meta.get("ogb_meta", {key: True})):  # declared, not defaulted
            continue
        if meta["binary"]:
            if member not in member_headers(raw_dir / "data.npz"):
                raise DatasetError(raw_dir / "data.npz", f"expected an array named '{member}' (meta.json says "
                                                         f"'{key}': True)")
        elif not (raw_dir / name).is_file():
            raise DatasetError(raw_dir / name, f"missing (meta.json says '{key}': True)")


def label_file(raw_dir: Path, meta: dict[str, Any]) -> Path:
    """The node-label file of a node folder: ``node-label.npz`` (holding ``node_label``) or
    ``node-label.csv.gz``, as ``meta["binary"]`` says; a missing one is a :class:`DatasetError`."""
    path = raw_dir / ("node-label.npz" if meta["binary"] else "node-label.csv.gz")
    if not path.is_file():
        raise DatasetError(path, "missing")
    if meta["binary"] and "node_label" not in member_headers(path):
        raise DatasetError(path, "expected an array named 'node_label'")
    return path


def read_raw_graphs(raw_dir: Path, meta: dict[str, Any], additional_node_files: list[str] | tuple = (),
                    additional_edge_files: list[str] | tuple = ()) -> list[dict[str, Any]]:
    """Every graph of a ``raw/`` folder through OGB's raw readers (CSV or binary layout, as
    ``meta["binary"]`` says), after checking the row count of every per-node and per-edge file;
    every problem is a :class:`DatasetError` naming the file."""
    import pandas as pd
    from ogb.io.read_graph_raw import read_binary_graph_raw, read_csv_graph_raw

    check_raw_folder(raw_dir, meta)
    if meta["binary"]:
        try:
            with quiet_readers():
                return read_binary_graph_raw(str(raw_dir))
        except (KeyError, ValueError, RuntimeError, OSError) as err:
            raise DatasetError(raw_dir / "data.npz", f"unreadable ({err})") from None
    try:
        with quiet_readers():
            return read_csv_graph_raw(str(raw_dir), add_inverse_edge=meta["add_inverse_edge"],
                                      additional_node_files=list(additional_node_files),
                                      additional_edge_files=list(additional_edge_files))
    except (pd.errors.ParserError, ValueError, OverflowError, OSError, EOFError) as err:
        raise _unreadable_file(raw_dir, err) from None


def ogb_values(values: np.ndarray) -> np.ndarray:
    """OGB's conversion of a node or edge CSV file: integer columns to int64, anything else to float32."""
    return values.astype(np.int64) if "int" in str(values.dtype) else values.astype(np.float32)


def _unreadable_file(raw_dir: Path, err: BaseException) -> DatasetError:
    """The error of the raw file OGB's reader failed on (its own error names no file), found by
    parsing each as it does; ``raw/`` itself when none fails alone."""
    for path in sorted(raw_dir.glob("*.csv.gz")):
        try:
            for _ in csv_chunks(path, 1 << 20, ogb=True, convert=ogb_values):
                pass
        except DatasetError as found:
            return found
    return DatasetError(raw_dir, f"unreadable raw CSV files ({str(err).splitlines()[0]})")


def _read_graph(raw_dir: Path, meta: dict[str, Any]) -> dict[str, Any]:
    extra = [f for f in meta["additional_node_files"] if (raw_dir / f"{f}.csv.gz").exists()]
    return read_raw_graphs(raw_dir, meta, additional_node_files=extra)[0]


def read_ogb_folder(folder: Path, meta: dict[str, Any]) -> RawGraph:
    """Read an OGB node-property folder with OGB's raw readers.

    Args:
        folder: The dataset folder (holding ``raw/`` and ``split/``).
        meta: Normalised meta dict (:func:`normalise_meta`).

    Returns:
        The raw graph; validation against the canonical contract happens in canonicalisation.
    """
    raw_dir = folder / "raw"
    graph = _read_graph(raw_dir, meta)
    files = {
        "nodes": raw_file(raw_dir, meta, "num-node-list.csv.gz"),
        "edges": raw_file(raw_dir, meta, "edge.csv.gz"),
        "features": raw_file(raw_dir, meta, "node-feat.csv.gz"),
    }
    label_path = label_file(raw_dir, meta)
    if meta["binary"]:
        with np.load(label_path, allow_pickle=False) as npz, _no_objects(label_path):
            labels = npz["node_label"]
    else:
        labels = read_csv(label_path)
    files["labels"] = str(label_path)
    split, split_files = read_split(folder / "split" / meta["split"])
    files.update({f"split.{k}": v for k, v in split_files.items()})
    extra = {
        k: np.asarray(v) for k, v in graph.items()
        if k.startswith("node_") and k != "node_feat" and v is not None
    }
    return RawGraph(
        edge_index=np.asarray(graph["edge_index"], dtype=np.int64),
        num_nodes=int(graph["num_nodes"]),
        node_feat=graph.get("node_feat"),
        labels=np.asarray(labels),
        split=split,
        meta=meta,
        files=files,
        extra=extra,
    )


def build(folder: Path, meta: dict[str, Any], options: Any, say: Any) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """Read a node-property folder and canonicalise it: the arrays and meta of its cache entry.

    Args:
        folder: The dataset folder.
        meta: Normalised meta dict (:func:`normalise_meta`).
        options: :class:`pipeline.options.PreprocessOptions`.
        say: Progress callback.
    """
    from pipeline.canonicalize import canonicalize  # only for a build: a cache hit needs no canonicaliser

    say(f"reading raw files from {folder}")
    return canonicalize(read_ogb_folder(folder, meta), options, say)


def to_csv_gz(path: Path, array: np.ndarray, float_format: str | None = None) -> None:
    import pandas as pd

    frame = pd.DataFrame(array.reshape(array.shape[0], -1) if array.size else array.reshape(0, 1))
    frame.to_csv(
        path,
        header=False,
        index=False,
        float_format=float_format,
        compression={"method": "gzip", "compresslevel": 1, "mtime": 0},
    )


def write_ogb_folder(
    folder: Path,
    *,
    edge_index: np.ndarray,
    num_nodes: int,
    labels: np.ndarray,
    split: dict[str, np.ndarray],
    meta: dict[str, Any],
    node_feat: np.ndarray | None = None,
    binary: bool = False,
    extra: dict[str, np.ndarray] | None = None,
    say: Callable[[str], None] | None = None,
) -> Path:
    """Write a dataset in OGB's raw layout, atomically (owned temp folder, then rename).

    Args:
        folder: Destination; must not exist yet.
        edge_index: ``[2, E]`` edges as stored (without the inverse edges OGB adds on read).
        num_nodes: N.
        labels: ``[N]`` or ``[N, T]`` labels.
        split: ``train``/``valid``/``test`` index arrays; written to ``split/<meta['split']>/``.
        meta: OGB meta_dict (``"num tasks"``, ``"eval metric"``, ...); ``binary`` and
            ``has_node_attr`` are filled in from the arguments.
        node_feat: Optional ``[N, F]`` features.
        binary: Write ``data.npz``/``node-label.npz`` instead of CSV files.
        extra: Additional node arrays (``node_year``: ``data.npz`` members, or ``raw/<name>.csv.gz``
            files; ``meta["additional node files"]`` should name them).
        say: Progress callback, told each large CSV file before it is written (minutes for a twin).

    Returns:
        ``folder``.
    """
    folder = Path(folder)
    with published_folder(folder) as tmp:  # also removes stale temps of killed writers beside it
        raw = write_raw_graph(tmp, edge_index, num_nodes, node_feat, binary, extra, say=say)
        labels = np.asarray(labels).reshape(num_nodes, -1)
        if binary:
            save_npz(raw / "node-label.npz", {"node_label": labels})
        else:
            to_csv_gz(raw / "node-label.csv.gz", labels)
        write_split_and_meta(tmp, split, meta, binary, node_feat is not None)
    return folder


def write_raw_graph(folder: Path, edge_index: np.ndarray, num_nodes: int | np.ndarray,
                    node_feat: np.ndarray | None = None, binary: bool = False,
                    extra: dict[str, np.ndarray] | None = None, float_format: str = "%.6g",
                    num_edges: np.ndarray | None = None, edge_feat: np.ndarray | None = None,
                    compressed: bool = False, say: Callable[[str], None] | None = None) -> Path:
    """Write a graph's (or a set of graphs') ``raw/`` files into a dataset folder being written, as
    OGB's readers take them.

    Args:
        folder: The (temporary) dataset folder; ``raw/`` is made in it.
        edge_index: ``[2, E]`` edges as stored (without the inverse edges OGB adds on read); for a
            set of graphs each graph's edges in turn, with its own node ids.
        num_nodes: N, or the node count of each graph.
        node_feat: Optional ``[N, F]`` features (all graphs' nodes in turn).
        binary: ``raw/data.npz`` instead of CSV files.
        extra: Additional node or edge arrays (``data.npz`` members, or ``raw/<name>.csv.gz``).
        float_format: How CSV features are printed.
        num_edges: The edge count of each graph (default: one graph of all edges).
        edge_feat: Optional ``[E, D]`` edge features, in ``edge_index``'s order.
        compressed: Deflate ``data.npz``'s members (``numpy.savez_compressed``): for sets of small
            graphs, whose ids and one-hot features shrink ~35x and are read whole; a large graph's
            members stay stored, for reading in chunks.
        say: Progress callback, told the edge and feature CSV files before each is written.

    Returns:
        The ``raw/`` folder.
    """
    raw = folder / "raw"
    raw.mkdir()
    edge_index = np.asarray(edge_index, dtype=np.int64)
    num_nodes_list = np.asarray(num_nodes, dtype=np.int64).reshape(-1)
    num_edges_list = np.asarray([edge_index.shape[1]] if num_edges is None else num_edges, dtype=np.int64)
    features = {"node_feat": node_feat, "edge_feat": edge_feat}
    if binary:
        arrays = {"edge_index": edge_index, "num_nodes_list": num_nodes_list, "num_edges_list": num_edges_list,
                  **{name: values for name, values in features.items() if values is not None}}
        save_npz(raw / "data.npz", {**arrays, **(extra or {})}, compressed)
        return raw
    tell = say or (lambda message: None)
    tell(f"writing edge.csv.gz ({edge_index.shape[1]:,} rows)")
    to_csv_gz(raw / "edge.csv.gz", edge_index.T)
    to_csv_gz(raw / "num-node-list.csv.gz", num_nodes_list)
    to_csv_gz(raw / "num-edge-list.csv.gz", num_edges_list)
    for name, values in features.items():
        if values is not None:
            fmt = float_format if values.dtype.kind == "f" else None
            tell(f"writing {name.replace('_', '-')}.csv.gz ({len(values):,} rows)")
            to_csv_gz(raw / f"{name.replace('_', '-')}.csv.gz", values, float_format=fmt)
    for name, values in (extra or {}).items():
        to_csv_gz(raw / f"{name}.csv.gz", values)
    return raw


def write_split_and_meta(folder: Path, split: dict[str, np.ndarray], meta: dict[str, Any], binary: bool,
                         has_node_attr: bool) -> None:
    """Write ``split/<meta['split']>/{train,valid,test}.csv.gz`` and ``meta.json`` (with ``binary``
    and ``has_node_attr`` filled in) into a dataset folder being written."""
    split_dir = folder / "split" / str(meta["split"])
    split_dir.mkdir(parents=True)
    for name in SPLITS:
        to_csv_gz(split_dir / f"{name}.csv.gz", np.asarray(split[name], dtype=np.int64))
    full_meta = dict(meta)
    full_meta.update(binary=str(binary), has_node_attr=str(has_node_attr))
    (folder / "meta.json").write_text(json.dumps(full_meta, indent=2) + "\n")
