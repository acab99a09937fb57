"""Will it fit? Peak memory of a Gemma 3n LoRA fine-tune, per component, before the run starts.

`estimate_memory(model_config, config, lengths, device)` is a pure function of the model's
`config.json` dict, the `TrainConfig`, the dataset's length statistics and the device kind: it loads
no weights and does not import torch. Every term's docstring gives its formula and its source
(the transformers / peft / bitsandbytes / PyTorch source it follows, or our own measurement).

The peak is the largest of four phases of a training step (steady state: the optimizer states
exist and, with gradient accumulation, the LoRA gradients of the previous micro-batch are alive):
  * `audio`: the frozen audio encoder's forward on the longest clip (before the decoder runs),
  * `loss`: the start of backward, when every tensor saved for backward, the logits and the fp32
    cross-entropy gradient are alive at once (logits only at the answer's positions, as the
    training loss `pipeline.training.train.answer_loss` computes them),
  * `layer_backward`: a decoder layer's backward (with checkpointing, one layer recomputed),
  * `optimizer`: the optimizer step's temporaries,
plus a per-device runtime overhead. `device_memory(device)` gives the usable budget,
`verdict(...)` says fits / tight / does not fit, `suggest_fits(...)` searches settings that fit and
`measure_peak(...)` runs one real step in a child process (`pipeline.memory.probe`).

What this module deliberately does not do: model the KV cache of generation (inference is not
training), multi-GPU sharding, or CUDA allocator fragmentation beyond a measured constant.

Command line: `python -m pipeline estimate --workspace WS --model M [--device ...] [--memory-gb N]
[training flags] [--measure] [--json]`.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from pipeline.config import TrainConfig, add_train_arguments, default_quantization
from pipeline.errors import ConfigError, DatasetError, ModelLoadError, PipelineError

GIB = 1024**3
MIB = 1024**2
ASSETS_DIR = Path(__file__).resolve().parents[1] / "assets"
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

# Verdict thresholds as fractions of the usable budget. Below FIT_FRACTION the run "fits" with a
# margin larger than this model's worst measured error (see benchmarks/memory_accuracy.py);
# between FIT_FRACTION and 1.0 it is "tight"; above 1.0 it "does not fit".
FIT_FRACTION = 0.90

# Runtime overhead per device (bytes) that is not a tensor of ours.
# cpu: measured here (torch 2.14.1, transformers 5.24, peft 0.21, bitsandbytes 0.50, Linux x86-64):
#      the resident memory of a Python process after importing them is 870 MiB (the probe's
#      `baseline_rss_bytes`, 912 MB on every run of benchmarks/memory_accuracy.py), and the model's
#      Python objects, peft wrappers, the Trainer and oneDNN kernel caches add ~75 MiB (peak RSS of a
#      step of the tiny model, 958-975 MiB, minus its ~20 MiB of tensors).
# cuda: CUDA context + cuBLAS/cuDNN workspaces + caching-allocator slack. Public reports for
#      PyTorch 2.x on Ampere/Hopper put the context at 0.4-0.6 GiB; not measured in this session
#      (no GPU was lent): 0.75 GiB includes allocator block rounding.
# mps: Metal command buffers and MPSGraph caches; not measured here (no Mac): 0.5 GiB assumed.
CPU_IMPORT_BASELINE_BYTES = 870 * MIB
CPU_RUNTIME_OBJECTS_BYTES = 75 * MIB
RUNTIME_OVERHEAD_BYTES = {
    "cpu": CPU_IMPORT_BASELINE_BYTES + CPU_RUNTIME_OBJECTS_BYTES,
    "cuda": int(0.75 * GIB),
    "mps": int(0.5 * GIB),
}
RUNTIME_OVERHEAD_NOTE = {
    "cpu": "measured: RSS of Python + torch/transformers/peft (870 MiB) and the model's objects (75 MiB)",
    "cuda": "assumed from public reports of CUDA context + allocator slack (no GPU measured here)",
    "mps": "assumed (no Mac measured here)",
}

# Model-level activation constants (bytes per token per hidden unit, in compute-dtype units),
# measured with torch.autograd.graph.saved_tensors_hooks on random Gemma 3n configs (hidden 256 and
# 512): the AltUp un-embedding's magnitude normalisation and the final RMSNorm save ~12 h elements
# per token; with enable_input_require_grads (gradient checkpointing) the AltUp embedding
# projections also save theirs (~9 h more).
FINAL_SAVED_H_ELEMS = 12
INPUT_GRAD_SAVED_H_ELEMS = 9

# Backward working set of one decoder layer (gradients of its largest intermediates alive while
# that layer runs backward), in elements per token: 3 of the MLP width (d act, d up, d gate) and
# 2 of the AltUp stack (incoming and outgoing gradient). From the autograd formulas of the MLP
# (Gemma3nTextMLP.forward) and AltUp.correct; calibrated on CPU (benchmarks/memory_accuracy.py).
BACKWARD_MLP_ELEMS = 3
BACKWARD_STACK_COPIES = 2
# Eager attention's backward adds, at the step's peak, this many bytes per (head, query, key)
# probability beyond the probabilities each layer saved (fp32 softmax + bf16 copy, counted in
# `layer_saved_bytes_per_token`). The autograd formulas would allow up to 10 (fp32 softmax
# gradient, its input copy, the bf16 gradient), but they are never all alive at the peak, because by
# the time attention runs backward the layer's MLP tensors are freed. Measured: second difference of
# peak RSS over 1,024 / 2,048 / 3,072 tokens on the mid-size model without checkpointing with
# MALLOC_MMAP_THRESHOLD_ fixed (RSS = live tensors): 209 B per token^2 against 196 for the saved
# probabilities and masks, i.e. 3.25 per probability. With checkpointing the same sweep measured 26
# B per token^2 where this model gives 40 (+6 % at 3,072 tokens, +3 % at 2,048).
EAGER_BACKWARD_BYTES_PER_PROB = 3

# Frozen audio encoder transient: bytes per subsampled frame per audio hidden unit, plus a fixed
# part. The conformer (Gemma3nAudioConformerBlock) runs with no graph when frozen, so only one
# block's intermediates (chunked local attention with relative positions, the 4h feed-forward,
# fp32 norms) are alive. Measured here on E2B's 12-block, h=1536 conformer in bf16 (peak RSS over
# the forward): 110 MiB for a 10 s clip (250 frames), 292 MiB for 30 s (750 frames).
AUDIO_FROZEN_BYTES_PER_FRAME_PER_H = 248
AUDIO_FROZEN_FIXED_BYTES = 19 * 1024**2
# With LoRA inside the conformer every block keeps its saved tensors. The LoRA part follows the
# wrapped Linears (inputs q/k/v/post/linear_start/linear_end: h each, two feed-forwards: h and 4h,
# so 16 h per frame per block at (adapter + mask) bytes); the frozen rest (fp32 norm inputs,
# attention blocks, conv) was measured with saved_tensors_hooks on E2B's conformer: 86 bytes per
# frame per h per block (2.83 GiB in all for a 30 s clip with r=16 and CPU dropout masks).
AUDIO_LORA_INPUT_H = 16
AUDIO_BASE_SAVED_BYTES_PER_FRAME_PER_H = 86
# CPU only: glibc malloc keeps freed heap memory resident. Its mmap threshold rises to the size of
# the largest freed mmapped chunk (up to 32 MiB, glibc malloc.c `DEFAULT_MMAP_THRESHOLD_MAX`), so
# activation-sized tensors below that are served from the heap, and memory freed in the middle of
# the heap stays resident. Retained bytes beyond live tensors at the peak were measured as
# (peak RSS with glibc's default) - (peak RSS with MALLOC_MMAP_THRESHOLD_=65536, where RSS follows
# live tensors and the tensor-level estimate is within -6..+1 %) on benchmarks/memory_accuracy.py's
# grid (tiny, mid-size; 2-5 runs per row) and on full-size E2B (bf16, 256 tokens, with and without
# checkpointing; 4-bit, 512 tokens, a 30 s clip). Per token of the micro-batch they follow
#     a x I + b x L x h    (I = widest MLP, L = decoder layers, h = hidden size)
# one layer's MLP-width temporaries plus hidden-width temporaries left behind by every layer, with
# (a, b) = (133, 54) bytes with gradient checkpointing (each layer's intermediates are freed at once
# and reused by the next layer) and (45, 128) without; least squares weighted by 1 / measured peak.
# A term in I alone fitted the small models as well but left E2B 8-13 % low (its L x h / I is 7.5x
# the small models'). Run to run the retained heap varies by +-0.1-0.3 GiB (thread timing), which the
# benchmark shows as a range. Not modelled: a tensor above 32 MiB (B x T x I x 2 bytes > 32 MiB,
# i.e. over 2,048 tokens per micro-batch on E2B) is always mmapped and never retained, so very long
# rows there are overestimated.
CPU_HEAP_RETENTION_PER_TOKEN = {True: (133, 54), False: (45, 128)}
"""gradient_checkpointing -> (bytes per MLP unit, bytes per hidden unit per layer), per token."""
MEL_FRAMES_PER_SECOND = 100  # Gemma3nAudioFeatureExtractor: hop 160 samples at 16 kHz.
MAX_CLIP_S = 30.0  # the feature extractor truncates at 480,000 samples.
# Supervised (answer) tokens per row assumed when no dataset is built: the training loss projects
# onto the vocabulary only at positions whose next token is supervised (`pipeline.training.train.answer_loss`),
# so the logits scale with the answer, not the row. 256 tokens is a conservative bound: the answer
# template of `pipeline.data.feedback` (three short lines) runs ~40-80 tokens on speechocean762-mini;
# a row shorter than 256 tokens is assumed to be all answer (min(seq_len, 256)).
DEFAULT_ANSWER_TOKENS = 256


# --------------------------------------------------------------------------------------------------
# Inputs


@dataclass
class LengthStats:
    """Length statistics of the built dataset (the estimate needs the worst case, not the mean).

    Attributes:
        longest_tokens: tokens of the longest row (text + ~192 audio positions), int.
        longest_clip_s: seconds of the longest clip (the audio encoder's worst case), float.
        row_tokens: tokens of every train row, so a lower `max_length` can count the rows it would
            exclude; empty when unknown.
        source: where the figures came from (shown to the user).
        answer_tokens: supervised tokens of each train row (the answer + its `<end_of_turn>`, as
            `pipeline.training.collate.build_labels` supervises), `answer_tokens[i]` belonging to the row of
            `row_tokens[i]`; empty when unknown (datasets built before it was recorded).
        longest_answer_tokens: the longest answer when only the maximum is known (0: unknown).
        tokenizer_model: the model whose tokenizer counted the tokens (the build report's), if known.
    """

    longest_tokens: int
    longest_clip_s: float = 0.0
    row_tokens: list[int] = field(default_factory=list)
    source: str = "given"
    answer_tokens: list[int] = field(default_factory=list)
    longest_answer_tokens: int = 0
    tokenizer_model: str | None = None

    @property
    def num_rows(self) -> int:
        return len(self.row_tokens)

    def kept_longest(self, max_length: int) -> int:
        """Longest row that `max_length` keeps (rows longer are excluded, never truncated)."""
        kept = [n for n in self.row_tokens if n <= max_length]
        if kept:
            return max(kept)
        if self.row_tokens:
            return 0
        return min(self.longest_tokens, max_length)

    def excluded(self, max_length: int) -> int:
        """Number of rows longer than `max_length`."""
        return sum(1 for n in self.row_tokens if n > max_length)

    def answers_known(self) -> bool:
        """Whether the supervised lengths come from the data (else `DEFAULT_ANSWER_TOKENS` is assumed)."""
        return bool(self.answer_tokens) or self.longest_answer_tokens > 0

    def kept_longest_answer(self, max_length: int) -> int:
        """Supervised tokens of the longest answer among the rows `max_length` keeps, at most the
        longest kept row. Unknown answers: min(longest kept row, `DEFAULT_ANSWER_TOKENS`)."""
        seq_len = self.kept_longest(max_length)
        if self.answer_tokens and len(self.answer_tokens) == len(self.row_tokens):
            kept = [a for a, n in zip(self.answer_tokens, self.row_tokens) if n <= max_length]
            return min(max(kept), seq_len) if kept else 0
        longest = max(self.answer_tokens) if self.answer_tokens else self.longest_answer_tokens
        if longest > 0:
            return min(longest, seq_len)
        return min(seq_len, DEFAULT_ANSWER_TOKENS)


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
        # bf16 (pipeline.training.model.QUANTIZATION_SKIP_MODULES: Gemma 3n clamps them in place).
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


# --------------------------------------------------------------------------------------------------
# Terms


def dtype_bytes(name: str) -> int:
    """Bytes per element of a torch dtype name (`bfloat16` 2, `float32` 4, ...)."""
    name = name.replace("torch.", "")
    return {"float32": 4, "float": 4, "float16": 2, "half": 2, "bfloat16": 2, "int8": 1, "uint8": 1}.get(name, 2)


def nf4_bytes(numel: int, *, double_quant: bool = True, blocksize: int = 64) -> float:
    """Bytes of an NF4-quantized weight of `numel` elements (bitsandbytes `Params4bit`).

    Formula: numel/2 (two 4-bit codes per byte) + absmax per block of 64: fp32 (4 bytes) without
    double quantization; with it (QLoRA, Dettmers et al. 2023, sec. 3) the absmax is itself
    quantized to 8 bits (1 byte) in blocks of 256 with one fp32 absmax each. The per-tensor code
    tables (16 + 256 fp32) are counted by `weights` per matrix.
    """
    blocks = math.ceil(numel / blocksize)
    if double_quant:
        return numel / 2 + blocks + 4 * math.ceil(blocks / 256)
    return numel / 2 + 4 * blocks


NF4_TABLE_BYTES = 16 * 4 + 256 * 4 + 8  # nf4 code, nested code table, offset (bitsandbytes QuantState)


def int8_bytes(numel: int, out_features: int) -> float:
    """Bytes of an LLM.int8 weight (bitsandbytes `Int8Params`): 1 byte per element + one fp32
    row scale (SCB) per output row (Dettmers et al. 2022, sec. 3.4)."""
    return numel + 4 * out_features


# Parts that the loader keeps unquantized (FIELD_NOTES "Quantization": the skip list
# model.audio_tower, model.vision_tower, model.embed_audio, model.embed_vision, lm_head; embeddings
# are never quantized by any backend). 8-bit also skips per_layer_model_projection (in-place op bug).
QUANTIZED_PARTS = ("text_decoder", "projections")


@dataclass
class EstimateOptions:
    """Settings the memory model needs beyond `TrainConfig`.

    Attributes:
        attn_implementation: `eager` (the training default for Gemma 3n, FIELD_NOTES) or `sdpa`.
        keep_logits: the training loop keeps `outputs.logits` alive during backward. False for
            our trainer: `transformers.Trainer.compute_loss` returns only the loss, so the
            returned logits are freed before `backward`.
        adapter_dtype: dtype of the LoRA weights (peft's `autocast_adapter_dtype=True` makes them
            float32 on a bf16 base).
        cpu_heap_retention: count the freed heap glibc keeps resident on CPU (`allocator_retention`);
            False for a process whose RSS follows its live tensors (MALLOC_MMAP_THRESHOLD_=65536,
            the benchmark's `--malloc-fixed` diagnostic).
    """

    attn_implementation: str = "eager"
    keep_logits: bool = False
    adapter_dtype: str = "float32"
    cpu_heap_retention: bool = True

    def to_dict(self) -> dict:
        return asdict(self)


def compute_dtype(shape: ModelShape, config: TrainConfig, device: str) -> str:
    """Dtype of the frozen weights and activations: bf16 on every device (FIELD_NOTES: bf16 or fp32,
    never fp16; bnb 4-bit uses bf16 compute). A config stored in float32 still loads as bf16."""
    return "bfloat16"


def weights(shape: ModelShape, config: TrainConfig, device: str, options: EstimateOptions) -> dict[str, int]:
    """Bytes of the frozen weights on the device, per part.

    Formula per part: non-Linear params x 2 (bf16) + Linear params x (2 for bf16 | NF4 bytes from
    `nf4_bytes` + code tables | `int8_bytes`) for the parts the quantizer touches
    (`QUANTIZED_PARTS`; the skip list keeps audio/vision towers, their embedders and lm_head in bf16).
    The token embedding is counted once (tied to lm_head). Vision tower: 0 with
    `config.vision_tower` False (`pipeline.training.model.drop_vision_tower`). Per-layer embeddings: 0 on the
    device with `config.ple_on_cpu` on CUDA (host RAM, `pipeline.training.model.keep_per_layer_embeddings_on_host`).
    On CPU without quantization transformers memory-maps the bf16 checkpoint, and the per-layer
    table is only read row by row (plus the kernel's read-ahead), so part of it may never become
    resident; it is counted in full (the safe side: those file-backed pages are reclaimable).
    Source: transformers `bitsandbytes` quantizer (replaces nn.Linear outside the skip list) and
    bitsandbytes `Params4bit` / `Int8Params`. Check: E2B bf16 = 10.09 GiB (FIELD_NOTES ~10.1 GiB).
    """
    parts = part_params(shape)
    wb = dtype_bytes(compute_dtype(shape, config, device))
    out: dict[str, int] = {}
    for name, pp in parts.items():
        lin_bytes = pp.linear * wb
        if name in QUANTIZED_PARTS and config.quantization == "4bit":
            lin_bytes = nf4_bytes(pp.linear) + pp.linear_count * NF4_TABLE_BYTES
        elif name in QUANTIZED_PARTS and config.quantization == "8bit":
            skipped = shape.hidden_size * shape.num_layers * shape.hidden_size_per_layer_input if name == "projections" else 0
            # out_features summed over matrices ~ params / in_features (h for most)
            lin_bytes = int8_bytes(pp.linear - skipped, (pp.linear - skipped) // shape.hidden_size) + skipped * wb
        total = int(lin_bytes + pp.other * wb)
        if name == "vision_tower" and not config.vision_tower:
            total = 0
        if name == "per_layer_embedding" and ple_on_host(config, device):
            total = 0
        out[f"weights_{name}"] = total
    return out


def ple_on_host(config: TrainConfig, device: str) -> bool:
    """Whether the run keeps the per-layer embedding table in host RAM (`ple_on_cpu`, CUDA only)."""
    return config.ple_on_cpu and device == "cuda"


def load_transient(shape: ModelShape, config: TrainConfig, device: str) -> int:
    """Bytes on the device while loading that the step no longer holds: with `ple_on_cpu` on CUDA
    the per-layer embedding table (bf16) is loaded onto the GPU with the rest, then moved to host
    RAM (`pipeline.training.model.load_model`), so the `load` phase holds it on top of the weights. 0 otherwise."""
    if not ple_on_host(config, device):
        return 0
    return part_params(shape)["per_layer_embedding"].total * dtype_bytes(compute_dtype(shape, config, device))


def lora_targets(shape: ModelShape, targets: str) -> list[tuple[int, int]]:
    """(in_features, out_features) of every Linear LoRA wraps.

    `language`: q/k/v/o and gate/up/down of every text decoder layer (k/v only where the layer owns
    them). `language+audio` adds the conformer's q/k/v/post, both feed-forwards' two Linears and the
    light-conv's linear_start/linear_end. (Regex in pipeline.training.model; FIELD_NOTES "LoRA targets".)
    """
    h, q, kv = shape.hidden_size, shape.q_dim, shape.kv_dim
    mats: list[tuple[int, int]] = []
    for i in range(shape.num_layers):
        inter = shape.intermediate_sizes[i]
        mats += [(h, q), (q, h), (h, inter), (h, inter), (inter, h)]
        if i < shape.kv_owner_layers:
            mats += [(h, kv), (h, kv)]
    if targets == "language+audio":
        ha = shape.audio_hidden
        for _ in range(shape.audio_layers):
            mats += [(ha, ha)] * 4 + [(ha, 4 * ha), (4 * ha, ha)] * 2 + [(ha, 2 * ha), (ha, ha)]
    return mats


def lora_params(shape: ModelShape, config: TrainConfig) -> int:
    """Trainable LoRA parameters: sum over wrapped Linears of r * (in + out) (Hu et al. 2021, LoRA:
    A is r x in, B is out x r). E2B, r=16, language targets: ~19.7 M (FIELD_NOTES ~20 M)."""
    return sum(config.lora_rank * (i + o) for i, o in lora_targets(shape, config.lora_targets))


def trainable_state(shape: ModelShape, config: TrainConfig, options: EstimateOptions) -> dict[str, int]:
    """Bytes of LoRA weights, their gradients, optimizer states and fp32 master copies.

    * `lora_params` = P x adapter bytes (fp32: peft upcasts adapters on a bf16 base).
    * `lora_grads` = P x adapter bytes (alive between micro-batches of gradient accumulation).
    * `optimizer_states`: `adamw` 2 fp32 moments = 8 P (torch.optim.AdamW); `adamw_8bit`
      (bitsandbytes AdamW8bit) 2 bytes per element + fp32 absmax per 256-block for tensors of at least
      4,096 elements (`min_8bit_size`), 8 bytes per element below that; `adafactor` (transformers
      Adafactor, beta1=None): factored second moment, (rows + cols) x 4 bytes per matrix.
    * `lora_master_fp32`: 4 P when adapters are kept in bf16/fp16 (mixed precision keeps an fp32
      master copy); 0 with fp32 adapters (they are their own master copy).
    """
    r = config.lora_rank
    ab = dtype_bytes(options.adapter_dtype)
    mats = []
    for i, o in lora_targets(shape, config.lora_targets):
        mats += [(r, i), (o, r)]
    numel = sum(a * b for a, b in mats)
    if config.optimizer == "adamw":
        opt = 8 * numel
    elif config.optimizer == "adamw_8bit":
        opt = 0
        for a, b in mats:
            n = a * b
            opt += 2 * n + 2 * 4 * math.ceil(n / 256) if n >= 4096 else 8 * n
    else:
        opt = sum(4 * (a + b) for a, b in mats)
    master = 4 * numel if ab < 4 else 0
    return {"lora_params": numel * ab, "lora_grads": numel * ab, "optimizer_states": opt, "lora_master_fp32": master}


def dropout_mask_bytes(config: TrainConfig, device: str, options: EstimateOptions) -> int:
    """Bytes per element of the LoRA dropout mask saved for backward: 0 without dropout; on CPU
    ATen's non-fused dropout saves a noise tensor in the input dtype (fp32 adapters: 4 bytes,
    aten/src/ATen/native/Dropout.cpp `_dropout_impl`); on CUDA/MPS `native_dropout` saves a bool
    mask (1 byte)."""
    if config.lora_dropout <= 0.0:
        return 0
    return dtype_bytes(options.adapter_dtype) if device == "cpu" else 1


def layer_saved_bytes_per_token(
    shape: ModelShape, config: TrainConfig, device: str, options: EstimateOptions, layer: int, seq_len: int
) -> int:
    """Bytes per token saved for backward by decoder layer `layer` without checkpointing.

    Read off `Gemma3nTextDecoderLayer.forward` (transformers 5.24) and checked tensor by tensor with
    `torch.autograd.graph.saved_tensors_hooks` (within 0.5 % on hidden 256/512 configs):
      * 8 RMSNorms on the hidden width (input, laurel, post-attention, pre/post feed-forward,
        post per-layer-input, AltUp router twice) upcast to fp32 and save it: 8 (4h + 8);
        q_norm/k_norm/v_norm on the heads: 4 q + 8 heads, 4 kv + 8 kv_heads each (owners only);
      * AltUp predict/correct keep the n-stream stack twice: 2 n h c (+ tiny coefficient tensors);
      * LoRA on each wrapped Linear (fp32 adapters, peft `Linear.forward` casts x to fp32):
        (a + m) in + a r (a = adapter bytes, m = dropout mask bytes, see `dropout_mask_bytes`);
        frozen base Linears save no input (their weights need no gradient);
      * attention: SDPA saves q, k, v (kv heads; shared layers reuse another layer's k/v), its output
        and the logsumexp: 2 q c + 2 kv c + 4 heads; eager saves q and the repeated k and v
        (3 q c), the fp32 softmax and its bf16 copy: heads x seq x (4 + c) (the quadratic term);
      * MLP: gelu input, gelu output and up output, 3 I c (+ I c for the top-k sparse layers);
      * per-layer input gate: p c.
    c = compute dtype bytes (bf16: 2).
    """
    h, q, kv, p, n = shape.hidden_size, shape.q_dim, shape.kv_dim, shape.hidden_size_per_layer_input, shape.altup_num_inputs
    inter = shape.intermediate_sizes[layer]
    c = dtype_bytes(compute_dtype(shape, config, device))
    a = dtype_bytes(options.adapter_dtype)
    m = dropout_mask_bytes(config, device, options)
    r = config.lora_rank
    owner = layer < shape.kv_owner_layers
    total = 8 * (4 * h + 8) + (4 * q + 8 * shape.num_heads)
    if owner:
        total += 2 * (4 * kv + 8 * shape.num_kv_heads)
    total += 2 * n * h * c + 8 * n + n * n * c + n * c
    lora_in = [h, h, h, q, inter] + ([h, h] if owner else [])
    total += sum((a + m) * i + a * r for i in lora_in)
    if options.attn_implementation == "eager":
        total += 3 * q * c + shape.num_heads * seq_len * (4 + c)
    else:
        total += 2 * q * c + (2 * kv * c if owner else 0) + 4 * shape.num_heads
    total += 3 * inter * c + (inter * c if layer < shape.sparse_layers else 0)
    total += p * c
    return total


def activations(
    shape: ModelShape, config: TrainConfig, device: str, options: EstimateOptions, seq_len: int
) -> dict[str, int]:
    """Bytes of activations alive at the start of backward for one micro-batch of
    `batch_size` rows padded to `seq_len` (the longest kept row), excluding the logits.

    * `activations_decoder`: without checkpointing, the sum of `layer_saved_bytes_per_token` over
      the layers; with gradient checkpointing (use_reentrant=False) each layer keeps only its input,
      the n-stream AltUp stack, n h c per token (measured 2,048 B/token at h=256: exact).
      Plus, once: the per-layer inputs (L p c), the rotary tables and attention masks (2 masks of
      seq x seq x c per row, full and sliding), the final AltUp un-embedding + norm (~12 h c; with
      enable_input_require_grads under checkpointing, ~9 h c more for the embedding side).
    * `activations_recompute`: with checkpointing, backward re-runs one layer, whose saved tensors
      (the largest layer's `layer_saved_bytes_per_token`) are alive next to the checkpoints.
    * `backward_workspace`: gradients of one layer's largest intermediates while it runs backward,
      (3 I + 2 n h) c per token (Gemma3nTextMLP / AltUp autograd formulas), plus with eager
      attention the gradients of the (heads, seq, seq) probabilities at the peak, heads x seq x
      `EAGER_BACKWARD_BYTES_PER_PROB` (measured).
    All x batch_size x seq_len.
    """
    tokens = config.batch_size * seq_len
    c = dtype_bytes(compute_dtype(shape, config, device))
    h, L, p, n = shape.hidden_size, shape.num_layers, shape.hidden_size_per_layer_input, shape.altup_num_inputs
    per_layer = [layer_saved_bytes_per_token(shape, config, device, options, i, seq_len) for i in range(L)]
    once = L * p * c + FINAL_SAVED_H_ELEMS * h * c + 2 * seq_len * c + 2 * 2 * shape.head_dim * c
    if config.gradient_checkpointing:
        once += INPUT_GRAD_SAVED_H_ELEMS * h * c
        decoder = L * n * h * c + once
        recompute = max(per_layer)
    else:
        decoder = sum(per_layer) + once
        recompute = 0
    workspace = (BACKWARD_MLP_ELEMS * max(shape.intermediate_sizes) + BACKWARD_STACK_COPIES * n * h) * c
    if options.attn_implementation == "eager":
        workspace += shape.num_heads * seq_len * EAGER_BACKWARD_BYTES_PER_PROB
    return {
        "activations_decoder": decoder * tokens,
        "activations_recompute": recompute * tokens,
        "backward_workspace": workspace * tokens,
    }


def logits_loss(shape: ModelShape, config: TrainConfig, device: str, options: EstimateOptions, answer_tokens: int) -> int:
    """Bytes of the logits and loss tensors alive at their peak (start of backward), for
    batch_size x answer_tokens positions over the V-entry vocabulary (262,400 for Gemma 3n).

    Positions: `pipeline.training.train.answer_loss` passes `logits_to_keep` as a boolean (B, T) mask that
    keeps position t when label t+1 is supervised, so a row contributes exactly its supervised
    count (answer tokens + `<end_of_turn>`; the answer never starts at position 0) and the logits
    are (N, V) with N = the batch's supervised tokens <= batch_size x the longest answer, the bound
    used here (the training code's worst-case batch is the longest rows, whose answers may be
    shorter than the longest answer). Prompt and audio positions get no logits.

    Copies, following `Gemma3nForConditionalGeneration.forward` and `ForCausalLMLoss`
    (transformers/loss/loss_utils.py): lm_head output (bf16) / 30 -> tanh (saved for backward: c)
    -> x 30 (the returned `logits`: c, alive while the loop keeps `outputs`) -> `.float()` (fp32,
    freed after log_softmax) -> log_softmax output (saved: 4). At the start of backward the
    nll_loss gradient (4) and the log_softmax gradient (4) are alive with it:
    V x (c + 4 + 4 + 4 [+ c if logits kept]) per position = 14-16 bytes, 3.7-4.2 MB per token for
    E2B (FIELD_NOTES measured 1.6 MB saved + 2.1 MB fp32 gradient), per supervised position.
    The (N, h) gather of the final hidden states and its gradient are h-sized, counted nowhere.
    """
    c = dtype_bytes(compute_dtype(shape, config, device))
    per_pos = c + 12 + (c if options.keep_logits else 0)
    return shape.vocab_size * per_pos * config.batch_size * answer_tokens


def audio_encoder_bytes(
    shape: ModelShape, config: TrainConfig, device: str, options: EstimateOptions, clip_s: float
) -> dict[str, int]:
    """Audio encoder activations for the longest clip, per micro-batch.

    Frames after the 4x convolutional subsampling: F = ceil(min(clip, 30 s) x 100 / 4).
    * frozen (`language` targets): only one conformer block's intermediates are alive (no graph):
      `audio_encoder_transient` = batch x (248 x h_a x F + 19 MiB) (measured, see the constants).
    * with LoRA in the conformer (`language+audio`): every block keeps its saved tensors through
      the decoder's forward and backward (transformers' gradient checkpointing does not cover the
      conformer): `audio_encoder_saved` = batch x layers x F x h_a x (86 + 16 (a + m)) + LoRA
      rank terms, with a, m the adapter and dropout-mask bytes (`dropout_mask_bytes`).
    """
    if clip_s <= 0:
        return {"audio_encoder_transient": 0, "audio_encoder_saved": 0}
    frames = math.ceil(min(clip_s, MAX_CLIP_S) * MEL_FRAMES_PER_SECOND / 4)
    b = config.batch_size
    ha = shape.audio_hidden
    transient = (AUDIO_FROZEN_BYTES_PER_FRAME_PER_H * ha * frames + AUDIO_FROZEN_FIXED_BYTES) * b
    saved = 0
    if config.lora_targets == "language+audio":
        a = dtype_bytes(options.adapter_dtype)
        m = dropout_mask_bytes(config, device, options)
        per_frame_layer = ha * (AUDIO_BASE_SAVED_BYTES_PER_FRAME_PER_H + AUDIO_LORA_INPUT_H * (a + m)) + 12 * a * config.lora_rank
        saved = per_frame_layer * shape.audio_layers * frames * b
    return {"audio_encoder_transient": transient, "audio_encoder_saved": saved}


def allocator_retention(
    shape: ModelShape, config: TrainConfig, device: str, seq_len: int, options: EstimateOptions | None = None
) -> int:
    """Memory the allocator keeps resident beyond live tensors during forward and backward (bytes).

    CPU (glibc malloc): batch_size x seq_len x (a x I + b x L x h) with (a, b) =
    CPU_HEAP_RETENTION_PER_TOKEN[gradient_checkpointing] (measured, see the constant), I the widest
    MLP, L the decoder layers, h the hidden size; 0 when `options.cpu_heap_retention` is False (a
    process whose RSS follows its live tensors, e.g. run with MALLOC_MMAP_THRESHOLD_=65536). CUDA:
    the caching allocator's slack is in the runtime overhead. MPS: not measured, 0.
    """
    if device != "cpu" or (options is not None and not options.cpu_heap_retention):
        return 0
    per_mlp_unit, per_layer_hidden_unit = CPU_HEAP_RETENTION_PER_TOKEN[bool(config.gradient_checkpointing)]
    per_token = per_mlp_unit * max(shape.intermediate_sizes) + per_layer_hidden_unit * shape.num_layers * shape.hidden_size
    return config.batch_size * seq_len * per_token


def dequant_workspace(shape: ModelShape, config: TrainConfig, device: str) -> int:
    """With 4/8-bit weights, each quantized Linear is dequantized to bf16 for its matmul (bitsandbytes
    `MatMul4Bit` / `dequantize_4bit`), one at a time: the largest quantized matrix x 2 bytes."""
    if config.quantization == "none":
        return 0
    parts = part_params(shape)
    return 2 * max(parts["text_decoder"].largest_linear, parts["projections"].largest_linear)


def optimizer_step_bytes(state: dict[str, int], config: TrainConfig) -> int:
    """Temporaries of the optimizer step: torch's foreach AdamW allocates one fp32 buffer per
    parameter for sqrt(v) + eps (torch/optim/adamw.py `_multi_tensor_adamw`); gradient clipping's
    foreach norm adds a small one. 8-bit AdamW and Adafactor update in place (their kernels),
    so ~0 beyond a per-tensor scratch."""
    if config.optimizer == "adamw":
        return state["lora_params"]
    return 0


# --------------------------------------------------------------------------------------------------
# The estimate


@dataclass
class MemoryEstimate:
    """Peak memory of one training step, per component (bytes).

    Attributes:
        components: name -> bytes of every term (including terms not alive at the peak).
        phases: phase name -> bytes of that phase (without runtime overhead).
        peak_phase: the largest phase; `total_bytes` = that phase + runtime overhead.
        total_bytes: estimated peak memory on the device (bytes).
        seq_len: tokens of the longest kept row (the micro-batch is padded to it).
        answer_tokens: supervised tokens per row the logits are sized for (longest kept answer,
            or the `DEFAULT_ANSWER_TOKENS` assumption; see `logits_loss`).
        notes: assumptions the user should know (shown in the printout).
    """

    components: dict[str, int]
    phases: dict[str, int]
    peak_phase: str
    total_bytes: int
    seq_len: int
    device: str
    options: dict
    notes: list[str] = field(default_factory=list)
    answer_tokens: int = 0

    def to_dict(self) -> dict:
        return asdict(self)


PHASE_MEMBERS = {
    "load": ("load_per_layer_embedding",),
    "audio": ("audio_encoder_transient", "allocator_retention"),
    "loss": ("audio_encoder_saved", "activations_decoder", "logits_loss", "allocator_retention"),
    "layer_backward": (
        "allocator_retention",
        "audio_encoder_saved",
        "activations_decoder",
        "activations_recompute",
        "backward_workspace",
        "dequant_workspace",
    ),
    "optimizer": ("optimizer_step",),
}
"""What is alive, besides the static terms, at each candidate peak: loading (only with `ple_on_cpu`
on CUDA, the per-layer table before it moves to host RAM; the LoRA terms of the static part are
counted there too, a small overcount); the audio encoder's
forward; the loss (every saved activation + the logits and the fp32 cross-entropy gradient, the
start of backward); a decoder layer's backward (the logits are freed by then; with checkpointing
one layer is recomputed); the
optimizer step."""
STATIC_PREFIXES = ("weights_", "lora_", "optimizer_states")


def estimate_memory(
    model_config: dict,
    config: TrainConfig,
    lengths: LengthStats,
    device: str,
    options: EstimateOptions | None = None,
) -> MemoryEstimate:
    """Peak memory in bytes, per component, of one LoRA fine-tuning step of Gemma 3n.

    Args:
        model_config: the model's config.json as a dict (`load_model_config`).
        config: training settings (quantization, LoRA rank/targets/dropout, batch size,
            max_length, gradient checkpointing, optimizer).
        lengths: dataset length statistics; the micro-batch is `batch_size` rows padded to the
            longest row that `max_length` keeps, with the longest clip; the logits cover
            `batch_size` x the longest kept answer (`LengthStats.kept_longest_answer`).
        device: `cpu`, `cuda` or `mps` (not `auto`: resolve it first).
        options: `EstimateOptions` (attention implementation, vision tower, PLE on CPU, ...).
    Returns:
        `MemoryEstimate`; total = static (weights, LoRA, grads, optimizer) + the largest phase +
        runtime overhead.
    Raises:
        ConfigError: unknown device. ModelLoadError: not a Gemma 3n config.
    """
    if device not in RUNTIME_OVERHEAD_BYTES:
        raise ConfigError(f"`--device` for the estimate must be cpu, cuda or mps, got {device!r}.")
    options = options or EstimateOptions()
    shape = model_shape(model_config)
    seq_len = lengths.kept_longest(config.max_length)
    notes: list[str] = []
    if seq_len <= 0:
        seq_len = 0
        notes.append(f"max_length {config.max_length} excludes every row; nothing would be trained.")
    comps: dict[str, int] = {}
    comps.update(weights(shape, config, device, options))
    state = trainable_state(shape, config, options)
    comps.update(state)
    comps.update(activations(shape, config, device, options, seq_len))
    answer = lengths.kept_longest_answer(config.max_length) if seq_len > 0 else 0
    if seq_len > 0 and not lengths.answers_known():
        notes.append(f"answer length unknown (no dataset with answer lengths): the logits assume {answer} supervised "
                     f"tokens per row (min(row, {DEFAULT_ANSWER_TOKENS})); build the dataset for its real answers.")
    comps["logits_loss"] = logits_loss(shape, config, device, options, answer)
    comps.update(audio_encoder_bytes(shape, config, device, options, lengths.longest_clip_s))
    comps["dequant_workspace"] = dequant_workspace(shape, config, device)
    comps["load_per_layer_embedding"] = load_transient(shape, config, device)
    comps["allocator_retention"] = allocator_retention(shape, config, device, seq_len, options)
    comps["optimizer_step"] = optimizer_step_bytes(state, config)
    comps["runtime_overhead"] = RUNTIME_OVERHEAD_BYTES[device]
    static = sum(v for k, v in comps.items() if k.startswith(STATIC_PREFIXES))
    phases = {name: static + sum(comps[m] for m in members) for name, members in PHASE_MEMBERS.items()}
    peak_phase = max(phases, key=phases.get)
    total = phases[peak_phase] + comps["runtime_overhead"]
    if shape.vision_architecture not in VISION_TOWER_PARAMS and config.vision_tower:
        notes.append(f"vision tower `{shape.vision_architecture}` not tabulated; counted as built by timm.")
    if ple_on_host(config, device):
        notes.append(f"per-layer embeddings kept in CPU RAM: {fmt_bytes(comps['load_per_layer_embedding'])} of host "
                     "memory; loading holds them on the GPU first (the `load` phase).")
    elif config.ple_on_cpu:
        notes.append(f"`ple_on_cpu` applies to CUDA only; on {device} the per-layer embeddings stay where the model is.")
    notes.append(f"runtime overhead ({device}): {RUNTIME_OVERHEAD_NOTE[device]}.")
    return MemoryEstimate(comps, phases, peak_phase, int(total), seq_len, device, options.to_dict(), notes, answer)


# --------------------------------------------------------------------------------------------------
# Device budget and verdict


@dataclass
class DeviceMemory:
    """Memory of a device (bytes): `total`, `free` (now), `usable` (budget after headroom) and
    `headroom_note` saying how much is left to the OS and why."""

    device: str
    total_bytes: int
    free_bytes: int
    usable_bytes: int
    headroom_note: str
    source: str

    def to_dict(self) -> dict:
        return asdict(self)


def usable_budget(device: str, total_bytes: int, free_bytes: int) -> tuple[int, str]:
    """The usable budget after headroom, and why.

    * cuda: free memory minus 256 MiB: the GPU is ours, but display servers and the allocator's
      last partial block need a little (the CUDA context is in the estimate's runtime overhead).
    * mps: min(recommended_max_memory, total - 4 GiB): Metal's recommended working set already
      leaves ~25 % of unified memory to macOS; apps in use need a few GiB more.
    * cpu: free (MemAvailable) minus max(2 GiB, 10 % of total): the desktop, browser running the
      app and the page cache need room, or the machine swaps instead of failing cleanly.
    """
    if device == "cuda":
        return max(0, free_bytes - 256 * MIB), "256 MiB left for the display and allocator block rounding"
    if device == "mps":
        return max(0, min(free_bytes, total_bytes - 4 * GIB)), "4 GiB of unified memory left to macOS and open apps"
    headroom = max(2 * GIB, int(0.10 * total_bytes))
    return max(0, free_bytes - headroom), f"{fmt_bytes(headroom)} (10 % of RAM, at least 2 GiB) left to the OS and open apps"


def _proc_meminfo() -> tuple[int, int]:
    info = {}
    with open("/proc/meminfo", encoding="ascii") as handle:
        for line in handle:
            key, _, rest = line.partition(":")
            info[key] = int(rest.split()[0]) * 1024
    return info["MemTotal"], info.get("MemAvailable", info.get("MemFree", 0))


def device_memory(device: str, memory_gb: float | None = None) -> DeviceMemory:
    """Total, free and usable memory of `device` (`cpu`, `cuda`, `mps`).

    `memory_gb` overrides the device's size in GB as the OS reports it, i.e. GiB (N x 1024**3
    bytes: a "48 GB" laptop shows 48 GiB of RAM), and treats all of it as free, to ask "would
    this fit on a 48 GB laptop?". CUDA: `torch.cuda.mem_get_info`;
    MPS: `torch.mps.recommended_max_memory` and total RAM; CPU: psutil if installed, else
    /proc/meminfo MemAvailable. Raises `ConfigError` when the device is not available.
    """
    if memory_gb is not None:
        if not math.isfinite(memory_gb) or memory_gb <= 0:
            raise ConfigError(f"`--memory-gb` must be a finite number of GiB > 0 (e.g. 16), got {memory_gb}.")
        total = free = int(memory_gb * GIB)
        source = f"--memory-gb {memory_gb:g} (GiB)"
    elif device == "cuda":
        import torch  # noqa: PLC0415

        if not torch.cuda.is_available():
            raise ConfigError("`--device cuda` but no CUDA GPU is visible; use --device cpu or --memory-gb N.")
        free, total = torch.cuda.mem_get_info()
        source = f"torch.cuda.mem_get_info ({torch.cuda.get_device_name()})"
    elif device == "mps":
        import torch  # noqa: PLC0415

        if not torch.backends.mps.is_available():
            raise ConfigError("`--device mps` but Apple MPS is not available; use --device cpu or --memory-gb N.")
        total = _ram()[0]
        free = int(torch.mps.recommended_max_memory())
        source = "torch.mps.recommended_max_memory"
    elif device == "cpu":
        total, free = _ram()
        source = "psutil.virtual_memory" if _has_psutil() else "/proc/meminfo"
    else:
        raise ConfigError(f"`--device` must be cpu, cuda or mps, got {device!r}.")
    usable, note = usable_budget(device, total, free)
    return DeviceMemory(device, int(total), int(free), int(usable), note, source)


def _has_psutil() -> bool:
    try:
        import psutil  # noqa: F401, PLC0415

        return True
    except ImportError:
        return False


def _ram() -> tuple[int, int]:
    try:
        import psutil  # noqa: PLC0415

        vm = psutil.virtual_memory()
        return int(vm.total), int(vm.available)
    except ImportError:
        return _proc_meminfo()


@dataclass
class Verdict:
    """`status` is `fits`, `tight` or `does not fit`; `margin_bytes` = usable - total (negative when
    it does not fit) and `margin_percent` of the usable budget."""

    status: str
    margin_bytes: int
    margin_percent: float

    def to_dict(self) -> dict:
        return asdict(self)


def verdict(total_bytes: int, usable_bytes: int) -> Verdict:
    """fits when total <= FIT_FRACTION x usable (a margin above our measured error), tight when
    total <= usable, else does not fit."""
    margin = usable_bytes - total_bytes
    pct = 100.0 * margin / usable_bytes if usable_bytes > 0 else -100.0
    if usable_bytes > 0 and total_bytes <= FIT_FRACTION * usable_bytes:
        status = "fits"
    elif total_bytes <= usable_bytes:
        status = "tight"
    else:
        status = "does not fit"
    return Verdict(status, int(margin), round(pct, 1))


# --------------------------------------------------------------------------------------------------
# Make it fit


@dataclass
class Suggestion:
    """Settings that fit: `changes` (TrainConfig fields, applied with `TrainConfig.replace`), the new
    `total_bytes`, its verdict and `cost` in words; `score` orders suggestions (lower = cheaper)."""

    changes: dict[str, Any]
    total_bytes: int
    verdict: str
    cost: str
    score: float

    def to_dict(self) -> dict:
        return asdict(self)


def _candidate_moves(config: TrainConfig, lengths: LengthStats, device: str) -> list[tuple[dict, str, float]]:
    """Single setting changes that can lower memory: (TrainConfig changes, cost in words, score)."""
    moves: list[tuple[dict, str, float]] = []
    if config.vision_tower:
        moves.append(({"vision_tower": False}, "none (the tutor never sees images)", 0.0))
    if device == "cuda" and not config.ple_on_cpu:
        moves.append(({"ple_on_cpu": True},
                      "slightly slower (the batch's per-layer embedding rows are copied to the GPU each step)", 0.5))
    if not config.gradient_checkpointing:
        moves.append(({"gradient_checkpointing": True}, "about 30 % slower (activations recomputed in backward)", 1.0))
    if config.quantization == "none":
        moves.append(({"quantization": "8bit"}, "slower steps; int8 base weights", 1.5))
        moves.append(({"quantization": "4bit"}, "slower steps; NF4 base weights (QLoRA), small quality cost", 1.5))
    elif config.quantization == "8bit":
        moves.append(({"quantization": "4bit"}, "NF4 base weights instead of int8, small quality cost", 1.0))
    if config.optimizer == "adamw":
        moves.append(({"optimizer": "adamw_8bit"}, "8-bit optimizer states (bitsandbytes), same results in practice", 0.5))
        moves.append(({"optimizer": "adafactor"}, "Adafactor: less memory, may need a different learning rate", 1.0))
    if config.lora_dropout > 0:
        moves.append(({"lora_dropout": 0.0}, "no LoRA dropout: less regularisation on a small dataset", 0.8))
    if config.lora_targets == "language+audio":
        moves.append(({"lora_targets": "language"}, "audio encoder frozen: it adapts less to your learners' accents", 2.0))
    b = config.batch_size
    for new_b in sorted({1, b // 2, b // 4} - {0, b}):
        ga = config.grad_accum * b // new_b
        moves.append(({"batch_size": new_b, "grad_accum": ga},
                      f"batch {new_b} x {ga} accumulation (same effective batch {b * config.grad_accum}), slower", 0.7))
    for new_r in (config.lora_rank // 2, config.lora_rank // 4):
        if new_r >= 4:
            moves.append(({"lora_rank": new_r, "lora_alpha": max(1, config.lora_alpha * new_r // config.lora_rank)},
                          f"LoRA rank {new_r} instead of {config.lora_rank}: less capacity", 2.0))
    if lengths.row_tokens:
        current = lengths.kept_longest(config.max_length)
        candidates = sorted({n for n in lengths.row_tokens if 256 <= n < current}, reverse=True)
        seen_excluded = set()
        for cut in candidates:
            excluded = lengths.excluded(cut)
            if excluded in seen_excluded or excluded >= lengths.num_rows:
                continue
            seen_excluded.add(excluded)
            frac = excluded / max(1, lengths.num_rows)
            moves.append(({"max_length": cut},
                          f"max length {cut}: excludes {excluded} of {lengths.num_rows} rows", 3.0 + 20 * frac))
            if len(seen_excluded) >= 4:
                break
    return moves


def suggest_fits(
    model_config: dict,
    config: TrainConfig,
    lengths: LengthStats,
    device: str,
    usable_bytes: int,
    options: EstimateOptions | None = None,
    *,
    limit: int = 3,
    max_changes: int = 4,
    accept_tight: bool = True,
) -> list[Suggestion]:
    """The cheapest few setting changes that bring the estimate under the usable budget.

    A change is offered when its estimate is at most `usable_bytes`, with its verdict: `fits`
    (total <= FIT_FRACTION x usable) or `tight` (in the last 10 %, within our measured error).
    Requiring `fits` alone hid obvious single fixes (E2B, no quantization, 14 GiB: 4-bit alone
    lands at 10.9 of 12.0 GiB usable, tight, and was not offered).

    Searches combinations of up to `max_changes` single moves (quantization, gradient
    checkpointing, smaller micro-batch with more accumulation at the same effective batch, lower
    max_length counting excluded rows, 8-bit AdamW / Adafactor, lower LoRA rank, no LoRA dropout,
    dropping the vision tower, PLE on CPU on CUDA), re-estimating each; keeps minimal combinations
    (none contains a subset that already fits; a tight subset still lets a superset that fits be
    offered), ordered by summed cost score then memory; when the first `limit` are all tight, the
    cheapest one that fits takes the last place.
    Every move is a `TrainConfig` setting the training code carries out (`vision_tower`,
    `ple_on_cpu`: `pipeline.training.model.load_model`). `accept_tight=False` offers only changes that
    fit (for a run that is already tight, another tight setting is no help).
    """
    options = options or EstimateOptions()
    moves = _candidate_moves(config, lengths, device)
    found: list[Suggestion] = []
    fit_keys: list[frozenset] = []
    tight_keys: list[frozenset] = []
    for k in range(1, max_changes + 1):
        for combo in itertools.combinations(range(len(moves)), k):
            keys = [set(moves[i][0]) for i in combo]
            if any(keys[a] & keys[b] for a, b in itertools.combinations(range(k), 2)):
                continue  # two moves on the same setting
            key = frozenset(combo)
            if any(prev <= key for prev in fit_keys):
                continue  # a subset already fits: this one only costs more
            changes: dict[str, Any] = {}
            for i in combo:
                changes.update(moves[i][0])
            try:
                new_config = config.replace(**changes)
            except ConfigError:
                continue
            est = estimate_memory(model_config, new_config, lengths, device, options)
            v = verdict(est.total_bytes, usable_bytes)
            if v.status == "does not fit" or (v.status == "tight" and not accept_tight) or est.seq_len <= 0:
                continue
            if v.status == "tight":
                if any(prev <= key for prev in tight_keys):
                    continue  # a subset is already tight: this costs more and is still not safe
                tight_keys.append(key)
            else:
                fit_keys.append(key)
            found.append(Suggestion(
                changes=changes,
                total_bytes=est.total_bytes,
                verdict=v.status,
                cost=("tight: under 10 % to spare, within the estimate's error; " if v.status == "tight" else "")
                + "; ".join(moves[i][1] for i in combo),
                score=sum(moves[i][2] for i in combo),
            ))
    found.sort(key=lambda s: (s.score, s.total_bytes))
    chosen = found[:limit]
    if chosen and all(s.verdict == "tight" for s in chosen):
        safe = next((s for s in found if s.verdict == "fits"), None)
        if safe is not None:
            chosen[-1] = safe
    return chosen


# --------------------------------------------------------------------------------------------------
# Length statistics of a built dataset


def length_stats_from_workspace(workspace, max_length: int) -> LengthStats:
    """Length statistics of the dataset built in `workspace`.

    Reads `WS/dataset/build_report.json` (written by `pipeline.data.dataset.build_dataset`: its
    `length_stats`, with `answer_tokens` per train row when the report has them), else the train
    split's `num_tokens` column; when no dataset is built, returns `max_length` as the longest row
    and a 30 s clip (the worst case), saying so in `source`. Without answer lengths the estimate
    assumes `DEFAULT_ANSWER_TOKENS` (see `LengthStats.kept_longest_answer`).
    """
    from pipeline.workspace import Workspace  # noqa: PLC0415

    ws = workspace if isinstance(workspace, Workspace) else Workspace(workspace)
    report_path = ws.dataset_dir / "build_report.json"
    if report_path.exists():
        try:
            report = json.loads(report_path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as error:
            raise DatasetError(f"{report_path} is not valid JSON ({error}); rebuild with `python -m pipeline build`.") from None
        stats = report.get("length_stats", report)
        rows = [int(n) for n in (stats.get("row_tokens") or stats.get("train_tokens") or [])]
        longest = int(max(rows) if rows else (stats.get("max") or stats.get("max_tokens") or max_length))
        clip = float(stats.get("max_clip_s") or stats.get("longest_clip_s") or stats.get("max_duration_s") or MAX_CLIP_S)
        answers = [int(n) for n in (stats.get("answer_tokens") or [])]  # absent in reports built before it was recorded
        longest_answer = int(stats.get("max_answer_tokens") or (max(answers) if answers else 0))
        counted_with = report.get("model")
        source = str(report_path) + (f" (tokens counted with {counted_with}'s tokenizer)" if counted_with else "")
        return LengthStats(longest, clip, rows, source=source, answer_tokens=answers,
                           longest_answer_tokens=longest_answer, tokenizer_model=counted_with)
    if ws.dataset_dir.exists():
        try:
            from pipeline.data.dataset import load_built_dataset  # noqa: PLC0415

            ds = load_built_dataset(ws)
            rows = [int(n) for split in ds.values() for n in split["num_tokens"]]
            clip = MAX_CLIP_S
            for split in ds.values():
                if "duration_s" in split.column_names:
                    clip = max(float(x) for x in split["duration_s"])
            if rows:
                return LengthStats(max(rows), clip, rows, source=f"{ws.dataset_dir} num_tokens column")
        except Exception as error:  # noqa: BLE001 - fall back to the worst case, say so
            return LengthStats(max_length, MAX_CLIP_S, [], source=f"no readable dataset ({error}); assumed rows of --max-length {max_length}")
    return LengthStats(max_length, MAX_CLIP_S, [], source=f"no dataset built in {ws.root}; assumed rows of --max-length {max_length} tokens and 30 s clips")


# --------------------------------------------------------------------------------------------------
# Measured probe (child process; the torch work lives in pipeline/memory/probe.py)


def measure_peak(
    model: str,
    config: TrainConfig,
    lengths: LengthStats,
    device: str,
    options: EstimateOptions | None = None,
    *,
    workspace=None,
    timeout_s: float = 3600,
) -> dict:
    """Run one real optimizer step on the worst-case micro-batch in a child process and return
    its measured peaks (bytes): `peak_bytes` and `method`, plus CPU `peak_rss_bytes` (VmHWM after a
    reset, fallback ru_maxrss) and `baseline_rss_bytes`; CUDA `max_memory_allocated` /
    `max_memory_reserved`; MPS `driver_allocated_memory`.

    With a `workspace` whose dataset is built, the child runs the training code's own
    `pipeline.training.train.run_probe_step` on the dataset's longest rows; otherwise a synthetic batch of
    `batch_size` rows of the longest kept length with the longest clip, each supervising its last
    `kept_longest_answer` tokens (`pipeline.memory.probe`).
    Raises `TrainingError` with the child's last output on failure.
    """
    from pipeline.errors import TrainingError  # noqa: PLC0415

    options = options or EstimateOptions()
    seq_len = lengths.kept_longest(config.max_length)
    request = {
        "model": model,
        "config": config.to_dict(),
        "seq_len": seq_len,
        "answer_tokens": lengths.kept_longest_answer(config.max_length),
        "clip_s": lengths.longest_clip_s,
        "device": device,
        "options": options.to_dict(),
        "workspace": str(workspace) if workspace is not None else None,
    }
    cmd = [sys.executable, "-m", "pipeline.memory.probe", json.dumps(request)]
    env = dict(os.environ)
    env.setdefault("HF_HUB_OFFLINE", "1")
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, env=env,
                              cwd=str(Path(__file__).resolve().parents[1]))
    except subprocess.TimeoutExpired:
        raise TrainingError(f"The memory probe took longer than {timeout_s:.0f} s; try a shorter --max-length.") from None
    for line in reversed(proc.stdout.strip().splitlines()):
        if line.startswith("{"):
            result = json.loads(line)
            if result.get("error"):
                raise TrainingError(f"The memory probe failed: {result['error']}")
            if result.get("out_of_memory"):
                raise TrainingError(
                    f"The measured step ran out of memory ({result.get('step_error')}): the run does not fit; "
                    "apply one of the suggestions and measure again.")
            return result
    tail = (proc.stderr or proc.stdout)[-2000:]
    raise TrainingError(f"The memory probe exited with code {proc.returncode} without a result:\n{tail}")


# --------------------------------------------------------------------------------------------------
# Printing and the command line


def fmt_bytes(n: float) -> str:
    """`n` bytes as GiB / MiB text."""
    if abs(n) >= GIB:
        return f"{n / GIB:.2f} GiB"
    return f"{n / MIB:.0f} MiB"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m pipeline estimate",
                                     description="Estimate (and optionally measure) the peak memory of a LoRA fine-tune.")
    parser.add_argument("--workspace", default=None, help="workspace folder with the built dataset")
    parser.add_argument("--memory-gb", type=float, default=None, help="pretend the device has N GB of memory, GB as your OS reports it, i.e. GiB (N x 1024**3 bytes)")
    parser.add_argument("--attn", choices=("eager", "sdpa"), default=None, help="attention implementation (default: the training code's)")
    parser.add_argument("--measure", action="store_true", help="also run one real step in a child process and report its peak")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    add_train_arguments(parser)
    return parser


SUGGESTION_LIMIT = 4  # suggestions shown by the command line and the app alike


def estimate_for_workspace(
    workspace,
    config: TrainConfig,
    *,
    memory_gb: float | None = None,
    measure: bool = False,
    limit: int = SUGGESTION_LIMIT,
    attn: str | None = None,
) -> dict:
    """The whole estimate for `config` on the dataset built in `workspace` (a path or `Workspace`):
    the dict `python -m pipeline estimate --json` prints and the app shows, so the two cannot drift.

    Keys: `model`, `device`, `components` (name to bytes, every term), `components_at_peak` (the
    static terms, runtime overhead and the peak phase's terms, which add up to `total_bytes`),
    `phases`, `peak_phase`, `total_bytes`, `usable_bytes`, `device_memory`, `verdict`,
    `margin_bytes`, `margin_percent`, `seq_len`, `answer_tokens`, `max_length`, `lengths_source`,
    `excluded_rows`, `options`, `notes`, `suggestions` (at most `limit`, each with `changes`,
    `total_bytes`, `verdict`, `cost`, `score`; none when it fits, only ones that fit when it is
    tight) and `measured` (None unless `measure`: `measure_peak`'s dict plus `error_percent`).
    `memory_gb` is GiB (see `device_memory`); `attn` overrides the training code's attention.
    `config.device` "auto" picks cuda, then mps, then cpu; an explicit device is estimated as
    asked (with `memory_gb`, even one this machine lacks). Raises `ConfigError` / `DatasetError`
    / `TrainingError` as the functions it calls do.
    """
    from pipeline.workspace import Workspace  # noqa: PLC0415

    ws = workspace if isinstance(workspace, Workspace) else Workspace(workspace)
    device = config.device
    if device == "auto":
        device = _auto_device()
    model_config = load_model_config(config.model)
    lengths = length_stats_from_workspace(ws, config.max_length)
    options = EstimateOptions()  # its defaults are the training code's (eager attention, fp32 LoRA, ...)
    if attn:
        options.attn_implementation = attn
    if lengths.row_tokens and lengths.excluded(config.max_length) >= lengths.num_rows:
        raise ConfigError(
            f"`--max-length {config.max_length}` excludes every row of the dataset (the shortest has "
            f"{min(lengths.row_tokens)} tokens, the longest {max(lengths.row_tokens)}); nothing would be trained. "
            f"Raise --max-length to at least {min(lengths.row_tokens)}.")
    est = estimate_memory(model_config, config, lengths, device, options)
    if lengths.tokenizer_model and lengths.tokenizer_model != config.model:
        est.notes.append(f"row lengths were counted with {lengths.tokenizer_model}'s tokenizer, not {config.model}'s; rebuild the "
                         "dataset with this model for exact lengths (Gemma 3n checkpoints share one tokenizer).")
    mem = device_memory(device, memory_gb)
    v = verdict(est.total_bytes, mem.usable_bytes)
    suggestions = [] if v.status == "fits" else suggest_fits(
        model_config, config, lengths, device, mem.usable_bytes, options,
        accept_tight=v.status == "does not fit", limit=limit)
    peak_members = set(PHASE_MEMBERS[est.peak_phase])
    at_peak = {
        name: value for name, value in est.components.items()
        if value and (name.startswith(STATIC_PREFIXES) or name == "runtime_overhead" or name in peak_members)
    }
    measured = None
    if measure:
        built = (ws.dataset_dir / "build_report.json").exists()  # the real longest rows, else a synthetic batch
        measured = measure_peak(config.model, config, lengths, device, options, workspace=ws.root if built else None)
        measured["error_percent"] = round(100.0 * est.total_bytes / measured["peak_bytes"] - 100.0, 1)
    return {
        "model": config.model,
        "device": device,
        "components": est.components,
        "components_at_peak": at_peak,
        "phases": est.phases,
        "peak_phase": est.peak_phase,
        "total_bytes": est.total_bytes,
        "usable_bytes": mem.usable_bytes,
        "device_memory": mem.to_dict(),
        "verdict": v.status,
        "margin_bytes": v.margin_bytes,
        "margin_percent": v.margin_percent,
        "seq_len": est.seq_len,
        "answer_tokens": est.answer_tokens,
        "max_length": config.max_length,
        "settings": config.to_dict(),
        "lengths_source": lengths.source,
        "excluded_rows": lengths.excluded(config.max_length),
        "options": est.options,
        "notes": est.notes,
        "suggestions": [s.to_dict() for s in suggestions],
        "measured": measured,
    }


def main(argv: list[str] | None = None) -> int:
    """`python -m pipeline estimate ...`: print `estimate_for_workspace`'s estimate, verdict and
    suggestions (human summary, or its dict as one JSON object with `--json`)."""
    args = build_parser().parse_args(argv)
    config = TrainConfig.from_args(args)
    if args.quantization is None:  # the trainer's default for the device (`train` does the same)
        config = config.replace(quantization=default_quantization(
            _auto_device() if config.device == "auto" else config.device))
    from pipeline.workspace import DEFAULT_WORKSPACE  # noqa: PLC0415

    result = estimate_for_workspace(args.workspace or DEFAULT_WORKSPACE, config, memory_gb=args.memory_gb,
                                    measure=args.measure, attn=args.attn)
    if args.json:
        print(json.dumps(result))
        return 0
    print(render(result))
    return 0


def _auto_device() -> str:
    try:
        import torch  # noqa: PLC0415

        if torch.cuda.is_available():
            return "cuda"
        if torch.backends.mps.is_available():
            return "mps"
    except ImportError:
        pass
    return "cpu"


def render(result: dict) -> str:
    """Human summary of a `main` result dict."""
    lines = [f"Memory estimate: {result['model']} on {result['device']} "
             f"(micro-batch padded to {result['seq_len']} tokens, logits for {result.get('answer_tokens', 0)} answer tokens per row; "
             f"lengths from {result['lengths_source']})"]
    if result.get("settings"):
        st = result["settings"]
        lines.append(f"Settings: quantization {st['quantization']}, LoRA r={st['lora_rank']}, batch {st['batch_size']}, "
                     f"checkpointing {'on' if st['gradient_checkpointing'] else 'off'}, optimizer {st['optimizer']}, "
                     f"max length {st['max_length']}, vision tower {'on' if st['vision_tower'] else 'off'}.")
    if result.get("excluded_rows"):
        lines.append(f"  {result['excluded_rows']} row(s) longer than --max-length {result['max_length']} are excluded "
                     "(train skips them; `build --max-length` drops them from the dataset).")
    peak_members = set(PHASE_MEMBERS[result["peak_phase"]])
    for name, value in result["components"].items():
        if not value:
            continue
        alive = name.startswith(STATIC_PREFIXES) or name == "runtime_overhead" or name in peak_members
        lines.append(f"  {name:<28} {fmt_bytes(value):>12}{'' if alive else '   (not at the peak)'}")
    mem = result["device_memory"]
    lines.append(f"  {'peak (' + result['peak_phase'] + ')':<28} {fmt_bytes(result['total_bytes']):>12}")
    lines.append(f"Device: {fmt_bytes(mem['total_bytes'])} total, {fmt_bytes(mem['free_bytes'])} free "
                 f"({mem['source']}); usable {fmt_bytes(mem['usable_bytes'])} after {mem['headroom_note']}.")
    lines.append(f"Verdict: {result['verdict']} (margin {fmt_bytes(result['margin_bytes'])}, {result['margin_percent']:.1f} %).")
    for note in result["notes"]:
        lines.append(f"  note: {note}")
    if result["suggestions"]:
        lines.append("To make it fit:")
        for s in result["suggestions"]:
            changes = ", ".join(f"{k}={v}" for k, v in s["changes"].items())
            lines.append(f"  - {changes}: {fmt_bytes(s['total_bytes'])}; cost: {s['cost']}")
    elif result["verdict"] == "tight":
        lines.append("It should fit, with under 10 % to spare; no change found that leaves more room.")
    elif result["verdict"] != "fits":
        lines.append("No combination of settings fits this device; use a machine with more memory.")
    if result.get("measured"):
        m = result["measured"]
        lines.append(f"Measured ({m.get('method', '')}; {m.get('mode', '')}): peak {fmt_bytes(m['peak_bytes'])} "
                     f"vs estimate {fmt_bytes(result['total_bytes'])} ({m['error_percent']:+.1f} %).")
    return "\n".join(lines)


if __name__ == "__main__":
    try:
        sys.exit(main())
    except PipelineError as error:
        print(f"error: {error}", file=sys.stderr)
        sys.exit(1)
