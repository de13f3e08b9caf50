import pytest

from gnnkit.accelerator_check import check_accelerator, torch_sees
from gnnkit.resume import ResumeError


def test_auto_cpu_unknown_names_and_classes_are_left_to_lightning():
    for name in ("auto", "cpu", "no-such-accelerator", None, object()):
        check_accelerator(name)  # no refusal: Lightning takes them, or refuses unknown names itself


def test_a_tpu_without_torch_xla_is_one_line_naming_what_it_needs():
    import importlib.util

    if importlib.util.find_spec("torch_xla") is not None:
        pytest.skip("torch_xla is installed here")
    with pytest.raises(ResumeError, match=r"^trainer\.accelerator: tpu cannot be used here: it needs torch_xla"
                                          r"\S* \(not installed\); expected one this machine has: cpu"):
        check_accelerator("tpu")


def test_torch_sees_names_the_build():
    import torch

    assert torch_sees().startswith(f"torch {torch.__version__}, ")
