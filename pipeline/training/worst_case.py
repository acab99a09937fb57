"""The worst-case batch of a dataset, and the preflight that runs it before the first optimizer step.

A training batch needs the most memory when it holds the most tokens (activations), the longest
answer (logits over the 262,400-entry vocabulary are computed only at supervised positions) and the
longest clip (the audio encoder's activations grow with the clip, although every clip takes the same
188 audio positions in the token sequence). Those three maxima usually belong to different rows,
so the worst case is built from all three: `batch_size` copies of the longest row (by tokens; a
dialogue row counts 188 positions for each of its clips), each of its clips carrying the longest
clip's audio, and supervising as many positions as the longest answer. That is
exactly what the memory estimate prices (`pipeline.memory.phases.estimate_memory`: every row of the
micro-batch padded to the longest row, the logits sized for the longest answer, the audio encoder
for the longest clip), so a preflight that passes means every real batch fits.

This module does not load the model or pick settings (`pipeline.training.train` does).
"""

from __future__ import annotations

import io
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import torch

from pipeline.config import TrainConfig
from pipeline.memory.inputs import worst_case_clip
from pipeline.model.tokens import IGNORE_INDEX, TokenCounter, family_of_tokenizer
from pipeline.data.rows import TEXT_COLUMNS, row_messages
from pipeline.errors import TrainingError, in_words


@dataclass
class WorstCase:
    """The worst-case micro-batch of a split and where its parts come from.

    Attributes:
        rows: `batch_size` rows as the collator takes them (the longest row's columns, every clip of
            it replaced by the longest clip's audio).
        longest_row: id of the row with the most tokens (ties: the most clips); `tokens` its count
            (text + audio positions), `clips` its clips.
        longest_clip: id of the row with the longest clip; `clip_s` that clip's seconds.
        longest_answer: id of the row with the most supervised tokens; `answer_tokens` that count
            (each row of the batch supervises this many positions, see `worst_case_batch`).
    """

    rows: list[dict] = field(repr=False)
    longest_row: str
    tokens: int
    longest_clip: str
    clip_s: float
    longest_answer: str
    answer_tokens: int
    clips: int = 1

    def to_dict(self) -> dict[str, Any]:
        """Everything but the rows themselves (JSON for result.json)."""
        out = asdict(self)
        out.pop("rows")
        out["batch_size"] = len(self.rows)
        return out


def answer_token_counts(processor: Any, rows: list[dict]) -> list[int]:
    """Supervised tokens (every answer + its `<end_of_turn>`) of each row, counted as the collator
    labels them (`pipeline.model.tokens.TokenCounter.supervised_tokens` over the row's conversation,
    `pipeline.data.rows.row_messages`); rows need the columns of `pipeline.data.rows.TEXT_COLUMNS`."""
    counter = TokenCounter(processor)
    texts = [counter.render_training(row_messages(r)) for r in rows]
    return [counter.supervised_tokens(ids) for ids in counter.encode_texts(texts)]


def _longest_clip_wav(row: dict) -> bytes:
    """The WAV bytes of the row's longest clip (dialogue rows hold several)."""
    wavs = [row["audio_wav"]] + list(row.get("extra_audio_wavs") or [])
    return max(wavs, key=len)  # 16 kHz mono PCM16: the longest clip has the most bytes


def _wav_seconds(wav: bytes) -> float:
    """Duration in seconds of WAV bytes (soundfile reads the header)."""
    import soundfile

    return float(soundfile.info(io.BytesIO(wav)).duration)


def worst_case(dataset, batch_size: int, processor: Any, max_length: int | None = None) -> WorstCase:
    """The worst case of a `datasets.Dataset` split (columns of `pipeline.data.rows.COLUMNS`; datasets
    built before sample kinds, without `clips`/`extra_audio_wavs`, read as one clip per row): see
    the module docstring. The longest row keeps its kind and conversation, and each of its clips
    carries the longest clip's audio, as the estimate prices `clips` clips of the longest clip's
    length (`pipeline.memory.inputs.LengthStats.kept_max_clips`). Only the rows whose text and audio
    are used are read in full. For a family whose clips cost positions by length (Gemma 4), the longest
    clip lengthens the row: it is cut to what keeps the row within `max_length` (the estimate's rule,
    `pipeline.memory.inputs.worst_case_clip`). Raises `TrainingError` for an empty split."""
    if len(dataset) == 0:
        raise TrainingError("The split has no rows to build a worst-case batch from; rebuild the dataset.")
    columns = set(dataset.column_names)
    ids = [str(i) for i in dataset["id"]]
    tokens = [int(n or 0) for n in dataset["num_tokens"]]
    seconds = [float(s or 0.0) for s in dataset["duration_s"]]
    clip_counts = [int(c or 1) for c in dataset["clips"]] if "clips" in columns else [1] * len(ids)
    text_rows = list(dataset.select_columns([c for c in TEXT_COLUMNS if c in columns]))
    answers = answer_token_counts(processor, text_rows)
    if "extra_audio_wavs" in columns and max(clip_counts) > 1:  # a row's duration_s is all its clips together
        for i in (i for i in range(len(ids)) if clip_counts[i] > 1):
            seconds[i] = _wav_seconds(_longest_clip_wav(dataset[i]))
    by_tokens = max(range(len(ids)), key=lambda i: (tokens[i], clip_counts[i], answers[i], seconds[i]))
    by_clip = max(range(len(ids)), key=lambda i: (seconds[i], tokens[i]))
    by_answer = max(range(len(ids)), key=lambda i: (answers[i], tokens[i]))
    row = dict(dataset[by_tokens])
    clip_wav = _longest_clip_wav(row if by_clip == by_tokens else dataset[by_clip])
    row_tokens, clip_s = tokens[by_tokens], seconds[by_clip]
    family = family_of_tokenizer(processor.tokenizer)
    own = sum(family.audio_tokens(_wav_seconds(w)) for w in [row["audio_wav"]] + list(row.get("extra_audio_wavs") or []))
    worst_tokens, fit_s = worst_case_clip(row_tokens, own, clip_counts[by_tokens], clip_s, max_length or row_tokens,
                                          family.audio_tokens)
    if fit_s < clip_s:  # the longest clip, cut so the row still fits (it never does for Gemma 3n)
        clip_wav = _cut_wav(clip_wav, fit_s)
    row["audio_wav"] = clip_wav
    if row.get("extra_audio_wavs"):
        row["extra_audio_wavs"] = [clip_wav] * len(row["extra_audio_wavs"])
    return WorstCase(rows=[dict(row) for _ in range(batch_size)], longest_row=ids[by_tokens], tokens=worst_tokens,
                     longest_clip=ids[by_clip], clip_s=round(fit_s, 3), longest_answer=ids[by_answer],
                     answer_tokens=answers[by_answer], clips=clip_counts[by_tokens])


def _cut_wav(wav: bytes, seconds: float) -> bytes:
    """WAV bytes of the first `seconds` of a 16 kHz mono clip."""
    from pipeline.data.audio import decode_wav, wav_bytes

    return wav_bytes(decode_wav(wav)[: int(round(seconds * 16000))])


def worst_case_batch(collator, case: WorstCase) -> dict[str, torch.Tensor]:
    """Collate `case.rows` and widen each row's supervised span, backwards from its end, to
    `case.answer_tokens` positions when the longest row's own answer is shorter than the longest
    answer (the logits, and so the memory, follow the number of supervised positions). Output as
    `pipeline.training.collate.ChatCollator`'s: `labels` (B, T) with -100 outside the spans."""
    batch = collator(case.rows)
    labels = batch["labels"]
    for r in range(labels.shape[0]):
        supervised = (labels[r] != IGNORE_INDEX).nonzero().flatten()
        if supervised.numel() == 0 or supervised.numel() >= case.answer_tokens:
            continue
        end = int(supervised[-1]) + 1
        start = max(1, end - case.answer_tokens)  # position 0 (<bos>) is never a target
        labels[r, start:end] = batch["input_ids"][r, start:end]
    return batch


def preflight(model, collator, case: WorstCase, config: TrainConfig, device: str, answer_loss) -> dict:
    """One forward+backward on the worst-case batch (no optimizer step); gradients are cleared.

    `answer_loss(model, batch) -> (loss, outputs)` is the training loss. Returns `{"batch_rows",
    "batch_tokens", "worst_case", "loss", "seconds"}` (the run records the phase's peak memory).
    Raises `torch.OutOfMemoryError` (or the backend's RuntimeError) when it does not fit, and
    `TrainingError` when the loss is not finite.
    """
    batch = {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in worst_case_batch(collator, case).items()}
    started = time.perf_counter()
    model.train()
    loss, out = answer_loss(model, batch)
    if not torch.isfinite(loss):
        raise TrainingError(f"The loss on the worst-case batch is {loss.item()} (not finite); check the dataset rows "
                            f"{in_words(sorted({case.longest_row, case.longest_clip, case.longest_answer}))}.")
    loss.backward()
    model.zero_grad(set_to_none=True)
    result = {
        "batch_rows": [r["id"] for r in case.rows],
        "batch_tokens": int(batch["input_ids"].numel()),
        "worst_case": case.to_dict(),
        "loss": float(loss.item()),
        "seconds": round(time.perf_counter() - started, 3),
    }
    del out, loss, batch
    return result
