"""Chunked readers of OGB's raw node-property layout: the out-of-core build's input.

OGB's readers (``ogb.io.read_graph_raw``) load whole files: ``pandas.read_csv`` of the entire edge
list and feature matrix, ``numpy.load`` of each ``data.npz`` member. The in-memory build keeps using
them (:func:`pipeline.ogb_layout.read_ogb_folder`); the out-of-core build cannot, so
:class:`RawNodeChunks` reads the same files piece by piece, with the same parsing:

* CSV layout: ``pandas.read_csv(header=None, chunksize=...)`` of ``edge.csv.gz`` (cast to int64),
  ``node-feat.csv.gz`` and the additional ``node_*.csv.gz`` files (integer columns int64, others
  float32, as OGB converts them), ``node-label.csv.gz`` and the split files (as
  :func:`pipeline.ogb_layout.read_csv` parses them);
* binary layout: ``data.npz`` (``edge_index``, ``node_feat``, extra ``node_*`` arrays, the count
  lists) and ``node-label.npz``, each member streamed from the zip (:mod:`pipeline.npz_stream`).

As OGB's readers do, only the first graph of the count lists is read (a node dataset has one), and
the folder is first checked as the in-memory reader checks it
(:func:`pipeline.ogb_layout.check_raw_folder`: files present, row counts as declared). Read errors
are the in-memory path's one-line :class:`DatasetError`\\s; validating the values against the
canonical-graph contract is the caller's, chunk by chunk.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.errors import DatasetError
from pipeline.npz_stream import MemberHeader, NpzReader
from pipeline.ogb_layout import (check_raw_folder, csv_chunks, label_file, numeric, ogb_values, raw_file, read_csv,
                                 read_split)

#: data.npz members that are neither node nor edge arrays (OGB's binary reader).
COUNT_MEMBERS = ("edge_index", "num_nodes_list", "num_edges_list")


def _as_int64(values: np.ndarray) -> np.ndarray:
    return values.astype(np.int64)


def _rows(chunks: Iterator[np.ndarray], limit: int) -> Iterator[np.ndarray]:
    """The first ``limit`` rows of a chunk stream (OGB slices node and edge arrays to graph 0)."""
    done = 0
    for chunk in chunks:
        if done >= limit:
            return
        part = chunk[: limit - done]
        done += part.shape[0]
        yield part


class RawNodeChunks:
    """A node-property folder in OGB's raw layout, read in chunks (see the module docstring).

    Args:
        folder: The dataset folder (``raw/``, ``split/``).
        meta: Normalised meta (:func:`pipeline.ogb_layout.normalise_meta`).

    Attributes:
        num_nodes: N (of the first graph).
        num_edges: Edges of the first graph as stored (before OGB adds inverse edges).
        add_inverse_edge: Whether OGB's reader adds the reverse of every edge (CSV layout).
        files: What each part is read from, named as :class:`pipeline.ogb_layout.RawGraph` names
            them (``edges``, ``features``, ``labels``; ``split.*`` once :meth:`split` ran).
        feature_shape: ``[N, F]`` shape of the features as read, or ``None`` without features.
        label_shape: Shape of the labels as stored (the whole file, as the in-memory reader reads it).
        extras: Additional node arrays (``node_year``, ...): name -> shape as read.

    Raises:
        DatasetError: As :func:`pipeline.ogb_layout.check_raw_folder` and OGB's readers would.
    """

    def __init__(self, folder: Path, meta: dict[str, Any]) -> None:
        self.folder = Path(folder)
        self.meta = meta
        self.raw_dir = self.folder / "raw"
        check_raw_folder(self.raw_dir, meta)
        self.binary = bool(meta["binary"])
        self.add_inverse_edge = bool(meta["add_inverse_edge"])
        self.data = self.raw_dir / "data.npz"
        self.label_path = label_file(self.raw_dir, meta)
        if self.binary:
            self._open_binary()
        else:
            self._open_csv()
        self.files = {"nodes": raw_file(self.raw_dir, meta, "num-node-list.csv.gz"), "edges": str(self.edge_file),
                      "features": str(self.feature_file), "labels": str(self.label_path)}

    # -- layout-specific set-up -------------------------------------------------------------------

    def _first_graph(self, nodes: np.ndarray, edges: np.ndarray, where: Path) -> None:
        if nodes.size == 0 or edges.size == 0:
            raise DatasetError(where, "holds no graph; expected one")
        self.num_nodes, self.num_edges = int(nodes.reshape(-1)[0]), int(edges.reshape(-1)[0])

    def _open_binary(self) -> None:
        self.edge_file = self.feature_file = self.data
        with NpzReader(self.data) as npz:
            for name in npz.names():
                if name not in COUNT_MEMBERS and name[:5] not in ("node_", "edge_"):
                    raise DatasetError(self.data, "unreadable (Keys in graph object should start from either "
                                                  f"'node_' or 'edge_', but found '{name}'.)")
            if "edge_index" not in npz:
                raise DatasetError(self.data, "unreadable ('edge_index is not a file in the archive')")
            self._headers = {name: npz.header(name) for name in npz.names()}
        with np.load(self.data, allow_pickle=False) as npz:  # two tiny members; the rest stays on disk
            self._first_graph(npz["num_nodes_list"], npz["num_edges_list"], self.data)
        feat = self._headers.get("node_feat")
        self.feature_shape = None if feat is None else (min(feat.rows, self.num_nodes), *feat.shape[1:])
        with NpzReader(self.label_path) as npz:
            self._label_header = npz.header("node_label")
        self.label_shape = self._label_header.shape
        self.extras = {name: (min(h.rows, self.num_nodes), *h.shape[1:]) for name, h in self._headers.items()
                       if name.startswith("node_") and name != "node_feat"}

    def _open_csv(self) -> None:
        self.edge_file = self.raw_dir / "edge.csv.gz"
        self.feature_file = self.raw_dir / "node-feat.csv.gz"
        nodes = read_csv(self.raw_dir / "num-node-list.csv.gz").astype(np.int64)
        edges = read_csv(self.raw_dir / "num-edge-list.csv.gz").astype(np.int64)
        self._first_graph(nodes[:, 0], edges[:, 0], self.raw_dir / "num-node-list.csv.gz")
        self._total_nodes = int(nodes[:, 0].sum())
        self.feature_shape = None
        if self.feature_file.is_file():
            self.feature_shape = (self.num_nodes, self._csv_width(self.feature_file, ogb=True))
        self.label_shape = (self._total_nodes, self._csv_width(self.label_path))
        names = [f for f in self.meta["additional_node_files"] if (self.raw_dir / f"{f}.csv.gz").exists()]
        self.extras = {name: (self.num_nodes, self._csv_width(self._extra_file(name), ogb=True)) for name in names}
        self._extra_dtypes: dict[str, np.dtype] = {}

    def _csv_width(self, path: Path, ogb: bool = False) -> int:
        """Columns of a CSV file, from its first line."""
        first = next(csv_chunks(path, 1, ogb=ogb), None)
        return 0 if first is None else int(first.shape[1])

    def _extra_file(self, name: str) -> Path:
        return self.raw_dir / f"{name}.csv.gz"

    def _fortran_refused(self, path: Path, name: str, header: MemberHeader) -> None:
        if header.fortran and len(header.shape) > 1 and int(np.prod(header.shape[1:])) > 1:
            raise DatasetError(path, f"array '{name}' is stored in Fortran order, which cannot be read in row "
                                     "chunks; expected C order (re-save it with numpy.ascontiguousarray)")

    def _npz_rows(self, path: Path, name: str, header: MemberHeader, rows: int, chunk: int) -> Iterator[np.ndarray]:
        """The first ``rows`` rows of an npz member, ``chunk`` rows at a time, shaped ``[r, *rest]``."""
        self._fortran_refused(path, name, header)
        rest = header.shape[1:]
        width = int(np.prod(rest, dtype=np.int64)) if rest else 1
        with NpzReader(path) as npz:
            for values in npz.chunks(name, 0, rows * width, max(1, chunk) * width):
                yield values.reshape(-1, *rest)

    # -- chunked parts ------------------------------------------------------------------------------

    def edges(self, chunk: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """``(src, dst)`` int64 arrays of up to ``chunk`` stored edges each, in file order.

        Raises:
            DatasetError: The edges are not ``[2, E]`` (named as the in-memory check names it).
        """
        where = self.files["edges"]
        if not self.binary:
            chunks = csv_chunks(self.edge_file, chunk, ogb=True, convert=_as_int64)
            for values in _rows(chunks, self.num_edges):
                if values.shape[1] != 2:
                    shape = [values.shape[1], self.num_edges]
                    raise DatasetError(where, f"expected edges of shape [2, E], got {shape}")
                yield values[:, 0], values[:, 1]
            return
        header = self._headers["edge_index"]
        if len(header.shape) != 2 or header.shape[0] != 2:
            shape = list(header.shape)
            if len(shape) == 2:
                shape[1] = min(shape[1], self.num_edges)
            raise DatasetError(where, f"expected edges of shape [2, E], got {shape}")
        count, total = min(self.num_edges, header.shape[1]), header.shape[1]
        with NpzReader(self.data) as npz:
            if header.fortran:  # (src, dst) pairs stored next to each other
                for values in npz.chunks("edge_index", 0, 2 * count, 2 * chunk):
                    pairs = values.reshape(-1, 2).astype(np.int64)
                    yield pairs[:, 0], pairs[:, 1]
                return
            sources = npz.chunks("edge_index", 0, count, chunk)
            targets = npz.chunks("edge_index", total, count, chunk)  # row 1 starts after all of row 0
            for src, dst in zip(sources, targets):
                yield src.astype(np.int64), dst.astype(np.int64)

    def features(self, chunk: int) -> Iterator[np.ndarray]:
        """Feature rows ``chunk`` at a time, as OGB's reader types them (cast to float32 by the caller)."""
        if self.feature_shape is None:
            return
        if not self.binary:
            chunks = csv_chunks(self.feature_file, chunk, ogb=True, convert=ogb_values)
            yield from _rows(chunks, self.num_nodes)
            return
        yield from self._npz_rows(self.data, "node_feat", self._headers["node_feat"], self.feature_shape[0], chunk)

    def labels(self, chunk: int) -> Iterator[np.ndarray]:
        """Label rows ``chunk`` at a time, as stored (the whole file, as the in-memory reader reads it)."""
        if not self.binary:
            yield from csv_chunks(self.label_path, chunk, convert=lambda v: numeric(v, self.label_path, "labels"))
            return
        header = self._label_header
        yield from self._npz_rows(self.label_path, "node_label", header, header.rows, chunk)

    def extra_dtype(self, name: str) -> np.dtype:
        """The dtype an additional node array is read as (CSV: one pass decides int64 or float32)."""
        if self.binary:
            return self._headers[name].dtype.newbyteorder("=")
        if name not in self._extra_dtypes:
            kinds = {ogb_values(v[:1]).dtype for v in csv_chunks(self._extra_file(name), 1 << 20, ogb=True)}
            self._extra_dtypes[name] = np.dtype(np.float32 if np.dtype(np.float32) in kinds else np.int64)
        return self._extra_dtypes[name]

    def extra(self, name: str, chunk: int) -> Iterator[np.ndarray]:
        """Rows of an additional node array (``node_year``, ...) ``chunk`` at a time, of :meth:`extra_dtype`."""
        dtype = self.extra_dtype(name)
        if self.binary:
            header = self._headers[name]
            for values in self._npz_rows(self.data, name, header, self.extras[name][0], chunk):
                yield values.astype(dtype)
            return
        chunks = csv_chunks(self._extra_file(name), chunk, ogb=True, convert=ogb_values)
        for values in _rows(chunks, self.num_nodes):
            yield values.astype(dtype)

    def split(self, chunk: int) -> dict[str, np.ndarray]:
        """The split index arrays (each CSV file parsed ``chunk`` lines at a time); records their files."""
        split, files = read_split(self.folder / "split" / self.meta["split"], chunk_rows=chunk)
        self.files.update({f"split.{k}": v for k, v in files.items()})
        return split
