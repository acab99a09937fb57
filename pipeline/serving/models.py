"""The tutors a server answers with: each loaded model has one worker thread and a bounded queue.

`load_served` loads each `--run` with `pipeline.tutor.infer.load_tutor` (its adapter on the base it
was trained on, the run's device and quantization) and names it by the run; `base` is the base model
answering without an adapter. When a served run was trained on that base, `base` answers from the
run's loaded model inside peft's `disable_adapter()` (as the app's Try tab compares them: every LoRA
layer skipped, so it is the base model's answer) and shares its worker; otherwise the base is loaded
on its own. Each run holds its own copy of the base weights (two runs of E2B in 4-bit: two ~7 GiB
models), so serve only the runs you need.

One worker thread per loaded model answers its queue in arrival order (a model generates one answer
at a time anyway: `Tutor` holds its lock from tokenizing to decoding). The queue is bounded: when
`queue_size` answers already wait, `ModelWorker.submit` refuses at once with a 429 `ApiError` instead
of letting waits grow without limit. Nothing here blocks the web server's event loop: it awaits the
worker's future (`pipeline.serving.app`), so `GET /v1/models` answers while a model generates.

CPU threads (`pipeline.host.cpu_threads`): one loaded model follows the inference rule per answer
(`cores - 1`, or 1 while a run trains in the workspace). Several loaded models may generate at the
same time, each in its own thread with its own OpenMP team, so `share_threads` gives each
`(cores - 1) // models` threads (at least 1) through `TUTOR_INFER_THREADS`, unless it is already set.
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import os
import queue
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
"""Answers that may wait per loaded model beyond the one generating; more get 429."""


class ModelWorker:
    """One loaded `Tutor` and the thread that answers its queue, one job at a time.

    A job is a callable `job(tutor) -> result`; `submit` returns a `concurrent.futures.Future` of its
    result (or of the exception it raised).
    """

    def __init__(self, tutor: Any, *, queue_size: int = DEFAULT_QUEUE_SIZE, label: str = "tutor"):
        if not isinstance(queue_size, int) or queue_size < 1:
            raise ConfigError(f"`--queue-size` must be a whole number >= 1, got {queue_size!r}.")
        self.tutor = tutor
        self.label = label
        self.queue_size = queue_size
        self._queue: queue.Queue = queue.Queue(maxsize=queue_size)
        self._busy = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=f"serve-{label}", daemon=True)
        self._thread.start()

    @property
    def waiting(self) -> int:
        """Jobs queued and not yet started."""
        return self._queue.qsize()

    @property
    def busy(self) -> bool:
        """True while a job runs."""
        return self._busy.is_set()

    def submit(self, job: Callable[[Any], Any]) -> concurrent.futures.Future:
        """Queue `job` for this model.

        Raises:
            ApiError: 429 `queue_full` when `queue_size` jobs already wait (the message says how many
                and to retry), 503 when the worker has stopped.
        """
        if not self._thread.is_alive():
            raise ApiError(f"The model `{self.label}` is shutting down; try again when the server is back.",
                           status=503, type="server_error", code="shutting_down")
        future: concurrent.futures.Future = concurrent.futures.Future()
        try:
            self._queue.put_nowait((job, future))
        except queue.Full:
            raise ApiError(f"The model `{self.label}` is busy: {self.queue_size} answers already wait for it. "
                           "Retry in a few seconds (or start the server with a larger `--queue-size`).",
                           status=429, type="rate_limit_error", code="queue_full") from None
        return future

    def _loop(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            job, future = item
            if not future.set_running_or_notify_cancel():
                continue  # the caller gave up before it started
            self._busy.set()
            try:
                result = job(self.tutor)
            except BaseException as error:  # noqa: BLE001 - handed to the caller, who turns it into a reply
                future.set_exception(error)
            else:
                future.set_result(result)
            finally:
                self._busy.clear()

    def close(self, timeout_s: float = 30.0) -> None:
        """Refuse queued jobs not yet started, let the running one finish, stop the thread (waits up to `timeout_s`)."""
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                break
            if item is not None:
                item[1].cancel()
        self._queue.put(None)
        self._thread.join(timeout_s)


@dataclass
class ServedModel:
    """A name this server answers as: `worker` (its loaded model), whether the run's adapter is used
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

    def card(self) -> dict[str, Any]:
        """This model as `GET /v1/models` lists it (OpenAI's model object plus `run` and `base_model`)."""
        return {"id": self.name, "object": "model", "created": self.created, "owned_by": "pronunciation-tutor",
                "run": self.run, "base_model": public_model_name(self.base_model), "adapter_sha256": self.adapter_sha256}


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
                quantization: str | None = None, queue_size: int = DEFAULT_QUEUE_SIZE) -> dict[str, ServedModel]:
    """Load every run (and the base) to serve, each loaded model with its worker.

    Args:
        workspace: the workspace holding `runs/`.
        runs: run names (each must have a trained adapter); may be empty when `model` is given.
        model: the base model served as `base`; default the first run's base. Every run must have
            been trained on it (`load_tutor` refuses otherwise).
        device, quantization: override the runs' own settings (`load_tutor`).
        queue_size: answers that may wait per loaded model.

    Returns:
        `{name: ServedModel}`: the runs in the order given, then `base`.

    Raises:
        ConfigError: no run and no model, a run given twice or named `base`, an unknown run, a run
            trained on another base than `model`. ModelLoadError: a model or adapter cannot be loaded.
    """
    import time

    from pipeline.tutor.infer import load_tutor

    if not runs and not model:
        raise ConfigError("Nothing to serve: give `--run NAME` (a trained run; repeat it for several) "
                          "and/or `--model BASE` (the base model alone).")
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
            name=run, worker=ModelWorker(tutor, queue_size=queue_size, label=run), use_adapter=True, run=run,
            base_model=tutor.model_id, adapter_sha256=adapter_sha256(tutor.adapter_dir),
            created=int(adapter_file.stat().st_mtime) if adapter_file.exists() else int(time.time()),
        )
    base_id = str(model) if model else next(iter(served.values())).base_model
    sharing = next((s for s in served.values() if s.base_model == base_id), None)
    if sharing is not None:
        worker = sharing.worker
    else:
        worker = ModelWorker(load_tutor(base_id, device=device, quantization=quantization, use_cache=False),
                             queue_size=queue_size, label=BASE_NAME)
    served[BASE_NAME] = ServedModel(name=BASE_NAME, worker=worker, use_adapter=False, run=None, base_model=base_id,
                                    adapter_sha256=None, created=int(time.time()))
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


def answer(tutor: Any, request: TutorRequest, *, use_adapter: bool) -> tuple[Any, int]:
    """Ask `tutor` the question of `request` as it was trained (`Tutor.feedback`,
    `free_speech_feedback` or `dialogue_reply`), greedy decoding.

    Returns:
        `(Feedback, prompt_tokens)`: the answer and the prompt's length in tokens as the model read it
        (`pipeline.model.tokens.TokenCounter`, each clip ~192 positions).

    Raises:
        DatasetError: a text spells a control token (`pipeline.conversation.messages.check_user_text`).
        AudioError: a clip fails a check.
    """
    from pipeline.conversation.messages import conversation_messages
    from pipeline.model.tokens import TokenCounter

    options = dict(max_new_tokens=request.max_new_tokens, use_adapter=use_adapter)
    if request.kind == "read_aloud":
        feedback = tutor.feedback(request.clips[0], request.text, **options)
    elif request.kind == "free_speech":
        feedback = tutor.free_speech_feedback(request.clips[0], request.text, **options)
    else:
        feedback = tutor.dialogue_reply(request.dialogue_turns(), **options)
    messages = conversation_messages(request.kind, target_text=request.text, prompt=request.text,
                                     turns=request.turns, tokenizer=tutor.processor.tokenizer)
    prompt_tokens = TokenCounter(tutor.processor).count([messages], add_generation_prompt=True)[0]
    return feedback, prompt_tokens
