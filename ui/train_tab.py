"""Tab 4, Train: start, watch, stop and resume a run that lives in its own process (widgets and handlers;
their text and figures are `ui.train_view`'s).

The app reaches the trainer only through the run folder (`pipeline.training.runs`: start, stop, list;
`pipeline.training.run_folder.read_run`: one read of everything shown about a run); it never imports
the trainer and never opens a run's files itself. A timer polls the run folder while a run is alive,
and a reopened page re-attaches to the running job.
"""

from __future__ import annotations

import time
from types import SimpleNamespace
from typing import Any

import gradio as gr

from pipeline.config import LR_SCHEDULES
from pipeline.errors import PipelineError, TrainingError
from ui import train_view as view
from ui.memory_view import model_words
from ui.common import (TabHandlers, CANCELLED, DEFAULTS, LOADING, POLL_SECONDS, built_report, config_from_values, confirm_js,
                       dataset_family_note, dataset_sentence, error_panel, filled_on_load, list_runs, plural,
                       setting_message, ui_errors)
from pipeline.units import format_bytes
from ui.state import AppState
from ui.wording import RESUME_ANYWAY_LABEL, app_lines, app_wording, not_here, readable_log, stop_words


EPOCHS_LABEL = "Passes over your recordings (epochs)"
"""The Train tab's label of `--epochs`, in a teacher's words first (`ui.wording.SETTING_WIDGETS`)."""
LOG_LINES = 12
"""Lines of the training log shown under "Log (last lines)"."""
LOG_SOURCE_LINES = 200
"""Lines of train.log (else process.log) read for it: `readable_log` leaves some out (tracebacks, noise)."""
DELETE_RUN_QUESTION = ("Delete run {} with its checkpoints, tutor (adapter), logs and evaluations? "
                       "This cannot be undone.")
RUNS_COLUMN_WIDTHS = ["13%", "9%", "8%", "9%", "9%", "10%", "13%", "29%"]
"""Past runs table: run, state, steps, final loss, eval loss, peak memory, model, note. Fixed widths keep
the numbers on one line however long a note is (the note wraps)."""


class TrainHandlers(TabHandlers):
    """The Train tab's handlers: the settings summary, start/stop/resume, the timer's poll, the run lists."""

    here = "Train tab"

    def __init__(self, state: AppState):
        super().__init__(state)
        self._estimates: dict[str, dict | None] = {}  # run -> its estimate, for runs whose result.json has none
        self._today: dict[tuple, int | None] = {}  # (run, end) -> its estimate now (`_today_estimate`)
        self._loads: dict[tuple, float | None] = {}  # (run, process start) -> measured loading here (`_expected_load`)

    def headline(self, model: str | None = None) -> str:
        """The tab's first line, about the teacher's data: the built dataset's recordings, learners and
        split, and the tutors trained so far (Markdown). With `model` (the model picker's), the tutors counted
        are that model's, and those of other models are said apart: "1 tutor of tiny-gemma3n trained so far
        (2 more of other models)". A tutor is trained when its run completed; a run stopped part-way is said
        apart, so Stop and Resume never change the count of trained tutors."""
        runs = list_runs(self.ws)
        running = [r["run"] for r in runs if r["alive"]]
        done = [r for r in runs if r["state"] == "completed" and not r["alive"]]
        mine = [r for r in done if self._same_model(r, model)] if model else done
        others = len(done) - len(mine)
        stopped = [r for r in runs if r["state"] == "stopped" and not r["alive"]
                   and (not model or self._same_model(r, model))]
        of = f" of {model_words(model)}" if model else ""
        tutors = (f" {plural(len(mine), 'tutor')}{of} trained so far" if mine
                  else f" No tutor{of} has finished training yet" if runs else " No tutor trained yet")
        if others:
            tutors += f" ({others} {'more' if mine else 'tutor' + ('s' if others > 1 else '')} of other models)"
        if stopped:
            tutors += f", {len(stopped)} stopped part-way (**Resume** continues {'it' if len(stopped) == 1 else 'them'})"
        tutors += f"; **{running[0]}** is training now." if running else "."
        return dataset_sentence(built_report(self.ws)) + tutors

    def _same_model(self, run: dict, model: str | None) -> bool:
        """Whether `run` (a `list_runs` entry) trained `model` (the picker's; a local folder by its path)."""
        from pathlib import Path

        from ui.common import model_text, run_settings

        trained = (run.get("result") or {}).get("model") or run_settings(self.ws, run["run"]).get("model")
        try:
            wanted = model_text(model)
        except PipelineError:
            return False
        if not trained or not wanted:
            return False
        same = str(trained) == wanted
        if not same and (Path(str(trained)).is_dir() or Path(wanted).is_dir()):
            same = Path(str(trained)).expanduser().resolve() == Path(wanted).expanduser().resolve()
        return same

    def settings_summary(self, *values: Any, remember: bool = True) -> str:
        """One line with the settings the next run will use (or what is wrong with them).

        Valid settings are also remembered (`remember_settings`) unless `remember` is False, so a
        reload restores them.
        """
        try:
            config = config_from_values(values)
        except PipelineError as error:
            return f"✗ {app_wording(str(error), here=self.here)} (the last valid settings are kept)"
        line = view.settings_markdown(config.to_dict()) + "\n\n" + self.forecast(config)
        other = dataset_family_note(built_report(self.ws), config.model)  # built for the other model family
        line += f"\n\n{other}" if other else ""
        try:
            if remember:
                self.state.remember_settings(config)
        except OSError as error:
            return line + f"\n\n⚠ Could not save the settings: {error}"
        return line

    def forecast(self, config) -> str:
        """Before a run starts: the precision it will compute in and why, and how long it will take from
        the step time measured on this machine (`pipeline.calibration.forecast_run`), its loading from this
        workspace's runs of these settings when there are any (`measured_load_seconds`: the same guess the
        watched run's progress line gives while it loads)."""
        from pipeline.calibration import forecast_run
        from pipeline.config import likely_device

        from pipeline.training.runs import measured_load_seconds

        device = likely_device() if config.device == "auto" else config.device
        report = built_report(self.ws) or {}
        plan = forecast_run(config, report.get("length_stats"), device)
        if plan.get("load"):  # the calibration's (or a run's) load of this model and quantization, said so
            plan = {**plan, "load_from": view.load_from_words(plan["load"].get("source"), plan["load"].get("measurements"))}
        here = measured_load_seconds(self.ws, config.to_dict())  # as the watched run's loading guess (`_expected_load`)
        if here:
            plan = {**plan, "load_seconds": here["seconds"], "load": None,
                    "load_from": view.load_from_words("run", here["measurements"]),
                    "total_seconds": here["seconds"] + plan["seconds"] if plan.get("seconds") is not None else None}
        return view.forecast_markdown(plan, device, self.ws)

    def page_settings_summary(self, restored: bool, *values: Any):
        """The page's "Next run" line: `settings_summary` once the page has restored the saved settings
        (`restored`, set after `restore_settings` at page load). Before that the widgets still hold the
        defaults: the line is left as it is and nothing is remembered, so an early event (a tab click, a
        change while the page loads) can neither show nor save the defaults over the saved settings."""
        if not restored:
            return gr.skip()
        return self.settings_summary(*values)

    @ui_errors(message_at=1, outputs=5)
    def start_training(self, run_name: str, *values: Any):
        """Start a training run in its own process; returns (current run, status, timer on, failure, seen rows)."""
        from pipeline.training.runs import start_run

        from pipeline.training.runs import active_run

        config = config_from_values(values)
        refuse_a_device_not_here(config.device)
        name = (run_name or "").strip() or time.strftime("run-%Y%m%d-%H%M%S")
        self.ws.run_dir(name)  # validates the name before anything is written
        if run_name and active_run(self.ws) == name:  # Start clicked again (a double click): it is that run
            return (name, f"**{name}** is already training (started by the first click); watching it.",
                    gr.Timer(active=True), gr.skip(), gr.skip())
        released = start_run(self.ws, name, config).get("released")  # a Try/Judge tutor let go of the GPU
        return (name, view.started_line(name) + (f" {released}" if released else ""), gr.Timer(active=True), "", -1)

    @ui_errors(message_at=0, outputs=1)
    def stop_training(self, run_name: str) -> str:
        """Ask the run to save a checkpoint and the adapter, and stop at the next step."""
        from pipeline.training.runs import request_stop

        if not run_name:
            raise TrainingError("No run is being watched, so there is nothing to stop; start one first.")
        status = request_stop(self.ws, run_name)
        if not status["alive"]:
            return f"**{run_name}** is not running (it is {status['state'].replace('_', ' ')})."
        return (f"Asked **{run_name}** to stop: it saves a checkpoint and the adapter at the end of the current "
                "step, then ends. **Resume** continues it later.")

    @ui_errors(message_at=1, outputs=6)
    def resume_training(self, run_name: str, allow_dataset_change: bool = False):
        """Continue a stopped run from its last checkpoint; returns (current run, status, timer on, failure, seen,
        the "Resume even though the dataset was rebuilt" box unticked: it applied to this resume only).

        `allow_dataset_change` (the box beside Resume): continue although the dataset was rebuilt with
        other rows since the run started (`--allow-dataset-change`; the run records the change)."""
        from pipeline.training.runs import start_run

        if not run_name:
            raise TrainingError("No run picked to resume: choose a stopped run in **Stopped run to continue** "
                                "first (runs that stopped or failed after a checkpoint are listed there).")
        released = start_run(self.ws, run_name, None, resume=True, allow_dataset_change=bool(allow_dataset_change)).get("released")
        return (run_name, view.started_line(run_name, resumed=True) + (f" {released}" if released else ""),
                gr.Timer(active=True), "", -1, gr.update(value=False))

    @ui_errors(message_at=0, outputs=4)
    def delete_run(self, run_name: str):
        """Delete a run that is not training (`pipeline.training.runs.delete_run`); returns (status, runs
        table, resume dropdown, delete dropdown). `CANCELLED`: the browser's confirm said no."""
        from pipeline.training.runs import delete_run

        if run_name == CANCELLED:
            return ("Nothing deleted.",) + (gr.skip(),) * 3
        if not (run_name or "").strip():
            raise TrainingError("No run picked: choose the run to delete in **Run to delete** first.")
        deleted = delete_run(self.ws, run_name.strip())
        size = format_bytes(deleted["bytes"]) if deleted["bytes"] else "nothing"
        table, resume, _adapters = self._run_lists()
        return (f"Deleted **{deleted['run']}** ({deleted['state']}; {size} freed).", table, resume,
                self.delete_choices(None))

    def resume_choices(self, selected: str | None):
        """The "Stopped run to continue" list (`resumable_runs`), `selected` picked when it is in it: after Stop,
        the run just stopped is listed and picked."""
        return self._run_lists(selected=selected)[1]

    def delete_choices(self, selected: str | None):
        """The runs that can be deleted (every run whose process is not alive), keeping `selected` if it still is."""
        names = [r["run"] for r in list_runs(self.ws) if not r["alive"]]
        return gr.Dropdown(choices=names, value=selected if selected in names else None)

    def pick_run(self, evt: gr.SelectData):
        """A click in the Past runs table: that run becomes the one to delete; (delete choice, cleared status)."""
        row = evt.row_value if evt is not None and evt.row_value else None
        return (gr.update(value=str(row[0])) if row else gr.skip()), ""

    def poll(self, run_name: str, seen: int | None, restored: bool = False, *values: Any):
        """Timer tick: read the run folder once (`read_run`); returns (progress, curves, memory, log, failure,
        seen, timer, runs table, resume choice, Try's run, headline, next run's line, status line): once the run
        has ended, the headline (it named the run as training), the "Next run" line (its forecast now has this
        run's measured times; `page_settings_summary` of the page's settings `values`, once `restored`) and the
        line under the buttons (it said the run was starting: `view.ended_line` replaces it) again."""
        from pipeline.training.run_folder import read_run

        if not run_name:
            return (gr.skip(),) * 5 + (seen, gr.Timer(active=False)) + (gr.skip(),) * 6
        try:
            run = read_run(self.ws, run_name, log_lines=LOG_SOURCE_LINES, estimates=self._estimates)
        except PipelineError as error:
            return (gr.skip(),) * 4 + (error_panel(error, here=self.here), seen, gr.Timer(active=False)) + (gr.skip(),) * 6
        rows, alive = run.rows, run.alive
        return (
            view.run_progress_html(run, *(self._expected_load(run) if run.loading_s is not None else (None, ""))),
            view.loss_curves(rows) if len(rows) != seen or not alive else gr.skip(),
            view.run_memory_markdown(run, self._today_estimate(run)),
            readable_log(run.log_tail, LOG_LINES, here=self.here),
            view.failure_markdown({"status": run.state, "reason": app_wording(run.reason, here=self.here),
                                   "suggestions": [not_here(line, self.here) for line in app_lines((run.result or {}).get("suggestions") or [])]}),
            len(rows),
            gr.Timer(active=alive),
            # While it runs, the Past runs table is re-read only when a new progress row arrived.
            *(((self.runs_table() if len(rows) != seen else gr.skip()),
               self.resume_choices(run_name) if run.state == "stopping" else gr.skip(), gr.skip()) if alive
              else self._run_lists(selected=run_name)),
            # The headline counts the tutors and names the one training: again once the run has ended.
            self.headline(values[0] if values else None) if not alive else gr.skip(),
            self.page_settings_summary(restored, *values) if not alive and values else gr.skip(),
            view.ended_line(run.run, run.state) if not alive else gr.skip(),
        )

    def _today_estimate(self, run) -> int | None:
        """The whole run's estimate in bytes for an ended run's settings on its device now
        (`pipeline.memory.run_compare.run_estimate`, this computer's calibration as the Memory tab uses it,
        grown by the run's own measurements since its estimate was made), computed once per ended run; None
        while it runs, or when it cannot be estimated."""
        from pipeline.config import TrainConfig
        from pipeline.memory.run_compare import run_estimate

        device = (run.estimate or {}).get("device")
        if run.alive or not run.settings or device not in ("cpu", "cuda", "mps"):
            return None
        key = (run.run, (run.result or {}).get("finished_at"))
        if key not in self._today:
            try:
                today = run_estimate(self.ws, TrainConfig.from_dict(run.settings), device, on_error=lambda error: None)
            except PipelineError:
                today = None
            self._today[key] = (today or {}).get("total_bytes")
        return self._today[key]

    def _expected_load(self, run) -> tuple[float | None, str]:
        """(Seconds loading took here before for the watched run's model and precision, or None; where that
        comes from in words, `view.load_from_words`): measured by this workspace's runs of those settings
        (`pipeline.training.runs.measured_load_seconds`, read once per watched run), else by this computer's
        calibration's load of the same model and quantization (`pipeline.calibration.expected_load_seconds`)."""
        from pipeline.calibration import expected_load_seconds
        from pipeline.config import likely_device
        from pipeline.training.runs import measured_load_seconds

        settings = run.settings or {}
        if not settings.get("model"):
            return None, ""
        key = (run.run, (run.result or {}).get("started_at"))  # once per process of the run
        if key not in self._loads:
            here = measured_load_seconds(self.ws, settings)
            self._loads[key] = (here["seconds"], view.load_from_words("run", here["measurements"])) if here else None
        if self._loads[key]:
            return self._loads[key]
        device = likely_device() if settings.get("device", "auto") == "auto" else settings["device"]
        load = expected_load_seconds(settings["model"], settings.get("quantization", "none"), device,
                                     bool(settings.get("low_memory_heap")))
        return (load["seconds"], view.load_from_words(load.get("source"), load.get("measurements"))) if load else (None, "")

    def runs_table(self):
        """Past runs with their results (newest first)."""
        return _runs_frame(list_runs(self.ws))

    def on_load(self):
        """Page (re)opened: re-attach to a running job (or show the latest run), list runs and adapters."""
        from pipeline.training.runs import active_run

        runs = list_runs(self.ws)
        active = active_run(self.ws)
        name = active or (runs[0]["run"] if runs else "")
        status = view.started_line(active, picked_up=True) if active else ""
        table, resume, adapters = self._run_lists()
        return name, gr.Timer(active=bool(active)), status, table, adapters, resume, -1

    def refresh_run_lists(self):
        """Runs table, stopped runs (to resume) and runs with an adapter (to try)."""
        return self._run_lists()

    def compare_choices(self, selected: list[str] | None):
        """The runs that can be overlaid (every run that logged progress), keeping the ticked ones."""
        names = [r["run"] for r in list_runs(self.ws) if r["progress_lines"]]
        return gr.Dropdown(choices=names, value=[n for n in (selected or []) if n in names])

    def compare_runs(self, names: list[str] | None):
        """The train and eval loss curves of the picked runs, overlaid in one figure."""
        from pipeline.training.run_folder import read_progress

        return view.compare_loss_curves({name: read_progress(self.ws, name) for name in names or []})

    def _run_lists(self, selected: str | None = None):
        """(runs table, resume dropdown, try dropdown: the runs with an adapter, then the Classical scorer (no
        fine-tuning), `ui.try_view.SCORER_CHOICE`); `selected` is preselected where it fits."""
        from ui.try_view import SCORER_CHOICE

        runs = list_runs(self.ws)
        resumable = resumable_runs(runs)
        adapters = [r["run"] for r in runs if r["has_adapter"]]  # a tutor to try, newest first
        return (
            _runs_frame(runs),
            gr.Dropdown(choices=resumable, value=selected if selected in resumable else None),
            gr.Dropdown(choices=[*adapters, SCORER_CHOICE],  # the classical scorer last: a tutor with no run trained
                        value=selected if selected in adapters else (adapters[0] if adapters else None)),
        )


def resumable_runs(runs: list[dict]) -> list[str]:
    """The runs **Resume** can continue, as `list_runs` gives them: stopped or failed after a checkpoint, and
    one that is stopping (Stop was clicked: it saves a checkpoint as it ends), so the run just stopped is
    offered at once, not after a reload."""
    return [r["run"] for r in runs
            if r["state"] == "stopping" or (r["state"] in ("stopped", "failed") and r["has_checkpoint"])]


def _runs_frame(runs: list[dict]):
    """The Past runs table, each run's note in the app's words (plain text: a table cell shows no Markdown).
    A run whose process is alive has no note: its result.json still holds how the previous process ended
    ("stopped by request" while the resumed run trains), which is no longer true."""
    return view.runs_frame([{**run, "reason": None if run.get("alive")
                             else app_wording(stop_words(run.get("reason")), markdown=False, here=TrainHandlers.here)}
                           for run in runs])


def refuse_a_device_not_here(device: str) -> None:
    """Raise `ConfigError` before a run starts on a device this computer does not have: the Memory tab's
    machine presets (an NVIDIA GPU, a Mac) set the device to answer "would it fit there?", and a run
    started with it failed only once its process looked for that device (`pipeline.config.likely_device`,
    torch-free)."""
    from pipeline.config import likely_device
    from pipeline.errors import ConfigError

    here = likely_device()
    if device in ("cuda", "mps") and device != here:
        names = {"cuda": "an NVIDIA GPU (CUDA)", "mps": "an Apple GPU (MPS)"}
        raise ConfigError(
            f"Training runs on this computer, which has no {names[device].split(' (')[0][3:]}: the settings say "
            f"Device **{device}**, set by the Memory tab's **Machine** to ask whether the fine-tune fits "
            f"{names[device]}. Pick **This computer** there (or Device auto under Advanced settings) to train here, "
            "or take the run to that machine (Try tab: *Take the tutor out*, cloud job bundle).")


def _message_line(name: str) -> gr.Markdown:
    """The line under setting `name`'s number box where `setting_message` answers it."""
    return gr.Markdown(elem_classes=["field-message"], elem_id=f"{name.replace('_', '-')}-message")


def _number_box(messages: dict[str, gr.Markdown], name: str, **number_kwargs: Any) -> gr.Number:
    """Setting `name`'s number box (`gr.Number` with `number_kwargs`, its value the default) in its own
    column, with its message line under it, stored in `messages[name]`."""
    with gr.Column(min_width=160):
        number = gr.Number(value=getattr(DEFAULTS, name), **number_kwargs)
        messages[name] = _message_line(name)
    return number


def _advanced_settings(messages: dict[str, gr.Markdown]) -> dict[str, Any]:
    """The "Advanced settings" accordion: the machine-learning settings a teacher can leave at their
    defaults (learning rate, schedule, max steps, LoRA alpha and dropout, evaluation and checkpoint
    intervals, keep-best); returns its widgets by `TrainConfig` field name (number boxes' message lines
    go into `messages`)."""
    d = DEFAULTS
    with gr.Accordion("Advanced settings", open=False, elem_id="train-advanced"):
        gr.Markdown("Machine-learning settings: the defaults serve. Each line says what it changes for you.")
        with gr.Row():
            learning_rate = _number_box(messages, "learning_rate", label="Learning rate", elem_id="learning-rate",
                                        info="How big each learning step is: higher learns faster but can become "
                                             "unstable (the loss jumps); lower is steadier but slower.")
            lr_schedule = gr.Dropdown(list(LR_SCHEDULES), value=d.lr_schedule, label="Schedule",
                                      info="How the learning rate changes over the run (linear: down to 0 at the end).")
            max_steps = _number_box(messages, "max_steps", precision=0, label="Max steps (-1: use epochs)",
                                    elem_id="max-steps",
                                    info="Stop after this many steps instead of the passes above: a short try-out.")
        with gr.Row():
            lora_alpha = _number_box(messages, "lora_alpha", precision=0, label="LoRA alpha", elem_id="lora-alpha",
                                     info="How strongly the learned change (the LoRA adapter) acts; "
                                          "usually twice the LoRA rank (Memory tab).")
            lora_dropout = _number_box(messages, "lora_dropout", label="LoRA dropout", elem_id="lora-dropout",
                                       info="Share of the adapter switched off at random each step (0-1): "
                                            "guards against learning a few recordings by heart.")
            eval_steps = _number_box(messages, "eval_steps", precision=0, label="Eval every N steps",
                                     elem_id="eval-steps",
                                     info="How often the test recordings are scored during training "
                                          "(the eval loss line); more often: a little slower.")
            save_steps = _number_box(messages, "save_steps", precision=0, label="Checkpoint every N steps",
                                     elem_id="save-steps",
                                     info="How often progress is saved; Resume continues from the last "
                                          "checkpoint. More often: less lost after a crash, more disk.")
        with gr.Row():
            keep_best = gr.Checkbox(value=d.keep_best, label="Keep the moment the tutor agreed best with the experts",
                                    elem_id="keep-best",
                                    info="At each evaluation the tutor also answers a few test recordings; the run "
                                         "keeps the point whose scores came closest to the experts', not just the "
                                         "last one. Costs that many answers (like Try) at each evaluation.")
            judge_clips = _number_box(messages, "judge_clips", precision=0, label="Test recordings answered each time",
                                      elem_id="keep-best-clips",
                                      info="More: a surer choice, a longer evaluation (one answer each).")
            early_stopping_patience = _number_box(messages, "early_stopping_patience", precision=0,
                                                  label="Stop after N checks without progress (0: never)",
                                                  elem_id="early-stopping-patience",
                                                  info="With the box ticked: saves time once the tutor stops improving.")
    return {"learning_rate": learning_rate, "lr_schedule": lr_schedule, "max_steps": max_steps, "lora_alpha": lora_alpha,
            "lora_dropout": lora_dropout, "eval_steps": eval_steps, "save_steps": save_steps, "keep_best": keep_best,
            "judge_clips": judge_clips, "early_stopping_patience": early_stopping_patience}


def train_tab(handlers: TrainHandlers, model: gr.components.Component | None = None) -> SimpleNamespace:
    """Lay out the Train tab and wire Stop and Resume; returns its widgets (start, the timer and the run
    lists also touch other tabs' widgets, so `build_ui` wires them). `model`: the model picker, whose tutors
    the headline counts (`TrainHandlers.headline`)."""
    d = DEFAULTS
    messages: dict[str, gr.Markdown] = {}  # a number setting's message line, under it (`setting_message`)
    with gr.Tab("4 · Train", id="train", elem_id="tab-train") as tab:
        headline = filled_on_load(gr.Markdown(LOADING, elem_id="train-headline"), handlers.headline)
        gr.Markdown("The tutor learns from your training recordings, using the model at the top of the page and the "
                    "Memory tab's settings. Training runs on its own: you can close this tab and come back.")
        with gr.Row():
            run_name = gr.Textbox(label="Run name (empty: run-DATE-TIME)", elem_id="run-name",
                                  info="A name to find this tutor again in Try and Judge.")
            epochs = _number_box(messages, "epochs", label=EPOCHS_LABEL, elem_id="epochs",
                                 info=f"More passes: longer training, closer to your feedback; too many and the tutor "
                                      f"repeats your training feedback word for word. {d.epochs:g} is a good start.")
        advanced = _advanced_settings(messages)
        settings_note = gr.Markdown(elem_id="settings-summary")
        with gr.Row():
            start_button = gr.Button("Start training", variant="primary", elem_id="start-training")
            stop_button = gr.Button("Stop (saves a checkpoint)", variant="stop", elem_id="stop-training")
        with gr.Row(equal_height=True):
            resume_choice = gr.Dropdown([], label="Stopped run to continue", elem_id="resume-choice",
                                        scale=3, allow_custom_value=True)
            resume_button = gr.Button("Resume", elem_id="resume-training", scale=1)
        allow_change = gr.Checkbox(False, label=RESUME_ANYWAY_LABEL, elem_id="resume-allow-change",
                                   info="Only when Resume is refused for a rebuilt dataset: the run goes on with "
                                        "the new rows and records the change.")
        current_run = gr.Textbox(label="Watching run", interactive=False, elem_id="current-run")
        train_status = gr.Markdown(elem_id="train-status")
        progress_out = gr.HTML(view.progress_html(0, 0, None, None, None), elem_id="train-progress")
        failure_out = gr.Markdown(elem_id="train-failure")
        with gr.Row():
            loss_plot = gr.Plot(show_label=False, elem_id="loss-plot")
            with gr.Column():
                train_memory = gr.Markdown(elem_id="train-memory")
                log_tail = gr.Textbox(label="Log (last lines)", lines=LOG_LINES, max_lines=LOG_LINES + 8, interactive=False,
                                      autoscroll=True, elem_id="log-tail")
        gr.Markdown("### Past runs")
        runs_df = gr.Dataframe(view.runs_frame([]), label="Runs", interactive=False, elem_id="runs-table", wrap=True,
                               column_widths=RUNS_COLUMN_WIDTHS)
        refresh_runs = gr.Button("Refresh list", size="sm")
        with gr.Row(equal_height=True):
            delete_choice = gr.Dropdown([], label="Run to delete", elem_id="delete-run-choice", scale=3,
                                        allow_custom_value=True,
                                        info="Click a run in the table, or pick it here. Deleting removes its "
                                             "checkpoints, tutor (adapter), logs and evaluations; a run that is "
                                             "training cannot be deleted.")
            delete_button = gr.Button("Delete run", variant="stop", elem_id="delete-run", scale=1)
        delete_status = gr.Markdown(elem_id="delete-run-status")
        with gr.Accordion("Compare runs: loss curves overlaid", open=False):
            compare = gr.Dropdown([], multiselect=True, label="Runs to overlay (train loss solid, eval loss dashed)",
                                  elem_id="compare-runs")
            compare_plot = gr.Plot(show_label=False, elem_id="compare-plot")
        seen_rows = gr.State(0)
        timer = gr.Timer(POLL_SECONDS, active=False)

    settings = {"epochs": epochs, **advanced}
    numbers = {name: settings[name] for name in messages}  # the number boxes, each with its message line
    for name, widget in numbers.items():
        widget.change(lambda value, name=name: setting_message(name, value), inputs=widget, outputs=messages[name],
                      show_progress="hidden")
    # The run asked to stop is the one to continue: the list shows it at once, picked (not after a reload).
    stop_button.click(handlers.stop_training, inputs=current_run, outputs=train_status).then(
        handlers.resume_choices, inputs=current_run, outputs=resume_choice, show_progress="hidden")
    for event in (tab.select, refresh_runs.click):
        event(handlers.compare_choices, inputs=compare, outputs=compare)
        event(handlers.delete_choices, inputs=delete_choice, outputs=delete_choice)
    picked = [model] if model is not None else None  # the headline counts the picked model's tutors
    tab.select(handlers.headline, inputs=picked, outputs=headline, show_progress="hidden")
    if model is not None:
        model.change(handlers.headline, inputs=picked, outputs=headline, show_progress="hidden")
    compare.change(handlers.compare_runs, inputs=compare, outputs=compare_plot)
    started = [current_run, train_status, timer, failure_out, seen_rows]
    # A resume starts a new process: the table's note of how the last one ended is no longer true.
    resume_button.click(handlers.resume_training, inputs=[resume_choice, allow_change],
                        outputs=[*started, allow_change]).then(handlers.runs_table, outputs=runs_df).then(
        handlers.headline, inputs=picked, outputs=headline, show_progress="hidden")
    runs_df.select(handlers.pick_run, outputs=[delete_choice, delete_status])
    deleted = delete_button.click(handlers.delete_run, inputs=delete_choice, js=confirm_js(DELETE_RUN_QUESTION),
                        outputs=[delete_status, runs_df, resume_choice, delete_choice]).then(
        handlers.headline, inputs=picked, outputs=headline, show_progress="hidden")
    return SimpleNamespace(
        tab=tab, settings_note=settings_note, run_name=run_name, start_button=start_button,
        resume_choice=resume_choice, current_run=current_run, train_status=train_status, timer=timer,
        seen_rows=seen_rows, runs_df=runs_df, refresh_runs=refresh_runs, headline=headline,
        # A deleted run leaves the Try tab's list too (`build_ui` chains the run lists' refresh on it).
        deleted=deleted,
        # The outputs of `start_training` / `resume_training`, in order.
        started=started,
        # The first seven outputs of `poll`, in order (the run lists follow: runs, resume, Try's run).
        poll_outputs=[progress_out, loss_plot, train_memory, log_tail, failure_out, seen_rows, timer],
        # This tab's setting widgets, by `TrainConfig` field name.
        settings=settings,
    )
