"""CPU only: the heap glibc keeps resident beyond a micro-batch's live tensors (`allocator_retention`).

glibc malloc keeps freed heap memory resident: its mmap threshold rises to the size of the largest
freed mmapped chunk (up to 32 MiB, glibc malloc.c `DEFAULT_MMAP_THRESHOLD_MAX`), so activation-sized
tensors below it are served from the heap, and memory freed in the middle of the heap stays resident.
The trainer hands the free heap back before every micro-batch and phase (`pipeline.host.free_heap`),
so what remains is what one micro-batch's own allocations leave beyond its live tensors. The
formulas are here; their coefficients were fitted on one machine and ship as the default calibration
record (`pipeline.calibration.store.device_defaults`: `cpu_heap_retention_*`, each with its dated lab
note: how, on what, how close), which `pipeline.calibration.fit` scales per machine.
`pipeline.memory.phases.estimate_memory` adds the term to the forward/backward moments and
`pipeline.memory.run_phases` to evaluation and the run's spread.
"""

from __future__ import annotations

from dataclasses import replace

from pipeline.config import TrainConfig
from pipeline.memory.inputs import EstimateOptions
from pipeline.model.shape import ModelShape
from pipeline.calibration.precision import compute_dtype_name
from pipeline.calibration.store import device_defaults
from pipeline.memory.terms import activations
from pipeline.host.free_heap import heap_can_follow_live_tensors


def run_spread_fraction(config: TrainConfig) -> float:
    """The fraction of `allocator_retention` a whole run's steps add on CPU for the run's gradient
    checkpointing (the default calibration record's `cpu_heap_retention_run_spread`): the largest of many
    micro-batches, where the retention prices the median one; uncalibrated, the top of what any CPU
    measured, so the whole run's estimate errs on the safe side."""
    return device_defaults().cpu_heap_retention_run_spread[bool(config.gradient_checkpointing)]


def allocator_retention(
    shape: ModelShape, config: TrainConfig, device: str, seq_len: int, options: EstimateOptions | None = None,
    audio_seconds_per_row: float = 0.0,
) -> int:
    """Memory the allocator keeps resident beyond live tensors during one micro-batch's forward and
    backward (bytes).

    CPU (glibc malloc): batch_size x seq_len x (a x I + b x L x h) + audio_seconds_per_row x c with
    (a, b) = `cpu_heap_retention_per_token` and c = `cpu_heap_retention_per_audio_second` of the default
    calibration record (`pipeline.calibration.store.device_defaults`; fitted on one CPU in
    `cpu_heap_retention_fitted_dtype`, see its note) for the run's gradient checkpointing: one layer's
    MLP-width temporaries, hidden-width temporaries left by every layer and the audio encoder's per
    second of the row's audio, scaled to this estimate's dtype (`retention_dtype_scale`). I the widest
    MLP, L the decoder layers, h the hidden size, `audio_seconds_per_row` the seconds of audio in the
    longest row (clips per row x the longest clip); 0 when `options.cpu_heap_retention` is False (a training process on this host
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
    fitted = device_defaults()
    per_mlp_unit, per_layer_hidden_unit = fitted.cpu_heap_retention_per_token[checkpointing]
    per_token = per_mlp_unit * max(shape.intermediate_sizes) + per_layer_hidden_unit * shape.num_layers * shape.hidden_size
    audio = max(0.0, float(audio_seconds_per_row)) * fitted.cpu_heap_retention_per_audio_second[checkpointing]
    retained = config.batch_size * seq_len * per_token + audio
    return int(retained * retention_dtype_scale(shape, config, device, options or EstimateOptions(), seq_len))


def retention_dtype_scale(shape: ModelShape, config: TrainConfig, device: str, options: EstimateOptions, seq_len: int) -> float:
    """How much larger the heap glibc keeps is in this estimate's compute dtype than in the dtype its
    coefficients were measured in (the default calibration record's `cpu_heap_retention_fitted_dtype`):
    the retained heap is freed activation temporaries, so it scales as the activations and backward
    workspace do (`activations` in both dtypes; not simply c / 2, since norms and softmax are fp32 in
    both). Checked on an AMD EPYC in fp32 (2026-12-01, `benchmarks/memory_accuracy.py` rows 2-4,
    mid-size): without it the estimates were 0.9-7.4 % under the measured step peaks, with it -2.3..+0.9 %."""
    fitted_dtype = device_defaults().cpu_heap_retention_fitted_dtype
    if seq_len <= 0 or compute_dtype_name(device, options.compute_dtype) == fitted_dtype:
        return 1.0
    here = sum(activations(shape, config, device, options, seq_len).values())
    fitted = sum(activations(shape, config, device, replace(options, compute_dtype=fitted_dtype), seq_len).values())
    return here / fitted if fitted > 0 else 1.0
