"""What the estimate is given besides the model and the `TrainConfig`: the dataset's length
statistics (`LengthStats`, read from a workspace by `length_stats_from_workspace`) and the
`EstimateOptions` of the training code (attention implementation, adapter dtype, ...).
"""

from __future__ import annotations

from pathlib import Path

import json
from dataclasses import asdict, dataclass, field
from typing import Callable

from pipeline.errors import DatasetError
from pipeline.host.free_heap import heap_follows_live_tensors

MAX_CLIP_S = 30.0  # the feature extractor truncates at 480,000 samples.
# Supervised (answer) tokens per row assumed when no dataset is built: the training loss projects
# onto the vocabulary only at positions whose next token is supervised (`pipeline.training.train.answer_loss`),
# so the logits scale with the answer, not the row. 256 tokens is a conservative bound: the answer
# template of `pipeline.conversation.feedback` (three short lines) runs ~40-80 tokens on speechocean762-mini;
# a row shorter than 256 tokens is assumed to be all answer (min(seq_len, 256)).
DEFAULT_ANSWER_TOKENS = 256


# --------------------------------------------------------------------------------------------------
# Length statistics


@dataclass
class LengthStats:
    """Length statistics of the built dataset as the estimate reads them (the worst case, not the
    mean): from the build report's record (`pipeline.data.dataset.LengthDistribution`, by
    `length_stats_from_workspace`) or given, with what a `max_length` keeps of them.

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
        row_clips: clips of each train row (`row_clips[i]` for the row of `row_tokens[i]`): the audio
            encoder runs on every clip of a row (a tutoring dialogue has several); empty when
            unknown (one clip per row is assumed).
        longest_clips: the most clips of a row when only the maximum is known (0: unknown, 1 assumed).
        eval_row_tokens, eval_answer_tokens: the same per row of the eval split (evaluation's worst
            case); empty when unknown (then the train split's worst case is assumed for it).
        eval_longest_clip_s: the eval split's longest clip in seconds (0.0: unknown).
        distinct_tokens: distinct token ids over the dataset's rows (0: unknown): on CPU only the
            per-layer embedding rows of these tokens are ever read (`pipeline.memory.terms.weights`).
        row_audio_tokens: audio positions of each train row's clips (`row_audio_tokens[i]` for the row
            of `row_tokens[i]`): a family whose audio cost grows with the clip (Gemma 4) makes the
            worst case longer when the longest clip replaces a row's own (`kept_worst_case`); empty
            when unknown.
    """

    longest_tokens: int
    longest_clip_s: float = 0.0
    row_tokens: list[int] = field(default_factory=list)
    source: str = "given"
    answer_tokens: list[int] = field(default_factory=list)
    longest_answer_tokens: int = 0
    tokenizer_model: str | None = None
    row_clips: list[int] = field(default_factory=list)
    longest_clips: int = 0
    eval_row_tokens: list[int] = field(default_factory=list)
    eval_answer_tokens: list[int] = field(default_factory=list)
    eval_longest_clip_s: float = 0.0
    distinct_tokens: int = 0
    row_audio_tokens: list[int] = field(default_factory=list)

    def kept_worst_case(self, max_length: int, audio_tokens: Callable[[float], int] | None = None) -> tuple[int, float]:
        """`(tokens, clip_s)` of the worst-case row the preflight runs (`pipeline.training.worst_case`):
        the longest row `max_length` keeps, each of its clips the longest clip, as long as fits
        (`worst_case_clip`). With `audio_tokens` None, or without `row_audio_tokens`, the row's own
        length and the longest clip (exact for Gemma 3n, whose clips all cost 188 positions)."""
        seq = self.kept_longest(max_length)
        if seq <= 0 or audio_tokens is None or len(self.row_audio_tokens) != len(self.row_tokens) or not self.row_tokens:
            return seq, self.longest_clip_s
        clips = self.row_clips if len(self.row_clips) == len(self.row_tokens) else [1] * len(self.row_tokens)
        kept = [i for i, n in enumerate(self.row_tokens) if n <= max_length]
        row = max(kept, key=lambda i: (self.row_tokens[i], clips[i]))
        return worst_case_clip(self.row_tokens[row], self.row_audio_tokens[row], max(1, clips[row]),
                               self.longest_clip_s, max_length, audio_tokens)

    def kept_max_clips(self, max_length: int) -> int:
        """The most clips of a row among the rows `max_length` keeps (at least 1: the estimate's
        worst case has a clip)."""
        if self.row_clips and len(self.row_clips) == len(self.row_tokens):
            kept = [c for c, n in zip(self.row_clips, self.row_tokens) if n <= max_length]
            return max(kept + [1])
        return max(1, self.longest_clips, max(self.row_clips, default=1))

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


def worst_case_clip(row_tokens: int, own_audio_tokens: int, clips: int, longest_clip_s: float, max_length: int,
                    audio_tokens: Callable[[float], int]) -> tuple[int, float]:
    """The worst case's `(tokens, clip_s)`: a row of `row_tokens` tokens, `own_audio_tokens` of them its
    `clips` clips' audio positions, with each clip replaced by the longest clip (`longest_clip_s`) cut
    to what keeps the row within `max_length` (the collator never cuts a row; 40 ms steps, one audio
    token of Gemma 4). The one rule for the estimate (`LengthStats.kept_worst_case`) and the preflight
    batch (`pipeline.training.worst_case.worst_case`). For a family whose clips all cost the same
    (Gemma 3n), `(row_tokens, longest_clip_s)`."""
    text = row_tokens - own_audio_tokens
    seconds = max(0.0, float(longest_clip_s))
    while seconds > 0 and text + clips * audio_tokens(seconds) > max(max_length, row_tokens):
        seconds = max(0.0, round(seconds - 0.04, 3))
    return text + clips * audio_tokens(seconds), seconds


def length_stats_from_workspace(workspace, max_length: int, dataset_dir=None) -> LengthStats:
    """Length statistics of the dataset built in `workspace`.

    Reads `WS/dataset/build_report.json` (written by `pipeline.data.dataset.build_dataset`: its
    `length_stats`, with `answer_tokens` per train row when the report has them), else the train
    split's `num_tokens` column; when no dataset is built, returns `max_length` as the longest row
    and a 30 s clip (the worst case), saying so in `source`. `dataset_dir` reads a dataset folder
    other than `WS/dataset` (a portable Parquet folder with its `build_report.json`, `train --dataset`).
    Without answer lengths the estimate
    assumes `DEFAULT_ANSWER_TOKENS` (see `LengthStats.kept_longest_answer`).
    """
    from pipeline.workspace import Workspace  # noqa: PLC0415

    ws = workspace if isinstance(workspace, Workspace) else Workspace(workspace)
    folder = Path(dataset_dir) if dataset_dir is not None else ws.dataset_dir
    report_path = folder / "build_report.json"
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
        clips = [int(c) for c in (stats.get("row_clips") or [])]  # absent before sample kinds existed
        return LengthStats(longest, clip, rows, source=source, answer_tokens=answers,
                           longest_answer_tokens=longest_answer, tokenizer_model=counted_with,
                           row_clips=clips, longest_clips=int(stats.get("max_clips") or 0),
                           eval_row_tokens=[int(n) for n in stats.get("eval_row_tokens") or []],
                           eval_answer_tokens=[int(n) for n in stats.get("eval_answer_tokens") or []],
                           eval_longest_clip_s=float(stats.get("eval_max_clip_s") or 0.0),
                           distinct_tokens=int(stats.get("distinct_tokens") or 0),
                           row_audio_tokens=[int(n) for n in stats.get("row_audio_tokens") or []])
    if folder.exists() and dataset_dir is None:
        try:
            from pipeline.data.dataset import load_built_dataset  # noqa: PLC0415

            ds = load_built_dataset(ws)
            rows = [int(n) for split in ds.values() for n in split["num_tokens"]]
            clip = MAX_CLIP_S
            for split in ds.values():
                if "duration_s" in split.column_names:
                    clip = max(float(x) for x in split["duration_s"])
            if rows:
                return LengthStats(max(rows), clip, rows, source=f"{folder} num_tokens column")
        except Exception as error:  # noqa: BLE001 - fall back to the worst case, say so
            return LengthStats(max_length, MAX_CLIP_S, [], source=f"no readable dataset ({error}); assumed rows of --max-length {max_length}")
    return LengthStats(max_length, MAX_CLIP_S, [], source=f"no dataset built in {ws.root}; assumed rows of --max-length {max_length} tokens and 30 s clips")


# --------------------------------------------------------------------------------------------------
# Options


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
        cpu_heap_retention: count the freed heap glibc keeps resident on CPU (`allocator_retention`).
            By default True, and False where the trainer pins glibc's mmap threshold so the resident set
            follows live tensors (`pipeline.host.free_heap.heap_follows_live_tensors`: the opt-in
            `TUTOR_PIN_MMAP_THRESHOLD=1` on glibc).
        weights_mapped: on CPU the weights are views into the memory-mapped checkpoint (how the
            trainer loads them), so a weight is resident only once read: the vision tower never
            is, the per-layer embedding table only at the rows of the dataset's tokens. False for a
            model built in memory (the benchmark's random-weight E2B), whose every weight is resident.
            `estimate_memory` turns it off when the compute dtype differs from `checkpoint_dtype`
            (the loader then casts every weight into anonymous memory).
        checkpoint_dtype: the dtype the checkpoint stores (`pipeline.memory.terms.checkpoint_dtype`,
            set by `estimate_memory` from the model's config).
        compute_dtype: price the activations, logits and unquantized weights in this dtype; None (the
            default): what this machine runs (`pipeline.calibration.precision.compute_dtype_name`).
    """

    attn_implementation: str = "eager"
    keep_logits: bool = False
    adapter_dtype: str = "float32"
    cpu_heap_retention: bool = field(default_factory=lambda: not heap_follows_live_tensors())
    weights_mapped: bool = True
    checkpoint_dtype: str = "bfloat16"
    compute_dtype: str | None = None

    def to_dict(self) -> dict:
        return asdict(self)
