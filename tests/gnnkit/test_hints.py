"""Size hints: a recipe's reference graph against the dataset a run is given."""

from pathlib import Path

import pytest
import yaml

from gnnkit.hints import Reference, homophily_hint, size_hint, suggest_recipe

RECIPES = Path(__file__).parents[2] / "recipes"
CORA = Reference("Cora", 2708)


def _recipe(folder: Path, name: str, model: str, dataset: str, reference: dict | None) -> Path:
    config = {"model": {"model": model}, "data": {"dataset": dataset}}
    if reference is not None:
        config["reference"] = reference
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def test_no_hint_within_ten_times_or_without_a_reference():
    recipe = RECIPES / "gcn_citation.yaml"
    assert size_hint(recipe, CORA, "gcn", "citeseer", 3327) is None
    assert size_hint(recipe, CORA, "gcn", "pubmed", 19717) is None  # 7.3x: the same family
    assert size_hint(recipe, CORA, "gcn", "x", 271) is None  # 9.99x fewer
    assert size_hint(recipe, None, "gcn", "ogbn-products", 2449029) is None


def test_a_citation_graph_on_an_ogb_recipe_is_pointed_at_the_citation_recipe():
    line = size_hint(RECIPES / "gcn_arxiv.yaml", Reference("ogbn-arxiv", 169343), "gcn", "cora", 2708)
    assert line == ("hint: cora has 2,708 nodes, 63x fewer than ogbn-arxiv (169,343), the graph gcn_arxiv.yaml's "
                    f"hyper-parameters come from; {RECIPES / 'gcn_citation.yaml'} is set for Cora (2,708 nodes)")


def test_a_large_graph_on_a_citation_recipe_is_pointed_at_the_ogb_recipe_of_its_model():
    line = size_hint(RECIPES / "gcn_citation.yaml", CORA, "gcn", "big", 2_000_000)
    assert "big has 2,000,000 nodes, 739x more than Cora (2,708)" in line
    assert line.endswith(f"{RECIPES / 'gcn_products.yaml'} is set for ogbn-products (2,449,029 nodes)")
    # No GAT recipe at arxiv's size: another model's recipe for that size, the real graph's over its twins.
    # It names the other model: sage_arxiv.yaml on a small heterophilous graph was pointed at
    # gat_citation.yaml, which scored 0.31 there against SAGE's 0.95.
    line = size_hint(RECIPES / "gat_citation.yaml", CORA, "gat", "mid", 100_000)
    assert line.endswith(f"{RECIPES / 'gcn_arxiv.yaml'} is set for ogbn-arxiv (169,343 nodes) with gcn, not gat: "
                         "on some graphs gat does better (a heterophilous one), so compare the two")


def test_suggestion_prefers_the_model_then_the_real_graph_then_the_size(tmp_path):
    arxiv, products = {"graph": "ogbn-arxiv", "nodes": 169343}, {"graph": "ogbn-products", "nodes": 2449029}
    mine = _recipe(tmp_path, "mine", "gcn", "synthetic-tiny", {"graph": "Cora", "nodes": 2708})
    _recipe(tmp_path, "a_sage_arxiv", "sage", "ogbn-arxiv", arxiv)
    _recipe(tmp_path, "b_gcn_twin", "gcn", "synthetic-arxiv", arxiv)
    _recipe(tmp_path, "c_gcn_arxiv", "gcn", "ogbn-arxiv", arxiv)
    _recipe(tmp_path, "d_gcn_products", "gcn", "ogbn-products", products)
    _recipe(tmp_path, "e_no_reference", "gcn", "ogbn-arxiv", None)
    link = _recipe(tmp_path, "0_link", "gcn", "ogbl-collab", {"graph": "ogbl-collab", "nodes": 235868})
    link.write_text("task: link\n" + link.read_text())  # another task family: never suggested for nodes
    (tmp_path / "f_broken.yaml").write_text("reference: [unclosed")
    assert suggest_recipe(mine, "gcn", 150_000).path.name == "c_gcn_arxiv.yaml"
    assert suggest_recipe(mine, "sage", 150_000).path.name == "a_sage_arxiv.yaml"
    assert suggest_recipe(mine, "gcn", 900_000).path.name == "d_gcn_products.yaml"  # 5.3x from arxiv, 2.7x from products
    assert suggest_recipe(mine, "gcn", 2708) is None  # only itself fits
    assert suggest_recipe(mine, "gcn", 235_868).path.name == "c_gcn_arxiv.yaml"
    assert size_hint(mine, CORA, "gcn", "huge", 10**9).endswith("come from; expect to tune them")


def test_reference_needs_a_positive_node_count():
    with pytest.raises(ValueError, match="reference.nodes: expected a positive node count, got 0"):
        Reference("Cora", 0)
    with pytest.raises(ValueError, match="reference.heterophilous: expected true or false, got 'yes'"):
        Reference("Cora", 2708, heterophilous="yes")


def test_a_heterophilous_graph_on_a_recipe_set_on_a_homophilous_one_is_pointed_at_the_heterophily_recipe():
    """actor (adjusted homophily 0.00) under gcn_citation.yaml (Cora): compare sage_heterophilous.yaml."""
    line = homophily_hint(RECIPES / "gcn_citation.yaml", CORA, "actor", -0.0046)
    assert line == ("hint: actor is heterophilous (adjusted homophily 0.00 on its training labels, below 0.3), unlike "
                    "Cora, the graph gcn_citation.yaml's hyper-parameters come from; compare "
                    f"{RECIPES / 'sage_heterophilous.yaml'} by validation (README: Heterophilous graphs)")
    assert homophily_hint(RECIPES / "gcn_citation.yaml", CORA, "cora", 0.77) is None
    assert homophily_hint(RECIPES / "gcn_citation.yaml", None, "actor", 0.0) is None  # nothing to compare with
    assert homophily_hint(RECIPES / "gcn_citation.yaml", CORA, "proteins", None) is None  # multi-task: no measure
    minesweeper = Reference("minesweeper", 10000, heterophilous=True)
    assert homophily_hint(RECIPES / "sage_heterophilous.yaml", minesweeper, "actor", 0.0) is None


def test_too_few_training_labels_to_tell_say_so_and_name_the_heterophily_recipe(tmp_path):
    """20 labels a class give a few dozen edges between training nodes, no measure, and no word: a
    heterophilous graph under gcn_citation scored 0.33 where an MLP scored 0.61."""
    line = homophily_hint(RECIPES / "gcn_citation.yaml", CORA, "mine", None, edges=37)
    assert line == ("hint: mine's homophily is not measured: 37 edges join its labelled training nodes, fewer than "
                    "500; gcn_citation.yaml is set for Cora, whose classes link within, so if mine's do not, "
                    f"{RECIPES / 'sage_heterophilous.yaml'} does better: compare the two by validation "
                    "(README: Heterophilous graphs)")
    assert homophily_hint(RECIPES / "gcn_citation.yaml", CORA, "mine", None, edges=None) is None  # no class labels
    assert homophily_hint(RECIPES / "gcn_citation.yaml", CORA, "mine", None, edges=800) is None  # a single class
    mine = _recipe(tmp_path, "mine", "gcn", "synthetic-tiny", {"graph": "Cora", "nodes": 2708})
    assert homophily_hint(mine, CORA, "mine", None, edges=37) is None  # nothing beside it to compare


def test_without_a_heterophily_recipe_beside_it_the_hint_says_to_tune(tmp_path):
    mine = _recipe(tmp_path, "mine", "gcn", "synthetic-tiny", {"graph": "Cora", "nodes": 2708})
    assert homophily_hint(mine, CORA, "actor", 0.1).endswith("come from; expect to tune them")


def test_size_suggestions_keep_to_the_graphs_kind_once_it_is_known(tmp_path):
    """A homophilous graph of 12,000 nodes under an arxiv recipe was pointed at the heterophily recipe
    (set on minesweeper's 10,000 nodes) when its model matched."""
    mine = _recipe(tmp_path, "mine", "sage", "synthetic-arxiv", {"graph": "ogbn-arxiv", "nodes": 169343})
    _recipe(tmp_path, "a_hetero", "sage", "synthetic-tiny", {"graph": "minesweeper", "nodes": 10000, "heterophilous": True})
    _recipe(tmp_path, "b_cora", "gcn", "synthetic-tiny", {"graph": "Cora", "nodes": 2708})
    assert suggest_recipe(mine, "sage", 12000).path.name == "a_hetero.yaml"  # kind unknown: the model decides
    assert suggest_recipe(mine, "sage", 12000, heterophilous=False).path.name == "b_cora.yaml"
    assert suggest_recipe(mine, "sage", 12000, heterophilous=True).path.name == "a_hetero.yaml"


def test_every_node_recipe_but_the_quickstart_names_its_reference_graph():
    for recipe in sorted(RECIPES.glob("*.yaml")):
        config = yaml.safe_load(recipe.read_text())
        if config.get("task", "node") != "node":
            continue
        reference = config.get("reference")
        if recipe.name == "quickstart.yaml":
            assert reference is None
            continue
        assert Reference(**reference).nodes in (2708, 10000, 169343, 2449029), recipe.name
        assert Reference(**reference).heterophilous is (recipe.name == "sage_heterophilous.yaml"), recipe.name


def test_link_recipes_are_suggested_for_link_graphs_alone():
    """`gnnkit import --task link` names a link recipe by size: GAE's for a citation-sized graph,
    OGB's collab setting for one near ogbl-collab's size, none (the command's fallback) beyond."""
    quickstart = RECIPES / "quickstart.yaml"
    assert suggest_recipe(quickstart, "gcn", 3327, task="link").path.name == "gae_citation.yaml"
    assert suggest_recipe(quickstart, "gcn", 500_000, task="link").path.name == "sage_collab.yaml"
    assert suggest_recipe(quickstart, "gcn", 30_000_000, task="link") is None
    assert suggest_recipe(quickstart, "gcn", 3327).path.name == "gcn_citation.yaml"
    line = size_hint(RECIPES / "sage_collab.yaml", Reference("ogbl-collab", 235868), "sage", "cora", 2708, task="link")
    assert line.startswith("hint: cora has 2,708 nodes, 87x fewer than ogbl-collab (235,868)")
    assert f"{RECIPES / 'gae_citation.yaml'} is set for Cora (2,708 nodes) with gcn, not sage" in line
    for recipe in sorted(RECIPES.glob("*.yaml")):
        config = yaml.safe_load(recipe.read_text())
        if config.get("task") == "link":
            assert Reference(**config["reference"]).nodes in (2708, 235868), recipe.name
