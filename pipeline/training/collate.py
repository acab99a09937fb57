"""Dataset rows -> a Gemma 3n training batch whose labels supervise only the tutor's answer.

Rendering and tokenizing happen in ONE call, `processor.apply_chat_template(tokenize=True,
return_dict=True)`, on the row's conversation from `pipeline.conversation.messages` (through
`pipeline.data.rows.row_messages`, every kind: read-aloud, free speech, tutoring dialogue): rendering
to text and calling `processor(text=...)` afterwards gives a double `<bos>` (unsloth PR #10312). A
dialogue row brings all its clips; the processor gives each its own audio span and feature row.

Labels are -100 everywhere except the answers: the tokens after each `<start_of_turn>model\\n`
up to and including its `<end_of_turn>` (FIELD_NOTES "Train only on the answer"): one answer for a
read-aloud or free-speech row, every tutor turn of a dialogue, and nothing the learner said. A row whose answer
is missing or cut has no supervised token and would make the loss NaN (trl #6668): such rows are
refused before training (`check_rows`), never truncated.

Padding side is set on the tokenizer only: passing `padding_side` to the processor leaks into the
audio feature extractor and shifts the audio (unsloth PR #6157).

A batched clip gets the mel frames and frame mask it gets alone (`align_audio_masks`): padded to the
longest clip, the feature extractor marks partial trailing frames of a shorter clip as valid (256
frames alone, 258 in a batch), and fills the frames after it with the log-mel floor where alone the
encoder's look-ahead convolution finds zeros, so the audio encoder would hear a different clip.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import torch

from pipeline.model.tokens import IGNORE_INDEX, SAMPLE_RATE_HZ, TokenCounter, all_answer_spans, asked_extra, training_text
from pipeline.data.rows import row_clip_lengths, row_clips, row_messages
from pipeline.errors import DatasetError
from pipeline.model.audio_alignment import align_audio_masks


def build_labels(input_ids: torch.Tensor, attention_mask: torch.Tensor, tokenizer: Any) -> torch.Tensor:
    """Labels for a padded batch: `input_ids` inside every answer span (`all_answer_spans`), -100 elsewhere.

    Args:
        input_ids: int64 tensor (batch, seq).
        attention_mask: 0/1 tensor (batch, seq); padded positions are never supervised.

    Returns:
        int64 tensor (batch, seq). Rows without an answer span are all -100.
    """
    labels = torch.full_like(input_ids, IGNORE_INDEX)
    for row in range(input_ids.shape[0]):
        for start, end in all_answer_spans(input_ids[row].tolist(), tokenizer):
            labels[row, start:end] = input_ids[row, start:end]
    labels[attention_mask == 0] = IGNORE_INDEX
    return labels



class ChatCollator:
    """Collate dataset rows into a training batch for `Gemma3nForConditionalGeneration`.

    Rows are dataset rows (`pipeline.data.rows`: `kind`, `target_text` / `prompt` / `turns`,
    `feedback`, and the clips as `audio_wav` + `extra_audio_wavs` WAV bytes, or `audio` float32
    arrays). Output (all torch tensors):
        input_ids (B, T) int64, attention_mask (B, T) int64, token_type_ids (B, T),
        input_features (C, F, 128) float32 log-mel frames, input_features_mask (C, F) bool,
        labels (B, T) int64 (-100 outside the answers).
    T is the longest row of the batch (right padding with `<pad>`); C the clips of all rows (row by
    row, each row's clips in order: the order of the audio spans in `input_ids`), F the longest
    clip's frames. Each clip's frames and frame mask equal those it has alone (`align_audio_masks`).

    Raises:
        DatasetError: a row is longer than `max_length` tokens, or has no supervised token.
    """

    def __init__(self, processor: Any, *, max_length: int | None = None, padding_side: str = "right"):
        self.processor = processor
        self.max_length = max_length
        # On the tokenizer only (see the module docstring).
        processor.tokenizer.padding_side = padding_side

    def conversations(self, rows: Sequence[dict], clips: Sequence[list[np.ndarray]] | None = None) -> list[list[dict]]:
        """The conversation (`pipeline.data.rows.row_messages`, with its audio arrays: `clips[i]` are
        row i's clips, read from the rows when None) of each row."""
        tokenizer = self.processor.tokenizer
        clips = clips if clips is not None else [row_clips(r) for r in rows]
        return [row_messages(r, c, tokenizer=tokenizer) for r, c in zip(rows, clips)]

    def _tokenize(self, conversations: list[list[dict]], clips: list[np.ndarray]) -> Any:
        """The batch of `conversations` (padded to the longest), rendered and tokenized with their audio.

        Where the template asks for an answer as its history shows one (`asked_extra` empty), one
        `apply_chat_template(tokenize=True)` call; else each row's text is `training_text` (the last
        answer after the generation prompt), read by the processor itself with the clips, without a
        second `<bos>` (the text starts with it)."""
        tokenizer = self.processor.tokenizer
        if not asked_extra(tokenizer)[0]:
            return self.processor.apply_chat_template(
                conversations, tokenize=True, return_dict=True, return_tensors="pt",
                processor_kwargs={"text_kwargs": {"padding": "longest"}},
            )
        render = _render_text(self.processor)
        texts = [training_text(render, c, tokenizer) for c in conversations]
        return self.processor(text=texts, audio=clips or None, sampling_rate=SAMPLE_RATE_HZ, padding="longest",
                              add_special_tokens=not all(t.startswith(tokenizer.bos_token or "\0") for t in texts),
                              return_tensors="pt")

    def __call__(self, rows: Sequence[dict]) -> dict[str, torch.Tensor]:
        per_row = [row_clips(r) for r in rows]
        clips = [clip for row in per_row for clip in row]  # the order of the feature rows
        batch = self._tokenize(self.conversations(rows, per_row), clips)
        input_ids = batch["input_ids"]
        lengths = batch["attention_mask"].sum(dim=1).tolist()
        if self.max_length is not None:
            too_long = [(r.get("id", i), n) for i, (r, n) in enumerate(zip(rows, lengths)) if n > self.max_length]
            if too_long:
                raise DatasetError(
                    f"Rows {too_long} are longer than --max-length {self.max_length} tokens; rows are never cut. "
                    "Raise --max-length or rebuild the dataset with the same --max-length to exclude them."
                )
        labels = build_labels(input_ids, batch["attention_mask"], self.processor.tokenizer)
        empty = [rows[i].get("id", i) for i in range(len(rows)) if not bool((labels[i] != IGNORE_INDEX).any())]
        if empty:
            raise DatasetError(f"Rows {empty} have no answer token to learn from (empty or cut feedback); fix or remove them.")
        out = dict(batch)
        align_audio_masks(out, clips, self.processor.feature_extractor)
        out["labels"] = labels
        return out


def _render_text(processor: Any):
    """`render(messages, add_generation_prompt=False) -> str`: the processor's chat template as text."""
    def render(messages: list[dict], add_generation_prompt: bool = False) -> str:
        return processor.apply_chat_template(messages, tokenize=False, add_generation_prompt=add_generation_prompt)
    return render


def check_rows(processor: Any, rows: Sequence[dict], *, max_length: int) -> list[dict]:
    """Rows that cannot be trained on, as `[{"id", "reason", "too_long"}]`; [] when all are fine.
    `too_long` is True for a row over `max_length` (the trainer skips those; other problems are errors).

    Fast: renders each conversation's text with the audio span expanded (no mel features), using
    `pipeline.model.tokens.TokenCounter`, and checks length <= `max_length` and at least one supervised
    answer token.
    """
    counter = TokenCounter(processor)
    tokenizer = processor.tokenizer
    problems = []
    for row in rows:
        row_id = row.get("id", "?")
        try:
            text = counter.render_training(row_messages(row, row_clip_lengths(row), tokenizer=tokenizer))
        except DatasetError as error:
            problems.append({"id": row_id, "reason": str(error), "too_long": False})
            continue
        ids = tokenizer(text, add_special_tokens=not text.startswith(tokenizer.bos_token or "\0"))["input_ids"]
        if len(ids) > max_length:
            problems.append(
                {"id": row_id, "reason": f"{len(ids)} tokens > --max-length {max_length}", "too_long": True}
            )
            continue
        spans = all_answer_spans(ids, tokenizer)
        if not spans or any(end - start < 2 for start, end in spans):
            problems.append({"id": row_id, "reason": "no answer token to learn from (empty feedback?)", "too_long": False})
    return problems
