"""The dataset registry: ``datasets.yaml`` (shipped with the package) plus users' own files.

Each entry is validated when loaded; a bad entry raises :class:`DatasetError` naming
``<file>: datasets.<name>.<field>``. Wherever a dataset name is accepted, the path of a folder in
OGB's raw layout (with ``meta.json``) is accepted too.
"""

from __future__ import annotations

import difflib
import os
import re
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from pipeline.errors import DatasetError
from pipeline.family import family_of_name, generator_modules, read_meta_json
from pipeline.options import PreprocessOptions

SOURCES = ("ogb", "synthetic", "ogb-dir")
ENTRY_FIELDS = ("source", "description", "path", "generator", "fingerprint", "preprocess")
#: Environment variable listing extra registry files (``os.pathsep``-separated).
REGISTRY_ENV = "GNNKIT_REGISTRY"


@dataclass(frozen=True)
class DatasetSpec:
    """One validated registry entry.

    Attributes:
        name: Registry name (or the folder name for a dataset given by path).
        source: ``"ogb"``, ``"synthetic"`` or ``"ogb-dir"``.
        description: One line for ``gnnkit datasets``.
        path: The OGB-format folder (``ogb-dir`` only).
        generator: Fields of :class:`pipeline.synthetic.SyntheticSpec` (``synthetic`` only).
        fingerprint: Expected :func:`pipeline.content_digest.content_digest` of the generated
            folder (``synthetic`` only, optional): generation fails if it differs.
        preprocess: Default preprocessing options.
        registry: The file the entry came from.
    """

    name: str
    source: str
    description: str = ""
    path: Path | None = None
    generator: dict[str, Any] = field(default_factory=dict)
    fingerprint: str | None = None
    preprocess: PreprocessOptions = PreprocessOptions()
    registry: str = ""


def _entry(name: str, raw: Any, file: str) -> DatasetSpec:
    where = f"{file}: datasets.{name}"
    if not isinstance(raw, dict):
        raise DatasetError(where, "expected a mapping of fields")
    for key in raw:
        if key not in ENTRY_FIELDS:
            raise DatasetError(f"{where}.{key}", f"unknown field; expected one of {list(ENTRY_FIELDS)}")
    source = raw.get("source")
    if source not in SOURCES:
        raise DatasetError(f"{where}.source", f"expected one of {list(SOURCES)}, got {source!r}")
    path = None
    if source == "ogb-dir":
        if not isinstance(raw.get("path"), str):
            raise DatasetError(f"{where}.path", "an ogb-dir entry needs the folder's path")
        path = Path(raw["path"]).expanduser()
        if not path.is_absolute():
            path = Path(file).parent / path
    elif "path" in raw:
        raise DatasetError(f"{where}.path", f"only ogb-dir entries take a path, not {source}")
    generator = raw.get("generator") or {}
    if source == "synthetic":
        if not isinstance(generator, dict):
            raise DatasetError(f"{where}.generator", "expected a mapping of generator fields")
        _synthetic_spec(generator, f"{where}.generator")  # validate now, not at first use
    elif "generator" in raw:
        raise DatasetError(f"{where}.generator", f"only synthetic entries take a generator, not {source}")
    fingerprint = raw.get("fingerprint")
    if fingerprint is not None:
        if source != "synthetic":
            raise DatasetError(f"{where}.fingerprint", f"only synthetic entries take a fingerprint, not {source}")
        if not isinstance(fingerprint, str) or not re.fullmatch(r"[0-9a-f]{64}", fingerprint):
            raise DatasetError(f"{where}.fingerprint", f"expected 64 lowercase hex digits (sha256), got {fingerprint!r}")
    if source == "ogb" and family_of_name(name) is None:
        raise DatasetError(f"{where}.source", "ogb entries must use OGB's own names (ogbn-*, ogbl-*, ogbg-*)")
    if not isinstance(raw.get("description", ""), str):
        raise DatasetError(f"{where}.description", "expected a string")
    preprocess = raw.get("preprocess")
    if preprocess is not None and not isinstance(preprocess, dict):
        raise DatasetError(f"{where}.preprocess", "expected a mapping of options")
    return DatasetSpec(
        name=name,
        source=source,
        description=raw.get("description", ""),
        path=path,
        generator=dict(generator),
        fingerprint=fingerprint,
        preprocess=PreprocessOptions.from_dict(preprocess, f"{where}.preprocess"),
        registry=file,
    )


def _generator_family(generator: dict[str, Any], where: str) -> str:
    """The family whose generator module has the preset (no preset: the node generator's fields)."""
    preset = generator.get("preset")
    if preset is None:
        return "node"
    modules = generator_modules()
    for family, module in modules.items():
        if preset in module.presets():
            return family
    known = sorted(name for module in modules.values() for name in module.presets())
    raise DatasetError(f"{where}.preset", f"unknown preset {preset!r}; expected one of {known}")


def _synthetic_spec(generator: dict[str, Any], where: str):
    """Resolve ``{preset: NAME, **overrides}`` into the ``SyntheticSpec`` of the preset's family."""
    import dataclasses

    module = generator_modules()[_generator_family(generator, where)]
    values = dict(generator)
    preset = values.pop("preset", None)
    known = {f.name for f in dataclasses.fields(module.SyntheticSpec)}
    for key in values:
        if key not in known:
            raise DatasetError(f"{where}.{key}", f"unknown generator field; expected one of {sorted(known)}")
    try:
        if preset is not None:
            return dataclasses.replace(module.presets()[preset], **values)
        return module.SyntheticSpec(**values)
    except (TypeError, ValueError) as err:
        raise DatasetError(where, str(err)) from None


def synthetic_spec(spec: DatasetSpec):
    """The ``SyntheticSpec`` (of its family's generator) of a synthetic registry entry."""
    return _synthetic_spec(spec.generator, f"{spec.registry}: datasets.{spec.name}.generator")


def synthetic_family(spec: DatasetSpec) -> str:
    """The task family of a synthetic registry entry (that of its generator preset)."""
    return _generator_family(spec.generator, f"{spec.registry}: datasets.{spec.name}.generator")


def spec_family(spec: DatasetSpec) -> str | None:
    """The task family of a registry entry (``None`` for a folder whose meta.json cannot be read)."""
    if spec.source == "ogb":
        return family_of_name(spec.name)
    if spec.source == "synthetic":
        return synthetic_family(spec)
    assert spec.path is not None
    try:
        return read_meta_json(spec.path)["family"]
    except DatasetError:
        return None


def load_file(path: Path | str) -> dict[str, DatasetSpec]:
    """Load and validate one registry file."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as err:
        raise DatasetError(path, f"cannot read registry ({err.strerror})") from None
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise DatasetError(path, f"not valid YAML ({str(err).splitlines()[0]})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("datasets"), dict):
        raise DatasetError(path, "expected a top-level 'datasets:' mapping of entries")
    return {str(name): _entry(str(name), raw, str(path)) for name, raw in doc["datasets"].items()}


def builtin_registry_path() -> Path:
    """The ``datasets.yaml`` shipped inside the ``pipeline`` package."""
    return Path(str(resources.files("pipeline") / "datasets.yaml"))


def load_registry(extra: list[Path | str] | None = None) -> dict[str, DatasetSpec]:
    """The built-in registry plus ``$GNNKIT_REGISTRY`` files plus ``extra`` files.

    A name defined twice is refused, naming both files.
    """
    files: list[Path | str] = [builtin_registry_path()]
    files += [p for p in os.environ.get(REGISTRY_ENV, "").split(os.pathsep) if p]
    files += list(extra or [])
    merged: dict[str, DatasetSpec] = {}
    for file in files:
        for name, spec in load_file(file).items():
            if name in merged:
                raise DatasetError(file, f"dataset '{name}' is already defined in {merged[name].registry}")
            merged[name] = spec
    return merged


def looks_like_path(name: str) -> bool:
    """``name`` names a folder rather than a registry entry: it has a separator, starts with ``.``
    or ``~``, or is a folder here."""
    return os.sep in name or name.startswith((".", "~")) or Path(name).is_dir()


def resolve(name_or_path: str | Path, registry: dict[str, DatasetSpec] | None = None) -> DatasetSpec:
    """Turn a registry name or an OGB-format folder path into a :class:`DatasetSpec`.

    Raises:
        DatasetError: Unknown name (listing the choices and the closest one) or missing folder.
    """
    text = str(name_or_path)
    registry = load_registry() if registry is None else registry
    if text in registry:
        return registry[text]
    if isinstance(name_or_path, Path) or looks_like_path(text):
        path = Path(text).expanduser().resolve()
        if not path.is_dir():
            raise DatasetError(text, "no such folder (expected an OGB-format dataset folder with meta.json)")
        return DatasetSpec(name=path.name, source="ogb-dir", path=path, registry="<path>")
    close = difflib.get_close_matches(text, list(registry), n=1)
    choices = f"{', '.join(sorted(registry))}, or an OGB-format folder path"
    hint = f"; did you mean '{close[0]}'? (choices: {choices})" if close else f"; choices: {choices}"
    raise DatasetError("dataset", f"unknown dataset '{text}'{hint}")
