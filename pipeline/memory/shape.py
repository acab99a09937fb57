"""What the model is: a Gemma 3n `config.json` read into a `ModelShape`, and its parameters per part.

`load_model_config(model)` finds the config (shipped copies of the E2B / E4B configs in `assets/`,
so no download is needed, or a local folder); `model_shape(config)` keeps the numbers the memory
model needs; `part_params(shape)` counts parameters per part of the model (text decoder, token and
per-layer embeddings, projections, audio encoder, vision tower), following the module constructors
of transformers' `modeling_gemma3n.py`. Pure: no torch, except `vision_tower_params` for a timm
architecture not in `VISION_TOWER_PARAMS`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from pipeline.errors import ModelLoadError

ASSETS_DIR = Path(__file__).resolve().parents[2] / "assets"
SHIPPED_CONFIGS = {
    "google/gemma-3n-E2B-it": ASSETS_DIR / "gemma-3n-E2B-it.config.json",
    "google/gemma-3n-E4B-it": ASSETS_DIR / "gemma-3n-E4B-it.config.json",
    "google/gemma-3n-E2B": ASSETS_DIR / "gemma-3n-E2B-it.config.json",
    "google/gemma-3n-E4B": ASSETS_DIR / "gemma-3n-E4B-it.config.json",
}

# Parameters of timm vision towers named by `vision_config.architecture`, counted by building each on
# the meta device with timm 1.x (`timm.create_model(arch, pretrained=False)`): a conv net's size is
# not derivable from the Gemma config, which only names the architecture.
VISION_TOWER_PARAMS = {"mobilenetv5_300m_enc": 294_126_912}


# --------------------------------------------------------------------------------------------------
# Reading config.json


@dataclass(frozen=True)
class ModelShape:
    """The numbers of a Gemma 3n `config.json` the memory model needs (read by `model_shape`)."""

    vocab_size: int
    hidden_size: int
    intermediate_sizes: tuple[int, ...]
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    num_kv_shared_layers: int
    vocab_size_per_layer_input: int
    hidden_size_per_layer_input: int
    altup_num_inputs: int
    laurel_rank: int
    sparse_layers: int
    audio_hidden: int
    audio_layers: int
    audio_heads: int
    audio_conv_kernel: int
    audio_sscp_channels: tuple[int, ...]
    audio_input_feat: int
    audio_vocab: int
    audio_reduction: int
    vision_hidden: int
    vision_vocab: int
    vision_architecture: str
    tie_word_embeddings: bool
    dtype: str

    @property
    def q_dim(self) -> int:
        return self.num_heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.num_kv_heads * self.head_dim

    @property
    def kv_owner_layers(self) -> int:
        """Layers with their own k_proj/v_proj (the last `num_kv_shared_layers` reuse earlier K/V)."""
        return self.num_layers - self.num_kv_shared_layers


def model_shape(model_config: dict) -> ModelShape:
    """Read a Gemma 3n `config.json` dict (multimodal, with `text_config`) into a `ModelShape`.

    Raises `ModelLoadError` when the dict is not a Gemma 3n config (names the missing key).
    """
    if not isinstance(model_config, dict):
        raise ModelLoadError(f"Model config must be a dict from config.json, got {type(model_config).__name__}.")
    text = model_config.get("text_config", model_config)
    audio = model_config.get("audio_config") or {}
    vision = model_config.get("vision_config") or {}
    try:
        n_layers = int(text["num_hidden_layers"])
        inter = text["intermediate_size"]
        inter = tuple(int(x) for x in inter) if isinstance(inter, (list, tuple)) else (int(inter),) * n_layers
        sparsity = text.get("activation_sparsity_pattern") or [0.0] * n_layers
        if not isinstance(sparsity, (list, tuple)):
            sparsity = [float(sparsity)] * n_layers
        channels = audio.get("sscp_conv_channel_size", [128, 32])
        return ModelShape(
            vocab_size=int(text["vocab_size"]),
            hidden_size=int(text["hidden_size"]),
            intermediate_sizes=inter,
            num_layers=n_layers,
            num_heads=int(text["num_attention_heads"]),
            num_kv_heads=int(text["num_key_value_heads"]),
            head_dim=int(text.get("head_dim") or int(text["hidden_size"]) // int(text["num_attention_heads"])),
            num_kv_shared_layers=int(text.get("num_kv_shared_layers", 0)),
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
            tie_word_embeddings=bool(model_config.get("tie_word_embeddings", text.get("tie_word_embeddings", True))),
            dtype=str(model_config.get("dtype") or model_config.get("torch_dtype") or "bfloat16"),
        )
    except KeyError as missing:
        raise ModelLoadError(
            f"config.json is not a Gemma 3n config: key {missing} is missing from its text_config. "
            "Give google/gemma-3n-E2B-it, google/gemma-3n-E4B-it or a folder with a Gemma 3n config.json."
        ) from None


def load_model_config(model: str) -> dict:
    """The config.json dict of `model`: a shipped hub id (assets/), or a local folder / file.

    Raises `ModelLoadError` naming the path and the fix when neither exists.
    """
    if model in SHIPPED_CONFIGS:
        return json.loads(SHIPPED_CONFIGS[model].read_text(encoding="utf-8"))
    path = Path(model).expanduser()
    if path.is_dir():
        path = path / "config.json"
    if path.is_file():
        try:
            return json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as error:
            raise ModelLoadError(f"{path} is not valid JSON ({error}); re-download the model's config.json.") from None
    raise ModelLoadError(
        f"No config.json for `{model}`: it is neither {', '.join(sorted(SHIPPED_CONFIGS))} "
        f"nor a folder holding config.json. Pass one of those ids or a local model folder."
    )


# --------------------------------------------------------------------------------------------------
# Parameter counts (from the module definitions in transformers/models/gemma3n/modeling_gemma3n.py)


@dataclass(frozen=True)
class PartParams:
    """Parameters of one part of the model: `linear` (quantizable nn.Linear weights, with the
    number of such matrices and the largest one) and `other` (embeddings, norms, convolutions)."""

    linear: int
    other: int
    linear_count: int = 0
    largest_linear: int = 0

    @property
    def total(self) -> int:
        return self.linear + self.other


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
        # bf16 (pipeline.model.loading.QUANTIZATION_SKIP_MODULES: Gemma 3n clamps them in place).
        other += n * n + n * n * n + h * n
        # 5 hidden norms + laurel norm + AltUp router norm + correct_output_scale, q_norm, k_norm
        other += 8 * h + d + (d if owner else 0)
    parts = {
        "text_decoder": PartParams(lin, other, count, largest),
        "token_embedding": PartParams(0, shape.vocab_size * h),
        "per_layer_embedding": PartParams(0, shape.vocab_size_per_layer_input * L * p),
    }
    proj_lin = 2 * (n - 1) * h * h + h * L * p
    proj_lin += shape.audio_hidden * h + shape.vision_hidden * h
    proj_other = h + p  # final norm, per_layer_projection_norm
    proj_other += shape.audio_vocab * shape.audio_hidden + 2 * shape.audio_hidden
    proj_other += shape.vision_vocab * shape.vision_hidden + 2 * shape.vision_hidden
    parts["projections"] = PartParams(proj_lin, proj_other, 2 * (n - 1) + 3, max(h * L * p, h * h))
    ha = shape.audio_hidden
    c0, c1 = (list(shape.audio_sscp_channels) + [32, 32])[:2]
    sscp_conv = 9 * 1 * c0 + c0 + 9 * c0 * c1 + c1  # two 3x3 convs + cumulative group norms
    sscp_lin = c1 * (shape.audio_input_feat // 4) * ha
    # per block: 2 feed-forwards (8 h^2 each), q/k/v/post/relative pos_proj (5 h^2), lconv (3 h^2)
    a_lin = shape.audio_layers * 24 * ha * ha + sscp_lin
    a_other = shape.audio_layers * (9 * ha + ha * shape.audio_conv_kernel + ha // max(shape.audio_heads, 1)) + sscp_conv
    parts["audio_encoder"] = PartParams(a_lin, a_other, shape.audio_layers * 10 + 1, 4 * ha * ha)
    parts["vision_tower"] = PartParams(0, vision_tower_params(shape.vision_architecture))
    return parts


def vision_tower_params(architecture: str) -> int:
    """Parameters of the timm vision tower `architecture` (table above; else built on the meta
    device with timm if it is installed; else 0, with the estimate's notes saying so)."""
    if architecture in VISION_TOWER_PARAMS:
        return VISION_TOWER_PARAMS[architecture]
    try:  # not pure, but only for architectures we have not tabulated (e.g. test models)
        import timm  # noqa: PLC0415
        import torch  # noqa: PLC0415

        with torch.device("meta"):
            tower = timm.create_model(architecture, pretrained=False, num_classes=0)
        count = sum(p.numel() for p in tower.parameters())
        VISION_TOWER_PARAMS[architecture] = count
        return count
    except Exception:  # noqa: BLE001 - unknown architecture: counted as 0 and reported
        return 0
