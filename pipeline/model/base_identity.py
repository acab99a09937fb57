"""Which base model an adapter was trained on, recorded at training time and checked at every load.

A LoRA adapter only means something on the exact weights it was trained on. When a model folder
later holds other weights, loading a run's adapter onto it either works silently (same shapes:
nonsense answers) or fails deep inside peft with a `size mismatch` traceback. So the trainer records
the base's identity in the run folder and in `adapter/` (`base_model.json`), and
`pipeline.model.loading.load_adapter` (inference, evaluation) and a resumed run compare it with the
model actually loaded, raising one `BaseModelMismatchError` that says what differs and what to do.

The identity (`describe_base`):
- `config`: the model's configuration flattened to `a.b.c` keys (`text_config.hidden_size`, ...),
  without keys that describe how it was loaded rather than what it is (dtype, quantization, cache,
  attention implementation, paths, versions: `IGNORED_CONFIG_KEYS`), and `config_sha256` of it;
- `weights_sha256`: a cheap fingerprint of the weights: SHA-256 of the first `FINGERPRINT_VALUES`
  values (as float32) of every one-dimensional language-model weight (the RMSNorm scales, a few KB
  each) and of the first rows of the token embedding, each rounded to bf16. None of these is ever
  quantized, and rounding to bf16 makes a float32 load and a bf16 load of the same checkpoint read
  the same values, so the fingerprint is the same at 4-bit, 8-bit, bf16 or float32 compute, on any
  device; any fine-tune or another checkpoint of the same architecture changes it.

Two identities match when every config key present in both has the same value (a newer transformers
may add keys) and the weight fingerprints are equal. An adapter saved before this check existed has
no `base_model.json`: it is loaded as before, and a `size mismatch` still becomes the typed error.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from pipeline.errors import BaseModelMismatchError
from pipeline.fileio import atomic_write_json

IDENTITY_FILE = "base_model.json"
"""Written into a run folder and into its `adapter/` folder."""

IGNORED_CONFIG_KEYS = frozenset({
    "_name_or_path", "name_or_path", "transformers_version", "torch_dtype", "dtype", "use_cache",
    "quantization_config", "_attn_implementation", "attn_implementation", "_attn_implementation_autoset",
    "_attn_implementation_internal", "_commit_hash", "output_attentions", "output_hidden_states",
    "return_dict", "torchscript", "use_return_dict", "tf_legacy_loss", "chunk_size_feed_forward",
    "_experts_implementation", "experts_implementation",
})
"""Config keys (at any depth) that say how a model was loaded, not which model it is."""

FINGERPRINT_VALUES = 4096
"""Values taken from each fingerprinted tensor (its first ones, flattened)."""


def _flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    if isinstance(value, dict):
        for key in sorted(value):
            if key in IGNORED_CONFIG_KEYS:
                continue
            out.update(_flatten(value[key], f"{prefix}{key}."))
    else:
        out[prefix[:-1]] = value
    return out


def config_fingerprint(config_dict: dict) -> tuple[dict[str, Any], str]:
    """`(flat, sha256)`: the config flattened to `a.b.c` keys without `IGNORED_CONFIG_KEYS`, and the
    SHA-256 (hex) of its sorted JSON."""
    flat = json.loads(json.dumps(_flatten(config_dict), default=str))
    digest = hashlib.sha256(json.dumps(flat, sort_keys=True).encode("utf-8")).hexdigest()
    return flat, digest


def _fingerprint_tensors(model: Any) -> list[tuple[str, Any]]:
    """The (name, tensor) pairs the weight fingerprint reads, in name order (see the module docstring)."""
    import torch

    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    chosen = []
    for name, param in base.named_parameters():
        if "lora_" in name or "language_model" not in name or not torch.is_floating_point(param):
            continue
        if param.dim() == 1 or name.endswith("embed_tokens.weight"):
            chosen.append((name, param))
    return sorted(chosen, key=lambda pair: pair[0])


def weights_fingerprint(model: Any) -> str | None:
    """SHA-256 (hex) of the first `FINGERPRINT_VALUES` values (rounded to bf16, as float32) of each tensor chosen by
    `_fingerprint_tensors`, with their names; None when the model has none of them."""
    import torch

    pairs = _fingerprint_tensors(model)
    if not pairs:
        return None
    digest = hashlib.sha256()
    with torch.no_grad():
        for name, tensor in pairs:
            # rounded to bf16 first: a checkpoint loaded in bf16 (a merged export) or in float32 (a CPU without
            # native bf16 trains in float32) reads the same values, whatever precision the file holds
            values = tensor.detach().reshape(-1)[:FINGERPRINT_VALUES].to("cpu", torch.bfloat16).to(torch.float32)
            digest.update(name.encode("utf-8"))
            digest.update(values.numpy().tobytes())
    return digest.hexdigest()


def describe_base(model: Any, model_id: str) -> dict:
    """The identity of a loaded base model (before LoRA is attached, or a PeftModel's base).

    Returns `{"model": model_id, "config_sha256", "config" (flat dict), "weights_sha256"}`.
    """
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    flat, digest = config_fingerprint(base.config.to_dict())
    return {"model": str(model_id), "config_sha256": digest, "config": flat, "weights_sha256": weights_fingerprint(base)}


def write_identity(folder: str | Path, identity: dict) -> None:
    """Write `identity` to `folder/base_model.json` (atomically)."""
    atomic_write_json(Path(folder) / IDENTITY_FILE, identity)


def read_identity(folder: str | Path) -> dict | None:
    """The identity recorded in `folder/base_model.json`, or None when the folder has none (or it is unreadable)."""
    path = Path(folder) / IDENTITY_FILE
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and "config_sha256" in data else None


def differences(recorded: dict, current: dict, *, limit: int = 6) -> list[str]:
    """What differs between two identities, one short phrase each (empty when they match).

    Config keys present in both with different values are listed first (`text_config.hidden_size:
    trained 128, now 256`), then the weight fingerprint when both have one and they differ.
    """
    old, new = recorded.get("config") or {}, current.get("config") or {}
    changed = [key for key in sorted(set(old) & set(new)) if old[key] != new[key]]
    out = [f"`{key}`: trained {old[key]!r}, now {new[key]!r}" for key in changed[:limit]]
    if len(changed) > limit:
        out.append(f"and {len(changed) - limit} more config values")
    before, after = recorded.get("weights_sha256"), current.get("weights_sha256")
    if before and after and before != after:
        out.append(f"weights fingerprint: trained {before[:12]}, now {after[:12]} (other weights, same shapes)"
                   if not changed else f"weights fingerprint: trained {before[:12]}, now {after[:12]}")
    return out


def mismatch_error(what: str, recorded: dict, current_model: str, found: list[str], fix: str) -> BaseModelMismatchError:
    """The one error for an adapter on the wrong base: `what` (e.g. "The adapter in `X`"), the base it
    was trained on, what differs (`found`) and `fix`."""
    return BaseModelMismatchError(
        f"{what} was trained on a different base model than the one loaded from `{current_model}` "
        f"(trained on `{recorded.get('model')}`, config {str(recorded.get('config_sha256'))[:12]}); it differs in: "
        f"{'; '.join(found)}. A LoRA adapter only works on the exact weights it was trained on. {fix}"
    )


def check_base(recorded: dict | None, model: Any, model_id: str, *, what: str, fix: str) -> None:
    """Raise `BaseModelMismatchError` when the loaded `model` is not the base `recorded` describes.

    Args:
        recorded: an identity from `read_identity` (None: nothing recorded, nothing checked).
        model: the loaded base model (or a PeftModel; its base is described).
        model_id: where it was loaded from (named in the message).
        what: the subject of the message, e.g. "The adapter in `WS/runs/r1/adapter`".
        fix: what to do, e.g. "Load it on `google/gemma-3n-E2B-it`, or train a new run on this model."
    """
    if not recorded:
        return
    found = differences(recorded, describe_base(model, model_id))
    if found:
        raise mismatch_error(what, recorded, model_id, found, fix)


def is_size_mismatch(error: BaseException) -> bool:
    """True for the error torch/peft raise when an adapter's tensors do not fit the model's shapes."""
    return isinstance(error, RuntimeError) and "size mismatch" in str(error)


def record_or_check_run_base(run_dir: str | Path, current: dict, run_name: str) -> None:
    """At a run's start: record the base's identity in the run folder; at a resume: check it is unchanged.

    Args:
        run_dir: the run folder (`WS/runs/NAME`).
        current: `describe_base` of the base model just loaded for this run.
        run_name: named in the error.

    Raises:
        BaseModelMismatchError: the run folder records another base than `current` (the model
            folder now holds other weights): its checkpoints would continue on the wrong base.
    """
    recorded = read_identity(run_dir)
    if recorded is None:
        write_identity(run_dir, current)
        return
    found = differences(recorded, current)
    if found:
        raise mismatch_error(
            f"Run `{run_name}`", recorded, str(current.get("model")), found,
            f"Resume it only with the weights it was trained on (put them back at `{recorded.get('model')}`), "
            "or start a new run (--run NEW) on this model.",
        )


def run_base_model(run_dir: str | Path, run_name: str, model: str | None = None, *, flag: str = "--model") -> str:
    """The base model to load for a run: `model` when given, else the one in the run's config.json.

    A run is tied to its base's identity (config + weight fingerprint, recorded in `base_model.json`),
    not to the path it was loaded from: a folder moved or copied elsewhere, or a hub id and a local
    folder holding the same weights, are the same base. So a given `model` is never compared with the
    recorded path as text; whoever loads it compares identities (`pipeline.model.loading.load_adapter`
    for infer, evaluate, Try, Judge and export; `record_or_check_run_base` for a resume), and a
    different base is refused there with `BaseModelMismatchError`.

    Args:
        run_dir: the run folder (`WS/runs/NAME`, with config.json).
        run_name: named in errors.
        model: a hub id or local folder given by the person (`--model`), or None.
        flag: how the person gives another model here, named in the error (`--model`, or the app's words).

    Returns:
        The model id or folder to load (str).

    Raises:
        ModelLoadError: no `model` given, and the recorded one is a local folder that is no longer
            there (moved or deleted): the message names it and says to give the folder where it is now.
    """
    from pipeline.errors import ModelLoadError
    from pipeline.model.hub import is_local_model

    if model:
        return str(model)
    try:
        recorded = json.loads((Path(run_dir) / "config.json").read_text(encoding="utf-8")).get("model")
    except (OSError, ValueError, AttributeError):
        recorded = None
    if not recorded:
        raise ModelLoadError(f"Run `{run_name}` records no base model in {Path(run_dir) / 'config.json'}; give it with {flag}.")
    recorded = str(recorded)
    if is_local_model(recorded) and not Path(recorded).expanduser().is_dir():
        raise ModelLoadError(
            f"Run `{run_name}` was trained on the model folder `{recorded}`, which is no longer there (moved or deleted). "
            f"Put the folder back there, or give the folder where that model is now with {flag} (any folder or hub id "
            "holding the same weights is accepted: the run's base is recognised by its config and weights, not by its path)."
        )
    return recorded
