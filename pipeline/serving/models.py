"""The tutors a server answers with: each loaded model has one worker thread and a bounded queue.

`load_served` loads each `--run` with `pipeline.tutor.infer.load_tutor` (its adapter on the base it
was trained on, the run's device and quantization) and names it by the run; `base` is the base model
answering without an adapter. When a served run was trained on that base, `base` answers from the
run's loaded model inside peft's `disable_adapter()` (as the app's Try tab compares them: every LoRA
layer skipped, so it is the base model's answer) and shares its worker; otherwise the base is loaded
on its own. Each run holds its own copy of the base weights (two runs of E2B in 4-bit: two ~7 GiB
models), so serve only the runs you need.

Each loaded model answers through its tutor's batch engine (`pipeline.tutor.batching`): up to
`max_batch` answers are generated together, each new question read alone and then joining the
others, so concurrent requests share the forwards instead of waiting for each other; `max_batch` 1
answers one at a time. Admission is bounded: a `ModelWorker` admits at most `max_batch + queue_size`
requests at a time and refuses the next at once with a 429 `ApiError` (`admit`), before anything of
it is decoded, instead of letting waits (and decoding) grow without limit. Nothing here blocks the
web server's event loop: it awaits the answer's events (`pipeline.serving.app`), so `GET /v1/models`
answers while a model generates.

CPU threads (`pipeline.host.cpu_threads`): one loaded model follows the inference rule per round of
its engine (`cores - 1`, or 1 while a run trains in the workspace). Several loaded models may
generate at the same time, each engine in its own thread with its own OpenMP team, so `share_threads`
gives each `(cores - 1) // models` threads (at least 1) through `TUTOR_INFER_THREADS`, unless it is
already set.
"""

from __future__ import annotations

import hashlib
import os
import re
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from pipeline.errors import ConfigError
from pipeline.serving.protocol import ApiError, TutorRequest

BASE_NAME = "base"
"""The served name of the base model (no adapter)."""
DEFAULT_QUEUE_SIZE = 8
"""Requests that may wait per loaded model beyond the `max_batch` being answered; more get 429."""


class Ticket:
    """A place taken in a `ModelWorker` by one request, from admission to the end of its answer;
    `release()` gives it back (once, however often it is called)."""

    def __init__(self, worker: "ModelWorker"):
        self._worker = worker
        self._released = False

    def release(self) -> None:
        with self._worker._lock:
            if not self._released:
                self._released = True
                self._worker._in_flight -= 1


class ModelWorker:
    """One loaded `Tutor`, its batch engine (`pipeline.tutor.batching.BatchEngine`, `max_batch` answers
    generated together) and its admission: at most `max_batch + queue_size` requests at a time, from
    the moment they are admitted (before their audio is decoded) to the end of their answer.

    Raises:
        ConfigError: `queue_size` or `max_batch` below 1.
    """

    def __init__(self, tutor: Any, *, queue_size: int = DEFAULT_QUEUE_SIZE, max_batch: int | None = None,
                 label: str = "tutor"):
        from pipeline.tutor.batching import default_max_batch

        self._admit(tutor, label, queue_size)
        tutor.engine.set_max_batch(default_max_batch() if max_batch is None else max_batch)

    def _admit(self, tutor: Any, label: str, queue_size: int) -> None:
        """The admission state every worker starts with: no request in flight, none answered, open.

        Raises:
            ConfigError: `queue_size` is not a whole number >= 1."""
        if not isinstance(queue_size, int) or queue_size < 1:
            raise ConfigError(f"`--queue-size` must be a whole number >= 1, got {queue_size!r}.")
        self.tutor, self.label, self.queue_size = tutor, label, queue_size
        self._lock = threading.Lock()
        self._in_flight = 0
        self._closed = False
        self._answers: set = set()

    @property
    def max_batch(self) -> int:
        """Answers generated together."""
        return self.tutor.engine.max_batch

    @property
    def capacity(self) -> int:
        """Requests admitted at most at a time: `max_batch` generating and `queue_size` waiting."""
        return self.max_batch + self.queue_size

    @property
    def in_flight(self) -> int:
        """Requests admitted and not finished (decoding their audio, waiting or being answered)."""
        return self._in_flight

    def admit(self) -> Ticket:
        """Take a place for one request, before anything of it is decoded.

        Raises:
            ApiError: 429 `queue_full` when `capacity` requests are already admitted (the message says
                how many and to retry), 503 `shutting_down` when the server stops.
        """
        with self._lock:
            if self._closed:
                raise ApiError(f"The model `{self.label}` is shutting down; try again when the server is back.",
                               status=503, type="server_error", code="shutting_down")
            if self._in_flight >= self.capacity:
                raise ApiError(f"The model `{self.label}` is busy: {self.max_batch} answers are being generated and "
                               f"{self.queue_size} wait. Retry in a few seconds (or start the server with a larger "
                               "`--queue-size`).", status=429, type="rate_limit_error", code="queue_full")
            self._in_flight += 1
            return Ticket(self)

    def ask(self, ticket: Ticket, request: TutorRequest, *, use_adapter: bool,
            notify: Callable[[tuple[str, Any]], None] | None = None) -> Any:
        """Submit the admitted `request` (its clips decoded) to the batch engine; returns its
        `pipeline.tutor.infer.PendingFeedback`. The `ticket` is released when the answer ends (or here,
        when it cannot be asked); `notify` hears the answer's events (`pipeline.tutor.batching.Answer`)."""
        def events(event: tuple[str, Any]) -> None:
            if event[0] in ("done", "error"):
                ticket.release()
                if pending is not None:
                    with self._lock:
                        self._answers.discard(pending.answer)
            if notify is not None:
                notify(event)

        pending = None
        try:
            pending = ask(self.tutor, request, use_adapter=use_adapter, notify=events)
        except BaseException:
            ticket.release()
            raise
        with self._lock:
            if not pending.answer._done.is_set():
                self._answers.add(pending.answer)
        return pending

    def close(self, timeout_s: float = 30.0) -> None:
        """Refuse new requests (503) and end the answers being generated at their next token; waits up to
        `timeout_s` seconds for them to end."""
        import time

        with self._lock:
            self._closed = True
            answers = list(self._answers)
        for answer in answers:
            answer.cancel()
        deadline = time.monotonic() + timeout_s
        while self._in_flight and time.monotonic() < deadline:
            time.sleep(0.05)


class _ScorerPending:
    """A classical scorer's answer under way, as the server reads a `PendingFeedback`: `as_feedback` gives it."""

    def __init__(self):
        self.feedback: Any = None

    def cancel(self) -> None:
        """Nothing to stop: the scorer answers in a fraction of a second, in one piece."""

    def as_feedback(self, _generated: Any) -> Any:
        return self.feedback


class ScorerWorker(ModelWorker):
    """The Classical scorer (no fine-tuning, `pipeline.scoring`) behind a worker's interface: the same admission
    (at most 1 + `queue_size` requests at a time, 429 beyond), each request scored in a thread of its own so the
    server's event loop never waits; its answer comes as one piece of text, then the end."""

    def __init__(self, tutor: Any, *, queue_size: int = DEFAULT_QUEUE_SIZE):
        self._admit(tutor, tutor.model_id, queue_size)

    @property
    def max_batch(self) -> int:
        return 1

    def ask(self, ticket: Ticket, request: TutorRequest, *, use_adapter: bool,
            notify: Callable[[tuple[str, Any]], None] | None = None) -> Any:
        """Score the admitted `request` in a thread; `notify` hears ("text", answer), then ("done", None) or
        ("error", the error). The `ticket` is released when it ends."""
        import time

        from pipeline.tutor.infer import Feedback

        pending = _ScorerPending()
        tell = notify or (lambda event: None)

        def work() -> None:
            started = time.perf_counter()
            try:
                if request.kind == "read_aloud":
                    answer = self.tutor.feedback(request.clips[0], request.text or "")
                else:
                    answer = self.tutor.free_speech_feedback(None, request.text or "")
                pending.feedback = Feedback(
                    text=answer.text, model=self.tutor.model_id, run=None, adapter_dir=None, tiny_random_model=False,
                    device="cpu", quantization="none", new_tokens=0, seconds=round(time.perf_counter() - started, 3),
                    audio_duration_s=round(request.audio_seconds, 3), note=answer.note)
            except Exception as error:  # noqa: BLE001 - the answer's fault goes to its request, as a model's does
                ticket.release()
                tell(("error", error))
                return
            ticket.release()
            tell(("text", pending.feedback.text))
            tell(("done", None))

        threading.Thread(target=work, name="classical-scorer", daemon=True).start()
        return pending

    def close(self, timeout_s: float = 30.0) -> None:
        """Refuse new requests (503); waits up to `timeout_s` seconds for those being scored."""
        import time

        with self._lock:
            self._closed = True
        deadline = time.monotonic() + timeout_s
        while self._in_flight and time.monotonic() < deadline:
            time.sleep(0.05)


@dataclass
class ServedModel:
    """A name this server answers as: `worker` (its loaded model and admission), whether the run's adapter is used
    (`use_adapter`; False for `base` sharing a run's model), the run (None for `base`), the base
    model id, the adapter file's SHA-256 (None for `base`) and `created` (Unix time of the adapter
    file, or of loading)."""

    name: str
    worker: ModelWorker
    use_adapter: bool
    run: str | None
    base_model: str
    adapter_sha256: str | None
    created: int
    label: str | None = None
    """How the model is named to people, where its id does not say it (the Classical scorer (no fine-tuning))."""

    def card(self) -> dict[str, Any]:
        """This model as `GET /v1/models` lists it (OpenAI's model object plus `run` and `base_model`; `label`
        when it has one)."""
        card = {"id": self.name, "object": "model", "created": self.created, "owned_by": "pronunciation-tutor",
                "run": self.run, "base_model": public_model_name(self.base_model), "adapter_sha256": self.adapter_sha256}
        return card | ({"label": self.label} if self.label else {})


def public_model_name(model: str | None) -> str | None:
    """How the API names a base model to clients: a hub id as it is (`google/gemma-3n-E2B-it`), a model folder
    by its last part only (`gemma-3n-E2B-it`), so no answer discloses where the server keeps its files."""
    from pipeline.model.hub import is_local_model

    if not model:
        return model
    return re.split(r"[\\/]", str(model).rstrip("/\\"))[-1] if is_local_model(model) else str(model)


def adapter_sha256(adapter_dir: str | os.PathLike) -> str | None:
    """SHA-256 (hex) of the adapter's weight file (`adapter_model.safetensors`, else `.bin`), None if absent."""
    for name in ("adapter_model.safetensors", "adapter_model.bin"):
        path = Path(adapter_dir) / name
        if path.is_file():
            digest = hashlib.sha256()
            with open(path, "rb") as handle:
                for block in iter(lambda: handle.read(1 << 20), b""):
                    digest.update(block)
            return digest.hexdigest()
    return None


def load_served(workspace: str | os.PathLike, runs: list[str], *, model: str | None = None, device: str | None = None,
                quantization: str | None = None, queue_size: int = DEFAULT_QUEUE_SIZE,
                max_batch: int | None = None, scorer: bool = False) -> dict[str, ServedModel]:
    """Load every run (and the base) to serve, each loaded model with its worker.

    Args:
        workspace: the workspace holding `runs/`.
        runs: run names (each must have a trained adapter); may be empty when `model` is given.
        model: the base model served as `base`; default the first run's base. Every run must have
            been trained on it (`load_tutor` refuses otherwise).
        device, quantization: override the runs' own settings (`load_tutor`).
        queue_size: requests that may wait per loaded model beyond those being answered.
        max_batch: answers generated together per loaded model (None: `TUTOR_MAX_BATCH`, else 8; 1
            answers one at a time).
        scorer: also serve the Classical scorer (no fine-tuning) as `classical-scorer` (`ScorerWorker`; it
            needs no run, so it may be served alone).

    Returns:
        `{name: ServedModel}`: the runs in the order given, then `base` (when a run or model is given), then
        `classical-scorer`.

    Raises:
        ConfigError: no run and no model, a run given twice or named `base`, an unknown run, a run
            trained on another base than `model`. ModelLoadError: a model or adapter cannot be loaded.
    """
    import time

    from pipeline.tutor.infer import load_tutor

    if not runs and not model and not scorer:
        raise ConfigError("Nothing to serve: give `--run NAME` (a trained run; repeat it for several) "
                          "and/or `--model BASE` (the base model alone), or `--scorer` (the classical scorer).")
    duplicates = sorted({run for run in runs if runs.count(run) > 1})
    if duplicates:
        raise ConfigError(f"`--run {duplicates[0]}` is given twice; name each run once.")
    if BASE_NAME in runs:
        raise ConfigError(f"A run named `{BASE_NAME}` cannot be served: `{BASE_NAME}` is the name of the base model "
                          "here. Copy the run under another name (`python -m pipeline import-run --name ...`).")
    served: dict[str, ServedModel] = {}
    for run in runs:
        tutor = load_tutor(model, run=run, workspace=workspace, device=device, quantization=quantization,
                           use_cache=False)
        adapter_file = Path(tutor.adapter_dir) / "adapter_model.safetensors"
        served[run] = ServedModel(
            name=run, worker=ModelWorker(tutor, queue_size=queue_size, max_batch=max_batch, label=run), use_adapter=True, run=run,
            base_model=tutor.model_id, adapter_sha256=adapter_sha256(tutor.adapter_dir),
            created=int(adapter_file.stat().st_mtime) if adapter_file.exists() else int(time.time()),
        )
    if runs or model:
        base_id = str(model) if model else next(iter(served.values())).base_model
        sharing = next((s for s in served.values() if s.base_model == base_id), None)
        if sharing is not None:
            worker = sharing.worker
        else:
            worker = ModelWorker(load_tutor(base_id, device=device, quantization=quantization, use_cache=False),
                                 queue_size=queue_size, max_batch=max_batch, label=BASE_NAME)
        served[BASE_NAME] = ServedModel(name=BASE_NAME, worker=worker, use_adapter=False, run=None, base_model=base_id,
                                        adapter_sha256=None, created=int(time.time()))
    if scorer:
        from pipeline.scoring.scorer import SCORER_MODEL_ID, SCORER_NAME, ScorerTutor, load_scorer

        served[SCORER_MODEL_ID] = ServedModel(
            name=SCORER_MODEL_ID, worker=ScorerWorker(ScorerTutor(load_scorer(workspace)), queue_size=queue_size),
            use_adapter=False, run=None, base_model=SCORER_MODEL_ID, adapter_sha256=None, created=int(time.time()),
            label=SCORER_NAME)
    return served


def loaded_workers(served: dict[str, ServedModel]) -> list[ModelWorker]:
    """The distinct workers (loaded models) behind the served names."""
    workers: list[ModelWorker] = []
    for model in served.values():
        if all(model.worker is not w for w in workers):
            workers.append(model.worker)
    return workers


def share_threads(models: int) -> int | None:
    """With several loaded models, set `TUTOR_INFER_THREADS` to `(cores - 1) // models` (at least 1)
    unless it is set already; returns the number set, or None when nothing was changed (one model,
    or an override given by the person)."""
    from pipeline.host.cpu_threads import INFER_THREADS_ENV, available_cores

    if models <= 1 or os.environ.get(INFER_THREADS_ENV, "").strip():
        return None
    threads = max(1, (available_cores() - 1) // models)
    os.environ[INFER_THREADS_ENV] = str(threads)
    return threads


def ask(tutor: Any, request: TutorRequest, *, use_adapter: bool,
        notify: Callable[[tuple[str, Any]], None] | None = None) -> Any:
    """Ask `tutor` the question of `request` (its clips decoded) as it was trained (`Tutor.ask`: read
    aloud, free speech or the dialogue's next turn), greedy decoding, beside the other answers being
    generated; returns the `pipeline.tutor.infer.PendingFeedback` at once.

    The answer's `prompt_tokens` is the prompt's length as the model read it (each Gemma 3n clip 188
    audio positions). Its errors (a text that spells one of the tokenizer's special tokens:
    `DatasetError`) come with the answer."""
    options = dict(max_new_tokens=request.max_new_tokens, use_adapter=use_adapter, notify=notify)
    if request.kind == "dialogue":
        return tutor.ask("dialogue", turns=request.dialogue_turns(), **options)
    return tutor.ask(request.kind, audio=request.clips[0], text=request.text, **options)
