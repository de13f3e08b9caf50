"""Tensor-train compressed embedding tables (TT-Rec layout, Nimble init and ordering, FALCON-style
hot-row cache). See :class:`TTEmbedding`."""

from gnnkit.tt.autoconfig import auto_config
from gnnkit.tt.cache import HotRowCache
from gnnkit.tt.config import TTConfig
from gnnkit.tt.embedding import TTEmbedding
from gnnkit.tt.init import init_cores_, tt_svd, tt_sq_norm

__all__ = ["HotRowCache", "TTConfig", "TTEmbedding", "auto_config", "init_cores_", "tt_sq_norm", "tt_svd"]
