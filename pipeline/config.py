"""Training settings: one dataclass shared by `train`, `estimate` and the app's widgets.

The command line flags (`add_train_arguments`), the JSON in `WS/runs/NAME/config.json` and the
Gradio widget defaults are all derived from `TrainConfig`, so they cannot drift apart.
This module does not import torch.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import platform
import sys
from dataclasses import dataclass, fields
from typing import Any

from pipeline.errors import ConfigError, in_words
from pipeline.model.catalog import DEFAULT_MODEL, KNOWN_MODELS  # noqa: F401 - KNOWN_MODELS: what the app and the CLI offer

DEVICES = ("auto", "cuda", "mps", "cpu")
QUANTIZATIONS = ("4bit", "8bit", "none")
LORA_TARGETS = ("language", "language+audio")
OPTIMIZERS = ("adamw", "adamw_8bit", "adafactor")
FINETUNING_TYPES = ("lora", "full")
LR_SCHEDULES = ("linear", "cosine", "constant")
SETTING_CHOICES = {
    "device": DEVICES,
    "quantization": QUANTIZATIONS,
    "lora_targets": LORA_TARGETS,
    "optimizer": OPTIMIZERS,
    "lr_schedule": LR_SCHEDULES,
    "finetuning_type": FINETUNING_TYPES,
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
    host RAM; each step copies only the batch's rows to the GPU. Ignored on CPU and MPS. The loader
    places the table in host RAM directly (it never reaches the GPU)."""
    quantize_audio_encoder: bool = False
    """With `--quantization 4bit|8bit` and `--lora-targets language`, quantize the frozen audio encoder's
    Linear layers too (NF4 / int8): 1.27 -> ~0.35 GiB on E2B, at some speed cost (`benchmarks/audio_nf4_speed.py`)."""
    low_memory_heap: bool = False
    """CPU only: keep the process's memory to its live tensors (glibc's mmap threshold pinned at 64 KiB,
    `pipeline.host.free_heap.pin_mmap_threshold`), so the freed heap glibc would keep resident
    (`allocator_retention`, ~0.5-2 GiB) is not counted. Slower steps: about twice as long on a 2-core
    AMD EPYC VM. Ignored on CUDA and MPS, and on a C library other than glibc."""
    finetuning_type: str = "lora"
    """`lora` (train adapters; the only kind `train` runs) or `full` (every weight trainable: estimated
    only, to answer "would a full fine-tune fit?"; LLaMA-Factory's term)."""
    optimizer: str = "adamw"
    """`adamw` (fp32 moments, 8 bytes/param), `adamw_8bit` (bitsandbytes, 2 bytes/param), `adafactor` (factored)."""
    eval_steps: int = 50
    """Evaluate on the eval split every N optimizer steps (0 disables)."""
    save_steps: int = 50
    """Save a resumable checkpoint every N optimizer steps."""
    keep_best: bool = False
    """At every evaluation (`eval_steps`), also answer `judge_clips` eval clips by generation and keep the
    checkpoint whose answers agree best with the experts (the lowest eval loss where the eval split has
    no expert scores) as the run's adapter (`pipeline.training.best_checkpoint`). Costs `judge_clips`
    answers per evaluation; off, the adapter is the last step's."""
    judge_clips: int = 8
    """With `keep_best`: how many eval clips (read-aloud, with expert scores; the first by id) are answered
    at each evaluation. More clips judge more surely and take longer (one answer each)."""
    early_stopping_patience: int = 0
    """With `keep_best`: stop after this many evaluations in a row without improvement (0: never)."""
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
        if not isinstance(self.judge_clips, int) or isinstance(self.judge_clips, bool) or self.judge_clips < 1:
            raise ConfigError(f"`--judge-clips` must be a whole number >= 1, got {self.judge_clips!r}.")
        if not isinstance(self.early_stopping_patience, int) or self.early_stopping_patience < 0:
            raise ConfigError(
                f"`--early-stopping-patience` must be a whole number >= 0 (0: never stop early), got {self.early_stopping_patience!r}.")
        if self.early_stopping_patience and not self.keep_best:
            raise ConfigError(
                f"`--early-stopping-patience {self.early_stopping_patience}` stops when the kept checkpoint stops "
                "improving, so it needs `--keep-best`; add --keep-best or set the patience to 0.")
        if self.keep_best and self.eval_steps == 0:
            raise ConfigError("`--keep-best` judges the tutor at every evaluation, but `--eval-steps 0` turns evaluation "
                              "off; set --eval-steps to N >= 1 (e.g. 50), or drop --keep-best.")
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
        if self.finetuning_type == "full" and self.quantization != "none":
            raise ConfigError(
                f"`--finetuning-type full` trains every weight, so the weights cannot be quantized; got "
                f"`--quantization {self.quantization}`. Use `--quantization none`, or `--finetuning-type lora`.")
        if self.quantize_audio_encoder and self.quantization == "none":
            raise ConfigError(
                "`--quantize-audio-encoder` needs `--quantization 4bit` or `8bit` (the base weights are quantized with "
                "it), got `--quantization none`. Pick 4bit, or drop --quantize-audio-encoder.")
        if self.quantize_audio_encoder and self.lora_targets != "language":
            raise ConfigError(
                f"`--quantize-audio-encoder` applies to a frozen audio encoder (`--lora-targets language`), got "
                f"`--lora-targets {self.lora_targets}`: with LoRA in the encoder keep its weights bf16. Use "
                "--lora-targets language, or drop --quantize-audio-encoder.")
        if not self.model or not str(self.model).strip():
            raise ConfigError("`--model` is empty; give a hub id such as google/gemma-3n-E2B-it or a local folder.")

    def load_options(self) -> dict[str, Any]:
        """The settings `pipeline.model.loading.load_model` takes: quantization, vision_tower, ple_on_cpu,
        quantize_audio_encoder, low_memory_heap."""
        return {"quantization": self.quantization, "vision_tower": self.vision_tower, "ple_on_cpu": self.ple_on_cpu,
                "quantize_audio_encoder": self.quantize_audio_encoder, "low_memory_heap": self.low_memory_heap}

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

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "TrainConfig":
        """Build from a dict (e.g. a run's config.json); unknown keys raise `ConfigError`."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ConfigError(f"Unknown training settings {in_words(unknown)}; known settings are {in_words(sorted(known), limit=100)}.")
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


DEFAULT_QUANTIZATION_REASON = {
    "cuda": "4-bit NF4 is the default on CUDA: it stores the text decoder in a quarter of the bf16 bytes "
            "(E2B: 3.43 -> 0.89 GiB), and the GPU holds every weight byte it loads.",
    "mps": "bf16 (no quantization) is the default on Apple MPS: bitsandbytes 4-bit is experimental there "
           "(no public training report), so 4-bit is opt-in.",
    "cpu": "No quantization is the default on CPU: the weights stay in the precision this CPU computes in "
           "(bf16 where it has native bf16, else float32: see the precision line). On a CPU with native bf16 its "
           "steps were faster than NF4's (full-size E2B, random weights, 512 tokens and a 30 s clip: 37.7 s against "
           "41.7 s per step); in float32 the weights take twice the memory. NF4 peaks lower (6.91 against 9.18 GiB "
           "for the bf16 whole run), so the Memory tab suggests 4-bit first when the default does not fit.",
}
"""Why `default_quantization` picks what it picks, per device (shown by the app and docs/cli.md)."""




def refuse_full_finetuning(finetuning_type: str) -> None:
    """Raise `ConfigError` unless `finetuning_type` is lora: `train` fine-tunes LoRA adapters only (a full
    fine-tune is sized by `python -m pipeline estimate --finetuning-type full` and `plan`, never run)."""
    if finetuning_type != "lora":
        raise ConfigError(
            f"`--finetuning-type {finetuning_type}`: this trainer fine-tunes LoRA adapters only. A full fine-tune "
            "is something `python -m pipeline estimate --finetuning-type full` and `python -m pipeline plan` can "
            "size for you, not run. Use `--finetuning-type lora` (the default).")


def likely_device() -> str:
    """The device `--device auto` will most likely train on, guessed without importing torch (for the
    app's defaults at start-up): "cuda" when an NVIDIA driver is loaded, "mps" on Apple silicon, else
    "cpu". The training code resolves the real device with torch (`pipeline.model.loading.resolve_device`)."""
    if os.path.exists("/proc/driver/nvidia/version"):
        return "cuda"
    if sys.platform == "darwin" and platform.machine() == "arm64":
        return "mps"
    return "cpu"


def default_quantization(device: str) -> str:
    """The quantization used when none is given, on `device`: "4bit" (NF4) on CUDA, "none" (bf16) on
    CPU and Apple MPS; `DEFAULT_QUANTIZATION_REASON` says why for each. A default must lower the
    whole-run peak on the device it is the default for; on CPU bf16 is the default for its speed and 4-bit is
    the first suggestion when bf16 does not fit (`DEFAULT_QUANTIZATION_REASON`)."""
    return "4bit" if device == "cuda" else "none"


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
