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


def test_unknown_task_names_the_choices():
    with pytest.raises(ValueError, match=re.escape(f"task: expected one of {sorted(TASKS)}, got 'edges'")):
        task_family("edges")


def test_every_family_imports():
    for family in TASKS.values():
        module, datamodule = family.classes()
        assert callable(module) and callable(datamodule)
