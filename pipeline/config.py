"""Training settings: one dataclass shared by `train`, `estimate` and the app's widgets.

The command line flags (`add_train_arguments`), the JSON in `WS/runs/NAME/config.json` and the
Gradio widget defaults are all derived from `TrainConfig`, so they cannot drift apart.
This module does not import torch.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from dataclasses import dataclass, field, fields
from typing import Any

from pipeline.errors import ConfigError

DEFAULT_MODEL = "google/gemma-3n-E2B-it"
KNOWN_MODELS = ("google/gemma-3n-E2B-it", "google/gemma-3n-E4B-it")
DEVICES = ("auto", "cuda", "mps", "cpu")
QUANTIZATIONS = ("4bit", "8bit", "none")
LORA_TARGETS = ("language", "language+audio")
OPTIMIZERS = ("adamw", "adamw_8bit", "adafactor")
LR_SCHEDULES = ("linear", "cosine", "constant")
SETTING_CHOICES = {
    "device": DEVICES,
    "quantization": QUANTIZATIONS,
    "lora_targets": LORA_TARGETS,
    "optimizer": OPTIMIZERS,
    "lr_schedule": LR_SCHEDULES,
}
"""The settings that take one of a fixed set of values, with those values (CLI choices, app dropdowns)."""


@dataclass
class TrainConfig:
    """Every setting of a LoRA fine-tuning run of Gemma 3n (and of its memory estimate).

    Units are in the names or docstrings. `validate()` (called by `__post_init__`) raises
    `ConfigError` naming the flag, the rule, the value and the fix.
    """

    model: str = DEFAULT_MODEL
    """Hub id (`google/gemma-3n-E2B-it`) or local folder holding config.json + processor files."""
    device: str = "auto"
    """`auto` picks CUDA, then Apple MPS, then CPU."""
    quantization: str = "4bit"
    """Base weights: `4bit` NF4 (bitsandbytes, double quant, bf16 compute), `8bit`, or `none` (bf16/fp32)."""
    lora_rank: int = 16
    """LoRA rank r: trainable params per wrapped Linear = r * (in + out)."""
    lora_alpha: int = 32
    """LoRA alpha; the update is scaled by alpha / r."""
    lora_dropout: float = 0.05
    """Dropout on the LoRA input; costs about a third more activation memory per layer when > 0."""
    lora_targets: str = "language"
    """`language`: attention+MLP projections of the text decoder; `language+audio` adds the audio encoder's."""
    batch_size: int = 1
    """Micro-batch size (rows per forward pass). Memory grows linearly with it."""
    grad_accum: int = 4
    """Gradient accumulation steps; effective batch = batch_size * grad_accum at no extra memory."""
    learning_rate: float = 2e-4
    """Peak learning rate of the LoRA parameters."""
    lr_schedule: str = "linear"
    """Learning-rate schedule after warmup: linear, cosine or constant."""
    warmup_ratio: float = 0.03
    """Fraction of the optimizer steps spent warming the learning rate up from 0."""
    epochs: float = 3.0
    """Passes over the train split (ignored when max_steps > 0)."""
    max_steps: int = -1
    """Optimizer steps to run; -1 means use `epochs`."""
    max_length: int = 512
    """Longest row in tokens (text tokens + ~192 audio positions per clip); longer rows are excluded, never truncated."""
    gradient_checkpointing: bool = True
    """Recompute activations in backward (use_reentrant=False): ~13x less activation memory, ~30 % slower."""
    vision_tower: bool = True
    """Load Gemma 3n's vision tower (MobileNetV5, 294 M parameters: 0.55 GiB in bf16 on E2B and E4B).
    The tutor never sees images, so `--no-vision-tower` frees it after loading at no cost."""
    ple_on_cpu: bool = False
    """CUDA only: keep the per-layer embedding table (262,144 x 30 x 256 on E2B: 3.75 GiB in bf16) in
    host RAM; each step copies only the batch's rows to the GPU. Ignored on CPU and MPS."""
    optimizer: str = "adamw"
    """`adamw` (fp32 moments, 8 bytes/param), `adamw_8bit` (bitsandbytes, 2 bytes/param), `adafactor` (factored)."""
    eval_steps: int = 50
    """Evaluate on the eval split every N optimizer steps (0 disables)."""
    save_steps: int = 50
    """Save a resumable checkpoint every N optimizer steps."""
    logging_steps: int = 1
    """Append a line to progress.jsonl every N optimizer steps."""
    seed: int = 42
    """Seed for data order, LoRA init and dropout: the same seed repeats the same run."""
    weight_decay: float = 0.0
    """AdamW weight decay on LoRA parameters."""
    max_grad_norm: float = 1.0
    """Gradient clipping threshold (global L2 norm)."""

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Raise `ConfigError` for any out-of-range setting."""
        for name, allowed in SETTING_CHOICES.items():
            value = getattr(self, name)
            if value not in allowed:
                raise ConfigError(
                    f"`--{_flag(name)}` must be one of {', '.join(allowed)}, got {value!r}."
                )
        positive_ints = ("lora_rank", "lora_alpha", "batch_size", "grad_accum", "max_length", "logging_steps")
        for name in positive_ints:
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(f"`--{_flag(name)}` must be a whole number >= 1, got {value!r}.")
        for name in ("eval_steps", "save_steps"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 0:
                raise ConfigError(f"`--{_flag(name)}` must be a whole number >= 0 (0 disables), got {value!r}.")
        if not isinstance(self.max_steps, int) or (self.max_steps < 1 and self.max_steps != -1):
            raise ConfigError(f"`--max-steps` must be >= 1, or -1 to use --epochs, got {self.max_steps!r}.")
        if self.max_steps == -1 and not self.epochs > 0:
            raise ConfigError(f"`--epochs` must be > 0 when --max-steps is -1, got {self.epochs!r}.")
        if not 0.0 <= self.lora_dropout < 1.0:
            raise ConfigError(f"`--lora-dropout` must be in [0, 1), got {self.lora_dropout!r}.")
        if not 0.0 < self.learning_rate < 1.0:
            raise ConfigError(
                f"`--learning-rate` must be in (0, 1), got {self.learning_rate!r}; LoRA typically uses 1e-4 to 3e-4."
            )
        if not 0.0 <= self.warmup_ratio < 1.0:
            raise ConfigError(f"`--warmup-ratio` must be in [0, 1), got {self.warmup_ratio!r}.")
        if self.max_length < 256:
            raise ConfigError(
                f"`--max-length` must be at least 256 tokens (each clip alone takes ~192), got {self.max_length}."
            )
        if not self.model or not str(self.model).strip():
            raise ConfigError("`--model` is empty; give a hub id such as google/gemma-3n-E2B-it or a local folder.")

    @property
    def effective_batch_size(self) -> int:
        """Rows per optimizer step: batch_size * grad_accum."""
        return self.batch_size * self.grad_accum

    def replace(self, **changes: Any) -> "TrainConfig":
        """A validated copy with `changes` applied."""
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        """Plain dict of every field (JSON-serialisable)."""
        return dataclasses.asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "TrainConfig":
        """Build from a dict (e.g. a run's config.json); unknown keys raise `ConfigError`."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ConfigError(f"Unknown training settings {unknown}; known settings are {sorted(known)}.")
        return cls(**data)

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> "TrainConfig":
        """Build from parsed `add_train_arguments` flags (flags left unset keep the defaults)."""
        values = {}
        for f in fields(cls):
            value = getattr(args, f.name, None)
            if value is not None:
                values[f.name] = value
        return cls(**values)


def default_quantization(device: str) -> str:
    """The quantization offered by default on `device`: "4bit" (NF4) on CUDA and CPU, "none" on MPS.

    On Apple MPS bitsandbytes 4-bit is experimental (no public training report seen), so bf16 LoRA
    is the default there and 4-bit is opt-in.
    """
    return "none" if device == "mps" else "4bit"


def _flag(name: str) -> str:
    return name.replace("_", "-")


def add_train_arguments(parser: argparse.ArgumentParser) -> None:
    """Add one `--flag` per `TrainConfig` field (same names in `train`, `estimate` and the app).

    Defaults are left as None so `TrainConfig.from_args` fills them from the dataclass; booleans get
    `--x / --no-x` pairs.
    """
    defaults = TrainConfig()
    for f in fields(TrainConfig):
        default = getattr(defaults, f.name)
        help_text = f"(default: {default})"
        if isinstance(default, bool):
            parser.add_argument(
                f"--{_flag(f.name)}", dest=f.name, action=argparse.BooleanOptionalAction, default=None, help=help_text
            )
        else:
            parser.add_argument(
                f"--{_flag(f.name)}",
                dest=f.name,
                type=type(default),
                choices=SETTING_CHOICES.get(f.name),
                default=None,
                help=help_text,
            )
