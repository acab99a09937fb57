"""Gemma 4 (E2B / E4B), the second model family: every fact of its checkpoints this pipeline relies on.

Module paths, LoRA targets, chat turns and audio cost follow transformers 5.24's `models/gemma4`
(`modeling_gemma4.py`, `processing_gemma4.py`, `feature_extraction_gemma4.py`) and the public facts of
`google/gemma-4-E2B-it` / `E4B-it` (FIELD_NOTES "Gemma 4 E2B and llama.cpp"; the shipped configs in
`assets/`, whose sources `assets/README.md` names). `shape` and `part_params` read a `config.json`
into the numbers the memory estimate prices, following the module constructors of `modeling_gemma4.py`.
The one `ModelFamily` that describes them is `GEMMA4`.

How Gemma 4 differs from Gemma 3n where it matters here:
- a clip costs `audio_tokens(seconds)` positions, 25 per second (at most 750 for 30 s), not a fixed 188;
- turns are `<|turn>ROLE\\n ... <turn|>\\n`, the system prompt is a turn of its own;
- the audio encoder's linears are `Gemma4ClippableLinear` (an nn.Module holding `.linear` and clamp
  buffers), which peft 0.21.2 refuses as a LoRA target: its LoRA targets are the inner `.linear` (`AUDIO_LORA_SUFFIX`),
  and the clamps still apply around it;
- no AltUp, no LAuReL; full-attention layers have their own head size (512 on E2B, 256 on sliding
  layers), and with `use_double_wide_mlp` the KV-sharing layers' MLPs are twice as wide;
- llama.cpp and Ollama run its audio (`tools/mtmd/models/gemma4a.cpp`), so a tuned tutor exports to GGUF
  with its audio projector (`pipeline.export.gguf`).

What every Gemma shares (module paths, the language LoRA targets, walking the model, the shape reader's
common keys) is `pipeline.model.gemma`'s; this module declares what is Gemma 4's own.

Torch-free at import; `model_class` and `make_tiny` import transformers when called.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pipeline.model.gemma import conformer_params, decoder_parts, gemma_family, read_shape, sscp_conv_params
from pipeline.model.shape import ModelShape, PartParams

MODELS = ("google/gemma-4-E2B-it", "google/gemma-4-E4B-it")
"""Hub ids offered in the app and the CLI, E2B first."""

ESTIMATE_ONLY = ("google/gemma-4-E4B-it", "google/gemma-4-E4B")
"""Priced from its shipped config but not a supported training target: E4B was never trained or measured
here (issue 30 supports E2B; `plan` marks its rows "estimate only")."""

SHIPPED_CONFIGS = {
    "google/gemma-4-E2B-it": "gemma-4-E2B-it.config.json",
    "google/gemma-4-E4B-it": "gemma-4-E4B-it.config.json",
    "google/gemma-4-E2B": "gemma-4-E2B-it.config.json",
    "google/gemma-4-E4B": "gemma-4-E4B-it.config.json",
}
"""Hub id -> copy of its `config.json` in `assets/` (written from transformers' `Gemma4Config` and the
public facts: `assets/README.md`); the base and -it checkpoints share one shape."""

MAX_AUDIO_S = 30.0
"""`Gemma4AudioFeatureExtractor` truncates at `max_length` 480,000 samples = 30 s at 16 kHz."""

SAMPLE_RATE_HZ = 16_000
FRAME_LENGTH = 320
"""Samples per mel frame (20 ms at 16 kHz, `Gemma4AudioFeatureExtractor.frame_length`)."""
HOP_LENGTH = 160
"""Samples between mel frames (10 ms, `hop_length`)."""
MAX_AUDIO_TOKENS = 750
"""`Gemma4Processor.audio_seq_length`: the cap on one clip's audio tokens (30 s)."""

AUDIO_LORA_PROJECTIONS = (
    r"self_attn\.(q_proj|k_proj|v_proj|post)|"
    r"feed_forward(1|2)\.ffw_layer_(1|2)|lconv1d\.linear_(start|end)"
)
"""The conformer's attention, feed-forward and light-conv projections in one block
(`audio_tower.layers.N`), each a `Gemma4ClippableLinear`; the LoRA target is the nn.Linear inside it
(`AUDIO_LORA_SUFFIX`)."""
AUDIO_LORA_SUFFIX = r"\.linear"
"""peft 0.21.2 refuses the wrapper itself ("Target module Gemma4ClippableLinear(...) is not supported");
wrapping the inner Linear keeps the wrapper's input and output clamps around the adapted layer."""


def audio_tokens(seconds: float) -> int:
    """Positions one clip of `seconds` takes in a Gemma 4 conversation (audio soft tokens, without the
    `<|audio>` / `<audio|>` markers): about `ceil(ms / 40)`, 25 per second, at most 750.

    Exactly the processor's count (`Gemma4Processor._compute_audio_num_tokens`, transformers 5.24):
    mel frames `(n + 160 - 321) // 160 + 1` for n samples at 16 kHz (semicausal left padding of half a
    frame, a 321-sample unfold window, hop 160), then two stride-2 convolutions (kernel 3, padding 1):
    `t -> (t - 1) // 2 + 1` each; capped at `MAX_AUDIO_TOKENS`. A clip shorter than one frame (20 ms)
    gets 0. `ceil(ms / 40)` is the same within one token (1.30 s: 33 both; 1.01 s: 25 vs 26).
    """
    frames = mel_frames(seconds)
    if frames <= 0:
        return 0
    for _ in range(2):
        frames = (frames - 1) // 2 + 1
    return min(frames, MAX_AUDIO_TOKENS)


def mel_frames(seconds: float) -> int:
    """Valid mel frames of a clip of `seconds` (`Gemma4AudioFeatureExtractor`: a frame counts when its
    whole 20 ms window is real audio): `(n + 160 - 321) // 160 + 1` for n samples at 16 kHz, at least 0."""
    samples = int(round(max(0.0, float(seconds)) * SAMPLE_RATE_HZ))
    return max(0, (samples + FRAME_LENGTH // 2 - (FRAME_LENGTH + 1)) // HOP_LENGTH + 1)


def audio_span(processor: Any, seconds: float) -> str:
    """The text one clip becomes in the rendered conversation: `<|audio>`, `audio_tokens(seconds)`
    audio placeholders, `<audio|>` (`Gemma4Processor.replace_audio_token`; no blank lines around it)."""
    return f"{processor.boa_token}{processor.audio_token * audio_tokens(seconds)}{processor.eoa_token}"


def model_class() -> type:
    """`transformers.Gemma4ForConditionalGeneration`."""
    from transformers import Gemma4ForConditionalGeneration  # noqa: PLC0415 - torch, only when loading

    return Gemma4ForConditionalGeneration


def make_tiny(out_dir: str | Path, *, seed: int = 0) -> Path:
    """Write the tiny random Gemma 4 with its processor (`pipeline.model.tiny_gemma4.make_tiny_gemma4`)."""
    from pipeline.model.tiny_gemma4 import make_tiny_gemma4  # noqa: PLC0415 - torch, only when writing

    return make_tiny_gemma4(out_dir, seed=seed)


# --------------------------------------------------------------------------------------------------
# config.json -> ModelShape, and parameters per part


def _layer_types(text: dict, n_layers: int) -> list[str]:
    """`layer_types` as `Gemma4TextConfig.__post_init__` sets it: given, or 5 sliding : 1 full, the last
    layer always full."""
    types = list(text.get("layer_types") or ["sliding_attention" if (i + 1) % 6 else "full_attention"
                                            for i in range(n_layers)])
    if types:
        types[-1] = "full_attention"
    return types


def shape(model_config: dict) -> ModelShape:
    """Read a Gemma 4 `config.json` dict (multimodal, with `text_config`) into a `ModelShape`.

    Per layer (`Gemma4TextAttention`, `Gemma4TextMLP`): full-attention layers use `global_head_dim`
    (default 512) and `num_global_key_value_heads` when `attention_k_eq_v`; the last
    `num_kv_shared_layers` own no k/v; with `use_double_wide_mlp` those layers' MLPs are twice as wide.

    Raises:
        ModelLoadError: not a dict, or a key the shape needs is missing (named).
    """
    return read_shape(model_config, "Gemma 4", MODELS, _own_keys)


def _own_keys(text: dict, audio: dict, vision: dict, common: dict) -> dict:
    """Gemma 4's `ModelShape` fields (beside `pipeline.model.gemma.read_shape`'s common ones): head sizes
    and KV heads per layer, MLP widths, the audio encoder's and the vision encoder's settings."""
    n_layers, kv_heads = common["num_layers"], common["num_kv_heads"]
    types = _layer_types(text, n_layers)
    head_dim = int(text.get("head_dim", 256))
    global_head_dim = int(text.get("global_head_dim") or _per_layer_value(text, types, "head_dim") or 512)
    global_kv = text.get("num_global_key_value_heads") if text.get("attention_k_eq_v") else None
    global_kv = int(global_kv or _per_layer_value(text, types, "num_key_value_heads") or kv_heads)
    inter = int(text["intermediate_size"])
    double = bool(text.get("use_double_wide_mlp", False))
    first_shared = n_layers - common["num_kv_shared_layers"]
    full = [t == "full_attention" for t in types]
    channels = audio.get("subsampling_conv_channels", [128, 32])
    return dict(
        intermediate_sizes=tuple(inter * (2 if double and i >= first_shared else 1) for i in range(n_layers)),
        head_dim=head_dim,
        vocab_size_per_layer_input=int(text.get("vocab_size_per_layer_input", text["vocab_size"])),
        hidden_size_per_layer_input=int(text.get("hidden_size_per_layer_input") or 0),
        altup_num_inputs=0,
        laurel_rank=0,
        sparse_layers=0,
        audio_hidden=int(audio.get("hidden_size", 1024)),
        audio_layers=int(audio.get("num_hidden_layers", 12)),
        audio_heads=int(audio.get("num_attention_heads", 8)),
        audio_conv_kernel=int(audio.get("conv_kernel_size", 5)),
        audio_sscp_channels=tuple(int(c) for c in channels),
        audio_input_feat=128,
        audio_vocab=0,
        audio_reduction=4,
        vision_hidden=int(vision.get("hidden_size", 768)) if vision else 0,
        vision_vocab=0,
        vision_architecture="gemma4_vision",
        family="gemma4",
        layer_head_dims=tuple(global_head_dim if f else head_dim for f in full),
        layer_kv_heads=tuple(global_kv if f else kv_heads for f in full),
        hidden_norms=5,
        audio_output_dims=int(audio.get("output_proj_dims", 1536)) if audio else 0,
        vision_params=_vision_params(vision, int(text["hidden_size"])),
        kv_equals_value=tuple(bool(text.get("attention_k_eq_v")) and f for f in full),
    )


def _per_layer_value(text: dict, types: list[str], key: str):
    """A full-attention layer's `key` in a saved `per_layer_config` (`{layer: {key: value}}`), or None."""
    for layer, values in (text.get("per_layer_config") or {}).items():
        if int(layer) < len(types) and types[int(layer)] == "full_attention" and key in (values or {}):
            return values[key]
    return None


def _vision_params(vision: dict, text_hidden: int) -> int:
    """Parameters of the vision encoder (`Gemma4VisionModel`: patch embedder, position table,
    encoder layers with q/k norms) from its config; 0 without one. Its embedder (`embed_vision`) is
    counted with the projections."""
    if not vision:
        return 0
    vh = int(vision.get("hidden_size", 768))
    vi = int(vision.get("intermediate_size", 3072))
    heads = int(vision.get("num_attention_heads", 12))
    kv_heads = int(vision.get("num_key_value_heads", heads))
    hd = int(vision.get("head_dim", 64))
    patch = int(vision.get("patch_size", 16))
    positions = int(vision.get("position_embedding_size", 10240))
    layer = vh * heads * hd * 2 + vh * kv_heads * hd * 2 + 3 * vh * vi + 4 * vh + 2 * hd
    return 3 * patch * patch * vh + 2 * positions * vh + int(vision.get("num_hidden_layers", 16)) * layer


def part_params(shape: ModelShape) -> dict[str, PartParams]:
    """Parameter counts per part, following the module constructors of transformers 5.24's
    `modeling_gemma4.py` (`Gemma4TextDecoderLayer`, `Gemma4TextModel`, `Gemma4AudioModel`,
    `Gemma4MultimodalEmbedder`, `Gemma4VisionModel`).

    Parts as for Gemma 3n: `token_embedding` (V x h, tied to lm_head), `per_layer_embedding`
    (V_ple x L*p), `text_decoder` (the L decoder layers), `projections` (the per-layer model
    projection, its norm, the final norm, embed_audio and embed_vision), `audio_encoder`,
    `vision_tower`. Equals a meta-device build of E2B, E4B and the tiny stand-in to the parameter
    (tests check it; E2B: 5,104,297,504, the checkpoint also stores the KV-sharing layers' unused k/v).
    """
    h, L, p = shape.hidden_size, shape.num_layers, shape.hidden_size_per_layer_input
    lin = other = count = largest = 0
    for i in range(L):
        owner = i < shape.kv_owner_layers
        q, kv, d = shape.layer_q_dim(i), shape.layer_kv_dim(i), shape.layer_head_dim(i)
        inter = shape.intermediate_sizes[i]
        kv_mats = (1 if shape.layer_kv_equals_value(i) else 2) if owner else 0
        lin += 3 * h * inter + 2 * h * q + kv_mats * h * kv + (2 * h * p if p else 0)
        count += 3 + 2 + kv_mats + (2 if p else 0)
        largest = max(largest, h * inter, h * q)
        # input, post-attention, pre/post feed-forward norms (+ post per-layer-input norm); q_norm, k_norm
        other += 4 * h + (h if p else 0) + d + (d if owner else 0)
    parts = decoder_parts(shape, PartParams(lin, other, count, largest))
    proj_lin = h * L * p + shape.audio_output_dims * h + shape.vision_hidden * h
    proj_count = (1 if p else 0) + (1 if shape.audio_output_dims else 0) + (1 if shape.vision_hidden else 0)
    parts["projections"] = PartParams(proj_lin, h + p, proj_count, max(h * L * p, shape.audio_output_dims * h))
    ha = shape.audio_hidden
    if shape.audio_layers:
        block_lin, c0, c1 = conformer_params(shape)
        sscp_other = sscp_conv_params(c0, c1)  # two 3x3 convolutions without bias + their LayerNorms
        sscp_lin = (c0 // 4) * c1 * ha  # `Gemma4AudioSubSampleConvProjection.input_proj_linear`
        a_lin = block_lin + sscp_lin + ha * shape.audio_output_dims
        per_block_other = 4 * ha + 2 * ha + 3 * ha + ha // max(shape.audio_heads, 1) + ha * shape.audio_conv_kernel
        a_other = shape.audio_layers * per_block_other + sscp_other + shape.audio_output_dims
        parts["audio_encoder"] = PartParams(a_lin, a_other, shape.audio_layers * 11 + 2, 4 * ha * ha)
    else:
        parts["audio_encoder"] = PartParams(0, 0)
    parts["vision_tower"] = PartParams(0, shape.vision_params)
    return parts


GEMMA4 = gemma_family(
    name="gemma4",
    label="Gemma 4",
    models=MODELS,
    shipped_configs=SHIPPED_CONFIGS,
    licence_url="",
    max_audio_s=MAX_AUDIO_S,
    turn_start="<|turn>",
    turn_end="<turn|>",
    audio_blocks="layers",
    audio_lora_projections=AUDIO_LORA_PROJECTIONS,
    audio_lora_suffix=AUDIO_LORA_SUFFIX,
    functions=(audio_tokens, audio_span, shape, part_params, make_tiny, model_class),
    gguf_audio=True,
    estimate_only=ESTIMATE_ONLY,
    thought_channel=("<|channel>", "<channel|>"),
)
"""Gemma 4 E2B / E4B (`google/gemma-4-E2B-it`, Apache 2.0, not gated)."""
