"""Make it fit: the cheapest few `TrainConfig` changes whose estimate fits the usable budget.

`suggest_fits` combines single moves (`_candidate_moves`: quantization, gradient checkpointing,
smaller micro-batch, lower max_length, lighter optimizer, lower rank, no dropout, no vision tower,
PLE on CPU, a quantized audio encoder, LoRA instead of a full fine-tune, the low-memory heap on a
CPU) and re-runs `estimate_memory` for each combination. Each move carries its words and its own
cost, so a suggestion lists every change once with what it costs (`Suggestion.steps`).
"""

from __future__ import annotations

import itertools
from dataclasses import asdict, dataclass, field
from typing import Any

from pipeline.config import TrainConfig
from pipeline.errors import ConfigError
from pipeline.memory.budget import verdict
from pipeline.memory.inputs import EstimateOptions, LengthStats
from pipeline.memory.phases import estimate_memory
from pipeline.host.free_heap import heap_can_follow_live_tensors
from pipeline.units import plural

SUGGESTION_LIMIT = 4  # suggestions shown by the command line and the app alike


@dataclass
class Move:
    """One setting change the search can make: `changes` (TrainConfig fields, several only when they
    belong together, e.g. LoRA rank with its alpha), `what` in words a teacher understands,
    `cost` (what it costs, in words) and `score` (how much it costs, lower = cheaper)."""

    changes: dict[str, Any]
    what: str
    cost: str
    score: float

    def to_dict(self) -> dict:
        return {"changes": dict(self.changes), "what": self.what, "cost": self.cost}


@dataclass
class Suggestion:
    """Settings that fit: `changes` (every TrainConfig field it sets, applied with
    `TrainConfig.replace`), `steps` (one dict per change, `Move.to_dict`: its fields, what it is in
    words and its own cost), the new `total_bytes` and its verdict (`fits`, or `tight`: under 10 %
    to spare); `cost` joins the steps' costs (one per step) for the command line; `score` orders
    suggestions (lower = cheaper)."""

    changes: dict[str, Any]
    total_bytes: int
    verdict: str
    cost: str
    score: float
    steps: list[dict] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)


LOW_MEMORY_HEAP_SCORE = 1.8
"""The low-memory heap's cost score: slower than gradient checkpointing (1.0, ~30 %) or 4-bit (1.6),
since its steps took about twice as long (`pipeline.host.free_heap.pin_mmap_threshold`)."""


def _candidate_moves(config: TrainConfig, lengths: LengthStats, device: str,
                     options: EstimateOptions | None = None) -> list[Move]:
    """Single setting changes that can lower memory, each with its words and cost."""
    moves: list[Move] = []
    counts_retained_heap = (options or EstimateOptions()).cpu_heap_retention  # not on TCMalloc (pipeline.host.allocator)
    if device == "cpu" and not config.low_memory_heap and counts_retained_heap and heap_can_follow_live_tensors():
        moves.append(Move({"low_memory_heap": True}, "Use the low-memory mode (memory follows what training holds)",
                          "slower steps: about twice as long on a 2-core server CPU", LOW_MEMORY_HEAP_SCORE))
    full = config.finetuning_type == "full"
    if full:
        moves.append(Move({"finetuning_type": "lora"}, "Train a small add-on instead of every weight (LoRA)",
                          "the usual way to fine-tune on a small dataset; the tutor learns less than a full fine-tune "
                          "could, with far fewer examples needed", 3.0))
    if config.vision_tower:
        moves.append(Move({"vision_tower": False}, "Leave out the image part of the model (vision tower)", "none: the tutor never sees images", 0.0))
    if device == "cuda" and not config.ple_on_cpu:
        moves.append(Move({"ple_on_cpu": True}, "Keep part of the model in the computer's memory, not the GPU's (per-layer embeddings in CPU memory)",
                          "slightly slower steps: each step copies its rows to the GPU", 0.5))
    if not config.gradient_checkpointing:
        moves.append(Move({"gradient_checkpointing": True}, "Recompute instead of keeping in memory (gradient checkpointing)",
                          "about 30 % slower steps: parts are worked out again", 1.0))
    if config.quantization == "none":
        moves.append(Move({"quantization": "8bit"}, "Store the model in 8 bits", "slower steps", 1.5))
        moves.append(Move({"quantization": "4bit"}, "Store the model in 4 bits, a quarter of its size (QLoRA)",
                          "slower steps and a small loss of quality", 1.6))
    elif config.quantization == "8bit":
        moves.append(Move({"quantization": "4bit"}, "Store the model in 4 bits instead of 8 (QLoRA)",
                          "a small loss of quality", 1.0))
    if not config.quantize_audio_encoder and config.lora_targets == "language" and not full:
        moves.append(Move({"quantize_audio_encoder": True}, "Store the listening part smaller too (the frozen audio encoder in 4/8 bits)",
                          "slower audio encoding and a small loss of quality in what the model hears", 1.2))
    if config.optimizer == "adamw":
        moves.append(Move({"optimizer": "adamw_8bit"}, "Keep the training's bookkeeping in 8 bits (8-bit AdamW)",
                          "none in practice: the same results", 0.5))
        moves.append(Move({"optimizer": "adafactor"}, "Keep a smaller training state (Adafactor)",
                          "may need a different learning rate", 1.0))
    if config.lora_dropout > 0 and not full:
        moves.append(Move({"lora_dropout": 0.0}, "Turn off the add-on's random drop-out (LoRA dropout)", "less protection against overfitting a small dataset", 0.8))
    if config.lora_targets == "language+audio" and not full:
        moves.append(Move({"lora_targets": "language"}, "Train how it answers only, not how it listens (freeze the audio encoder)",
                          "the model adapts less to your learners' accents", 2.0))
    b = config.batch_size
    for new_b in sorted({1, b // 2, b // 4} - {0, b}):
        ga = config.grad_accum * b // new_b
        moves.append(Move({"batch_size": new_b, "grad_accum": ga},
                          f"{plural(new_b, 'recording')} at a time, added up {ga} times (batch size {new_b}, accumulation {ga})",
                          f"slower steps; the same {plural(b * config.grad_accum, 'recording')} per step", 0.7))
    if not full:
        for new_r in (config.lora_rank // 2, config.lora_rank // 4):
            if new_r >= 4:
                alpha = max(1, config.lora_alpha * new_r // config.lora_rank)
                moves.append(Move({"lora_rank": new_r, "lora_alpha": alpha},
                                  f"A smaller add-on: rank {new_r} instead of {config.lora_rank}",
                                  "less capacity to learn", 2.0))
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
            moves.append(Move({"max_length": cut}, f"Max tokens per row {cut}",
                              f"leaves out {excluded} of {lengths.num_rows} rows", 3.0 + 20 * frac))
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
    keep: tuple[str, ...] = (),
    calibration=None,
) -> list[Suggestion]:
    """The cheapest few setting changes that bring the estimate under the usable budget.

    A change is offered when its estimate is at most `usable_bytes`, with its verdict: `fits`
    (total <= FIT_FRACTION x usable) or `tight` (in the last 10 %, within our measured error).
    Requiring `fits` alone hid obvious single fixes (E2B, no quantization, 14 GiB: 4-bit alone
    lands at 10.9 of 12.0 GiB usable, tight, and was not offered).

    Searches combinations of up to `max_changes` single moves (quantization, gradient
    checkpointing, smaller micro-batch with more accumulation at the same effective batch, lower
    max_length counting excluded rows, 8-bit AdamW / Adafactor, lower LoRA rank, no LoRA dropout,
    dropping the vision tower, PLE on CPU on CUDA, the low-memory heap on a CPU with glibc),
    re-estimating each; keeps minimal combinations (none contains a subset that already fits; a
    tight subset still lets a superset that fits be offered), ordered by summed cost score then
    memory, and keeps only the cost/memory frontier (a suggestion costing at least as much as an
    earlier one and saving no more memory is left out); when the first `limit` are all tight, the
    cheapest one that fits takes the last place. Every move is a `TrainConfig` setting the training
    code carries out (`vision_tower`, `ple_on_cpu`, `low_memory_heap`:
    `pipeline.model.loading.load_model`). `accept_tight=False` offers only changes that fit (for a
    run that is already tight, another tight setting is no help). `keep` names settings the
    suggestions must not change (the plan keeps each row's fine-tuning type and quantization).
    `calibration`: this machine's `DeviceCalibration` when the estimate being fixed used it, so every
    suggestion's figure is the same estimate as the verdict's (`estimate_memory`).
    """
    options = options or EstimateOptions()
    moves = [m for m in _candidate_moves(config, lengths, device, options) if not set(m.changes) & set(keep)]
    found: list[Suggestion] = []
    fit_keys: list[frozenset] = []
    tight_keys: list[frozenset] = []
    for k in range(1, max_changes + 1):
        for combo in itertools.combinations(range(len(moves)), k):
            keys = [set(moves[i].changes) for i in combo]
            if any(keys[a] & keys[b] for a, b in itertools.combinations(range(k), 2)):
                continue  # two moves on the same setting
            key = frozenset(combo)
            if any(prev <= key for prev in fit_keys):
                continue  # a subset already fits: this one only costs more
            changes: dict[str, Any] = {}
            for i in combo:
                changes.update(moves[i].changes)
            try:
                new_config = config.replace(**changes)
            except ConfigError:
                continue
            est = estimate_memory(model_config, new_config, lengths, device, options, calibration=calibration)
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
                cost="; ".join(f"{moves[i].what}: {moves[i].cost}" for i in combo),
                score=sum(moves[i].score for i in combo),
                steps=[moves[i].to_dict() for i in combo],
            ))
    found.sort(key=lambda s: (s.score, s.total_bytes))
    # a suggestion that costs at least as much as an earlier one and saves no more memory is never the
    # better choice: only the cost/memory frontier is offered
    frontier: list[Suggestion] = []
    for suggestion in found:
        if not any(kept.total_bytes <= suggestion.total_bytes for kept in frontier):
            frontier.append(suggestion)
    found = frontier
    chosen = found[:limit]
    if chosen and all(s.verdict == "tight" for s in chosen):
        safe = next((s for s in found if s.verdict == "fits"), None)
        if safe is not None:
            chosen[-1] = safe
    return chosen
