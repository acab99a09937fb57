"""How long a run's optimizer steps take on this machine, kept as evidence for the next run's forecast.

A run measures the wall-clock seconds of each optimizer step (from `on_step_begin` to `on_step_end`
of `transformers.TrainerCallback`: the forward and backward passes of its `grad_accum` micro-batches
and the optimizer update; evaluation and checkpoint saves come after `on_step_end` and are not
counted). The first step of a process is left out when later ones exist: it pays for one-time work
(kernel selection, the allocator growing to its working size). The median of the rest, divided by
`grad_accum`, is the run's seconds per micro-batch, stored beside the micro-batch's token count with
`pipeline.calibration.record_step_time`; `pipeline.calibration.forecast_run` reads it back, with the
same token measure (`batch_size` x the mean train row's tokens), to say how long the next run will take;
the run's loading (its `load_seconds`, from its process's start to its first step) is stored beside it.
"""

from __future__ import annotations

import statistics
import time


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
            self._began: float | None = None

        def on_step_begin(self, args, state, control, **kwargs):
            self._began = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):
            if self._began is not None:
                self.step_seconds.append(time.perf_counter() - self._began)
                self._began = None

        def summary(self) -> dict | None:
            """`{"seconds_per_micro_batch", "steps_timed", "grad_accum"}` (seconds: the median step after
            the first, divided by `grad_accum`), or None when no step finished."""
            if not self.step_seconds:
                return None
            timed = self.step_seconds[1:] or self.step_seconds
            return {"seconds_per_micro_batch": round(statistics.median(timed) / self.grad_accum, 4),
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
