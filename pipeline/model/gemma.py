"""What every Gemma family shares, written once: the seam between `family.py` and a family module.

Gemma 3n (`pipeline.model.gemma3n`) and Gemma 4 (`pipeline.model.gemma4`) are built alike in
transformers 5.24 (`models/gemma3n/modeling_gemma3n.py`, `models/gemma4/modeling_gemma4.py`): a
`...ForConditionalGeneration` holding `model.language_model` (decoder layers with `self_attn` and `mlp`
projections, a per-layer embedding table), `model.audio_tower` (a conformer), `model.vision_tower` and
the two embedders `model.embed_audio` / `model.embed_vision`. This module holds what follows from that:

- module paths: `PLE_MODULE`, `VISION_MODULE`, `AUDIO_MODULE`, the quantization skip list
  (`QUANTIZATION_SKIP_MODULES`, `INT8_EXTRA_SKIP_MODULES`);
- LoRA targets per part: `LANGUAGE_LORA_REGEX`, and `audio_lora_regex` from a family's block list and
  projection names;
- walking the model: `inner`, `audio_blocks_under` (the audio tower's blocks), `part_of` (which part a
  module path counts for);
- the shape reader's common keys (`read_shape`) and the parameters every family counts alike
  (`decoder_parts`, `conformer_params`);
- `gemma_family`: a `ModelFamily` from what a family module declares (docs/ARCHITECTURE.md, "Adding a
  model family").

Torch-free at import.
"""

from __future__ import annotations

from typing import Any, Callable

from pipeline.errors import ModelLoadError
from pipeline.model.family import ModelFamily
from pipeline.model.shape import ModelShape, PartParams

PLE_MODULE = "model.language_model.embed_tokens_per_layer"
"""The per-layer embedding table (E2B: 262,144 x 7,680 in Gemma 3n, 3.75 GiB bf16; 262,144 x 8,960 in
Gemma 4, 2.35 B parameters, 4.4 GiB bf16)."""
VISION_MODULE = "model.vision_tower"
"""The vision tower (Gemma 3n: MobileNetV5-300M, 0.55 GiB bf16; Gemma 4: 0.17 B parameters); the tutor
never runs it."""
AUDIO_MODULE = "model.audio_tower"
"""The audio encoder (a conformer: USM-style in Gemma 3n; 12 blocks of hidden 1,024 in Gemma 4)."""

QUANTIZATION_SKIP_MODULES = (
    "model.audio_tower",
    "model.vision_tower",
    "model.embed_audio",
    "model.embed_vision",
    "lm_head",
)
"""Full module paths (regexes, matched from the start at a module boundary) every Gemma keeps
unquantized; a family adds its own (`gemma_family(quantization_skip_extra=...)`).

Bare names match nothing in transformers 5.x and `lm_head` must be listed explicitly
(transformers #45674; FIELD_NOTES "Quantization")."""

INT8_EXTRA_SKIP_MODULES = ("model.language_model.per_layer_model_projection",)
"""Kept out of 8-bit: the projection's output is scaled in place (`...TextModel.project_per_layer_inputs`),
which LLM.int8's backward does not allow (FIELD_NOTES)."""

LANGUAGE_LORA_REGEX = r"model\.language_model\.layers\.\d+\.(self_attn\.(q|k|v|o)_proj|mlp\.(gate|up|down)_proj)"
"""Attention + MLP projections of the text decoder (full paths; plain `q_proj` would also hit the
audio tower's projections)."""

MODEL_TURN_HEADER = "model\n"
"""Text between a turn's opening control token and the answer in every Gemma chat template."""


def audio_lora_regex(blocks: str, projections: str, suffix: str = "") -> str:
    """The audio encoder's LoRA targets: `model.audio_tower.BLOCKS.N.(PROJECTIONS)SUFFIX` (peft full-matches
    module names). `blocks`: the attribute holding the conformer blocks ("conformer", "layers");
    `projections`: a regex alternation of projection paths inside one block; `suffix`: a regex after them
    (Gemma 4's r"\\.linear", the Linear inside its clippable wrapper)."""
    return rf"model\.audio_tower\.{blocks}\.\d+\.({projections}){suffix}"


def inner(model: Any) -> Any:
    """The multimodal model (`Gemma3nModel`, `Gemma4Model`) inside a `...ForConditionalGeneration`, or
    inside a PeftModel of one.

    Raises:
        ModelLoadError: `model` has no `language_model` (not a Gemma model).
    """
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    base = getattr(base, "model", base)
    if not hasattr(base, "language_model"):
        raise ModelLoadError(f"Expected a Gemma model with a `language_model`, got {type(model).__name__}.")
    return base


def audio_blocks_under(blocks: str) -> Callable[[Any], list]:
    """`audio_blocks(model)` for a family whose audio tower keeps its conformer blocks in the attribute
    `blocks`: the blocks, in order (an empty list when the tower has none)."""

    def audio_blocks(model: Any) -> list:
        return list(getattr(inner(model).audio_tower, blocks, []))

    audio_blocks.__doc__ = f"The conformer blocks of the audio encoder (`audio_tower.{blocks}`), in order."
    return audio_blocks


def part_of(name: str) -> str:
    """Which part a module path belongs to: "language", "audio" or "other"."""
    if ".language_model." in name:
        return "language"
    if ".audio_tower." in name:
        return "audio"
    return "other"


# --------------------------------------------------------------------------------------------------
# config.json -> ModelShape, and parameters per part


def read_shape(model_config: dict, label: str, models: tuple[str, ...],
               read: Callable[[dict, dict, dict, dict], dict]) -> ModelShape:
    """Read a Gemma `config.json` dict (multimodal, with `text_config`) into a `ModelShape`: the keys
    every Gemma has here, the family's own through `read(text, audio, vision, common) -> dict` (the
    sections, `{}` where absent, and the common fields read so far).

    Common fields: `num_layers` (`num_hidden_layers`, read first), `vocab_size`, `hidden_size`,
    `num_heads`, `num_kv_heads`, `num_kv_shared_layers` (0 if absent), `tie_word_embeddings` (top level,
    else the text settings, else True) and `dtype` (`dtype`, else `torch_dtype`, else "bfloat16").

    Raises:
        ModelLoadError: `model_config` is not a dict, or a needed key is missing; the message names the
            key, the family (`label`) and what to give instead (`models`).
    """
    if not isinstance(model_config, dict):
        raise ModelLoadError(f"Model config must be a dict from config.json, got {type(model_config).__name__}.")
    text = model_config.get("text_config", model_config)
    audio = model_config.get("audio_config") or {}
    vision = model_config.get("vision_config") or {}
    try:
        common = {"num_layers": int(text["num_hidden_layers"])}
        common.update(
            vocab_size=int(text["vocab_size"]),
            hidden_size=int(text["hidden_size"]),
            num_heads=int(text["num_attention_heads"]),
            num_kv_heads=int(text["num_key_value_heads"]),
            num_kv_shared_layers=int(text.get("num_kv_shared_layers", 0)),
            tie_word_embeddings=bool(model_config.get("tie_word_embeddings", text.get("tie_word_embeddings", True))),
            dtype=str(model_config.get("dtype") or model_config.get("torch_dtype") or "bfloat16"),
        )
        return ModelShape(**common, **read(text, audio, vision, common))
    except KeyError as missing:
        raise ModelLoadError(
            f"config.json is not a {label} config: its text settings (text_config) have no `{missing.args[0]}` entry. "
            f"Give {', '.join(models)} or a folder with a {label} config.json."
        ) from None


def decoder_parts(shape: ModelShape, decoder: PartParams) -> dict[str, PartParams]:
    """The parts every Gemma counts alike: `text_decoder` (the L decoder layers, `decoder`),
    `token_embedding` (V x h, tied to lm_head) and `per_layer_embedding` (V_ple x L*p)."""
    h, L, p = shape.hidden_size, shape.num_layers, shape.hidden_size_per_layer_input
    return {
        "text_decoder": decoder,
        "token_embedding": PartParams(0, shape.vocab_size * h),
        "per_layer_embedding": PartParams(0, shape.vocab_size_per_layer_input * L * p),
    }


def conformer_params(shape: ModelShape) -> tuple[int, int, int]:
    """What every Gemma audio encoder has alike: `(block_linear, c0, c1)`.

    `block_linear`: the Linear weights of the conformer blocks, 24 ha^2 per block (2 feed-forwards of
    8 ha^2, q/k/v/post + relative position projection 5 ha^2, light conv 3 ha^2); `c0, c1`: the channels
    of the two 3x3 subsampling convolutions (`audio_sscp_channels`, 32 for one not given). Their weights
    and norms: `sscp_conv_params(c0, c1)`."""
    ha = shape.audio_hidden
    c0, c1 = (list(shape.audio_sscp_channels) + [32, 32])[:2]
    return shape.audio_layers * 24 * ha * ha, c0, c1


def sscp_conv_params(c0: int, c1: int) -> int:
    """Parameters of the two 3x3 subsampling convolutions (one input channel, no bias) and the norms after
    them: 9 c0 + c0 + 9 c0 c1 + c1."""
    return 9 * c0 + c0 + 9 * c0 * c1 + c1


# --------------------------------------------------------------------------------------------------
# The family


def gemma_family(*, name: str, audio_blocks: str, audio_lora_projections: str, audio_lora_suffix: str = "",
                 quantization_skip_extra: tuple[str, ...] = (), functions: tuple[Callable, ...],
                 **declared: Any) -> ModelFamily:
    """A Gemma `ModelFamily`: what every Gemma shares (this module) with what the family module declares.

    Args:
        name: the family's id; also its `model_types` (`(name,)`) and `tiny_dir_name` ("tiny-" + name).
        audio_blocks: the audio tower's attribute holding its conformer blocks (`audio_blocks_under`).
        audio_lora_projections, audio_lora_suffix: the audio LoRA targets inside a block (`audio_lora_regex`).
        quantization_skip_extra: module regexes kept unquantized besides `QUANTIZATION_SKIP_MODULES`.
        functions: the family's own functions, each named as the `ModelFamily` field it fills
            (`audio_tokens`, `audio_span`, `shape`, `part_params`, `make_tiny`, `model_class`, and optionally
            `gguf_placeholder_tensors`).
        declared: the other `ModelFamily` fields (label, models, shipped_configs, licence_url,
            max_audio_s, turn_start, turn_end, gguf_audio, and optionally clip_marker_tokens, gguf_vocab_files,
            estimate_only).

    Raises:
        TypeError: a function's name is no `ModelFamily` field, or a field is missing or given twice.
    """
    own = {function.__name__: function for function in functions}
    fields = set(ModelFamily.__dataclass_fields__)
    stray = sorted(set(own) - fields)
    if stray:
        raise TypeError(f"gemma_family: {stray} name no ModelFamily field; name each function as the field it fills.")
    return ModelFamily(
        name=name,
        model_types=(name,),
        tiny_dir_name=f"tiny-{name}",
        model_turn_header=MODEL_TURN_HEADER,
        quantization_skip_modules=QUANTIZATION_SKIP_MODULES + tuple(quantization_skip_extra),
        int8_extra_skip_modules=INT8_EXTRA_SKIP_MODULES,
        audio_tower_module=AUDIO_MODULE,
        language_lora_regex=LANGUAGE_LORA_REGEX,
        audio_lora_regex=audio_lora_regex(audio_blocks, audio_lora_projections, audio_lora_suffix),
        per_layer_embedding_module=PLE_MODULE,
        vision_module=VISION_MODULE,
        inner=inner,
        audio_blocks=audio_blocks_under(audio_blocks),
        part_of=part_of,
        **own,
        **declared,
    )
