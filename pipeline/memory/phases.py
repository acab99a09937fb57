"""The phase model: which terms are alive together at each moment of a training step, and the peak
of the whole run.

The step's peak is the largest of these phases (steady state: the optimizer states exist and, with gradient
accumulation, the LoRA gradients of the previous micro-batch are alive), each the static terms
(weights, LoRA, optimizer states; `load` only the weights, `PHASE_STATIC`) plus:
  * `load`: only what exists while loading: the weights on the device and the bf16 source of the
    matrix being quantized (no LoRA weights, gradients or optimizer states yet; the per-layer table
    with `ple_on_cpu` and a vision tower that is off never reach the GPU),
  * `audio`: the frozen audio encoder's forward on the longest clip (before the decoder runs),
  * `loss`: the start of backward, when every tensor saved for backward, the logits and the fp32
    cross-entropy gradient are alive at once (logits only at the answer's positions, as the
    training loss `pipeline.training.train.answer_loss` computes them),
  * `layer_backward`: a decoder layer's backward (with checkpointing, one layer recomputed),
  * `optimizer`: the optimizer step's temporaries,
and the total adds the per-device runtime overhead. The run goes through more than steps (loading,
the preflight, evaluation, checkpoint saves, resuming: `pipeline.memory.run_phases`), and the
estimate's `total_bytes` is the largest of those run phases, what the training process needs.
`estimate_memory` is the entry point.
"""

from __future__ import annotations

import sys
from dataclasses import asdict, dataclass, field, replace

from pipeline.calibration.fit import DeviceCalibration
from pipeline.calibration.precision import compute_dtype_name
from pipeline.calibration.store import device_defaults
from pipeline.config import TrainConfig
from pipeline.errors import ConfigError
from pipeline.memory.inputs import DEFAULT_ANSWER_TOKENS, EstimateOptions, LengthStats
from pipeline.memory.run_phases import LOAD_STATIC_PREFIXES, STEP_MOMENTS, whole_run
from pipeline.model.catalog import family_of, model_shape, part_params
from pipeline.model.shape import VISION_TOWER_PARAMS
from pipeline.memory.cpu_heap import allocator_retention
from pipeline.memory.terms import (
    activations,
    audio_encoder_bytes,
    checkpoint_dtype,
    dequant_workspace,
    load_checkpoint_pages,
    load_transient,
    logits_loss,
    optimizer_step_bytes,
    ple_on_host,
    runtime_overhead,
    trainable_state,
    weights,
)
from pipeline.units import format_bytes
from pipeline.host.allocator import training_allocator


@dataclass
class MemoryEstimate:
    """Peak memory of a training run and of one training step, per component (bytes).

    Attributes:
        components: name -> bytes of every term (including terms not alive at the peak).
        phases: moment of a step (and `load`) -> bytes (without runtime overhead).
        peak_phase: the largest of `phases`.
        total_bytes: estimated peak memory of the whole run on the device (bytes): the largest of
            `run_phases`, the phase `run_peak_phase`.
        run_phases: run phase (`pipeline.memory.run_phases.RUN_PHASES`: load, preflight, step,
            eval, save, resume) -> bytes including the runtime overhead (0: the run skips it).
        run_peak_phase: the run phase that sets `total_bytes`.
        run_members: run phase -> the components alive at its peak (they add up to its bytes).
        step_bytes: the peak of one optimizer step on the worst-case batch (what `--measure` runs);
            `run_phases["step"]` adds what the run's many batch shapes cache on CPU.
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
    run_phases: dict[str, int] = field(default_factory=dict)
    run_peak_phase: str = "step"
    run_members: dict[str, list[str]] = field(default_factory=dict)
    step_bytes: int = 0

    def to_dict(self) -> dict:
        return asdict(self)


PHASE_MEMBERS = {
    "load": ("load_transient", "load_checkpoint_pages"),
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
    "audio_backward": ("audio_encoder_saved", "audio_encoder_recompute", "allocator_retention"),
}
"""What is alive, besides the static terms, at each candidate peak: loading (the bf16 source of the
matrix being quantized, `load_transient`; on CPU with quantization, the checkpoint's bf16 pages read
while quantizing, `load_checkpoint_pages`); the audio encoder's
forward; the loss (every saved activation + the logits and the fp32 cross-entropy gradient, the
start of backward); a decoder layer's backward (the logits are freed by then; with checkpointing
one layer is recomputed); the
optimizer step; the audio encoder's backward with LoRA in it and gradient checkpointing (one conformer
block recomputed, at the end of backward, when the decoder's tensors are freed)."""
STATIC_PREFIXES = ("weights_", "lora_", "optimizer_states", "full_")
"""Name prefixes of the static terms, alive in every phase after loading."""
PHASE_STATIC = {"load": LOAD_STATIC_PREFIXES}
"""Phases whose static part is narrower than `STATIC_PREFIXES`: while loading only the weights exist
(LoRA adapters, their gradients and the optimizer states are created afterwards)."""


def static_prefixes(phase: str) -> tuple[str, ...]:
    """Name prefixes of the static terms alive in `phase` (`PHASE_STATIC`, else `STATIC_PREFIXES`)."""
    return PHASE_STATIC.get(phase, STATIC_PREFIXES)


def alive_at_peak(name: str, peak_phase: str) -> bool:
    """Whether component `name` is alive at `peak_phase`'s moment: a static term of that phase
    (`static_prefixes`), the runtime overhead, or a member of that phase (`PHASE_MEMBERS`)."""
    return (name.startswith(static_prefixes(peak_phase)) or name == "runtime_overhead"
            or name in PHASE_MEMBERS[peak_phase])


def estimate_memory(
    model_config: dict,
    config: TrainConfig,
    lengths: LengthStats,
    device: str,
    options: EstimateOptions | None = None,
    calibration: DeviceCalibration | None = None,
) -> MemoryEstimate:
    """Peak memory in bytes, per component, of one fine-tuning step of a model of any known family (LoRA,
    or a full fine-tune with `config.finetuning_type` full), and of loading it.

    Args:
        model_config: the model's config.json as a dict (`load_model_config`).
        config: training settings (quantization, LoRA rank/targets/dropout, batch size,
            max_length, gradient checkpointing, optimizer).
        lengths: dataset length statistics; the micro-batch is `batch_size` rows padded to the
            longest row that `max_length` keeps, with the longest clip (as many clips per row as
            the kept row with the most, `LengthStats.kept_max_clips`); the logits cover
            `batch_size` x the longest kept answer (`LengthStats.kept_longest_answer`).
        device: `cpu`, `cuda` or `mps` (not `auto`: resolve it first).
        options: `EstimateOptions` (attention implementation, vision tower, PLE on CPU, ...).
        calibration: this machine's `pipeline.calibration.fit.DeviceCalibration` for `device`, or None:
            the device's terms (runtime overhead, retained heap, kernel caches; `DEVICE_TERMS`) then
            come from it instead of the constants of `pipeline.memory.terms`; the structural terms
            are the same formulas either way.
    Returns:
        `MemoryEstimate`; a step's peak = static (weights, LoRA, grads, optimizer) + its largest
        moment + runtime overhead; `total_bytes` = the largest phase of the whole run
        (`pipeline.memory.run_phases.whole_run`).
    Raises:
        ConfigError: unknown device. ModelLoadError: not a config of a known family.
    """
    if device not in device_defaults().runtime_overhead_bytes:
        raise ConfigError(f"`--device` for the estimate must be cpu, cuda or mps, got {device!r}.")
    options = replace(options or EstimateOptions(), checkpoint_dtype=checkpoint_dtype(model_config))
    shape = model_shape(model_config)
    dtype = compute_dtype_name(device)
    if device == "cpu" and options.weights_mapped and dtype != options.checkpoint_dtype:
        options.weights_mapped = False  # the loader casts every weight into anonymous memory
    family = family_of(model_config)
    seq_len, clip_s = lengths.kept_worst_case(config.max_length, family.audio_tokens)
    notes: list[str] = []
    if seq_len <= 0:
        seq_len = 0
        notes.append(f"max_length {config.max_length} excludes every row; nothing would be trained.")
    comps: dict[str, int] = {}
    comps.update(weights(shape, config, device, options, lengths.distinct_tokens))
    state = trainable_state(shape, config, options)
    comps.update(state)
    comps.update(activations(shape, config, device, options, seq_len))
    answer = lengths.kept_longest_answer(config.max_length) if seq_len > 0 else 0
    if seq_len > 0 and not lengths.answers_known():
        notes.append(f"answer length unknown (no dataset with answer lengths): the logits assume {answer} supervised "
                     f"tokens per row (min(row, {DEFAULT_ANSWER_TOKENS})); build the dataset for its real answers.")
    comps["logits_loss"] = logits_loss(shape, config, device, options, answer)
    comps.update(audio_encoder_bytes(shape, config, device, options, clip_s,
                                     lengths.kept_max_clips(config.max_length)))
    comps["dequant_workspace"] = dequant_workspace(shape, config, device)
    comps["load_transient"] = load_transient(shape, config, device)
    comps["load_checkpoint_pages"] = load_checkpoint_pages(shape, config, device, options)
    audio_seconds = clip_s * max(1, lengths.kept_max_clips(config.max_length)) if seq_len > 0 else 0.0
    comps["allocator_retention"] = allocator_retention(shape, config, device, seq_len, options, audio_seconds)
    comps["optimizer_step"] = optimizer_step_bytes(state, config)
    comps["runtime_overhead"] = runtime_overhead(device, calibration.runtime_overhead_bytes if calibration else None)
    if calibration is not None:
        comps["allocator_retention"] = int(comps["allocator_retention"] * calibration.retention_scale)
    phases = {name: sum(v for k, v in comps.items() if k.startswith(static_prefixes(name)))
              + sum(comps[m] for m in members) for name, members in PHASE_MEMBERS.items()}
    peak_phase = max(phases, key=phases.get)
    extra, run, members = whole_run(shape, config, lengths, device, options, comps, phases, PHASE_MEMBERS, STATIC_PREFIXES)
    if calibration is not None:  # the run's device terms, as this machine measured them
        extra["cpu_kernel_cache"] = int(extra["cpu_kernel_cache"] * calibration.kernel_cache_scale)
        extra["eval_allocator_retention"] = int(extra["eval_allocator_retention"] * calibration.retention_scale)
        extra["cpu_heap_run_spread"] = int(extra["cpu_heap_run_spread"] * calibration.spread_scale)
        run = {phase: sum({**comps, **extra}[k] for k in names) for phase, names in members.items()}
    comps.update(extra)
    run_peak = max(run, key=run.get)
    total = run[run_peak]
    notes += _setting_notes(shape, config, device, dtype, options, comps, calibration)
    return MemoryEstimate(comps, phases, peak_phase, int(total), seq_len, device, options.to_dict(), notes, answer,
                          run_phases=run, run_peak_phase=run_peak, run_members=members,
                          step_bytes=max(phases[m] for m in STEP_MOMENTS) + comps["runtime_overhead"])


def _setting_notes(shape, config: TrainConfig, device: str, dtype: str, options: EstimateOptions,
                   comps: dict[str, int], calibration: DeviceCalibration | None) -> list[str]:
    """The notes the settings call for, in the printout's order: an untabulated vision tower, where the
    per-layer embeddings are, a full fine-tune, the allocator and the low-memory mode, the device's terms
    (calibrated or the constants') and a checkpoint cast on loading. `dtype`: what `device` computes in;
    `comps`: the estimate's components."""
    notes: list[str] = []
    if shape.vision_architecture not in VISION_TOWER_PARAMS and not shape.vision_params and config.vision_tower:
        notes.append(f"vision tower `{shape.vision_architecture}` not tabulated; counted as built by timm.")
    if ple_on_host(config, device):
        table = part_params(shape)["per_layer_embedding"].total * 2
        notes.append(f"per-layer embeddings kept in CPU RAM: {format_bytes(table)} of host memory, placed there "
                     "while loading (they never reach the GPU).")
    if config.finetuning_type == "full":
        notes.append("full fine-tuning is estimated only (`train` runs LoRA): every weight but the vision tower's "
                     "gets a bf16 gradient, an fp32 master copy and the optimizer's states (ZeRO's 16 bytes per "
                     "parameter with AdamW).")
    elif config.ple_on_cpu and not ple_on_host(config, device):  # on CUDA the note above says where they are
        notes.append(f"`ple_on_cpu` applies to CUDA only; on {device} the per-layer embeddings stay where the model is.")
    if device == "cpu" and training_allocator() == "tcmalloc" and not options.cpu_heap_retention:
        notes.append("training runs on TCMalloc (`pipeline.host.allocator`): memory follows what training holds.")
    elif device == "cpu" and comps["allocator_retention"] and sys.platform.startswith("linux"):
        notes.append(f"{format_bytes(comps['allocator_retention'])} of it is freed memory glibc's malloc keeps; with TCMalloc "
                     "installed (Debian/Ubuntu: `apt-get install libtcmalloc-minimal4`) training keeps none and runs faster.")
    if config.low_memory_heap:
        if device != "cpu":
            notes.append(f"the low-memory mode applies to training on a CPU only; on {device} it changes nothing.")
        elif training_allocator() == "tcmalloc":
            notes.append("the low-memory mode changes nothing here: training runs on TCMalloc, which keeps no freed memory.")
        elif comps["allocator_retention"] == 0 and options.cpu_heap_retention:
            notes.append("low-memory mode: memory follows what training holds (no freed heap is kept), steps take "
                         "about twice as long (`pipeline.host.free_heap.pin_mmap_threshold`).")
        elif options.cpu_heap_retention:
            notes.append("the low-memory mode needs glibc (Linux); here the freed heap glibc would keep is still counted.")
    if calibration is not None:
        notes.append(f"device terms ({device}): {calibration.text()}; runtime overhead {format_bytes(comps['runtime_overhead'])}, "
                     f"retained heap x{calibration.retention_scale:g} (a run's spread of it x{calibration.spread_scale:g}), "
                     f"kernel caches x{calibration.kernel_cache_scale:g} "
                     "of the development CPU's constants.")
    else:
        notes.append(f"runtime overhead ({device}): {device_defaults().runtime_overhead_note[device]}.")
    if not options.weights_mapped and dtype != options.checkpoint_dtype and device == "cpu":
        notes.append(f"the checkpoint stores {options.checkpoint_dtype} and this CPU computes in {dtype}: loading casts "
                     "every weight, so all of them are resident (none stay memory-mapped).")
    return notes
