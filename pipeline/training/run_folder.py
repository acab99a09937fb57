"""The run folder `WS/runs/NAME/`: the only channel between the trainer process and whoever watches it
(the app, the CLI, the tests). Torch-free, so the UI can read it.

    config.json      every setting (`TrainConfig.to_dict()`), so the run can be repeated
    progress.jsonl   one JSON line per logging step (see `pipeline.training.train`'s ProgressCallback)
    train.log        human log: settings, quantization/LoRA reports, progress, warnings, errors
    checkpoints/     resumable Trainer checkpoints (adapter + optimizer + scheduler + RNG state)
    adapter/         the final LoRA adapter in PEFT format + the processor (+ base_model.json)
    base_model.json  the base model's identity (`pipeline.model.base_identity`), checked on resume
    dataset.json     the dataset build the run trains on (`pipeline.training.resume`), checked on resume
    result.json      {"status": running|completed|stopped|failed, "reason", ...}
    tensorboard/     TensorBoard event files (`tensorboard --logdir WS/runs`)
    best/            with --keep-best: the adapter of the evaluation that agreed best with the experts, and
                     best.json (`pipeline.training.best_checkpoint`); copied into adapter/ at the end
    eval/            the run's saved evaluations, one per dataset build (`pipeline.tutor.evaluate`)
    STOP             written by `pipeline.training.runs.request_stop`: save and end after the
                     micro-batch in flight (`pipeline.training.stopping`)
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from pipeline.fileio import atomic_write_text, jsonl_lines, read_jsonl
from pipeline.workspace import Workspace

RUN_FILES = {
    "config": "config.json",
    "progress": "progress.jsonl",
    "log": "train.log",
    "checkpoints": "checkpoints",
    "adapter": "adapter",
    "result": "result.json",
    "stop": "STOP",
    "tensorboard": "tensorboard",
    "best": "best",
}
"""File names inside a run folder (`WS/runs/NAME/`)."""


def run_paths(workspace: Workspace | str | os.PathLike, run_name: str) -> dict[str, Path]:
    """Paths of the run folder's files (keys of `RUN_FILES` + "dir")."""
    ws = workspace if isinstance(workspace, Workspace) else Workspace(Path(workspace))
    run_dir = ws.run_dir(run_name)
    paths = {key: run_dir / name for key, name in RUN_FILES.items()}
    paths["dir"] = run_dir
    return paths


def last_checkpoint(run_dir: Path) -> Path | None:
    """The newest complete `checkpoints/checkpoint-N` folder of a run, or None."""
    folder = Path(run_dir) / RUN_FILES["checkpoints"]
    if not folder.is_dir():
        return None
    candidates = []
    for child in folder.iterdir():
        if child.is_dir() and child.name.startswith("checkpoint-") and (child / "trainer_state.json").exists():
            try:
                candidates.append((int(child.name.split("-", 1)[1]), child))
            except ValueError:
                continue
    return max(candidates)[1] if candidates else None


def logged_elapsed_s(progress_path: Path, step: int) -> float:
    """Seconds of training a run had logged by optimizer step `step`: the `elapsed_s` of the last
    progress.jsonl line (in file order) at a step <= `step`, or 0.0 when there is none.

    A resumed run continues its clock from here (its checkpoint's step), so `elapsed_s` and the
    app's progress/ETA count the time of every process that trained the run. Lines logged after the
    checkpoint by a process that was then killed are ignored (those steps are trained again).
    """
    if step <= 0:
        return 0.0
    elapsed = 0.0
    for line in read_jsonl(progress_path):
        value = line.get("elapsed_s")
        if isinstance(line.get("step"), int) and line["step"] <= step and isinstance(value, (int, float)):
            elapsed = float(value)
    return elapsed


def trim_progress_to_step(progress_path: Path, step: int) -> int:
    """Keep only the progress.jsonl lines logged at optimizer steps <= `step` (the checkpoint a run
    resumes from); returns how many lines were dropped. The file is rewritten atomically.

    A process killed after its last checkpoint has logged steps that the resumed run trains again;
    without this, those steps would appear twice in the file and in the app's loss curve. A torn
    last line is dropped too. Raises OSError if the run folder is not writable.
    """
    if not progress_path.exists():
        return 0
    raw_lines = [t for _, t in jsonl_lines(progress_path.read_text(encoding="utf-8"))]
    kept = []
    for text in raw_lines:
        try:
            line = json.loads(text)
        except json.JSONDecodeError:
            continue  # torn by the kill
        if isinstance(line.get("step"), int) and line["step"] <= step:
            kept.append(text)
    if len(kept) == len(raw_lines):
        return 0
    atomic_write_text(progress_path, "".join(text + "\n" for text in kept))
    return len(raw_lines) - len(kept)


def read_progress(workspace: Workspace | str | os.PathLike, run_name: str) -> list[dict]:
    """The run's progress.jsonl lines (a torn last line is skipped)."""
    return read_jsonl(run_paths(workspace, run_name)["progress"])


def remove_stale_stop(stop: Path, result: Path) -> None:
    """Remove a STOP file that an earlier process of the run already answered, so that a resumed run
    does not stop at once: one written before this process started, or before the run's `result`
    file (`result.json`, which the process that stopped wrote after honouring it). A STOP written
    since (the user pressed Stop, or touched the file, while this run was starting) is kept and
    honoured at the first step."""
    import psutil  # noqa: PLC0415

    try:
        written = stop.stat().st_mtime
    except FileNotFoundError:
        return
    answered = result.exists() and result.stat().st_mtime >= written
    if answered or written < psutil.Process(os.getpid()).create_time():
        stop.unlink(missing_ok=True)


def summary_text(result: dict) -> str:
    """Human summary of a result.json dict, with the run's measured memory against the estimate
    for its settings (`pipeline.memory.run_compare`: whole run against whole run, step against step)."""
    from pipeline.memory.run_compare import compare, comparison_text

    status = result.get("status")
    lines = [f"Run `{result.get('run')}` {status}" + (f": {result['reason']}" if result.get("reason") else ".")]
    if result.get("steps") is not None:
        lines.append(
            f"  steps {result['steps']}/{result.get('max_steps')}, final loss {result.get('final_loss')}, "
            f"eval loss {result.get('eval_loss')}, peak memory {result.get('peak_memory_bytes', 0) / 1024**3:.2f} GiB"
        )
    memory = comparison_text(compare(result.get("memory"), result.get("memory_estimate")))
    if memory:
        lines += ["  " + line for line in memory.splitlines()]
    if result.get("adapter_dir"):
        lines.append(f"  adapter: {result['adapter_dir']}")
    if result.get("best_reason"):
        lines.append(f"  kept: {result['best_reason']}")
    if result.get("tiny_random_model"):
        lines.append("  note: the model is the tiny random stand-in; its feedback is meaningless text.")
    return "\n".join(lines)
