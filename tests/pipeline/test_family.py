"""The task families: detection from OGB meta, OGB's master.csv per family, registry names."""

from __future__ import annotations

import json

import pytest

from pipeline.errors import DatasetError
from pipeline.family import detect_family, family_of_name, layout_module, read_meta_json
from pipeline.registry import load_file
from pipeline.sources import ogb_meta


@pytest.mark.parametrize(("name", "family"), [("ogbn-arxiv", "node"), ("ogbl-collab", "link"),
                                              ("ogbg-molhiv", "graph"), ("cora", None)])
def test_family_of_name(name, family):
    assert family_of_name(name) == family


def test_detect_family_from_ogb_meta(tmp_path):
    assert detect_family({"task type": "link prediction"}) == "link"
    assert detect_family({"task type": "binary classification", "data type": "mol"}) == "graph"
    assert detect_family({"task type": "multiclass classification"}) == "node"
    (tmp_path / "raw").mkdir()
    (tmp_path / "raw" / "graph-label.csv.gz").write_bytes(b"")
    assert detect_family({"task type": "binary classification"}, tmp_path) == "graph"
    assert detect_family({"family": "link", "task type": "binary classification"}, tmp_path) == "link"


def test_unknown_family_is_one_clear_line(tmp_path):
    (tmp_path / "meta.json").write_text(json.dumps({"family": "edge"}))
    with pytest.raises(DatasetError, match=r"meta.json: 'family' must be one of \['node', 'link', 'graph'\]"):
        read_meta_json(tmp_path)
    with pytest.raises(ValueError, match="family: expected one of"):
        layout_module("edge")


@pytest.mark.parametrize(("name", "family", "metric"), [("ogbn-arxiv", "node", "acc"),
                                                        ("ogbl-collab", "link", "hits@50"),
                                                        ("ogbg-molhiv", "graph", "rocauc")])
def test_ogb_meta_comes_from_the_family_master_csv(name, family, metric):
    info = ogb_meta(name)
    assert info["family"] == family and info["eval metric"] == metric


def test_ogb_meta_refuses_a_name_outside_its_family():
    with pytest.raises(DatasetError, match="'ogbl-arxiv' is not an OGB link-property dataset"):
        ogb_meta("ogbl-arxiv")


def test_registry_takes_every_ogb_family_and_nothing_else(tmp_path):
    path = tmp_path / "r.yaml"
    path.write_text("datasets:\n  ogbl-collab: {source: ogb}\n  ogbg-molhiv: {source: ogb}\n")
    assert set(load_file(path)) == {"ogbl-collab", "ogbg-molhiv"}
    path.write_text("datasets:\n  cora: {source: ogb}\n")
    with pytest.raises(DatasetError, match=r"datasets.cora.source: ogb entries must use OGB's own names"):
        load_file(path)
