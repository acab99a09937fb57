"""Gemma 3n, the first model family: every fact of its checkpoints this pipeline relies on.

Module paths, LoRA targets, chat turns and audio cost follow transformers 5.24's
`models/gemma3n` (`modeling_gemma3n.py`, `processing_gemma3n.py`) and the hub's
`google/gemma-3n-E2B-it` / `E4B-it` checkpoints (FIELD_NOTES "Gemma 3n E2B facts"). `shape` and
`part_params` read a `config.json` into the numbers the memory estimate prices, following the module
constructors of `modeling_gemma3n.py`. The one `ModelFamily` that describes them is `GEMMA3N`.

What every Gemma shares (module paths, the language LoRA targets, walking the model, the shape reader's
common keys) is `pipeline.model.gemma`'s; this module declares what is Gemma 3n's own.

Torch-free at import; `model_class` and `make_tiny` import transformers when called.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pipeline.model.gemma import (  # noqa: F401 - PLE_MODULE, VISION_MODULE, inner: this family's, as before
    PLE_MODULE,
    VISION_MODULE,
    conformer_params,
    decoder_parts,
    gemma_family,
    inner,
    read_shape,
    sscp_conv_params,
)
from pipeline.model.shape import ModelShape, PartParams, vision_tower_params

MODELS = ("google/gemma-3n-E2B-it", "google/gemma-3n-E4B-it")
"""Hub ids offered in the app and the CLI, the default first."""

SHIPPED_CONFIGS = {
    "google/gemma-3n-E2B-it": "gemma-3n-E2B-it.config.json",
    "google/gemma-3n-E4B-it": "gemma-3n-E4B-it.config.json",
    "google/gemma-3n-E2B": "gemma-3n-E2B-it.config.json",
    "google/gemma-3n-E4B": "gemma-3n-E4B-it.config.json",
}
"""Hub id -> copy of its `config.json` in `assets/` (the base and -it checkpoints share one shape)."""

MAX_AUDIO_S = 30.0
"""Gemma 3n's feature extractor truncates audio at 480,000 samples = 30 s at 16 kHz."""

AUDIO_SOFT_TOKENS = 188
"""Audio soft tokens per clip in Gemma 3n (`Gemma3nProcessor.audio_seq_length`, config
`audio_soft_tokens_per_image`), whatever the clip's length; with `<start_of_audio>`,
`<end_of_audio>` and the surrounding blank lines a clip takes ~192 positions."""

ALTUP_MODULES = (r"model\.language_model\.layers\.\d+\.altup",)
"""Kept unquantized besides every Gemma's skip list (`pipeline.model.gemma.QUANTIZATION_SKIP_MODULES`):
AltUp's coefficient layers (`altup.prediction_coefs` etc., a few thousand parameters). In training mode
Gemma 3n clamps their weights in place (`weight.data.clamp_`), which fails on packed 4-bit storage (found
here with transformers 5.24 + bitsandbytes 0.50: "result type Float can't be cast to ... unsigned char")."""

AUDIO_LORA_PROJECTIONS = (
    r"attention\.attn\.(q|k|v)_proj|attention\.post|"
    r"ffw_layer_(start|end)\.ffw_layer_(1|2)|lconv1d\.linear_(start|end)"
)
"""Attention, feed-forward and light-conv projections of one conformer block (`audio_tower.conformer.N`),
the audio encoder's LoRA targets (`pipeline.model.gemma.audio_lora_regex`)."""


def audio_tokens(seconds: float) -> int:
    """Positions one clip takes in a Gemma 3n conversation: `AUDIO_SOFT_TOKENS`, whatever its length
    (`seconds` is ignored; the markers and blank lines around the span are counted by the tokenizer)."""
    return AUDIO_SOFT_TOKENS


def audio_span(processor: Any, seconds: float) -> str:
    """The text one clip becomes in the rendered conversation, whatever its length
    (`processor.full_audio_sequence`: blank line, `<start_of_audio>`, `AUDIO_SOFT_TOKENS` audio soft
    tokens, `<end_of_audio>`, blank line; transformers `models/gemma3n/processing_gemma3n.py`); a
    processor without it (an older save) gets the same span from its tokenizer's tokens."""
    span = getattr(processor, "full_audio_sequence", None)
    if span is None:
        tok = processor.tokenizer
        n = int(getattr(processor, "audio_seq_length", AUDIO_SOFT_TOKENS))
        span = f"\n\n{tok.boa_token}{tok.audio_token * n}{tok.eoa_token}\n\n"
    return span


def model_class() -> type:
    """`transformers.Gemma3nForConditionalGeneration`."""
    from transformers import Gemma3nForConditionalGeneration  # noqa: PLC0415 - torch, only when loading

    return Gemma3nForConditionalGeneration


def make_tiny(out_dir: str | Path, *, seed: int = 0) -> Path:
    """Write the tiny random Gemma 3n with its processor (`pipeline.model.tiny_gemma3n.make_tiny_gemma3n`)."""
    from pipeline.model.tiny_gemma3n import make_tiny_gemma3n  # noqa: PLC0415 - torch, only when writing

    return make_tiny_gemma3n(out_dir, seed=seed)


def gguf_misfit(model_config: dict) -> str | None:
    """Why llama.cpp cannot load this Gemma 3n's GGUF, or None when it can: its Gemma 3n graph takes E2B's
    per-layer width and KV-sharing start as fixed numbers (`pipeline.model.tiny_gemma3n.LLAMA_CPP_PER_LAYER_INPUT`,
    `LLAMA_CPP_KV_FROM_START`), which E2B and E4B have and the small tiny stand-in has not.
    `model_config`: config.json as a dict."""
    from pipeline.model.tiny_gemma3n import LLAMA_CPP_KV_FROM_START, LLAMA_CPP_PER_LAYER_INPUT  # noqa: PLC0415

    text = model_config.get("text_config", model_config)
    width, layers = text.get("hidden_size_per_layer_input"), int(text.get("num_hidden_layers") or 0)
    if width != LLAMA_CPP_PER_LAYER_INPUT:
        return f"its per-layer input width is {width}, where llama.cpp's Gemma 3n graph fixes {LLAMA_CPP_PER_LAYER_INPUT}"
    if layers <= LLAMA_CPP_KV_FROM_START:
        return f"it has {layers} layers, where llama.cpp's Gemma 3n graph shares KV from layer {LLAMA_CPP_KV_FROM_START}"
    return None


def gguf_placeholder_tensors(model_config: dict) -> dict[str, tuple[int, ...]]:
    """The tensors llama.cpp's Gemma 3n loader requires and transformers no longer saves, by name -> shape: the
    key/value projections and key norm of each layer that reuses another layer's KV (the last
    `num_kv_shared_layers`). transformers 5 builds those layers without them (the hub's E2B checkpoint, saved by
    transformers 4.53, still holds them); llama.cpp creates them for every layer (`src/models/gemma3n.cpp`
    `create_tensor_qkv`, `attn_k_norm`) but never reads them in a layer without KV (it reuses the earlier
    layer's cache), so zeros are exact. `model_config`: config.json as a dict."""
    text = model_config.get("text_config", model_config)
    layers, shared = int(text["num_hidden_layers"]), int(text.get("num_kv_shared_layers") or 0)
    hidden, head_dim = int(text["hidden_size"]), int(text["head_dim"])
    kv_width = int(text["num_key_value_heads"]) * head_dim
    tensors: dict[str, tuple[int, ...]] = {}
    for layer in range(layers - shared, layers):
        prefix = f"model.language_model.layers.{layer}.self_attn."
        tensors.update({prefix + "k_proj.weight": (kv_width, hidden), prefix + "v_proj.weight": (kv_width, hidden),
                        prefix + "k_norm.weight": (head_dim,)})
    return tensors


# --------------------------------------------------------------------------------------------------
# config.json -> ModelShape, and parameters per part


def shape(model_config: dict) -> ModelShape:
    """Read a Gemma 3n `config.json` dict (multimodal, with `text_config`) into a `ModelShape`: the keys every
    Gemma has (`pipeline.model.gemma.read_shape`) and Gemma 3n's own (`_own_keys`).

    Raises `ModelLoadError` when the dict is not a Gemma 3n config (names the missing key).
    """
    return read_shape(model_config, "Gemma 3n", MODELS, _own_keys)


def _own_keys(text: dict, audio: dict, vision: dict, common: dict) -> dict:
    """Gemma 3n's `ModelShape` fields: per-layer MLP widths and activation sparsity, AltUp, LAuReL, the
    USM-style audio encoder's and the timm vision tower's settings (defaults: E2B's)."""
    n_layers = common["num_layers"]
    inter = text["intermediate_size"]
    inter = tuple(int(x) for x in inter) if isinstance(inter, (list, tuple)) else (int(inter),) * n_layers
    sparsity = text.get("activation_sparsity_pattern") or [0.0] * n_layers
    if not isinstance(sparsity, (list, tuple)):
        sparsity = [float(sparsity)] * n_layers
    channels = audio.get("sscp_conv_channel_size", [128, 32])
    return dict(
        intermediate_sizes=inter,
        head_dim=int(text.get("head_dim") or int(text["hidden_size"]) // int(text["num_attention_heads"])),
        vocab_size_per_layer_input=int(text["vocab_size_per_layer_input"]),
        hidden_size_per_layer_input=int(text["hidden_size_per_layer_input"]),
        altup_num_inputs=int(text.get("altup_num_inputs", 4)),
        laurel_rank=int(text.get("laurel_rank", 64)),
        sparse_layers=sum(1 for s in sparsity if float(s) > 0.0),
        audio_hidden=int(audio.get("hidden_size", 1536)),
        audio_layers=int(audio.get("conf_num_hidden_layers", 12)),
        audio_heads=int(audio.get("conf_num_attention_heads", 8)),
        audio_conv_kernel=int(audio.get("conf_conv_kernel_size", 5)),
        audio_sscp_channels=tuple(int(c) for c in channels),
        audio_input_feat=int(audio.get("input_feat_size", 128)),
        audio_vocab=int(audio.get("vocab_size", 128)),
        audio_reduction=int(audio.get("conf_reduction_factor", 4)),
        vision_hidden=int(vision.get("hidden_size", 2048)),
        vision_vocab=int(vision.get("vocab_size", 128)),
        vision_architecture=str(vision.get("architecture", "mobilenetv5_300m_enc")),
    )


def part_params(shape: ModelShape) -> dict[str, PartParams]:
    """Parameter counts per part, following the module constructors of transformers 5.x
    (`Gemma3nTextDecoderLayer`, `Gemma3nTextModel`, `Gemma3nAudioConformerBlock`, ...).

    Parts: `token_embedding` (V x h, tied to lm_head), `per_layer_embedding` (V_ple x L*p),
    `text_decoder` (the L decoder layers), `projections` (AltUp in/out, per-layer model projection,
    final norm, embed_audio / embed_vision), `audio_encoder`, `vision_tower`.
    Matches a meta-device build of E2B to the parameter (5,418,464,192; tests check it).
    """
    h, L, p, n = shape.hidden_size, shape.num_layers, shape.hidden_size_per_layer_input, shape.altup_num_inputs
    q, kv, d = shape.q_dim, shape.kv_dim, shape.head_dim
    lin = other = count = 0
    largest = 0
    for i in range(L):
        owner = i < shape.kv_owner_layers
        mlp = 3 * h * shape.intermediate_sizes[i]
        attn = 2 * h * q + (2 * h * kv if owner else 0)
        laurel = 2 * h * shape.laurel_rank
        ple = 2 * h * p  # per_layer_input_gate, per_layer_projection
        lin += mlp + attn + laurel + ple
        count += 3 + (4 if owner else 2) + 2 + 2
        largest = max(largest, h * shape.intermediate_sizes[i], h * q)
        # AltUp's correction_coefs, prediction_coefs, modality_router: Linears the loader keeps in
        # bf16 (`ALTUP_MODULES`: Gemma 3n clamps them in place).
        other += n * n + n * n * n + h * n
        # 5 hidden norms + laurel norm + AltUp router norm + correct_output_scale, q_norm, k_norm
        other += 8 * h + d + (d if owner else 0)
    parts = decoder_parts(shape, PartParams(lin, other, count, largest))
    proj_lin = 2 * (n - 1) * h * h + h * L * p
    proj_lin += shape.audio_hidden * h + shape.vision_hidden * h
    proj_other = h + p  # final norm, per_layer_projection_norm
    proj_other += shape.audio_vocab * shape.audio_hidden + 2 * shape.audio_hidden
    proj_other += shape.vision_vocab * shape.vision_hidden + 2 * shape.vision_hidden
    parts["projections"] = PartParams(proj_lin, proj_other, 2 * (n - 1) + 3, max(h * L * p, h * h))
    ha = shape.audio_hidden
    block_lin, c0, c1 = conformer_params(shape)
    sscp_lin = c1 * (shape.audio_input_feat // 4) * ha
    a_lin = block_lin + sscp_lin
    a_other = shape.audio_layers * (9 * ha + ha * shape.audio_conv_kernel + ha // max(shape.audio_heads, 1))
    a_other += sscp_conv_params(c0, c1)  # two 3x3 convs + cumulative group norms
    parts["audio_encoder"] = PartParams(a_lin, a_other, shape.audio_layers * 10 + 1, 4 * ha * ha)
    parts["vision_tower"] = PartParams(0, vision_tower_params(shape.vision_architecture))
    return parts


GEMMA3N = gemma_family(
    name="gemma3n",
    label="Gemma 3n",
    models=MODELS,
    shipped_configs=SHIPPED_CONFIGS,
    licence_url="https://huggingface.co/google/gemma-3n-E2B-it",
    max_audio_s=MAX_AUDIO_S,
    turn_start="<start_of_turn>",
    turn_end="<end_of_turn>",
    quantization_skip_extra=ALTUP_MODULES,
    audio_blocks="conformer",
    audio_lora_projections=AUDIO_LORA_PROJECTIONS,
    functions=(audio_tokens, audio_span, shape, part_params, make_tiny, model_class, gguf_placeholder_tensors,
               gguf_misfit),
    gguf_audio=False,
    gguf_vocab_files=("tokenizer.model",),
    system_turn=False,  # its chat template folds a system message into the first user turn
    clip_marker_tokens=4,
)
"""Gemma 3n E2B / E4B (`google/gemma-3n-E2B-it`, gated: accept the licence on the hub)."""
