"""Which model families this pipeline knows, and which family a model belongs to.

- `family_of(model_config)`: the family of a `config.json` dict, by its `model_type`;
- `family_for(model)`: the family of a hub id or a local folder (its `config.json`, or a shipped copy);
- `load_model_config(model)`: that `config.json` as a dict (shipped copies in `assets/`, so estimates
  need no download);
- `DEFAULT_MODEL`, `KNOWN_MODELS`: what the app and the CLI offer.

Torch-free at import.
"""

from __future__ import annotations

import json
from pathlib import Path

from pipeline.errors import ModelLoadError
from pipeline.model.family import ModelFamily
from pipeline.model.gemma3n import GEMMA3N
from pipeline.model.gemma4 import GEMMA4
from pipeline.model.shape import ModelShape, PartParams

ASSETS_DIR = Path(__file__).resolve().parents[2] / "assets"
"""Shipped copies of the hub checkpoints' `config.json` (`ModelFamily.shipped_configs` names them)."""

FAMILIES: dict[str, ModelFamily] = {family.name: family for family in (GEMMA3N, GEMMA4)}
"""Every family this pipeline knows, by `ModelFamily.name`."""

DEFAULT_FAMILY = FAMILIES["gemma3n"]
DEFAULT_MODEL = DEFAULT_FAMILY.default_model
"""The base model a new run, estimate or build uses unless told otherwise."""
KNOWN_MODELS = tuple(model for family in FAMILIES.values() for model in family.models)
"""Hub ids the app's Model box and the CLI's `--model` offer, the default first."""


def family_of(model_config: dict) -> ModelFamily:
    """The family of a `config.json` dict, by its `model_type` (a dict without one is read as the
    default family's, whose `shape` then names any key it misses).

    Raises:
        ModelLoadError: the config names a `model_type` of no known family; the message lists them.
    """
    model_type = model_config.get("model_type") if isinstance(model_config, dict) else None
    if model_type is None:
        return DEFAULT_FAMILY
    for family in FAMILIES.values():
        if model_type in family.model_types:
            return family
    known = ", ".join(f"{f.label} (`{'`, `'.join(f.model_types)}`)" for f in FAMILIES.values())
    raise ModelLoadError(
        f"config.json has model_type {model_type!r}, which is not a family this app trains: {known}. "
        f"Give one of {', '.join(KNOWN_MODELS)} or a folder holding such a checkpoint."
    )


def shipped_config_path(model: str) -> Path | None:
    """The shipped copy of hub id `model`'s `config.json` in `assets/`, or None."""
    for family in FAMILIES.values():
        if model in family.shipped_configs:
            return ASSETS_DIR / family.shipped_configs[model]
    return None


def load_model_config(model: str) -> dict:
    """The `config.json` dict of `model`: a shipped hub id (`assets/`), or a local folder / file.

    Raises:
        ModelLoadError: naming the path and the fix when neither exists, or the file is not JSON.
    """
    shipped = shipped_config_path(str(model))
    if shipped is not None:
        return json.loads(shipped.read_text(encoding="utf-8"))
    path = Path(str(model)).expanduser()
    if path.is_dir():
        path = path / "config.json"
    if path.is_file():
        try:
            return json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as error:
            raise ModelLoadError(f"{path} is not valid JSON ({error}); re-download the model's config.json.") from None
    shipped_ids = sorted(m for f in FAMILIES.values() for m in f.shipped_configs)
    raise ModelLoadError(
        f"No config.json for `{model}`: it is neither {', '.join(shipped_ids)} "
        f"nor a folder holding config.json. Pass one of those ids or a local model folder."
    )


def family_for(model: str) -> ModelFamily:
    """The family of hub id or folder `model`: a known hub id directly, else its `config.json`
    (`load_model_config`); an id of the hub that is neither known nor shipped is taken as the default
    family's (its config is only read when the model is loaded).

    Raises:
        ModelLoadError: a local config.json names no known family.
    """
    model = str(model)
    for family in FAMILIES.values():
        if model in family.models or model in family.shipped_configs:
            return family
    path = Path(model).expanduser()
    if (path / "config.json").is_file() or path.is_file():
        return family_of(load_model_config(model))
    return DEFAULT_FAMILY  # a folder without config.json: the loader's own check names what is missing


def other_family(built_with: str | None, model: str | None) -> tuple[ModelFamily, ModelFamily] | None:
    """(the family a dataset was built for, the family of `model`) when they differ: a dataset built with
    `built_with`'s tokenizer (its build report's `model`) counted each clip's tokens, and left rows out, the
    way that family does, not `model`'s. None when they are the same family, or either is unknown or cannot be
    read (a folder that is gone: nothing to say)."""
    def known(name: str) -> ModelFamily | None:  # a known hub id or a folder with its config.json, else None
        if any(name in f.models or name in f.shipped_configs for f in FAMILIES.values()) or \
                (Path(name).expanduser() / "config.json").is_file():
            try:
                return family_for(name)
            except ModelLoadError:
                return None
        return None

    built, picked = known(str(built_with or "")), known(str(model or ""))
    if built is None or picked is None or built.name == picked.name:
        return None
    return built, picked


def estimate_only(model: str) -> bool:
    """Whether hub id `model` is priced but not a supported training target (`ModelFamily.estimate_only`:
    Gemma 4 E4B); False for every other id and for folders."""
    return any(str(model) in family.estimate_only for family in FAMILIES.values())


def model_shape(model_config: dict) -> ModelShape:
    """The `ModelShape` of a `config.json` dict, read by its family (`ModelFamily.shape`).

    Raises:
        ModelLoadError: not a dict, not a known family, or a key the family needs is missing.
    """
    if not isinstance(model_config, dict):
        raise ModelLoadError(f"Model config must be a dict from config.json, got {type(model_config).__name__}.")
    return family_of(model_config).shape(model_config)


def part_params(shape: ModelShape) -> dict[str, PartParams]:
    """Parameters per part of the model `shape` describes (`ModelFamily.part_params` of its family)."""
    return FAMILIES[shape.family].part_params(shape)


def model_family(model) -> ModelFamily:
    """The family of a loaded model (or a PeftModel of one), by its config's `model_type`."""
    config = getattr(model, "config", None)
    return family_of({"model_type": getattr(config, "model_type", None)})


CHECKPOINT_DTYPES = ("bfloat16", "float16", "float32")
"""The weight dtypes a checkpoint's config.json may state (`dtype`, or `torch_dtype` before transformers 5)."""


def stated_checkpoint_dtype(model_config: dict) -> str | None:
    """The dtype a model's config.json (as a dict) says its weights are stored in: `dtype` or
    `torch_dtype`, at the top level or in `text_config`, one of `CHECKPOINT_DTYPES`; None when it
    does not say. Shared by the memory estimate (`pipeline.memory.terms.checkpoint_dtype`) and the
    loader (`pipeline.model.load_dtype.checkpoint_torch_dtype`)."""
    for part in (model_config, model_config.get("text_config") or {}):
        value = part.get("dtype") or part.get("torch_dtype")
        if isinstance(value, str) and value in CHECKPOINT_DTYPES:
            return value
    return None
