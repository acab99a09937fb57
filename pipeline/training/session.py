"""What a run loads once, and the Trainer built on it: the processor, the model with LoRA, the
datasets (the workspace's build or a portable Parquet folder; every row checked, rows longer than
`--max-length` left out, never truncated), the collator, and `transformers.TrainingArguments` for the
run's settings (`training_arguments`).

`pipeline.training.train` trains with it (`train`, `run_probe_step`), the keep-best callback answers
with its model (`pipeline.training.best_checkpoint`) and the synthetic probe builds the same Trainer
(`pipeline.training.probe`). This module writes nothing and runs no step.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from pipeline.config import TrainConfig
from pipeline.errors import ConfigError, TrainingError
from pipeline.training.peak_memory import PhaseMemory
from pipeline.training.trainer_setup import LR_SCHEDULERS
from pipeline.training.trainer_setup import answer_loss_trainer_class as _answer_loss_trainer_class
from pipeline.training.worst_case import worst_case
from pipeline.units import plural
from pipeline.workspace import Workspace

OPTIMIZERS = {"adamw": "adamw_torch", "adamw_8bit": "adamw_bnb_8bit", "adafactor": "adafactor"}
"""`--optimizer` -> `transformers.TrainingArguments.optim`."""

log = logging.getLogger("pipeline.training.train")
"""The trainer's logger: what loading skips is a line of the run's train.log (`pipeline.training.run_log`)."""


def training_arguments(config: TrainConfig, output_dir: Path, device: str, *, has_eval: bool):
    """`transformers.TrainingArguments` for `config` (no autocast: weights are already bf16/fp32,
    LoRA weights fp32; gradient checkpointing is turned on by `pipeline.model.loading.attach_lora`)."""
    from transformers import TrainingArguments

    if config.optimizer == "adamw_8bit":
        try:
            import bitsandbytes  # noqa: F401
        except ImportError as error:
            raise ConfigError("`--optimizer adamw_8bit` needs bitsandbytes; install it or use `--optimizer adamw`.") from error
    eval_on = has_eval and config.eval_steps > 0
    return TrainingArguments(
        output_dir=str(output_dir),
        per_device_train_batch_size=config.batch_size,
        per_device_eval_batch_size=config.batch_size,
        gradient_accumulation_steps=config.grad_accum,
        learning_rate=config.learning_rate,
        lr_scheduler_type=LR_SCHEDULERS[config.lr_schedule],
        warmup_steps=config.warmup_ratio,
        num_train_epochs=config.epochs,
        max_steps=config.max_steps,
        weight_decay=config.weight_decay,
        max_grad_norm=config.max_grad_norm,
        optim=OPTIMIZERS[config.optimizer],
        logging_strategy="steps",
        logging_steps=config.logging_steps,
        logging_first_step=True,
        save_strategy="steps" if config.save_steps > 0 else "no",
        save_steps=config.save_steps if config.save_steps > 0 else 500,
        save_total_limit=2,
        eval_strategy="steps" if eval_on else "no",
        eval_steps=config.eval_steps if eval_on else None,
        prediction_loss_only=True,
        seed=config.seed,
        data_seed=config.seed,
        activation_checkpointing=False,
        remove_unused_columns=False,
        label_names=["labels"],
        report_to=[],
        disable_tqdm=True,
        dataloader_num_workers=0,
        dataloader_pin_memory=False,
        use_cpu=device == "cpu",
        ddp_find_unused_parameters=False,  # under DDP every LoRA weight gets a gradient (KV-shared layers have no k/v_proj)
        bf16=False,
        fp16=False,
    )


def _without_rows(dataset, row_ids: set[str]):
    """`dataset` without the rows whose `id` is in `row_ids` (an in-memory index, nothing written
    to the dataset folder); None when no row is left."""
    keep = [i for i, row_id in enumerate(dataset["id"]) if row_id not in row_ids]
    return dataset.select(keep) if keep else None


class Session:
    """Everything a run needs, loaded once: processor, model with LoRA, datasets (the workspace's, or
    a portable Parquet folder `dataset_dir`, `pipeline.data.portable`), collator."""

    def __init__(self, config: TrainConfig, ws: Workspace, dataset_dir: Path | None = None):
        from pipeline.training.collate import ChatCollator, check_rows
        from pipeline.data.dataset import load_built_dataset
        from pipeline.data.portable import load_portable_dataset
        from pipeline.model.base_identity import describe_base
        from pipeline.model.loading import attach_lora, load_model, load_processor, resolve_device

        self.config = config
        self.device = resolve_device(config.device)
        data = load_portable_dataset(dataset_dir) if dataset_dir is not None else load_built_dataset(ws)
        if "train" not in data or len(data["train"]) == 0:
            raise TrainingError(f"The dataset in {dataset_dir or ws.dataset_dir} has no train rows; add samples and rebuild it.")
        self.train_data = data["train"]
        self.eval_data = data["eval"] if "eval" in data and len(data["eval"]) > 0 else None
        self.processor = load_processor(config.model)
        # the text, and each clip's length where the build kept it (a Gemma 4 clip's tokens grow with it): no audio decoded
        text_columns = [c for c in ("id", "kind", "target_text", "prompt", "feedback", "turns", "clip_seconds")
                        if c in self.train_data.column_names]
        rows = list(self.train_data.select_columns(text_columns))
        if self.eval_data is not None:
            rows += list(self.eval_data.select_columns(text_columns))
        problems = check_rows(self.processor, rows, max_length=config.max_length)
        too_long = {p["id"] for p in problems if p.get("too_long")}
        problems = [p for p in problems if not p.get("too_long")]
        if problems:
            listed = "; ".join(f"{p['id']}: {p['reason']}" for p in problems[:5])
            raise TrainingError(
                f"{len(problems)} dataset rows cannot be trained on ({listed}{'; ...' if len(problems) > 5 else ''}). "
                "Fix or delete those samples and rebuild the dataset."
            )
        self.skipped_rows = sorted(too_long)
        if too_long:  # excluded, never truncated (the memory estimate counts them the same way)
            self.train_data = _without_rows(self.train_data, too_long)
            if self.eval_data is not None:
                self.eval_data = _without_rows(self.eval_data, too_long) or None
            log.info("Skipping %s longer than --max-length %d: %s", plural(len(too_long), "row"), config.max_length,
                     ", ".join(self.skipped_rows[:10]) + (" ..." if len(too_long) > 10 else ""))
            if self.train_data is None:
                raise TrainingError(
                    f"`--max-length {config.max_length}` excludes every train row; raise it (see `python -m pipeline "
                    "estimate` for the longest row) or rebuild the dataset.")
        self.worst = worst_case(self.train_data, config.batch_size, self.processor, config.max_length)
        model, self.quantization = load_model(config.model, device=self.device, **config.load_options())
        self.base_identity = describe_base(model, config.model)  # recorded with the run and its adapter
        self.model, self.lora = attach_lora(model, config)
        self.collator = ChatCollator(self.processor, max_length=config.max_length)

    def trainer(self, output_dir: Path, callbacks: list, memory: PhaseMemory | None = None) -> Any:
        from transformers.trainer_callback import PrinterCallback

        args = training_arguments(self.config, output_dir, self.device, has_eval=self.eval_data is not None)
        trainer = _answer_loss_trainer_class()(
            model=self.model,
            args=args,
            train_dataset=self.train_data,
            eval_dataset=self.eval_data if args.eval_strategy != "no" else None,
            data_collator=self.collator,
            callbacks=callbacks,
        )
        trainer.remove_callback(PrinterCallback)  # it prints log dicts to stdout; ProgressCallback logs instead
        trainer.memory = memory
        return trainer
