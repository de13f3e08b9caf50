"""pipeline/env_switch.py: on/off environment variables, read alike and refused in one line."""

import pytest

from pipeline import DatasetError
from pipeline.env_switch import switch


@pytest.mark.parametrize(("value", "on"), [("1", True), ("on", True), ("TRUE", True), (" yes ", True),
                                           ("0", False), ("off", False), ("False", False), ("no", False)])
def test_every_spelling_of_on_and_off(monkeypatch, value, on):
    monkeypatch.setenv("GNNKIT_TEST_SWITCH", value)
    assert switch("GNNKIT_TEST_SWITCH", not on) is on


@pytest.mark.parametrize("default", [True, False])
def test_unset_or_empty_is_the_default(monkeypatch, default):
    monkeypatch.delenv("GNNKIT_TEST_SWITCH", raising=False)
    assert switch("GNNKIT_TEST_SWITCH", default) is default
    monkeypatch.setenv("GNNKIT_TEST_SWITCH", "")
    assert switch("GNNKIT_TEST_SWITCH", default) is default


def test_anything_else_is_one_line_naming_the_variable(monkeypatch):
    """GNNKIT_NATIVE=banana meant on, GNNKIT_SPMM_VERIFY=false left the check on."""
    monkeypatch.setenv("GNNKIT_TEST_SWITCH", "banana")
    with pytest.raises(DatasetError, match=r"^GNNKIT_TEST_SWITCH: expected 1, on, true, yes \(on\) or "
                                           r"0, off, false, no \(off\), got 'banana'$"):
        switch("GNNKIT_TEST_SWITCH", True)


def test_the_switches_gnnkit_reads(monkeypatch):
    from gnnkit.allocator import retain_freed_memory
    from gnnkit.native import loader
    from gnnkit.sparse.decision import verify_enabled

    monkeypatch.setenv("GNNKIT_SPMM_VERIFY", "false")
    assert not verify_enabled(None)
    monkeypatch.setenv("GNNKIT_RETAIN_FREED_MEMORY", "off")
    assert retain_freed_memory() is False
    monkeypatch.setenv("GNNKIT_NATIVE", "banana")
    with pytest.raises(DatasetError, match="^GNNKIT_NATIVE: "):
        loader.enabled()
