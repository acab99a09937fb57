"""What `transformers.Trainer` is given: the loss, the learning-rate schedule's name, TensorBoard logging.

- `answer_loss`: cross-entropy on the tutor's answer only, with logits computed only where a token
  is supervised, normalised over the supervised tokens of the whole gradient-accumulation window.
- `answer_loss_trainer_class()`: the `Trainer` subclass that uses it. Gemma 3n's forward takes no
  loss kwargs (`accepts_loss_kwargs = False`), so a stock `Trainer` averages the MEAN loss of each
  micro-batch: with micro-batches of unequal answer lengths, accumulating k micro-batches then gives
  neither the loss nor the gradients of the equivalent batch of k rows. Here Trainer counts the
  supervised tokens of each window (`num_items_in_batch`) and every micro-batch's summed loss is
  divided by that count, so batch 2 x accumulation 1 and batch 1 x accumulation 2 give the same
  loss and gradients (transformers #34242 for the same fix in the stock loss).
- `LR_SCHEDULERS`: `--lr-schedule` -> `TrainingArguments.lr_scheduler_type`; `constant` is
  `constant_with_warmup` (transformers' plain `constant` ignores the warmup steps).
- `tensorboard_callback`: TensorBoard event files in the run folder (`WS/runs/NAME/tensorboard/`).

This module does not load models or data (that is `pipeline.training.train`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from pipeline.model.tokens import IGNORE_INDEX
from pipeline.host.free_heap import release_free_heap

LR_SCHEDULERS = {"linear": "linear", "cosine": "cosine", "constant": "constant_with_warmup"}
"""`--lr-schedule` -> `transformers.TrainingArguments.lr_scheduler_type`. Every schedule warms up over
`--warmup-ratio` of the steps first (transformers' `constant` would skip the warmup)."""


def answer_loss(model, batch: dict, num_items_in_batch: Any = None) -> tuple[torch.Tensor, Any]:
    """Cross-entropy over the supervised answer tokens, with logits computed ONLY where needed.

    The model projects onto the 262,400-token vocabulary only at positions whose next token is
    supervised (`logits_to_keep` as a boolean (B, T) mask), instead of at every prompt and audio
    position. The logits (and their fp32 gradient) shrink from T positions to the answer's length
    per row, the biggest memory lever after gradient checkpointing (FIELD_NOTES "Memory": ~3.7 MB
    per token on E2B).

    Normalisation: the per-token losses (fp32) are summed and divided by `num_items_in_batch`, the
    supervised tokens of the whole gradient-accumulation window (Trainer counts them), so the sum of
    a window's micro-batch losses is the mean over all its tokens: the loss and gradients of one
    batch holding the whole window. Without `num_items_in_batch`, the mean over this batch's
    supervised tokens, i.e. transformers' `ForCausalLMLoss`.

    Args:
        batch: `ChatCollator` output; `labels` (B, T) int64 with -100 outside the answers.
        num_items_in_batch: supervised tokens of the accumulation window (int or 0-d tensor), or None.

    Returns:
        `(loss, outputs)`: a 0-d fp32 tensor; `outputs.logits` has shape (N, vocab) for the N kept positions.
    """
    inputs = dict(batch)
    labels = inputs.pop("labels")
    keep = torch.zeros_like(labels, dtype=torch.bool)
    keep[:, :-1] = labels[:, 1:] != IGNORE_INDEX
    targets = labels[:, 1:][keep[:, :-1]]
    outputs = model(**inputs, logits_to_keep=keep)
    summed = torch.nn.functional.cross_entropy(
        outputs.logits.float(), targets.to(outputs.logits.device), reduction="sum"
    )
    count = num_items_in_batch if num_items_in_batch is not None else targets.numel()
    if torch.is_tensor(count):
        count = count.to(summed.device)
    return summed / count, outputs


def answer_loss_trainer_class():
    """The `transformers.Trainer` subclass whose loss is `answer_loss`, normalised per accumulation window."""
    from transformers import Trainer

    class AnswerLossTrainer(Trainer):
        """`transformers.Trainer` whose loss is `answer_loss` (logits only at supervised positions),
        divided by the supervised tokens of the whole gradient-accumulation window.

        With a `pipeline.training.peak_memory.PhaseMemory` in `memory`, evaluation, checkpoint saves
        and reading a checkpoint back are recorded as the run phases `eval`, `save` and `resume`
        (the rest of `train` is `step`). On CPU each micro-batch starts by handing the C heap's free
        memory back (`pipeline.host.free_heap`)."""

        memory = None

        def __init__(self, *args: Any, **kwargs: Any):
            super().__init__(*args, **kwargs)
            # The model's forward takes no loss kwargs, but `compute_loss` below does. With this flag
            # Trainer counts the supervised tokens of each accumulation window (`num_items_in_batch`,
            # over labels[..., 1:]) and, since the loss is then already normalised, does not divide it
            # by the number of accumulation steps (`Trainer.training_step`, transformers 5.24).
            self.model_accepts_loss_kwargs = True

        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            loss, outputs = answer_loss(model, inputs, num_items_in_batch)
            if num_items_in_batch is not None and self.args.average_tokens_across_devices:
                # The count is summed over all processes and DDP averages the gradients: scale back
                # (as `Trainer.compute_loss` does), so each token weighs the same on every process.
                loss = loss * self.accelerator.num_processes
            return (loss, outputs) if return_outputs else loss

        def training_step(self, model, inputs, *args: Any, **kwargs: Any):
            # On CPU every micro-batch starts from live memory, and so does what follows its backward
            # (gradient clipping and the optimizer step after the last micro-batch of a step): what
            # the forward and backward freed is handed back instead of staying resident beneath the
            # optimizer's temporaries (pipeline.host.free_heap).
            on_cpu = self.args.device.type == "cpu"
            if on_cpu:
                release_free_heap()
            loss = super().training_step(model, inputs, *args, **kwargs)
            if on_cpu:
                release_free_heap()
            return loss

        def _phase(self, name: str):
            from contextlib import nullcontext

            return self.memory.during(name) if self.memory is not None else nullcontext()

        def evaluate(self, *args: Any, **kwargs: Any):
            with self._phase("eval"):
                return super().evaluate(*args, **kwargs)

        def _save_checkpoint(self, *args: Any, **kwargs: Any):
            # Free disk first (what is free, what the save needs), and a failed save named with its
            # checkpoint, file and cause (`pipeline.training.checkpoints`).
            from pathlib import Path

            from pipeline.training.checkpoints import check_free_disk, checkpoint_bytes, save_error
            from pipeline.training.peak_memory import is_out_of_memory

            folder = Path(self.args.output_dir) / f"checkpoint-{self.state.global_step}"
            trainable = sum(p.numel() for p in self.model.parameters() if p.requires_grad)
            check_free_disk(self.args.output_dir, checkpoint_bytes(self.args.output_dir, trainable), f"`{folder.name}`")
            with self._phase("save"):
                try:
                    return super()._save_checkpoint(*args, **kwargs)
                except Exception as error:  # noqa: BLE001 - translated, the cause chained
                    if is_out_of_memory(error):
                        raise
                    raise save_error(folder, error) from error

        def _read_checkpoint(self, method: str, what: str, checkpoint: Any, *args: Any, **kwargs: Any):
            """`super().method(checkpoint, ...)` in the `resume` phase, its failure named with the
            checkpoint, the file and the cause."""
            from pipeline.training.checkpoints import load_error
            from pipeline.training.peak_memory import is_out_of_memory

            with self._phase("resume"):
                try:
                    return getattr(super(), method)(checkpoint, *args, **kwargs)
                except Exception as error:  # noqa: BLE001 - translated, the cause chained
                    if checkpoint is None or is_out_of_memory(error):
                        raise
                    raise load_error(checkpoint, what, error) from error

        def _load_from_checkpoint(self, resume_from_checkpoint: Any, *args: Any, **kwargs: Any):
            return self._read_checkpoint("_load_from_checkpoint", "the adapter weights", resume_from_checkpoint, *args, **kwargs)

        def _load_optimizer_and_scheduler(self, checkpoint: Any, *args: Any, **kwargs: Any):
            return self._read_checkpoint("_load_optimizer_and_scheduler", "`optimizer.pt` / `scheduler.pt`", checkpoint,
                                         *args, **kwargs)

        def _load_rng_state(self, checkpoint: Any, *args: Any, **kwargs: Any):
            return self._read_checkpoint("_load_rng_state", "the random number generator states (`rng_state*.pth`)",
                                         checkpoint, *args, **kwargs)

    return AnswerLossTrainer


def tensorboard_callback(log_dir: Path, purge_step: int | None = None):
    """A `transformers.integrations.TensorBoardCallback` writing event files into `log_dir`.

    Every value the Trainer logs (train/loss, train/learning_rate, train/grad_norm, eval/loss, ...)
    becomes a scalar at its optimizer step. `purge_step`: on resume from checkpoint N, N + 1, so
    events logged after the checkpoint by an interrupted process are hidden (they run again). View
    with `tensorboard --logdir WS/runs` (one curve per run).
    """
    from torch.utils.tensorboard import SummaryWriter
    from transformers.integrations import TensorBoardCallback

    Path(log_dir).mkdir(parents=True, exist_ok=True)
    return TensorBoardCallback(SummaryWriter(log_dir=str(log_dir), purge_step=purge_step))
