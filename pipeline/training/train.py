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

This module does not choose settings (that is `pipeline.config` / the memory estimate) and does not
spawn processes (that is `pipeline.training.runs`).
"""

from __future__ import annotations

import json
import logging
import os
import shlex
import time
from pathlib import Path

from pipeline.config import TrainConfig, refuse_full_finetuning
from pipeline.data.portable import dataset_identity
from pipeline.errors import ConfigError, DatasetError, PipelineError, TrainingError
from pipeline.fileio import atomic_write_json
from pipeline.host import distributed
from pipeline.calibration.this_machine import micro_batch_tokens
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
from pipeline.model.base_identity import run_base_model
from pipeline.training.checkpoints import check_free_disk, checkpoint_bytes, damaged_text, newest_intact_checkpoint
from pipeline.training.checkpoints import save_adapter, set_aside, write_result
from pipeline.training.resume import check_dataset, record_dataset
from pipeline.training.resume import resolve_resume_config as _resolve_resume_config
from pipeline.training.run_log import close_run_log as _remove_log_file
from pipeline.training.run_log import open_run_log as _setup_log_file
from pipeline.training.run_folder import (
    last_checkpoint,
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
from pipeline.workspace import Workspace

log = logging.getLogger("pipeline.training.train")


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
    paths = run_paths(ws, run_name)
    dataset_dir = Path(dataset_dir).expanduser().resolve() if dataset_dir is not None else None
    checkpoint = None
    damaged: list[dict] = []
    main = distributed.is_main_process()
    if resume:
        config = _resolve_resume_config(paths, config)
        recorded_model = _resolve_resume_config(paths, None).model
        # another path for the same base is fine (its identity is compared once loaded); a recorded
        # folder that moved away is named, with the fix (`run_base_model`)
        config = config.replace(model=run_base_model(paths["dir"], run_name, None if config.model == recorded_model else config.model))
        # every file a resume reads is checked first; damaged newer checkpoints are set aside below
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
                                       allow_change=allow_dataset_change) if main else None
    else:
        if config is None:
            raise ConfigError("No training settings given; pass a TrainConfig.")
        refuse_full_finetuning(config.finetuning_type)
        if any(paths[k].exists() for k in ("config", "result", "checkpoints", "progress")):
            raise TrainingError(
                f"Run `{run_name}` already exists in {paths['dir']}; continue it with --resume or choose another --run name."
            )
    if dataset_dir is not None:
        from pipeline.data.portable import check_portable_dataset

        check_portable_dataset(dataset_dir)
    elif not resume:  # checked before the run folder exists: a run that cannot start leaves nothing behind
        from pipeline.data.dataset import load_built_dataset

        try:
            load_built_dataset(ws)
        except DatasetError as error:
            if "No built dataset" not in str(error):
                raise
            raise DatasetError(f"No built dataset in {ws.dataset_dir}; build it first with `python -m pipeline build "
                               f"--workspace {shlex.quote(str(ws.root))} --model {shlex.quote(str(config.model))}`.") from None
    from pipeline.model.loading import resolve_device

    resolved_device = resolve_device(config.device)
    distributed.join(resolved_device)
    distributed.barrier()  # every process has checked the run folder before rank 0 writes into it
    if main:
        paths["dir"].mkdir(parents=True, exist_ok=True)
        remove_stale_stop(paths["stop"], paths["result"])
        if damaged:  # kept as damaged-checkpoint-N: nothing saved is lost, and Trainer never sees them
            set_aside(damaged)
        if not resume:
            atomic_write_json(paths["config"], config.to_dict())
            record_dataset(paths["dir"], dataset_identity(ws, dataset_dir))
    if not resume:
        dataset_change = None
    started_at = time.time()
    base = {
        "run": run_name,
        "status": "running",
        "reason": None,
        "pid": os.getpid(),
        "model": config.model,
        "resumed_from": str(checkpoint) if checkpoint else None,
        "started_at": started_at,
        "processes": distributed.world_size(),
        "global_batch_size": config.effective_batch_size * distributed.world_size(),
    }
    if main:
        atomic_write_json(paths["result"], base)
    handler = _setup_log_file(paths["log"]) if main else None
    log.info("%s run `%s` with settings %s", "Resuming" if resume else "Starting", run_name, json.dumps(config.to_dict()))
    if damaged:
        base["damaged_checkpoints"] = damaged
        base["note"] = damaged_text(damaged, checkpoint)
        log.warning("%s", base["note"])
    if checkpoint is not None and main:
        dropped = trim_progress_to_step(paths["progress"], int(checkpoint.name.split("-", 1)[1]))
        if dropped:
            log.info("Dropped %d progress line(s) logged after %s by an interrupted process; those steps run again.",
                     dropped, checkpoint.name)
    from pipeline.model.base_identity import record_or_check_run_base
    from pipeline.model.tiny_model import is_tiny_random_model

    result = dict(base, tiny_random_model=is_tiny_random_model(config.model), dataset_change=dataset_change)
    trainer = None
    callback = None
    memory: PhaseMemory | None = None
    try:
        try:
            memory = PhaseMemory(resolved_device)
            memory.enter("load")
            session = Session(config, ws, dataset_dir)
        except PipelineError as error:
            result.update(status="failed", reason=str(error))
            raise
        if main:
            record_or_check_run_base(paths["dir"], session.base_identity, run_name)
            if resume and config.model != recorded_model:  # the same base, found elsewhere: remember where
                log.info("Run `%s` continues on `%s` (recorded `%s`): the same base model (config and weights).",
                         run_name, config.model, recorded_model)
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
        device = session.device
        if main:  # before the run starts: room for a checkpoint and the final adapter (how much is free, how much needed)
            trainable = int(session.lora.trainable_params)
            check_free_disk(paths["dir"], checkpoint_bytes(paths["checkpoints"], trainable) + trainable * 4,
                            f"run `{run_name}` (a checkpoint and the adapter)")
        result["memory_estimate"] = run_estimate(ws, config, device, dataset_dir=dataset_dir,
                                                 on_error=lambda e: log.warning("No memory estimate: %s", e))
        if main:
            atomic_write_json(paths["result"], result)  # the app compares the run's memory with it while it runs
        out_of_memory = False
        memory.enter("preflight")
        try:  # on every process: each holds a whole copy of the model and its own worst-case batch
            result["preflight"] = preflight(session.model, session.collator, session.worst, config, device, answer_loss)
            result["preflight"]["peak_memory_bytes"] = memory.current()["preflight"]
            log.info("Preflight on the worst-case batch: %s", json.dumps(result["preflight"]))
        except Exception as error:  # noqa: BLE001
            if not is_out_of_memory(error):
                raise
            out_of_memory = True
        if distributed.any_process(out_of_memory):
            peak = max(distributed.gather_ints(memory.current()["preflight"]))  # the largest of the processes
            result.update(
                status="failed",
                reason=(
                    f"Out of memory on the longest batch before training (peak {peak / 2**30:.2f} GiB on {device}). "
                    f"Try: {'; '.join(oom_suggestions(config))}."
                ),
                peak_memory_bytes=peak,
                step=0,
                suggestions=oom_suggestions(config),
            )
            log.error("%s", result["reason"])
            return result
        memory.enter("step")
        callback = progress_callback(paths, config, memory)
        stop_now = stop_within_micro_batch(paths["stop"])  # STOP between micro-batches, not only steps
        board = tensorboard_callback(paths["tensorboard"], int(checkpoint.name.split("-", 1)[1]) + 1 if checkpoint else None) if main else None
        keeper = best_checkpoint_keeper(paths, config, session) if config.keep_best else None
        timer = step_timer(config.grad_accum)  # seconds per micro-batch: the next run's forecast (pipeline.calibration)
        trainer = session.trainer(paths["checkpoints"],
                                  [c for c in (callback, stop_now, board, keeper, timer) if c] + list(callbacks or []), memory)
        try:
            trainer.train(resume_from_checkpoint=str(checkpoint) if checkpoint else None)
        except Exception as error:  # noqa: BLE001
            if not is_out_of_memory(error):
                raise
            step = trainer.state.global_step
            peak = memory.to_dict()["peak_bytes"]
            kept = last_checkpoint(paths["dir"])
            result.update(
                status="failed",
                reason=(
                    f"Out of memory at step {step} (peak {peak / 2**30:.2f} GiB on {device}). Try: "
                    f"{'; '.join(oom_suggestions(config))}. "
                    + (f"The last checkpoint ({kept.name}) is kept; --resume continues from it." if kept else "")
                ),
                peak_memory_bytes=peak,
                step=step,
                checkpoint=str(kept) if kept else None,
                suggestions=oom_suggestions(config),
            )
            log.error("%s", result["reason"])
            return result
        stopped = callback.stopped or stop_now.stopped
        best = keeper.finish(trainer, stopped) if keeper is not None else None
        with memory.during("save"):
            if main:
                save_adapter(session.model, session.processor, session.base_identity, paths["adapter"],
                             weights_from=paths["best"] if best else None)
        state = trainer.state
        best_eval = [h["eval_loss"] for h in state.log_history if "eval_loss" in h]
        result.update(
            status="stopped" if stopped else "completed",
            reason=("stopped by request (STOP file); --resume continues" if stopped
                    else "stopped early: no improvement in --early-stopping-patience evaluations"
                    if keeper is not None and keeper.early_stopped else None),
            steps=state.global_step,
            max_steps=state.max_steps,
            epochs=round(float(state.epoch or 0.0), 4),
            final_loss=callback.last_loss,
            eval_loss=best_eval[-1] if best_eval else None,
            adapter_dir=str(paths["adapter"]),
            checkpoint=str(last_checkpoint(paths["dir"]) or "") or None,
        )
        if keeper is not None:
            result.update(keeper.summary())
        step_time = timer.summary()
        if step_time:
            result["step_time"] = dict(step_time, quantization=config.quantization, low_memory_heap=config.low_memory_heap,
                                       tokens=micro_batch_tokens(config.batch_size, list(session.train_data["num_tokens"])))
        log.info("Run `%s` %s at step %d.", run_name, result["status"], state.global_step)
        return result
    except PipelineError as error:
        result.update(status="failed", reason=str(error))
        log.error("Run failed: %s", error)
        raise
    except Exception as error:  # noqa: BLE001 - recorded, then re-raised with its traceback in train.log
        result.update(status="failed", reason=f"{type(error).__name__}: {error}")
        log.exception("Run failed")
        kept = last_checkpoint(paths["dir"])
        if kept is not None:
            result["checkpoint"] = str(kept)
        raise
    finally:
        if memory is not None:  # the whole run's peak and the phase that set it
            result["memory"] = memory.to_dict()
            result.update(peak_memory_bytes=result["memory"]["peak_bytes"], memory_kind=result["memory"]["memory_kind"])
        result["seconds"] = round(time.time() - started_at, 3)
        result["finished_at"] = time.time()
        result.pop("pid", None)
        if main:
            write_result(paths["result"], result, log)
            record_run_memory(result, log)  # more evidence for this machine's calibration (pipeline.calibration)
            record_run_step_time(result, log)
        if handler is not None:
            _remove_log_file(handler)


def run_probe_step(config: TrainConfig, workspace: Workspace | str | os.PathLike) -> dict:
    """Run exactly ONE optimizer step on the worst-case batch (`pipeline.training.worst_case`: the
    longest row with the longest clip and the longest answer) with the training code's settings and
    report its peak memory. Writes nothing to the workspace.

    Same loading, quantization, LoRA, collator, Trainer optimizer and `training_step` as `train`.

    Returns:
        `{"peak_memory_bytes", "memory_kind", "device", "batch_rows", "worst_case", "batch_tokens",
        "loss", "seconds", "weight_bytes", "quantization", "lora_modules", "trainable_params",
        "out_of_memory": bool, "error": str | None}`. `memory_kind` says which counter
        (`pipeline.training.peak_memory`), reset right before the step: CUDA `max_memory_reserved`,
        MPS driver memory (current), or the CPU process's RSS high-water mark (Linux).

    Raises:
        PipelineError subclasses when the model or dataset cannot be loaded.
    """
    import tempfile

    ws = workspace if isinstance(workspace, Workspace) else Workspace(Path(workspace))
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
    return out


# --------------------------------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------------------------------
