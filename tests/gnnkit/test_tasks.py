"""Task families: the recipe's ``task:`` key picks the module and datamodule ``gnnkit run`` builds."""

from __future__ import annotations

import re

import pytest

from gnnkit.data.datamodule import GraphDataModule
from gnnkit.module import NodeClassifier
from gnnkit.tasks import TASKS, recipe_task, task_family


def test_node_family_is_the_default(tmp_path):
    recipe = tmp_path / "r.yaml"
    recipe.write_text("model: {model: gcn}\n")
    assert recipe_task(recipe, []) == "node"
    assert task_family("node").classes() == (NodeClassifier, GraphDataModule)


def test_task_comes_from_the_recipe_then_the_command_line(tmp_path):
    recipe = tmp_path / "r.yaml"
    recipe.write_text("task: link\n")
    assert recipe_task(recipe, []) == "link"
    assert recipe_task(recipe, ["--task", "graph"]) == "graph"
    assert recipe_task(recipe, ["--trainer.max_epochs", "1", "--task=node"]) == "node"
    with pytest.raises(ValueError, match="--task: expected a value"):
        recipe_task(recipe, ["--task"])


@pytest.mark.parametrize(("text", "message"), [
    (b"model:\n  hidden: [1, 2\n", r"r.yaml: not a valid recipe YAML at line 3, column 1: expected ',' or ']'"),
    (b"x: !!python/object/apply:os.system [echo hi]\n", "r.yaml: not a valid recipe YAML at line 1, column 4: "
                                                         "could not determine a constructor"),
    (b"model:\n  a: \xff\n", r"r.yaml: not UTF-8 text \(byte 12\)"),
    (b"- a\n- b\n", "r.yaml: expected a mapping of recipe sections"),
    (b"# nothing yet\n", r"r.yaml: empty \(expected a mapping of recipe sections"),
], ids=["unclosed list", "python tag", "not utf-8", "a list", "empty"])
def test_a_recipe_that_is_not_yaml_is_one_line_naming_the_file(tmp_path, text, message):
    recipe = tmp_path / "r.yaml"
    recipe.write_bytes(text)
    with pytest.raises(ValueError, match=message) as caught:
        recipe_task(recipe, [])
    assert "\n" not in str(caught.value)


def test_unknown_task_names_the_choices():
    with pytest.raises(ValueError, match=re.escape(f"task: expected one of {sorted(TASKS)}, got 'edges'")):
        task_family("edges")


def test_every_family_imports():
    for family in TASKS.values():
        module, datamodule = family.classes()
        assert callable(module) and callable(datamodule)


@pytest.mark.parametrize(("dataset", "task", "found"), [
    ("synthetic-collab-tiny", "node", "link"), ("synthetic-molhiv-small", "node", "graph"),
    ("synthetic-tiny", "link", "node"), ("synthetic-collab-tiny", "graph", "link"),
])
def test_a_dataset_of_another_family_is_refused_before_preprocessing(dataset, task, found):
    """A link folder under the quickstart recipe ended in KeyError: 'y' in the cache reader, a graph one
    in a dtype error or a misleading 'graph datasets take no preprocessing option'."""
    from gnnkit.tasks import resolve_dataset

    with pytest.raises(ValueError, match=rf"data.dataset: {dataset} is a {found}-property dataset; this recipe "
                                         rf"trains the {task} task \(give a {found} recipe"):
        resolve_dataset(dataset, task)
    assert resolve_dataset(dataset, found).name == dataset
