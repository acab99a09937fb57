"""Make it fit: the cheapest few `TrainConfig` changes whose estimate fits the usable budget.

`suggest_fits` combines single moves (`_candidate_moves`: quantization, gradient checkpointing,
smaller micro-batch, lower max_length, lighter optimizer, lower rank, no dropout, no vision tower,
PLE on CPU) and re-runs `estimate_memory` for each combination.
"""

from __future__ import annotations

import itertools
from dataclasses import asdict, dataclass
from typing import Any

from pipeline.config import TrainConfig
from pipeline.errors import ConfigError
from pipeline.memory.budget import verdict
from pipeline.memory.inputs import EstimateOptions, LengthStats
from pipeline.memory.phases import estimate_memory

SUGGESTION_LIMIT = 4  # suggestions shown by the command line and the app alike


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
