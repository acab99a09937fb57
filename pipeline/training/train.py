"""LoRA fine-tuning of Gemma 3n on the built dataset, with `transformers.Trainer`.

`python -m pipeline train --workspace WS --run NAME [--resume] [--json] <TrainConfig flags>`

Everything a run produces lives in its run folder `WS/runs/NAME/` (`pipeline.training.run_folder`
names the files); the UI, the CLI and the tests read the same files.

Before the first optimizer step, one forward+backward runs on the dataset's worst-case batch
(`pipeline.training.worst_case`: the longest row, with the longest clip and the longest answer), so a
configuration that does not fit fails in seconds with the memory figure. The peak memory of every
phase of the run (load, preflight, step, eval, save, resume) is recorded with how it was measured
(`pipeline.training.peak_memory.PhaseMemory`), next to the estimate for the same settings.

`run_probe_step(config, workspace)` runs exactly one optimizer step on that worst-case batch with
the same code and settings and reports the peak memory (used by `pipeline.memory.measure_peak`).

`train` reads as the run's phases, one function each: open the run (`_open_run`: settings, resume
point, dataset, the folder, train.log, the result skeleton), load (`_load`: `pipeline.training.session`),
preflight (`_preflight`), fit (`_fit`: the Trainer's loop with its callbacks, progress in
`pipeline.training.progress`), finish (`_finish`: the adapter and the result), and close (`_close_run`:
result.json and this machine's calibration records, whatever the outcome). Running out of memory, in
the preflight or in the loop, has one answer (`_out_of_memory`).

This module does not choose settings (that is `pipeline.config` / the memory estimate) and does not
spawn processes (that is `pipeline.training.runs`).
"""

from __future__ import annotations

import json
import logging
import os
import shlex
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipeline.config import TrainConfig, refuse_full_finetuning
from pipeline.data.portable import dataset_identity
from pipeline.errors import ConfigError, DatasetError, PipelineError, TrainingError, cause_words
from pipeline.fileio import atomic_write_json
from pipeline.host import distributed
from pipeline.calibration.this_machine import micro_batch_tokens, workspace_folder
from pipeline.training.step_timer import record_run_step_time, step_timer
from pipeline.training.peak_memory import (
    PhaseMemory,
    record_run_memory,
    is_out_of_memory,
    memory_kind,
    oom_suggestions,
    peak_memory_bytes,
    reset_peak_memory,
)
from pipeline.memory.run_compare import run_estimate
from pipeline.model.base_identity import record_or_check_run_base, run_base_model
from pipeline.training.checkpoints import check_free_disk, checkpoint_bytes, damaged_text, newest_intact_checkpoint
from pipeline.training.checkpoints import save_adapter, set_aside, write_result
from pipeline.training.resume import check_dataset, record_dataset
from pipeline.training.resume import resolve_resume_config as _resolve_resume_config
from pipeline.training.run_log import close_run_log as _remove_log_file
from pipeline.training.run_log import open_run_log as _setup_log_file
from pipeline.training.run_folder import (
    last_checkpoint,
    merge_memory,
    remove_stale_stop,
    run_paths,
    trim_progress_to_step,
)
from pipeline.training.best_checkpoint import best_checkpoint_keeper
from pipeline.training.stopping import stop_within_micro_batch
from pipeline.host.workspace_lock import hold_workspace_lock
from pipeline.training.progress import progress_callback
from pipeline.training.session import Session
from pipeline.training.trainer_setup import answer_loss, tensorboard_callback
from pipeline.training.worst_case import preflight, worst_case_batch
from pipeline.units import plural
from pipeline.workspace import Workspace

log = logging.getLogger("pipeline.training.train")


# --------------------------------------------------------------------------------------------------
# The run and its phases
# --------------------------------------------------------------------------------------------------


@dataclass
class _Start:
    """What a run starts from: its settings, the checkpoint it resumes (None for a new run), the
    damaged newer checkpoints to set aside, the model its config.json recorded (resumes), and how the
    dataset changed since the run started (`pipeline.training.resume.check_dataset`; rank 0 only)."""

    config: TrainConfig
    checkpoint: Path | None = None
    damaged: list[dict] = field(default_factory=list)
    recorded_model: str | None = None
    dataset_change: dict | None = None


@dataclass
class _Run:
    """One process's run of `train`, opened by `_open_run`: where it writes, what it trains, and the
    result.json dict every phase adds to (`result`, the dict `train` returns)."""

    ws: Workspace
    name: str
    paths: dict[str, Path]
    """The run folder's files (`pipeline.training.run_folder.run_paths`)."""
    config: TrainConfig
    resume: bool
    dataset_dir: Path | None
    """A portable Parquet folder to train on (`pipeline.data.portable`), or None for WS/dataset."""
    device: str
    """"cuda", "mps" or "cpu" (`pipeline.model.loading.resolve_device`)."""
    main: bool
    """True on the process that writes the run folder (rank 0, `pipeline.host.distributed`)."""
    checkpoint: Path | None
    recorded_model: str | None
    result: dict
    started_at: float
    """Unix seconds the run's process started (the command line's process start: its imports count, as the
    person who pressed Start waits for them), else when `train` was called."""
    log_handler: logging.Handler | None
    """The run's train.log (rank 0), closed by `_close_run`."""
    memory: PhaseMemory | None = None
    """The peak memory of each phase, from the load on (`pipeline.training.peak_memory`)."""


@dataclass
class _Fit:
    """The Trainer after its loop, with the callbacks that tell how the loop ended."""

    trainer: Any
    """`pipeline.training.trainer_setup.answer_loss_trainer_class()` instance."""
    progress: Any
    """`pipeline.training.progress.progress_callback` (STOP after a step, the last losses)."""
    stop_now: Any
    """`pipeline.training.stopping.stop_within_micro_batch` (STOP within a step)."""
    keeper: Any | None
    """`pipeline.training.best_checkpoint.best_checkpoint_keeper` with --keep-best, else None."""
    timer: Any
    """`pipeline.training.step_timer.step_timer` (seconds per micro-batch)."""

    @property
    def stopped(self) -> bool:
        """True when a STOP file ended the loop (after a step or within one)."""
        return self.progress.stopped or self.stop_now.stopped


class _OutOfMemory(Exception):
    """A phase ran out of memory: raised by `_preflight` (step 0, no checkpoint) and `_fit` (at
    `step`, with the last checkpoint `kept`, or None), answered by `_out_of_memory`.

    Args:
        where: the words after "Out of memory", e.g. "at step 3".
        peak_bytes: the peak memory to report (bytes).
        step: the optimizer step it happened at (0 in the preflight).
        kept: during training, the last checkpoint a resume continues from (None: there is none).
        in_training: True when raised by the Trainer's loop (the result then names `checkpoint`).
    """

    def __init__(self, where: str, peak_bytes: int, step: int, kept: Path | None = None, *, in_training: bool):
        super().__init__(f"out of memory {where}")
        self.where, self.peak_bytes, self.step, self.kept, self.in_training = where, peak_bytes, step, kept, in_training


def _checkpoint_step(checkpoint: Path) -> int:
    """The optimizer step of a Trainer checkpoint folder `checkpoint-N` (N)."""
    return int(checkpoint.name.split("-", 1)[1])


def _resume_start(config: TrainConfig | None, ws: Workspace, paths: dict[str, Path], run_name: str,
                  dataset_dir: Path | None, allow_dataset_change: bool) -> _Start:
    """What a resumed run starts from: its recorded settings (`config`, when given, must equal them),
    its base model (found again where it moved), the newest intact checkpoint and the damaged newer
    ones, and the dataset change (refused unless `allow_dataset_change`).

    Raises:
        ConfigError: `config` differs from the run's config.json (`resolve_resume_config`).
        TrainingError: no intact checkpoint; the run already completed; the dataset changed.
        ModelLoadError: the recorded base model is nowhere to be found (`run_base_model`).
    """
    config = _resolve_resume_config(paths, config)
    recorded_model = _resolve_resume_config(paths, None).model
    # another path for the same base is fine (its identity is compared once loaded); a recorded
    # folder that moved away is named, with the fix (`run_base_model`)
    config = config.replace(model=run_base_model(paths["dir"], run_name, None if config.model == recorded_model else config.model))
    # every file a resume reads is checked first; damaged newer checkpoints are set aside by `_open_run`
    checkpoint, damaged = newest_intact_checkpoint(paths["checkpoints"])
    if checkpoint is None:
        raise TrainingError(
            (damaged_text(damaged, None) + " " if damaged else "")
            + f"Run `{run_name}` has no intact checkpoint in {paths['checkpoints']} to resume from; start it again "
            "without --resume under a new name."
        )
    if paths["result"].exists():
        previous = json.loads(paths["result"].read_text(encoding="utf-8"))
        if previous.get("status") == "completed":
            raise TrainingError(f"Run `{run_name}` already completed; start a new run to train more.")
    dataset_change = check_dataset(paths["dir"], run_name, dataset_identity(ws, dataset_dir), checkpoint=checkpoint.name,
                                   allow_change=allow_dataset_change) if distributed.is_main_process() else None
    return _Start(config, checkpoint, damaged, recorded_model, dataset_change)


def _new_start(config: TrainConfig | None, paths: dict[str, Path], run_name: str) -> _Start:
    """What a new run starts from: `config`, for a run folder that holds no run yet. A folder with only the
    settings (and the dataset record) is a start killed before it wrote its result: no other start can be
    writing it (the workspace lock is held), so it starts again, clean, with `config`.

    Raises:
        ConfigError: no `config`, or full fine-tuning asked for (`refuse_full_finetuning`).
        TrainingError: the run already exists (its result, checkpoints or progress).
    """
    if config is None:
        raise ConfigError("No training settings given; pass a TrainConfig.")
    refuse_full_finetuning(config.finetuning_type)
    if any(paths[k].exists() for k in ("result", "checkpoints", "progress")):
        raise TrainingError(
            f"Run `{run_name}` already exists in {paths['dir']}; continue it with --resume or choose another --run name."
        )
    return _Start(config)


def _check_dataset_there(ws: Workspace, config: TrainConfig, dataset_dir: Path | None, resume: bool) -> None:
    """Check the dataset a run trains on is there before the run folder exists, so a run that cannot
    start leaves nothing behind: the portable folder `dataset_dir`, else (new runs) WS/dataset.

    Raises:
        DatasetError: no built dataset (the `build` command to run), or one that cannot be read.
    """
    if dataset_dir is not None:
        from pipeline.data.portable import check_portable_dataset

        check_portable_dataset(dataset_dir)
    elif not resume:
        from pipeline.data.dataset import load_built_dataset

        try:
            load_built_dataset(ws)
        except DatasetError as error:
            if "No built dataset" not in str(error):
                raise
            raise DatasetError(f"No built dataset in {ws.dataset_dir}; build it first with `python -m pipeline build "
                               f"--workspace {shlex.quote(str(ws.root))} --model {shlex.quote(str(config.model))}`.") from None


def _open_run(config: TrainConfig | None, ws: Workspace, run_name: str, resume: bool, dataset_dir: Path | None,
              allow_dataset_change: bool, started_at: float | None = None) -> _Run:
    """Open the run: every check first (settings, resume point, dataset), then every process joins
    the group, and rank 0 prepares the folder (stale STOP removed, damaged checkpoints set aside, a
    new run's config.json and dataset record), writes the result skeleton (status "running"), opens
    train.log and drops progress lines an interrupted process logged after the resumed checkpoint.
    (The workspace lock is held around all of `train` by `hold_workspace_lock`.)

    Raises:
        ConfigError / TrainingError / DatasetError / ModelLoadError: the run cannot start (see
        `_resume_start`, `_new_start`, `_check_dataset_there`, and a model not on this computer:
        `pipeline.model.local_copy.require_model_here`); nothing is written then.
    """
    from pipeline.model.loading import resolve_device
    from pipeline.model.tiny_model import is_tiny_random_model

    paths = run_paths(ws, run_name)
    start = (_resume_start(config, ws, paths, run_name, dataset_dir, allow_dataset_change) if resume
             else _new_start(config, paths, run_name))
    config = start.config
    _check_dataset_there(ws, config, dataset_dir, resume)
    from pipeline.model.local_copy import require_model_here

    require_model_here(config.model)  # a run never downloads its model: refused in a moment, with the pointer
    device = resolve_device(config.device)
    distributed.join(device)
    distributed.barrier()  # every process has checked the run folder before rank 0 writes into it
    main = distributed.is_main_process()
    if main:
        paths["dir"].mkdir(parents=True, exist_ok=True)
        remove_stale_stop(paths["stop"], paths["result"])
        if start.damaged:  # kept as damaged-checkpoint-N: nothing saved is lost, and Trainer never sees them
            set_aside(start.damaged)
        if not resume:
            atomic_write_json(paths["config"], config.to_dict())
            record_dataset(paths["dir"], dataset_identity(ws, dataset_dir))
    started_at = float(started_at) if started_at else time.time()
    base = {
        "run": run_name,
        "status": "running",
        "reason": None,
        "pid": os.getpid(),
        "model": config.model,
        "workspace": workspace_folder(ws),  # the project folder, for this computer's calibration (shared by all)
        "resumed_from": str(start.checkpoint) if start.checkpoint else None,
        "started_at": started_at,
        "processes": distributed.world_size(),
        "global_batch_size": config.effective_batch_size * distributed.world_size(),
    }
    if main and resume:  # one run across its parts: its first estimate and every earlier part's peaks stay shown
        base.update(_earlier_parts(paths["result"]))
    if main:
        atomic_write_json(paths["result"], base)
    handler = _setup_log_file(paths["log"]) if main else None
    log.info("%s run `%s` with settings %s", "Resuming" if resume else "Starting", run_name, json.dumps(config.to_dict()))
    if start.damaged:
        base["damaged_checkpoints"] = start.damaged
        base["note"] = damaged_text(start.damaged, start.checkpoint)
        log.warning("%s", base["note"])
    if start.checkpoint is not None and main:
        dropped = trim_progress_to_step(paths["progress"], _checkpoint_step(start.checkpoint))
        if dropped:
            log.info("Dropped %s logged after %s by an interrupted process; those steps run again.",
                     plural(dropped, "progress line"), start.checkpoint.name)
    result = dict(base, tiny_random_model=is_tiny_random_model(config.model), dataset_change=start.dataset_change)
    return _Run(ws, run_name, paths, config, resume, dataset_dir, device, main, start.checkpoint, start.recorded_model,
                result, started_at, handler)


def _earlier_parts(result_path: Path) -> dict:
    """What a resumed run carries over from its earlier processes' result.json: `memory_estimate` (the
    estimate made when the run first started, so the Train tab keeps showing it while the model loads again)
    and `earlier_memory`, the largest peaks per phase of every earlier part (`merge_memory`), so the run's
    peak never goes down after a Resume. Empty when there is no earlier result."""
    from pipeline.jobs import read_json

    previous = read_json(result_path) or {}
    carried = {}
    if previous.get("memory_estimate"):
        carried["memory_estimate"] = previous["memory_estimate"]
    earlier = merge_memory([previous.get("earlier_memory"), previous.get("memory")])
    if earlier:
        carried["earlier_memory"] = earlier
    return carried


def _load(run: _Run) -> Session:
    """Load (memory phase `load`): the session (processor, model with LoRA, datasets, collator);
    rank 0 records the base model with the run (or checks it is the one recorded); the result gets
    the device, quantization, LoRA, row counts and the memory estimate for the same settings, after
    rank 0 checked there is disk room for a checkpoint and the adapter.

    Raises:
        PipelineError subclasses: the model or the dataset cannot be loaded, bad rows, another base
        model than the run's, too little free disk (`check_free_disk`).
    """
    config, paths, result = run.config, run.paths, run.result
    run.memory = PhaseMemory(run.device)
    run.memory.enter("load")
    session = Session(config, run.ws, run.dataset_dir)
    if run.main:
        record_or_check_run_base(paths["dir"], session.base_identity, run.name)
        if run.resume and config.model != run.recorded_model:  # the same base, found elsewhere: remember where
            log.info("Run `%s` continues on `%s` (recorded `%s`): the same base model (config and weights).",
                     run.name, config.model, run.recorded_model)
            atomic_write_json(paths["config"], config.to_dict())
    log.info("%s", session.quantization.summary())
    for warning in session.quantization.warnings:
        log.warning("%s", warning)
    log.info("%s", session.lora.summary())
    result.update(
        device=session.device,
        quantization={k: v for k, v in session.quantization.to_dict().items() if k not in ("quantized_modules", "kept_modules")},
        lora={k: v for k, v in session.lora.to_dict().items() if k != "wrapped_modules"},
        train_rows=len(session.train_data),
        eval_rows=len(session.eval_data) if session.eval_data is not None else 0,
    )
    if run.main:  # before the run starts: room for a checkpoint and the final adapter (how much is free, how much needed)
        trainable = int(session.lora.trainable_params)
        check_free_disk(paths["dir"], checkpoint_bytes(paths["checkpoints"], trainable) + trainable * 4,
                        f"run `{run.name}` (a checkpoint and the adapter)")
    if not result.get("memory_estimate"):  # a resumed run keeps the one made when it first started
        result["memory_estimate"] = run_estimate(run.ws, config, session.device, dataset_dir=run.dataset_dir,
                                                 on_error=lambda e: log.warning("No memory estimate: %s", e))
    if run.main:
        atomic_write_json(paths["result"], result)  # the app compares the run's memory with it while it runs
    return session


def _preflight(run: _Run, session: Session) -> None:
    """Preflight (memory phase `preflight`): one forward+backward on the worst-case batch
    (`pipeline.training.worst_case`), on every process (each holds a whole copy of the model and its
    own worst-case batch); its figures and peak memory go in `result["preflight"]`.

    Raises:
        _OutOfMemory: on every process when any ran out of memory (a shared decision,
            `distributed.any_process`), with the largest peak of the processes.
    """
    run.memory.enter("preflight")
    out_of_memory = False
    try:
        run.result["preflight"] = preflight(session.model, session.collator, session.worst, run.config, session.device,
                                            answer_loss)
        run.result["preflight"]["peak_memory_bytes"] = run.memory.current()["preflight"]
        log.info("Preflight on the worst-case batch: %s", json.dumps(run.result["preflight"]))
    except Exception as error:  # noqa: BLE001
        if not is_out_of_memory(error):
            raise
        out_of_memory = True
    if distributed.any_process(out_of_memory):
        peak = max(distributed.gather_ints(run.memory.current()["preflight"]))  # the largest of the processes
        raise _OutOfMemory("on the longest batch before training", peak, step=0, in_training=False)


def _fit(run: _Run, session: Session, callbacks: list | None) -> _Fit:
    """Fit (memory phase `step`, then `eval`, `save`, `resume` as the Trainer goes): the Trainer's
    loop from the resumed checkpoint (or the start) with the run's callbacks (progress and STOP,
    STOP within a micro-batch, TensorBoard on rank 0, keep-best, the step timer) and `callbacks`.

    Raises:
        _OutOfMemory: the loop ran out of memory (the step, the run's peak, the last checkpoint).
    """
    paths, config = run.paths, run.config
    run.memory.enter("step")
    run.result["load_seconds"] = round(time.time() - run.started_at, 1)  # Start to the first step (the forecast's)
    progress = progress_callback(paths, config, run.memory, run.started_at)
    stop_now = stop_within_micro_batch(paths["stop"])  # STOP between micro-batches, not only steps
    board = (tensorboard_callback(paths["tensorboard"], _checkpoint_step(run.checkpoint) + 1 if run.checkpoint else None)
             if run.main else None)
    keeper = best_checkpoint_keeper(paths, config, session) if config.keep_best else None
    timer = step_timer(config.grad_accum)  # seconds per micro-batch: the next run's forecast (pipeline.calibration)
    trainer = session.trainer(paths["checkpoints"],
                              [c for c in (progress, stop_now, board, keeper, timer) if c] + list(callbacks or []), run.memory)
    try:
        trainer.train(resume_from_checkpoint=str(run.checkpoint) if run.checkpoint else None)
    except Exception as error:  # noqa: BLE001
        if not is_out_of_memory(error):
            raise
        step = trainer.state.global_step
        raise _OutOfMemory(f"at step {step}", run.memory.to_dict()["peak_bytes"], step, last_checkpoint(paths["dir"]),
                           in_training=True) from None
    return _Fit(trainer, progress, stop_now, keeper, timer)


def _out_of_memory(run: _Run, oom: _OutOfMemory) -> dict:
    """The one answer to running out of memory, in the preflight or in training: the result failed,
    with where it happened, the peak (GiB), what to change (`oom_suggestions`) and, in training, the
    checkpoint a resume continues from. Logged and returned (not raised)."""
    suggestions = oom_suggestions(run.config)
    reason = f"Out of memory {oom.where} (peak {oom.peak_bytes / 2**30:.2f} GiB on {run.device}). Try: {'; '.join(suggestions)}."
    checkpoint = {}
    if oom.in_training:
        reason += " " + (f"The last checkpoint ({oom.kept.name}) is kept; --resume continues from it." if oom.kept else "")
        checkpoint = {"checkpoint": str(oom.kept) if oom.kept else None}
    run.result.update(status="failed", reason=reason, peak_memory_bytes=oom.peak_bytes, step=oom.step, **checkpoint,
                      suggestions=suggestions)
    log.error("%s", reason)
    return run.result


def _finish(run: _Run, session: Session, fit: _Fit) -> dict:
    """Finish (memory phase `save`): the best adapter chosen (--keep-best), the adapter saved by rank 0,
    and the result completed or stopped: steps, epochs, the last losses, the adapter and the last
    checkpoint, the keep-best summary and the seconds per micro-batch (the calibration's records are
    written by `_close_run`). Returns the result."""
    config, paths, result = run.config, run.paths, run.result
    stopped = fit.stopped
    best = fit.keeper.finish(fit.trainer, stopped) if fit.keeper is not None else None
    with run.memory.during("save"):
        if run.main:
            save_adapter(session.model, session.processor, session.base_identity, paths["adapter"],
                         weights_from=paths["best"] if best else None)
    state = fit.trainer.state
    best_eval = [h["eval_loss"] for h in state.log_history if "eval_loss" in h]
    result.update(
        status="stopped" if stopped else "completed",
        reason=("stopped by request; --resume continues" if stopped
                else "stopped early: no improvement in --early-stopping-patience evaluations"
                if fit.keeper is not None and fit.keeper.early_stopped else None),
        steps=state.global_step,
        max_steps=state.max_steps,
        epochs=round(float(state.epoch or 0.0), 4),
        final_loss=_last_train_loss(fit.progress.last_loss, paths["progress"]),
        eval_loss=best_eval[-1] if best_eval else None,
        adapter_dir=str(paths["adapter"]),
        checkpoint=str(last_checkpoint(paths["dir"]) or "") or None,
    )
    if fit.keeper is not None:
        result.update(fit.keeper.summary())
    step_time = fit.timer.summary()
    if step_time:
        result["step_time"] = dict(step_time, quantization=config.quantization, low_memory_heap=config.low_memory_heap,
                                   tokens=micro_batch_tokens(config.batch_size, list(session.train_data["num_tokens"])))
    log.info("Run `%s` %s at step %d.", run.name, result["status"], state.global_step)
    return result


def _last_train_loss(this_process: float | None, progress: Path) -> float | None:
    """The run's final training loss: the last one this process logged, else (a resumed run stopped before its
    first new step) the last one in the run's progress.jsonl, so the run keeps its final loss."""
    if this_process is not None:
        return this_process
    from pipeline.fileio import read_jsonl

    losses = [row["loss"] for row in read_jsonl(progress) if row.get("loss") is not None]
    return float(losses[-1]) if losses else None


def _record_failure(run: _Run, error: Exception) -> None:
    """The result of a run that failed with `error` (which `train` re-raises): status "failed", a
    `PipelineError`'s message as the reason, any other error's type and message with its traceback
    in train.log and the last checkpoint kept. Called inside the `except` block that caught `error`."""
    if isinstance(error, PipelineError):
        run.result.update(status="failed", reason=str(error))
        log.error("Run failed: %s", error)
        return
    cause = cause_words(error)
    run.result.update(status="failed", reason=cause[0].upper() + cause[1:])
    log.exception("Run failed")
    kept = last_checkpoint(run.paths["dir"])
    if kept is not None:
        run.result["checkpoint"] = str(kept)


def _close_run(run: _Run) -> None:
    """Close the run, whatever its outcome: the whole run's peak and the phase that set it, its
    seconds; rank 0 writes result.json and adds the run's evidence to this machine's calibration
    (peak memory per phase, seconds per micro-batch); train.log is closed."""
    result = run.result
    if run.memory is not None:  # the whole run's peak and the phase that set it
        result["memory"] = run.memory.to_dict()
        whole = merge_memory([result.get("earlier_memory"), result["memory"]])  # a resumed run: all its parts
        result.update(peak_memory_bytes=whole["peak_bytes"] if whole else result["memory"]["peak_bytes"],
                      memory_kind=result["memory"]["memory_kind"])
    result["seconds"] = round(time.time() - run.started_at, 3)
    result["finished_at"] = time.time()
    result.pop("pid", None)
    if run.main:
        write_result(run.paths["result"], result, log)
        record_run_memory(result, log)  # more evidence for this machine's calibration (pipeline.calibration)
        record_run_step_time(result, log)
    if run.log_handler is not None:
        _remove_log_file(run.log_handler)


# --------------------------------------------------------------------------------------------------
# train / run_probe_step
# --------------------------------------------------------------------------------------------------


@hold_workspace_lock  # one run at a time per workspace, from any entry point (refused before anything is written)
def train(
    config: TrainConfig | None,
    workspace: Workspace | str | os.PathLike,
    run_name: str,
    resume: bool = False,
    *,
    callbacks: list | None = None,
    dataset_dir: str | os.PathLike | None = None,
    allow_dataset_change: bool = False,
    started_at: float | None = None,
) -> dict:
    """Fine-tune LoRA adapters on `WS/dataset` and write the run folder; returns the result.json dict.

    Under torchrun / accelerate launch every process calls this (DDP, `distributed`) and runs the
    preflight; only rank 0 writes the run folder (Trainer adds one `rng_state_N.pth` per process to
    a checkpoint). The global batch is `batch_size * grad_accum * processes`.

    Args:
        config: the settings; with `resume=True` may be None (the run's config.json is used) and
            otherwise must equal it.
        workspace: workspace folder (holds the built dataset and `runs/`).
        run_name: the run's folder name under `WS/runs/`.
        resume: continue from the last checkpoint (same losses as an uninterrupted run).
        callbacks: extra `transformers.TrainerCallback`s (tests, the memory probe).
        dataset_dir: train on this Parquet folder (a cloud job bundle's `dataset/`), not WS/dataset.
        allow_dataset_change: resume although the dataset was rebuilt with other rows since the run
            started (refused otherwise; the change is recorded, see `pipeline.training.resume`).
        started_at: unix seconds the run's process started (`python -m pipeline train` passes its own
            process's, `pipeline.host.process_check.process_started_at`); None: now. The run's clock
            (`elapsed_s`, `seconds`) and its loading time (`load_seconds`: from here to the first step) count from it.

    Returns:
        The result dict: `status` (completed / stopped / failed), `reason`, `steps`, `max_steps`,
        `final_loss`, `eval_loss`, `peak_memory_bytes` (the whole process's peak), `memory` (the peak of
        each phase, the phase that set the peak and how it was measured:
        `pipeline.training.peak_memory.PhaseMemory.to_dict`), `preflight`, `quantization`, `lora`,
        `adapter_dir`, `checkpoint`, `seconds`, `step_time` (seconds per micro-batch and its tokens, stored
        for the next run's forecast: `pipeline.training.step_timer`), `tiny_random_model`, `processes`, ...

    Raises:
        TrainingError / ConfigError / DatasetError / ModelLoadError: the run cannot start (another
        run trains in the workspace, an existing run without --resume, nothing to resume, bad
        dataset rows, model not loadable).
        Out of memory (before or during training) is not raised: it is returned with status
        "failed", the step, the peak memory and `suggestions`. Any other error is recorded in
        result.json (status "failed") and train.log, then re-raised.
    """
    ws = workspace if isinstance(workspace, Workspace) else Workspace(Path(workspace))
    dataset_dir = Path(dataset_dir).expanduser().resolve() if dataset_dir is not None else None
    run = _open_run(config, ws, run_name, resume, dataset_dir, allow_dataset_change, started_at)
    try:
        session = _load(run)
        _preflight(run, session)
        fit = _fit(run, session, callbacks)
        return _finish(run, session, fit)
    except _OutOfMemory as oom:  # the preflight's or the loop's: answered with the failed result, not raised
        return _out_of_memory(run, oom)
    except Exception as error:  # noqa: BLE001 - recorded, then re-raised with its traceback in train.log
        _record_failure(run, error)
        raise
    finally:
        _close_run(run)


WARM_STEP_MAX_S = 30.0
"""`run_probe_step` times a second step when its measured one took less than this (seconds): a first step
pays one-time work (kernel selection, the allocator growing), which dwarfs a short step and made a
forecast from it 2.6x too long; a long step is mostly the step itself, and a second one would cost minutes."""


def run_probe_step(config: TrainConfig, workspace: Workspace | str | os.PathLike, *, phase=None) -> dict:
    """Run exactly ONE optimizer step on the worst-case batch (`pipeline.training.worst_case`: the
    longest row with the longest clip and the longest answer) with the training code's settings and
    report its peak memory; when that step was short (`WARM_STEP_MAX_S`), time a second one for
    `step_seconds`. Writes nothing to the workspace. `phase(name)` is called as each part begins
    (`load`, `batch`: the measured step on the longest batch, `step`: the timed second step).

    Same loading, quantization, LoRA, collator, Trainer optimizer and `training_step` as `train`.

    Returns:
        `{"peak_memory_bytes", "memory_kind", "device", "batch_rows", "worst_case", "batch_tokens",
        "loss", "seconds" (the measured step), "step_seconds" (the second step's, else "seconds"),
        "startup_seconds" (from this process's start to the end of the measured step: a run's loading),
        "weight_bytes", "quantization", "lora_modules", "trainable_params", "out_of_memory": bool,
        "error": str | None}`. `memory_kind` says which counter
        (`pipeline.training.peak_memory`), reset right before the step: CUDA `max_memory_reserved`,
        MPS driver memory (current), or the CPU process's RSS high-water mark (Linux).

    Raises:
        PipelineError subclasses when the model or dataset cannot be loaded.
    """
    import tempfile

    from pipeline.host.process_check import process_started_at  # noqa: PLC0415

    say = phase or (lambda name: None)
    ws = workspace if isinstance(workspace, Workspace) else Workspace(Path(workspace))
    say("load")
    session = Session(config, ws)
    device = session.device
    out = {
        "device": device,
        "memory_kind": memory_kind(device),
        "batch_rows": [r["id"] for r in session.worst.rows],
        "worst_case": session.worst.to_dict(),
        "weight_bytes": session.quantization.weight_bytes,
        "quantization": session.quantization.method,
        "lora_modules": session.lora.modules_per_part,
        "trainable_params": session.lora.trainable_params,
        "out_of_memory": False,
        "error": None,
    }
    with tempfile.TemporaryDirectory(prefix="probe-") as tmp:
        trainer = session.trainer(Path(tmp), [])
        trainer.create_optimizer_and_scheduler(num_training_steps=1)
        trainer.current_gradient_accumulation_steps = 1  # set by Trainer's own loop; one micro-batch here
        say("batch")
        batch = worst_case_batch(session.collator, session.worst)
        out["batch_tokens"] = int(batch["input_ids"].numel())
        reset_peak_memory(device)
        started = time.perf_counter()
        try:
            session.model.train()
            loss = trainer.training_step(session.model, batch)
            trainer.optimizer.step()
            trainer.optimizer.zero_grad(set_to_none=True)
            out["loss"] = float(loss.item())
        except Exception as error:  # noqa: BLE001
            if not is_out_of_memory(error):
                raise
            out.update(out_of_memory=True, error=str(error).splitlines()[0][:300])
        out["seconds"] = round(time.perf_counter() - started, 3)
        out["peak_memory_bytes"] = peak_memory_bytes(device)
        out["startup_seconds"] = round(time.time() - process_started_at(), 1)
        out["step_seconds"] = out["seconds"]
        if not out["out_of_memory"] and out["seconds"] < WARM_STEP_MAX_S:
            say("step")
            started = time.perf_counter()
            trainer.training_step(session.model, batch)
            trainer.optimizer.step()
            trainer.optimizer.zero_grad(set_to_none=True)
            out["step_seconds"] = round(time.perf_counter() - started, 3)
    return out
