"""STOP within one micro-batch: a run asked to stop does not wait for its optimizer step to finish.

With gradient accumulation an optimizer step is several micro-batches (forward + backward each);
on a laptop one E2B step takes minutes. `stop_within_micro_batch(stop_file)` is a Trainer callback
that looks for the run's STOP file after every micro-batch (`on_substep_end`; the step boundary is
`ProgressCallback.on_step_end`'s). When it is there, the partly accumulated step is dropped: no
optimizer step is taken, so the LoRA weights, optimizer and scheduler are those of the last finished
step, and the checkpoint saved next (`checkpoint-N`, N = finished steps) resumes at that step's
first micro-batch. The random number generators are put back to where they stood when the dropped
step began (dropout draws from them), so the resumed run redoes the step with the same micro-batches
and the same dropout masks: its losses and adapter equal those of an uninterrupted run.

How the Trainer cooperates (transformers 5.x `_inner_training_loop`): `should_training_stop` set in
`on_substep_end` breaks the micro-batch loop; `should_save` makes the epoch-end
`_maybe_log_save_evaluate` save the checkpoint with `TrainerState.global_step` unchanged; a resumed
Trainer skips `global_step x gradient_accumulation_steps` batches and restores the saved RNG state
before its first micro-batch.
"""

from __future__ import annotations

import logging
import random
from pathlib import Path
from typing import Any

import numpy as np
import torch

from pipeline.host import distributed

log = logging.getLogger("pipeline.training.stopping")


def rng_snapshot() -> dict[str, Any]:
    """The state of every generator a training step draws from: Python, NumPy, torch CPU, and each
    CUDA device (MPS when present)."""
    state: dict[str, Any] = {"python": random.getstate(), "numpy": np.random.get_state(), "cpu": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        state["mps"] = torch.mps.get_rng_state()
    return state


def restore_rng(state: dict[str, Any]) -> None:
    """Put every generator back to `state` (from `rng_snapshot`)."""
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["cpu"])
    if "cuda" in state:
        torch.cuda.set_rng_state_all(state["cuda"])
    if "mps" in state:
        torch.mps.set_rng_state(state["mps"])


def stop_within_micro_batch(stop_file: Path):
    """A `transformers.TrainerCallback` that stops the run after the micro-batch in which `stop_file`
    appears, dropping the partly accumulated step (see the module docstring). Its `stopped`
    attribute is True once it stopped the run."""
    from transformers import TrainerCallback

    class StopWithinMicroBatch(TrainerCallback):
        def __init__(self) -> None:
            self.stop_file = Path(stop_file)
            self.stopped = False
            self.step_start_rng: dict[str, Any] | None = None
            self.epoch_start_rng: dict[str, Any] | None = None
            self.first_step_of_epoch = False
            self.step_starts_epoch = False

        # Where `Trainer` reloads a checkpoint's RNG state on resume (transformers 5.24,
        # `_inner_training_loop`): at the start of the epoch loop, before the epoch's data iterator is
        # made, when the checkpoint ends an epoch; otherwise after the first resumed step's batches are
        # fetched, where `on_step_begin` runs. The state saved must be the one at that same point.
        def on_epoch_begin(self, args, state, control, **kwargs):
            self.epoch_start_rng = rng_snapshot()
            self.first_step_of_epoch = True
            return control

        def on_step_begin(self, args, state, control, **kwargs):
            self.step_start_rng = rng_snapshot()
            self.step_starts_epoch = self.first_step_of_epoch
            self.first_step_of_epoch = False
            return control

        def on_substep_end(self, args, state, control, **kwargs):
            if self.stopped:
                return control
            # Under DDP rank 0 reads the file and every process gets its answer, so all stop after
            # the same micro-batch (a process that went on would wait for the others forever).
            if not distributed.any_process(distributed.is_main_process() and self.stop_file.exists()):
                return control
            log.info("STOP file found during optimizer step %d: dropping its partly accumulated gradients and "
                     "saving the state after step %d; --resume redoes step %d.",
                     state.global_step + 1, state.global_step, state.global_step + 1)
            model = kwargs.get("model")
            if model is not None:
                model.zero_grad(set_to_none=True)  # the dropped step's gradients
            rewind_to = self.epoch_start_rng if self.step_starts_epoch else self.step_start_rng
            if rewind_to is not None:
                restore_rng(rewind_to)
            self.stopped = True
            control.should_training_stop = True
            control.should_save = True
            return control

    return StopWithinMicroBatch()
