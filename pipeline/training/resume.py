"""What a resumed run must find as it left it: its settings and the dataset build it trained on.

A run's checkpoint only continues the same training when the rest is the same. The settings are
compared with the run's `config.json` (`resolve_resume_config`). The dataset build is recorded when
the run starts, in the run folder's `dataset.json` (`record_dataset`: the build's content
fingerprint, rows per split and row ids, from `pipeline.data.dataset.build_identity`), and compared
on resume (`check_dataset`): after samples were deleted and the dataset rebuilt, a resume would
otherwise continue silently on other rows with another step total. A changed build is refused,
unless the resume says `--allow-dataset-change`; then the change is recorded in `dataset.json`
(`changes`: when, at which checkpoint, from which build to which) and in the run's result.

Torch-free (the app checks before it starts the training process).
"""

from __future__ import annotations

import json
import shlex
import time
from pathlib import Path

from pipeline.config import TrainConfig
from pipeline.errors import ConfigError, TrainingError
from pipeline.fileio import atomic_write_json

DATASET_RECORD = "dataset.json"
"""The run folder's record of the dataset build it trains on."""


def resolve_resume_config(paths: dict[str, Path], config: TrainConfig | None) -> TrainConfig:
    """The run's saved settings; `config`, when given, must equal them, except `model`.

    `model` may name another path or hub id for the same base (a moved folder, the hub id of a local
    copy): the run is tied to its base's identity, which the trainer compares once the model is
    loaded (`pipeline.model.base_identity.record_or_check_run_base`), not to a path. The
    returned config then carries the given `model`.

    Raises:
        TrainingError: the run has no config.json.
        ConfigError: `config` differs in another setting (lists each flag with the run's value).
    """
    if not paths["config"].exists():
        raise TrainingError(f"Run `{paths['dir'].name}` has no config.json in {paths['dir']}; there is nothing to resume.")
    saved = TrainConfig.from_dict(json.loads(paths["config"].read_text(encoding="utf-8")))
    if config is not None:
        saved = saved.replace(model=config.model)
        diffs = {k: (v, getattr(config, k)) for k, v in saved.to_dict().items() if getattr(config, k) != v}
        if diffs:
            listed = ", ".join(f"--{k.replace('_', '-')} {new!r} (run has {old!r})" for k, (old, new) in diffs.items())
            raise ConfigError(f"A resumed run keeps its settings; {listed}. Start a new run (--run NEW) to change them.")
    return saved


def _record_path(run_dir: Path) -> Path:
    return Path(run_dir) / DATASET_RECORD


def read_dataset_record(run_dir: Path) -> dict | None:
    """The run's `dataset.json`, or None (a run started before builds were recorded)."""
    try:
        data = json.loads(_record_path(run_dir).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and data.get("fingerprint") else None


def record_dataset(run_dir: Path, build: dict) -> dict:
    """Write the build a run starts on (`pipeline.data.dataset.build_identity`) to its `dataset.json`;
    returns the record."""
    record = {**build, "recorded_at": round(time.time(), 3), "changes": []}
    atomic_write_json(_record_path(run_dir), record)
    return record


def describe_change(old: dict, new: dict) -> str:
    """One sentence on how two builds differ: rows per split, ids removed / added, or content only."""
    parts = []
    for split in sorted(set(old.get("row_ids", {})) | set(new.get("row_ids", {}))):
        before, after = set(old.get("row_ids", {}).get(split, [])), set(new.get("row_ids", {}).get(split, []))
        removed, added = sorted(before - after), sorted(after - before)
        if removed or added:
            shown = lambda ids: ", ".join(ids[:5]) + (f" and {len(ids) - 5} more" if len(ids) > 5 else "")  # noqa: E731
            parts.append(f"{split} {len(before)} -> {len(after)} rows"
                         + (f" ({len(removed)} removed: {shown(removed)})" if removed else "")
                         + (f" ({len(added)} added: {shown(added)})" if added else ""))
    if not parts:
        parts.append("the same rows, but their text, scores, audio or token counts changed")
    return "; ".join(parts)


def check_dataset(run_dir: Path, run_name: str, build: dict, *, allow_change: bool = False,
                  checkpoint: str | None = None) -> dict | None:
    """Compare the build a run started on with the current one before it resumes.

    Args:
        run_dir: the run folder.
        run_name: named in the error.
        build: the current build (`pipeline.data.dataset.build_identity`).
        allow_change: resume on a changed build anyway; the change is recorded.
        checkpoint: the checkpoint the run resumes from (recorded with a change).

    Returns:
        None when the build is unchanged (or the run predates records: the current build is then
        recorded), else the change record `{"at", "checkpoint", "from", "to", "summary"}` that was
        appended to `dataset.json`'s `changes`.

    Raises:
        TrainingError: the build changed and `allow_change` is False; the message says what changed
            and the three ways on.
    """
    record = read_dataset_record(run_dir)
    if record is None:
        record_dataset(run_dir, build)
        return None
    if record["fingerprint"] == build["fingerprint"]:
        return None
    summary = describe_change(record, build)
    if not allow_change:
        raise TrainingError(
            f"Run `{run_name}` started on another build of the dataset ({summary}). Resuming would continue "
            "on different rows with a different number of steps, and its results would match neither dataset. "
            "Rebuild the dataset from the same samples, start a new run, or resume anyway with "
            f"`python -m pipeline train --workspace {shlex.quote(str(Path(run_dir).parent.parent))} --run {shlex.quote(run_name)} --resume "
            "--allow-dataset-change` (the change is recorded in the run's dataset.json and result.json)."
        )
    change = {"at": round(time.time(), 3), "checkpoint": checkpoint, "from": record["fingerprint"],
              "to": build["fingerprint"], "summary": summary}
    updated = {**record, **{k: build[k] for k in ("fingerprint", "splits", "row_ids", "built_at")},
               "changes": list(record.get("changes") or []) + [change]}
    atomic_write_json(_record_path(run_dir), updated)
    return change
