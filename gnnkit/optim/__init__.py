"""Optimizers beside Adam (chosen with LightningCLI's ``optimizer:`` section) and their memory.

``--optimizer gnnkit.optim.GaLoreAdamW`` (or ``GaLoreAdamW``) picks GaLore; see
:mod:`gnnkit.optim.galore`; ``--optimizer gnnkit.optim.LNSMadam`` picks LNS-Madam (weights stored
as 8-bit logarithmic codes), see :mod:`gnnkit.optim.lns_madam`. ``--optimizer gnnkit.optim.KFAC``
picks K-FAC (:mod:`gnnkit.optim.kfac`), which the module binds to its linear layers
(``optimizer.bind(module)``).
"""

from gnnkit.optim.build import build_optimizer, build_scheduler, module_optimizer, with_scheduler
from gnnkit.optim.galore import GaLoreAdamW
from gnnkit.optim.kfac import KFAC
from gnnkit.optim.lns import LNSFormat
from gnnkit.optim.lns_madam import LNSMadam
from gnnkit.optim.state import describe_optimizers, optimizer_state_bytes, optimizer_weight_bytes

__all__ = ["KFAC", "GaLoreAdamW", "LNSFormat", "LNSMadam", "build_optimizer", "build_scheduler", "module_optimizer", "with_scheduler",
           "describe_optimizers", "optimizer_state_bytes", "optimizer_weight_bytes"]
