"""Where a registry entry's raw OGB folder comes from: OGB's download, the generator, or a path.

Every source ends in the same thing, a folder in OGB's raw layout plus its normalised meta, which
:mod:`pipeline.preprocess` reads with OGB's raw readers.
"""

from __future__ import annotations

import shutil
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable

from pipeline.content_digest import content_digest
from pipeline.errors import DatasetError
from pipeline.fingerprint import cache_key
from pipeline.family import OGB_PACKAGES, family_of_name, generator_module, normalise_meta, read_meta_json
from pipeline.registry import DatasetSpec, synthetic_family, synthetic_spec
from pipeline.temp_paths import make_temp_dir, remove_stale


@dataclass(frozen=True)
class SourceFolder:
    """A located raw dataset.

    Attributes:
        folder: The OGB-layout folder (``raw/``, ``split/``).
        meta: Normalised meta (:func:`pipeline.family.normalise_meta`; ``meta["family"]`` names the
            task family).
        version: The source's version string (part of the cache key).
    """

    folder: Path
    meta: dict[str, Any]
    version: str


def ogb_meta(name: str) -> dict[str, Any]:
    """OGB's own meta_dict for an ``ogbn-*``, ``ogbl-*`` or ``ogbg-*`` dataset, from the master.csv
    of the ``ogb`` package's node, link or graph property sub-package."""
    import importlib

    import pandas as pd

    family = family_of_name(name)
    if family is None:
        raise DatasetError("dataset", f"'{name}' is not an OGB name (ogbn-*, ogbl-* or ogbg-*)")
    package = importlib.import_module(OGB_PACKAGES[family])
    master = pd.read_csv(Path(package.__file__).parent / "master.csv", index_col=0, keep_default_na=False)
    if name not in master:
        raise DatasetError("dataset", f"'{name}' is not an OGB {family}-property dataset; OGB has {list(master)}")
    return {"family": family, **dict(master[name])}


def _download_ogb(name: str, info: dict[str, Any], folder: Path, say: Callable[[str], None]) -> None:
    """Fetch and unpack OGB's zip into ``folder`` (no stdin prompt, atomic rename)."""
    from ogb.utils.url import download_url, extract_zip

    tmp = make_temp_dir(folder)
    try:
        say(f"downloading {info['url']}")
        try:
            archive = download_url(info["url"], str(tmp), log=False)
        except Exception as err:  # noqa: BLE001 - network errors come in many types
            raise DatasetError(
                folder, f"{name} is not on disk and could not be downloaded ({type(err).__name__}: {err}); "
                f"place OGB's '{info['download_name']}' folder here"
            ) from None
        extract_zip(archive, str(tmp), log=False)
        shutil.move(str(tmp / info["download_name"]), str(folder))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _ogb(spec: DatasetSpec, data_root: Path, say: Callable[[str], None]) -> SourceFolder:
    info = ogb_meta(spec.name)
    folder = data_root / spec.name.replace("-", "_")
    meta = normalise_meta(info, f"ogb master.csv [{spec.name}]")
    marker = "data.npz" if meta["binary"] else "edge.csv.gz"  # every family's graph file
    if not (folder / "raw" / marker).exists():
        _download_ogb(spec.name, info, folder, say)
    return SourceFolder(folder, meta, f"ogb-{info.get('version', '1')}")


def _synthetic(spec: DatasetSpec, data_root: Path, say: Callable[[str], None]) -> SourceFolder:
    generator = generator_module(synthetic_family(spec))
    gen = synthetic_spec(spec)
    version = f"synthetic-{generator.GENERATOR_VERSION}"
    fields = gen.key_fields() if hasattr(gen, "key_fields") else asdict(gen)  # node specs leave new defaults out
    folder = data_root / "synthetic" / f"{spec.name}-{cache_key({'v': version, **fields})[:12]}"
    remove_stale(folder.parent)  # temps of generations killed earlier, even when this one is done
    if not (folder / "meta.json").is_file():
        say(f"generating {spec.name} in OGB's raw layout at {folder}")
        try:
            generator.generate(folder, gen, progress=say)
        except FileExistsError:
            pass  # generated concurrently by another process (which verifies it)
        else:
            _verify_fingerprint(spec, folder, say)
    return SourceFolder(folder, read_meta_json(folder), version)


def _verify_fingerprint(spec: DatasetSpec, folder: Path, say: Callable[[str], None]) -> None:
    """Compare a freshly generated twin with the registry's ``fingerprint``; remove it if it differs."""
    if spec.fingerprint is None:
        return
    say(f"verifying {spec.name} against the registry's fingerprint")
    found = content_digest(folder)
    if found != spec.fingerprint:
        shutil.rmtree(folder, ignore_errors=True)
        raise DatasetError(
            f"{spec.registry}: datasets.{spec.name}.fingerprint",
            f"the generated raw files have content digest {found}, expected {spec.fingerprint} "
            f"(the generator did not reproduce this twin here; the folder was removed)",
        )


def _ogb_dir(spec: DatasetSpec, data_root: Path, say: Callable[[str], None]) -> SourceFolder:
    assert spec.path is not None
    if not spec.path.is_dir():
        raise DatasetError(spec.path, "no such folder (expected an OGB-format dataset folder)")
    meta = read_meta_json(spec.path)
    return SourceFolder(spec.path, meta, f"ogb-dir-{meta['ogb_meta'].get('version', '1')}")


_LOCATORS = {"ogb": _ogb, "synthetic": _synthetic, "ogb-dir": _ogb_dir}


def locate(
    spec: DatasetSpec, data_root: Path, progress: Callable[[str], None] | None = None
) -> SourceFolder:
    """Make sure the raw folder of ``spec`` exists on disk and return it with its meta."""
    return _LOCATORS[spec.source](spec, data_root, progress or (lambda _msg: None))
