"""What of a Hugging Face model is on this computer, read from the hub cache alone (no request, so it answers
in a moment even offline), and the refusal of a run whose model is not all here.

The cache is huggingface_hub's (`HF_HUB_CACHE`, else `HF_HOME/hub`, else `~/.cache/huggingface/hub`):
`models--OWNER--NAME/refs/main` names the commit, `snapshots/COMMIT/FILE` point at `blobs/ETAG`, and
`trees/COMMIT.json` lists every file with its size (written by `snapshot_download`, and so by
`pipeline.model.download`). A model is here when every file of that listing, less `SKIPPED_FILES`, is there at
its listed size; a model fetched file by file by `from_pretrained` has no listing, and is here when its
`config.json` and every weights file its index names are. Sizes only: hashes are checked by a download
(`pipeline.model.download`), which reads every byte.

Torch-free; no request.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Iterable, TypeVar

from pipeline.errors import ModelLoadError
from pipeline.model.hub import check_local_folder, is_local_model
from pipeline.units import format_bytes

T = TypeVar("T")

SKIPPED_FILES = ("*.gguf", "*.onnx", "*.onnx_data", "onnx/*", "*.msgpack", "*.h5", "*.tflite", "*.ot",
                 "*.mlmodel", "original/*")
"""Files of a repo that a download leaves out (`fnmatch` patterns): other runtimes' copies of the weights
(GGUF, ONNX, Flax, TensorFlow, Core ML, the `original/` checkpoints some repos keep) that transformers never
reads. PyTorch `.bin` weights are left out too when the repo has safetensors ones (`wanted`)."""


@dataclass(frozen=True)
class LocalCopy:
    """What of a hub model is on this computer, read from the Hugging Face cache alone (no request)."""

    model: str
    folder: Path | None
    """The snapshot folder (`.../models--OWNER--NAME/snapshots/COMMIT`), or None when nothing is here."""
    size_bytes: int
    """Bytes of the model's files that are here (whole files only)."""
    complete: bool
    """Every file is here at the size the hub listed (its cached tree listing), or, without a listing,
    `config.json` and every weights file its index names."""
    missing: tuple[str, ...]
    """Files absent or of another size than listed; empty when `complete`."""
    partial_bytes: int
    """Bytes of partial files (`blobs/ETAG.incomplete`) a download will continue."""

    def to_dict(self) -> dict:
        """As JSON: `folder` as text."""
        return {**asdict(self), "folder": str(self.folder) if self.folder else None, "missing": list(self.missing)}


def cache_dir(cache: str | os.PathLike | None = None) -> Path:
    """The Hugging Face hub cache (`HF_HUB_CACHE`, else `HF_HOME/hub`, else `~/.cache/huggingface/hub`), or `cache`."""
    from huggingface_hub import constants

    return Path(cache if cache is not None else constants.HF_HUB_CACHE).expanduser()


def storage_folder(model_id: str, cache: str | os.PathLike | None = None) -> Path:
    """The cache folder of one model, `CACHE/models--OWNER--NAME` (huggingface_hub's `repo_folder_name`)."""
    from huggingface_hub.file_download import repo_folder_name

    return cache_dir(cache) / repo_folder_name(repo_id=model_id, repo_type="model")


def wanted(items: Iterable[T], key: Callable[[T], str] = str) -> list[T]:
    """The files of a repo (`key(item)` is the file's path in it) that a download fetches and a model here must
    hold: all but `SKIPPED_FILES`, and PyTorch `.bin` weights when safetensors ones are there."""
    from huggingface_hub.utils import filter_repo_objects

    kept = list(filter_repo_objects(list(items), ignore_patterns=list(SKIPPED_FILES), key=key))
    if any(key(item).endswith(".safetensors") for item in kept):
        kept = [item for item in kept if not (key(item).endswith(".bin") and "pytorch_model" in key(item))]
    return kept


def resolved_file(path: Path) -> Path | None:
    """The file behind a snapshot entry (a symlink into `blobs/`, or the file itself), or None."""
    try:
        return path.resolve(strict=True) if path.exists() else None
    except OSError:
        return None


def _expected_without_listing(snapshot: Path) -> dict[str, int | None]:
    """Without a cached tree listing: `config.json` and the weights its index names (or `model.safetensors`)."""
    expected: dict[str, int | None] = {"config.json": None}
    for index in ("model.safetensors.index.json", "pytorch_model.bin.index.json"):
        try:
            weight_map = json.loads((snapshot / index).read_text(encoding="utf-8")).get("weight_map") or {}
        except (OSError, ValueError):
            continue
        expected.update({index: None, **{name: None for name in set(weight_map.values())}})
        return expected
    weights = "pytorch_model.bin" if (snapshot / "pytorch_model.bin").exists() else "model.safetensors"
    expected[weights] = None
    return expected


def local_copy(model_id: str, *, cache: str | os.PathLike | None = None, revision: str = "main") -> LocalCopy:
    """What of hub model `model_id` is in the Hugging Face cache, without any request (see the module docstring).

    Args:
        model_id: a hub id ("google/gemma-3n-E2B-it").
        cache: the hub cache folder (default `cache_dir()`).
        revision: the branch or tag whose commit `refs/` names ("main").
    """
    from huggingface_hub import get_cached_repo_tree
    from huggingface_hub.errors import CachedRepoTreeNotFoundError

    storage = storage_folder(model_id, cache)
    partial = sum(p.stat().st_size for p in storage.glob("blobs/*.incomplete") if p.name.count(".") == 1)
    try:
        commit = (storage / "refs" / revision).read_text(encoding="utf-8").strip()
    except OSError:
        return LocalCopy(model_id, None, 0, False, ("everything",), partial)
    snapshot = storage / "snapshots" / commit
    try:
        listing = get_cached_repo_tree(model_id, revision=commit, cache_dir=cache_dir(cache))
        expected: dict[str, int | None] = {f.path: f.size for f in wanted(listing, key=lambda f: f.path)}
    except CachedRepoTreeNotFoundError:
        expected = _expected_without_listing(snapshot)
    missing, size = [], 0
    for name, listed in expected.items():
        found = resolved_file(snapshot / name)
        here = found.stat().st_size if found is not None else None
        if here is None or (listed is not None and here != listed):
            missing.append(name)
        else:
            size += here
    return LocalCopy(model_id, snapshot if snapshot.is_dir() else None, size, not missing and snapshot.is_dir(),
                     tuple(missing), partial)


def not_here_message(model_id: str, copy: LocalCopy | None = None) -> str:
    """Why a run will not start on hub model `model_id`, which is not (all) on this computer, and the fix."""
    so_far = ""
    if copy is not None and (copy.size_bytes or copy.partial_bytes):
        so_far = f" ({format_bytes(copy.size_bytes + copy.partial_bytes)} of it is here so far)"
    return (f"`{model_id}` is not on this computer yet{so_far}, and a run never downloads a model by itself (a "
            f"download of gigabytes would hide inside the run). Get it first with "
            f"`python -m pipeline get-model --model {model_id}`, then start the run again.")


def require_model_here(model_id: str, *, cache: str | os.PathLike | None = None) -> Path:
    """The folder holding `model_id` on this computer: a local folder (checked), or a hub id complete in the
    Hugging Face cache (`local_copy`). No request is made, so a run refuses in a moment.

    Raises:
        ModelLoadError: a local folder that is missing or lacks a checkpoint, or a hub id not (all) here
            (`not_here_message`: it names `get-model`, which the app words as its Get the model button).
    """
    model_id = str(model_id).strip()
    if is_local_model(model_id):
        return check_local_folder(model_id)
    copy = local_copy(model_id, cache=cache)
    if not copy.complete or copy.folder is None:
        raise ModelLoadError(not_here_message(model_id, copy))
    return copy.folder
