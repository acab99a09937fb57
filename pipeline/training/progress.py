"""The run's progress as the trainer goes: one `progress.jsonl` line per logging step, the peak
memory so far, and the STOP file honoured after every optimizer step (`ProgressCallback`).

The lines' fields are the ones `pipeline.training.run_folder` reads back for the app and the CLI. This
module does not stop within a micro-batch (`pipeline.training.stopping`) and does not time steps for
the forecast (`pipeline.training.step_timer`).
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

from pipeline.calibration.this_machine import run_micro_batches
from pipeline.config import TrainConfig
from pipeline.fileio import append_jsonl, hold_point
from pipeline.host import distributed
from pipeline.training.peak_memory import PhaseMemory
from pipeline.training.run_folder import logged_elapsed_s
from pipeline.training.step_timer import remaining_seconds
from pipeline.units import format_gib

log = logging.getLogger("pipeline.training.train")
"""The trainer's logger: progress lines are the run's own lines in train.log (`pipeline.training.run_log`)."""


def micro_batches_per_epoch(loader) -> int | None:
    """The micro-batches an epoch of `loader` (the Trainer's training `DataLoader`) runs; None when not known
    (no loader, or an iterable dataset without a length)."""
    try:
        return len(loader) if loader is not None else None
    except TypeError:
        return None


def progress_callback(paths: dict[str, Path], config: TrainConfig, memory: PhaseMemory, started_at: float | None = None):
    """The run's `ProgressCallback` (a `transformers.TrainerCallback`, below): writes `paths["progress"]`,
    reads `paths["stop"]` (`pipeline.training.run_folder.run_paths`), samples `memory` after every
    micro-batch. Its `stopped`, `last_loss` and `last_eval_loss` attributes tell the run how it ended.
    `started_at`: unix seconds this process's run started (its loading counts in `elapsed_s`); None: when
    the Trainer's loop begins."""
    from transformers import TrainerCallback  # noqa: PLC0415 - transformers loads only when a run starts

    class ProgressCallback(TrainerCallback):
        """Appends progress.jsonl lines and honours the STOP file.

        Each line: `kind` ("train" or "eval"), `step`, `max_steps`, `epoch`, `loss`,
        `learning_rate`, `grad_norm`, `eval_loss` (eval lines), `samples_per_s`, `elapsed_s`,
        `eta_s`, `peak_memory_bytes` (the whole process so far), `phase_peak_bytes` (phase -> peak
        so far, `pipeline.training.peak_memory.RUN_PHASES`), `peak_phase` (the phase that set the
        peak), `time` (unix seconds). `elapsed_s` is the run's time in seconds across resumes, each
        process's loading included (from `started_at`: the clock the person who pressed Start reads,
        which never goes back; a resumed run continues from the checkpoint's last logged `elapsed_s`,
        see `logged_elapsed_s`); `samples_per_s` and `eta_s` use only the steps and time of this
        process's training loop (`eta_s`: `pipeline.training.step_timer.remaining_seconds`, the median
        micro-batch of its steps after the first, which pays for one-time work, times the micro-batches the
        steps left run, `pipeline.calibration.this_machine.run_micro_batches`).
        Under DDP only rank 0 writes (`loss` is the mean over processes, `samples_per_s` counts all of
        them); rank 0 reads STOP and every process gets its decision, so all stop after the same step.
        """

        def __init__(self, paths: dict[str, Path], config: TrainConfig, memory: PhaseMemory, started_at: float | None):
            self.paths = paths
            self.started_at = started_at
            self.config = config
            self.memory = memory
            self.started = time.perf_counter()
            self.start_step = 0
            self.elapsed_before_s = 0.0
            self.stopped = False
            self.last_loss: float | None = None
            self.last_eval_loss: float | None = None
            self.rows_per_step = config.effective_batch_size * distributed.world_size()
            self.step_seconds: list[float] = []
            self.step_micro_batches: list[int] = []
            self.micro_batches = 0
            self.last_logged_step, self.last_logged_at = 0, self.started
            self.per_epoch: int | None = None

        def on_train_begin(self, args, state, control, **kwargs):
            self.started = time.perf_counter()
            self.start_step = state.global_step
            self.step_seconds, self.step_micro_batches = [], []  # per step of this process: wall clock, micro-batches
            self.micro_batches = 0  # since the last logged step
            self.last_logged_step, self.last_logged_at = state.global_step, self.started
            self.per_epoch = micro_batches_per_epoch(kwargs.get("train_dataloader"))
            self.elapsed_before_s = logged_elapsed_s(self.paths["progress"], state.global_step)
            self.started_at = self.started_at or time.time()

        def on_substep_end(self, args, state, control, **kwargs):
            self.memory.sample()
            self.micro_batches += 1

        def on_step_end(self, args, state, control, **kwargs):
            self.memory.sample()
            self.micro_batches += 1
            if distributed.any_process(distributed.is_main_process() and self.paths["stop"].exists()):
                log.info("STOP file found at step %d: saving a checkpoint and the adapter.", state.global_step)
                self.stopped = True
                control.should_save = True
                control.should_training_stop = True
            return control

        def on_save(self, args, state, control, **kwargs):
            hold_point("train:saved")  # a checkpoint is on disk: where the kill tests stop a run

        def on_log(self, args, state, control, logs=None, **kwargs):
            logs = dict(logs or {})
            if "train_runtime" in logs:  # the end-of-training summary, not a step
                return
            now = time.perf_counter()
            elapsed = now - self.started
            steps_done = max(0, state.global_step - self.start_step)
            if "eval_loss" not in logs and state.global_step > self.last_logged_step:
                steps = state.global_step - self.last_logged_step  # logging_steps apart: one entry for them
                self.step_seconds.append(now - self.last_logged_at)
                self.step_micro_batches.append(self.micro_batches or steps * self.config.grad_accum)
                self.micro_batches, self.last_logged_step, self.last_logged_at = 0, state.global_step, now
            left = remaining_seconds(self.step_seconds, self.step_micro_batches, run_micro_batches(
                state.global_step, state.max_steps, self.per_epoch, self.config.grad_accum))
            line = progress_line(state, logs, self.memory.to_dict(),
                                 samples_per_s=round(steps_done * self.rows_per_step / elapsed, 4) if elapsed > 0 else None,
                                 elapsed_s=round(self.elapsed_before_s + time.time() - self.started_at, 3),
                                 eta_s=round(left, 1) if left is not None else None)
            if line["loss"] is not None:
                self.last_loss = float(line["loss"])
            if line["eval_loss"] is not None:
                self.last_eval_loss = float(line["eval_loss"])
            if not distributed.is_main_process():
                return
            append_jsonl(self.paths["progress"], line)
            _log_progress(line)

    return ProgressCallback(paths, config, memory, started_at)


def progress_line(state, logs: dict, memory: dict, *, samples_per_s: float | None, elapsed_s: float,
                  eta_s: float | None) -> dict:
    """One progress.jsonl line (`ProgressCallback`'s docstring names its keys) from the Trainer's `state`, the
    logged values `logs` and `memory` (`PhaseMemory.to_dict()`); the three timings as the callback worked them
    out."""
    line = {
        "kind": "eval" if "eval_loss" in logs else "train",
        "step": state.global_step,
        "max_steps": state.max_steps,
        "epoch": round(float(state.epoch or 0.0), 4),
        "loss": logs.get("loss"),
        "learning_rate": logs.get("learning_rate"),
        "grad_norm": logs.get("grad_norm"),
        "eval_loss": logs.get("eval_loss"),
        "samples_per_s": samples_per_s,
        "elapsed_s": elapsed_s,
        "eta_s": eta_s,
        "time": round(time.time(), 3),
    }
    line.update(peak_memory_bytes=memory["peak_bytes"], phase_peak_bytes=memory["phase_peak_bytes"],
                peak_phase=memory["peak_phase"], memory_kind=memory["memory_kind"])
    return line


def _log_progress(line: dict) -> None:
    """Say a progress line in the run's log: an evaluation's loss, or a step's loss, learning rate, gradient
    norm, peak memory so far and time left."""
    if line["kind"] == "eval":
        log.info("step %d/%d eval_loss %.4f", line["step"], line["max_steps"], line["eval_loss"])
    else:
        log.info(
            "step %d/%d loss %s lr %s grad_norm %s peak so far %s eta %s s",
            line["step"], line["max_steps"], line["loss"], line["learning_rate"], line["grad_norm"],
            format_gib(line["peak_memory_bytes"]), line["eta_s"],
        )
