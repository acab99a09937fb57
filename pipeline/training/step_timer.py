"""How long a run's optimizer steps take on this machine, kept as evidence for the next run's forecast.

A run measures the wall-clock seconds of each optimizer step as the time from one step's `on_step_end`
(of `transformers.TrainerCallback`) to the next's, the first from its `on_step_begin`: the forward and
backward passes of its `grad_accum` micro-batches, the optimizer update, and reading and collating its
batches, which `transformers.Trainer` does before `on_step_begin` (`get_batch_samples`): timed from
`on_step_begin` only, the tiny stand-in's median step read 0.76 s where its steps took 1.0 s of wall clock
(2026-12-03). Each step's micro-batches are counted (`on_substep_end`): the last step of an epoch runs
fewer. An evaluation or a checkpoint save falls into the interval of the step it follows; the median leaves
those few out. The first step of a process is left out when later ones exist: it pays for one-time
work (kernel selection, the allocator growing to its working size). The median of the rest's seconds per
micro-batch is the run's seconds per micro-batch, stored beside the micro-batch's token count with
`pipeline.calibration.record_step_time`; `pipeline.calibration.forecast_run` reads it back, with the
same token measure (`batch_size` x the mean train row's tokens), to say how long the next run will take;
the run's loading (its `load_seconds`, from its process's start to its first step) is stored beside it.
"""

from __future__ import annotations

import statistics
import time


def seconds_per_micro_batch(step_seconds: list[float], micro_batches: list[int] | None = None) -> float | None:
    """A run's typical micro-batch (seconds) from its measured optimizer steps in order (`step_seconds`, wall
    clock) and the micro-batches each ran (`micro_batches`; None: all the same): the median, over the steps
    after the first, of a step's seconds per micro-batch. The first pays for one-time work (kernel selection
    for new shapes, the allocator growing: the tiny stand-in's took 1.3 s against 0.3-0.35 s per micro-batch
    for the rest, 2026-12-03) and counts only when it is all there is; the median leaves out the few steps an
    evaluation or a save lengthened. Per micro-batch, not per step: the last step of an epoch runs fewer
    (`pipeline.calibration.this_machine.run_micro_batches`). None for no step."""
    if not step_seconds:
        return None
    counts = list(micro_batches or [1] * len(step_seconds))
    rates = [seconds / max(1, count) for seconds, count in zip(step_seconds, counts)]
    return float(statistics.median(rates[1:] or rates))


def remaining_seconds(step_seconds: list[float], micro_batches: list[int] | None, micro_batches_left: int) -> float | None:
    """How long the rest of a run takes, from its own measured steps (`seconds_per_micro_batch` of `step_seconds`
    and `micro_batches`) times the micro-batches its remaining steps run (`micro_batches_left`,
    `pipeline.calibration.this_machine.run_micro_batches`); None before the first step. The average since the
    first step (warm-up included) over the steps left, as counted before, said 14.1 s at the stand-in's step 1
    where its 11 steps left took 11.4 s, and swung with its steps of 4 and 2 micro-batches (2026-12-03)."""
    typical = seconds_per_micro_batch(step_seconds, micro_batches)
    return None if typical is None else typical * max(0, int(micro_batches_left))


def step_timer(grad_accum: int):
    """A `transformers.TrainerCallback` timing each optimizer step; `summary()` gives the result.

    Args:
        grad_accum: micro-batches per optimizer step (`TrainConfig.grad_accum`, >= 1).
    """
    from transformers import TrainerCallback  # noqa: PLC0415 - transformers loads only when a run starts

    class StepTimer(TrainerCallback):
        """Wall-clock seconds of every optimizer step this process ran (`time.perf_counter`)."""

        def __init__(self) -> None:
            self.grad_accum = max(1, int(grad_accum))
            self.step_seconds: list[float] = []
            self.step_micro_batches: list[int] = []
            self._began: float | None = None
            self._substeps = 0

        def on_step_begin(self, args, state, control, **kwargs):
            if self._began is None:  # the first step of this process; later ones run from the previous step's end
                self._began = time.perf_counter()

        def on_substep_end(self, args, state, control, **kwargs):
            self._substeps += 1  # a micro-batch that is not its step's last

        def on_step_end(self, args, state, control, **kwargs):
            now = time.perf_counter()
            if self._began is not None:
                self.step_seconds.append(now - self._began)
                self.step_micro_batches.append(self._substeps + 1)
            self._began, self._substeps = now, 0

        def summary(self) -> dict | None:
            """`{"seconds_per_micro_batch", "steps_timed", "grad_accum"}` (`seconds_per_micro_batch` of the
            steps and the micro-batches each ran; `grad_accum` each where they were not counted), or None when
            no step finished."""
            if not self.step_seconds:
                return None
            timed = self.step_seconds[1:] or self.step_seconds
            counts = (self.step_micro_batches if len(self.step_micro_batches) == len(self.step_seconds)
                      else [self.grad_accum] * len(self.step_seconds))
            return {"seconds_per_micro_batch": round(seconds_per_micro_batch(self.step_seconds, counts), 4),
                    "steps_timed": len(timed), "grad_accum": self.grad_accum}

    return StepTimer()


def record_run_step_time(result: dict, log) -> bool:
    """Store a finished run's `result["step_time"]` (`{"seconds_per_micro_batch", "tokens", "quantization", ...}`, set by
    `pipeline.training.train`) in this machine's calibration, and its `load_seconds` (from its process's start
    to its first step, `pipeline.calibration.record_load_time`). Only completed or stopped single-process
    runs count (a DDP process's step waits for the others). A calibration file that cannot be written
    never fails the run: the reason is logged as a warning. Returns whether a step time was stored."""
    from pipeline.calibration.this_machine import record_load_time, record_step_time  # noqa: PLC0415
    from pipeline.errors import PipelineError  # noqa: PLC0415

    timing = result.get("step_time") or {}
    if (result.get("status") not in ("completed", "stopped") or result.get("processes", 1) != 1
            or not timing.get("tokens") or not timing.get("seconds_per_micro_batch") or not result.get("device")
            or not timing.get("quantization")):
        return False
    try:
        record_step_time(result["device"], result["model"], timing["quantization"], timing["tokens"],
                         timing["seconds_per_micro_batch"], bool(timing.get("low_memory_heap", False)),
                         workspace=result.get("workspace"))
        if result.get("load_seconds"):
            record_load_time(result["device"], result["model"], timing["quantization"], result["load_seconds"],
                             bool(timing.get("low_memory_heap", False)), workspace=result.get("workspace"))
    except (OSError, PipelineError) as error:
        log.warning("The run's step time was not added to the calibration: %s", error)
        return False
    return True
