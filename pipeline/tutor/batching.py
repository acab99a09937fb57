"""Answering many questions at once: one loaded model, a batch that questions join and leave.

A `BatchEngine` belongs to one loaded `Tutor` (`pipeline.tutor.infer`). Every greedy answer of that
tutor (Try, the practice page, the API, Judge) is a `Question` submitted to it, and each question gets
an `Answer`: the text as it is generated (`for delta in answer`), then the whole (`answer.result()`).
One thread generates, while there is work:

1. Questions waiting are admitted while the batch has room (`max_batch` rows in all), before the
   running rows advance (new questions first, as vLLM schedules prefills): each is read alone (its
   prefill: the processor's inputs for one conversation, audio encoder included), which gives its
   first token at once (the time to first token does not wait for other answers to end), and its
   key/value cache joins the running rows' (`pipeline.model.batch_cache`: left padding, masked).
   The prompt's start that every question of a tutor shares (the instructions before the first
   clip, ~100 of Gemma 3n's ~310 prompt positions) is read once and its key/value cache reused
   (prefix caching, as vLLM's automatic prefix caching and SGLang's RadixAttention do; `PrefixCache`),
   so a prefill reads only the clip and the text after it.
2. Every running row then advances one token in one forward of the whole batch (continuous
   batching, as Orca (OSDI 2022) and vLLM schedule it). A row leaves the batch at its end-of-turn
   token, at its `max_new_tokens`, when its `stop()` says so, or when its caller cancels it.

Rows answered with the run's adapter and rows answered as the base model (inside peft's
`disable_adapter()`, which switches every LoRA layer off for the whole model) are two batches, each
advancing one token in turn. Each forward holds the tutor's lock, so a sampled answer (`generate`,
`do_sample=True`) never runs in the middle of a step.

Decoding is greedy (the argmax of the float32 logits, as `generate` with `do_sample=False`), each
row's positions counting its own tokens (`attention_mask.cumsum(-1) - 1`, as `generate`), so a row
answered in a batch gives the text it gives alone (`tests/test_batching.py` checks it against
`generate`). With `max_batch` 1 questions are answered one at a time, in order of arrival.

The text comes out as pieces (`TextDeltas`): their concatenation is the final text (the tokens
decoded without special tokens, stripped); a piece is held back while it ends in whitespace or in
an incomplete UTF-8 character.

It deliberately does not decide who may ask (the API's admission, `pipeline.serving.models`) and
holds no queue limit of its own.
"""

from __future__ import annotations

import contextlib
import os
import queue
import re
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Mapping

from pipeline.errors import ConfigError
from pipeline.host.env_settings import whole_number
from pipeline.model.tokens import answer_text

DEFAULT_MAX_BATCH = 8
"""Rows generated together per loaded model. What it buys is measured by benchmarks/classroom.py
(benchmarks/README.md, "A class at once": on 2 quiet CPU cores, 8 students, 2.7-2.9x the answers per
minute of one at a time, first token p95 1.1-1.9 s; on a GPU the forward of 8 rows costs about what one
costs). Memory grows by each row's key/value cache only (E2B: ~30 KiB per position)."""
MAX_BATCH_ENV = "TUTOR_MAX_BATCH"
"""Overrides `DEFAULT_MAX_BATCH` for a process (1 answers one question at a time)."""
PREFIX_CACHE_ENV = "TUTOR_PREFIX_CACHE"
"""`0` turns the reuse of a shared prompt start off for a process (every prefill reads its whole prompt)."""
PREFIX_ENTRIES = 4
"""Prompt starts kept per engine (least recently used dropped first): one per kind of question and
adapter state in use (read aloud, free speech, dialogue; tuned or base)."""
MIN_SHARED_PREFIX = 16
"""A shared start shorter than this many positions is read with the rest (one forward is cheaper)."""


def prefix_cache_enabled() -> bool:
    """False when `TUTOR_PREFIX_CACHE` is `0` (or `false`, `no`, `off`), else True."""
    return os.environ.get(PREFIX_CACHE_ENV, "").strip().lower() not in ("0", "false", "no", "off")


def default_max_batch() -> int:
    """`TUTOR_MAX_BATCH` when set, else `DEFAULT_MAX_BATCH`.

    Raises ConfigError when `TUTOR_MAX_BATCH` is not a whole number >= 1."""
    number = whole_number(MAX_BATCH_ENV, unit="answers", unset=f"unset it for the default ({DEFAULT_MAX_BATCH}), "
                                                            "or 1 to answer one question at a time")
    return DEFAULT_MAX_BATCH if number is None else number


@dataclass
class Question:
    """One question for the engine.

    Attributes:
        inputs: `() -> mapping` of the processor's inputs for ONE conversation ending with the
            generation prompt (`input_ids` (1, L) long, `attention_mask` (1, L), the audio features);
            called in the engine's thread under the model's lock (a fast tokenizer is not safe to share
            between threads). What it raises is the answer's error.
        max_new_tokens: the most tokens generated (the end-of-turn token counts as one).
        bypass_adapter: answer as the base model (peft's `disable_adapter()`).
        stop: optional `() -> bool`, asked after every token; True ends the answer there.
    """

    inputs: Callable[[], Mapping[str, Any]]
    max_new_tokens: int
    bypass_adapter: bool = False
    stop: Callable[[], bool] | None = None


@dataclass
class Generated:
    """A finished answer: `text` (special tokens dropped, stripped), `new_tokens` (generated, the
    end-of-turn token included), `prompt_tokens` (the prompt's length as the model read it),
    `finish_reason` ("stop": end of turn or `stop()`; "length": `max_new_tokens` reached), `seconds`
    (from submitting to the last token) and `first_token_s` (from submitting to the first token)."""

    text: str
    new_tokens: int
    prompt_tokens: int
    finish_reason: str
    seconds: float
    first_token_s: float


class Answer:
    """The answer to one submitted question, as it is generated.

    Iterate it for the text's pieces (`str`) as they come; the iteration ends with the answer and
    raises what the question raised. `result()` waits for the whole answer. `cancel()` ends it at the
    next token (the rows beside it go on). `notify`, when given to `BatchEngine.submit`, is called from
    the engine's thread with each event: `("text", str)`, `("done", Generated)`, `("error", exception)`.
    """

    def __init__(self, notify: Callable[[tuple[str, Any]], None] | None = None):
        self.submitted = time.perf_counter()
        self._events: queue.Queue = queue.Queue()
        self._notify = notify
        self._done = threading.Event()
        self._cancelled = threading.Event()
        self._result: Generated | None = None
        self._error: BaseException | None = None

    def _emit(self, kind: str, value: Any) -> None:
        if kind == "done":
            self._result = value
        elif kind == "error":
            self._error = value
        self._events.put((kind, value))
        if kind in ("done", "error"):
            self._done.set()
        if self._notify is not None:
            self._notify((kind, value))

    def cancel(self) -> None:
        """Stop generating this answer (its caller left); it ends with the text so far."""
        self._cancelled.set()

    @property
    def cancelled(self) -> bool:
        return self._cancelled.is_set()

    def __iter__(self) -> Iterator[str]:
        while True:
            kind, value = self._events.get()
            if kind == "text":
                yield value
            elif kind == "error":
                raise value
            else:
                return

    def result(self, timeout: float | None = None) -> Generated:
        """The whole answer, once generated (waits up to `timeout` seconds; None: as long as it takes).

        Raises what the question raised (e.g. `DatasetError` from its inputs), or `TimeoutError`."""
        if not self._done.wait(timeout):
            raise TimeoutError(f"The answer was not ready within {timeout} s.")
        if self._error is not None:
            raise self._error
        return self._result


_BYTE_TOKEN = re.compile(r"<0x[0-9A-Fa-f]{2}>")
"""A byte-fallback token's name (SentencePiece and `tokenizers`' ByteFallback: one byte of UTF-8)."""


class TextDeltas:
    """The text of a growing answer, in pieces whose concatenation is `pipeline.model.tokens.answer_text`
    (`tokenizer.decode(tokens, skip_special_tokens=True).strip()` without a leaked thought channel, which
    is never streamed, closed or not): leading whitespace is dropped, trailing whitespace, an
    incomplete UTF-8 character (decoded as U+FFFD) and a run of byte-fallback tokens (`<0xHH>`) wait for
    the next token. A run of byte tokens is decoded as one: when it is not valid UTF-8, every byte of it
    becomes U+FFFD, a valid one (`<0x21>`, "!") included, so its text is final only once a token of
    another kind follows (seen with a random model: "!" streamed, then "��" in the whole answer)."""

    def __init__(self, tokenizer: Any):
        self.tokenizer = tokenizer
        self.tokens: list[int] = []
        self.sent = ""

    def push(self, token: int) -> str:
        """Add a token; returns the new piece of text ("" when nothing can be shown yet)."""
        self.tokens.append(int(token))
        if _BYTE_TOKEN.fullmatch(str(self.tokenizer.convert_ids_to_tokens(int(token)))):
            return ""
        text = answer_text(self.tokenizer, self.tokens)
        if text.endswith("\ufffd") or not text.startswith(self.sent):
            return ""
        piece, self.sent = text[len(self.sent):], text
        return piece

    def finish(self) -> tuple[str, str]:
        """The whole text and the last piece not yet sent (empty when a decode changed text already sent:
        the whole text is then still right, the pieces are not)."""
        text = answer_text(self.tokenizer, self.tokens)
        piece = text[len(self.sent):] if text.startswith(self.sent) else ""
        self.sent = text
        return text, piece


class PrefixCache:
    """The key/value caches of prompt starts shared by many questions, least recently used dropped first.

    A cache is kept under `(adapter bypassed, the start's token ids)`: the keys and values of a
    position depend on the tokens up to it and on the weights (an adapter changes them), and on
    nothing after it (causal attention), so a question whose prompt begins with those tokens, asked
    with the same adapter state, continues from a copy of it and gets the cache, logits and greedy
    answer that reading its whole prompt gives (`tests/test_batching.py` checks the answers).

    Args:
        entries: the most starts kept (at least 1).
    """

    def __init__(self, entries: int = PREFIX_ENTRIES):
        from collections import OrderedDict

        self.entries = max(1, int(entries))
        self._caches: OrderedDict = OrderedDict()
        self.hits = 0
        """Prefills that continued from a kept start."""
        self.misses = 0
        """Prefills that read a start not kept yet (then kept)."""

    def get(self, key: tuple) -> Any:
        """A copy of the cache kept under `key` (counted as a hit), or None (a miss)."""
        from pipeline.model.batch_cache import copy_cache

        cache = self._caches.get(key)
        if cache is None:
            self.misses += 1
            return None
        self._caches.move_to_end(key)
        self.hits += 1
        return copy_cache(cache)

    def put(self, key: tuple, cache: Any) -> Any:
        """Keep `cache` under `key` (it must not be extended afterwards); returns a copy to continue from."""
        from pipeline.model.batch_cache import copy_cache

        self._caches[key] = cache
        self._caches.move_to_end(key)
        while len(self._caches) > self.entries:
            self._caches.popitem(last=False)
        return copy_cache(cache)

    def __len__(self) -> int:
        return len(self._caches)


_PER_POSITION = ("input_ids", "token_type_ids", "mm_token_type_ids", "position_ids")
"""The processor's inputs with one value per prompt position (cut where a kept start ends); the
attention mask stays whole (it covers the kept positions too)."""


class _Row:
    """One answer being generated: its question, its tokens and text."""

    def __init__(self, question: Question, answer: Answer, tokenizer: Any, prompt_tokens: int):
        self.question = question
        self.answer = answer
        self.text = TextDeltas(tokenizer)
        self.prompt_tokens = prompt_tokens
        self.first_token_s: float | None = None
        self.finished = False


class _Batch:
    """The rows answered with one adapter state, their cache and its 2-D mask (rows, positions)."""

    def __init__(self):
        self.rows: list[_Row] = []
        self.cache: Any = None
        self.mask: Any = None


class BatchEngine:
    """Continuous batching for one loaded model (see the module docstring).

    Args:
        model: the loaded model (a peft `PeftModel` when an adapter is loaded), in eval mode.
        tokenizer: its tokenizer (decodes the answers).
        lock: held around every forward and every `Question.inputs` call: the lock `generate` takes for
            the same model.
        device: where the inputs go ("cpu", "cuda", "mps").
        eos_ids: token ids that end an answer (`<end_of_turn>`, the tokenizer's end of sequence).
        before_step: optional `() -> None` called before each round of work (the CPU thread rule).
        max_batch: rows generated together; None: `default_max_batch()`.
        shared_prefix: optional `(prompt's token ids) -> int`: how many of its first positions are the
            same for every question of its kind (text only: before the first clip or image). Their
            key/value cache is read once and reused (`PrefixCache`); None, or `TUTOR_PREFIX_CACHE=0`,
            reads every prompt whole.

    Raises:
        ConfigError: `max_batch` below 1.
    """

    def __init__(self, model: Any, tokenizer: Any, *, lock: Any, device: str, eos_ids: list[int],
                 before_step: Callable[[], None] | None = None, max_batch: int | None = None,
                 shared_prefix: Callable[[list[int]], int] | None = None):
        self.model = model
        self.tokenizer = tokenizer
        self.lock = lock
        self.device = device
        self.eos_ids = frozenset(int(i) for i in eos_ids if i is not None)
        self.before_step = before_step
        self.max_batch = default_max_batch() if max_batch is None else max_batch
        self._check_max_batch(self.max_batch)
        self._cond = threading.Condition()
        self._waiting: deque[tuple[Question, Answer]] = deque()
        self._batches: dict[bool, _Batch] = {}
        self._thread: threading.Thread | None = None
        self._batchable: bool | None = None
        """Whether this model's cache can be joined (`pipeline.model.batch_cache.batchable`); known after the first prefill."""
        self.shared_prefix = shared_prefix if prefix_cache_enabled() else None
        self.prefixes = PrefixCache()
        """The kept prompt starts (`hits` and `misses` count the prefills that used them)."""
        self._cache_kw: str | None = None

    @staticmethod
    def _check_max_batch(value: Any) -> None:
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ConfigError(f"The batch size must be a whole number of answers >= 1, got {value!r}; "
                              "1 answers one question at a time.")

    def set_max_batch(self, value: int) -> None:
        """Change how many rows are generated together (from the next admission on).

        Raises ConfigError for a value below 1."""
        self._check_max_batch(value)
        with self._cond:
            self.max_batch = value

    @property
    def running(self) -> int:
        """Answers being generated now."""
        return sum(len(batch.rows) for batch in self._batches.values())

    @property
    def waiting(self) -> int:
        """Questions submitted and not yet admitted."""
        return len(self._waiting)

    def submit(self, question: Question, notify: Callable[[tuple[str, Any]], None] | None = None) -> Answer:
        """Queue `question`; returns its `Answer` at once (generation happens in the engine's thread)."""
        answer = Answer(notify)
        with self._cond:
            self._waiting.append((question, answer))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="tutor-batch", daemon=True)
                self._thread.start()
        return answer

    # -- the engine's thread -------------------------------------------------------------------------

    def _admit(self) -> list[tuple[Question, Answer]] | None:
        """The questions to read now, or None when there is nothing left to do (the thread then ends)."""
        with self._cond:
            while self._waiting and self._waiting[0][1].cancelled:
                _, answer = self._waiting.popleft()
                answer._emit("error", _cancelled_error())
            room = self.max_batch - self.running
            if self._batchable is not True:  # one row at a time until the cache is known to join
                room = min(room, 1 - self.running)
            admitted = [self._waiting.popleft() for _ in range(max(0, min(room, len(self._waiting))))]
            if not admitted and self.running == 0 and not self._waiting:
                self._thread = None
                return None
            return admitted

    def _run(self) -> None:
        import torch

        try:
            with torch.inference_mode():
                while (admitted := self._admit()) is not None:
                    if self.before_step is not None:
                        self.before_step()
                    for question, answer in admitted:
                        self._prefill(question, answer)
                    for batch in list(self._batches.values()):
                        if batch.rows:
                            self._step(batch)
        except BaseException as error:  # noqa: BLE001 - every caller waiting hears of it
            with self._cond:
                rows = [row for batch in self._batches.values() for row in batch.rows]
                waiting = list(self._waiting)
                self._batches.clear()
                self._waiting.clear()
                self._thread = None
            for row in rows:
                row.answer._emit("error", error)
            for _, answer in waiting:
                answer._emit("error", error)

    def _context(self, bypass: bool):
        return self.model.disable_adapter() if bypass else contextlib.nullcontext()

    def _prefill(self, question: Question, answer: Answer) -> None:
        """Read one question alone; its first token; its cache joins the running rows' (or it ends)."""
        from pipeline.model.batch_cache import batchable, join, returned_cache

        if answer.cancelled:
            answer._emit("error", _cancelled_error())
            return
        try:
            with self.lock:
                inputs = {k: v.to(self.device) if hasattr(v, "to") else v for k, v in question.inputs().items()}
                with self._context(question.bypass_adapter):
                    output = self._read(inputs, question.bypass_adapter)
        except BaseException as error:  # noqa: BLE001 - the question's own fault (bad text) or the model's
            answer._emit("error", error)
            return
        cache = returned_cache(output)
        if self._batchable is None:
            self._batchable = batchable(cache)
        row = _Row(question, answer, self.tokenizer, int(inputs["input_ids"].shape[1]))
        self._advance(row, int(output.logits[0, -1].float().argmax()))
        if row.finished:
            return
        batch = self._batches.setdefault(question.bypass_adapter, _Batch())
        mask = inputs["attention_mask"].to(self.device)
        if not batch.rows:
            batch.cache, batch.mask = cache, mask
        else:
            batch.mask = join(batch.cache, batch.mask, cache, mask)
        batch.rows.append(row)

    def _read(self, inputs: dict, bypass: bool) -> Any:
        """The prefill forward of one question (under the lock, in the adapter state `bypass`): from a kept
        copy of its prompt's shared start when there is one (read and kept first when not), else whole."""
        from pipeline.model.batch_cache import batchable, cache_argument, holds_all, returned_cache

        if self._cache_kw is None:
            self._cache_kw = cache_argument(self.model)
        ids = inputs["input_ids"]
        shared = 0
        if self.shared_prefix is not None and ids.shape[0] == 1:
            shared = int(self.shared_prefix(ids[0].tolist()))
        if not MIN_SHARED_PREFIX <= shared < ids.shape[1]:
            return self.model(**inputs, use_cache=True, logits_to_keep=1)
        key = (bool(bypass), tuple(ids[0, :shared].tolist()))
        start = self.prefixes.get(key)
        if start is None:
            head = {k: v[:, :shared] for k, v in inputs.items() if k in _PER_POSITION or k == "attention_mask"}
            read = returned_cache(self.model(**head, use_cache=True, logits_to_keep=1))
            if not holds_all(read, shared):  # a cache this module cannot copy, or a window shorter than the start
                if not batchable(read):
                    self.shared_prefix = None  # this model's cache is never reused: read every prompt whole
                return self.model(**inputs, use_cache=True, logits_to_keep=1)
            start = self.prefixes.put(key, read)
        rest = {k: v[:, shared:] if k in _PER_POSITION else v for k, v in inputs.items()}
        return self.model(**rest, use_cache=True, logits_to_keep=1, **{self._cache_kw: start})

    def _step(self, batch: _Batch) -> None:
        """One token for every row of `batch` in one forward; rows that end leave it."""
        import torch

        from pipeline.model.batch_cache import keep_rows

        ids = torch.tensor([[row.text.tokens[-1]] for row in batch.rows], dtype=torch.long, device=self.device)
        positions = batch.mask.sum(dim=-1, keepdim=True).to(torch.long)  # each row's own tokens so far
        mask = torch.cat([batch.mask, batch.mask.new_ones((batch.mask.shape[0], 1))], dim=1)
        with self.lock, self._context(batch.rows[0].question.bypass_adapter):
            output = self.model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True,
                                logits_to_keep=1, **{self._cache_kw: batch.cache})
        batch.mask = mask
        tokens = output.logits[:, -1].float().argmax(dim=-1).tolist()
        for row, token in zip(batch.rows, tokens):
            self._advance(row, int(token))
        keep = [i for i, row in enumerate(batch.rows) if not row.finished]
        if len(keep) == len(batch.rows):
            return
        if keep:
            batch.mask = keep_rows(batch.cache, batch.mask, keep)
            batch.rows = [batch.rows[i] for i in keep]
        else:
            batch.rows, batch.cache, batch.mask = [], None, None

    def _advance(self, row: _Row, token: int) -> None:
        """Give `row` its next token: send the new text, and end the row when its answer ends."""
        now = time.perf_counter()
        if row.first_token_s is None:
            row.first_token_s = now - row.answer.submitted
        if row.answer.cancelled:
            return self._finish(row, "stop")
        piece = row.text.push(token)
        if piece:
            row.answer._emit("text", piece)
        question = row.question
        if token in self.eos_ids:
            self._finish(row, "stop")
        elif len(row.text.tokens) >= question.max_new_tokens:
            self._finish(row, "length")
        elif question.stop is not None and question.stop():
            self._finish(row, "stop")

    def _finish(self, row: _Row, reason: str) -> None:
        text, piece = row.text.finish()
        if piece:
            row.answer._emit("text", piece)
        row.finished = True
        row.answer._emit("done", Generated(
            text=text, new_tokens=len(row.text.tokens), prompt_tokens=row.prompt_tokens, finish_reason=reason,
            seconds=round(time.perf_counter() - row.answer.submitted, 3), first_token_s=round(row.first_token_s, 3)))


def _cancelled_error() -> Exception:
    from pipeline.errors import PipelineError

    return PipelineError("The question was withdrawn before it was answered.")
