import gc
import sys

import pytest

from gnnkit.import_gc import imports_without_gc


@pytest.fixture
def fresh_module(tmp_path, monkeypatch):
    """The name of a module no one has imported, which makes a reference cycle when imported."""
    name = f"gnnkit_import_gc_probe_{tmp_path.name.replace('-', '_')}"
    (tmp_path / f"{name}.py").write_text("class Node:\n    pass\nloop = Node()\nloop.me = loop\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield name
    sys.modules.pop(name, None)
    gc.unfreeze()  # give the test process's objects back to the collector


def test_the_collector_is_off_inside_and_what_the_imports_made_is_frozen(fresh_module):
    frozen = gc.get_freeze_count()
    with imports_without_gc():
        assert not gc.isenabled()
        module = __import__(fresh_module)
    assert gc.isenabled()
    assert gc.get_freeze_count() > frozen
    assert module.loop.me is module.loop


def test_a_block_that_imports_nothing_new_freezes_nothing(fresh_module):
    __import__(fresh_module)
    frozen = gc.get_freeze_count()
    with imports_without_gc():
        __import__(fresh_module)
    assert gc.isenabled() and gc.get_freeze_count() == frozen


def test_a_collector_the_caller_turned_off_stays_off_and_nothing_is_frozen(fresh_module):
    frozen = gc.get_freeze_count()
    gc.disable()
    try:
        with imports_without_gc():
            __import__(fresh_module)
        assert not gc.isenabled() and gc.get_freeze_count() == frozen
    finally:
        gc.enable()


def test_a_failing_import_turns_the_collector_back_on():
    with pytest.raises(ModuleNotFoundError), imports_without_gc():
        __import__("gnnkit_no_such_module_anywhere")
    assert gc.isenabled()
