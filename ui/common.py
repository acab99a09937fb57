"""What every tab shares: the settings widgets' order, `ui_errors`, widget values -> `TrainConfig`, progress,
a dialogue's turns as chat messages (Samples and Try), an answer shown as it is generated (`as_it_grows`).

`ui_errors` is the one place a `PipelineError` becomes a "✗ message" in a tab's status panel (or, where
no panel fits, a `gr.Error`).
Nothing here imports torch, transformers or datasets; pipeline modules that do work are imported
inside the functions that call them.
"""

from __future__ import annotations

import functools
import inspect
from dataclasses import fields
from pathlib import Path
from typing import Any, Callable

import gradio as gr

from pipeline.config import TrainConfig
from pipeline.errors import PipelineError
from pipeline.workspace import Workspace
from pipeline.units import plural
from ui.wording import app_wording, levels_aside, not_here, why_levels

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULTS = TrainConfig()
POLL_SECONDS = 2.0
CANCELLED = "__cancelled__"
"""What a delete button's handler receives when the browser's "are you sure?" was answered no (`confirm_js`)."""


def confirm_js(question: str) -> str:
    """A button's `js=`: asks `question` (`{}` stands for the input's value) in the browser; a "no" reaches
    the handler as `CANCELLED`, an empty value passes through (the handler says what to pick)."""
    asked = question.replace("'", "\\'").replace("{}", "' + value + '")
    return f"(value) => (!value || window.confirm('{asked}')) ? value : '{CANCELLED}'"

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
    "quantize_audio_encoder",
    "low_memory_heap",
    "optimizer",
    "lora_alpha",
    "lora_dropout",
    "learning_rate",
    "lr_schedule",
    "epochs",
    "max_steps",
    "eval_steps",
    "save_steps",
    "keep_best",
    "judge_clips",
    "early_stopping_patience",
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
    "EvaluationError": "Evaluation",
}


def _error_title(error: PipelineError) -> str:
    """The area of an error (its class or the nearest base class named in `_ERROR_TITLES`)."""
    return next((_ERROR_TITLES[kind.__name__] for kind in type(error).__mro__ if kind.__name__ in _ERROR_TITLES),
                "Cannot do that")


def error_panel(error: PipelineError, hint: str | None = None,
                widgets: dict[str, tuple[str, str, bool]] | None = None, here: str | None = None) -> str:
    """The calm status-panel text of a `PipelineError`: "**✗ Area:** message", in the app's words
    (`ui.wording.app_wording`: widget and button names instead of command-line flags, `widgets` where
    the tab has its own, no pointer to `here`, the tab it shows on), plus `hint`; a sound level's figure
    behind "Why?" (`ui.wording.levels_aside`)."""
    message, levels = levels_aside(app_wording(str(error), widgets=widgets, here=here))
    text = f"**✗ {_error_title(error)}:** {message}"
    return (not_here(f"{text} {hint}", here) if hint else text) + why_levels(levels)


def plain_text(text: str) -> str:
    """`text` (Markdown) as a pop-up (`gr.Error`) shows it, which renders no Markdown: bold, italics and code
    marks removed, a link as its words; "**Device:** `mps`" -> "Device: mps"."""
    import re

    text = re.sub(r"\[([^\]]+)\]\([^)]*\)", r"\1", text or "")
    text = re.sub(r"(\*\*|__|`)", "", text)
    return re.sub(r"(?<![\w*])\*(?=\S)([^*]+?)(?<=\S)\*(?![\w*])", r"\1", text)


def ui_errors(fn: Callable | None = None, *, message_at: int | None = None, outputs: int = 1,
              hints: dict[type, str] | None = None, widgets: dict[str, tuple[str, str, bool]] | None = None) -> Callable:
    """The one place where a `PipelineError` reaches the browser.

    `@ui_errors(message_at=i, outputs=n)`: the handler's n outputs are left untouched (`gr.skip()`)
    except output i, a status panel of the tab, which shows `error_panel(error)`: "✗ Area: message"
    in the app's words. Every handler whose failure a person can act on reports this way: a raised
    `gr.Error` would be a toast that stays until closed (several stack up, "Error (2)", over the
    widgets) and would mark every output component with a red "Error" badge until reload. `hints`
    maps an error class to a sentence added after its message where this tab offers the fix (e.g.
    the Samples tab's trim box for `ClipTooLongError`); `widgets` names the tab's own widget for a flag
    (`ui.wording.BUILD_WIDGETS`); the handlers object's `here` ("Train tab") is the tab the message shows on, which it does not name.

    Plain `@ui_errors`: the error becomes a `gr.Error` (for outputs that have no place for a message,
    such as a table's initial value). Any other exception is a bug: Gradio shows a generic error and
    logs the traceback. A generator handler (an answer shown as it is generated) stays one: what it
    yielded stays shown, and the error is its last update.
    """

    def refusal(error: PipelineError, here: str | None = None) -> Any:
        hint = next((text for kind, text in (hints or {}).items() if isinstance(error, kind)), None)
        if message_at is None:  # a pop-up shows its text as it is: no Markdown in it
            raise gr.Error(plain_text(app_wording(str(error), widgets=widgets, here=here)), title=_error_title(error),
                           duration=None, print_exception=False) from error
        text = error_panel(error, hint, widgets, here)
        if outputs == 1:
            return text
        return tuple(text if index == message_at else gr.skip() for index in range(outputs))

    def decorate(handler: Callable) -> Callable:
        if inspect.isgeneratorfunction(handler):  # Gradio streams a generator's updates
            @functools.wraps(handler)
            def updates(*args: Any, **kwargs: Any) -> Any:
                try:
                    yield from handler(*args, **kwargs)
                except PipelineError as error:
                    yield refusal(error, _here(args))

            return updates

        @functools.wraps(handler)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            try:
                return handler(*args, **kwargs)
            except PipelineError as error:
                return refusal(error, _here(args))

        return wrapper

    return decorate(fn) if fn is not None else decorate


def _here(args: tuple) -> str | None:
    """The tab a handler's messages show on: its handlers object's `here` ("Dataset tab"), or None."""
    here = getattr(args[0], "here", None) if args else None
    return here if isinstance(here, str) else None


class TabHandlers:
    """The handlers of one tab: they hold the app's state (`ui.state.AppState`, given) and name the tab their
    messages show on (`here`, read by `ui_errors`)."""

    here: str | None = None
    """The tab this handler's messages show on ("Dataset tab"): they never point to it (`ui_errors`); None:
    messages may point to any tab."""

    def __init__(self, state: Any):
        self.state = state

    @property
    def ws(self) -> Workspace:
        """The app's workspace (`AppState.ws`): where the samples, the dataset and the runs live."""
        return self.state.ws


_MODELS_CONFINED_TO: list[Path] = []
"""The workspace a studio shared beyond this computer is confined to (set by `AppState(shared=True)`,
`confine_model_folders`): a model folder typed into the Model box must lie inside it too."""


def confine_model_folders(workspace_root: Path | None) -> None:
    """From now on, `model_text` refuses a local model folder outside `workspace_root` (None: no limit).
    The app serves one workspace per process, so this is set once, when its `AppState` is made."""
    _MODELS_CONFINED_TO[:] = [Path(workspace_root)] if workspace_root is not None else []


def model_text(value: str | None) -> str:
    """The Model box's value as a hub id or a folder: surrounding spaces and one pair of matching quotes
    removed (a pasted path often brings them; " /home/me/model " was taken for a hub id and answered with
    a download command for it). Nothing else changes: `./models/x` stays a relative folder.

    Raises `ConfigError` (`pipeline.access.accounts.confine_path`) for a local folder outside the workspace while
    the studio is shared beyond this computer (`confine_model_folders`); hub ids are not paths.
    """
    text = str(value or "").strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "\"'":
        text = text[1:-1].strip()
    if text and _MODELS_CONFINED_TO:
        from pipeline.access.accounts import confine_path
        from pipeline.model.hub import is_local_model

        if is_local_model(text):
            return str(confine_path(text, _MODELS_CONFINED_TO[0]))
    return text


def typed_path(text: str | None) -> str:
    """A path as a person pastes it into a text box, as the file system names it: surrounding spaces
    and one pair of matching quotes removed (Windows' "Copy as path" adds double quotes, a file dragged
    from a Linux or macOS file manager or copied from a terminal may come in single quotes), a
    `file://` address (a file dragged into the box) turned into its path, and `~` expanded. "" stays "".
    """
    from urllib.parse import unquote, urlparse

    path = (text or "").strip()
    if len(path) >= 2 and path[0] == path[-1] and path[0] in "\"'":
        path = path[1:-1].strip()
    if path.lower().startswith("file://"):
        path = unquote(urlparse(path).path)
    return str(Path(path).expanduser()) if path else ""


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
            value = model_text(value) if name == "model" else str(value).strip()
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
    """A run's `config.json` as a dict ({} when the run has none yet; `pipeline.training.run_folder.run_settings`)."""
    from pipeline.training.run_folder import run_settings as settings_of

    return settings_of(ws, run_name)


def chat_messages(turns: list[dict]) -> list[dict]:
    """`gr.Chatbot` messages of dialogue turns: a learner clip shows as a playable file, then its text."""
    out = []
    for turn in turns or []:
        if turn.get("role") == "tutor":
            out.append({"role": "assistant", "content": turn.get("text") or ""})
            continue
        if turn.get("audio"):
            out.append({"role": "user", "content": {"path": str(turn["audio"])}})
        if turn.get("text"):
            out.append({"role": "user", "content": turn["text"]})
    return out


def dataset_sentence(report: dict | None, where_left_out: str = "see the Dataset tab", here: str | None = None) -> str:
    """The built dataset in a teacher's words, from its build report (`pipeline.data.dataset.load_build_report`):
    "65 recordings from 3 learners: 42 to train on, 22 to test the tutor with, 1 left out (see the Dataset tab)."
    A recording is one library sample (a dialogue with several clips is one), so the count is every sample
    the build read (kept and left out), the same count the Samples tab's summary gives
    (`ui.samples_view.library_markdown`); the learners are those of the kept rows and of the rows left out.
    `where_left_out` says where the left-out rows are listed (the Dataset tab itself says "listed below").
    None (no build yet) gives the sentence that says to build one (`here`: on the Dataset tab, with the
    button below rather than the tab)."""
    if not report:
        if here == "Dataset tab":
            return "No dataset yet: click **Build dataset** below."  # the line under it says what a build does
        return "No dataset yet: build one on the **2 · Dataset** tab (it splits your recordings into training and test)."
    splits = report.get("splits") or {}
    train, held_out = int(splits.get("train") or 0), int(splits.get("eval") or 0)
    excluded = report.get("excluded") or []
    learners = set().union(*(set(v) for v in (report.get("speakers") or {}).values()),
                           {e["speaker"] for e in excluded if e.get("speaker")})
    who = f" from {plural(len(learners), 'learner')}" if learners else ""
    text = f"**{plural(train + held_out + len(excluded), 'recording')}{who}**: {train} to train on, " + (
        f"{held_out} to test the tutor with" if held_out else "none kept apart to test the tutor with")
    return text + (f", {len(excluded)} left out ({where_left_out})." if excluded else ".")


def dataset_family_note(report: dict | None, model: str | None) -> str:
    """A warning when the built dataset (its build `report` records the model it was built with) was built for
    another model family than `model`, the one picked: each family counts a clip's tokens its own way, so the
    rows kept and left out are the other family's; it points to **Build dataset**. "" when they match, or
    nothing is built (`pipeline.model.catalog.other_family`)."""
    from pipeline.model.catalog import other_family

    families = other_family((report or {}).get("model"), model_text(model) if model else None)
    if families is None:
        return ""
    built, picked = families
    return (f"⚠ The dataset was built for **{built.label}**, and the model picked is **{picked.label}**: click "
            f"**Build dataset** (Dataset tab) to build it again for {picked.label}. Each model counts a "
            "recording's length its own way, so the rows kept and left out differ.")


def built_report(ws: Workspace) -> dict | None:
    """The last build's report, or None when no dataset is built (`pipeline.data.dataset.load_build_report`)."""
    from pipeline.data.dataset import load_build_report

    try:
        return load_build_report(ws)
    except (PipelineError, OSError, ValueError):
        return None


LOADING = "*Reading the workspace…*"
"""What a text that the page fills on (re)load says until its first real reading: never the empty-state text
("No recordings yet") before the data is known."""


def filled_on_load(component: Any, read: Callable[[], Any]) -> Any:
    """`component` (built with a loading value, e.g. `LOADING`) filled by `read()` each time the page (re)loads.

    Gradio's own `value=read` calls `read()` once when the page is BUILT and shows that value on every page load
    until the load event has read it again (15-19 s on a busy machine): an empty library's "No recordings yet"
    stayed on screen after samples were added. Here the page shows the loading value until the first reading."""
    component.attach_load_event(read, None)
    return component


def cleared(*values: Any) -> Callable[[], Any]:
    """A handler that returns `values` (one value alone when there is one): wired to run first when an
    action starts (`button.click(cleared(...), outputs=...).then(action, ...)`), it clears the results the
    action replaces, so a message from the previous action never stands beside the new one."""
    def clear() -> Any:
        return values[0] if len(values) == 1 else values

    return clear


def whole_number_in_range(value: Any, low: int, high: int, label: str) -> int:
    """`value` (a box's number) as an int in [low, high]; raises `ConfigError` naming the box, the value and the
    allowed range otherwise (what `range_note` shows beside the box).

    The app's number boxes carry no `minimum`/`maximum` of their own: Gradio would refuse an out-of-range
    value before any handler runs, with a toast and a red "Error" badge on every output of the event."""
    from pipeline.errors import ConfigError

    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ConfigError(f"**{label}** must be a whole number from {low} to {high}, got {value!r}; "
                          f"type a number in that range.") from None
    if not number.is_integer() or not low <= number <= high:
        raise ConfigError(f"**{label}** must be a whole number from {low} to {high}, got {number:g}; "
                          f"type a number in that range.")
    return int(number)


def share_in_range(value: Any, low: float, high: float, label: str) -> float:
    """`value` (a box's number) as a float in [low, high]; raises `ConfigError` naming the box, the value and
    the allowed range otherwise (as `whole_number_in_range`, for a share such as 0.2)."""
    from pipeline.errors import ConfigError

    try:
        number = float(value)
    except (TypeError, ValueError):
        number = float("nan")
    if not low <= number <= high:  # NaN fails too
        raise ConfigError(f"**{label}** must be a number from {low:g} to {high:g}, got {value!r}; type a number in "
                          "that range (0.2 keeps a fifth of the recordings apart).")
    return number


def range_note(low: float, high: float, label: str,
               check: Callable[[Any, Any, Any, str], Any] | None = None) -> Callable[[Any], str]:
    """A `.change` handler for a number box: "" while its value passes `check` (default
    `whole_number_in_range`) for [low, high], else a "✗" line saying the allowed range (shown in a
    Markdown right under the box)."""
    def note(value: Any) -> str:
        try:
            (check or whole_number_in_range)(value, low, high, label)
        except PipelineError as error:
            return f"✗ {error}"
        return ""

    return note


def setting_message(name: str, value: Any) -> str:
    """The message shown under the number box of `TrainConfig` field `name`: "" when `value` is allowed,
    else what is wrong and the allowed range, from the checks the command line runs (`TrainConfig.validate`,
    every other setting at its default; a patience is checked as if keep-best were ticked, the box it goes with)."""
    import re

    if value is None or value == "":
        return "✗ Type a number here."
    context = {"keep_best": True} if name == "early_stopping_patience" else {}
    try:
        config_from_values({name: value, **context})
    except PipelineError as error:  # where the box is goes without saying right under it
        return "✗ " + re.sub(r" \((?:Memory|Train) tab[^)]*\)", "", app_wording(str(error)), count=1)
    return ""


def as_it_grows(call: Callable[..., Any], *args: Any, **kwargs: Any):
    """Run `call(*args, on_text=..., **kwargs)` (a pipeline function that reports its answer as it grows,
    e.g. `pipeline.inbox.practice.answer_attempt`) in a thread of its own and yield `(text, None)` each
    time the answer grows (`text`: what `on_text` was called with; several arguments come as a tuple),
    then `(None, result)`. Updates that arrive faster than they are shown are merged (the latest wins).
    Raises what `call` raised. A Gradio generator handler turns each into an update of the page. Closed
    before the end (the page went away), the next `on_text` raises in `call`'s thread, which cancels
    the answer (`pipeline.tutor.infer.PendingFeedback.feedback`) and so ends `call` without a result."""
    import queue
    import threading

    updates: queue.Queue = queue.Queue()
    left = threading.Event()

    def heard(*texts: Any) -> None:
        if left.is_set():
            raise _Left("the page stopped listening")
        updates.put(("text", texts[0] if len(texts) == 1 else texts))

    def run() -> None:
        try:
            updates.put(("done", call(*args, on_text=heard, **kwargs)))
        except BaseException as error:  # noqa: BLE001 - raised again in the caller's thread
            updates.put(("error", error))

    threading.Thread(target=run, name="answer", daemon=True).start()
    try:
        while True:
            kind, value = updates.get()
            while kind == "text" and not updates.empty():  # show only the latest text
                kind, value = updates.get()
            if kind == "error":
                raise value
            if kind == "done":
                yield None, value
                return
            yield value, None
    finally:
        left.set()


class _Left(Exception):
    """Raised in an answer's thread when the page no longer listens (`as_it_grows` was closed)."""


def export_preview(ws: Workspace, run: str | None) -> dict:
    """`pipeline.export.tutor.export_preview` for `run` (its base model's merged size, family, whether its GGUF
    hears), or {} when no run is picked or it cannot be read."""
    from pipeline.export.tutor import export_preview as preview_of

    try:
        return preview_of(ws, run) if run else {}
    except PipelineError:
        return {}


def export_choices(ws: Workspace, run: str | None, preview: dict | None = None) -> list[tuple[str, str]]:
    """The Try tab's export choices for `run`, each led by what it is for, the format's name in brackets, with
    this run's own figures (`pipeline.export.tutor.export_preview`): the merged model's size from the run's base
    (a tiny test model's MB, not E2B's GB; `pipeline.units.format_bytes`), and the Ollama / llama.cpp file only
    for a run whose GGUF hears (Gemma 4); a Gemma 3n run is told it is not offered, and why, in the label of no
    choice (`export_choices_note`). No run, or one that cannot be read: the choices without figures.
    `preview`: the run's `export_preview` when the caller already read it. Returns `gr.Radio` choices,
    `(label, value)` with values adapter / merged / bundle / gguf."""
    from pipeline.units import format_bytes

    preview = export_preview(ws, run) if preview is None else preview
    size = f", {format_bytes(preview['merged_bytes'])} for this tutor" if preview.get("merged_bytes") else ""
    choices = [
        ("To share: the small learned part only, for a computer that has the same base model (adapter zip)", "adapter"),
        (f"To run with Python anywhere: the whole tutor in one folder{size} (merged model)", "merged"),
        ("To train on a rented GPU machine or Google Cloud: these settings and recordings in one archive "
         "(cloud job bundle, with the commands for a GPU machine and for Vertex AI)", "bundle"),
    ]
    if preview.get("gguf") or not preview.get("family"):
        only = "" if preview.get("gguf") else ", Gemma 4 tutors only"
        choices.append((f"For Ollama / LM Studio / llama.cpp on students' laptops{only} (GGUF file)", "gguf"))
    if preview.get("family") and not preview.get("gguf"):
        from pipeline.export.gguf import TEXT_ONLY

        choices.append((f"For llama.cpp, {TEXT_ONLY}: it reads typed questions only (GGUF file without audio)",
                        "gguf-text-only"))
    return choices


def quant_choices(preview: dict | None) -> list[tuple[str, str]]:
    """The GGUF export's weight types the app offers (`pipeline.export.gguf.OFFERED_QUANTS`), each with its
    expected size for this run (`expected_gguf_bytes` of its merged size; no size when unknown) and what it is
    for, q8_0 first (the default). `gr.Radio` choices `(label, value)`."""
    from pipeline.export.gguf import LONG_CLIP_S, OFFERED_QUANTS, expected_gguf_bytes
    from pipeline.units import format_bytes

    merged = (preview or {}).get("merged_bytes")
    why = {"q8_0": "closest to the tutor you tried here (default)", "q5_k_m": "smaller, still close",
           "q4_k_m": f"smallest; not for recordings over {LONG_CLIP_S:g} s", "f16": "unquantized, biggest"}
    return [(f"{q}: {why[q]}" + (f", about {format_bytes(expected_gguf_bytes(merged, q))}" if merged else ""), q)
            for q in OFFERED_QUANTS]


def export_choices_note(ws: Workspace, run: str | None, preview: dict | None = None) -> str:
    """Under the export choices: why a run has no Ollama / llama.cpp choice (its family's audio does not run
    there: Gemma 3n, `pipeline.export.gguf.GEMMA3N_DEAF`), "" otherwise (Markdown); `preview` as for
    `export_choices`."""
    from pipeline.export.gguf import TEXT_ONLY

    preview = export_preview(ws, run) if preview is None else preview
    if preview.get("family") and not preview.get("gguf"):
        return (f"No file for Ollama or LM Studio: **{run}** is a {preview['family']} tutor, and they cannot hear "
                f"with {preview['family']} yet. Train a tutor on Gemma 4 for one. The llama.cpp file offered is "
                f"{TEXT_ONLY}.")
    return ""
