"""The workspace a page works on, its remembered settings, and the model selector at the top of the page.

`AppState` is shared by every tab's handlers: the workspace folder, the settings remembered between
page loads (`WS/settings.json`, a `TrainConfig`) and the models offered in the picker.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import gradio as gr

from pipeline.config import KNOWN_MODELS, TrainConfig
from pipeline.errors import PipelineError
from pipeline.model.catalog import DEFAULT_FAMILY, DEFAULT_MODEL
from pipeline.workspace import DEFAULT_WORKSPACE, Workspace
from ui.common import CONFIG_FIELDS, DEFAULTS, confine_model_folders, list_runs, model_text, run_settings, typed_path, ui_errors
from ui.wording import OFFLINE_WORDS

TINY_MODEL_SUBDIR = Path("models") / DEFAULT_FAMILY.tiny_dir_name
SETTINGS_FILE = "settings.json"



def real_model_of(model: str) -> str:
    """The real checkpoint of `model`'s family (a tiny stand-in's family: `google/gemma-4-E2B-it` for the tiny
    Gemma 4), the family's first hub id (`pipeline.model.family.ModelFamily.default_model`); `DEFAULT_MODEL`
    when the family cannot be read (`pipeline.model.catalog.family_for` raised)."""
    from pipeline.model.catalog import family_for

    try:
        return family_for(model).default_model
    except PipelineError:
        return DEFAULT_MODEL

class AppState:
    """One workspace folder as the app sees it: where things are saved, the remembered settings, the models."""

    def __init__(self, workspace: str | os.PathLike | Workspace = DEFAULT_WORKSPACE, shared: bool = False):
        self.ws = (workspace if isinstance(workspace, Workspace) else Workspace(workspace)).ensure()
        self.shared = bool(shared)
        """Served beyond this computer (`pipeline.access.accounts.needs_login`): typed paths stay inside the workspace."""
        confine_model_folders(self.ws.root if self.shared else None)  # the Model box's folders too

    def typed_path(self, text: str | None) -> str:
        """A path typed into a box (`ui.common.typed_path`); when the studio is shared, it must lie inside the
        workspace (`pipeline.access.accounts.confine_path` raises `ConfigError` otherwise). "" stays ""."""
        from pipeline.access.accounts import confine_path

        path = typed_path(text)
        return str(confine_path(path, self.ws.root)) if path and self.shared else path

    @property
    def tiny_model_dir(self) -> Path:
        """Where the offline tiny test model is written: `WS/models/tiny-gemma3n`."""
        return self.ws.root / TINY_MODEL_SUBDIR

    @property
    def settings_path(self) -> Path:
        """Where the Memory/Train settings are remembered between page loads: `WS/settings.json` (a `TrainConfig`)."""
        return self.ws.root / SETTINGS_FILE

    # ------------------------------------------------------------------ model picker

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

    @ui_errors(message_at=1, outputs=2)
    def make_tiny_model(self, progress: gr.Progress = gr.Progress()) -> tuple[Any, str]:
        """Write the offline tiny random Gemma 3n into the workspace and select it."""
        from pipeline.model.tiny_gemma3n import make_tiny_gemma3n

        if progress is not None:
            progress(None, desc="Writing the tiny random Gemma 3n (a few seconds)…")
        path = make_tiny_gemma3n(self.tiny_model_dir)
        self.remember_model(str(path))
        return gr.Dropdown(choices=self.model_choices(), value=str(path)), self.describe_model(str(path))

    @ui_errors(message_at=1, outputs=2)
    def make_tiny_gemma4(self, progress: gr.Progress = gr.Progress()) -> tuple[Any, str]:
        """Write the offline tiny random Gemma 4 (`make-tiny-model --family gemma4`) into
        `WS/models/tiny-gemma4` and select it."""
        from pipeline.model.catalog import FAMILIES

        family = FAMILIES["gemma4"]
        if progress is not None:
            progress(None, desc="Writing the tiny random Gemma 4 (a few seconds)…")
        path = family.make_tiny(self.ws.root / "models" / family.tiny_dir_name)
        self.remember_model(str(path))
        return gr.Dropdown(choices=self.model_choices(), value=str(path)), self.describe_model(str(path))

    def answered_by(self, model: str, picked: str | None = None, answered: str = "✓ Both answers are in.") -> str:
        """The note under Try's answers: `answered` when `model` (the run's base, which answered) is the
        `picked` one, whose note (`describe_model`, with its ⚠ for the random test model) the top of the page
        shows already; else what answered (`describe_model(model)`), said as the run's own base model."""
        same = False
        if picked is not None:
            try:
                same = Path(model_text(picked)).expanduser() == Path(str(model)).expanduser() \
                    or model_text(picked) == str(model)
            except PipelineError:
                same = False
        if same:
            return answered
        return f"{answered} They come from the run's own base model. " + self.describe_model(model)

    def describe_model(self, model: str | None) -> str:
        """One line under the model picker: what the chosen model is and what it needs."""
        from pipeline.model.tiny_model import is_tiny_random_model

        try:
            model = model_text(model)
        except PipelineError as error:  # a folder outside the workspace of a shared studio
            return f"⚠ {error}"
        if not model:
            return "Pick a model."
        if is_tiny_random_model(model):
            from pipeline.model.hub import is_local_model

            if not is_local_model(model):  # a stand-in served under a hub id (its cached files carry the marker)
                return (f"⚠ **The `{model}` on this computer is a tiny test model with random weights.** Everything "
                        "runs end to end, but its feedback is meaningless text.")
            return (
                "⚠ **Offline tiny test model with random weights.** Everything runs end to end, "
                f"but its feedback is meaningless text. Pick `{real_model_of(model)}` for a real tutor."
            )
        from pipeline.model.hub import _hub_offline, foreign_path_message, foreign_path_reason, is_local_model

        reason = foreign_path_reason(model)  # a path typed for another system is never taken for a hub id
        if reason is not None:
            return "⚠ " + foreign_path_message(model, reason)
        if is_local_model(model):
            found = "" if Path(model).expanduser().is_dir() else " (no such folder yet: check the path)"
            return f"Local model folder `{model}`{found}."
        from pipeline.model.local_copy import local_copy

        # The Get-the-model panel below says whether it is here (where and how big, or what getting it takes): said
        # once, there, not again in this note.
        if local_copy(model).complete:
            return f"`{model}`: a model from Hugging Face."
        if _hub_offline():  # it cannot be fetched now
            return (
                f"⚠ {OFFLINE_WORDS[0].upper()}{OFFLINE_WORDS[1:]}, so **Get the model** below cannot fetch `{model}`. "
                "Click **Create offline tiny test model** to try the whole flow now, or start the app again "
                "without offline mode.\n\n<details><summary>Why?</summary>\n\n"
                "The app was started with HF_HUB_OFFLINE=1 (or TRANSFORMERS_OFFLINE=1) in its environment, which "
                "keeps the Hugging Face libraries from going online. Start it without that variable.\n\n</details>"
            )
        return f"`{model}`: a model from Hugging Face; **Get the model** below fetches it."

    # ------------------------------------------------------------------ remembered settings

    def saved_settings(self) -> dict[str, Any]:
        """The remembered settings (`WS/settings.json`) as a dict; {} when none are saved or the file is unusable."""
        try:
            data = json.loads(self.settings_path.read_text(encoding="utf-8"))
            return TrainConfig.from_dict(data).to_dict()
        except (OSError, ValueError, TypeError, PipelineError):
            return {}

    def remember_settings(self, config: TrainConfig) -> None:
        """Write `config` to `WS/settings.json` atomically (skipped when unchanged), so a reload and the
        next run use it."""
        from pipeline.fileio import atomic_write_json, locked

        with locked(self.settings_path):
            if self.saved_settings() != config.to_dict():
                atomic_write_json(self.settings_path, config.to_dict())

    def remember_model(self, model: str) -> None:
        """Remember `model` as the picked model at once (`WS/settings.json`, the other settings as a reload
        would restore them): a model picked by a button (the offline tiny test models) is kept even when the
        page is reloaded before its "Next run" line, which also remembers the settings, was worked out. A file
        that cannot be written leaves the settings as they were (the "Next run" line says so)."""
        values = {name: value for name, value in self._values_to_restore().items() if value is not None}
        try:
            self.remember_settings(TrainConfig.from_dict({**values, "model": str(model)}))
        except (OSError, PipelineError):
            pass

    def _values_to_restore(self) -> dict[str, Any]:
        """What a reopened page shows (`restore_settings`): the remembered settings, else those of the newest
        run, else the built dataset's model and longest row (missing values are None or absent)."""
        from pipeline.data.dataset import load_build_report

        values: dict[str, Any] = self.saved_settings()
        if not values:
            runs = list_runs(self.ws)
            values = run_settings(self.ws, runs[0]["run"]) if runs else {}
        if not values:
            try:
                report = load_build_report(self.ws)
            except PipelineError:
                report = {}
            longest = int((report.get("length_stats") or {}).get("max") or 0)
            values = {"model": report.get("model"), "max_length": max(256, longest) if longest else None}
        return values

    def restore_settings(self):
        """Page (re)opened: the remembered settings (`WS/settings.json`), else those of the newest run,
        else the built dataset's model and longest row.

        Returns one update per `CONFIG_FIELDS` widget (the model picker's choices include the model and
        every local model folder). A device this computer lacks (saved while the Memory tab asked about a Mac
        or an NVIDIA GPU) comes back as auto: the reopened page's machine is "This computer", and its answer
        and the Device setting must be about the same machine (`settings_for_this_computer`).
        """
        values = settings_for_this_computer(self._values_to_restore())
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


def settings_for_this_computer(values: dict[str, Any]) -> dict[str, Any]:
    """Saved settings as a reopened page shows them: a device this computer does not have (`cuda` or `mps`,
    set by a Memory tab machine preset to ask "would it fit there?") becomes `auto`, the machine picker's
    "This computer", and a quantization that was that device's default becomes this computer's default
    (one picked by hand stays). Other values are returned unchanged."""
    from pipeline.config import default_quantization, likely_device

    device = values.get("device")
    here = likely_device()
    if device not in ("cuda", "mps") or device == here:
        return values
    changed = {**values, "device": "auto"}
    if values.get("quantization") == default_quantization(device):
        changed["quantization"] = default_quantization(here)
    return changed


def model_picker(state: AppState) -> tuple[gr.Dropdown, gr.Markdown]:
    """Lay out the model selector (picker, tiny-model button, note) and wire it; returns (picker, note)."""
    with gr.Row(equal_height=True):
        model = gr.Dropdown(
            state.model_choices(), value=DEFAULTS.model, allow_custom_value=True, label="Model",
            info="A Gemma 3n or Gemma 4 checkpoint from Hugging Face, or the path of a local model folder.",
            elem_id="model", scale=3,
        )
        tiny_button = gr.Button("Create offline tiny test model", elem_id="make-tiny", scale=0, min_width=280)
        tiny4_button = gr.Button("Tiny test model: Gemma 4", elem_id="make-tiny-gemma4", scale=0, min_width=200)
    model_note = gr.Markdown(state.describe_model(DEFAULTS.model), elem_id="model-note")
    tiny_button.click(state.make_tiny_model, outputs=[model, model_note])
    tiny4_button.click(state.make_tiny_gemma4, outputs=[model, model_note])
    model.change(state.describe_model, inputs=model, outputs=model_note)
    # a pasted path keeps no surrounding spaces or quotes in the box (`ui.common.model_text`)
    model.blur(_tidy_model_box, inputs=model, outputs=model, show_progress="hidden")
    return model, model_note


def _tidy_model_box(value: str | None):
    """The Model box after it loses focus: a pasted path without its surrounding spaces or quotes
    (`ui.common.model_text`); left as typed when it is refused (the note under the box says why)."""
    try:
        tidy = model_text(value)
    except PipelineError:
        return gr.skip()
    return gr.update(value=tidy) if tidy != (value or "") else gr.skip()
