"""Bring back a run trained elsewhere (a cloud job bundle, another machine's workspace).

`python -m pipeline import-run --workspace WS --source RUN_DIR_OR_TAR [--name NAME] [--force] [--json]`

The source is a run folder (config.json + adapter/), a folder holding exactly one under `runs/`
(a bundle's output folder), or a .tar.gz / .tgz / .tar of either. Before anything is copied it is
checked against this workspace:

- **base model**: the model the run was trained on (for a bundle that carried a local base model,
  the original folder recorded in `bundle.json`) must be here, with the same config and weight
  files as recorded when the bundle was made; a different model refuses the import (its adapter
  would not fit) unless `--force`. A model not on this machine yet is a note (download it first).
- **dataset build**: the fingerprint of the rows the run trained on (its `dataset.json`, or
  bundle.json's) is compared with this workspace's build (`pipeline.data.dataset.build_identity`); a difference is reported, not refused:
  the tutor works, but Judge's eval split may then hold rows the run trained on.

The run is copied into `WS/runs/NAME/` through a staging folder (never over an existing run), with
config.json's `model` set to this machine's name of the base model, and `imported.json` recording
the source, the checks and what was changed; it then appears in Train, Try and Judge like a local run.
"""

from __future__ import annotations

import json
import os
import shutil
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

from pipeline.errors import ImportRunError, cause_words, in_words
from pipeline.export.staging import check_free_space, folder_bytes, staged_folder
from pipeline.fileio import UnsafeArchiveMember, extract_tar
from pipeline.training.run_folder import RUN_FILES, has_adapter
from pipeline.workspace import Workspace

ARCHIVE_SUFFIXES = (".tar.gz", ".tgz", ".tar")
LEFT_BEHIND = (RUN_FILES["pid"], RUN_FILES["stop"])
"""Files of the source run that are not copied: they describe its process on the other machine."""


def _find_run_dir(root: Path) -> Path:
    """The run folder in `root`: `root` itself, or the only `runs/*` / `*` folder with a config.json."""
    if (root / RUN_FILES["config"]).is_file():
        return root
    candidates = [p.parent for pattern in ("runs/*/config.json", "*/config.json", "*/runs/*/config.json", "*/*/runs/*/config.json")
                  for p in root.glob(pattern)]
    candidates = sorted({c for c in candidates if (c / RUN_FILES["adapter"]).exists() or (c / RUN_FILES["result"]).exists()})
    if len(candidates) == 1:
        return candidates[0]
    if not candidates:
        found = in_words(sorted(p.name for p in root.iterdir()), limit=20) if root.is_dir() else "nothing"
        raise ImportRunError(f"`{root}` holds no run folder (a folder with config.json and adapter/); found {found}. "
                             "Give the run folder itself, e.g. OUTPUT/runs/NAME from the bundle's train.sh.",
                             "not_a_run", path=str(root))
    runs = [str(c.relative_to(root)) for c in candidates]
    raise ImportRunError(f"`{root}` holds {len(candidates)} runs ({in_words(runs, limit=10)}); give --source the one "
                         "to import.", "several_runs", path=str(root), runs=runs)


def _unpack(archive: Path, into: Path) -> Path:
    try:
        with tarfile.open(archive) as tar:
            extract_tar(tar, into)  # no absolute paths, no links out of `into`, on every Python 3.11
    except (tarfile.TarError, OSError, EOFError, UnsafeArchiveMember) as error:
        raise ImportRunError(f"`{archive}` cannot be unpacked ({cause_words(error)}); give the run folder or "
                             "a .tar.gz made with `tar czf NAME.tar.gz -C OUTPUT/runs NAME`.", "cannot_unpack",
                             path=str(archive)) from error
    return into


def _read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def check_run(ws: Workspace, run_dir: Path, model: str | None = None) -> dict[str, Any]:
    """Compare a run folder with the workspace; nothing is written.

    `model`: this machine's name of the run's base (a folder or hub id) when it is not where the run
    recorded it; compared by the recorded fingerprint, never by its path.

    Returns `{"model" (this machine's name of the base), "trained_model" (config.json's), "model_here"
    (bool), "model_differences" (list), "dataset_fingerprint" (the run's or None),
    "workspace_fingerprint" (the build's or None), "dataset_matches" (bool or None: unknown),
    "differences" (sentences), "notes" (sentences), "status", "steps"}`.
    """
    from pipeline.export.bundle import model_differences, model_fingerprint

    config = _read_json(run_dir / RUN_FILES["config"])
    result = _read_json(run_dir / RUN_FILES["result"])
    bundle = _read_json(run_dir / "bundle.json")
    trained_model = str(config.get("model", ""))
    model = str(model or bundle.get("model", {}).get("id") or trained_model)
    here = model_fingerprint(model)
    expected = bundle.get("model", {}).get("fingerprint")
    differences, notes = [], []
    model_diff = model_differences(expected, here)
    if model_diff:
        differences.append(f"base model `{model}` here is not the one the run was trained on: {' and '.join(model_diff)}")
    if here is None:
        notes.append(f"base model `{model}` is not on this machine yet; download it (or put the folder back) before "
                     "trying the run")
    from pipeline.training.resume import read_dataset_record

    run_print = (read_dataset_record(run_dir) or {}).get("fingerprint") or (bundle.get("dataset") or {}).get("fingerprint")
    ws_print = None
    if (ws.dataset_dir / "dataset_dict.json").exists():
        from pipeline.data.dataset import build_identity

        ws_print = build_identity(ws)["fingerprint"]
    matches = None if not run_print or not ws_print else run_print == ws_print
    if matches is False:
        differences.append("the dataset build differs: the run trained on other rows than this workspace's build, so "
                           "Judge's eval split may hold rows it trained on")
    elif matches is None:
        notes.append("the dataset build could not be compared (" + ("no build in this workspace" if not ws_print else
                     "the run did not record its dataset") + ")")
    if model != trained_model:
        copy = " (the bundle's copy)" if bundle.get("model", {}).get("id") else ""
        notes.append(f"config.json's model `{trained_model}`{copy} becomes `{model}`")
    return {
        "model": model, "trained_model": trained_model, "model_here": here is not None,
        "model_differences": model_diff, "dataset_fingerprint": run_print, "workspace_fingerprint": ws_print,
        "dataset_matches": matches, "differences": differences, "notes": notes,
        "status": result.get("status"), "steps": result.get("steps"),
    }


def import_run(workspace, source: str | os.PathLike, *, name: str | None = None, force: bool = False,
               model: str | None = None) -> dict[str, Any]:
    """Copy the run at `source` into `WS/runs/NAME/` after `check_run` (see the module docstring).

    Args:
        name: the run's name here (default: the source folder's name).
        force: import even when the base model differs from the one the run was trained on.
        model: where the run's base is on this machine (`--model`), when not at the path the run
            recorded; its config.json then names it (the adapter's identity check still applies).

    Returns:
        `check_run`'s dict plus `run`, `path`, `source`, `imported` (True).

    Raises:
        ImportRunError: nothing at `source`, an archive that cannot be unpacked, no run folder (or several)
            in it, no adapter, a run of that name exists here, or the base model differs (without `force`);
            its `reason` and `facts` say which, for the app's own words.
        ExportError: not enough free disk.
    """
    from pipeline.fileio import atomic_write_json, locked

    ws = workspace if isinstance(workspace, Workspace) else Workspace(Path(workspace))
    source = Path(source).expanduser().resolve()
    if not source.exists():
        raise ImportRunError(f"`{source}` does not exist; give the run folder (OUTPUT/runs/NAME) or its .tar.gz.",
                             "nothing_there", path=str(source))
    with tempfile.TemporaryDirectory(prefix=".import-", dir=ws.root if ws.root.is_dir() else None) as tmp:
        root = _unpack(source, Path(tmp)) if source.is_file() and source.name.endswith(ARCHIVE_SUFFIXES) else source
        run_dir = _find_run_dir(root)
        if not has_adapter(run_dir):
            status = _read_json(run_dir / RUN_FILES["result"]).get("status", "unknown")
            raise ImportRunError(f"The run in `{run_dir}` has no adapter (status {status}): nothing to try here. Resume it "
                                 "where it ran (`train.sh --resume`) or stop it (a stopped run saves its adapter), then "
                                 "import it.", "no_adapter", path=str(run_dir), status=status)
        name = name or run_dir.name
        target = ws.run_dir(name)
        with locked(ws.runs_dir):  # the run list: no start or other import of this name meanwhile
            if target.exists():
                raise ImportRunError(f"A run named `{name}` already exists in {ws.runs_dir}; import it under another name "
                                     "with --name NEW.", "name_taken", path=str(run_dir), name=name)
            report = check_run(ws, run_dir, model)
            if report["model_differences"] and not force:
                raise ImportRunError(f"Not imported: {report['differences'][0]}. Its adapter only fits that model; put the "
                                     "right model back, or import anyway with --force.", "other_base_model",
                                     path=str(run_dir), model=report["model"])
            check_free_space(ws.runs_dir, folder_bytes(run_dir), f"run `{name}`")
            with staged_folder(target, record=None) as staging:
                shutil.copytree(run_dir, staging, dirs_exist_ok=True, ignore=shutil.ignore_patterns(*LEFT_BEHIND))
                config = _read_json(staging / RUN_FILES["config"])
                if config.get("model") != report["model"]:
                    config["model"] = report["model"]
                    atomic_write_json(staging / RUN_FILES["config"], config)
                atomic_write_json(staging / "imported.json", {
                    "source": str(source), "source_run": run_dir.name, "imported_at": round(time.time(), 3),
                    "forced": bool(force and report["model_differences"]), **report,
                })
    return dict(report, run=name, path=str(target), source=str(source), imported=True)


def summary_text(result: dict) -> str:
    """Human summary of `import_run`'s result."""
    lines = [f"Imported run `{result['run']}` into {result['path']} (status {result.get('status')}, "
             f"{result.get('steps')} steps; base model {result['model']})."]
    if not result["differences"]:
        lines.append("  base model and dataset build match this workspace." if result.get("dataset_matches") else
                     "  base model matches.")
    lines += [f"  differs: {d}" for d in result["differences"]]
    lines += [f"  note: {n}" for n in result["notes"]]
    return "\n".join(lines)
