"""Token lengths and supervised spans as the model family's processor sees them.

- `TokenCounter`: a conversation's length in tokens exactly as the family's processor counts it
  (Gemma 3n: a fixed audio span per clip; Gemma 4: one that grows with the clip, `ModelFamily.audio_span`).
- `ClipLength`: a clip's length without its samples, for counting (`pipeline.data.row_lengths`).
- `answer_spans`, `all_answer_spans`, `IGNORE_INDEX`: which tokens the training labels supervise
  (every tutor answer and its closing turn token: Gemma 3n's `<end_of_turn>`, Gemma 4's `<turn|>`;
  FIELD_NOTES "Train only on the answer"). The turn markers are the family's (`family_of_tokenizer`).
- `answer_header`, `asked_extra`, `TokenCounter.render_training`, `training_text`: the rule that every
  supervised answer follows exactly the tokens the product sends when it asks for it (the generation
  prompt, `add_generation_prompt=True`). Where a chat template's generation prompt is the header its
  history gives a past model turn (Gemma 3n; Gemma 4 E2B's own template per Ollama's copy of it), a row
  is the rendered conversation, as before. Where it adds more (the empty thought channel
  `<|channel>thought\\n<channel|>` of the Gemma 4 template with thinking off that the tiny stand-in
  and llama.cpp's `google-gemma-4-31B-it.jinja` carry), the row's last answer is written after the
  generation prompt, and only answers preceded by that whole prompt are supervised (the channel
  never is; a past turn rendered as history is not).

Torch-free: importing this module loads no model library; callers pass the processor or tokenizer
(`pipeline.model.loading.load_processor`).
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Any, Sequence

from pipeline.conversation.feedback import without_thought_text
from pipeline.errors import DatasetError
from pipeline.model.catalog import FAMILIES, DEFAULT_FAMILY
from pipeline.model.family import ModelFamily
from pipeline.model.gemma3n import AUDIO_SOFT_TOKENS, MAX_AUDIO_S  # noqa: F401 - this module's API (Gemma 3n's figures)

SAMPLE_RATE_HZ = 16_000
"""Samples per second of every clip the pipeline hands a processor (`pipeline.data.audio`)."""


@dataclass(frozen=True)
class ClipLength:
    """A clip's length in seconds, standing in for its samples in a conversation's audio block when
    only its token count is needed (`TokenCounter.render`)."""

    seconds: float


def family_of_tokenizer(tokenizer: Any) -> ModelFamily:
    """The family whose chat turns `tokenizer` knows: the first family whose `turn_start` token is in its
    vocabulary (Gemma 4's `<|turn>`, Gemma 3n's `<start_of_turn>`); the default family otherwise (its
    turn check then names what is missing)."""
    unk = getattr(tokenizer, "unk_token_id", None)
    for family in FAMILIES.values():
        token_id = tokenizer.convert_tokens_to_ids(family.turn_start)
        if token_id is not None and token_id != unk:
            return family
    return DEFAULT_FAMILY


def clip_seconds(audio: Any) -> float | None:
    """Seconds of an audio block's `audio`: a `ClipLength`, or samples at 16 kHz; None when absent."""
    if audio is None:
        return None
    if isinstance(audio, ClipLength):
        return audio.seconds
    return len(audio) / SAMPLE_RATE_HZ

IGNORE_INDEX = -100
"""Label value ignored by the cross-entropy loss (`torch.nn.CrossEntropyLoss(ignore_index=-100)`)."""

_ASKED_EXTRA: "weakref.WeakKeyDictionary[Any, tuple[str, tuple[int, ...]]]" = weakref.WeakKeyDictionary()


def answer_header(tokenizer: Any) -> str:
    """The text the tokenizer's chat template writes after the last turn when the model is asked to
    answer (`add_generation_prompt=True`), found by rendering a one-word user turn with and without it:
    Gemma 3n `<start_of_turn>model\\n`; a Gemma 4 template with thinking off either `<|turn>model\\n` (E2B's)
    or `<|turn>model\\n<|channel>thought\\n<channel|>` (the stand-in's, the 12B/31B's). A tokenizer without
    a chat template gives its family's turn start + `model_turn_header`.

    Raises:
        DatasetError: the generation prompt does not extend the rendered conversation (a template this
            code does not know).
    """
    family = family_of_tokenizer(tokenizer)
    if not getattr(tokenizer, "chat_template", None):
        return family.turn_start + family.model_turn_header
    probe = [{"role": "user", "content": "x"}]
    plain = tokenizer.apply_chat_template(probe, tokenize=False)
    asked = tokenizer.apply_chat_template(probe, tokenize=False, add_generation_prompt=True)
    if not asked.startswith(plain):
        raise DatasetError(
            f"The chat template's generation prompt does not extend the conversation ({asked[-40:]!r} after "
            f"{plain[-40:]!r}); use a {family.label} checkpoint's own template (e.g. {family.default_model})."
        )
    return asked[len(plain):]


def asked_extra(tokenizer: Any) -> tuple[str, tuple[int, ...]]:
    """What the generation prompt adds after a past model turn's header (`answer_header` minus the
    family's turn start + `model\\n`), as text and token ids: `("", ())` where a row may simply be the
    rendered conversation (Gemma 3n, Gemma 4 E2B's template), `("<|channel>thought\\n<channel|>", ids)`
    where the template asks with an empty thought channel. Cached per tokenizer.

    Raises:
        DatasetError: the generation prompt does not start with a model turn's header.
    """
    try:
        cached = _ASKED_EXTRA.get(tokenizer)
    except TypeError:
        cached = None
    if cached is not None:
        return cached
    family = family_of_tokenizer(tokenizer)
    header, base = answer_header(tokenizer), family.turn_start + family.model_turn_header
    if not header.startswith(base):
        raise DatasetError(
            f"The chat template asks for an answer with {header!r}, not {base!r} + something: it is not "
            f"{family.label}'s. Use a {family.label} checkpoint (e.g. {family.default_model})."
        )
    extra = header[len(base):]
    cached = (extra, tuple(tokenizer(extra, add_special_tokens=False)["input_ids"]) if extra else ())
    try:
        _ASKED_EXTRA[tokenizer] = cached
    except TypeError:
        pass
    return cached


def answer_text(tokenizer: Any, ids: Sequence[int]) -> str:
    """The answer a person sees for generated token `ids`: `tokenizer.decode(ids, skip_special_tokens=True)`
    stripped, without any thought channel the model wrote (its family's `thought_channel`: from `<|channel>`
    through `<channel|>`, or to the end while it is not closed). Gemma 4 is reported to leak one into
    answers, notably with a system prompt; skipping special tokens alone would keep its text ("thought ...").
    Every surface reads answers through this (Try, Judge, grounding, the practice page, the API, the inbox)."""
    family = family_of_tokenizer(tokenizer)
    kept = [int(t) for t in ids]
    if family.thought_channel:
        opening, closing = (tokenizer.convert_tokens_to_ids(t) for t in family.thought_channel)
        out, inside = [], False
        for token in kept:
            if token == opening:
                inside = True
            elif inside:
                inside = token != closing
            else:
                out.append(token)
        kept = out
    return without_thought_text(tokenizer.decode(kept, skip_special_tokens=True)).strip()


def training_text(render: Any, messages: list[dict], tokenizer: Any) -> str:
    """A training row's text: `render(messages)` where the template asks as its history renders
    (`asked_extra` empty); else the history before the last answer as the generation prompt renders it
    (`render(messages[:-1], add_generation_prompt=True)`), then that answer and its turn end as the
    template writes them. `render(messages, add_generation_prompt=...)` is a processor's
    `apply_chat_template(..., tokenize=False)` or `TokenCounter.render`.

    Raises:
        DatasetError: the conversation does not end with an answer, or the template renders a past
            answer in a way this code does not know.
    """
    extra, _ = asked_extra(tokenizer)
    full = render(messages)
    if not extra:
        return full
    if not messages or messages[-1].get("role") != "assistant":
        raise DatasetError("A training conversation must end with the tutor's answer; add it or leave the row out.")
    history = render(messages[:-1])
    family = family_of_tokenizer(tokenizer)
    header = family.turn_start + family.model_turn_header
    turn = full[len(history):]
    if not full.startswith(history) or not turn.startswith(header):
        raise DatasetError(
            f"The chat template renders the last answer as {turn[:40]!r}, not after {header!r}; use a "
            f"{family.label} checkpoint's own template (e.g. {family.default_model})."
        )
    return render(messages[:-1], add_generation_prompt=True) + turn[len(header):]

# --------------------------------------------------------------------------------------------------
# Token lengths
# --------------------------------------------------------------------------------------------------


class TokenCounter:
    """Counts a conversation's tokens exactly as `processor.apply_chat_template(tokenize=True)` would.

    The processor renders the chat template, replaces each audio placeholder with the clip's audio
    span and tokenizes the result without adding a second `<bos>`. The span is the family's
    (`ModelFamily.audio_span`): Gemma 3n's is fixed (`processor.full_audio_sequence`: blank line,
    `<start_of_audio>`, 188 audio soft tokens, `<end_of_audio>`, blank line), Gemma 4's grows with the
    clip (`<|audio>`, 25 placeholders a second, `<audio|>`). This class does the same text work but
    skips the mel feature extraction, and tokenizes many rows in one batched call: about 100x faster
    than the full processor. `tests/test_dataset.py` and `tests/test_gemma4.py` check that both give
    the same count.
    """

    def __init__(self, processor: Any):
        self.processor = processor
        self.tokenizer = processor.tokenizer
        self.family = family_of_tokenizer(self.tokenizer)
        self.audio_token = getattr(processor, "audio_token", None) or getattr(self.tokenizer, "audio_token", None)
        try:
            self.audio_span = self.family.audio_span(processor, 1.0)  # the span of a 1 s clip (Gemma 3n: of any)
        except AttributeError as error:
            raise DatasetError(
                f"The processor {type(processor).__name__} has no audio tokens ({error}); "
                f"use a processor of {', '.join(m for f in FAMILIES.values() for m in f.models[:1])}."
            ) from error
        if self.audio_token is None:
            raise DatasetError(f"The processor {type(processor).__name__} has no audio token; use a Gemma audio processor.")
        self.bos = getattr(self.tokenizer, "bos_token", None)

    def audio_tokens(self, seconds: float) -> int:
        """Audio positions of one clip of `seconds` (the family's `audio_tokens`)."""
        return self.family.audio_tokens(seconds)

    def render(self, messages: list[dict], *, add_generation_prompt: bool = False) -> str:
        """Chat template text with each audio placeholder expanded to its clip's audio span.

        Each audio block's `audio` (samples at 16 kHz, or a `ClipLength`) gives its clip's length, in
        the order the blocks appear; a block without one is a 1 s clip (exact for Gemma 3n, whose span
        does not depend on the length)."""
        seconds = [clip_seconds(block.get("audio")) for m in messages if isinstance(m.get("content"), list)
                   for block in m["content"] if block.get("type") == "audio"]
        plain = [_strip_audio_arrays(m) for m in messages]
        text = self.processor.apply_chat_template(
            plain, tokenize=False, add_generation_prompt=add_generation_prompt
        )
        pieces = text.split(self.audio_token)
        out = [pieces[0]]
        for index, piece in enumerate(pieces[1:]):
            length = seconds[index] if index < len(seconds) and seconds[index] is not None else 1.0
            out += [self.family.audio_span(self.processor, length), piece]
        return "".join(out)

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

    def render_training(self, messages: list[dict]) -> str:
        """A training row's text with each audio span expanded (`training_text`): the last answer after
        the generation prompt where the template asks with more than its history shows."""
        return training_text(self.render, messages, self.tokenizer)

    def supervised_tokens_as_history(self, ids: Sequence[int]) -> int:
        """Tokens a row rendered whole (`render`, every answer as the history shows it) would supervise
        under the rule before issue 43 (every model turn after its header): the build report's before."""
        family, start_turn, end_turn = _turn_ids(self.tokenizer)
        total = 0
        for position in [i for i, t in enumerate(ids) if t == start_turn]:
            header_end = _model_header_end(list(ids), position + 1, self.tokenizer, family.model_turn_header)
            if header_end is not None:
                end = next((k + 1 for k in range(header_end, len(ids)) if ids[k] == end_turn), None)
                total += (end - header_end) if end is not None else 0
        return total

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






def _model_header_end(ids: list[int], s: int, tokenizer: Any, header: str) -> int | None:
    """Index just past `header` (`model\\n`) when the turn starting at `ids[s]` is a model turn, else None.

    When the last header token straddles "\\n" and the answer, that token is supervised (index j-1).
    """
    for j in range(s + 1, min(len(ids), s + 8) + 1):
        text = tokenizer.decode(ids[s:j])
        if text == header:
            return j
        if text.startswith(header):  # the last token straddles "\n" and the answer: supervise it
            return j - 1
        if not header.startswith(text):
            return None
    return None


def _asked_answer_start(ids: list[int], header_end: int, tokenizer: Any) -> int | None:
    """Where a model turn's answer starts when that turn is written as the product asks for it: just
    past its header where the generation prompt adds nothing (`asked_extra`), else just past the added
    tokens (the empty thought channel, never supervised); None when they are missing (a past answer as
    the history renders it)."""
    _, extra = asked_extra(tokenizer)
    if not extra:
        return header_end
    if tuple(ids[header_end:header_end + len(extra)]) == extra:
        return header_end + len(extra)
    return None


def _not_a_known_template(head: str, family: ModelFamily, what: str) -> DatasetError:
    return DatasetError(
        f"{what} starts with {head!r}, not {family.model_turn_header!r} or 'user': the processor's chat template is not "
        f"{family.label}'s. Use a {family.label} checkpoint (e.g. {family.default_model})."
    )


def _turn_ids(tokenizer: Any) -> tuple[ModelFamily, int, int]:
    family = family_of_tokenizer(tokenizer)
    return family, tokenizer.convert_tokens_to_ids(family.turn_start), tokenizer.convert_tokens_to_ids(family.turn_end)


def answer_spans(input_ids: Sequence[int], tokenizer: Any) -> tuple[int, int] | None:
    """Half-open span `[start, end)` of the LAST answer's tokens in one tokenized conversation.

    The answer starts after the last turn start (`<start_of_turn>` for Gemma 3n, `<|turn>` for Gemma 4)
    + `model\\n` and ends after the first turn end (`<end_of_turn>`, `<turn|>`) that follows (included,
    so the model learns to stop). Returns None when there is no model turn or its turn end is missing
    (answer cut off). A read-aloud or free-speech row has exactly this one answer; `all_answer_spans`
    gives every tutor turn of a dialogue (what training supervises).

    Raises:
        DatasetError: the tokens after the last turn start do not spell `model\\n` on a token
            boundary (a chat template this code does not know).
    """
    ids = list(input_ids)
    family, start_turn, end_turn = _turn_ids(tokenizer)
    positions = [i for i, t in enumerate(ids) if t == start_turn]
    if not positions:
        return None
    s = positions[-1] + 1
    header_end = _model_header_end(ids, s, tokenizer, family.model_turn_header)
    if header_end is None:
        head = tokenizer.decode(ids[s : s + 8])
        if head.startswith(("user", "system")):
            return None  # the conversation ends with a user turn: nothing to supervise
        raise _not_a_known_template(head[:12], family, "The last turn")
    start = _asked_answer_start(ids, header_end, tokenizer)
    if start is None:
        return None
    for k in range(start, len(ids)):
        if ids[k] == end_turn:
            return start, k + 1
    return None


def all_answer_spans(input_ids: Sequence[int], tokenizer: Any) -> list[tuple[int, int]]:
    """Half-open spans `[start, end)` of EVERY answer in one tokenized conversation, in order.

    Each model turn's answer starts after its turn start + `model\\n` and ends after the turn end that
    follows (included). Where the template asks with more than a past turn's header (`asked_extra`, the
    empty thought channel), only turns written with it are answers, and the span starts after it. User turns (audio, prompts, learner text, Gemma 3n's system text folded into
    the first one) and Gemma 4's system turn are never in a span. A model turn whose turn end is
    missing (cut off) gives no span. For a conversation with one answer this is
    `[answer_spans(...)]`; for a tutoring dialogue, one span per tutor turn.

    Raises:
        DatasetError: a turn starts with neither `model\\n`, `user` nor `system` (a chat template this
            code does not know).
    """
    ids = list(input_ids)
    family, start_turn, end_turn = _turn_ids(tokenizer)
    spans: list[tuple[int, int]] = []
    for position in [i for i, t in enumerate(ids) if t == start_turn]:
        s = position + 1
        header_end = _model_header_end(ids, s, tokenizer, family.model_turn_header)
        if header_end is None:
            head = tokenizer.decode(ids[s : s + 8])
            if head.startswith(("user", "system")):
                continue
            raise _not_a_known_template(head[:12], family, "A turn")
        start = _asked_answer_start(ids, header_end, tokenizer)
        if start is None:
            continue  # a past turn as the history renders it, never asked that way: not supervised
        end = next((k + 1 for k in range(start, len(ids)) if ids[k] == end_turn), None)
        if end is not None:
            spans.append((start, end))
    return spans
