"""Named arrays out of a user's graph: a ``.pt`` or ``.npz`` file, a PyG ``Data``, a mapping.

What ``gnnkit import`` reads (:mod:`pipeline.node_graph_import` says what the names mean):

* a ``.pt`` file of ``torch.save(data.to_dict(), path)``, or the ``processed/data.pt`` of a one-graph
  PyG ``InMemoryDataset``, loaded weights-only (:func:`pipeline.safe_pt.load_pt`: a pickled ``Data``
  object is refused, never unpickled);
* an ``.npz`` file of plain arrays (``numpy.load(allow_pickle=False)``);
* in Python, a ``Data`` or any mapping of names to tensors, arrays or lists.

A graph without ``edge_index`` whose adjacency is a sparse matrix, as PyG's ``T.ToSparseTensor()``
leaves it (``adj_t``, the transposed adjacency: a torch sparse CSR tensor, or in Python a
``torch_sparse.SparseTensor``), has its edges read from the matrix's non-zeros (the values, edge
weights, are not read) and its node count from the matrix's size.

Only the names asked for are converted (an unused sparse or bfloat16 attribute is left alone); a
nested ``{"train": ..., "valid": ..., "test": ...}`` mapping, as OGB's ``get_idx_split()`` returns,
becomes ``train_idx``/``valid_idx``/``test_idx``.
"""

from __future__ import annotations

import zipfile
import zlib
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.errors import DatasetError
from pipeline.ogb_layout import SPLITS
from pipeline.safe_pt import as_array, load_pt

#: The names of the index arrays a nested split mapping becomes.
SPLIT_IDS = {part: f"{part}_idx" for part in SPLITS}

#: The names edges are kept under as a list.
EDGE_NAMES = ("edge_index", "edges")

#: Names of a sparse adjacency matrix -> whether it is transposed (``adj_t[target, source]``, PyG's).
ADJACENCIES = {"adj_t": True, "adj": False}


def read_arrays(path: Path, names: Collection[str]) -> dict[str, np.ndarray]:
    """The arrays among ``names`` that a ``.pt`` or ``.npz`` file holds.

    Raises:
        DatasetError: A missing or unreadable file, another suffix, a pickled object, a file that
            holds several graphs or a heterogeneous one, or an array that cannot be read.
    """
    path = Path(path)
    if path.is_dir():
        hint = f"; PyG's processed file is {path / 'processed' / 'data.pt'}" if (path / "processed").is_dir() else ""
        raise DatasetError(path, f"a folder: expected a .pt or .npz file{hint}")
    if not path.is_file():
        raise DatasetError(path, "no such file")
    suffix = path.suffix.lower()
    if suffix == ".npz":
        return _read_npz(path, names)
    if suffix in (".pt", ".pth"):
        return named_arrays(_read_pt(path), names, str(path))
    raise DatasetError(path, "expected a .pt file (torch.save(data.to_dict(), path)) or an .npz file of arrays")


def _read_npz(path: Path, names: Collection[str]) -> dict[str, np.ndarray]:
    """The arrays among ``names`` in an ``.npz`` file, read without unpickling."""
    try:
        data = np.load(path, allow_pickle=False)
        if isinstance(data, np.lib.npyio.NpzFile):
            with data:
                return {name: data[name] for name in data.files if name in names}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile, zlib.error) as err:  # cut short, corrupt, objects
        raise DatasetError(path, f"not a readable npz file of plain arrays ({err})") from None
    raise DatasetError(path, "one array (an .npy file): expected an .npz of named arrays (numpy.savez)")


def load_weights_only(path: Path, save_as: str = "torch.save(data.to_dict(), path)") -> Any:
    """:func:`load_pt`, and once more with PyG's ``Data`` class allowed when a file names it (PyG's
    processed files do); importing PyG takes 3 s, so a file of plain tensors goes without.

    Args:
        path: The file.
        save_as: How the file should have been saved, said for pickled objects.
    """
    try:
        return load_pt(path)
    except DatasetError as err:
        if "UnpicklingError" not in err.problem:
            raise
    import torch_geometric.data  # noqa: F401  (allows PyG's Data class)

    try:
        return load_pt(path)
    except DatasetError as err:
        if "torch_sparse" in err.problem:
            hint = ("a torch_sparse.SparseTensor (T.ToSparseTensor with torch_sparse installed); save adj_t as a "
                    "torch sparse tensor, T.ToSparseTensor(layout=torch.sparse_csr), or the graph before the transform")
        elif path.name == "geometric_data_processed.pt":  # what the ogb package's PyG datasets write
            hint = ("an OGB dataset's processed file; gnnkit reads OGB's datasets by name (--data.dataset "
                    "ogbn-arxiv), from their raw files")
        else:
            hint = f"a pickled Data? save it with {save_as}"
        raise DatasetError(path, f"{err.problem}: {hint}") from None


def _read_pt(path: Path) -> Any:
    """A torch file's content, loaded weights-only; a PyG processed file's dict of its one graph."""
    content = load_weights_only(path)
    if not isinstance(content, (tuple, list)):
        return content
    if len(content) == 3 and isinstance(content[0], Mapping) and isinstance(content[2], type):  # InMemoryDataset.save
        graphs = graph_count(content[1])
        if graphs == 1:
            return content[0]
        raise DatasetError(path, f"a dataset of {graphs} graphs: for graph property prediction import it with "
                                 "--task graph (node and link prediction take one graph)")
    raise DatasetError(path, f"a {type(content).__name__} of {len(content)} items: expected one graph, a dict of "
                             "tensors (torch.save(data.to_dict(), path))")


def graph_count(slices: Any) -> int:
    """How many graphs a PyG processed file's ``slices`` cut its arrays into (``None``: one)."""
    if slices is None:
        return 1
    sizes = [len(s) for s in slices.values() if getattr(s, "ndim", 0) == 1] if isinstance(slices, Mapping) else []
    return max(sizes) - 1 if sizes else 1


def named_arrays(source: Any, names: Collection[str], where: str) -> dict[str, np.ndarray]:
    """The values among ``names`` that ``source`` (a PyG ``Data``, a mapping) holds, as numpy arrays.

    Raises:
        DatasetError: A heterogeneous graph, a source that is no mapping, or a value that cannot be
            read as an array (naming it).
    """
    if hasattr(source, "node_types") and hasattr(source, "edge_types"):  # a HeteroData
        raise DatasetError(where, f"a heterogeneous graph (node types {list(source.node_types)}); convert it "
                                  f"with HeteroData.to_homogeneous() first")
    if hasattr(source, "to_dict") and not isinstance(source, Mapping):
        source = source.to_dict()
    if not isinstance(source, Mapping):
        raise DatasetError(where, f"expected a dict of tensors (torch.save(data.to_dict(), path)), "
                                  f"got {type(source).__name__}")
    flat = dict(source)
    for value in source.values():  # OGB's get_idx_split(), kept beside the graph's arrays
        if isinstance(value, Mapping) and set(SPLITS) <= set(value):
            flat.update({SPLIT_IDS[part]: value[part] for part in SPLITS if SPLIT_IDS[part] not in source})
    if "edge_index" in names:
        flat.update(_adjacency_edges(flat, where))
    nested = [str(k) for k, v in source.items() if isinstance(v, Mapping) and not str(k).startswith("_")]
    if nested and not any(name in flat for name in EDGE_NAMES):
        raise DatasetError(where, f"a heterogeneous graph? its arrays are under {nested}, none is edge_index; "
                                  f"convert it with HeteroData.to_homogeneous() first")
    return {name: _array(flat[name], f"{where}: {name}") for name in names if name in flat}


def _adjacency_edges(arrays: Mapping[str, Any], where: str) -> dict[str, Any]:
    """``edge_index`` and ``num_nodes`` from a graph's sparse adjacency (:data:`ADJACENCIES`), when
    it has no edge list; nothing otherwise."""
    name = next((name for name in ADJACENCIES if name in arrays), None)
    if name is None or any(edges in arrays for edges in EDGE_NAMES):
        return {}
    matrix, at = arrays[name], f"{where}: {name}"
    if hasattr(matrix, "coo") and hasattr(matrix, "sparse_sizes"):  # a torch_sparse.SparseTensor
        shape, edges = tuple(matrix.sparse_sizes()), np.stack([_array(ids, at) for ids in matrix.coo()[:2]])
    elif hasattr(matrix, "to_sparse_coo"):  # a torch tensor, sparse (any layout) or dense
        shape, edges = tuple(matrix.shape), _array(matrix.detach().cpu().to_sparse_coo().coalesce().indices(), at)
    else:
        dense = _array(matrix, at)
        shape, edges = dense.shape, np.stack(np.nonzero(dense))
    if len(shape) != 2 or shape[0] != shape[1]:
        raise DatasetError(at, f"expected a square [N, N] adjacency matrix, got shape {list(shape)}")
    found = {"edge_index": edges[::-1].copy() if ADJACENCIES[name] else edges}
    return found if "num_nodes" in arrays else {**found, "num_nodes": np.int64(shape[0])}


def _array(value: Any, where: str) -> np.ndarray:
    """A tensor (sparse or bfloat16 too), array, list or number as a numpy array."""
    try:
        if hasattr(value, "detach"):  # a torch tensor, maybe sparse, on a GPU or needing grad
            import torch

            value = value.detach()
            if value.layout != torch.strided:
                value = value.to_dense()
            if value.dtype == torch.bfloat16 or str(value.dtype).startswith("torch.float8"):
                value = value.float()  # numpy has no such dtype
            value = value.cpu()
        array = as_array(value)
    except (TypeError, ValueError, RuntimeError, NotImplementedError) as err:
        raise DatasetError(where, f"cannot be read as an array ({type(err).__name__}: "
                                  f"{' '.join(str(err).split())[:150]})") from None
    if array.dtype.kind == "O":
        raise DatasetError(where, "cannot be read as an array (it holds Python objects)")
    return array
