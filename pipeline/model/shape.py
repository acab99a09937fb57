"""What a model is made of, in the numbers the memory model needs: `ModelShape` (read from a
`config.json` by the model's family) and `PartParams` (parameters per part of the model).

Pure data: no torch, except `vision_tower_params` for a timm architecture not in `VISION_TOWER_PARAMS`.
"""

from __future__ import annotations

from dataclasses import dataclass

# Parameters of timm vision towers named by `vision_config.architecture`, counted by building each on
# the meta device with timm 1.x (`timm.create_model(arch, pretrained=False)`): a conv net's size is
# not derivable from the Gemma config, which only names the architecture.
VISION_TOWER_PARAMS = {"mobilenetv5_300m_enc": 294_126_912}


@dataclass(frozen=True)
class ModelShape:
    """The numbers of a checkpoint's `config.json` the memory model needs, read by its family
    (`ModelFamily.shape`, through `pipeline.model.catalog.model_shape`). Sizes are counts (layers,
    heads) or widths in elements; `family` names the `ModelFamily` that read it."""

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
    family: str = "gemma3n"
    layer_head_dims: tuple[int, ...] = ()
    """Head size of each decoder layer (Gemma 4: `global_head_dim` on full-attention layers); empty:
    `head_dim` everywhere (Gemma 3n)."""
    layer_kv_heads: tuple[int, ...] = ()
    """KV heads of each decoder layer; empty: `num_kv_heads` everywhere."""
    hidden_norms: int = 8
    """RMSNorms on the hidden width per decoder layer, each saving its fp32 input for backward
    (Gemma 3n: 8 with AltUp's router norm and LAuReL's; Gemma 4: 5)."""
    audio_output_dims: int = 0
    """Width of the audio encoder's output projection (Gemma 4's `output_proj_dims`; 0: none, Gemma 3n)."""
    vision_params: int = 0
    """Parameters of a vision tower counted from the config (Gemma 4); Gemma 3n's timm tower is looked
    up by `vision_architecture` instead."""
    kv_equals_value: tuple[bool, ...] = ()
    """Per layer, True where the key projection is reused as the value (Gemma 4 `attention_k_eq_v` on
    full-attention layers); empty: never."""

    @property
    def q_dim(self) -> int:
        return self.num_heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.num_kv_heads * self.head_dim

    def layer_head_dim(self, layer: int) -> int:
        """Head size of decoder layer `layer`."""
        return self.layer_head_dims[layer] if self.layer_head_dims else self.head_dim

    def layer_q_dim(self, layer: int) -> int:
        """Width of layer `layer`'s queries (heads x its head size)."""
        return self.num_heads * self.layer_head_dim(layer)

    def layer_kv_dim(self, layer: int) -> int:
        """Width of layer `layer`'s keys (and values): its KV heads x its head size."""
        heads = self.layer_kv_heads[layer] if self.layer_kv_heads else self.num_kv_heads
        return heads * self.layer_head_dim(layer)

    def layer_kv_heads_of(self, layer: int) -> int:
        """KV heads of layer `layer`."""
        return self.layer_kv_heads[layer] if self.layer_kv_heads else self.num_kv_heads

    def layer_kv_equals_value(self, layer: int) -> bool:
        """Whether layer `layer` has no v_proj (its keys are its values)."""
        return bool(self.kv_equals_value and self.kv_equals_value[layer])

    @property
    def residual_streams(self) -> int:
        """Copies of the hidden state each layer carries: AltUp's `altup_num_inputs` (Gemma 3n: 4), else 1."""
        return max(1, self.altup_num_inputs)

    @property
    def kv_owner_layers(self) -> int:
        """Layers with their own k_proj/v_proj (the last `num_kv_shared_layers` reuse earlier K/V)."""
        return self.num_layers - self.num_kv_shared_layers


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
