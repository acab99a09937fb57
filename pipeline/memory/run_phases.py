"""The whole run: the memory of every phase a training process goes through, not only one step.

What runs out of memory is the process, so the estimate's total is the largest of these phases (the
names are the ones the trainer records its measured peaks under, `pipeline.training.peak_memory`):

  * `load`: the model loaded, quantized and wrapped (`estimate_memory`'s `load` phase; on CPU only
    what loading has read is resident: the quantized weights and the checkpoint pages quantizing read,
    `not_read_at_load`);
  * `preflight`: one forward+backward on the worst-case batch before the optimizer exists: the
    step's largest moment without the optimizer states (`pipeline.training.worst_case.preflight`);
  * `step`: the optimizer steps, the largest of `estimate_memory`'s step moments (audio encoder,
    loss, a layer's backward, the optimizer update), plus on CPU the kernels cached for every batch
    shape the run meets (`pipeline.memory.terms.cpu_kernel_cache`) and the retained heap of the
    run's largest micro-batch rather than its median one (`cpu_heap_run_spread`,
    `pipeline.memory.cpu_heap.run_spread_fraction`, which the preflight counts too: it is
    the first micro-batch); one step on one batch, what `--measure` runs and
    `MemoryEstimate.step_bytes` prices, has neither;
  * `eval`: a forward pass without gradients over the eval split's worst case (`batch_size` rows of
    its longest row, with its longest answer and clip, as `transformers.Trainer.evaluate` batches
    them: `per_device_eval_batch_size` = `batch_size`), see `eval_forward_bytes`;
  * `save`: a checkpoint (and the final adapter): safetensors copies every adapter tensor into
    host bytes before writing (`safetensors.torch.save_file` -> `_flatten` -> `_tobytes`); the
    optimizer states are written from their own storage by `torch.save` (no copy on CPU); on CPU it
    starts from a handed-back heap (`pipeline.host.free_heap`) beside the cached kernels;
  * `resume`: reading a checkpoint back: the adapter file is read whole before it is copied into
    the model (peft `load_peft_weights`), and the optimizer states are read into place.

Every phase's total includes the device's runtime overhead, so each compares directly with what the
trainer measures for it. Pure arithmetic, no torch.
"""

from __future__ import annotations

from pipeline.calibration.precision import compute_dtype_name
from pipeline.config import TrainConfig
from pipeline.memory.inputs import EstimateOptions, LengthStats
from pipeline.model.shape import ModelShape
from pipeline.memory.cpu_heap import allocator_retention, run_spread_fraction
from pipeline.memory.terms import (
    audio_encoder_bytes,
    cpu_kernel_cache,
    eager_prob_bytes,
)
from pipeline.units import dtype_bytes

RUN_PHASES = ("load", "preflight", "step", "eval", "save", "resume")
"""The phases of a training process, in the order a run meets them (the trainer's
`pipeline.training.peak_memory.RUN_PHASES` are the same names)."""
STEP_MOMENTS = ("audio", "loss", "layer_backward", "optimizer", "audio_backward")
"""The moments of one optimizer step that `estimate_memory` prices (its `phases` besides `load`)."""
LOAD_STATIC_PREFIXES = ("weights_",)
"""The static terms that exist while loading: the weights only (LoRA adapters, their gradients and the
optimizer states are created after loading)."""
PREFLIGHT_MOMENTS = ("audio", "loss", "layer_backward", "audio_backward")
"""The preflight runs forward and backward but never the optimizer."""
EVAL_LOGITS_BYTES_PER_VOCAB = 8
"""Bytes per vocabulary entry and answer position of evaluation's loss beyond the returned logits
(compute dtype): their fp32 copy and log_softmax's fp32 output (`torch.nn.functional.cross_entropy`
in `pipeline.training.train.answer_loss`); without a graph nothing else of the loss survives."""


def eval_forward_bytes(shape: ModelShape, config: TrainConfig, device: str, options: EstimateOptions,
                       seq_len: int, answer_tokens: int, clip_s: float) -> dict[str, int]:
    """Bytes alive at the peak of one evaluation forward (no gradients, nothing saved for backward)
    on `batch_size` rows padded to `seq_len` tokens, `answer_tokens` supervised each, one `clip_s`
    clip each.

    * `eval_audio_encoder`: the audio encoder's forward, before the decoder runs: the frozen
      encoder's transient (`audio_encoder_bytes`; without a graph, LoRA in it saves nothing).
    * `eval_decoder`: per token, the AltUp stack (n h c), the per-layer inputs of every layer
      (L p c, computed once before the first layer), the two attention masks (2 seq c per row),
      and the largest layer's temporaries: its MLP (3 I c: gate, up and their product; one I c more
      in the top-k sparse layers) or, with eager attention, its probabilities (heads x seq x
      `eager_prob_bytes(c)`: fp32 softmax and its copy in the compute dtype), whichever is larger;
    * `eval_logits`: logits at the answer positions (`answer_loss`): V x (c + 8) per position
      (`EVAL_LOGITS_BYTES_PER_VOCAB`).
    * `eval_allocator_retention`: CPU only, glibc's resident heap for this many tokens and this clip
      (`allocator_retention`, as for a step of the same length; evaluation starts from a handed-back
      heap, `pipeline.host.free_heap`, and its forward passes leave at most what a step's do:
      an upper bound, not measured apart).
    """
    if seq_len <= 0:
        return {"eval_audio_encoder": 0, "eval_decoder": 0, "eval_logits": 0, "eval_allocator_retention": 0}
    c = dtype_bytes(compute_dtype_name(device))
    h, L, p, n = shape.hidden_size, shape.num_layers, shape.hidden_size_per_layer_input, shape.altup_num_inputs
    widest = max(shape.intermediate_sizes)
    mlp = (4 if shape.sparse_layers else 3) * widest * c
    attention = shape.num_heads * seq_len * eager_prob_bytes(c) if options.attn_implementation == "eager" else 0
    per_token = n * h * c + L * p * c + 2 * seq_len * c + max(mlp, attention)
    tokens = config.batch_size * seq_len
    logits = shape.vocab_size * (c + EVAL_LOGITS_BYTES_PER_VOCAB) * config.batch_size * answer_tokens
    audio = audio_encoder_bytes(shape, config.replace(lora_targets="language"), device, options, clip_s)
    retention = allocator_retention(shape, config, device, seq_len, options, clip_s)
    return {
        "eval_audio_encoder": audio["audio_encoder_transient"],
        "eval_decoder": per_token * tokens,
        "eval_logits": logits,
        "eval_allocator_retention": retention,
    }


def eval_lengths(lengths: LengthStats, max_length: int) -> tuple[int, int, float]:
    """(longest row, longest answer, longest clip) of the eval split that `max_length` keeps; the
    train split's when the dataset does not say (the same rows' worst case is assumed)."""
    if lengths.eval_row_tokens:
        kept = [(n, a) for n, a in zip(lengths.eval_row_tokens, lengths.eval_answer_tokens or [0] * len(lengths.eval_row_tokens))
                if n <= max_length]
        if not kept:
            return 0, 0, 0.0
        seq = max(n for n, _ in kept)
        answer = max(a for _, a in kept) or min(seq, lengths.kept_longest_answer(max_length))
        return seq, min(answer, seq), lengths.eval_longest_clip_s or lengths.longest_clip_s
    return lengths.kept_longest(max_length), lengths.kept_longest_answer(max_length), lengths.longest_clip_s


def not_read_at_load(config: TrainConfig, device: str, options: EstimateOptions) -> tuple[str, ...]:
    """Weight components not yet resident when loading ends: on CPU the trainer's weights are views
    into the memory-mapped checkpoint (`EstimateOptions.weights_mapped`), resident only once read,
    and loading reads only what it quantizes; the rest is read by the first step."""
    if device != "cpu" or not options.weights_mapped:
        return ()
    unquantized = ("weights_token_embedding", "weights_per_layer_embedding", "weights_audio_encoder",
                   "weights_vision_tower")
    return unquantized + (("weights_text_decoder", "weights_projections") if config.quantization == "none" else ())


def whole_run(shape: ModelShape, config: TrainConfig, lengths: LengthStats, device: str, options: EstimateOptions,
              components: dict[str, int], phases: dict[str, int], phase_members: dict[str, tuple[str, ...]],
              static_prefixes: tuple[str, ...]) -> tuple[dict[str, int], dict[str, int], dict[str, list[str]]]:
    """The run's phases from the step's (see the module docstring).

    `components`, `phases` (without the runtime overhead), `phase_members` and `static_prefixes`
    are `estimate_memory`'s. Returns (new components, phase -> bytes including the runtime
    overhead, phase -> names of the components alive at that phase's peak, which add up to its
    bytes). Evaluation counts only when the run evaluates (`eval_steps` > 0 and an eval split that
    `max_length` leaves rows in, or unknown eval lengths); the final adapter save always happens;
    resume counts for every run (any run can be stopped and resumed).
    """
    static = [k for k in components if k.startswith(static_prefixes)]
    seq, answer, clip = eval_lengths(lengths, config.max_length)
    evaluates = config.eval_steps > 0 and seq > 0
    extra = eval_forward_bytes(shape, config, device, options, seq if evaluates else 0, answer, clip)
    extra["checkpoint_serialise"] = components["lora_params"]
    extra["checkpoint_read"] = components["lora_params"]
    rows = list(zip(lengths.row_tokens, lengths.answer_tokens or [0] * len(lengths.row_tokens))) + \
        list(zip(lengths.eval_row_tokens, lengths.eval_answer_tokens or [0] * len(lengths.eval_row_tokens)))
    kept = [(n, a) for n, a in rows if n <= config.max_length]
    extra["cpu_kernel_cache"] = cpu_kernel_cache(config, device, [n for n, _ in kept],
                                                 len(kept) if lengths.longest_clip_s > 0 else 0, [a for _, a in kept if a])
    step_moment = max(STEP_MOMENTS, key=lambda m: phases[m])
    # the run's peak is its largest micro-batch, not the median one the retention is fitted on
    extra["cpu_heap_run_spread"] = (int(components.get("allocator_retention", 0) * run_spread_fraction(config))
                                    if "allocator_retention" in phase_members[step_moment] else 0)
    every = {**components, **extra}
    preflight_moment = max(PREFLIGHT_MOMENTS, key=lambda m: phases[m])
    forward = (["eval_audio_encoder"] if extra["eval_audio_encoder"] > extra["eval_decoder"] + extra["eval_logits"]
               else ["eval_decoder", "eval_logits"])
    unread = not_read_at_load(config, device, options)
    members = {
        "load": [k for k in static if k.startswith(LOAD_STATIC_PREFIXES) and k not in unread]
        + list(phase_members["load"]),
        "preflight": [k for k in static if k != "optimizer_states"] + list(phase_members[preflight_moment])
        + (["cpu_heap_run_spread"] if "allocator_retention" in phase_members[preflight_moment] else []),
        "step": static + list(phase_members[step_moment]) + ["cpu_kernel_cache", "cpu_heap_run_spread"],
        "eval": ([k for k in static if k != "lora_grads"] + forward + ["eval_allocator_retention", "cpu_kernel_cache"])
        if evaluates else [],
        "save": static + ["checkpoint_serialise", "cpu_kernel_cache"],
        "resume": static + ["checkpoint_read"],
    }
    members = {phase: [k for k in names if every.get(k)] + (["runtime_overhead"] if names else [])
               for phase, names in members.items()}
    totals = {phase: sum(every[k] for k in names) for phase, names in members.items()}
    return extra, totals, members
