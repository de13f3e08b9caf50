"""A node twin written in OGB's binary layout without ever holding its edge list or features.

:func:`pipeline.synthetic.build` returns the whole graph, then ``numpy.savez`` writes it; the big
twins need their edge list and feature matrix in memory at once for that (the papers-shaped one,
``synthetic-papers-small``, 1.3 GB of edges and 2.8 GB of features). :func:`write_binary` draws the
node-level model once (:func:`pipeline.synthetic.node_model`), then streams the edges and the feature
rows chunk by chunk into ``data.npz`` members through :class:`pipeline.npz_stream.NpzWriter`, which
lays them out as ``numpy.savez`` does. ``edge_index`` is ``[2, E]`` in C order, all sources before
all targets: the sources go to the archive as they are drawn and the targets to a spill file in the
temp folder, appended after the last source. The content is :func:`build` + :func:`write`'s
(:mod:`pipeline.content_digest` digests agree; ``tests/pipeline/test_synthetic_stream.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np

from pipeline import synthetic
from pipeline.npz_stream import NpzWriter
from pipeline.ogb_layout import write_split_and_meta
from pipeline.temp_paths import published_folder

#: Bytes per copy from the spill file into the archive.
COPY_BYTES = 1 << 24


def write_binary(folder: Path, spec: synthetic.SyntheticSpec, progress: Callable[[str], None] | None = None,
                 chunk_size: int = synthetic.DEFAULT_CHUNK) -> Path:
    """Generate ``spec`` (binary layout) into ``folder``, streaming (see the module docstring).

    Args:
        folder: Destination; must not exist (it appears complete or not at all).
        spec: What to generate; ``spec.layout`` must be ``"binary"``.
        progress: Called with a short message at each stage.
        chunk_size: Random values drawn per chunk: sets peak memory only, never the content.

    Raises:
        FileExistsError: ``folder`` appeared meanwhile (generated concurrently).
    """
    if spec.layout != "binary":
        raise ValueError(f"layout: write_binary writes the binary layout, not {spec.layout!r}")
    say = progress or (lambda _msg: None)
    model = synthetic.node_model(spec, say)
    n, e, f = spec.num_nodes, spec.num_edges, spec.num_features
    say(f"writing binary layout to {folder}, streaming: {e:,} edges, {n:,} x {f} features")
    with published_folder(Path(folder)) as tmp:
        raw = tmp / "raw"
        raw.mkdir()
        with NpzWriter(raw / "data.npz") as npz:
            spill = tmp / "edge_index.targets"
            with npz.member("edge_index", (2, e), np.int64) as sink:
                with open(spill, "wb") as targets:
                    for _lo, src, dst in synthetic.edge_chunks(spec, model, say, chunk_size):
                        sink.write(src)
                        targets.write(memoryview(np.ascontiguousarray(dst, dtype=np.int64)).cast("B"))
                with open(spill, "rb") as targets:
                    while block := targets.read(COPY_BYTES):
                        sink.write_bytes(block)
            spill.unlink()
            npz.write("num_nodes_list", np.array([n], dtype=np.int64))
            npz.write("num_edges_list", np.array([e], dtype=np.int64))
            if f > 0:
                with npz.member("node_feat", (n, f), np.float32) as sink:
                    for _lo, block in synthetic.feature_blocks(spec, model, say, chunk_size):
                        sink.write(block)
            for name, values in model.extra.items():
                npz.write(name, values)
        with NpzWriter(raw / "node-label.npz") as npz:
            npz.write("node_label", model.labels.reshape(n, -1))
        write_split_and_meta(tmp, model.split, synthetic.meta_dict(spec), True, f > 0)
    say(f"wrote {folder}")
    return Path(folder)
