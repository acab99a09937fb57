"""CPU only: the heap glibc keeps resident beyond a micro-batch's live tensors (`allocator_retention`).

Measured constants with their sources below; `pipeline.memory.phases.estimate_memory` adds the term to
the forward/backward moments and `pipeline.memory.run_phases` to evaluation and the run's spread.
"""

from __future__ import annotations

from dataclasses import replace

from pipeline.config import TrainConfig
from pipeline.memory.inputs import EstimateOptions
from pipeline.model.shape import ModelShape
from pipeline.calibration.precision import compute_dtype_name
from pipeline.memory.terms import activations
from pipeline.host.free_heap import heap_can_follow_live_tensors

# CPU only: glibc malloc keeps freed heap memory resident. Its mmap threshold rises to the size of
# the largest freed mmapped chunk (up to 32 MiB, glibc malloc.c `DEFAULT_MMAP_THRESHOLD_MAX`), so
# activation-sized tensors below that are served from the heap, and memory freed in the middle of
# the heap stays resident. The trainer hands the free heap back before every micro-batch and phase
# (`pipeline.host.free_heap`), so what remains is what one micro-batch's own allocations leave
# resident beyond its live tensors. Measured as (peak RSS of the probe's step, which starts from a
# handed-back heap) - (the tensor-level estimate without this term, which is within -6..+1 % of
# the peak RSS with MALLOC_MMAP_THRESHOLD_=65536, where RSS follows live tensors) on
# benchmarks/memory_accuracy.py's grid (tiny, mid-size and full-size E2B in bf16; 2-5 runs per row,
# each row's median) and on full-size E2B in 4-bit with a 30 s clip (6 runs), 2026-11-30. It follows
#     batch x tokens x (a x I + b x L x h) + clip seconds x c     (I = widest MLP, L = decoder layers, h = hidden size)
# one layer's MLP-width temporaries, hidden-width temporaries left behind by every layer, and the
# audio encoder's temporaries per second of the row's audio, with (a, b, c) = (102, 42, 2.35e6) bytes
# with gradient checkpointing and (0, 138, 0) without: non-negative least squares on each row's
# median, weighted by 1 / measured peak; every row's median is then within 2.0 %. The audio part is per row, not
# per batch: multiplied by the batch it overestimated a batch of 3 rows with 20 s clips by 12 %.
# Out of sample (four configurations no constant saw, one run each): +8.5, -4.4, -4.6 and +8.3 %.
# Run to run the retained heap varies by +-0.1-0.2 GiB, which the benchmark shows as a range. Not
# modelled: a tensor above 32 MiB (B x T x I x 2 bytes > 32 MiB, i.e. over 2,048 tokens per
# micro-batch on E2B) is always mmapped and never retained, so very long rows there are overestimated.
CPU_HEAP_RETENTION_PER_TOKEN = {True: (102, 42), False: (0, 138)}
"""gradient_checkpointing -> (bytes per MLP unit, bytes per hidden unit per layer), per token of the micro-batch."""
CPU_HEAP_RETENTION_PER_AUDIO_SECOND = {True: 2_350_000, False: 0}
"""gradient_checkpointing -> bytes per second of the row's audio (once per micro-batch, not per row)."""


CPU_HEAP_RETENTION_FITTED_DTYPE = "bfloat16"
"""The compute dtype the retention constants above were measured in (`retention_dtype_scale` prices others)."""


CPU_HEAP_RETENTION_RUN_SPREAD = {True: 0.75, False: 0.13}
"""gradient_checkpointing -> fraction of `allocator_retention` a whole run's steps add on CPU: the
largest of many micro-batches, where the retention constants price the median one.

How much of its freed heap glibc keeps varies from micro-batch to micro-batch and from process to
process, and a run's peak is its largest micro-batch (or its preflight, the first one). Uncalibrated,
this is the top of what was measured on any CPU, so that the whole run's estimate errs on the safe
side:
  * without checkpointing 0.13: over benchmarks/memory_accuracy.py's rows with 3-6 step probes each
    (development CPU, bf16, 2026-11-30) the largest probe exceeded the row's median by 3-13 % of the
    row's retention, and whole runs (6 steps) of the mid-size 2,048-token row and full-size E2B in
    4-bit with a 30 s clip peaked 0.1-0.3 GiB above their median probe; on an AMD EPYC in fp32
    (2026-12-01) the rows without checkpointing were within 0..+12.6 % with it;
  * with checkpointing 0.75: on that EPYC in fp32 the whole runs of the five mid-size rows with
    checkpointing peaked 0.15-0.85 GiB above their steps' estimate (0.13-0.66 of their retention;
    the same 2,048-token step measured 3.29-4.00 GiB in six fresh processes, against 3.51 GiB
    priced), mostly in the preflight. With the fraction at 0.75 those runs are estimated -3..+19 %.
"""


def run_spread_fraction(config: TrainConfig) -> float:
    """`CPU_HEAP_RETENTION_RUN_SPREAD` for the run's gradient checkpointing (a fraction of `allocator_retention`)."""
    return CPU_HEAP_RETENTION_RUN_SPREAD[bool(config.gradient_checkpointing)]


def allocator_retention(
    shape: ModelShape, config: TrainConfig, device: str, seq_len: int, options: EstimateOptions | None = None,
    audio_seconds_per_row: float = 0.0,
) -> int:
    """Memory the allocator keeps resident beyond live tensors during one micro-batch's forward and
    backward (bytes).

    CPU (glibc malloc): batch_size x seq_len x (a x I + b x L x h) + audio_seconds_per_row x c with
    (a, b) = CPU_HEAP_RETENTION_PER_TOKEN and c = CPU_HEAP_RETENTION_PER_AUDIO_SECOND for the run's
    gradient checkpointing (measured, see the constants), I the widest MLP, L the decoder layers, h
    the hidden size, `audio_seconds_per_row` the seconds of audio in the longest row (clips per row
    x the longest clip); 0 when `options.cpu_heap_retention` is False (a training process on this host
    keeps no freed heap: it runs on TCMalloc, or with MALLOC_MMAP_THRESHOLD_=65536;
    `pipeline.host.free_heap.heap_follows_live_tensors`, the option's default) and when the run
    asks for the low-memory heap (`config.low_memory_heap`) on a host that can pin it
    (`pipeline.host.free_heap.heap_can_follow_live_tensors`). CUDA: the caching allocator's
    slack is in the runtime overhead. MPS: not measured, 0.
    """
    if device != "cpu" or not (options or EstimateOptions()).cpu_heap_retention:
        return 0  # the host's allocator keeps none (`EstimateOptions.cpu_heap_retention`'s default)
    if config.low_memory_heap and heap_can_follow_live_tensors():
        return 0
    checkpointing = bool(config.gradient_checkpointing)
    per_mlp_unit, per_layer_hidden_unit = CPU_HEAP_RETENTION_PER_TOKEN[checkpointing]
    per_token = per_mlp_unit * max(shape.intermediate_sizes) + per_layer_hidden_unit * shape.num_layers * shape.hidden_size
    audio = max(0.0, float(audio_seconds_per_row)) * CPU_HEAP_RETENTION_PER_AUDIO_SECOND[checkpointing]
    retained = config.batch_size * seq_len * per_token + audio
    return int(retained * retention_dtype_scale(shape, config, device, options or EstimateOptions(), seq_len))


def retention_dtype_scale(shape: ModelShape, config: TrainConfig, device: str, options: EstimateOptions, seq_len: int) -> float:
    """How much larger the heap glibc keeps is in this estimate's compute dtype than in
    `CPU_HEAP_RETENTION_FITTED_DTYPE`, the dtype its constants were measured in: the retained heap is
    freed activation temporaries, so it scales as the activations and backward workspace do
    (`activations` in both dtypes; not simply c / 2, since norms and softmax are fp32 in both).
    Measured on an AMD EPYC in fp32 (2026-12-01, `benchmarks/memory_accuracy.py` rows 2-4, mid-size):
    without it the estimates were 0.9-7.4 % under the measured step peaks, with it -2.3..+0.9 %."""
    if seq_len <= 0 or compute_dtype_name(device, options.compute_dtype) == CPU_HEAP_RETENTION_FITTED_DTYPE:
        return 1.0
    here = sum(activations(shape, config, device, options, seq_len).values())
    fitted = sum(activations(shape, config, device, replace(options, compute_dtype=CPU_HEAP_RETENTION_FITTED_DTYPE), seq_len).values())
    return here / fitted if fitted > 0 else 1.0
