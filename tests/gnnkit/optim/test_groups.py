import pytest
import torch

from gnnkit.optim.galore import GaLoreAdamW
from gnnkit.optim.kfac import KFAC
from gnnkit.optim.lns_madam import LNSMadam


@pytest.mark.parametrize("optimizer", [GaLoreAdamW, KFAC, LNSMadam])
@pytest.mark.parametrize("bad", [{"lr": float("nan")}, {"weight_decay": -0.1}, {"lr": "0.1"}])
def test_a_refused_group_is_not_left_in_param_groups(optimizer, bad):
    """A user who catches the error must not step with the group that was refused."""
    opt = optimizer([torch.nn.Parameter(torch.randn(4, 4))])
    extra = torch.nn.Parameter(torch.randn(3, 3))
    with pytest.raises(ValueError, match=f"{optimizer.__name__}.{next(iter(bad))}: expected a finite number"):
        opt.add_param_group({"params": [extra], **bad})
    assert len(opt.param_groups) == 1
    opt.add_param_group({"params": [extra], "lr": 0.5})
    assert [g["lr"] for g in opt.param_groups][1] == 0.5
