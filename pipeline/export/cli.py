"""`python -m pipeline export --workspace WS --run NAME --format adapter|merged|bundle [--out DIR] [--json]`.

- `adapter`: `NAME-adapter.zip` (PEFT adapter + processor + README), `pipeline.export.tutor`.
- `merged`: `NAME-merged/` (LoRA merged into a bf16 copy of the base; plain transformers loads it).
- `bundle`: `NAME-bundle/` + `NAME-bundle.tar.gz`, a cloud job that trains the run's settings on
  any GPU machine (`pipeline.export.bundle`).

Default output folder: `WS/exports/runs/NAME/`.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from pipeline.export.import_run import import_run
from pipeline.export.import_run import summary_text as import_summary_text
from pipeline.workspace import DEFAULT_WORKSPACE

FORMATS = ("adapter", "merged", "bundle")


def export_run(workspace, run: str, fmt: str, out_dir=None, *, device: str = "cpu", model: str | None = None) -> dict:
    """Export `run` in format `fmt` (one of `FORMATS`); returns that exporter's result dict
    (`format`, `run`, `path`, `bytes`, `base_model`, `notes`, ...). Raises `ConfigError` for an
    unknown format and whatever the exporter raises (`ExportError`, `DatasetError`, `ModelLoadError`).
    `model` (merged only): where the run's base is now, when its folder moved (checked by identity)."""
    from pipeline.errors import ConfigError

    if fmt == "adapter":
        from pipeline.export.tutor import export_adapter

        return export_adapter(workspace, run, out_dir)
    if fmt == "merged":
        from pipeline.export.tutor import export_merged

        return export_merged(workspace, run, out_dir, device=device, model=model)
    if fmt == "bundle":
        from pipeline.export.bundle import export_bundle

        return export_bundle(workspace, run, out_dir)
    raise ConfigError(f"`--format` must be one of {', '.join(FORMATS)}, got {fmt!r}.")


def summary_text(result: dict) -> str:
    """Human summary of an export result."""
    size = result.get("bytes", 0)
    lines = [f"Exported run `{result['run']}` as {result['format']}: {result['path']} ({size / 1024**2:.1f} MiB)"]
    if result.get("archive"):
        lines.append(f"  archive to upload: {result['archive']}")
    lines.append(f"  base model: {result.get('base_model')}")
    lines += [f"  note: {note}" for note in result.get("notes", [])]
    return "\n".join(lines)


def export_main(argv: list[str] | None = None) -> int:
    """`python -m pipeline export ...` (see the module docstring)."""
    parser = argparse.ArgumentParser(prog="python -m pipeline export",
                                     description="Export a run: adapter zip, merged model, or cloud job bundle.")
    parser.add_argument("--workspace", type=Path, default=DEFAULT_WORKSPACE, help=f"workspace folder (default: {DEFAULT_WORKSPACE})")
    parser.add_argument("--run", required=True, help="the run to export (WS/runs/NAME)")
    parser.add_argument("--format", required=True, choices=FORMATS, dest="fmt",
                        help="adapter: a zip to send; merged: a bf16 model with the LoRA merged in; bundle: a cloud training job")
    parser.add_argument("--out", type=Path, default=None, help="output folder (default: WS/exports/runs/NAME)")
    parser.add_argument("--device", default="cpu", choices=("auto", "cpu", "cuda", "mps"),
                        help="where the merge runs (merged only; default cpu: it needs the bf16 model in memory)")
    parser.add_argument("--model", default=None,
                        help="merged only: where the run's base model is now, if its folder moved (checked by its weights)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of a summary")
    args = parser.parse_args(argv)
    result = export_run(args.workspace, args.run, args.fmt, args.out, device=args.device, model=args.model)
    print(json.dumps(result, ensure_ascii=False) if args.json else summary_text(result))
    return 0


def import_run_main(argv: list[str] | None = None) -> int:
    """`python -m pipeline import-run --workspace WS --source RUN_DIR_OR_TAR [--name NAME] [--force] [--json]`."""
    parser = argparse.ArgumentParser(prog="python -m pipeline import-run",
                                     description="Bring back a run trained elsewhere (a cloud job bundle's output).")
    parser.add_argument("--workspace", type=Path, default=DEFAULT_WORKSPACE, help=f"workspace folder (default: {DEFAULT_WORKSPACE})")
    parser.add_argument("--source", type=Path, required=True, help="the run folder (OUTPUT/runs/NAME) or a .tar.gz of it")
    parser.add_argument("--name", default=None, help="the run's name here (default: its folder's name)")
    parser.add_argument("--force", action="store_true", help="import even when the base model here differs")
    parser.add_argument("--model", default=None, help="where the run's base model is on this machine, if not at the path it recorded")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of a summary")
    args = parser.parse_args(argv)
    result = import_run(args.workspace, args.source, name=args.name, force=args.force, model=args.model)
    print(json.dumps(result, ensure_ascii=False) if args.json else import_summary_text(result))
    return 0
