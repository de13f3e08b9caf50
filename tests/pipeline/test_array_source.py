"""pipeline/array_source.py: the arrays asked for, out of .pt and .npz files and PyG objects, whatever
their tensors' layout or dtype; anything that is not one homogeneous graph is one line."""

from __future__ import annotations

import sys
import types

import numpy as np
import pytest
import torch
import torch_geometric.transforms as T
from torch_geometric.data import Data, HeteroData, InMemoryDataset

from pipeline.array_source import named_arrays, read_arrays
from pipeline.errors import DatasetError

NAMES = ("x", "edge_index", "y", "num_nodes", "train_idx", "valid_idx", "test_idx")


def _graph(seed: int = 0) -> Data:
    g = torch.Generator().manual_seed(seed)
    return Data(x=torch.randn(6, 3, generator=g), edge_index=torch.tensor([[0, 1], [1, 2]]), y=torch.arange(6) % 2)


def test_only_the_names_asked_for_are_read_and_unusual_tensors_become_arrays():
    x = torch.randn(6, 3)
    source = {"x": x.bfloat16(), "edge_index": torch.tensor([[0, 1], [1, 2]]).to_sparse(),
              "y": torch.tensor([0, 1, 0, 1, 0, 1]).to_sparse(), "adj_t": torch.eye(6).to_sparse(),
              "edge_attr": torch.zeros(2, 2, dtype=torch.complex64), "name": "kept out", "num_nodes": 6}
    arrays = named_arrays(source, NAMES, "g")
    assert set(arrays) == {"x", "edge_index", "y", "num_nodes"}
    assert arrays["x"].dtype == np.float32 and np.allclose(arrays["x"], x.numpy(), atol=1e-2)
    assert arrays["y"].tolist() == [0, 1, 0, 1, 0, 1] and int(arrays["num_nodes"]) == 6


class _SparseTensor:
    """What ``named_arrays`` reads of a ``torch_sparse.SparseTensor`` (not installable here)."""

    def __init__(self, row: torch.Tensor, col: torch.Tensor, size: int) -> None:
        self.row, self.col, self.size = row, col, size

    def coo(self) -> tuple[torch.Tensor, torch.Tensor, None]:
        return self.row, self.col, None

    def sparse_sizes(self) -> tuple[int, int]:
        return self.size, self.size


def _edge_set(edges: np.ndarray) -> set[tuple[int, int]]:
    return set(map(tuple, np.asarray(edges).T.tolist()))


def test_an_adjacency_matrix_gives_the_edges_and_node_count():
    """PyG's ``ToSparseTensor`` leaves ``adj_t`` (transposed: ``adj_t[target, source]``) in place of
    ``edge_index``; the edges and N are read from it, whatever its layout, and match the edge list."""
    data = Data(x=torch.randn(7, 2), edge_index=torch.tensor([[0, 1, 1, 5], [1, 2, 3, 0]]), y=torch.arange(7))
    edges = _edge_set(data.edge_index.numpy())
    layouts = {"csr": T.ToSparseTensor(layout=torch.sparse_csr), "coo": T.ToSparseTensor(layout=torch.sparse_coo)}
    for name, transform in layouts.items():
        arrays = named_arrays(transform(data.clone()).to_dict(), NAMES, "g")
        assert _edge_set(arrays["edge_index"]) == edges and int(arrays["num_nodes"]) == 7, name
    adjacency = torch.zeros(7, 7)
    adjacency[data.edge_index[0], data.edge_index[1]] = 2.5  # weights are not read
    for source in ({"adj": adjacency}, {"adj": adjacency.numpy()}, {"adj_t": adjacency.T.to_sparse_csc()},
                   {"adj_t": _SparseTensor(data.edge_index[1], data.edge_index[0], 7)}):
        arrays = named_arrays(source, NAMES, "g")
        assert _edge_set(arrays["edge_index"]) == edges and int(arrays["num_nodes"]) == 7, source
    stated = named_arrays({"adj_t": adjacency.T.to_sparse(), "num_nodes": 9, "edge_index": torch.zeros(2, 0)},
                          NAMES, "g")
    assert int(stated["num_nodes"]) == 9 and stated["edge_index"].shape == (2, 0)  # an edge list wins
    with pytest.raises(DatasetError, match=r"^g: adj_t: expected a square \[N, N\] adjacency matrix, got shape "
                                           r"\[7, 3\]$"):
        named_arrays({"adj_t": torch.zeros(7, 3).to_sparse()}, NAMES, "g")


def test_a_torch_sparse_file_is_refused_with_the_transform_that_avoids_it(tmp_path, monkeypatch):
    """A ``torch_sparse.SparseTensor`` cannot be read weights-only: the error says how to save the
    graph instead (a stand-in module of that name pickles the same class path)."""
    stand_in = types.ModuleType("torch_sparse")
    stand_in.SparseTensor = type("SparseTensor", (), {"__module__": "torch_sparse"})
    monkeypatch.setitem(sys.modules, "torch_sparse", stand_in)
    torch.save({"x": torch.zeros(2, 1), "adj_t": stand_in.SparseTensor()}, tmp_path / "g.pt")
    with pytest.raises(DatasetError, match=r"g.pt: cannot be read with weights_only=True \(UnpicklingError: "
                                           r"torch_sparse.SparseTensor is not allowed\): a torch_sparse.SparseTensor "
                                           r"\(T.ToSparseTensor with torch_sparse installed\); save adj_t as a torch"):
        read_arrays(tmp_path / "g.pt", NAMES)


def test_ogb_split_dict_and_lists_are_taken():
    split = {"train": torch.tensor([0, 1]), "valid": [2], "test": np.array([3])}
    arrays = named_arrays({**_graph().to_dict(), "split_idx": split}, NAMES, "g")
    assert arrays["train_idx"].tolist() == [0, 1] and arrays["valid_idx"].tolist() == [2]
    assert arrays["test_idx"].tolist() == [3]


def test_values_that_are_no_arrays_are_one_line():
    with pytest.raises(DatasetError, match=r"g: y: cannot be read as an array \(ValueError: setting an array"):
        named_arrays({"y": [[0, 1], [2]]}, NAMES, "g")  # rows of unequal length
    with pytest.raises(DatasetError, match=r"g: y: cannot be read as an array \(it holds Python objects"):
        named_arrays({"y": [{"a": 1}, None]}, NAMES, "g")
    with pytest.raises(DatasetError, match=r"g: x: cannot be read as an array \(NotImplementedError"):
        named_arrays({"x": torch.empty(3, 2, device="meta")}, NAMES, "g")
    hetero = HeteroData()
    hetero["paper"].x = torch.zeros(2, 2)
    hetero["paper", "cites", "paper"].edge_index = torch.tensor([[0], [1]])
    with pytest.raises(DatasetError, match=r"HeteroData: a heterogeneous graph \(node types \['paper'\]\)"):
        named_arrays(hetero, NAMES, "HeteroData")
    with pytest.raises(DatasetError, match=r"g: a heterogeneous graph\? its arrays are under \['paper'"):
        named_arrays(hetero.to_dict(), NAMES, "g")
    with pytest.raises(DatasetError, match="g: expected a dict of tensors .*got list"):
        named_arrays([1, 2], NAMES, "g")


def test_files_that_are_not_one_homogeneous_graph_are_refused(tmp_path):
    data = _graph()
    torch.save(data, tmp_path / "pickled.pt")
    torch.save(InMemoryDataset.collate([data]), tmp_path / "geometric_data_processed.pt")  # the ogb package's
    InMemoryDataset.save([data, _graph(seed=1)], tmp_path / "many.pt")
    (tmp_path / "g.csv").write_text("0,1\n")
    (tmp_path / "cut.pt").write_bytes(b"PK\x03\x04")
    np.savez(tmp_path / "objects.npz", y=np.array([{"a": 1}], dtype=object))
    (tmp_path / "Cora" / "processed").mkdir(parents=True)
    torch.save([data.to_dict(), _graph(seed=1).to_dict()], tmp_path / "list.pt")
    np.savez(tmp_path / "cut.npz", y=np.arange(100))
    (tmp_path / "cut.npz").write_bytes((tmp_path / "cut.npz").read_bytes()[:150])
    np.save(tmp_path / "one.npy", np.arange(3))
    (tmp_path / "one.npy").rename(tmp_path / "one.npz")
    cases = {"pickled.pt": r"cannot be read with weights_only=True \(UnpicklingError: torch_geometric\.data\.data\."
                           r"DataEdgeAttr is not allowed\): a pickled Data\? save it "
                           r"with torch.save\(data.to_dict\(\), path\)",
             "geometric_data_processed.pt": r".*\(UnpicklingError: torch_geometric[.\w]+ is not allowed\): an OGB "
                                            r"dataset's processed file; gnnkit reads "
                                            r"OGB's datasets by name \(--data.dataset ogbn-arxiv\)",
             "many.pt": "a dataset of 2 graphs: for graph property prediction import it with --task graph",
             "cut.pt": r"cannot be read with weights_only=True \([A-Za-z]+\)$",
             "g.csv": r"expected a .pt file \(torch.save\(data.to_dict\(\), path\)\) or an .npz file",
             "objects.npz": "not a readable npz file of plain arrays",
             "list.pt": "a list of 2 items: expected one graph",
             "cut.npz": "not a readable npz file of plain arrays",
             "one.npz": r"one array \(an .npy file\): expected an .npz of named arrays",
             "absent.pt": "no such file",
             "Cora": r"a folder: expected a .pt or .npz file; PyG's processed file is .*Cora/processed/data.pt"}
    for name, message in cases.items():
        with pytest.raises(DatasetError, match=f"{name}: {message}"):
            read_arrays(tmp_path / name, NAMES)


def test_a_processed_file_and_an_upper_case_suffix_are_read(tmp_path):
    InMemoryDataset.save([_graph()], tmp_path / "data.PT")
    arrays = read_arrays(tmp_path / "data.PT", NAMES)
    assert set(arrays) == {"x", "edge_index", "y"} and arrays["edge_index"].tolist() == [[0, 1], [1, 2]]
