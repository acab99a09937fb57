"""Will it fit? Peak memory of a fine-tune (LoRA or full) of any known family (Gemma 3n, Gemma 4), per
component, before the run starts.

`estimate_memory(model_config, config, lengths, device)` is a pure function of the model's
`config.json` dict, the `TrainConfig`, the dataset's length statistics and the device kind: it loads
no weights and does not import torch. Every term's docstring gives its formula and its source (the
transformers / peft / bitsandbytes / PyTorch source it follows, or our own measurement).

The model itself (`load_model_config`, `model_shape`, `part_params`) is read by its family
(`pipeline.model.catalog`); this package prices it. One job per module (each imports its siblings
by full path, never through this file):
  * `inputs.py`   what the estimate is given: `LengthStats` (and `length_stats_from_workspace`),
                  `EstimateOptions`, `DEFAULT_ANSWER_TOKENS`, `MAX_CLIP_S`.
  * `terms.py`    the formulas, one function per component (weights, LoRA and optimizer state,
                  activations, logits, audio encoder, kernel caches, runtime overhead), each with
                  its source; what the device adds comes from the default calibration record
                  (`pipeline.calibration.store.device_defaults`).
  * `cpu_heap.py` CPU only: the heap glibc keeps resident (`allocator_retention`), its formula.
  * `phases.py`   the phase model of a step (load, audio, loss, layer_backward, optimizer,
                  audio_backward), `estimate_memory` and `MemoryEstimate`.
  * `run_phases.py` the whole run (load, preflight, step, eval, save, resume): `whole_run`, whose
                  largest phase is the estimate's total.
  * `run_compare.py` a run's measured peaks against the estimate for its settings (`run_estimate`,
                  `compare`, `comparison_text`), for the Train tab and the `train` summary.
  * `budget.py`   the device: `device_memory` (CUDA free memory, Apple's recommended working set,
                  available RAM), `usable_budget` (headroom), `verdict` (fits / tight / does not fit).
  * `search.py`   make it fit: `suggest_fits`, the cheapest `TrainConfig` changes that fit, each
                  change (`Move`) with its words and its own cost.
  * `plan.py`     what can this machine do? `plan_for_workspace` (every known model x full fine-tune, LoRA
                  bf16, LoRA int8, QLoRA: peak, verdict, changes), `python -m pipeline plan`.
  * `measure.py`  `measure_peak`: runs the probe (`pipeline.training.probe`, one real optimizer step)
                  in a child process and reads its peak.
  * `calibrate.py` `calibrate`: the precision check and probes on this machine, stored as evidence
                  (`pipeline.calibration`).
  * `report.py`   `estimate_for_workspace` (the dict the app shows and `--json` prints), `render`.
  * `cli.py`      `main(argv)`: `python -m pipeline estimate --workspace WS --model M
                  [--device ...] [--memory-gb N] [training flags] [--measure] [--json]`.

What the model deliberately does not do: model the KV cache of generation (inference is not
training), multi-GPU sharding, or CUDA allocator fragmentation beyond a measured constant.

This file only re-exports the public API, so `from pipeline import memory; memory.estimate_memory(...)`
works; importing it stays torch-free (the app imports it at start-up).
"""

from __future__ import annotations

from pipeline.memory.budget import (
    FIT_FRACTION,
    DeviceMemory,
    Verdict,
    auto_device,
    device_memory,
    usable_budget,
    verdict,
)
from pipeline.memory.cli import estimate_main, estimate_parser, plan_main
from pipeline.memory.inputs import (
    DEFAULT_ANSWER_TOKENS,
    MAX_CLIP_S,
    EstimateOptions,
    LengthStats,
    length_stats_from_workspace,
)
from pipeline.memory.measure import measure_peak
from pipeline.memory.phases import (
    PHASE_MEMBERS,
    PHASE_STATIC,
    STATIC_PREFIXES,
    MemoryEstimate,
    alive_at_peak,
    estimate_memory,
    static_prefixes,
)
from pipeline.memory.plan import PLAN_MODELS, PLAN_ROWS, plan_for_workspace, plan_rows, render_plan
from pipeline.memory.report import estimate_for_workspace, render
from pipeline.memory.run_compare import compare, comparison_text, run_estimate
from pipeline.memory.run_phases import RUN_PHASES, whole_run
from pipeline.memory.search import SUGGESTION_LIMIT, Move, Suggestion, suggest_fits
from pipeline.model.catalog import ASSETS_DIR, load_model_config, model_shape, part_params
from pipeline.model.gemma3n import SHIPPED_CONFIGS
from pipeline.model.shape import VISION_TOWER_PARAMS, ModelShape, PartParams, vision_tower_params
from pipeline.memory.cpu_heap import allocator_retention, run_spread_fraction
from pipeline.memory.terms import (
    AUDIO_BASE_SAVED_BYTES_PER_FRAME_PER_H,
    AUDIO_FROZEN_BYTES_PER_FRAME_PER_H,
    AUDIO_FROZEN_FIXED_BYTES,
    AUDIO_LORA_INPUT_H,
    BACKWARD_MLP_ELEMS,
    BACKWARD_STACK_COPIES,
    EAGER_BACKWARD_BYTES_PER_PROB,
    FINAL_SAVED_H_ELEMS,
    INPUT_GRAD_SAVED_H_ELEMS,
    MEL_FRAMES_PER_SECOND,
    NF4_TABLE_BYTES,
    QUANTIZED_PARTS,
    activations,
    audio_encoder_bytes,
    dequant_workspace,
    full_trainable_params,
    dropout_mask_bytes,
    int8_bytes,
    layer_saved_bytes_per_token,
    load_transient,
    logits_loss,
    lora_params,
    lora_targets,
    nf4_bytes,
    optimizer_step_bytes,
    ple_on_host,
    quantized_parts,
    runtime_overhead,
    trainable_state,
    weights,
)
from pipeline.units import GIB, MIB, dtype_bytes, format_bytes

__all__ = [
    # units
    "GIB", "MIB", "dtype_bytes", "format_bytes",
    # shape
    "ASSETS_DIR", "SHIPPED_CONFIGS", "VISION_TOWER_PARAMS", "ModelShape", "PartParams", "load_model_config",
    "model_shape", "part_params", "vision_tower_params",
    # inputs
    "DEFAULT_ANSWER_TOKENS", "MAX_CLIP_S", "EstimateOptions", "LengthStats", "length_stats_from_workspace",
    # terms
    "AUDIO_BASE_SAVED_BYTES_PER_FRAME_PER_H", "AUDIO_FROZEN_BYTES_PER_FRAME_PER_H", "AUDIO_FROZEN_FIXED_BYTES",
    "AUDIO_LORA_INPUT_H", "BACKWARD_MLP_ELEMS", "BACKWARD_STACK_COPIES", "EAGER_BACKWARD_BYTES_PER_PROB",
    "FINAL_SAVED_H_ELEMS", "INPUT_GRAD_SAVED_H_ELEMS", "MEL_FRAMES_PER_SECOND", "NF4_TABLE_BYTES",
    "QUANTIZED_PARTS", "activations", "allocator_retention", "run_spread_fraction",
    "audio_encoder_bytes", "dequant_workspace", "dropout_mask_bytes", "full_trainable_params",
    "int8_bytes",
    "layer_saved_bytes_per_token", "load_transient", "logits_loss", "lora_params", "lora_targets", "nf4_bytes",
    "optimizer_step_bytes", "ple_on_host", "quantized_parts", "runtime_overhead", "trainable_state", "weights",
    # phases
    "PHASE_MEMBERS", "PHASE_STATIC", "STATIC_PREFIXES", "MemoryEstimate", "alive_at_peak", "estimate_memory",
    "static_prefixes",
    # the whole run
    "RUN_PHASES", "whole_run", "compare", "comparison_text", "run_estimate",
    # budget
    "FIT_FRACTION", "DeviceMemory", "Verdict", "auto_device", "device_memory", "usable_budget", "verdict",
    # search, measure, report, cli
    "SUGGESTION_LIMIT", "Move", "Suggestion", "suggest_fits", "measure_peak", "estimate_for_workspace", "render",
    # plan
    "PLAN_MODELS", "PLAN_ROWS", "plan_for_workspace", "plan_rows", "render_plan",
    "estimate_main", "estimate_parser", "plan_main",
]
