#!/usr/bin/env python
"""Pronunciation Tutor Studio: the Gradio app (Samples -> Dataset -> Memory -> Train -> Try).

    python app.py [--workspace DIR] [--port N] [--host 127.0.0.1] [--share]

Serves on 127.0.0.1 only unless `--host`/`--share` say otherwise, and prints the URL. Every handler
reads its widgets, calls ONE function of `pipeline/`, and formats the result with
`ui.formatting`; a `PipelineError` becomes a `gr.Error` in one place (`ui_errors`). Widget
defaults come from `pipeline.config.TrainConfig`, like the command line's flags.

This module deliberately imports no torch / transformers / datasets at import time or while
building the page: those load inside the handlers (or in the training process), so the first
page is up in a few seconds.
"""

from __future__ import annotations

import time

_STARTED = time.perf_counter()  # launch time is measured from here (before gradio is imported)

import argparse
import functools
import os
import sys
from dataclasses import fields
from pathlib import Path
from typing import Any, Callable

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")

import gradio as gr  # noqa: E402

from ui import formatting as fmt  # noqa: E402
from pipeline.config import (  # noqa: E402
    DEVICES,
    KNOWN_MODELS,
    LORA_TARGETS,
    LR_SCHEDULES,
    OPTIMIZERS,
    QUANTIZATIONS,
    TrainConfig,
)
from pipeline.errors import AudioError, ImportFormatError, PipelineError, SampleError  # noqa: E402
from pipeline.workspace import DEFAULT_WORKSPACE, Workspace  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parent
ASSETS_DIR = REPO_ROOT / "assets"
SAMPLE_PACK_DIR = REPO_ROOT / "sample_data" / "speechocean762-pack"
TINY_MODEL_SUBDIR = Path("models") / "tiny-gemma3n"
SETTINGS_FILE = "settings.json"
DEFAULTS = TrainConfig()
IMPORT_FORMATS = ("auto", "kaldi", "audiofolder", "ljspeech", "commonvoice", "folder")
POLL_SECONDS = 2.0
_CANCELLED = "__cancelled__"
# Asks in the browser before a sample and its audio are deleted; a "no" reaches the handler as _CANCELLED.
_CONFIRM_DELETE_JS = (
    "(id) => (!id || window.confirm('Delete sample ' + id + ' and its audio? This cannot be undone.'))"
    f" ? id : '{_CANCELLED}'"
)
MAX_SUGGESTIONS = 4

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


def _progress_callback(progress: gr.Progress | None, unit: str = "clips") -> Callable[..., None] | None:
    """Adapt a `gr.Progress` to the library's `progress(done, total[, message])` callbacks."""
    if progress is None:
        return None

    def callback(done: int, total: int, message: str | None = None) -> None:
        progress((int(done), int(total) if total else None), desc=message, unit=unit)

    return callback


class TutorApp:
    """The handlers of the app, bound to one workspace folder. Each calls one `pipeline/` function.

    Handlers are plain methods (testable without a browser): they take widget values and return
    widget values; bad input raises `gr.Error` through `ui_errors`.
    """

    def __init__(self, workspace: str | os.PathLike | Workspace = DEFAULT_WORKSPACE):
        self.ws = (workspace if isinstance(workspace, Workspace) else Workspace(workspace)).ensure()
        self._estimates: dict[str, int | None] = {}

    # ------------------------------------------------------------------ model picker

    @property
    def tiny_model_dir(self) -> Path:
        """Where the offline tiny test model is written: `WS/models/tiny-gemma3n`."""
        return self.ws.root / TINY_MODEL_SUBDIR

    @property
    def settings_path(self) -> Path:
        """Where the Memory/Train settings are remembered between page loads: `WS/settings.json` (a `TrainConfig`)."""
        return self.ws.root / SETTINGS_FILE

    def model_choices(self, current: str | None = None) -> list[str]:
        """The real Gemma 3n checkpoints, every local model folder in `WS/models/` (one holding a
        `config.json`, e.g. the tiny test model), and `current`."""
        choices = list(KNOWN_MODELS)
        models_dir = self.ws.root / "models"
        if models_dir.is_dir():
            choices += [str(folder) for folder in sorted(models_dir.iterdir()) if (folder / "config.json").is_file()]
        if current and current not in choices:
            choices.append(current)
        return choices

    def saved_settings(self) -> dict[str, Any]:
        """The remembered settings (`WS/settings.json`) as a dict; {} when none are saved or the file is unusable."""
        import json

        try:
            data = json.loads(self.settings_path.read_text(encoding="utf-8"))
            return TrainConfig.from_dict(data).to_dict()
        except (OSError, ValueError, TypeError, PipelineError):
            return {}

    def remember_settings(self, config: TrainConfig) -> None:
        """Write `config` to `WS/settings.json` atomically (skipped when unchanged), so a reload and the
        next run use it."""
        from pipeline.fileio import atomic_write_json

        if self.saved_settings() != config.to_dict():
            atomic_write_json(self.settings_path, config.to_dict())

    @ui_errors
    def make_tiny_model(self, progress: gr.Progress = gr.Progress()) -> tuple[Any, str]:
        """Write the offline tiny random Gemma 3n into the workspace and select it."""
        from pipeline.training.tiny_model import make_tiny_model

        if progress is not None:
            progress(None, desc="Writing the tiny random Gemma 3n (a few seconds)…")
        path = make_tiny_model(self.tiny_model_dir)
        return gr.Dropdown(choices=self.model_choices(), value=str(path)), self.describe_model(str(path))

    def describe_model(self, model: str | None) -> str:
        """One line under the model picker: what the chosen model is and what it needs."""
        from pipeline.training.tiny_model import is_tiny_random_model

        if not model:
            return "Pick a model."
        if is_tiny_random_model(model):
            return (
                "⚠ **Offline tiny test model with random weights.** Everything runs end to end, "
                "but its feedback is meaningless text. Pick `google/gemma-3n-E2B-it` for a real tutor."
            )
        if model in KNOWN_MODELS:
            return (
                f"`{model}`: downloaded from Hugging Face on first use (needs a token with the Gemma "
                "license accepted: `hf auth login`)."
            )
        return f"Local model folder `{model}`."

    # ------------------------------------------------------------------ samples

    @ui_errors(message_at=0, outputs=1)
    def check_clip(self, audio: Any) -> str:
        """Decode and check a recording/upload; returns the check results (or what failed) as Markdown."""
        from pipeline.data.audio import load_audio

        if audio is None:
            raise AudioError("No recording yet: record a clip or upload an audio file, then check it.")
        clip = load_audio(audio, name=_clip_name(audio))
        return fmt.checks_markdown(clip.report)

    @ui_errors(message_at=0, outputs=3)
    def save_sample(self, audio: Any, target_text: str, feedback: str, speaker: str, trim: bool = False):
        """Check and save a new sample; returns (status, samples table, cleared audio).

        On a `PipelineError` only the status shows what failed; the table and the audio stay as they are.
        """
        from pipeline.data.samples import SampleLibrary

        source = "microphone" if isinstance(audio, tuple) else _clip_name(audio)
        sample = SampleLibrary(self.ws).add(
            audio, target_text or "", feedback or "", speaker=(speaker or "").strip() or None,
            source=source, trim=bool(trim),
        )
        status = f"Saved sample **{sample.id}** ({sample.duration_s:.1f} s).\n\n" + fmt.checks_markdown(
            sample.checks, title="Saved clip"
        )
        return status, self.samples_table(), None

    @ui_errors
    def samples_table(self):
        """The sample library as a table (one row per sample)."""
        from pipeline.data.samples import SampleLibrary

        return fmt.samples_frame(SampleLibrary(self.ws).list())

    @ui_errors(message_at=5, outputs=6)
    def select_sample(self, table: Any, evt: gr.SelectData):
        """Load the clicked sample into the editor: (id, audio path, target, feedback, speaker, checks)."""
        from pipeline.data.samples import SampleLibrary

        row = evt.row_value if evt is not None and evt.row_value else None
        if not row:
            return gr.skip(), gr.skip(), gr.skip(), gr.skip(), gr.skip(), gr.skip()
        library = SampleLibrary(self.ws)
        sample = library.get(str(row[0]))
        return (
            sample.id,
            str(library.audio_path(sample)),
            sample.target_text,
            sample.feedback,
            sample.speaker or "",
            fmt.checks_markdown(sample.checks, title=f"Checks of {sample.id}"),
        )

    @ui_errors(message_at=0, outputs=2)
    def update_sample(self, sample_id: str, target_text: str, feedback: str, speaker: str):
        """Save edits of the selected sample; returns (status, samples table)."""
        from pipeline.data.samples import SampleLibrary

        if not sample_id:
            raise SampleError("No sample selected: click a sample in the table first, then edit it.")
        sample = SampleLibrary(self.ws).update(
            sample_id, target_text=target_text or "", feedback=feedback or "", speaker=speaker or None
        )
        return f"Saved changes to **{sample.id}**.", self.samples_table()

    @ui_errors(message_at=0, outputs=8)
    def delete_sample(self, sample_id: str):
        """Delete the selected sample and its audio; returns (status, table, cleared editor fields)."""
        from pipeline.data.samples import SampleLibrary

        if sample_id == _CANCELLED:
            return ("Nothing deleted.",) + (gr.skip(),) * 7
        if not sample_id:
            raise SampleError("No sample selected: click a sample in the table first, then delete it.")
        removed = SampleLibrary(self.ws).delete(sample_id)
        return f"Deleted **{removed.id}**.", self.samples_table(), "", None, "", "", "", ""

    @ui_errors(message_at=0, outputs=3)
    def import_folder(self, folder: str, format_name: str, trim: bool = False,
                      progress: gr.Progress = gr.Progress()):
        """Import every clip of a folder (any supported layout); returns (summary, per-file table, samples).

        `trim=True` keeps the first 30 s of longer clips instead of refusing them. On a `PipelineError`
        only the summary shows what failed; the per-file table and the sample library stay as they are.
        """
        from pipeline.data.importers import import_folder

        if not folder or not str(folder).strip():
            raise ImportFormatError("No folder given: type the path of a folder on this computer, "
                                    "e.g. /home/me/recordings.")
        source = str(Path(str(folder).strip()).expanduser())
        report = import_folder(self.ws, source, format=format_name or "auto", progress=_progress_callback(progress),
                               trim=bool(trim))
        return (fmt.import_summary(report, source), gr.Dataframe(fmt.import_report_frame(report), visible=True),
                self.samples_table())

    def load_sample_pack(self, progress: gr.Progress = gr.Progress()):
        """One click: import the bundled `sample_data/` pack (real speechocean762 clips, with attribution)."""
        summary, table, samples = self.import_folder(str(SAMPLE_PACK_DIR), "auto", False, progress)
        if summary.startswith("**✗"):
            return summary, table, samples
        return summary + "\n\n" + _sample_pack_attribution(), table, samples

    # ------------------------------------------------------------------ dataset

    @ui_errors
    def build_dataset(self, model: str, eval_fraction: float, seed: float, max_length: float,
                      progress: gr.Progress = gr.Progress()):
        """Build the train/eval dataset; returns (summary, speakers, histogram, excluded, export files, memory max length)."""
        from pipeline.data.dataset import build_dataset

        report = build_dataset(
            self.ws, model or DEFAULTS.model, eval_fraction=float(eval_fraction or 0.0),
            seed=int(DEFAULTS.seed if seed is None else seed),
            max_length=int(DEFAULTS.max_length if max_length is None else max_length),
            progress=_progress_callback(progress, unit="rows"),
        )
        return self._dataset_outputs(report.to_dict())

    def dataset_on_load(self):
        """Page (re)opened: the last build's report (settings are restored by `restore_settings`)."""
        from pipeline.data.dataset import load_build_report

        try:
            report = load_build_report(self.ws)
        except PipelineError:
            # Empty frames (not None) keep the real column headers instead of Gradio's "1 2 3".
            return ("No dataset built yet.", fmt.speakers_frame({}), None, fmt.excluded_frame([]), None, gr.skip())
        return (*self._dataset_outputs(report)[:-1], gr.skip())

    def restore_settings(self):
        """Page (re)opened: the remembered settings (`WS/settings.json`), else those of the newest run,
        else the built dataset's model and longest row.

        Returns one update per `CONFIG_FIELDS` widget (the model picker's choices include the model and
        every local model folder).
        """
        from pipeline.data.dataset import load_build_report

        values: dict[str, Any] = self.saved_settings()
        if not values:
            runs = _list_runs(self.ws)
            values = _run_settings(self.ws, runs[0]["run"]) if runs else {}
        if not values:
            try:
                report = load_build_report(self.ws)
            except PipelineError:
                report = {}
            longest = int((report.get("length_stats") or {}).get("max") or 0)
            values = {"model": report.get("model"), "max_length": max(256, longest) if longest else None}
        updates = []
        for name in CONFIG_FIELDS:
            value = values.get(name)
            if name == "model":
                updates.append(gr.Dropdown(choices=self.model_choices(str(value) if value else None),
                                           **({"value": str(value)} if value else {})))
            elif value is None:
                updates.append(gr.skip())
            else:
                updates.append(gr.update(value=value))
        return tuple(updates)

    def _dataset_outputs(self, report: dict):
        splits = report.get("splits", {})
        stats = report.get("length_stats", {}) or {}
        lines = [
            "**Rows:** " + ", ".join(f"{name} **{rows}**" for name, rows in splits.items())
            + f" (split by {report.get('split_method', '?')}, seed {report.get('seed')})",
            f"**Excluded:** {len(report.get('excluded', []))} row(s)",
        ]
        if stats.get("count"):
            lines.append(
                f"**Tokens per row:** min {stats['min']}, median {stats['median']:g}, p90 {stats['p90']}, "
                f"longest **{stats['max']}** (limit {report.get('max_length')})"
            )
        lines += [f"- {note}" for note in report.get("notes", [])]
        lines.append(f"Saved to `{report.get('path')}` (model `{report.get('model')}`).")
        figure = fmt.length_histogram_bins(stats.get("histogram") or [], report.get("max_length"), stats.get("max"))
        exports = [path for path in (report.get("exports") or {}).values() if Path(path).exists()]
        longest = int(stats.get("max") or 0)
        memory_max_length = gr.update(value=max(256, longest)) if longest else gr.skip()
        return (
            "\n\n".join(lines),
            fmt.speakers_frame(report.get("speakers", {})),
            figure,
            fmt.excluded_frame(report.get("excluded", [])),
            exports or None,
            memory_max_length,
        )

    # ------------------------------------------------------------------ memory

    @ui_errors
    def detect_device(self, device: str, memory_gb: float | None = None) -> str:
        """Which device `device` resolves to and how much memory it has (total, free, usable)."""
        from pipeline.memory import device_memory
        from pipeline.training.model import resolve_device

        resolved = resolve_device(device or "auto")
        return fmt.device_markdown(device_memory(resolved, float(memory_gb) if memory_gb else None).to_dict())

    @ui_errors
    def estimate(self, memory_gb: float | None, *values: Any):
        """Estimate peak memory of the run the settings describe; returns plot, verdict, table, suggestions."""
        config = config_from_values(values)
        return self._estimate_outputs(_memory_result(self.ws, config, memory_gb))

    def _estimate_outputs(self, data: dict, measured: int | None = None):
        at_peak = data["components_at_peak"]
        figure = fmt.memory_bar(
            at_peak, data.get("usable_bytes"), device_total_bytes=data["device_memory"]["total_bytes"],
            measured_bytes=measured,
            title=f"Estimated peak ({data['device']}, longest train row {data['seq_len']} tokens)",
        )
        verdict = fmt.verdict_markdown(data["verdict"], data["total_bytes"], data["usable_bytes"])
        if data.get("excluded_rows"):
            verdict += f"\n\nMax length {data['max_length']} leaves out **{data['excluded_rows']}** row(s)."
        verdict += "\n\n" + "\n".join(f"- {note}" for note in data.get("notes", []))
        suggestions = list(data.get("suggestions") or [])[:MAX_SUGGESTIONS]
        buttons = []
        for index in range(MAX_SUGGESTIONS):
            if index < len(suggestions):
                buttons.append(gr.Button(value=fmt.suggestion_label(suggestions[index]), visible=True))
            else:
                buttons.append(gr.Button(visible=False))
        hint = fmt.suggestions_markdown(suggestions, data["verdict"])
        return (figure, verdict, fmt.components_frame(data["components"]), hint, suggestions, *buttons)

    def apply_suggestion(self, index: int, suggestions: list[dict]):
        """Set the widgets to suggestion `index`'s settings (one click); returns one update per setting."""
        if not suggestions or index >= len(suggestions):
            return tuple(gr.skip() for _ in CONFIG_FIELDS)
        changes = suggestions[index].get("changes") or {}
        return tuple(gr.update(value=changes[name]) if name in changes else gr.skip() for name in CONFIG_FIELDS)

    @ui_errors
    def measure(self, memory_gb: float | None, *values: Any, progress: gr.Progress = gr.Progress()):
        """Run the real one-step probe in a child process; returns (markdown, plot with the measured peak)."""
        config = config_from_values(values)
        if progress is not None:
            progress(None, desc="Running one real training step on the longest batch (a child process)…")
        data = _memory_result(self.ws, config, memory_gb, measure=True)
        measured = data["measured"]
        peak = measured.get("peak_bytes") or measured.get("peak_memory_bytes")
        text = fmt.measured_markdown(peak, data["total_bytes"], measured)
        return text, self._estimate_outputs(data, measured=peak)[0]

    # ------------------------------------------------------------------ train

    def settings_summary(self, *values: Any) -> str:
        """One line with the settings the next run will use (or what is wrong with them).

        Valid settings are also remembered (`remember_settings`), so a reload restores them.
        """
        try:
            config = config_from_values(values)
        except PipelineError as error:
            return f"✗ {error} (the last valid settings are kept)"
        try:
            self.remember_settings(config)
        except OSError as error:
            return fmt.settings_markdown(config.to_dict()) + f"\n\n⚠ Could not save the settings: {error}"
        return fmt.settings_markdown(config.to_dict())

    @ui_errors
    def start_training(self, run_name: str, *values: Any):
        """Start a training run in its own process; returns (current run, status, timer on, failure, seen rows)."""
        from pipeline.training.runs import start_run

        config = config_from_values(values)
        name = (run_name or "").strip() or time.strftime("run-%Y%m%d-%H%M%S")
        self.ws.run_dir(name)  # validates the name before anything is written
        start_run(self.ws, name, config)
        return (name, f"Started **{name}** in its own process; the first step follows a check of the longest batch.",
                gr.Timer(active=True), "", -1)

    @ui_errors
    def stop_training(self, run_name: str) -> str:
        """Ask the run to save a checkpoint and the adapter, and stop at the next step."""
        from pipeline.training.runs import request_stop

        if not run_name:
            raise gr.Error("No run is being watched; start one first.", title="Training")
        status = request_stop(self.ws, run_name)
        if not status["alive"]:
            return f"**{run_name}** is not running (it is {status['state'].replace('_', ' ')})."
        return (f"Asked **{run_name}** to stop: it saves a checkpoint and the adapter at the end of the current "
                "step, then ends. **Resume** continues it later.")

    @ui_errors
    def resume_training(self, run_name: str):
        """Continue a stopped run from its last checkpoint; returns (current run, status, timer on, failure, seen)."""
        from pipeline.training.runs import start_run

        if not run_name:
            raise gr.Error("Pick a stopped run to resume.", title="Training")
        start_run(self.ws, run_name, None, resume=True)
        return (run_name, f"Resumed **{run_name}** from its last checkpoint.", gr.Timer(active=True), "", -1)

    def poll(self, run_name: str, seen: int | None):
        """Timer tick: read the run folder; returns (progress, curves, memory, log, failure, seen, timer, runs)."""
        from pipeline.fileio import read_jsonl
        from pipeline.training.runs import run_status

        if not run_name:
            return (gr.skip(),) * 5 + (seen, gr.Timer(active=False)) + (gr.skip(),) * 3
        try:
            status = run_status(self.ws, run_name)
        except PipelineError as error:
            return (gr.skip(),) * 4 + (f"✗ {error}", seen, gr.Timer(active=False)) + (gr.skip(),) * 3
        run_dir = Path(status["run_dir"])
        rows = read_jsonl(run_dir / "progress.jsonl")
        last = status.get("last_progress") or {}
        result = status.get("result") or {}
        alive = bool(status["alive"])
        elapsed = last.get("elapsed_s")
        if alive and elapsed is None:
            elapsed = time.time() - float(result.get("started_at") or _started_at(run_dir) or time.time())
        eta = last.get("eta_s") if alive else None  # no "ETA 0 s" for a stopped or finished run
        state = status["state"].replace("_", " ")
        if alive and not rows:
            state += " (loading the model and checking the longest batch)"
        curves = fmt.loss_curves(rows) if len(rows) != seen or not alive else gr.skip()
        peak = max([r.get("peak_memory_bytes") or 0 for r in rows] + [result.get("peak_memory_bytes") or 0]) or None
        memory_text = fmt.train_memory_markdown(
            {"peak_memory_bytes": peak, "estimate_bytes": self._run_estimate(run_name, result),
             "memory_kind": result.get("memory_kind")})
        return (
            fmt.progress_html(status.get("step"), status.get("max_steps") or result.get("max_steps"), elapsed, eta,
                              state, label=run_name),
            curves,
            memory_text,
            _tail(run_dir / "train.log") or _tail(run_dir / "process.log"),
            fmt.failure_markdown({"status": status["state"], "reason": status.get("reason"),
                                  "suggestions": result.get("suggestions")}),
            len(rows),
            gr.Timer(active=alive),
            # While it runs, the Past runs table is re-read only when a new progress row arrived.
            *(((self.runs_table() if len(rows) != seen else gr.skip()), gr.skip(), gr.skip()) if alive
              else self._run_lists(selected=run_name)),
        )

    def _run_estimate(self, run_name: str, result: dict) -> int | None:
        """The memory estimate (bytes) for a run's settings on the device it runs on; cached per run."""
        if run_name in self._estimates:
            return self._estimates[run_name]
        device = result.get("device")
        if device not in ("cpu", "cuda", "mps"):
            return None  # not known until the trainer has resolved `auto`
        estimate = None
        try:
            from pipeline import memory

            config = TrainConfig.from_dict(_run_settings(self.ws, run_name))
            lengths = memory.length_stats_from_workspace(self.ws, config.max_length)
            estimate = memory.estimate_memory(memory.load_model_config(config.model), config, lengths,
                                              device).total_bytes
        except PipelineError:
            pass
        self._estimates[run_name] = estimate
        return estimate

    def runs_table(self):
        """Past runs with their results (newest first)."""
        return fmt.runs_frame(_list_runs(self.ws))

    def on_load(self):
        """Page (re)opened: re-attach to a running job (or show the latest run), list runs and adapters."""
        from pipeline.training.runs import active_run

        runs = _list_runs(self.ws)
        active = active_run(self.ws)
        name = active or (runs[0]["run"] if runs else "")
        status = f"Re-attached to the running job **{active}**." if active else ""
        table, resume, adapters = self._run_lists()
        return name, gr.Timer(active=bool(active)), status, table, adapters, resume, -1

    def refresh_run_lists(self):
        """Runs table, stopped runs (to resume) and runs with an adapter (to try)."""
        return self._run_lists()

    def _run_lists(self, selected: str | None = None):
        """(runs table, resume dropdown, try dropdown); `selected` is preselected where it fits."""
        runs = _list_runs(self.ws)
        resumable = _resumable_runs(runs)
        adapters = _adapter_runs(self.ws, runs)
        return (
            fmt.runs_frame(runs),
            gr.Dropdown(choices=resumable, value=selected if selected in resumable else None),
            gr.Dropdown(choices=adapters, value=selected if selected in adapters else (adapters[0] if adapters else None)),
        )

    # ------------------------------------------------------------------ try

    @ui_errors
    def try_feedback(self, audio: Any, target_text: str, run_name: str,
                     max_new_tokens: float = 256) -> tuple[str, str, str]:
        """Tuned and base feedback for one clip from ONE model load (the run's base + adapter; the base
        answer with the adapter disabled); returns (tuned text, note on the model, base text)."""
        from pipeline.tutor.infer import compare_feedback

        if not run_name:
            raise gr.Error("Pick a trained run first (the Train tab makes one; a stopped run has an adapter too).",
                           title="Try")
        result = compare_feedback(audio, target_text or "", run=run_name, workspace=self.ws,
                                  max_new_tokens=int(max_new_tokens or 256))
        return result["tuned"]["text"], self.describe_model(result["model"]), result["base"]["text"]


# ---------------------------------------------------------------------------------------------
# small helpers (no pipeline work)


def _clip_name(audio: Any) -> str | None:
    if isinstance(audio, (str, os.PathLike)):
        return Path(audio).name
    if isinstance(audio, dict) and audio.get("path"):
        return Path(audio["path"]).name
    return None


def _list_runs(ws: Workspace) -> list[dict]:
    from pipeline.training.runs import list_runs

    return list(list_runs(ws))


def _resumable_runs(runs: list[dict]) -> list[str]:
    """Runs that ended stopped or failed and have a checkpoint to continue from."""
    return [r["run"] for r in runs
            if r["state"] in ("stopped", "failed") and any((Path(r["run_dir"]) / "checkpoints").glob("checkpoint-*"))]


def _adapter_runs(ws: Workspace, runs: list[dict]) -> list[str]:
    """Runs that saved an adapter (usable in the Try tab), newest first."""
    return [r["run"] for r in runs if (Path(r["run_dir"]) / "adapter" / "adapter_config.json").is_file()]


def _started_at(run_dir: Path) -> float | None:
    import json

    try:
        return float(json.loads((run_dir / "pid.json").read_text(encoding="utf-8"))["started_at"])
    except (OSError, ValueError, KeyError):
        return None


def _tail(path: Path, lines: int = 14) -> str:
    """The last `lines` lines of a text file ('' when missing); reads at most the last 64 KiB."""
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - 65536))
            text = handle.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def _memory_result(ws: Workspace, config: TrainConfig, memory_gb: float | None, *, measure: bool = False) -> dict:
    """The estimate of `python -m pipeline estimate --json` for the app: one call to
    `pipeline.memory.estimate_for_workspace`, the same function the command line prints, so the two
    cannot drift. `memory_gb` is the "Memory budget (GiB)" field: 0 or empty means the real device.
    """
    from pipeline import memory

    return memory.estimate_for_workspace(ws, config, memory_gb=float(memory_gb) if memory_gb else None,
                                         measure=measure)


def _run_settings(ws: Workspace, run_name: str) -> dict:
    """A run's `config.json` as a dict ({} when the run has none yet)."""
    import json

    path = ws.run_dir(run_name) / "config.json"
    try:
        return json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
    except ValueError:
        return {}


def _sample_pack_attribution() -> str:
    return (
        "*Sample pack:* 8 real recordings of 3 young Mandarin-speaking learners from **speechocean762** "
        "(Junbo Zhang et al., Interspeech 2021, arXiv:2104.01378; free for commercial and non-commercial use), "
        "with feedback written from the experts' scores. Details: `sample_data/speechocean762-pack/README.md`."
    )


# ---------------------------------------------------------------------------------------------
# layout


def build_ui(app: TutorApp) -> gr.Blocks:
    """Build the `gr.Blocks` page for `app`'s workspace (no heavy imports happen here)."""
    d = DEFAULTS
    with gr.Blocks(title="Pronunciation Tutor Studio", analytics_enabled=False) as demo:
        gr.HTML(_header_html(app.ws.root), elem_id="header", padding=False)
        with gr.Row(equal_height=True):
            model = gr.Dropdown(
                app.model_choices(), value=d.model, allow_custom_value=True, label="Model",
                info="A Gemma 3n checkpoint from Hugging Face, or the path of a local model folder.",
                elem_id="model", scale=3,
            )
            tiny_button = gr.Button("Create offline tiny test model", elem_id="make-tiny", scale=0, min_width=280)
        model_note = gr.Markdown(app.describe_model(d.model), elem_id="model-note")

        with gr.Tabs(elem_id="tabs"):
            # ---------------------------------------------------------------- 1 samples
            with gr.Tab("1 · Samples", id="samples", elem_id="tab-samples"):
                with gr.Row(equal_height=True):
                    pack_button = gr.Button("Load the sample pack (real learner clips)", variant="primary",
                                            elem_id="load-pack", scale=0, min_width=340)
                    gr.Markdown("New here? Load a few real learner recordings with expert feedback and try every "
                                "step at once.")
                with gr.Row():
                    with gr.Column(scale=1):
                        gr.Markdown("### Add a recording")
                        audio_in = gr.Audio(sources=["microphone", "upload"], type="filepath",
                                            label="Record or upload a clip (0.3–30 s)", elem_id="sample-audio")
                        target_in = gr.Textbox(label="Target sentence (what the learner was asked to read)",
                                               elem_id="sample-target")
                        feedback_in = gr.Textbox(label="Tutor feedback (what a good tutor would say)", lines=4,
                                                 elem_id="sample-feedback")
                        speaker_in = gr.Textbox(label="Speaker (optional; keeps each learner in one split)",
                                                elem_id="sample-speaker")
                        save_trim = gr.Checkbox(False, label="Trim clips longer than 30 s (keep their first 30 s)",
                                                elem_id="save-trim")
                        with gr.Row():
                            check_button = gr.Button("Check clip", elem_id="check-clip")
                            save_button = gr.Button("Save sample", variant="primary", elem_id="save-sample")
                    with gr.Column(scale=1):
                        checks_out = gr.Markdown("Record or upload a clip, then **Check clip**.", elem_id="checks")
                with gr.Accordion("Import a folder", open=False, elem_id="import-accordion"):
                    with gr.Row():
                        folder_in = gr.Textbox(label="Folder on this computer", scale=3, elem_id="import-folder",
                                               placeholder="/home/me/recordings")
                        format_in = gr.Dropdown(list(IMPORT_FORMATS), value="auto", label="Layout", scale=1,
                                                info="auto detects Kaldi, audiofolder, LJSpeech, Common Voice or "
                                                     "audio + .txt")
                        import_button = gr.Button("Import", scale=0, elem_id="import-button")
                    import_trim = gr.Checkbox(False, label="Trim clips longer than 30 s (keep their first 30 s)",
                                              elem_id="import-trim")
                import_summary = gr.Markdown(elem_id="import-summary")
                import_table = gr.Dataframe(fmt.import_report_frame({}), label="Per-file report", interactive=False, visible=False,
                                            elem_id="import-report", max_height=240)
                gr.Markdown("### Saved samples\nClick a row to play it back, edit or delete it.")
                samples_df = gr.Dataframe(app.samples_table, label="Sample library", interactive=False,
                                          elem_id="samples-table", max_height=360, wrap=True,
                                          column_widths=["14%", "9%", "8%", "24%", "30%", "15%"])
                with gr.Row():
                    with gr.Column(scale=1):
                        edit_id = gr.Textbox(label="Selected sample", interactive=False, elem_id="edit-id")
                        edit_audio = gr.Audio(label="Playback", type="filepath", interactive=False,
                                              elem_id="edit-audio")
                        edit_checks = gr.Markdown()
                    with gr.Column(scale=1):
                        edit_target = gr.Textbox(label="Target sentence", elem_id="edit-target")
                        edit_feedback = gr.Textbox(label="Tutor feedback", lines=5, elem_id="edit-feedback")
                        edit_speaker = gr.Textbox(label="Speaker", elem_id="edit-speaker")
                        with gr.Row():
                            update_button = gr.Button("Save changes", elem_id="update-sample")
                            delete_button = gr.Button("Delete sample", variant="stop", elem_id="delete-sample")
                        edit_status = gr.Markdown(elem_id="edit-status")

            # ---------------------------------------------------------------- 2 dataset
            with gr.Tab("2 · Dataset", id="dataset", elem_id="tab-dataset"):
                with gr.Row():
                    eval_fraction = gr.Slider(0.0, 0.5, value=0.2, step=0.05, label="Held-out share (eval split)",
                                              info="Learners are kept in one split when speakers are known.")
                    seed_in = gr.Number(value=d.seed, precision=0, label="Split seed")
                    build_max_length = gr.Number(value=d.max_length, precision=0, minimum=256, elem_id="build-max-length",
                                                 label="Max tokens per row",
                                                 info="Longer rows are listed below and left out, never cut.")
                build_button = gr.Button("Build dataset", variant="primary", elem_id="build-dataset")
                dataset_summary = gr.Markdown("No dataset built yet.", elem_id="dataset-summary")
                with gr.Row():
                    length_plot = gr.Plot(show_label=False, elem_id="length-plot")
                    with gr.Column():
                        speakers_df = gr.Dataframe(fmt.speakers_frame({}), label="Speakers per split", interactive=False,
                                                   elem_id="speakers-table", wrap=True)
                        excluded_df = gr.Dataframe(fmt.excluded_frame([]), label="Rows left out, with the reason", interactive=False,
                                                   elem_id="excluded-table", wrap=True)
                export_files = gr.File(label="Export (JSONL with messages; Parquet with audio)",
                                       file_count="multiple", interactive=False, elem_id="exports")

            # ---------------------------------------------------------------- 3 memory
            with gr.Tab("3 · Memory", id="memory", elem_id="tab-memory") as memory_tab:
                gr.Markdown("Will the fine-tune fit? The estimate uses your dataset's **longest** row, "
                            "not the average: that is the batch that runs out of memory hours in.")
                with gr.Row():
                    device = gr.Dropdown(list(DEVICES), value=d.device, label="Device", elem_id="device",
                                         info="auto: CUDA GPU, then Apple silicon (MPS), then CPU")
                    memory_gb = gr.Number(value=0, minimum=0, label="Memory budget (GiB)",
                                          info="0: use what the device reports; or type your own budget.")
                    detect_button = gr.Button("Detect device", scale=0)
                device_note = gr.Markdown(elem_id="device-note")
                with gr.Row():
                    quantization = gr.Radio(list(QUANTIZATIONS), value=d.quantization, label="Quantization",
                                            info="4bit = NF4 weights (bitsandbytes)")
                    lora_rank = gr.Number(value=d.lora_rank, precision=0, minimum=1, label="LoRA rank r")
                    lora_targets = gr.Radio(list(LORA_TARGETS), value=d.lora_targets, label="LoRA on")
                    optimizer = gr.Dropdown(list(OPTIMIZERS), value=d.optimizer, label="Optimizer")
                with gr.Row():
                    batch_size = gr.Number(value=d.batch_size, precision=0, minimum=1, label="Batch size")
                    grad_accum = gr.Number(value=d.grad_accum, precision=0, minimum=1,
                                           label="Gradient accumulation")
                    max_length = gr.Number(value=d.max_length, precision=0, minimum=256, label="Max length (tokens)",
                                           info="Set to the dataset's longest row after a build.",
                                           elem_id="max-length")
                    gradient_checkpointing = gr.Checkbox(value=d.gradient_checkpointing,
                                                         label="Gradient checkpointing (less memory, ~30 % slower)")
                with gr.Row():
                    vision_tower = gr.Checkbox(value=d.vision_tower, label="Load the vision tower",
                                               info="The tutor never sees images: untick to free ~0.55 GiB.")
                    ple_on_cpu = gr.Checkbox(value=d.ple_on_cpu, label="Per-layer embeddings in CPU RAM (CUDA)",
                                             info="~3.75 GiB off the GPU on E2B; slightly slower steps.")
                with gr.Row():
                    estimate_button = gr.Button("Estimate", variant="primary", elem_id="estimate")
                    measure_button = gr.Button("Measure (one real step)", elem_id="measure")
                verdict_out = gr.Markdown(elem_id="verdict")
                memory_plot = gr.Plot(show_label=False, elem_id="memory-plot")
                suggestions_note = gr.Markdown(elem_id="suggestions-note")
                with gr.Row():
                    suggestion_buttons = [
                        gr.Button(visible=False, size="sm", elem_id=f"suggestion-{i}") for i in range(MAX_SUGGESTIONS)
                    ]
                suggestions_state = gr.State([])
                measured_out = gr.Markdown(elem_id="measured")
                with gr.Accordion("Estimate per component (bytes)", open=False):
                    components_df = gr.Dataframe(fmt.components_frame({}), interactive=False, show_label=False)

            # ---------------------------------------------------------------- 4 train
            with gr.Tab("4 · Train", id="train", elem_id="tab-train") as train_tab:
                gr.Markdown("Uses the model above and the Memory tab's settings. Training runs in its own "
                            "process: you can close this tab and come back.")
                settings_note = gr.Markdown(elem_id="settings-summary")
                with gr.Row():
                    run_name = gr.Textbox(label="Run name (empty: run-DATE-TIME)", elem_id="run-name")
                    learning_rate = gr.Number(value=d.learning_rate, label="Learning rate")
                    lr_schedule = gr.Dropdown(list(LR_SCHEDULES), value=d.lr_schedule, label="Schedule")
                    epochs = gr.Number(value=d.epochs, label="Epochs")
                    max_steps = gr.Number(value=d.max_steps, precision=0, label="Max steps (-1: use epochs)",
                                          elem_id="max-steps")
                with gr.Accordion("More settings", open=False):
                    with gr.Row():
                        lora_alpha = gr.Number(value=d.lora_alpha, precision=0, label="LoRA alpha")
                        lora_dropout = gr.Number(value=d.lora_dropout, label="LoRA dropout")
                        eval_steps = gr.Number(value=d.eval_steps, precision=0, label="Eval every N steps",
                                               elem_id="eval-steps")
                        save_steps = gr.Number(value=d.save_steps, precision=0, label="Checkpoint every N steps",
                                               elem_id="save-steps")
                with gr.Row():
                    start_button = gr.Button("Start training", variant="primary", elem_id="start-training")
                    stop_button = gr.Button("Stop (saves a checkpoint)", variant="stop", elem_id="stop-training")
                with gr.Row(equal_height=True):
                    resume_choice = gr.Dropdown([], label="Stopped run to continue", elem_id="resume-choice",
                                                scale=3, allow_custom_value=True)
                    resume_button = gr.Button("Resume", elem_id="resume-training", scale=1)
                current_run = gr.Textbox(label="Watching run", interactive=False, elem_id="current-run")
                train_status = gr.Markdown(elem_id="train-status")
                progress_out = gr.HTML(fmt.progress_html(0, 0, None, None, None), elem_id="train-progress")
                failure_out = gr.Markdown(elem_id="train-failure")
                with gr.Row():
                    loss_plot = gr.Plot(show_label=False, elem_id="loss-plot")
                    with gr.Column():
                        train_memory = gr.Markdown(elem_id="train-memory")
                        log_tail = gr.Textbox(label="Log (last lines)", lines=14, max_lines=40, interactive=False,
                                              autoscroll=True, elem_id="log-tail")
                gr.Markdown("### Past runs")
                runs_df = gr.Dataframe(fmt.runs_frame([]), label="Runs", interactive=False, elem_id="runs-table", wrap=True)
                refresh_runs = gr.Button("Refresh list", size="sm")
                seen_rows = gr.State(0)
                timer = gr.Timer(POLL_SECONDS, active=False)

            # ---------------------------------------------------------------- 5 try
            with gr.Tab("5 · Try", id="try", elem_id="tab-try"):
                with gr.Row():
                    with gr.Column():
                        try_audio = gr.Audio(sources=["microphone", "upload"], type="filepath",
                                             label="Say the sentence (record or upload)", elem_id="try-audio")
                        try_target = gr.Textbox(label="Target sentence", elem_id="try-target")
                        with gr.Row():
                            try_run = gr.Dropdown([], label="Tuned run (adapter)", elem_id="try-run",
                                                  allow_custom_value=True)
                            try_refresh = gr.Button("Refresh runs", size="sm", scale=0, min_width=120)
                        try_max_tokens = gr.Slider(16, 512, value=256, step=16, label="Longest answer (tokens)",
                                                   info="The feedback template needs ~40-120 tokens.",
                                                   elem_id="try-max-tokens")
                        try_button = gr.Button("Get feedback", variant="primary", elem_id="try-button")
                try_note = gr.Markdown(elem_id="try-note")
                with gr.Row():
                    tuned_out = gr.Textbox(label="Tuned tutor (your adapter)", lines=8, elem_id="tuned-feedback")
                    base_out = gr.Textbox(label="Base model (no fine-tuning)", lines=8, elem_id="base-feedback")

        # ---------------------------------------------------------------- wiring
        settings = {
            "model": model, "device": device, "quantization": quantization, "lora_rank": lora_rank,
            "lora_targets": lora_targets, "batch_size": batch_size, "grad_accum": grad_accum,
            "max_length": max_length, "gradient_checkpointing": gradient_checkpointing, "vision_tower": vision_tower,
            "ple_on_cpu": ple_on_cpu, "optimizer": optimizer,
            "lora_alpha": lora_alpha, "lora_dropout": lora_dropout, "learning_rate": learning_rate,
            "lr_schedule": lr_schedule, "epochs": epochs, "max_steps": max_steps, "eval_steps": eval_steps,
            "save_steps": save_steps,
        }
        setting_widgets = [settings[name] for name in CONFIG_FIELDS]
        for name, widget in settings.items():
            if name != "model":
                widget.elem_id = widget.elem_id or f"set-{name.replace('_', '-')}"

        tiny_button.click(app.make_tiny_model, outputs=[model, model_note])
        model.change(app.describe_model, inputs=model, outputs=model_note)

        check_button.click(app.check_clip, inputs=audio_in, outputs=checks_out)
        audio_in.stop_recording(app.check_clip, inputs=audio_in, outputs=checks_out)
        audio_in.upload(app.check_clip, inputs=audio_in, outputs=checks_out)
        save_button.click(app.save_sample, inputs=[audio_in, target_in, feedback_in, speaker_in, save_trim],
                          outputs=[checks_out, samples_df, audio_in])
        pack_button.click(app.load_sample_pack, outputs=[import_summary, import_table, samples_df])
        import_button.click(app.import_folder, inputs=[folder_in, format_in, import_trim],
                            outputs=[import_summary, import_table, samples_df])
        samples_df.select(app.select_sample, inputs=samples_df,
                          outputs=[edit_id, edit_audio, edit_target, edit_feedback, edit_speaker, edit_checks])
        update_button.click(app.update_sample, inputs=[edit_id, edit_target, edit_feedback, edit_speaker],
                            outputs=[edit_status, samples_df])
        delete_button.click(app.delete_sample, inputs=edit_id, js=_CONFIRM_DELETE_JS,
                            outputs=[edit_status, samples_df, edit_id, edit_audio, edit_target, edit_feedback,
                                     edit_speaker, edit_checks])

        dataset_outputs = [dataset_summary, speakers_df, length_plot, excluded_df, export_files, max_length]
        build_button.click(app.build_dataset, inputs=[model, eval_fraction, seed_in, build_max_length],
                           outputs=dataset_outputs)

        detect_button.click(app.detect_device, inputs=[device, memory_gb], outputs=device_note)
        memory_tab.select(app.detect_device, inputs=[device, memory_gb], outputs=device_note)
        estimate_outputs = [memory_plot, verdict_out, components_df, suggestions_note, suggestions_state,
                            *suggestion_buttons]
        estimate_button.click(app.estimate, inputs=[memory_gb, *setting_widgets], outputs=estimate_outputs)
        for index, button in enumerate(suggestion_buttons):
            button.click(functools.partial(app.apply_suggestion, index), inputs=suggestions_state,
                         outputs=setting_widgets).then(
                app.estimate, inputs=[memory_gb, *setting_widgets], outputs=estimate_outputs)
        train_tab.select(app.settings_summary, inputs=setting_widgets, outputs=settings_note)
        for widget in setting_widgets:
            widget.change(app.settings_summary, inputs=setting_widgets, outputs=settings_note, show_progress="hidden")
        measure_button.click(app.measure, inputs=[memory_gb, *setting_widgets], outputs=[measured_out, memory_plot])

        poll_outputs = [progress_out, loss_plot, train_memory, log_tail, failure_out, seen_rows, timer, runs_df,
                        resume_choice, try_run]
        start_button.click(app.start_training, inputs=[run_name, *setting_widgets],
                           outputs=[current_run, train_status, timer, failure_out, seen_rows])
        stop_button.click(app.stop_training, inputs=current_run, outputs=train_status)
        resume_button.click(app.resume_training, inputs=resume_choice,
                            outputs=[current_run, train_status, timer, failure_out, seen_rows])
        timer.tick(app.poll, inputs=[current_run, seen_rows], outputs=poll_outputs, show_progress="hidden")
        run_lists = [runs_df, resume_choice, try_run]
        refresh_runs.click(app.refresh_run_lists, outputs=run_lists)
        try_refresh.click(app.refresh_run_lists, outputs=run_lists)

        # One model load serves both answers (the base answer runs with the adapter disabled).
        try_button.click(app.try_feedback, inputs=[try_audio, try_target, try_run, try_max_tokens],
                         outputs=[tuned_out, try_note, base_out])

        demo.load(app.on_load, outputs=[current_run, timer, train_status, runs_df, try_run, resume_choice, seen_rows]).then(
            app.poll, inputs=[current_run, seen_rows], outputs=poll_outputs, show_progress="hidden")
        demo.load(app.dataset_on_load, outputs=dataset_outputs)
        demo.load(app.restore_settings, outputs=setting_widgets).then(
            app.settings_summary, inputs=setting_widgets, outputs=settings_note, show_progress="hidden")
    return demo


def _header_html(workspace: Path) -> str:
    """Logo, title, the workflow in one line, and the workspace folder."""
    import html

    logo = ASSETS_DIR / "logo.svg"
    svg = logo.read_text(encoding="utf-8") if logo.exists() else ""
    return (
        f'<div class="app-header"><div class="logo">{svg}</div><div class="app-title">'
        "<h1>Pronunciation Tutor Studio</h1>"
        "<p>Turn recordings into a <b>fine-tuned pronunciation tutor</b> (LoRA on Google's Gemma 3n), in the "
        "order you work: <b>1 Samples → 2 Dataset → 3 Memory → 4 Train → 5 Try</b>. Everything is saved in the "
        f"workspace folder <code>{html.escape(str(workspace))}</code>, so closing this tab loses nothing.</p>"
        "</div></div>"
    )


def _css() -> str:
    path = ASSETS_DIR / "app.css"
    return path.read_text(encoding="utf-8") if path.exists() else ""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python app.py",
        description="Pronunciation Tutor Studio: record, build, check memory, fine-tune Gemma 3n, try the tutor.",
    )
    parser.add_argument("--workspace", default=str(DEFAULT_WORKSPACE),
                        help=f"folder holding samples, dataset and runs (default: {DEFAULT_WORKSPACE})")
    parser.add_argument("--host", default="127.0.0.1",
                        help="address to listen on (default 127.0.0.1: this computer only; 0.0.0.0 exposes it "
                             "to your network)")
    parser.add_argument("--port", type=int, default=7860, help="port (default 7860)")
    parser.add_argument("--share", action="store_true",
                        help="also create a public gradio.live link (off by default: anyone with the link can "
                             "use the app)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Build the page and serve it until Ctrl+C; prints the URL."""
    args = parse_args(argv)
    app = TutorApp(args.workspace)
    demo = build_ui(app)
    demo.queue(default_concurrency_limit=4)
    try:
        _, local_url, share_url = demo.launch(
            server_name=args.host, server_port=args.port, share=args.share, inbrowser=False,
            prevent_thread_lock=True, quiet=True, ssr_mode=False, css=_css(), theme=gr.themes.Soft(),
            allowed_paths=[str(app.ws.root)], footer_links=["gradio"],
        )
    except OSError as error:
        print(f"error: cannot serve on {args.host}:{args.port} ({error}). Is the app already running? "
              f"Open it at http://{args.host}:{args.port}/ or start another copy with --port {args.port + 1}.",
              file=sys.stderr)
        return 1
    if args.host not in ("127.0.0.1", "localhost", "::1"):
        print(f"Listening on {args.host}: other computers on your network can open this app.", flush=True)
    print(f"Pronunciation Tutor Studio is running at {local_url}  (workspace: {app.ws.root}; "
          f"up {time.perf_counter() - _STARTED:.1f} s after start)", flush=True)
    if share_url:
        print(f"Public link (anyone with it can use the app): {share_url}", flush=True)
    print("Press Ctrl+C to stop.", flush=True)
    try:
        demo.block_thread()
    except KeyboardInterrupt:
        pass
    finally:
        demo.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
