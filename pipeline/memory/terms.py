"""The formulas: bytes of each component of a LoRA fine-tuning step of Gemma 3n or Gemma 4, one function
per term. What differs between the families is read from the model's `ModelShape` (its family fills it
in, `pipeline.model.catalog.model_shape`): per-layer head sizes and KV heads, MLP widths, the hidden-width
norms per layer, AltUp's residual streams (Gemma 3n: 4; Gemma 4 has none), LAuReL's rank.

Each function's docstring gives its formula and its source (the transformers / peft / bitsandbytes /
PyTorch code it follows, or our own measurement of the model's tensors, with the constants it uses
defined next to it). What the device adds is data, not code: the CPU runtime overhead, oneDNN's kernel
caches and glibc's retained heap were measured on one machine and ship as the default calibration
record (`pipeline.calibration.store.device_defaults`, each value with its dated note), which
`pipeline.calibration.fit` replaces or scales per machine. The terms:

  * weights per part: `weights` (bf16, NF4 via `nf4_bytes`, int8 via `int8_bytes`), the loading
    transient `load_transient`, the dequantization buffer `dequant_workspace`;
  * LoRA: `lora_targets`, `lora_params`, `trainable_state` (adapters, gradients, optimizer states,
    fp32 master copies), `optimizer_step_bytes`;
  * activations: `layer_saved_bytes_per_token` (one decoder layer), `activations` (the decoder,
    recompute, backward workspace), with `dropout_mask_bytes`;
  * logits: `logits_loss` (answer positions only);
  * audio encoder: `audio_encoder_bytes` (frozen transient, or saved tensors with LoRA in it);
  * allocator retention: `pipeline.memory.cpu_heap.allocator_retention` (glibc's resident heap on CPU);
  * CPU kernel caches: `cpu_kernel_cache` (oneDNN's kernels per new batch shape);
  * runtime overhead: `runtime_overhead` (per device).

Pure functions of a `ModelShape`, a `TrainConfig`, the device kind and `EstimateOptions`: no torch.
How the terms add up into phases and a peak is `pipeline.memory.phases`.
"""

from __future__ import annotations

import math

from pipeline.calibration.precision import compute_dtype_name
from pipeline.calibration.store import device_defaults
from pipeline.config import TrainConfig
from pipeline.model.catalog import stated_checkpoint_dtype
from pipeline.memory.inputs import MAX_CLIP_S, EstimateOptions
from pipeline.model.catalog import part_params
from pipeline.model.shape import ModelShape
from pipeline.units import dtype_bytes


# --------------------------------------------------------------------------------------------------
# Weights (quantized storage from bitsandbytes' Params4bit / Int8Params)


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


def checkpoint_dtype(model_config: dict) -> str:
    """The dtype the checkpoint stores its weights in (config.json `dtype` / `torch_dtype`; Gemma 3n
    ships bfloat16, the assumption when the config does not say)."""
    return stated_checkpoint_dtype(model_config) or "bfloat16"


def quantized_parts(config: TrainConfig) -> tuple[str, ...]:
    """Parts whose Linear layers the loader quantizes: `QUANTIZED_PARTS`, plus the audio encoder with
    `config.quantize_audio_encoder` (`pipeline.model.loading.quantization_skip_modules`); none
    without quantization."""
    if config.quantization == "none":
        return ()
    return QUANTIZED_PARTS + (("audio_encoder",) if config.quantize_audio_encoder else ())


PAGE_FAULT_AROUND_BYTES = 64 * 1024
"""Linux maps up to this much of a file around each page fault (`fault_around_bytes`, default 64 KiB):
what one looked-up row of a memory-mapped embedding table can bring into the resident set."""


def weights(shape: ModelShape, config: TrainConfig, device: str, options: EstimateOptions,
            distinct_tokens: int = 0) -> dict[str, int]:
    """Bytes of the frozen weights on the device, per part.

    Formula per part: non-Linear params x 2 (bf16) + Linear params x (2 for bf16 | NF4 bytes from
    `nf4_bytes` + code tables | `int8_bytes`) for the parts the quantizer touches
    (`quantized_parts`: the skip list keeps audio/vision towers, their embedders and lm_head in bf16,
    unless `quantize_audio_encoder` takes the audio encoder off it).
    The token embedding is counted once (tied to lm_head). Vision tower: 0 with
    `config.vision_tower` False (the loader keeps it off the device and frees it,
    `pipeline.model.loading.load_model`). Per-layer embeddings: 0 on the device with `config.ple_on_cpu`
    on CUDA (the loader places the table in host RAM, `pipeline.model.loading.placement_device_map`).
    On CPU (`options.weights_mapped`) every unquantized weight is a view into the memory-mapped
    checkpoint and becomes resident only when read (`pipeline.model.loading.release_checkpoint_pages`
    drops what loading read): the vision tower is never read (0), and the per-layer embedding table
    only at the rows of the dataset's `distinct_tokens`, each bringing at most
    `PAGE_FAULT_AROUND_BYTES` (or its own size, if larger) into the resident set; with
    `distinct_tokens` unknown (0) the table is counted in full.
    Source: transformers `bitsandbytes` quantizer (replaces nn.Linear outside the skip list) and
    bitsandbytes `Params4bit` / `Int8Params`. Check: E2B bf16 = 10.09 GiB (FIELD_NOTES ~10.1 GiB).
    """
    parts = part_params(shape)
    wb = dtype_bytes(compute_dtype_name(device, options.compute_dtype))
    quantized = quantized_parts(config)
    out: dict[str, int] = {}
    for name, pp in parts.items():
        lin_bytes = pp.linear * wb
        if name in quantized and config.quantization == "4bit":
            lin_bytes = nf4_bytes(pp.linear) + pp.linear_count * NF4_TABLE_BYTES
        elif name in quantized and config.quantization == "8bit":
            skipped = shape.hidden_size * shape.num_layers * shape.hidden_size_per_layer_input if name == "projections" else 0
            # out_features summed over matrices ~ params / in_features (the hidden size for most)
            width = shape.audio_hidden if name == "audio_encoder" else shape.hidden_size
            lin_bytes = int8_bytes(pp.linear - skipped, (pp.linear - skipped) // width) + skipped * wb
        total = int(lin_bytes + pp.other * wb)
        if name == "vision_tower" and not config.vision_tower:
            total = 0
        if name == "per_layer_embedding" and ple_on_host(config, device):
            total = 0
        if device == "cpu" and options.weights_mapped:
            if name == "vision_tower":
                total = 0
            elif name == "per_layer_embedding" and distinct_tokens > 0:
                row = shape.num_layers * shape.hidden_size_per_layer_input * wb
                total = min(total, distinct_tokens * max(PAGE_FAULT_AROUND_BYTES, math.ceil(row / 4096) * 4096 + 4096))
        out[f"weights_{name}"] = total
    return out


def ple_on_host(config: TrainConfig, device: str) -> bool:
    """Whether the run keeps the per-layer embedding table in host RAM (`ple_on_cpu`, CUDA only)."""
    return config.ple_on_cpu and device == "cuda"


def load_transient(shape: ModelShape, config: TrainConfig, device: str) -> int:
    """Bytes on the device while loading beyond the loaded weights: with 4/8-bit, bitsandbytes
    quantizes each Linear as it arrives (`Params4bit` / `Int8Params` on `.to(device)`), so the source
    of one matrix, cast to the compute dtype, is alive next to the weights: c x the largest quantized
    matrix (c = 2 for bf16, 4 for fp32). 0 without quantization.

    Only what exists at load time: no LoRA weights, gradients or optimizer states (they are created
    after loading), and nothing the loader keeps off the device: with `ple_on_cpu` on CUDA the
    per-layer table is placed in host RAM by the device map and never reaches the GPU, and with
    `vision_tower` off the vision tower is placed in host RAM and freed
    (`pipeline.model.loading.placement_device_map`)."""
    if config.quantization == "none":
        return 0
    parts = part_params(shape)
    largest = max(parts[name].largest_linear for name in quantized_parts(config))
    return dtype_bytes(compute_dtype_name(device)) * largest


def load_checkpoint_pages(shape: ModelShape, config: TrainConfig, device: str, options: EstimateOptions) -> int:
    """CPU with 4/8-bit weights: quantizing reads the bf16 source of every quantized Linear from the
    memory-mapped checkpoint, and those file pages stay resident until loading ends and
    `pipeline.model.loading.release_checkpoint_pages` drops them: the `load` phase holds them on top
    of the quantized weights (their bytes as stored, `EstimateOptions.checkpoint_dtype`). 0 on other
    devices and without quantization."""
    if device != "cpu" or config.quantization == "none" or not options.weights_mapped:
        return 0
    parts = part_params(shape)
    return sum(parts[name].linear for name in quantized_parts(config)) * dtype_bytes(options.checkpoint_dtype)


def dequant_workspace(shape: ModelShape, config: TrainConfig, device: str) -> int:
    """With 4/8-bit weights, each quantized Linear is dequantized to bf16 for its matmul (bitsandbytes
    `MatMul4Bit` / `dequantize_4bit`), one at a time: the largest quantized matrix x c bytes (the
    compute dtype's)."""
    if config.quantization == "none":
        return 0
    parts = part_params(shape)
    return dtype_bytes(compute_dtype_name(device)) * max(parts[name].largest_linear for name in quantized_parts(config))


# --------------------------------------------------------------------------------------------------
# LoRA: adapters, gradients, optimizer


def lora_targets(shape: ModelShape, targets: str) -> list[tuple[int, int]]:
    """(in_features, out_features) of every Linear LoRA wraps.

    `language`: q/k/v/o and gate/up/down of every text decoder layer (k/v only where the layer owns
    them; each layer's own head size and MLP width). `language+audio` adds the conformer's
    q/k/v/post, both feed-forwards' two Linears and the light-conv's linear_start/linear_end (the same
    matrices in Gemma 3n and Gemma 4, whose are the `.linear` inside each clippable wrapper). (Regexes:
    the family's `language_lora_regex` / `audio_lora_regex`; FIELD_NOTES "LoRA targets".)
    """
    h = shape.hidden_size
    mats: list[tuple[int, int]] = []
    for i in range(shape.num_layers):
        q, kv = shape.layer_q_dim(i), shape.layer_kv_dim(i)
        inter = shape.intermediate_sizes[i]
        mats += [(h, q), (q, h), (h, inter), (h, inter), (inter, h)]
        if i < shape.kv_owner_layers:
            mats += [(h, kv)] * (1 if shape.layer_kv_equals_value(i) else 2)
    if targets == "language+audio":
        ha = shape.audio_hidden
        for _ in range(shape.audio_layers):
            mats += [(ha, ha)] * 4 + [(ha, 4 * ha), (4 * ha, ha)] * 2 + [(ha, 2 * ha), (ha, ha)]
    return mats


def lora_params(shape: ModelShape, config: TrainConfig) -> int:
    """Trainable LoRA parameters: sum over wrapped Linears of r * (in + out) (Hu et al. 2021, LoRA:
    A is r x in, B is out x r). E2B, r=16, language targets: ~19.7 M (FIELD_NOTES ~20 M)."""
    return sum(config.lora_rank * (i + o) for i, o in lora_targets(shape, config.lora_targets))


def _optimizer_state_bytes(mats: list[tuple[int, int]], optimizer: str) -> int:
    """Optimizer state bytes for trainable tensors of shapes `mats` ((rows, cols); a vector is (1, n)):
    `adamw` 2 fp32 moments = 8 bytes per element (torch.optim.AdamW); `adamw_8bit` (bitsandbytes
    AdamW8bit) 2 bytes per element + fp32 absmax per 256-block for tensors of at least 4,096 elements
    (`min_8bit_size`), 8 bytes per element below that; `adafactor` (transformers Adafactor,
    beta1=None): factored second moment, (rows + cols) x 4 bytes per matrix."""
    if optimizer == "adamw":
        return 8 * sum(a * b for a, b in mats)
    if optimizer == "adamw_8bit":
        opt = 0
        for a, b in mats:
            n = a * b
            opt += 2 * n + 2 * 4 * math.ceil(n / 256) if n >= 4096 else 8 * n
        return opt
    return sum(4 * (a + b) for a, b in mats)


def full_trainable_params(shape: ModelShape) -> int:
    """Parameters a full fine-tune updates: every part but the vision tower (the tutor's rows never run
    it, so its parameters get no gradient and torch's optimizers create no state for them)."""
    return sum(pp.total for name, pp in part_params(shape).items() if name != "vision_tower")


def _full_matrices(shape: ModelShape) -> list[tuple[int, int]]:
    """(rows, cols) of a full fine-tune's trainable tensors: the projections of the decoder and the audio
    encoder (`lora_targets(..., "language+audio")`), the token and per-layer embedding tables, and the
    rest (norms, LAuReL, AltUp, ...) counted as one vector (for the factored optimizers' bound)."""
    mats = list(lora_targets(shape, "language+audio"))
    mats += [(shape.vocab_size, shape.hidden_size),
             (shape.vocab_size_per_layer_input, shape.num_layers * shape.hidden_size_per_layer_input)]
    rest = full_trainable_params(shape) - sum(a * b for a, b in mats)
    return mats + [(1, max(0, rest))]


def trainable_state(shape: ModelShape, config: TrainConfig, options: EstimateOptions) -> dict[str, int]:
    """Bytes of the trainable weights' extra state: gradients, optimizer states, fp32 master copies.

    LoRA (`finetuning_type` lora):
    * `lora_params` = P x adapter bytes (fp32: peft upcasts adapters on a bf16 base).
    * `lora_grads` = P x adapter bytes (alive between micro-batches of gradient accumulation).
    * `optimizer_states`: see `_optimizer_state_bytes` (AdamW 8 P).
    * `lora_master_fp32`: 4 P when adapters are kept in bf16/fp16 (mixed precision keeps an fp32
      master copy); 0 with fp32 adapters (they are their own master copy).

    Full fine-tuning (`finetuning_type` full; estimated only, `train` runs LoRA): every parameter
    but the vision tower's is trainable (`full_trainable_params`, P); the weights themselves are the
    bf16 `weights_*` terms. Mixed-precision Adam as the ZeRO paper counts it (Rajbhandari et al.
    2020, sec. 3.1: 2 + 2 + 12 = 16 bytes per parameter): `full_grads` bf16 gradients 2 P,
    `full_master_fp32` the fp32 master weights 4 P, `optimizer_states` two fp32 moments 8 P
    (8-bit AdamW / Adafactor per `_optimizer_state_bytes`). A script that steps AdamW on bf16
    weights directly ("pure bf16") needs 8 instead of 16 bytes per parameter and loses small updates.
    """
    if config.finetuning_type == "full":
        numel = full_trainable_params(shape)
        opt = _optimizer_state_bytes(_full_matrices(shape), config.optimizer)
        return {"lora_params": 0, "lora_grads": 0, "optimizer_states": opt, "lora_master_fp32": 0,
                "full_grads": 2 * numel, "full_master_fp32": 4 * numel}
    r = config.lora_rank
    ab = dtype_bytes(options.adapter_dtype)
    mats = []
    for i, o in lora_targets(shape, config.lora_targets):
        mats += [(r, i), (o, r)]
    numel = sum(a * b for a, b in mats)
    opt = _optimizer_state_bytes(mats, config.optimizer)
    master = 4 * numel if ab < 4 else 0
    return {"lora_params": numel * ab, "lora_grads": numel * ab, "optimizer_states": opt, "lora_master_fp32": master}


def optimizer_step_bytes(state: dict[str, int], config: TrainConfig) -> int:
    """Temporaries of the optimizer step: torch's foreach AdamW allocates one fp32 buffer per
    parameter for sqrt(v) + eps (torch/optim/adamw.py `_multi_tensor_adamw`): the LoRA parameters'
    bytes, or the fp32 master weights' in a full fine-tune; gradient clipping's foreach norm adds a
    small one. 8-bit AdamW and Adafactor update in place (their kernels), so ~0 beyond a per-tensor
    scratch."""
    if config.optimizer == "adamw":
        return state.get("full_master_fp32") or state["lora_params"]
    return 0


# --------------------------------------------------------------------------------------------------
# Activations saved for backward (Gemma3nTextDecoderLayer.forward)


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


def dropout_mask_bytes(config: TrainConfig, device: str, options: EstimateOptions) -> int:
    """Bytes per element of the LoRA dropout mask saved for backward: 0 without dropout; on CPU
    ATen's non-fused dropout saves a noise tensor in the input dtype (fp32 adapters: 4 bytes,
    aten/src/ATen/native/Dropout.cpp `_dropout_impl`); on CUDA/MPS `native_dropout` saves a bool
    mask (1 byte)."""
    if config.lora_dropout <= 0.0 or config.finetuning_type == "full":
        return 0
    return dtype_bytes(options.adapter_dtype) if device == "cpu" else 1


def eager_prob_bytes(c: int) -> int:
    """Bytes per attention probability eager attention keeps (transformers `eager_attention_forward`:
    `softmax(..., dtype=torch.float32).to(query.dtype)`): the fp32 softmax (4) and its copy in the
    compute dtype (c): 6 in bf16; in fp32 the `.to` returns the same tensor, so 4."""
    return 4 + (c if c != 4 else 0)


def layer_saved_bytes_per_token(
    shape: ModelShape, config: TrainConfig, device: str, options: EstimateOptions, layer: int, seq_len: int
) -> int:
    """Bytes per token saved for backward by decoder layer `layer` without checkpointing.

    Read off `Gemma3nTextDecoderLayer.forward` (transformers 5.24) and checked tensor by tensor with
    `torch.autograd.graph.saved_tensors_hooks` (within 0.5 % on hidden 256/512 configs); Gemma 4's
    `Gemma4TextDecoderLayer.forward` is the same without AltUp and LAuReL (`shape.altup_num_inputs` and
    `laurel_rank` 0), with 5 hidden norms, and each layer's own head size (`benchmarks/memory_accuracy.py`
    checks it with the same hooks):
      * `shape.hidden_norms` RMSNorms on the hidden width (Gemma 3n: input, laurel, post-attention,
        pre/post feed-forward, post per-layer-input, AltUp router twice; Gemma 4: input,
        post-attention, pre/post feed-forward, post per-layer-input) upcast to fp32 and save it: (4h + 8) each;
        q_norm/k_norm/v_norm on the heads: 4 q + 8 heads, 4 kv + 8 kv_heads each (owners only);
      * AltUp predict/correct keep the n-stream stack twice: 2 n h c (+ tiny coefficient tensors);
      * LoRA on each wrapped Linear (fp32 adapters, peft `Linear.forward` casts x to fp32):
        (a + m) in + a r (a = adapter bytes, m = dropout mask bytes, see `dropout_mask_bytes`);
        frozen base Linears save no input (their weights need no gradient). A full fine-tune instead
        saves every Linear's distinct input in the compute dtype, c (3 h + q + I + laurel rank + p)
        (derived from the same forward, not measured: training here is LoRA only);
      * attention: SDPA saves q, k, v (kv heads; shared layers reuse another layer's k/v), its output
        and the logsumexp: 2 q c + 2 kv c + 4 heads; eager saves q and the repeated k and v
        (3 q c), the fp32 softmax and its copy in the compute dtype: heads x seq x `eager_prob_bytes(c)`
        (the quadratic term);
      * MLP: gelu input, gelu output and up output, 3 I c (+ I c for the top-k sparse layers);
      * per-layer input gate: p c.
    c = compute dtype bytes (bf16: 2).
    """
    h, p, n = shape.hidden_size, shape.hidden_size_per_layer_input, shape.altup_num_inputs
    q, kv, kv_heads = shape.layer_q_dim(layer), shape.layer_kv_dim(layer), shape.layer_kv_heads_of(layer)
    inter = shape.intermediate_sizes[layer]
    c = dtype_bytes(compute_dtype_name(device, options.compute_dtype))
    a = dtype_bytes(options.adapter_dtype)
    m = dropout_mask_bytes(config, device, options)
    r = config.lora_rank
    owner = layer < shape.kv_owner_layers
    total = shape.hidden_norms * (4 * h + 8) + (4 * q + 8 * shape.num_heads)
    if owner:
        total += 2 * (4 * kv + 8 * kv_heads)
    total += 2 * n * h * c + 8 * n + n * n * c + n * c  # AltUp (Gemma 3n; n = 0 for Gemma 4)
    if config.finetuning_type == "full":
        # every Linear is trainable and saves its input for its weight gradient (in the compute
        # dtype; q/k/v share one input, as do gate/up and laurel's left): q/k/v (h), o (q), gate/up
        # (h), down (I), laurel right (rank), per-layer gate (h) and projection (p)
        total += c * (3 * h + q + inter + shape.laurel_rank + p)
    else:
        lora_in = [h, h, h, q, inter] + ([h, h] if owner else [])
        total += sum((a + m) * i + a * r for i in lora_in)
    if options.attn_implementation == "eager":
        total += 3 * q * c + shape.num_heads * seq_len * eager_prob_bytes(c)
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
      the n-stream AltUp stack, n h c per token (measured 2,048 B/token at h=256: exact; Gemma 4 has
      one stream, h c). Plus, once: the per-layer inputs (L p c), the rotary tables (cos and sin per
      head size) and attention masks (2 masks of seq x seq x c per row, full and sliding), the final
      AltUp un-embedding + norm (~12 h c; with enable_input_require_grads under checkpointing, ~9 h c
      more for the embedding side); Gemma 4: the final norm's fp32 input (4 h + 8), and with input
      grads the per-layer projection's norm, (4 p + 8) L (`Gemma4TextModel.project_per_layer_inputs`).
    * `activations_recompute`: with checkpointing, backward re-runs one layer, whose saved tensors
      (the largest layer's `layer_saved_bytes_per_token`) are alive next to the checkpoints.
    * `backward_workspace`: gradients of one layer's largest intermediates while it runs backward,
      (3 I + 2 n h) c per token (Gemma3nTextMLP / AltUp autograd formulas), plus with eager
      attention the gradients of the (heads, seq, seq) probabilities at the peak, heads x seq x
      `EAGER_BACKWARD_BYTES_PER_PROB` (measured).
    All x batch_size x seq_len.
    """
    tokens = config.batch_size * seq_len
    c = dtype_bytes(compute_dtype_name(device, options.compute_dtype))
    h, L, p, n = shape.hidden_size, shape.num_layers, shape.hidden_size_per_layer_input, shape.residual_streams
    per_layer = [layer_saved_bytes_per_token(shape, config, device, options, i, seq_len) for i in range(L)]
    dims = [shape.layer_head_dim(i) for i in range(L)] or [shape.head_dim]
    rotary = 2 * (min(dims) + max(dims))  # cos + sin of the sliding and the full layers' rotary tables
    if shape.altup_num_inputs:
        final, input_grad = FINAL_SAVED_H_ELEMS * h * c, INPUT_GRAD_SAVED_H_ELEMS * h * c
    else:  # Gemma 4: the final RMSNorm's fp32 input; with input grads, the per-layer projection's norm
        final, input_grad = 4 * h + 8, (4 * p + 8) * L
    once = L * p * c + final + 2 * seq_len * c + rotary * c
    if config.gradient_checkpointing:
        once += input_grad
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


# --------------------------------------------------------------------------------------------------
# Logits and loss


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
    c = dtype_bytes(compute_dtype_name(device, options.compute_dtype))
    per_pos = c + 12 + (c if options.keep_logits else 0)
    return shape.vocab_size * per_pos * config.batch_size * answer_tokens


# --------------------------------------------------------------------------------------------------
# Audio encoder


MEL_FRAMES_PER_SECOND = 100  # Gemma3nAudioFeatureExtractor: hop 160 samples at 16 kHz.
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


def audio_encoder_bytes(
    shape: ModelShape, config: TrainConfig, device: str, options: EstimateOptions, clip_s: float,
    clips_per_row: int = 1,
) -> dict[str, int]:
    """Audio encoder activations for the longest clip, per micro-batch.

    The encoder runs on every clip of every row of the micro-batch at once, each padded to the
    longest (`Gemma3nModel.get_audio_features` on input_features (C, F, 128)), so the clip count is
    C = batch x `clips_per_row` (the most clips of a kept row; a tutoring dialogue has several).
    Frames after the 4x convolutional subsampling: F = ceil(min(clip, 30 s) x 100 / 4).
    * frozen (`language` targets): only one conformer block's intermediates are alive (no graph):
      `audio_encoder_transient` = C x (248 x h_a x F + 19 MiB) (measured, see the constants).
    * with LoRA in the conformer (`language+audio`) and no gradient checkpointing: every block keeps
      its saved tensors through the decoder's forward and backward: `audio_encoder_saved` = C x
      layers x F x h_a x (86 + 16 (a + m)) + LoRA rank terms, with a, m the adapter and
      dropout-mask bytes (`dropout_mask_bytes`).
    * with LoRA in the conformer and gradient checkpointing, every block is checkpointed too
      (`pipeline.model.loading.checkpoint_audio_encoder_blocks`): `audio_encoder_saved` = C x
      layers x F x h_a x c (each block's input), and `audio_encoder_recompute` = one block's saved
      tensors (the per-block figure above), alive only while that block runs backward again, at
      the end of the step's backward (the `audio_backward` moment of `pipeline.memory.phases`).
    * full fine-tuning (estimate only): the encoder trains, so as with LoRA in it and no
      checkpointing, with its Linear inputs saved in the compute dtype: C x layers x F x h_a x (86 + 16 c).
    """
    if clip_s <= 0:
        return {"audio_encoder_transient": 0, "audio_encoder_saved": 0, "audio_encoder_recompute": 0}
    frames = math.ceil(min(clip_s, MAX_CLIP_S) * MEL_FRAMES_PER_SECOND / 4)
    b = config.batch_size * max(1, int(clips_per_row))
    ha = shape.audio_hidden
    transient = (AUDIO_FROZEN_BYTES_PER_FRAME_PER_H * ha * frames + AUDIO_FROZEN_FIXED_BYTES) * b
    saved = recompute = 0
    if config.finetuning_type == "full":  # the encoder trains: every block keeps its saved tensors, Linear inputs in c
        c = dtype_bytes(compute_dtype_name(device, options.compute_dtype))
        saved = ha * (AUDIO_BASE_SAVED_BYTES_PER_FRAME_PER_H + AUDIO_LORA_INPUT_H * c) * shape.audio_layers * frames * b
    elif config.lora_targets == "language+audio":
        a = dtype_bytes(options.adapter_dtype)
        m = dropout_mask_bytes(config, device, options)
        per_frame_layer = ha * (AUDIO_BASE_SAVED_BYTES_PER_FRAME_PER_H + AUDIO_LORA_INPUT_H * (a + m)) + 12 * a * config.lora_rank
        if config.gradient_checkpointing:
            saved = shape.audio_layers * frames * b * ha * dtype_bytes(compute_dtype_name(device, options.compute_dtype))
            recompute = per_frame_layer * frames * b
        else:
            saved = per_frame_layer * shape.audio_layers * frames * b
    return {"audio_encoder_transient": transient, "audio_encoder_saved": saved, "audio_encoder_recompute": recompute}


# --------------------------------------------------------------------------------------------------
# CPU kernel caches


def cpu_kernel_cache(config: TrainConfig, device: str, row_tokens: list[int], clip_count: int,
                     answer_tokens: list[int] | None = None) -> int:
    """Bytes of oneDNN kernels a CPU training run caches beyond its first batch shape.

    PyTorch's oneDNN (mkldnn) backend builds and caches a kernel ("primitive") for every new matrix
    shape and holds it for the rest of the process, so a run's resident memory grows with every new
    row length (the decoder's matmuls, forward and backward), clip length (the audio encoder's) and
    answer length (the logits at the supervised positions) over its first steps and evaluations; one
    optimizer step on one batch (the probe) never sees it.

    Formula, with the sizes per new shape of the default calibration record
    (`pipeline.calibration.store.device_defaults`: measured on one CPU, dated there): one
    `cpu_kernel_cache_bytes_per_row_length` per distinct row length after the first (`row_tokens`: the
    kept rows of both splits; a batch is padded to its longest row, so there are at most as many
    lengths as rows), one `cpu_kernel_cache_bytes_per_clip_length` per clip after the first
    (`clip_count`: recorded clips almost never share a length to the 10 ms frame) and one
    `cpu_kernel_cache_bytes_per_answer_length` per distinct answer length after the first
    (`answer_tokens`; with batches of several rows, their sums), each capped at
    `cpu_kernel_cache_max_shapes`. `pipeline.calibration.fit` scales the term per machine. 0 off CPU
    (CUDA/MPS kernels are not cached per shape in host memory this way) and when the lengths are unknown."""
    if device != "cpu" or not row_tokens:
        return 0
    sizes = device_defaults()
    cap = sizes.cpu_kernel_cache_max_shapes
    lengths = min(len(set(row_tokens)), cap)
    clips = min(max(clip_count, 1), cap)
    answers = min(max(len(set(answer_tokens or [])), 1), cap)
    return ((lengths - 1) * sizes.cpu_kernel_cache_bytes_per_row_length
            + (clips - 1) * sizes.cpu_kernel_cache_bytes_per_clip_length
            + (answers - 1) * sizes.cpu_kernel_cache_bytes_per_answer_length)


# --------------------------------------------------------------------------------------------------
# Runtime overhead


def runtime_overhead(device: str, calibrated_bytes: int | None = None) -> int:
    """Bytes the runtime holds on `device` that are not tensors of ours: this machine's calibrated
    figure when given (`pipeline.calibration.fit.DeviceCalibration.runtime_overhead_bytes`), else the
    default calibration record's (`pipeline.calibration.store.device_defaults().runtime_overhead_bytes`:
    on CPU the process after its imports plus the processor, model objects and first kernels, measured
    on the development CPU; on CUDA and MPS assumed from public reports; its `runtime_overhead_note`
    says which)."""
    return int(calibrated_bytes) if calibrated_bytes is not None else device_defaults().runtime_overhead_bytes[device]
