"""Token lengths and supervised spans as the model family's processor sees them.

- `TokenCounter`: a conversation's length in tokens exactly as Gemma 3n's processor counts it.
- `answer_spans`, `all_answer_spans`, `IGNORE_INDEX`: which tokens the training labels supervise
  (every tutor answer and its `<end_of_turn>`, FIELD_NOTES "Train only on the answer").

Torch-free: importing this module loads no model library; callers pass the processor or tokenizer
(`pipeline.model.loading.load_processor`).
"""

from __future__ import annotations

from typing import Any, Sequence

from pipeline.errors import DatasetError
from pipeline.model.gemma3n import AUDIO_SOFT_TOKENS, MAX_AUDIO_S, MODEL_TURN_HEADER  # noqa: F401 - MAX_AUDIO_S: this module's API

IGNORE_INDEX = -100
"""Label value ignored by the cross-entropy loss (`torch.nn.CrossEntropyLoss(ignore_index=-100)`)."""

# --------------------------------------------------------------------------------------------------
# Token lengths
# --------------------------------------------------------------------------------------------------


class TokenCounter:
    """Counts a conversation's tokens exactly as `processor.apply_chat_template(tokenize=True)` would.

    The processor renders the chat template, replaces each audio placeholder with its fixed audio
    span (`processor.full_audio_sequence`: blank line, `<start_of_audio>`, 188 audio soft tokens,
    `<end_of_audio>`, blank line; see transformers `models/gemma3n/processing_gemma3n.py`) and
    tokenizes the result without adding a second `<bos>`. This class does the same text work but
    skips the mel feature extraction (the span does not depend on the clip), and tokenizes many rows
    in one batched call: about 100x faster than the full processor. `tests/test_dataset.py` checks
    that both give the same count.
    """

    def __init__(self, processor: Any):
        self.processor = processor
        self.tokenizer = processor.tokenizer
        self.audio_token = getattr(processor, "audio_token", None)
        span = getattr(processor, "full_audio_sequence", None)
        if self.audio_token is None or span is None:
            tok = self.tokenizer
            try:
                n = int(getattr(processor, "audio_seq_length", AUDIO_SOFT_TOKENS))
                self.audio_token = self.audio_token or tok.audio_token
                span = f"\n\n{tok.boa_token}{tok.audio_token * n}{tok.eoa_token}\n\n"
            except AttributeError as error:
                raise DatasetError(
                    f"The processor {type(processor).__name__} has no audio tokens ({error}); "
                    "use a Gemma 3n processor (e.g. google/gemma-3n-E2B-it)."
                ) from error
        self.audio_span = span
        self.bos = getattr(self.tokenizer, "bos_token", None)

    def render(self, messages: list[dict], *, add_generation_prompt: bool = False) -> str:
        """Chat template text with each audio placeholder expanded to the audio span."""
        plain = [_strip_audio_arrays(m) for m in messages]
        text = self.processor.apply_chat_template(
            plain, tokenize=False, add_generation_prompt=add_generation_prompt
        )
        return text.replace(self.audio_token, self.audio_span)

    def count_texts(self, texts: Sequence[str]) -> list[int]:
        """Token count of each rendered text (batched; `<bos>` added only if the text lacks it)."""
        return [len(ids) for ids in self.encode_texts(texts)]

    def encode_texts(self, texts: Sequence[str]) -> list[list[int]]:
        """Token ids of each rendered text (batched; `<bos>` added only if the text lacks it), the
        ids `apply_chat_template(tokenize=True)` gives for the same conversation."""
        if not texts:
            return []
        counts: list[list[int]] = [[] for _ in texts]
        groups: dict[bool, list[int]] = {True: [], False: []}
        for i, text in enumerate(texts):
            groups[bool(self.bos) and text.startswith(self.bos)].append(i)
        for starts_with_bos, indices in groups.items():
            if not indices:
                continue
            encoded = self.tokenizer([texts[i] for i in indices], add_special_tokens=not starts_with_bos)["input_ids"]
            for i, ids in zip(indices, encoded):
                counts[i] = list(ids)
        return counts

    def supervised_tokens(self, ids: Sequence[int]) -> int:
        """Tokens the training labels supervise in one tokenized conversation: every answer and its
        `<end_of_turn>`, exactly the spans of `all_answer_spans` (and `pipeline.training.collate.build_labels`)
        (0 when there is no complete answer; one span for a read-aloud or free-speech row, one per
        tutor turn for a dialogue). The training loss computes logits at as many positions
        (`pipeline.training.train.answer_loss`), so the memory estimate needs this count."""
        return sum(end - start for start, end in all_answer_spans(ids, self.tokenizer))

    def count(self, messages_list: Sequence[list[dict]], *, add_generation_prompt: bool = False) -> list[int]:
        """Tokens of each conversation, equal to `len(apply_chat_template(..., tokenize=True)["input_ids"][0])`."""
        return self.count_texts([self.render(m, add_generation_prompt=add_generation_prompt) for m in messages_list])


def _strip_audio_arrays(message: dict) -> dict:
    content = message.get("content")
    if not isinstance(content, list):
        return message
    return {
        **message,
        "content": [{"type": "audio"} if block.get("type") == "audio" else block for block in content],
    }






def _model_header_end(ids: list[int], s: int, tokenizer: Any) -> int | None:
    """Index just past `model\\n` when the turn starting at `ids[s]` is a model turn, else None.

    When the last header token straddles "\\n" and the answer, that token is supervised (index j-1).
    """
    for j in range(s + 1, min(len(ids), s + 8) + 1):
        text = tokenizer.decode(ids[s:j])
        if text == MODEL_TURN_HEADER:
            return j
        if text.startswith(MODEL_TURN_HEADER):  # the last token straddles "\n" and the answer: supervise it
            return j - 1
        if not MODEL_TURN_HEADER.startswith(text):
            return None
    return None


def _unknown_turn(ids: list[int], s: int, tokenizer: Any) -> DatasetError:
    head = tokenizer.decode(ids[s : s + 4])
    return DatasetError(
        f"A turn starts with {head!r}, not {MODEL_TURN_HEADER!r} or 'user': the processor's chat template is not "
        "Gemma 3n's. Use a Gemma 3n checkpoint (e.g. google/gemma-3n-E2B-it)."
    )


def answer_spans(input_ids: Sequence[int], tokenizer: Any) -> tuple[int, int] | None:
    """Half-open span `[start, end)` of the LAST answer's tokens in one tokenized conversation.

    The answer starts after the last `<start_of_turn>` + `model\\n` and ends after the first
    `<end_of_turn>` that follows (included, so the model learns to stop). Returns None when there
    is no model turn or its `<end_of_turn>` is missing (answer cut off). A read-aloud or
    free-speech row has exactly this one answer; `all_answer_spans` gives every tutor turn of a
    dialogue (what training supervises).

    Raises:
        DatasetError: the tokens after the last `<start_of_turn>` do not spell `model\\n` on a
            token boundary (a chat template this code does not know).
    """
    ids = list(input_ids)
    start_turn = tokenizer.convert_tokens_to_ids("<start_of_turn>")
    end_turn = tokenizer.convert_tokens_to_ids("<end_of_turn>")
    positions = [i for i, t in enumerate(ids) if t == start_turn]
    if not positions:
        return None
    s = positions[-1] + 1
    header_end = _model_header_end(ids, s, tokenizer)
    if header_end is None:
        head = tokenizer.decode(ids[s : s + 4])
        if head.startswith("user"):
            return None  # the conversation ends with a user turn: nothing to supervise
        raise DatasetError(
            f"The last turn starts with {head!r}, not {MODEL_TURN_HEADER!r}: the processor's chat template is not "
            "Gemma 3n's. Use a Gemma 3n checkpoint (e.g. google/gemma-3n-E2B-it)."
        )
    for k in range(header_end, len(ids)):
        if ids[k] == end_turn:
            return header_end, k + 1
    return None


def all_answer_spans(input_ids: Sequence[int], tokenizer: Any) -> list[tuple[int, int]]:
    """Half-open spans `[start, end)` of EVERY answer in one tokenized conversation, in order.

    Each model turn's answer starts after its `<start_of_turn>` + `model\\n` and ends after the
    `<end_of_turn>` that follows (included). User turns (audio, prompts, learner text, the system
    text folded into the first one) are never in a span. A model turn whose `<end_of_turn>` is
    missing (cut off) gives no span. For a conversation with one answer this is
    `[answer_spans(...)]`; for a tutoring dialogue, one span per tutor turn.

    Raises:
        DatasetError: a turn starts with neither `model\\n` nor `user` (a chat template this code
            does not know).
    """
    ids = list(input_ids)
    start_turn = tokenizer.convert_tokens_to_ids("<start_of_turn>")
    end_turn = tokenizer.convert_tokens_to_ids("<end_of_turn>")
    spans: list[tuple[int, int]] = []
    for position in [i for i, t in enumerate(ids) if t == start_turn]:
        s = position + 1
        header_end = _model_header_end(ids, s, tokenizer)
        if header_end is None:
            if tokenizer.decode(ids[s : s + 4]).startswith("user"):
                continue
            raise _unknown_turn(ids, s, tokenizer)
        end = next((k + 1 for k in range(header_end, len(ids)) if ids[k] == end_turn), None)
        if end is not None:
            spans.append((header_end, end))
    return spans
