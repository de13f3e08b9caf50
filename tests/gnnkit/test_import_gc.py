import gc
import sys

import pytest

from gnnkit.import_gc import import_without_gc


@pytest.fixture
def fresh_module(tmp_path, monkeypatch):
    """The name of a module no one has imported; importing it turns the collector's state into
    ``module.collector_on`` and makes a reference cycle."""
    name = f"gnnkit_import_gc_probe_{tmp_path.name.replace('-', '_')}"
    (tmp_path / f"{name}.py").write_text("import gc\ncollector_on = gc.isenabled()\n"
                                         "class Node:\n    pass\nloop = Node()\nloop.me = loop\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield name
    sys.modules.pop(name, None)
    gc.unfreeze()  # give the test process's objects back to the collector


def test_the_collector_is_off_during_the_import_and_what_it_made_is_frozen(fresh_module):
    frozen = gc.get_freeze_count()
    module = import_without_gc(fresh_module)
    assert not module.collector_on and gc.isenabled()
    assert gc.get_freeze_count() > frozen
    assert module.loop.me is module.loop


def test_garbage_from_before_the_import_is_collected_not_frozen(fresh_module):
    class Cycle:
        pass

    garbage = Cycle()
    garbage.me = garbage
    count = sum(isinstance(o, Cycle) for o in gc.get_objects())
    del garbage
    import_without_gc(fresh_module)
    assert count == 1 and not any(isinstance(o, Cycle) for o in gc.get_objects())


def test_a_module_imported_already_is_returned_and_nothing_is_frozen(fresh_module):
    module = __import__(fresh_module)
    frozen = gc.get_freeze_count()
    assert import_without_gc(fresh_module) is module
    assert gc.isenabled() and gc.get_freeze_count() == frozen


def test_a_collector_the_caller_turned_off_stays_off_and_nothing_is_frozen(fresh_module):
    frozen = gc.get_freeze_count()
    gc.disable()
    try:
        import_without_gc(fresh_module)
        assert not gc.isenabled() and gc.get_freeze_count() == frozen
    finally:
        gc.enable()


def test_a_failing_import_turns_the_collector_back_on():
    try:
        with pytest.raises(ModuleNotFoundError):
            import_without_gc("gnnkit_no_such_module_anywhere")
        assert gc.isenabled()
    finally:
        gc.unfreeze()
