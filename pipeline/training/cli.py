"""The training stage's command line: `python -m pipeline train` and `delete-run`.

`train` runs in this process (the app starts it as a job, `pipeline.training.runs`); the trainer and
torch are imported only when it does, so `delete-run` starts at once."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path
from typing import Any

from pipeline.config import TrainConfig, add_train_arguments, default_quantization, refuse_full_finetuning
from pipeline.host import distributed
from pipeline.host.cpu_threads import apply_threads, trainer_threads
from pipeline.host.process_check import process_started_at
from pipeline.training.resume import resolve_resume_config as _resolve_resume_config
from pipeline.training.run_folder import run_paths, summary_text
from pipeline.training.runs import delete_run
from pipeline.workspace import DEFAULT_WORKSPACE


def _explicit_config(args: argparse.Namespace) -> dict[str, Any]:
    from dataclasses import fields

    return {f.name: getattr(args, f.name) for f in fields(TrainConfig) if getattr(args, f.name, None) is not None}


def train_main(argv: list[str] | None = None) -> int:
    """`python -m pipeline train --workspace WS --run NAME [--resume] [--json] <TrainConfig flags>`."""
    from pipeline.training.train import log, train  # torch: only when a run trains

    parser = argparse.ArgumentParser(prog="python -m pipeline train", description="LoRA fine-tune Gemma 3n on the built dataset.")
    parser.add_argument("--workspace", type=Path, default=DEFAULT_WORKSPACE, help=f"workspace folder (default: {DEFAULT_WORKSPACE})")
    parser.add_argument("--run", "--run-name", dest="run", required=True,
                        help="run name: its folder is WS/runs/NAME (under torchrun write --run-name: torchrun reads --run as its --run-path)")
    parser.add_argument("--resume", action="store_true", help="continue the run from its last checkpoint")
    parser.add_argument("--dataset", type=Path, default=None,
                        help="train on this Parquet dataset folder (a cloud job bundle's dataset/) instead of WS/dataset")
    parser.add_argument("--allow-dataset-change", action="store_true",
                        help="with --resume: continue although the dataset was rebuilt with other rows (recorded in the run)")
    parser.add_argument("--json", action="store_true", help="print result.json instead of a summary")
    add_train_arguments(parser)
    args = parser.parse_args(argv)
    apply_threads(max(1, trainer_threads() // distributed.local_world_size()))  # a core for the app (pipeline.host.cpu_threads)
    explicit = _explicit_config(args)
    if args.resume:
        paths = run_paths(args.workspace, args.run)
        saved = _resolve_resume_config(paths, None)
        config = _resolve_resume_config(paths, saved.replace(**explicit)) if explicit else saved
    else:
        refuse_full_finetuning(explicit.get("finetuning_type", "lora"))
        if "quantization" not in explicit:
            from pipeline.model.loading import resolve_device

            explicit["quantization"] = default_quantization(resolve_device(explicit.get("device", "auto")))
        config = TrainConfig(**explicit)
    # Progress lines go to train.log and stderr; stdout keeps the summary / JSON.
    # Under torchrun / accelerate launch only rank 0 reports; the other processes say only warnings.
    stream = logging.StreamHandler(sys.stderr)
    stream.setFormatter(logging.Formatter("%(message)s"))
    stream.setLevel(logging.INFO if distributed.is_main_process() else logging.WARNING)
    log.addHandler(stream)
    log.setLevel(logging.INFO)
    try:
        result = train(config, args.workspace, args.run, resume=args.resume, dataset_dir=args.dataset,
                       allow_dataset_change=args.allow_dataset_change, started_at=process_started_at())
    finally:
        log.removeHandler(stream)
    if distributed.is_main_process():
        print(json.dumps(result) if args.json else summary_text(result))
    return 0 if result.get("status") in ("completed", "stopped") else 1


def delete_run_main(argv: list[str] | None = None) -> int:
    """`python -m pipeline delete-run --workspace WS --run NAME [--json]`: delete a run that is not training."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m pipeline delete-run",
                                     description="Delete a run folder (checkpoints, adapter, logs, evaluations); "
                                                 "a run that is training is refused.")
    parser.add_argument("--workspace", required=True, help="the workspace folder")
    parser.add_argument("--run", required=True, help="the run to delete (its folder name in WS/runs/)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    deleted = delete_run(args.workspace, args.run)
    if args.json:
        print(json.dumps(deleted))
    else:
        print(f"Deleted run {deleted['run']} ({deleted['state']}, {deleted['bytes'] / 2**20:.1f} MiB freed).")
    return 0
