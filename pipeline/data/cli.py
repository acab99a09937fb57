"""The data stage's command line: `python -m pipeline import`, `samples` and `build`.

Each command prints a human summary, or one JSON object with `--json`; errors are `PipelineError`s,
which `pipeline.__main__` turns into `error: ...` and exit code 1.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from pipeline.data.dataset import build_dataset
from pipeline.data.importers import FORMATS, import_folder
from pipeline.data.samples import SampleLibrary
from pipeline.model.catalog import DEFAULT_MODEL
from pipeline.workspace import DEFAULT_WORKSPACE, Workspace
from pipeline.units import plural


def import_main(argv: list[str] | None = None) -> int:
    """`python -m pipeline import --workspace WS --source PATH [--format F] [--trim] [--json]`.

    Exit status 0 when the import ran (even if some files were skipped), 1 when nothing was imported
    and a file was skipped for a reason other than being a duplicate, or on a format error.
    """
    parser = argparse.ArgumentParser(prog="python -m pipeline import",
                                     description="Importers: turn a folder of recordings in a common layout into samples of the library.")
    parser.add_argument("--workspace", type=Path, default=DEFAULT_WORKSPACE, help="workspace folder")
    parser.add_argument("--source", type=Path, required=True,
                        help="folder of recordings to import, or a chat-format .jsonl/.json file "
                             "(also LLaMA-Factory, ms-swift, sharegpt)")
    parser.add_argument("--format", default="auto", choices=("auto",) + FORMATS, help="layout of --source")
    parser.add_argument("--trim", action="store_true", help="keep the first 30 s of longer clips instead of skipping them")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    workspace = Workspace(args.workspace)
    report = import_folder(workspace, args.source, args.format, trim=args.trim)
    failed = not report.imported and any("same audio as sample" not in s["reason"] for s in report.skipped)
    if args.json:
        print(json.dumps({**report.to_dict(), "workspace": str(workspace.root)}, ensure_ascii=False))
    else:
        kinds = ", ".join(f"{n} {kind}" for kind, n in report.kind_counts().items())
        print(
            f"Imported {len(report.imported)} of {report.total} {'samples' if report.format == 'chat' else 'clips'} from {report.source} "
            f"({report.format} layout) into {workspace.root}; skipped {len(report.skipped)}."
            + (f" Kinds: {kinds} (each sample's kind: --json `rows`)." if kinds else "")
        )
        for entry in report.skipped:
            print(f"  skipped {entry['file']}: {entry['reason']}")
        for note in report.notes:
            print(f"  note: {note}")
    if failed:
        print("error: nothing was imported; see the reasons above.", file=sys.stderr)
    return 1 if failed else 0


def samples_main(argv: list[str] | None = None) -> int:
    """`python -m pipeline samples --workspace WS [--json]`: list the library with its check results."""
    parser = argparse.ArgumentParser(prog="python -m pipeline samples",
                                     description="The sample library: clips with their target text and tutor feedback, kept in a workspace folder.")
    parser.add_argument("--workspace", type=Path, default=DEFAULT_WORKSPACE, help="workspace folder")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    library = SampleLibrary(args.workspace)
    samples = library.list()
    if args.json:
        print(
            json.dumps(
                {
                    "workspace": str(library.workspace.root),
                    "count": len(samples),
                    "samples": [sample.to_dict() for sample in samples],
                },
                ensure_ascii=False,
            )
        )
        return 0
    print(f"{plural(len(samples), 'sample')} in {library.workspace.root}")
    for sample in samples:
        notes = sample.checks.get("warnings") or []
        if sample.kind == "dialogue":
            feedback = f"{sum(1 for t in sample.turns or [] if t.get('role') == 'tutor')} tutor turns"
        else:
            feedback = "no feedback yet" if not sample.feedback else f"feedback {len(sample.feedback)} chars"
        print(
            f"  {sample.id:<16} {sample.kind:<11} {sample.duration_s:5.1f} s  speaker={sample.speaker or '-':<8} "
            f"{feedback:<20} {sample.title[:50]}"
            + (f"  [{'; '.join(notes)}]" if notes else "")
        )
    without = sum(1 for sample in samples if not sample.has_answer)
    if without:
        print(f"{plural(without, 'sample')} {'has' if without == 1 else 'have'} no feedback yet; {'it is' if without == 1 else 'they are'} left out of the training dataset.")
    return 0


def build_main(argv: list[str] | None = None) -> int:
    """`python -m pipeline build --workspace WS --model M [--eval-fraction F] [--seed N] [--max-length TOKENS] [--json]`."""
    from pipeline.workspace import DEFAULT_WORKSPACE

    parser = argparse.ArgumentParser(prog="python -m pipeline build", description="Build the train/eval dataset from the sample library.")
    parser.add_argument("--workspace", type=Path, default=DEFAULT_WORKSPACE, help=f"workspace folder (default: {DEFAULT_WORKSPACE})")
    parser.add_argument("--model", default=DEFAULT_MODEL, help="hub id or local folder whose processor measures lengths")
    parser.add_argument("--eval-fraction", type=float, default=0.2, help="share of rows held out for evaluation (default 0.2)")
    parser.add_argument("--seed", type=int, default=42, help="seed of the split (default 42)")
    parser.add_argument("--max-length", type=int, default=512, help="longest row in tokens; longer rows are excluded (default 512)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of a summary")
    args = parser.parse_args(argv)

    report = build_dataset(
        args.workspace, args.model, eval_fraction=args.eval_fraction, seed=args.seed, max_length=args.max_length
    )
    if args.json:
        print(json.dumps(report.to_dict(), ensure_ascii=False))
    else:
        print(report.summary())
    return 0
