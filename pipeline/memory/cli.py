"""`python -m pipeline estimate`: the command line of the memory model.

`python -m pipeline estimate --workspace WS --model M [--device ...] [--memory-gb N] [training flags]
[--measure] [--json]` prints `pipeline.memory.report.estimate_for_workspace`'s estimate, verdict and
suggestions (a human summary, or one JSON object). `pipeline.__main__` dispatches here and turns a
`PipelineError` into a one-line message and exit code 1.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import fields

from pipeline.config import TrainConfig, add_train_arguments, default_quantization
from pipeline.memory.budget import auto_device
from pipeline.memory.plan import plan_for_workspace, render_plan
from pipeline.memory.report import estimate_for_workspace, render


def estimate_parser() -> argparse.ArgumentParser:
    """The `estimate` flags: `--workspace`, `--memory-gb` (GiB), `--attn`, `--measure`, `--json`, and every
    training flag of `pipeline.config.add_train_arguments`."""
    parser = argparse.ArgumentParser(prog="python -m pipeline estimate",
                                     description="Estimate (and optionally measure) the peak memory of a LoRA (or full) fine-tune.")
    parser.add_argument("--workspace", default=None, help="workspace folder with the built dataset")
    parser.add_argument("--memory-gb", type=float, default=None, help="pretend the device has N GB of memory, GB as your OS reports it, i.e. GiB (N x 1024**3 bytes)")
    parser.add_argument("--attn", choices=("eager", "sdpa"), default=None, help="attention implementation (default: the training code's)")
    parser.add_argument("--measure", action="store_true", help="also run one real step in a child process and report its peak")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    add_train_arguments(parser)
    return parser


def config_from_args(args: argparse.Namespace) -> TrainConfig:
    """The `TrainConfig` the flags describe. An unset `--quantization` is the trainer's default for the
    device (`train` does the same), or none with `--finetuning-type full` (every weight trains)."""
    values = {f.name: getattr(args, f.name) for f in fields(TrainConfig) if getattr(args, f.name, None) is not None}
    if "quantization" not in values:
        device = values.get("device", "auto")
        values["quantization"] = ("none" if values.get("finetuning_type") == "full"
                                  else default_quantization(auto_device() if device == "auto" else device))
    return TrainConfig(**values)


def estimate_main(argv: list[str] | None = None) -> int:
    """`python -m pipeline estimate ...`: print `estimate_for_workspace`'s estimate, verdict and
    suggestions (human summary, or its dict as one JSON object with `--json`)."""
    args = estimate_parser().parse_args(argv)
    config = config_from_args(args)
    from pipeline.workspace import DEFAULT_WORKSPACE  # noqa: PLC0415

    result = estimate_for_workspace(args.workspace or DEFAULT_WORKSPACE, config, memory_gb=args.memory_gb,
                                    measure=args.measure, attn=args.attn)
    if args.json:
        print(json.dumps(result))
        return 0
    print(render(result))
    return 0


def calibration_job_main(argv: list[str] | None = None) -> int:
    """`python -m pipeline calibration-job run --workspace WS`: the calibration job's process (what the Memory
    tab's Calibrate this machine starts, `pipeline.memory.calibration_job`); `status --workspace WS [--json]`:
    where it stands. Exit code 1 when the calibration failed."""
    from pipeline.memory.calibration_job import calibration_status, run_calibration  # noqa: PLC0415

    parser = argparse.ArgumentParser(prog="python -m pipeline calibration-job",
                                     description="Calibrate this machine as a background job (the app's Calibrate "
                                                 "this machine), or say where that job stands.")
    parser.add_argument("action", choices=("run", "status"))
    parser.add_argument("--workspace", required=True, help="the workspace whose calibration/ folder the job uses")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    if args.action == "run":
        result = run_calibration(args.workspace)
        print(json.dumps(result) if args.json else f"calibration {result['status']}"
              + (f": {result['reason']}" if result.get("reason") else ""))
        return 0 if result["status"] == "completed" else 1
    status = calibration_status(args.workspace)
    step = status["progress"]
    print(json.dumps(status) if args.json else f"calibration {status['state']}"
          + (f" · part {step.get('index')} of {step.get('of')}: {step.get('text')}" if status["alive"] and step else "")
          + (f" · {status['result']['reason']}" if (status["result"] or {}).get("reason") else ""))
    return 0


def plan_parser() -> argparse.ArgumentParser:
    """The `plan` flags: `--workspace`, `--device`, `--memory-gb` (GiB), `--json`."""
    parser = argparse.ArgumentParser(prog="python -m pipeline plan",
                                     description="What can this machine do? Full fine-tune / LoRA / int8 / QLoRA of "
                                                 "every known model (Gemma 3n, Gemma 4): peak, verdict and the changes each needs.")
    parser.add_argument("--workspace", default=None, help="workspace folder with the built dataset")
    parser.add_argument("--device", choices=("auto", "cuda", "mps", "cpu"), default="auto",
                        help="the device to plan for (default: this machine's)")
    parser.add_argument("--memory-gb", type=float, default=None,
                        help="pretend the device has N GB of memory, GB as your OS reports it, i.e. GiB")
    parser.add_argument("--json", action="store_true", help='print {"rows": [...], "usable_bytes": N, ...}')
    return parser


def plan_main(argv: list[str] | None = None) -> int:
    """`python -m pipeline plan ...`: print the plan table (or its dict as one JSON object)."""
    args = plan_parser().parse_args(argv)
    from pipeline.workspace import DEFAULT_WORKSPACE  # noqa: PLC0415

    result = plan_for_workspace(args.workspace or DEFAULT_WORKSPACE, device=args.device, memory_gb=args.memory_gb)
    print(json.dumps(result) if args.json else render_plan(result))
    return 0
