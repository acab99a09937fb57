"""What every tab shares: the settings widgets' order, `ui_errors`, widget values -> `TrainConfig`, progress.

`ui_errors` is the one place a `PipelineError` becomes a `gr.Error` (or a "✗ message" in one output).
Nothing here imports torch, transformers or datasets; pipeline modules that do work are imported
inside the functions that call them.
"""

from __future__ import annotations

import functools
import json
from dataclasses import fields
from pathlib import Path
from typing import Any, Callable

import gradio as gr

from pipeline.config import TrainConfig
from pipeline.errors import PipelineError
from pipeline.workspace import Workspace

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULTS = TrainConfig()
POLL_SECONDS = 2.0

# The training settings shown as widgets, in the order the handlers receive them. Memory-relevant
# ones live on the Memory tab, the rest on the Train tab; both build one `TrainConfig`.
CONFIG_FIELDS = (
    "model",
    "device",
    "quantization",
    "lora_rank",
    "lora_targets",
    "batch_size",
    "grad_accum",
    "max_length",
    "gradient_checkpointing",
    "vision_tower",
    "ple_on_cpu",
    "optimizer",
    "lora_alpha",
    "lora_dropout",
    "learning_rate",
    "lr_schedule",
    "epochs",
    "max_steps",
    "eval_steps",
    "save_steps",
)
_FIELD_TYPES = {f.name: type(getattr(DEFAULTS, f.name)) for f in fields(TrainConfig)}

_ERROR_TITLES = {
    "AudioError": "Problem with the recording",
    "SampleError": "Sample library",
    "ImportFormatError": "Cannot import that folder",
    "DatasetError": "Dataset",
    "ModelLoadError": "Cannot load the model",
    "ConfigError": "Check the settings",
    "TrainingError": "Training",
    "ExportError": "Export / import",
}


def _error_title(error: PipelineError) -> str:
    return _ERROR_TITLES.get(type(error).__name__, "Cannot do that")


def ui_errors(fn: Callable | None = None, *, message_at: int | None = None, outputs: int = 1) -> Callable:
    """The one place where a `PipelineError` reaches the browser.

    Plain `@ui_errors`: the error becomes a `gr.Error` (a red message). `@ui_errors(message_at=i,
    outputs=n)`: the handler's n outputs are left untouched (`gr.skip()`) except output i, which shows
    "✗ message" (used on the Samples tab, where a raised `gr.Error` would mark the sample library and the
    audio input as errored until reload). The message is the library's own (it names the value, what
    was expected and the fix); the title names the area. Any other exception is a bug: Gradio shows a
    generic error and logs the traceback.
    """

    def decorate(handler: Callable) -> Callable:
        @functools.wraps(handler)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            try:
                return handler(*args, **kwargs)
            except PipelineError as error:
                if message_at is None:
                    raise gr.Error(str(error), title=_error_title(error), duration=None,
                                   print_exception=False) from error
                text = f"**✗ {_error_title(error)}:** {error}"
                if outputs == 1:
                    return text
                return tuple(text if index == message_at else gr.skip() for index in range(outputs))

        return wrapper

    return decorate(fn) if fn is not None else decorate


def config_from_values(values: dict[str, Any] | tuple | list) -> TrainConfig:
    """A validated `TrainConfig` from widget values (dict by field name, or values in `CONFIG_FIELDS` order).

    Numbers from `gr.Number` arrive as float; they are cast to the field's type. Raises `ConfigError`.
    """
    if not isinstance(values, dict):
        values = dict(zip(CONFIG_FIELDS, values))
    clean: dict[str, Any] = {}
    for name, value in values.items():
        if value is None or value == "":
            continue
        kind = _FIELD_TYPES[name]
        if kind is int and isinstance(value, float) and value.is_integer():
            value = int(value)
        elif kind is float and isinstance(value, int):
            value = float(value)
        elif kind is str:
            value = str(value).strip()
        clean[name] = value
    return TrainConfig(**clean)


def progress_callback(progress: gr.Progress | None, unit: str = "clips") -> Callable[..., None] | None:
    """Adapt a `gr.Progress` to the library's `progress(done, total[, message])` callbacks."""
    if progress is None:
        return None

    def callback(done: int, total: int, message: str | None = None) -> None:
        progress((int(done), int(total) if total else None), desc=message, unit=unit)

    return callback


def list_runs(ws: Workspace) -> list[dict]:
    """The workspace's runs with their status, newest first (`pipeline.training.runs.list_runs`)."""
    from pipeline.training.runs import list_runs as runs_of

    return list(runs_of(ws))


def run_settings(ws: Workspace, run_name: str) -> dict:
    """A run's `config.json` as a dict ({} when the run has none yet)."""
    path = ws.run_dir(run_name) / "config.json"
    try:
        return json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
    except ValueError:
        return {}
