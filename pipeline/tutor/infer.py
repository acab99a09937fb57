"""Tutor feedback for one clip, from the base Gemma 3n or a run's LoRA adapter.

`python -m pipeline infer --workspace WS --model M [--run NAME] --audio FILE --text "TARGET" [--json]`
`python -m pipeline infer ... --kind free_speech --prompt "QUESTION" --audio FILE`
`python -m pipeline infer ... --kind dialogue --turns TURNS.json` (the tutor's next reply)

Three kinds of question (`pipeline.conversation.messages.KINDS`): a sentence read aloud (`Tutor.feedback`), free
speech answering a prompt (`Tutor.free_speech_feedback`), and the next tutor turn of a dialogue whose
history is learner clips or text and earlier tutor turns (`Tutor.dialogue_reply`); each is asked
with the same conversation as training saw for that kind.

The clip goes through the same ingest as the sample library (`pipeline.data.audio.load_audio`: decode,
16 kHz mono, checks) and the same conversation as training (`pipeline.data.dataset.build_messages`:
system instruction, audio, target sentence), ending with the generation prompt
`<start_of_turn>model\\n`. Decoding is greedy by default. Only the answer text is returned (no
prompt, no special tokens). Without a run the base model answers, so base and tuned can be compared.

With a run, the base model, device and quantization default to the run's `config.json`, so the
adapter sits on the base it was trained on. Loaded tutors are cached per (model, adapter, device,
quantization) within a process, so the app does not reload the model on every click.
`compare_feedback` answers with the tuned and the base tutor from ONE loaded model: the base answer
runs inside peft's `disable_adapter()` context, which skips every LoRA layer (identical to the base
model without the adapter).

Concurrency (the app, the practice page and the API ask one loaded model at once): every greedy
answer is a question for the tutor's batch engine (`pipeline.tutor.batching.BatchEngine`), which
reads each question alone and then generates the answers together, one token per row per forward,
and gives each answer's text as it grows (`on_text`, `Tutor.ask`). Answers with the adapter and
answers as the base model (peft's `disable_adapter()`, a switch global to the model) are generated
in separate batches, so an answer is always from the model it is labelled with. A sampled answer
(`do_sample=True`) runs alone through `generate`, holding the tutor's lock, which every step of the
engine takes too. `load_tutor` loads a model once however many first clicks arrive together.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable

from pipeline.host.cpu_threads import apply_threads, inference_threads
from pipeline.errors import ConfigError, ModelLoadError
from pipeline.workspace import Workspace
from pipeline.model.tokens import answer_text

DEFAULT_MAX_NEW_TOKENS = 256
"""Longest answer generated, in tokens (the feedback template is ~40-120 tokens)."""


@dataclass
class Feedback:
    """One answer: `text` (the tutor's words only), the model used and timing (`seconds`: from asking to
    the last token, waiting for a place in the batch included)."""

    text: str
    model: str
    run: str | None
    adapter_dir: str | None
    tiny_random_model: bool
    device: str
    quantization: str
    new_tokens: int
    seconds: float
    audio_duration_s: float
    note: str | None = None
    prompt_tokens: int = 0
    """The prompt's length in tokens as the model read it (each Gemma 3n clip 188 audio positions)."""
    finish_reason: str = "stop"
    """"stop" (end of turn, or `stop()`), "length" (`max_new_tokens` reached)."""
    first_token_s: float | None = None
    """Seconds from asking to the first token (None for a sampled answer)."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class Tutor:
    """A loaded model (+ optional adapter) and processor that answers for clips.

    Build with `load_tutor`; call `feedback(audio, target_text)` (read aloud),
    `free_speech_feedback(audio, prompt)` or `dialogue_reply(turns)`.
    """

    def __init__(self, model, processor, *, model_id: str, run: str | None, adapter_dir: str | None, device: str, quantization: str,
                 workspace: Workspace | None = None):
        self.model = model
        self.workspace = workspace
        """Where a run may train beside this tutor: answers then use one CPU thread (`pipeline.host.cpu_threads`)."""
        self.processor = processor
        self.model_id = model_id
        self.run = run
        self.adapter_dir = adapter_dir
        self.device = device
        self.quantization = quantization
        self._lock = threading.Lock()
        """Held around every forward (the batch engine's steps, a sampled answer's `generate`) and every
        tokenization: the adapter switch is global to the model, and a fast tokenizer is not safe to share."""
        self._engine = None
        self._engine_lock = threading.Lock()
        from pipeline.model.tiny_model import is_tiny_random_model

        self.tiny_random_model = is_tiny_random_model(model_id)

    def feedback(
        self,
        audio: Any,
        target_text: str,
        *,
        max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS,
        do_sample: bool = False,
        use_adapter: bool = True,
        stop: Any = None,
        on_text: Callable[[str], None] | None = None,
    ) -> Feedback:
        """Answer for one clip.

        Args:
            audio: anything `pipeline.data.audio.load_audio` accepts (path, bytes, Gradio microphone
                tuple `(rate, ndarray)`, `Audio`).
            target_text: the sentence the learner was asked to read.
            max_new_tokens: longest answer in tokens.
            do_sample: sample instead of greedy decoding (one answer at a time, through `generate`).
            use_adapter: False answers as the base model: generation runs inside peft's
                `disable_adapter()` context (no effect when no adapter is loaded). The returned
                `Feedback` then has `run=None`, `adapter_dir=None`.
            stop: optional `() -> bool`, checked after every generated token; True ends the answer
                there (used to cancel an evaluation mid-answer).
            on_text: optional `(text so far) -> None`, called from this thread each time the answer
                grows (greedy answers; a sampled one is given once, whole).

        Raises:
            AudioError: the clip fails a check (too short/long, silent, clipped, unreadable).
            DatasetError: the target text is empty or spells a control token such as `<end_of_turn>`
                (`pipeline.conversation.messages.check_user_text`, the rule training uses).
        """
        return self._generate(*self._conversation("read_aloud", audio=audio, text=target_text),
                              max_new_tokens=max_new_tokens, do_sample=do_sample, use_adapter=use_adapter, stop=stop,
                              on_text=on_text)

    def free_speech_feedback(self, audio: Any, prompt: str, *, max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS,
                             do_sample: bool = False, use_adapter: bool = True, stop: Any = None,
                             on_text: Callable[[str], None] | None = None) -> Feedback:
        """Feedback on one free-speech clip: the learner answering `prompt` (e.g. "Describe your last
        holiday."), asked as training asked it (`pipeline.conversation.messages.build_free_speech_messages`).

        Arguments and errors as `feedback`, with `prompt` in place of the target sentence
        (`DatasetError` when it is empty or spells a control token).
        """
        return self._generate(*self._conversation("free_speech", audio=audio, text=prompt),
                              max_new_tokens=max_new_tokens, do_sample=do_sample, use_adapter=use_adapter, stop=stop,
                              on_text=on_text)

    def dialogue_reply(self, turns: list[dict], *, max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS,
                       do_sample: bool = False, use_adapter: bool = True, stop: Any = None,
                       on_text: Callable[[str], None] | None = None) -> Feedback:
        """The tutor's next turn in a dialogue.

        Args:
            turns: the history, in order: `{"role": "learner", "audio": clip?, "text": str?}` (a clip
                is anything `load_audio` accepts) and `{"role": "tutor", "text": str}`; it starts and
                ends with the learner. Every clip is heard again, as in training
                (`pipeline.conversation.messages.build_dialogue_messages`).
            max_new_tokens, do_sample, use_adapter, stop, on_text: as `feedback`.

        Returns:
            `Feedback` whose `text` is the reply and `audio_duration_s` the clips' total.

        Raises:
            DatasetError: no turns, a tutor turn first or last, an empty turn, a control token in a text.
            AudioError: a clip fails a check (the message names its turn).
        """
        return self._generate(*self._conversation("dialogue", turns=turns), max_new_tokens=max_new_tokens,
                              do_sample=do_sample, use_adapter=use_adapter, stop=stop, on_text=on_text)

    def ask(self, kind: str, *, audio: Any = None, text: str | None = None, turns: list[dict] | None = None,
            max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS, use_adapter: bool = True, stop: Any = None,
            notify: Callable[[tuple[str, Any]], None] | None = None) -> "PendingFeedback":
        """Submit one greedy question and return at once; the answer is generated beside the others being
        answered (`pipeline.tutor.batching.BatchEngine`).

        Args:
            kind: `read_aloud` (`audio` + `text`: the sentence), `free_speech` (`audio` + `text`: the
                prompt) or `dialogue` (`turns`, as `dialogue_reply`).
            max_new_tokens, use_adapter, stop: as `feedback`.
            notify: optional callback for every event of the answer, from the engine's thread
                (`pipeline.tutor.batching.Answer`).

        Returns:
            `PendingFeedback`: iterate it for the text's pieces, `feedback()` for the whole `Feedback`.

        Raises:
            AudioError: a clip fails a check (decoded here, before anything is queued).
            DatasetError: a dialogue without a last learner turn (other text faults are raised by
                `feedback()` or the iteration, when the prompt is built).
            ConfigError: an unknown kind.
        """
        return self._start(*self._conversation(kind, audio=audio, text=text, turns=turns),
                           max_new_tokens=max_new_tokens, use_adapter=use_adapter, stop=stop, notify=notify)

    def _start(self, make_messages: Any, audio_s: float, clips: list, *, max_new_tokens: int, use_adapter: bool,
               stop: Any = None, notify: Callable[[tuple[str, Any]], None] | None = None) -> "PendingFeedback":
        """Submit the greedy question `make_messages(tokenizer)` (with `clips`) to the batch engine."""
        from pipeline.tutor.batching import Question

        bypass = not use_adapter and self.adapter_dir is not None
        question = Question(inputs=lambda: self._inputs(make_messages, clips), max_new_tokens=int(max_new_tokens),
                            bypass_adapter=bypass, stop=stop)
        return PendingFeedback(self, self.engine.submit(question, notify), bypass=bypass, audio_s=audio_s)

    @property
    def engine(self):
        """The `pipeline.tutor.batching.BatchEngine` that answers this tutor's greedy questions (made on first use)."""
        with self._engine_lock:
            if self._engine is None:
                from pipeline.tutor.batching import BatchEngine

                self._engine = BatchEngine(self.model, self.processor.tokenizer, lock=self._lock, device=self.device,
                                           eos_ids=self._eos_ids(), before_step=self._prepare_threads,
                                           shared_prefix=self._shared_prefix)
            return self._engine

    def _media_ids(self) -> frozenset[int]:
        """The token ids whose positions hold a clip's or an image's features (the processor's
        `audio_token_id`, `image_token_id`, `video_token_id`, as Gemma 3n's and Gemma 4's processors name them)."""
        if not hasattr(self, "_media"):
            ids = {getattr(self.processor, name, None) for name in ("audio_token_id", "image_token_id", "video_token_id")}
            audio = getattr(self.processor, "audio_token", None)
            if audio is not None:
                ids.add(self.processor.tokenizer.convert_tokens_to_ids(audio))
            self._media = frozenset(int(i) for i in ids if isinstance(i, int))
        return self._media

    def _shared_prefix(self, ids: list[int]) -> int:
        """Positions of a prompt (`ids`) before its first clip or image: the instructions every question of
        its kind shares, whose key/value cache the batch engine reads once (0 when the prompt has no clip)."""
        media = self._media_ids()
        return next((i for i, token in enumerate(ids) if token in media), 0)

    def _conversation(self, kind: str, *, audio: Any = None, text: str | None = None,
                      turns: list[dict] | None = None) -> tuple[Callable[[Any], list], float, list]:
        """`(make_messages(tokenizer), audio seconds, clips)` for a question of `kind`: the clips decoded and
        checked (`load_audio`), the conversation built as training built it when the tokenizer is at hand."""
        from pipeline.conversation.messages import (LEARNER, build_dialogue_messages, build_free_speech_messages,
                                                    build_messages)
        from pipeline.data.audio import load_audio
        from pipeline.errors import DatasetError, PipelineError

        if kind in ("read_aloud", "free_speech"):
            clip = load_audio(audio)
            build = build_messages if kind == "read_aloud" else build_free_speech_messages
            return (lambda tokenizer: build(text, None, clip.samples, tokenizer=tokenizer)), clip.duration_s, [clip.samples]
        if kind != "dialogue":
            raise ConfigError(f"The kind of question must be read_aloud, free_speech or dialogue, not `{kind}`.")
        if not turns or str(turns[-1].get("role", "")).lower() != LEARNER:
            raise DatasetError("The dialogue must end with a learner turn (a recording or text) for the tutor to answer.")
        audios, shaped = [], []
        for number, turn in enumerate(turns, start=1):
            turn = dict(turn)
            clip = turn.pop("audio", None)
            if clip is not None:
                try:
                    audios.append(load_audio(clip).samples)
                except PipelineError as error:
                    raise type(error)(f"Turn {number} of the dialogue: {error}") from None
                turn["clip"] = len(audios) - 1
            shaped.append(turn)
        seconds = sum(a.size for a in audios) / 16000
        return (lambda tokenizer: build_dialogue_messages(shaped, audios, tokenizer=tokenizer)), seconds, audios

    def _inputs(self, make_messages: Any, clips: list) -> dict:
        """The processor's inputs for the conversation `make_messages(tokenizer)` (ending with a user turn,
        whose clips are `clips` in order) with the generation prompt: `input_ids` (1, L) and the audio
        features. Several clips (a dialogue) are aligned as the training collator aligns them
        (`pipeline.model.audio_alignment.align_audio_masks`), so each clip is heard as in training.
        Called under the tutor's lock (the tokenizer is not shared between threads)."""
        from pipeline.model.audio_alignment import align_audio_masks

        inputs = self.processor.apply_chat_template(
            make_messages(self.processor.tokenizer), add_generation_prompt=True, tokenize=True, return_dict=True,
            return_tensors="pt")
        if "input_features_mask" in inputs:
            align_audio_masks(inputs, clips, self.processor.feature_extractor)
        return dict(inputs)

    def _eos_ids(self) -> list[int]:
        """The token ids an answer ends at: the family's end of turn (Gemma 3n's `<end_of_turn>`, Gemma 4's
        `<turn|>`) and the tokenizer's end of sequence."""
        from pipeline.model.tokens import family_of_tokenizer

        tokenizer = self.processor.tokenizer
        turn_end = tokenizer.convert_tokens_to_ids(family_of_tokenizer(tokenizer).turn_end)
        return [e for e in (turn_end, tokenizer.eos_token_id) if e is not None]

    def _prepare_threads(self) -> None:
        if self.device == "cpu":
            apply_threads(inference_threads(training_active=self._training_active()))

    def _generate(self, make_messages: Any, audio_s: float, clips: list, *, max_new_tokens: int, do_sample: bool,
                  use_adapter: bool, stop: Any = None, on_text: Callable[[str], None] | None = None) -> Feedback:
        """Generate the answer that follows `make_messages(tokenizer)`: greedy answers through the batch
        engine (`ask`), a sampled one alone through `generate` (`_sample`); only the new text is returned."""
        if not do_sample:
            return self._start(make_messages, audio_s, clips, max_new_tokens=max_new_tokens, use_adapter=use_adapter,
                               stop=stop).feedback(on_text)
        feedback = self._sample(make_messages, audio_s, clips, max_new_tokens=max_new_tokens, use_adapter=use_adapter,
                                stop=stop)
        if on_text is not None:
            on_text(feedback.text)
        return feedback

    def _sample(self, make_messages: Any, audio_s: float, clips: list, *, max_new_tokens: int, use_adapter: bool,
                stop: Any = None) -> Feedback:
        """A sampled answer, alone, through transformers' `generate` (stopping at `<end_of_turn>` or when
        `stop()` says so), holding the tutor's lock from tokenizing to decoding."""
        import torch

        bypass = not use_adapter and self.adapter_dir is not None
        extra = {}
        if stop is not None:
            from transformers import StoppingCriteria, StoppingCriteriaList

            class _Stop(StoppingCriteria):
                def __call__(self, input_ids, scores, **kwargs):
                    return torch.full((input_ids.shape[0],), bool(stop()), dtype=torch.bool, device=input_ids.device)

            extra["stopping_criteria"] = StoppingCriteriaList([_Stop()])
        started = time.perf_counter()
        with self._lock:
            inputs = {k: v.to(self.device) if hasattr(v, "to") else v for k, v in self._inputs(make_messages, clips).items()}
            prompt_len = inputs["input_ids"].shape[1]
            self._prepare_threads()
            self.model.eval()
            with torch.inference_mode(), (self.model.disable_adapter() if bypass else contextlib.nullcontext()):
                output = self.model.generate(**inputs, max_new_tokens=max_new_tokens, do_sample=True,
                                             eos_token_id=self._eos_ids(),
                                             pad_token_id=self.processor.tokenizer.pad_token_id, **extra)
            new_tokens = output[0, prompt_len:]
            text = answer_text(self.processor.tokenizer, new_tokens.tolist())
        from pipeline.tutor.batching import Generated

        generated = Generated(text=text, new_tokens=int(new_tokens.numel()), prompt_tokens=int(prompt_len),
                              finish_reason="length" if new_tokens.numel() >= max_new_tokens else "stop",
                              seconds=round(time.perf_counter() - started, 3), first_token_s=None)
        return self._as_feedback(generated, bypass=bypass, audio_s=audio_s)

    def _as_feedback(self, generated: Any, *, bypass: bool, audio_s: float) -> Feedback:
        """A `Feedback` for `generated` (`pipeline.tutor.batching.Generated`) from this tutor."""
        from pipeline.model.tiny_model import stand_in_note

        note = stand_in_note("this text is") if self.tiny_random_model else None
        return Feedback(
            text=generated.text, model=self.model_id, run=None if bypass else self.run,
            adapter_dir=None if bypass else self.adapter_dir, tiny_random_model=self.tiny_random_model,
            device=self.device, quantization=self.quantization, new_tokens=generated.new_tokens,
            seconds=generated.seconds, audio_duration_s=round(audio_s, 3), note=note,
            prompt_tokens=generated.prompt_tokens, finish_reason=generated.finish_reason,
            first_token_s=generated.first_token_s,
        )

    def _training_active(self) -> bool:
        """True while a run trains in this tutor's workspace (it holds the workspace's training lock)."""
        if self.workspace is None:
            return False
        from pipeline.host.workspace_lock import lock_holder

        return lock_holder(self.workspace) is not None


class PendingFeedback:
    """A greedy answer being generated (`Tutor.ask`): iterate it for the text's pieces as they come,
    `feedback()` for the whole `Feedback`, `cancel()` to stop it (its caller left)."""

    def __init__(self, tutor: Tutor, answer: Any, *, bypass: bool, audio_s: float):
        self.tutor = tutor
        self.answer = answer
        """The engine's `pipeline.tutor.batching.Answer`."""
        self.bypass = bypass
        self.audio_s = audio_s

    def __iter__(self):
        return iter(self.answer)

    def cancel(self) -> None:
        self.answer.cancel()

    def feedback(self, on_text: Callable[[str], None] | None = None) -> Feedback:
        """Wait for the whole answer (calling `on_text(text so far)` as it grows); returns its `Feedback`.

        Raises what the question raised (e.g. `DatasetError` for a text that spells a control token), or
        what `on_text` raised: the answer is then cancelled (its caller has gone)."""
        if on_text is not None:
            text = ""
            try:
                for piece in self.answer:
                    text += piece
                    on_text(text)
            except BaseException:
                self.cancel()
                raise
        return self.as_feedback(self.answer.result())

    def as_feedback(self, generated: Any) -> Feedback:
        """The `Feedback` of this answer once `generated` (`pipeline.tutor.batching.Generated`)."""
        return self.tutor._as_feedback(generated, bypass=self.bypass, audio_s=self.audio_s)


_CACHE: dict[tuple, Tutor] = {}
_CACHE_LOCK = threading.Lock()
"""Held while a tutor is looked up or loaded, so concurrent first clicks load one model, not several."""


ACCELERATORS = ("cuda", "mps")
"""Devices whose memory a tutor kept in this process takes from a training run or a memory probe
started beside it (CPU memory is the machine's RAM, which the estimate and the OS share out)."""


def holds_device_for(work_device: str | None, tutor_device: str) -> bool:
    """True when a tutor loaded on `tutor_device` sits on the accelerator that work asking for
    `work_device` (a run's or a probe's `--device`: auto|cuda|mps|cpu) will use.

    `auto` picks CUDA, else MPS (`pipeline.model.loading.resolve_device`): a tutor that is on one of
    them is on the one `auto` picks, since this process found it available. CPU work never needs a
    tutor's GPU memory, and a tutor on the CPU holds none.
    """
    if tutor_device not in ACCELERATORS:
        return False
    return (work_device or "auto") in ("auto", tutor_device)


def release_for(work_device: str | None, *, what: str = "the training run") -> str | None:
    """Let go of the tutors this process keeps loaded (Try, Judge) when `work_device` is the GPU they sit on.

    One GPU is shared by the app and the trainer (or the memory probe), each a process of its own: a
    tutor kept for Try and Judge (E2B 4-bit ~7.4 GiB) would stay beside the run, which could then fail
    its preflight after the Memory tab said it fits. So before such work starts, every cached tutor on
    that accelerator is dropped, the garbage collector runs, and the CUDA caching allocator's (or MPS's)
    unused blocks are handed back (`torch.cuda.empty_cache`, `torch.mps.empty_cache`). An answer being
    generated at that moment keeps its model until it ends. The next Try or Judge click loads the
    tutor again.

    Args:
        work_device: the device the run or probe asks for (auto|cuda|mps|cpu).
        what: the work, named in the returned message.

    Returns:
        A sentence saying what was unloaded and why, or None when no tutor held that device.
    """
    with _CACHE_LOCK:
        held = [(key, tutor) for key, tutor in _CACHE.items() if holds_device_for(work_device, tutor.device)]
        for key, _ in held:
            del _CACHE[key]
    if not held:
        return None
    import gc

    devices = sorted({tutor.device for _, tutor in held})
    names = ", ".join(f"`{tutor.model_id}`" + (f" with run `{tutor.run}`" if tutor.run else "") for _, tutor in held)
    del held
    gc.collect()
    import torch

    for device in devices:
        try:
            if device == "cuda" and torch.cuda.is_available():
                torch.cuda.empty_cache()
            elif device == "mps":
                torch.mps.empty_cache()
        except (RuntimeError, AttributeError):  # pragma: no cover - a backend this build lacks
            pass
    return (f"The tutor kept for Try and Judge ({names} on {', '.join(devices)}) was unloaded to leave the GPU to "
            f"{what}; it loads again at the next answer.")


def usable_runs(workspace: Workspace) -> list[str]:
    """Names of the runs in `WS/runs/` that have a saved adapter (`adapter/adapter_config.json`), sorted."""
    if not workspace.runs_dir.is_dir():
        return []
    return sorted(
        p.name for p in workspace.runs_dir.iterdir()
        if p.is_dir() and not p.name.startswith(".") and (p / "adapter" / "adapter_config.json").is_file()
    )


def _runs_hint(workspace: Workspace) -> str:
    """One sentence naming the runs `--run` can take, or how to train one when there are none."""
    runs = usable_runs(workspace)
    if runs:
        shown = ", ".join(runs[:20]) + (f" (and {len(runs) - 20} more)" if len(runs) > 20 else "")
        return f"Runs with a trained adapter: {shown}."
    return (
        "This workspace has no trained run yet; train one with "
        f"`python -m pipeline train --workspace {shlex.quote(str(workspace.root))} --run run-1` (on the command line: "
        "without `--run`, `--model google/gemma-3n-E2B-it` gives the base model's feedback)."
    )


def _run_settings(workspace: Workspace, run: str) -> tuple[dict, Path]:
    run_dir = workspace.run_dir(run)
    adapter = run_dir / "adapter"
    if not (adapter / "adapter_config.json").is_file():
        if not run_dir.is_dir():
            raise ConfigError(f"Run `{run}` does not exist in {workspace.runs_dir}. {_runs_hint(workspace)}")
        raise ModelLoadError(
            f"Run `{run}` has no adapter yet ({adapter}); wait for it to finish, or stop it (a stopped run saves its adapter)."
        )
    config_path = run_dir / "config.json"
    settings = json.loads(config_path.read_text(encoding="utf-8")) if config_path.exists() else {}
    return settings, adapter


def load_tutor(
    model: str | None = None,
    *,
    run: str | None = None,
    workspace: Workspace | str | os.PathLike | None = None,
    device: str | None = None,
    quantization: str | None = None,
    use_cache: bool = True,
) -> Tutor:
    """Load (or reuse) a tutor: base `model`, or the adapter of `run` on its training base.

    Args:
        model: hub id or local folder; with `run` defaults to the run's model. Another path or id
            is accepted when it holds the same base (config and weights, checked when the adapter
            loads): a moved model folder, or the hub id of a local copy.
        run: run name in `workspace` whose `adapter/` to apply.
        workspace: needed with `run`.
        device: auto|cuda|mps|cpu; defaults to the run's, else auto.
        quantization: 4bit|8bit|none; defaults to the run's, else the device default.

    Raises:
        ConfigError: unknown run.
        BaseModelMismatchError: `model` (or the run's model folder) holds another base than the run
            was trained on (other config values or weights; see `pipeline.model.base_identity`).
        ModelLoadError: model or adapter cannot be loaded; the run's model folder is no longer there
            and no `model` was given (`run_base_model`).
    """
    from pipeline.model.base_identity import run_base_model
    from pipeline.config import default_quantization
    from pipeline.model.loading import load_adapter, load_model, load_processor, resolve_device, use_answer_attention

    adapter_dir = None
    settings: dict = {}
    ws = None if workspace is None else workspace if isinstance(workspace, Workspace) else Workspace(Path(workspace))
    if run:
        if workspace is None:
            raise ConfigError("`--run` needs `--workspace` (the folder holding runs/).")
        ws = workspace if isinstance(workspace, Workspace) else Workspace(Path(workspace))
        settings, adapter = _run_settings(ws, run)
        adapter_dir = str(adapter)
        # The base is recognised by its identity, not its path: `load_adapter` compares them below.
        model = run_base_model(ws.run_dir(run), run, model)
    if not model:
        raise ConfigError("No model given; pass --model (e.g. google/gemma-3n-E2B-it) or --run.")
    device = resolve_device(device or settings.get("device") or "auto")
    quantization = quantization or settings.get("quantization") or default_quantization(device)
    key = (str(model), adapter_dir, device, quantization)
    with _CACHE_LOCK if use_cache else contextlib.nullcontext():
        if use_cache and key in _CACHE:
            if ws is not None:
                _CACHE[key].workspace = ws  # where a run may train beside it (CPU threads)
            return _CACHE[key]
        processor = load_processor(str(model))
        base, _ = load_model(str(model), device=device, quantization=quantization)
        net = load_adapter(base, adapter_dir, model_id=str(model)) if adapter_dir else base
        use_answer_attention(net)  # answering only: the fused attention (training keeps eager)
        tutor = Tutor(net, processor, model_id=str(model), run=run, adapter_dir=adapter_dir, device=device,
                      quantization=quantization, workspace=ws)
        if use_cache:
            _CACHE.clear()  # one model in memory at a time
            _CACHE[key] = tutor
    return tutor


def compare_feedback(
    audio: Any,
    target_text: str,
    *,
    run: str,
    workspace: Workspace | str | os.PathLike,
    device: str | None = None,
    quantization: str | None = None,
    max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS,
    do_sample: bool = False,
    kind: str = "read_aloud",
    on_text: Callable[[str, str], None] | None = None,
) -> dict[str, Any]:
    """The tuned and the base tutor's answers for one clip, from one loaded model.

    Loads (or reuses, see `load_tutor`) the run's base model with its adapter once; the tuned answer
    uses the adapter, the base answer is generated on the same model inside peft's
    `disable_adapter()` context (every LoRA layer skipped, so it is the base model's answer on the
    run's device and quantization). The clip is decoded and checked once.

    Args:
        audio: anything `pipeline.data.audio.load_audio` accepts (path, bytes, `(rate, ndarray)`, `Audio`).
        target_text: the sentence the learner was asked to read (`kind="free_speech"`: the prompt
            the learner answered).
        run: run name in `workspace` whose `adapter/` to apply.
        workspace: the workspace folder holding `runs/`.
        device, quantization: override the run's own settings.
        max_new_tokens: longest answer in tokens, per answer.
        do_sample: sample instead of greedy decoding.
        kind: `read_aloud` (`Tutor.feedback`) or `free_speech` (`Tutor.free_speech_feedback`).
        on_text: optional `(tuned text so far, base text so far) -> None`, called from this thread each
            time either answer grows. Greedy answers are generated together (the batch engine, tuned and
            base rows in turn); sampled ones one after the other, each given whole.

    Returns:
        `{"tuned": Feedback dict, "base": Feedback dict, "model", "run", "device", "quantization",
        "tiny_random_model", "note" (str or None; says when the model is the tiny random stand-in),
        "seconds" (both answers, excluding the model load)}`.

    Raises:
        ConfigError: no run given, or unknown run. ModelLoadError: model or adapter cannot be loaded.
        AudioError: the clip fails a check. DatasetError: the target text is empty.
    """
    from pipeline.data.audio import load_audio

    if not run:
        raise ConfigError("Comparing tuned and base feedback needs a trained run; pick one (the Train tab or `--run`).")
    clip = load_audio(audio)  # before the model load: a bad clip is refused in a second, not minutes
    tutor = load_tutor(None, run=run, workspace=workspace, device=device, quantization=quantization)
    started = time.perf_counter()
    if kind not in ("read_aloud", "free_speech"):
        raise ConfigError(f"Comparing answers works for read_aloud or free_speech clips, not `{kind}`; "
                          "a dialogue is tried turn by turn (`Tutor.dialogue_reply`).")
    if do_sample:
        answer = tutor.feedback if kind == "read_aloud" else tutor.free_speech_feedback
        tuned = answer(clip, target_text, max_new_tokens=max_new_tokens, do_sample=True)
        base = answer(clip, target_text, max_new_tokens=max_new_tokens, do_sample=True, use_adapter=False)
    else:
        tuned, base = _tuned_and_base(tutor, kind, clip, target_text, max_new_tokens, on_text)
    return {
        "tuned": tuned.to_dict(),
        "base": base.to_dict(),
        "model": tutor.model_id,
        "run": run,
        "device": tutor.device,
        "quantization": tutor.quantization,
        "tiny_random_model": tutor.tiny_random_model,
        "note": tuned.note,
        "seconds": round(time.perf_counter() - started, 3),
    }


def _tuned_and_base(tutor: Tutor, kind: str, clip: Any, text: str, max_new_tokens: int,
                    on_text: Callable[[str, str], None] | None) -> tuple[Feedback, Feedback]:
    """The tuned and the base greedy answers to one question, generated together; `on_text(tuned, base)`
    hears each as it grows. Raises what either question raised (the other is then cancelled)."""
    import queue

    events: queue.Queue = queue.Queue()
    pending = {name: tutor.ask(kind, audio=clip, text=text, max_new_tokens=max_new_tokens, use_adapter=name == "tuned",
                               notify=lambda event, name=name: events.put((name, event)))
               for name in ("tuned", "base")}
    texts = {"tuned": "", "base": ""}
    open_answers = set(pending)
    try:
        while open_answers:
            name, (kind_, value) = events.get()
            if kind_ == "text":
                texts[name] += value
                if on_text is not None:
                    on_text(texts["tuned"], texts["base"])
            else:
                open_answers.discard(name)
                if kind_ == "error":
                    raise value
    finally:
        for answer in pending.values():
            answer.cancel()
    return pending["tuned"].feedback(), pending["base"].feedback()
