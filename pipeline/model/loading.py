"""Load a Gemma 3n or Gemma 4 model (processor, quantized base model, LoRA adapters): the one loader; the
classes and module paths are the family's (`pipeline.model.catalog.family_for`).

Public functions:
- `resolve_device(name)`: "auto" -> "cuda", then "mps", then "cpu".
- `compute_dtype(device)`: the torch dtype of `pipeline.calibration.precision.compute_dtype_name` (bf16 where the
  device runs it fast, else fp32; never fp16), fp32 on a GPU without bf16.
- `load_processor(model_id)`, `load_model(model_id, device=, quantization=, vision_tower=, ple_on_cpu=,
  quantize_audio_encoder=, low_memory_heap=)`; `load_kwargs` (its `from_pretrained` arguments: the device map of
  `pipeline.model.placement`, the quantization config and skip list).
- `drop_vision_tower(model)`, `keep_per_layer_embeddings_on_host(model)`: the two placement
  settings the memory model's "make it fit" search may offer (`TrainConfig.vision_tower`,
  `TrainConfig.ple_on_cpu`).
- `attach_lora(model, config)` -> (PeftModel, LoraReport); `load_adapter(model, adapter_dir)`;
  `checkpoint_audio_encoder_blocks(model)` (gradient checkpointing of the conformer with audio LoRA).

Errors a person can act on (not logged in, gated license, offline with nothing cached, missing
`timm`, not enough disk, a folder without a checkpoint) become `ModelLoadError` with the fix
(`pipeline.model.hub`).

This module deliberately does not call `peft.prepare_model_for_kbit_training`: it upcasts every
non-quantized weight to fp32 (+7 GB on E2B; FIELD_NOTES "Quantization"). We freeze the base, turn
on gradient checkpointing with `use_reentrant=False` and call `enable_input_require_grads()`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from pipeline.errors import ConfigError, DatasetError, ModelLoadError, in_words, shorten
from pipeline.model.hub import (
    check_disk_for_download,
    check_local_folder,
    from_pretrained_cached_first,
    is_local_model,
    translate_load_errors,
)
from pipeline.model.catalog import DEFAULT_FAMILY, family_for, model_family
from pipeline.model.family import ModelFamily
from pipeline.units import format_bytes
from pipeline.model.placement import (  # noqa: F401 - HostEmbedding, drop_vision_tower: part of this module's API
    HostEmbedding,
    _tensor_bytes,
    drop_vision_tower,
    empty_model,
    host_modules,
    keep_per_layer_embeddings_on_host,
    placement_device_map,
    settle_placements,
)


class _QuietBnbKernelsNotice(logging.Filter):
    """Drop bitsandbytes' "Failed to load CPU gemm_4bit_forward from kernels-community" warning.

    bitsandbytes 0.50 (`backends/cpu/ops.py`), on a CPU with AVX512-BF16, tries to fetch an optional
    faster 4-bit kernel from the hub through the `kernels` package at import and warns when it
    cannot; its own slower kernel is then used and results are correct. Only that one record is
    dropped; every other bitsandbytes warning still shows.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("Failed to load CPU gemm_4bit_forward from kernels-community")


class _QuietInt8CastNotice(logging.Filter):
    """Drop bitsandbytes' "MatMul8bitLt: inputs will be cast from ... to float16" warning, logged on
    every int8 matmul (about 90 times in a 2-step run of the tiny model). `load_model` states it once
    in the quantization report's warnings instead."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("MatMul8bitLt: inputs will be cast from")


_BNB_CPU_LOGGER = "bitsandbytes.backends.cpu.ops"
_BNB_AUTOGRAD_LOGGER = "bitsandbytes.autograd._functions"
for _logger_name, _filter_class in ((_BNB_CPU_LOGGER, _QuietBnbKernelsNotice), (_BNB_AUTOGRAD_LOGGER, _QuietInt8CastNotice)):
    if not any(isinstance(f, _filter_class) for f in logging.getLogger(_logger_name).filters):
        logging.getLogger(_logger_name).addFilter(_filter_class())

def resolve_device(name: str = "auto") -> str:
    """Return "cuda", "mps" or "cpu" for `name` in auto|cuda|mps|cpu.

    `auto` prefers CUDA, then Apple MPS, then CPU.

    Raises:
        ConfigError: `name` is unknown, or names a device this machine does not have.
    """
    name = (name or "auto").lower()
    if name == "auto":
        if torch.cuda.is_available():
            return "cuda"
        if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
            return "mps"
        return "cpu"
    if name == "cuda" and not torch.cuda.is_available():
        raise ConfigError("`--device cuda` was asked for but no CUDA GPU is visible; use `--device auto` or `cpu`.")
    if name == "mps" and not (getattr(torch.backends, "mps", None) and torch.backends.mps.is_available()):
        raise ConfigError("`--device mps` was asked for but Apple MPS is not available; use `--device auto` or `cpu`.")
    if name not in ("cuda", "mps", "cpu"):
        raise ConfigError(f"`--device` must be one of auto, cuda, mps, cpu, got {name!r}.")
    return name


def compute_dtype(device: str) -> torch.dtype:
    """The dtype of the unquantized weights and the activations on `device`, as a torch dtype: the one
    decision the memory estimate prices too (`pipeline.calibration.precision.compute_dtype_name`: bf16
    where the CPU has native bf16 and this machine's timed check confirms it, on MPS from macOS 14,
    else fp32; `TUTOR_COMPUTE_DTYPE` overrides); on CUDA, fp32 where the GPU has no bf16
    (`torch.cuda.is_bf16_supported()`: before Ampere), which the torch-free decision cannot ask.
    Never fp16: it overflows in Gemma 3n's activations (Unsloth's Gemma 3n notes; FIELD_NOTES "dtype")."""
    from pipeline.calibration.precision import compute_dtype_name  # noqa: PLC0415 - torch-free

    name = compute_dtype_name(device)
    if device == "cuda" and name == "bfloat16" and not torch.cuda.is_bf16_supported():
        name = "float32"
    return torch.bfloat16 if name == "bfloat16" else torch.float32


def load_processor(model_id: str):
    """Load the processor (`Gemma3nProcessor` / `Gemma4Processor`: tokenizer + chat template + audio feature
    extractor) of `model_id`:
    the one loader of processors (the dataset build, the trainer, inference and export all call it).

    Args:
        model_id: hub id (e.g. "google/gemma-3n-E2B-it") or a local folder.

    Raises:
        ModelLoadError: missing folder/files, not logged in, gated, offline and not cached, no timm.
        DatasetError: the processor has no chat template (not an instruction-tuned checkpoint).
    """
    from transformers import AutoProcessor

    model_id = str(model_id)
    if is_local_model(model_id):
        check_local_folder(model_id)
    with translate_load_errors(model_id, "processor"):
        processor = from_pretrained_cached_first(AutoProcessor.from_pretrained, model_id)
    if not hasattr(processor, "feature_extractor") or not hasattr(processor.tokenizer, "audio_token_id"):
        raise ModelLoadError(
            f"`{model_id}` has no Gemma audio processor (got {type(processor).__name__}); use a Gemma 3n or "
            "Gemma 4 checkpoint such as google/gemma-3n-E2B-it or google/gemma-4-E2B-it."
        )
    if getattr(processor, "chat_template", None) is None:
        raise DatasetError(
            f"The processor of `{model_id}` has no chat template; use an instruction-tuned checkpoint "
            "such as google/gemma-3n-E2B-it or google/gemma-4-E2B-it."
        )
    return processor


@dataclass
class QuantizationReport:
    """What `load_model` did to the weights.

    `quantized_modules`: full paths of the Linear layers replaced by 4/8-bit bitsandbytes layers;
    `kept_modules`: Linear layers left in `dtype` (the skip list); `weight_bytes`: bytes of all
    parameters + buffers + quantization states (absmax) after loading; `warnings`: experimental paths.
    """

    method: str
    device: str
    dtype: str
    quantized_count: int
    kept_count: int
    weight_bytes: int
    quantized_modules: list[str] = field(default_factory=list)
    kept_modules: list[str] = field(default_factory=list)
    skip_patterns: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def summary(self) -> str:
        """One human line, e.g. "4bit-nf4 on cpu: 59 Linear layers quantized, 25 kept bf16; weights 2 MiB"
        (`pipeline.units.format_bytes`, as the estimate and the app print bytes)."""
        return (
            f"{self.method} on {self.device}: {self.quantized_count} Linear layers quantized, {self.kept_count} kept "
            f"{self.dtype}; weights {format_bytes(self.weight_bytes)}"
        )


def weight_bytes(model: torch.nn.Module) -> int:
    """Bytes of every parameter and buffer of `model`, plus bitsandbytes 4-bit quantization states."""
    total = 0
    seen = set()
    for tensor in list(model.parameters()) + list(model.buffers()):
        if id(tensor) in seen:
            continue
        seen.add(id(tensor))
        total += tensor.numel() * tensor.element_size()
        state = getattr(tensor, "quant_state", None)
        if state is not None:
            for name in ("absmax", "code"):
                value = getattr(state, name, None)
                if isinstance(value, torch.Tensor):
                    total += value.numel() * value.element_size()
            nested = getattr(state, "state2", None)
            if nested is not None and isinstance(getattr(nested, "absmax", None), torch.Tensor):
                total += nested.absmax.numel() * nested.absmax.element_size()
    return total


def quantization_skip_modules(method: str, *, quantize_audio_encoder: bool = False,
                              family: ModelFamily | None = None) -> list[str]:
    """The skip list for `method` (4bit / 8bit) of `family` (default: the default model's):
    `ModelFamily.quantization_skip_modules` (+ `int8_extra_skip_modules` for 8-bit), without the audio
    tower when `quantize_audio_encoder` (its Linear layers are then quantized too: the frozen encoder
    only runs forward, its conformer calls every Linear as a module)."""
    family = family or DEFAULT_FAMILY
    skip = [m for m in family.quantization_skip_modules
            if not (quantize_audio_encoder and m == family.audio_tower_module)]
    return skip + (list(family.int8_extra_skip_modules) if method == "8bit" else [])


def quantization_config(method: str, dtype: torch.dtype, *, quantize_audio_encoder: bool = False,
                        host_placements: bool = False, family: ModelFamily | None = None):
    """`BitsAndBytesConfig` for "4bit" (NF4, double quant, `dtype` compute) or "8bit"; None for "none".

    `quantize_audio_encoder`: quantize the audio encoder's Linear layers too (`quantization_skip_modules`).
    `host_placements`: the device map puts some modules in host RAM (`pipeline.model.placement`);
    transformers refuses such a map with bitsandbytes unless `llm_int8_enable_fp32_cpu_offload` is set
    (those modules, an embedding table and the vision tower, are never quantized anyway)."""
    from transformers import BitsAndBytesConfig

    if method == "none":
        return None
    skip = quantization_skip_modules(method, quantize_audio_encoder=quantize_audio_encoder, family=family)
    if method == "4bit":
        return BitsAndBytesConfig(
            load_in_4bit=True,
            bnb_4bit_quant_type="nf4",
            bnb_4bit_use_double_quant=True,
            bnb_4bit_compute_dtype=dtype,
            bnb_4bit_quant_storage=torch.uint8,
            llm_int8_skip_modules=skip,
            llm_int8_enable_fp32_cpu_offload=host_placements,
        )
    if method == "8bit":
        return BitsAndBytesConfig(load_in_8bit=True, llm_int8_skip_modules=skip,
                                  llm_int8_enable_fp32_cpu_offload=host_placements)
    raise ConfigError(f"`--quantization` must be one of 4bit, 8bit, none, got {method!r}.")


def load_kwargs(model_id: str, *, device: str, dtype: torch.dtype, quantization: str, vision_tower: bool = True,
                ple_on_cpu: bool = False, quantize_audio_encoder: bool = False) -> dict[str, Any]:
    """The `from_pretrained` keyword arguments `load_model` uses: dtype, the training attention (`training_attention`), the device map
    (`pipeline.model.placement.placement_device_map`: the per-layer table with `ple_on_cpu` on CUDA
    and a vision tower that is off go to host RAM, so they never reach the GPU) and the quantization
    config. Builds the model on the meta device only when some module goes to host RAM. Under a
    multi-process launcher the device is this process's GPU (`pipeline.host.distributed.placement`)."""
    from pipeline.host.distributed import placement  # cuda:LOCAL_RANK for one process per GPU

    target = placement(device)
    family = family_for(model_id)
    host = host_modules(device, ple_on_cpu=ple_on_cpu, vision_tower=vision_tower, family=family)
    device_map = placement_device_map(empty_model(model_id), target, host) if host else {"": target}
    kwargs: dict[str, Any] = {"dtype": dtype, "attn_implementation": training_attention(family.model_class().config_class),
                              "device_map": device_map}
    qconfig = quantization_config(quantization, dtype, quantize_audio_encoder=quantize_audio_encoder,
                                  host_placements=bool(host), family=family)
    if qconfig is not None:
        kwargs["quantization_config"] = qconfig
    return kwargs


TRAINING_ATTENTION = "eager"
"""The attention the training code uses (its memory estimate counts eager's probabilities,
`pipeline.memory.inputs.EstimateOptions`)."""


def training_attention(config_class: type) -> str | dict[str, str]:
    """The `attn_implementation` to load a model of `config_class` (a multimodal `...Config`) for training with:
    `TRAINING_ATTENTION` for every part, except a part that transformers builds as a `timm` model (Gemma 3n's
    vision tower, `TimmWrapperModel`), which always dispatches to PyTorch's scaled-dot-product attention itself:
    asked for eager, transformers warned "`attn_implementation='eager'` is not propagated to the wrapped `timm`
    model" into the teacher's training log; asked for `sdpa`, it is asked for what it does. A dict
    (sub-config name -> implementation, "" the top level) when a part differs, as `PreTrainedConfig` accepts."""
    from transformers import AutoModel, TimmWrapperModel  # noqa: PLC0415

    parts = dict(getattr(config_class, "sub_configs", None) or {})
    timm = []
    for name, sub in parts.items():
        try:
            built = AutoModel._model_mapping[sub]
        except (KeyError, ValueError):
            continue
        if isinstance(built, type) and issubclass(built, TimmWrapperModel):
            timm.append(name)
    if not timm:
        return TRAINING_ATTENTION
    return {"": TRAINING_ATTENTION, **{name: ("sdpa" if name in timm else TRAINING_ATTENTION) for name in parts}}


ANSWER_ATTENTION = "sdpa"
"""The attention a loaded tutor answers with: PyTorch's `scaled_dot_product_attention`, which reads the
grouped key/value heads without copying them (eager attention's `repeat_kv`) and skips the separate
softmax pass. On the mid-size stand-in on one CPU thread, a step of 8 answers took 0.12 s against
0.15-0.20 s eager (one alone 0.07 s either way; benchmarks/README.md, "A class at once"). Training
keeps eager attention (its memory estimate counts eager's probabilities)."""
ANSWER_ATTENTION_ENV = "TUTOR_ANSWER_ATTENTION"
"""Overrides `ANSWER_ATTENTION` (`eager` answers with the training's attention)."""


def use_answer_attention(model: torch.nn.Module) -> str | None:
    """Switch a loaded model that only answers (a tutor) to `ANSWER_ATTENTION` (or `$TUTOR_ANSWER_ATTENTION`);
    a peft `PeftModel` switches its base. Returns the attention now used, or None when the model cannot
    switch (it keeps its own: transformers' `set_attn_implementation` refused it).

    Raises ConfigError when `$TUTOR_ANSWER_ATTENTION` is neither `eager` nor `sdpa`."""
    wanted = os.environ.get(ANSWER_ATTENTION_ENV, "").strip() or ANSWER_ATTENTION
    if wanted not in ("eager", "sdpa"):
        raise ConfigError(f"`{ANSWER_ATTENTION_ENV}` must be eager or sdpa, got {wanted!r}; unset it for {ANSWER_ATTENTION}.")
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    if not hasattr(base, "set_attn_implementation"):
        return None
    try:
        base.set_attn_implementation(wanted)
    except (ValueError, ImportError) as error:
        logging.getLogger(__name__).info("answering with the model's own attention: %s", error)
        return None
    return wanted


def load_model(
    model_id: str, *, device: str = "auto", quantization: str = "4bit", vision_tower: bool = True,
    ple_on_cpu: bool = False, quantize_audio_encoder: bool = False, low_memory_heap: bool = False,
) -> tuple[torch.nn.Module, QuantizationReport]:
    """Load the family's model class (`Gemma3nForConditionalGeneration`, `Gemma4ForConditionalGeneration`) on
    `device`, quantized as asked, with eager attention.

    Args:
        model_id: hub id or local folder.
        device: auto|cuda|mps|cpu (see `resolve_device`).
        quantization: "4bit" (bitsandbytes NF4, double quant, bf16 compute), "8bit" (LLM.int8) or
            "none". The audio/vision towers, their embedders and `lm_head` are never quantized
            (`QUANTIZATION_SKIP_MODULES`). 4-bit on MPS is experimental (a warning is reported).
        vision_tower: False frees the vision tower after loading (`drop_vision_tower`); on a GPU it is
            loaded into host RAM first, so it never reaches the GPU (`load_kwargs`).
        ple_on_cpu: on CUDA, keep the per-layer embedding table in host RAM behind a `HostEmbedding`
            (`keep_per_layer_embeddings_on_host`); the device map loads it there directly, so it
            never reaches the GPU. Ignored on CPU and MPS.
        quantize_audio_encoder: with 4bit/8bit, quantize the frozen audio encoder's Linear layers too.
        low_memory_heap: on CPU, pin glibc's mmap threshold for the rest of the process before loading
            (`pipeline.host.free_heap.pin_mmap_threshold`): memory follows live tensors, steps are slower.

    Returns:
        `(model, report)`; the model is in eval mode with `use_cache` on.

    Raises:
        ModelLoadError: the checkpoint cannot be loaded (see `load_processor`), bitsandbytes is
            missing, or a quantization was asked for but quantized no Linear layer.
    """
    model_id = str(model_id)
    family = family_for(model_id)
    device = resolve_device(device)
    dtype = compute_dtype(device)
    report_warnings: list[str] = []
    if quantization != "none":
        try:
            import bitsandbytes  # noqa: F401
        except ImportError as error:
            raise ModelLoadError(
                f"`--quantization {quantization}` needs bitsandbytes: `pip install bitsandbytes`, or use "
                "`--quantization none`."
            ) from error
        if quantization == "8bit":
            report_warnings.append(
                "bitsandbytes' 8-bit matmul casts bf16 activations to fp16 internally (its own design); "
                "use --quantization 4bit or none if losses turn inf/nan."
            )
        if device == "mps":
            report_warnings.append(
                f"bitsandbytes {quantization} on Apple MPS is experimental; if training fails use --quantization none."
            )
    if is_local_model(model_id):
        check_local_folder(model_id)
    else:
        check_disk_for_download(model_id)
    kwargs = load_kwargs(model_id, device=device, dtype=dtype, quantization=quantization, vision_tower=vision_tower,
                         ple_on_cpu=ple_on_cpu, quantize_audio_encoder=quantize_audio_encoder)
    from pipeline.model.load_dtype import cast_floating_weights, checkpoint_torch_dtype

    cast_after_load = device == "cpu" and dtype == torch.float32 and checkpoint_torch_dtype(model_id) == torch.bfloat16
    if cast_after_load:  # load as stored (memory-mapped), then cast (cast_floating_weights)
        kwargs["dtype"] = torch.bfloat16
    from pipeline.host.free_heap import pin_mmap_threshold, releasing_free_heap_while

    pin_mmap_threshold(asked=low_memory_heap and device == "cpu")  # or TUTOR_PIN_MMAP_THRESHOLD=1: host memory follows live tensors
    free_heap_on_host = releasing_free_heap_while() if device == "cpu" else contextlib.nullcontext()
    with translate_load_errors(model_id, "model"), warnings.catch_warnings(), free_heap_on_host:
        # a placement map names buffers directly (placement_device_map); accelerate expects module names only
        warnings.filterwarnings("ignore", message=".*device_map keys do not match any submodules.*")
        model = from_pretrained_cached_first(family.model_class().from_pretrained, model_id, **kwargs)
    if len(set(kwargs["device_map"].values())) > 1:
        settle_placements(model)  # host modules back as plain host tensors, no dispatch hooks
    model.eval()
    if cast_after_load:
        cast_floating_weights(model, dtype)
    if device == "cpu":  # the bf16 source pages of quantized Linears would stay resident
        from pipeline.model.checkpoint_pages import release_checkpoint_pages
        from pipeline.host.free_heap import release_free_heap

        release_checkpoint_pages()
        release_free_heap()  # the quantizer's freed bf16 temporaries (pipeline.host.free_heap)
    if quantization == "4bit" and device == "cpu":
        disable_bnb_cpu_repacking(model)
    if not vision_tower:
        drop_vision_tower(model)
    if ple_on_cpu and device == "cuda":
        keep_per_layer_embeddings_on_host(model)
    skip = quantization_skip_modules(quantization, quantize_audio_encoder=quantize_audio_encoder, family=family)
    report = _quantization_report(model, quantization, device, dtype, report_warnings, skip)
    if quantization != "none" and report.quantized_count == 0:
        raise ModelLoadError(
            f"`--quantization {quantization}` quantized no Linear layer of `{model_id}` (skip patterns "
            f"{skip}); the weights would silently stay {report.dtype}. "
            "Use `--quantization none` or report this with your transformers/bitsandbytes versions."
        )
    return model, report


def _quantization_report(model, method, device, dtype, report_warnings, skip: list[str]) -> QuantizationReport:
    quantized, kept = [], []
    bnb_types: tuple = ()
    if method != "none":
        import bitsandbytes as bnb

        bnb_types = (bnb.nn.Linear4bit, bnb.nn.Linear8bitLt)
    for name, module in model.named_modules():
        if bnb_types and isinstance(module, bnb_types):
            quantized.append(name)
        elif isinstance(module, torch.nn.Linear):
            kept.append(name)
    return QuantizationReport(
        method={"4bit": "4bit-nf4", "8bit": "8bit", "none": "none"}[method],
        device=device,
        dtype=str(dtype).replace("torch.", ""),
        quantized_count=len(quantized),
        kept_count=len(kept),
        weight_bytes=weight_bytes(model),
        quantized_modules=quantized,
        kept_modules=kept,
        skip_patterns=skip if method != "none" else [],
        warnings=report_warnings,
    )


@dataclass
class LoraReport:
    """What `attach_lora` wrapped: LoRA layers per part ("language", "audio"), trainable parameters."""

    targets: str
    target_regex: str
    rank: int
    alpha: int
    dropout: float
    modules_per_part: dict[str, int]
    trainable_params: int
    total_params: int
    wrapped_modules: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def summary(self) -> str:
        parts = ", ".join(f"{n} {part}" for part, n in self.modules_per_part.items())
        return (
            f"LoRA r={self.rank} alpha={self.alpha} dropout={self.dropout}: wrapped {parts} modules; "
            f"{self.trainable_params:,} trainable of {self.total_params:,} parameters"
        )


def lora_target_regex(targets: str, family: ModelFamily | None = None) -> str:
    """Regex (matched by peft against full module paths) for `targets` = language | language+audio,
    from `family`'s LoRA target names (default: the default model's family)."""
    family = family or DEFAULT_FAMILY
    if targets == "language":
        return family.language_lora_regex
    if targets == "language+audio":
        return f"(?:{family.language_lora_regex})|(?:{family.audio_lora_regex})"
    raise ConfigError(f"`--lora-targets` must be language or language+audio, got {targets!r}.")


def count_lora_modules(model: torch.nn.Module) -> tuple[dict[str, int], list[str]]:
    """Count peft LoRA layers of `model` per part; returns ({"language": n, "audio": m}, names)."""
    from peft.tuners.lora import LoraLayer

    part_of = model_family(model).part_of
    counts = {"language": 0, "audio": 0}
    names = []
    for name, module in model.named_modules():
        if isinstance(module, LoraLayer):
            part = part_of(name)
            counts[part] = counts.get(part, 0) + 1
            names.append(name)
    return counts, names


def disable_bnb_cpu_repacking(model: torch.nn.Module) -> int:
    """Keep bitsandbytes 4-bit layers on one CPU kernel for training, evaluation and inference.

    bitsandbytes 0.50 `Linear4bit.forward`, on a CPU with AVX512-BF16, permanently repacks a
    weight into an inference-only layout the first time it runs in eval mode without grad. Found
    here: (1) afterwards even training-mode forwards use the inference kernel `gemv_4bit` (an
    evaluation during training would switch kernels); (2) layers whose out_features is not a
    multiple of 32 or whose in_features is below the 64-value block fail ("N must be divisible by
    block_n"); (3) its logits differ from the training kernel's by ~0.03, so a run's base and
    tuned logits would not be compared on the same kernel. Returns the number of layers changed.
    """
    changed = 0
    for module in model.modules():
        if getattr(module, "support_avx512bf16_for_cpu", False):
            module.support_avx512bf16_for_cpu = False
            changed += 1
    return changed


def prepare_for_training(model: torch.nn.Module, *, gradient_checkpointing: bool = True) -> torch.nn.Module:
    """Freeze every base weight, optionally turn on gradient checkpointing (use_reentrant=False).

    Also calls `enable_input_require_grads()` so checkpointed blocks see an input that requires
    grad, and turns the KV cache off (it is useless in training and conflicts with checkpointing).
    """
    for param in model.parameters():
        param.requires_grad_(False)
    disable_bnb_cpu_repacking(model)
    model.config.use_cache = False
    if hasattr(model.config, "text_config"):
        model.config.text_config.use_cache = False
    if gradient_checkpointing:
        # transformers 5.x name of `gradient_checkpointing_enable` (deprecated alias).
        model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
        model.enable_input_require_grads()
    return model


def checkpoint_audio_encoder_blocks(model: torch.nn.Module) -> int:
    """Gradient checkpointing (`torch.utils.checkpoint`, use_reentrant=False) for every conformer
    block of the audio encoder; returns the number of blocks wrapped (0 when already wrapped).

    transformers' `activation_checkpointing_enable` covers the text decoder layers only (they are
    `GradientCheckpointingLayer`s; `Gemma3nAudioConformerBlock` is a plain module), so with LoRA in
    the audio encoder every block would keep its saved tensors through the decoder's forward and
    backward: 2.8 GiB for a 30 s clip on E2B (FIELD_NOTES "Memory"). Wrapped, a block keeps only
    its input (frames x hidden) and is recomputed during backward. Only in training mode with
    gradients on; evaluation and generation run the plain forward.
    """
    from torch.utils.checkpoint import checkpoint

    wrapped = 0
    for block in model_family(model).audio_blocks(model):
        if getattr(block, "_checkpointed_forward", None) is not None:
            continue
        plain = block.forward

        def forward(*args, _plain=plain, _block=block, **kwargs):
            if _block.training and torch.is_grad_enabled():
                return checkpoint(_plain, *args, use_reentrant=False, **kwargs)
            return _plain(*args, **kwargs)

        block._checkpointed_forward = plain
        block.forward = forward
        wrapped += 1
    return wrapped


def attach_lora(model: torch.nn.Module, config) -> tuple[torch.nn.Module, LoraReport]:
    """Freeze the base and wrap the target projections with LoRA adapters (trainable, fp32).

    Args:
        model: a model from `load_model`.
        config: `TrainConfig` (uses lora_rank, lora_alpha, lora_dropout, lora_targets,
            gradient_checkpointing, seed).

    Returns:
        `(peft_model, report)` with the number of LoRA-wrapped modules per part. With gradient
        checkpointing and LoRA in the audio encoder, its blocks are checkpointed too
        (`checkpoint_audio_encoder_blocks`).

    Raises:
        TrainingError: a requested part (language, or audio with `language+audio`) got zero modules.
    """
    from peft import LoraConfig, get_peft_model

    from pipeline.errors import TrainingError

    prepare_for_training(model, gradient_checkpointing=config.gradient_checkpointing)
    regex = lora_target_regex(config.lora_targets, model_family(model))
    lora_config = LoraConfig(
        r=config.lora_rank,
        lora_alpha=config.lora_alpha,
        lora_dropout=config.lora_dropout,
        target_modules=regex,
        bias="none",
        task_type="CAUSAL_LM",
    )
    torch.manual_seed(config.seed)
    try:
        with warnings.catch_warnings():  # peft 0.21 still calls transformers' deprecated alias
            warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
            peft_model = get_peft_model(model, lora_config)
    except ValueError as error:
        raise TrainingError(f"LoRA could not attach to any module with targets {config.lora_targets!r}: {error}") from error
    counts, names = count_lora_modules(peft_model)
    requested = ["language"] + (["audio"] if config.lora_targets == "language+audio" else [])
    empty = [part for part in requested if counts.get(part, 0) == 0]
    if empty:
        raise TrainingError(
            f"LoRA wrapped zero modules in {in_words(empty)} (counts: {shorten(counts)}) with `--lora-targets {config.lora_targets}`; "
            "the model's module names do not match the target pattern, so that part would silently not train."
        )
    if config.gradient_checkpointing and counts.get("audio", 0):
        checkpoint_audio_encoder_blocks(peft_model)
    trainable = sum(p.numel() for p in peft_model.parameters() if p.requires_grad)
    total = sum(p.numel() for p in peft_model.parameters())
    report = LoraReport(
        targets=config.lora_targets,
        target_regex=regex,
        rank=config.lora_rank,
        alpha=config.lora_alpha,
        dropout=config.lora_dropout,
        modules_per_part={part: counts.get(part, 0) for part in ("language", "audio")},
        trainable_params=trainable,
        total_params=total,
        wrapped_modules=names,
    )
    return peft_model, report


def load_adapter(model: torch.nn.Module, adapter_dir: str | os.PathLike, *, is_trainable: bool = False,
                 model_id: str | None = None):
    """Load a saved LoRA adapter (PEFT format: adapter_config.json + adapter_model.safetensors).

    Before loading, the base the adapter was trained on (`adapter_dir/base_model.json`, written by
    the trainer) is compared with `model` (`pipeline.model.base_identity`).

    Args:
        model: the base model from `load_model`.
        model_id: where `model` was loaded from (named in errors; default: its config's path).

    Returns the `PeftModel` wrapping `model`.

    Raises:
        BaseModelMismatchError: `model` is not the base the adapter was trained on (other config
            values or other weights), or the adapter's tensors do not fit its shapes.
        ModelLoadError: the folder lacks the adapter files, or no adapter weight matched the model.
    """
    from peft import PeftModel

    from pipeline.errors import BaseModelMismatchError
    from pipeline.model.base_identity import check_base, is_size_mismatch, read_identity

    path = Path(adapter_dir)
    if not (path / "adapter_config.json").is_file():
        found = in_words(sorted(p.name for p in path.iterdir()), limit=20) if path.is_dir() else "the folder does not exist"
        raise ModelLoadError(
            f"`{path}` is not a LoRA adapter folder (no adapter_config.json; found {found}). Train a run first, "
            "or give the run's `adapter/` folder."
        )
    model_id = str(model_id or getattr(model.config, "_name_or_path", "") or "the model")
    recorded = read_identity(path)
    trained_on = f"`{recorded['model']}` as it was then" if recorded else "the model it was trained on"
    fix = (f"Load it on {trained_on} (e.g. `--model` pointing at those weights), or train a new run on "
           f"`{model_id}`.")
    check_base(recorded, model, model_id, what=f"The adapter in `{path}`", fix=fix)
    try:
        with translate_load_errors(str(path), "adapter"), warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
            peft_model = PeftModel.from_pretrained(model, str(path), is_trainable=is_trainable)
    except RuntimeError as error:
        if not is_size_mismatch(error):
            raise
        first = next((line.strip() for line in str(error).splitlines() if "size mismatch" in line), "")[:300]
        raise BaseModelMismatchError(
            f"The adapter in `{path}` was trained on a different base model than the one loaded from `{model_id}`: "
            f"its tensors do not fit this model's shapes ({first}). A LoRA adapter only works on the exact "
            f"weights it was trained on. {fix}"
        ) from None
    counts, _ = count_lora_modules(peft_model)
    if sum(counts.values()) == 0:
        raise ModelLoadError(f"The adapter in `{path}` attached to no module of this model; was it trained on another model?")
    peft_model.eval()
    return peft_model
