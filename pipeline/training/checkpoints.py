"""Checkpoints a resume can trust: every file a resume reads is checked first, damaged checkpoints
are set aside (never deleted) for the newest intact one, save and load errors name the checkpoint,
the file and the cause, and free disk space is checked before the run and before each save.

A kill or a full disk during a save leaves a checkpoint folder that looks complete (its
`trainer_state.json` exists) but holds an empty or cut file; `Trainer` then fails on every
`--resume` with a raw `JSONDecodeError` or an unpickling error, and the run is stuck. So before
resuming, `newest_intact_checkpoint` reads every file `Trainer` reads back
(`transformers.Trainer._load_from_checkpoint`, `_load_optimizer_and_scheduler`, `_load_rng_state`,
`TrainerState.load_from_json`), newest first:

- `trainer_state.json`: parses as JSON with an integer `global_step`;
- `adapter_config.json`: parses as JSON; the adapter weights (`adapter_model.safetensors`, or the
  older `adapter_model.bin`): a safetensors header that parses and whose tensors fill the file
  exactly (the format's own layout: 8-byte little-endian header size, JSON header, data), or a
  torch zip archive whose members all pass their CRC;
- `optimizer.pt`, `scheduler.pt` (required), `rng_state*.pth`, `scaler.pt` (when present): torch's
  zip archives (`torch.save`), every member's CRC checked by `zipfile`.

All of this is torch-free and reads no tensor into memory beyond zipfile's buffered CRC pass.
The run's final adapter is saved here too (`save_adapter`), and its result.json (`write_result`:
a full disk at the end never hides the error that failed the run).
It deliberately does not repair a checkpoint: a damaged one is renamed `damaged-checkpoint-N`
(Trainer's rotation only looks at `checkpoint-*`), so nothing saved is lost.
"""

from __future__ import annotations

import json
import struct
import zipfile
from pathlib import Path
from typing import Any

from pipeline.errors import TrainingError, cause_words
from pipeline import fileio
from pipeline.fileio import atomic_write_json

CHECKPOINT_PREFIX = "checkpoint-"
DAMAGED_PREFIX = "damaged-"
"""A damaged checkpoint is kept as `checkpoints/damaged-checkpoint-N`."""
ADAPTER_WEIGHTS = ("adapter_model.safetensors", "adapter_model.bin")
REQUIRED_TORCH_FILES = ("optimizer.pt", "scheduler.pt")
OPTIONAL_TORCH_PATTERNS = ("rng_state*.pth", "scaler.pt")
OPTIMIZER_STATES_PER_WEIGHT = 2
"""AdamW keeps two fp32 states per trainable weight (exp_avg, exp_avg_sq; Loshchilov & Hutter 2019): the
largest of the optimizers offered, so the estimate of a first checkpoint's size is an upper bound."""


def _check_json(path: Path, *, step: bool = False) -> str | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return "missing"
    except (OSError, UnicodeDecodeError) as error:
        return f"unreadable ({error})"
    except json.JSONDecodeError as error:
        return "empty file" if not path.read_bytes().strip() else f"not valid JSON ({error})"
    if not isinstance(data, dict):
        return "not a JSON object"
    if step and not isinstance(data.get("global_step"), int):
        return "has no integer `global_step`"
    return None


def _check_safetensors(path: Path) -> str | None:
    """None when the safetensors file's header parses and its tensors end exactly at the end of the file."""
    try:
        size = path.stat().st_size
        with open(path, "rb") as handle:
            head = handle.read(8)
            if len(head) < 8:
                return "empty file" if size == 0 else f"cut short ({size} bytes)"
            (header_len,) = struct.unpack("<Q", head)
            if 8 + header_len > size:
                return f"cut short ({size} bytes; the header alone needs {8 + header_len})"
            header = json.loads(handle.read(header_len).decode("utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        return f"unreadable header ({error})"
    ends = [int(v["data_offsets"][1]) for k, v in header.items() if k != "__metadata__" and isinstance(v, dict)]
    expected = 8 + header_len + (max(ends) if ends else 0)
    if expected != size:
        return f"cut short ({size} bytes where its header describes {expected})" if size < expected else \
            f"{size - expected} bytes more than its header describes"
    return None


def _check_zip(path: Path) -> str | None:
    """None when `path` is a zip archive (what `torch.save` writes) whose every member passes its CRC."""
    try:
        if path.stat().st_size == 0:
            return "empty file"
        with zipfile.ZipFile(path) as archive:
            bad = archive.testzip()
    except FileNotFoundError:
        return "missing"
    except (OSError, zipfile.BadZipFile, EOFError, ValueError) as error:
        return f"cut short or damaged ({error})"
    return f"damaged (member `{bad}` fails its CRC)" if bad else None


def checkpoint_problems(checkpoint: str | Path) -> list[str]:
    """What is wrong with a checkpoint folder, one "`FILE`: cause" each; [] when a resume can read it all.

    Args:
        checkpoint: a `checkpoints/checkpoint-N` folder.
    """
    folder = Path(checkpoint)
    problems = []
    for name, step in (("trainer_state.json", True), ("adapter_config.json", False)):
        found = _check_json(folder / name, step=step)
        if found:
            problems.append(f"`{name}`: {found}")
    weights = next((folder / n for n in ADAPTER_WEIGHTS if (folder / n).exists()), None)
    if weights is None:
        problems.append(f"`{ADAPTER_WEIGHTS[0]}`: missing")
    else:
        found = _check_safetensors(weights) if weights.suffix == ".safetensors" else _check_zip(weights)
        if found:
            problems.append(f"`{weights.name}`: {found}")
    optional = [p for pattern in OPTIONAL_TORCH_PATTERNS for p in sorted(folder.glob(pattern))]
    for path in [folder / n for n in REQUIRED_TORCH_FILES] + optional:
        found = _check_zip(path)
        if found:
            problems.append(f"`{path.name}`: {found}")
    return problems


def _numbered(folder: Path) -> list[tuple[int, Path]]:
    out = []
    if folder.is_dir():
        for child in folder.iterdir():
            if child.is_dir() and child.name.startswith(CHECKPOINT_PREFIX):
                try:
                    out.append((int(child.name[len(CHECKPOINT_PREFIX):]), child))
                except ValueError:
                    continue
    return sorted(out, reverse=True)


def newest_intact_checkpoint(checkpoints_dir: str | Path) -> tuple[Path | None, list[dict]]:
    """The newest `checkpoint-N` folder every file of which a resume can read, and the newer damaged ones.

    Returns:
        `(checkpoint or None, damaged)`, `damaged` a list of `{"checkpoint": name, "path", "problems":
        [...]}` for each newer checkpoint that failed `checkpoint_problems`, newest first.
    """
    damaged = []
    for _, path in _numbered(Path(checkpoints_dir)):
        problems = checkpoint_problems(path)
        if not problems:
            return path, damaged
        damaged.append({"checkpoint": path.name, "path": str(path), "problems": problems})
    return None, damaged


def set_aside(damaged: list[dict]) -> list[dict]:
    """Rename each damaged checkpoint to `damaged-checkpoint-N` beside it (kept, never deleted, and out of
    Trainer's way); returns `damaged` with `kept_as` added. A name already taken gets `-2`, `-3`..."""
    for entry in damaged:
        source = Path(entry["path"])
        target = source.with_name(DAMAGED_PREFIX + source.name)
        number = 2
        while target.exists():
            target = source.with_name(f"{DAMAGED_PREFIX}{source.name}-{number}")
            number += 1
        source.rename(target)
        entry["kept_as"] = str(target)
    return damaged


def damaged_text(damaged: list[dict], resumed_from: Path | None) -> str:
    """One sentence for the log and result.json: which checkpoints were damaged, why, and what happens."""
    listed = "; ".join(f"{d['checkpoint']} ({', '.join(d['problems'])})" for d in damaged)
    kept = ", ".join(Path(d.get("kept_as") or d["path"]).name for d in damaged)
    then = f"resuming from {resumed_from.name}, the newest intact one" if resumed_from else "no intact checkpoint is left"
    one = len(damaged) == 1
    return (f"{'Damaged checkpoint' if one else 'Damaged checkpoints'}, as a kill or a full disk during a save leaves "
            f"{'it' if one else 'them'}: {listed}. {'It is' if one else 'They are'} kept as {kept}; {then}.")


def save_error(checkpoint: str | Path, error: BaseException, *, what: str = "checkpoint") -> TrainingError:
    """A `TrainingError` for a failed save of `checkpoint` (`what`: "checkpoint", or "adapter" for the
    run's final adapter folder): the folder, the file (when the error names one) and the cause, with what to do."""
    path = Path(checkpoint)
    file = getattr(error, "filename", None)
    where = f" writing `{Path(file).name}`" if file else ""
    cause = cause_words(error)
    full = "No space left" in str(error) or getattr(error, "errno", None) == 28
    fix = ("Free disk space in the run's folder" if full else "Check the run's folder (disk, permissions)") + \
        "; the checkpoints saved before it are kept and --resume continues from the newest intact one."
    return TrainingError(f"Saving {what} `{path.name}` ({path}) failed{where}: {cause}. {fix}")


def load_error(checkpoint: str | Path, what: str, error: BaseException) -> TrainingError:
    """A `TrainingError` for a checkpoint a resume could not read: the checkpoint, `what` (the file or
    part, e.g. "optimizer.pt / scheduler.pt") and the cause."""
    path = Path(checkpoint)
    file = getattr(error, "filename", None)
    what = f"`{Path(file).name}`" if file else what
    return TrainingError(
        f"Resuming from checkpoint `{path.name}` ({path}) failed reading {what}: {cause_words(error)}. "
        f"Rename or delete that folder and --resume again to continue from the checkpoint before it."
    )


def check_free_disk(folder: str | Path, needed_bytes: int, what: str) -> None:
    """Raise `TrainingError` unless the disk holding `folder` has `needed_bytes` x `pipeline.fileio.DISK_MARGIN` free.

    Args:
        folder: where the bytes will be written (the run folder, its checkpoints/).
        needed_bytes: what the write takes (bytes).
        what: names the write in the message, e.g. "checkpoint-4".
    """
    free, wanted = fileio.disk_room(folder, needed_bytes)
    if free < wanted:
        raise TrainingError(
            f"Not enough free disk for {what} in {folder}: {free / 2**20:.1f} MiB free, about {wanted / 2**20:.1f} MiB "
            "needed. Free some space on that disk (or move the workspace to a larger one); a stopped or failed run "
            "continues with --resume from its newest intact checkpoint."
        )


def checkpoint_bytes(checkpoints_dir: str | Path, trainable_params: int) -> int:
    """Bytes the next checkpoint save writes: the size of the newest saved checkpoint when there is one,
    else an upper bound from the trainable parameters (fp32 adapter weights + `OPTIMIZER_STATES_PER_WEIGHT`
    fp32 optimizer states each, + 1 MiB of small files)."""
    numbered = _numbered(Path(checkpoints_dir))
    if numbered:
        return sum(p.stat().st_size for p in numbered[0][1].rglob("*") if p.is_file())
    return int(trainable_params) * 4 * (1 + OPTIMIZER_STATES_PER_WEIGHT) + 2**20


def write_result(path: Path, result: dict, log: Any) -> None:
    """Write a run's result.json at its end without hiding the first error.

    When the run already failed (the error that failed it is being raised, or returned in `result`),
    a failure to write the file (a full disk) is logged on `log`, not raised in its place; after a
    run that went well it is a `TrainingError` naming the file and the cause.
    """
    try:
        atomic_write_json(path, result)
    except OSError as error:
        if result.get("status") == "failed":
            log.error("result.json could not be written (%s: %s); the run's error above stands.", type(error).__name__, error)
            return
        raise TrainingError(f"The run ended ({result.get('status')}) but `{path}` could not be written "
                            f"({type(error).__name__}: {error}). Free disk space; the adapter and checkpoints are kept.") from error


def save_adapter(model: Any, processor: Any, base_identity: dict, adapter_dir: Path,
                 weights_from: Path | None = None) -> None:
    """Save the run's LoRA adapter (PEFT format) + processor + base identity into `adapter_dir`,
    replacing it atomically (written beside it, then renamed). The adapter weights are the model's,
    or those saved in `weights_from` (the kept best checkpoint, `pipeline.training.best_checkpoint`).

    Raises:
        TrainingError: not enough free disk (free and needed named), or the save failed (the file and
            the cause named); the previous adapter, if any, is kept.
    """
    import shutil

    from pipeline.model.base_identity import write_identity

    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    check_free_disk(adapter_dir.parent, trainable * 4 + 2**20, f"the adapter ({adapter_dir.name}/)")
    try:
        with fileio.staged_folder(adapter_dir) as staging:
            if weights_from is not None:
                shutil.copytree(weights_from, staging, dirs_exist_ok=True)
            else:
                model.save_pretrained(str(staging))
            processor.save_pretrained(str(staging))
            write_identity(staging, base_identity)  # load_adapter checks it (pipeline.model.base_identity)
    except OSError as error:
        raise save_error(adapter_dir, error, what="adapter") from error
