"""Tab 6, Judge: is run B better than run A and the base model, on clips none of them trained on?

Pick the base model and any runs; each is evaluated on the built dataset's eval split
(`pipeline.tutor.evaluate.evaluate_tutor`, then saved with `save_evaluation`) one after the other in a
worker thread, while the page shows a progress bar; Cancel stops at the next generated token and saves
nothing of the model being evaluated. The results (saved per dataset build, so a reopened page shows
them without re-running) appear as a headline table with one column per model, a scatter of expert
vs tutor total scores, and a per-clip table, largest disagreement first, whose selected row plays the
clip and shows the experts' feedback and every model's answer in full.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import gradio as gr

from pipeline.errors import EvaluationError, PipelineError
from ui import judge_view as view
from ui.common import error_panel, list_runs, model_text, run_settings, ui_errors
from ui.state import AppState

BASE, RUN = "base:", "run:"


class JudgeHandlers:
    """The Judge tab's handlers: what can be evaluated, run/cancel evaluations, show saved ones, one clip."""

    def __init__(self, state: AppState):
        self.state = state
        self._cancel = threading.Event()
        self._busy = threading.Lock()

    @property
    def ws(self):
        """The workspace whose dataset and runs are judged."""
        return self.state.ws

    def candidates(self, model: str | None) -> list[tuple[str, str]]:
        """(label, value) of what can be evaluated: the picked base model, the base models of the runs,
        then every run with an adapter. Values are `base:MODEL` or `run:NAME`."""
        runs = [r for r in list_runs(self.ws) if (Path(r["run_dir"]) / "adapter" / "adapter_config.json").is_file()]
        bases = [model_text(model)] if model_text(model) else []
        for run in runs:
            base = run_settings(self.ws, run["run"]).get("model")
            if base and str(base) not in bases:
                bases.append(str(base))
        choices = [(view.model_label({"model": base}), BASE + base) for base in bases]
        return choices + [(view.model_label({"run": r["run"]}), RUN + r["run"]) for r in runs]

    def refresh_choices(self, model: str | None, selected: list[str] | None):
        """The model checkboxes for the picked base `model`, keeping what is still offered ticked (the
        base model when nothing is). Runs when the page has restored its settings and when the model changes."""
        choices = self.candidates(model)
        values = [value for _, value in choices]
        kept = [v for v in (selected or []) if v in values] or values[:1]
        return gr.CheckboxGroup(choices=choices, value=kept)

    def offer_choices(self, model: str | None, selected: list[str] | None):
        """The model checkboxes with runs trained since (tab opened, Refresh). The ticks are left as the
        page has them when still offered, so a click made meanwhile is not undone."""
        choices = self.candidates(model)
        values = {value for _, value in choices}
        if all(v in values for v in selected or []):
            return gr.CheckboxGroup(choices=choices)
        return gr.CheckboxGroup(choices=choices, value=[v for v in selected or [] if v in values])

    def show_saved(self):
        """The saved evaluations of the current dataset build: (status, headline, scatter, clips table,
        clip rows, audio, clip details)."""
        from pipeline.tutor.evaluate import saved_evaluations, split_key

        try:
            key = split_key(self.ws, "eval")
        except PipelineError as error:
            return (error_panel(error), view.headline_frame([]), view.scatter_figure([]), view.clips_frame([], []), [],
                    None, view.clip_markdown(None))
        results = saved_evaluations(self.ws, key)
        order = sorted(results, key=lambda r: (r.get("run") is not None, str(r.get("run") or r.get("model"))))
        rows = view.clip_rows(order)
        labels = [view.model_label(r) for r in order]
        status = (f"{len(order)} saved evaluation(s) of this dataset's eval split (`{key}`)." if order else
                  f"No evaluation of this dataset's eval split (`{key}`) yet: tick models and press Evaluate.")
        if any(r.get("note") for r in order):
            status += "\n\n⚠ " + next(r["note"] for r in order if r.get("note"))
        first = rows[0] if rows else None
        return (status, view.headline_frame(order), view.scatter_figure(order), view.clips_frame(rows, labels), rows,
                self._audio(first), view.clip_markdown(first))

    def _audio(self, row: dict | None) -> str | None:
        from pipeline.tutor.evaluate import clip_audio_path

        path = clip_audio_path(self.ws, row["id"]) if row else None
        return str(path) if path else None

    def select_clip(self, rows: list[dict], evt: gr.SelectData):
        """A row of the per-clip table was selected: its audio and its full texts."""
        index = evt.index[0] if isinstance(evt.index, (list, tuple)) else evt.index
        row = rows[index] if rows and 0 <= int(index) < len(rows) else None
        return self._audio(row), view.clip_markdown(row)

    @ui_errors
    def cancel(self) -> str:
        """Ask the running evaluation to stop at its next generated token."""
        if not self._busy.locked():
            return "No evaluation is running."
        self._cancel.set()
        return "Cancelling: the evaluation stops at its next generated token and saves nothing of that model."

    def evaluate(self, selected: list[str] | None, max_new_tokens: float = 256):
        """Evaluate each ticked model in turn (a worker thread), yielding (progress, status, headline, scatter,
        clips table, clip rows, audio, clip details) as it goes; each finished model is saved and shown."""
        from pipeline.tutor.evaluate import evaluate_tutor, save_evaluation

        if not selected:
            yield _refused(EvaluationError("No model is ticked: tick at least one model to evaluate (the base "
                                           "model, a run, or both), then press Evaluate."))
            return
        if not self._busy.acquire(blocking=False):  # e.g. Evaluate pressed twice: the first one goes on
            yield _refused(EvaluationError("An evaluation is already running (its progress is above); wait for "
                                           "it, or press Cancel and then Evaluate."))
            return
        self._cancel.clear()
        progress = {"done": 0, "total": 0, "message": "starting", "finished": 0}
        failure: list[BaseException] = []

        def work() -> None:
            try:
                for index, choice in enumerate(selected):
                    run = choice[len(RUN):] if choice.startswith(RUN) else None
                    model = choice[len(BASE):] if choice.startswith(BASE) else None

                    def report(done: int, total: int, message: str, index=index) -> None:
                        progress.update(done=done, total=total, message=f"model {index + 1} of {len(selected)}: {message}")

                    result = evaluate_tutor(self.ws, model, run=run, max_new_tokens=int(max_new_tokens or 256),
                                            progress=report, should_stop=self._cancel.is_set)
                    save_evaluation(self.ws, result)
                    progress["finished"] += 1
            except BaseException as error:  # noqa: BLE001 - shown to the person below
                failure.append(error)
            finally:
                self._busy.release()

        worker = threading.Thread(target=work, name="judge-evaluation", daemon=True)
        started = time.perf_counter()
        worker.start()
        shown = 0
        try:
            while worker.is_alive():
                worker.join(0.5)
                bar = view.progress_html(progress["done"], progress["total"], progress["message"],
                                         time.perf_counter() - started)
                if progress["finished"] > shown:  # a model finished: show its saved result at once
                    shown = progress["finished"]
                    yield (bar, *self.show_saved())
                else:
                    yield (bar,) + (gr.skip(),) * 7
        finally:
            if worker.is_alive():  # the page went away: stop the work rather than leave it running
                self._cancel.set()
        saved = self.show_saved()
        if failure:
            error = failure[0]
            if isinstance(error, EvaluationError) and self._cancel.is_set():
                yield (view.progress_html(progress["done"], progress["total"], "cancelled"),
                       f"**Cancelled.** {error}\n\n{saved[0]}", *saved[1:])
                return
            if isinstance(error, PipelineError):  # in the status panel, in the app's words (`ui.common.error_panel`)
                panel = error_panel(error)
                yield (view.progress_html(progress["done"], progress["total"], "failed"),
                       panel if saved[0] == panel else f"{panel}\n\n{saved[0]}", *saved[1:])
                return
            raise error
        yield (view.progress_html(progress["total"], progress["total"], "done", time.perf_counter() - started), *saved)


def _refused(error: PipelineError) -> tuple:
    """The outputs of an Evaluate that cannot start: the reason in the status panel, everything else as it is
    (a toast would stay over the tab until closed, and stack on a double click)."""
    return (gr.skip(), error_panel(error), *(gr.skip(),) * 6)


def judge_tab(handlers: JudgeHandlers, model: gr.Dropdown) -> SimpleNamespace:
    """Lay out the Judge tab and wire it (it reads the model picker `model`); returns its widgets. A page
    (re)load shows the saved evaluations and, once the settings are restored, the choices (`build_ui`)."""
    with gr.Tab("6 · Judge", id="judge", elem_id="tab-judge") as tab:
        gr.Markdown(
            "Evaluate the base model and your runs on the **eval split** (clips no run trained on) against the "
            "experts' scores. Every answer counts: an answer the template cannot be read from is **unparsed**, "
            "counts as a miss, and its share is shown first. PCC and SCC (rank) come with 95 % bootstrap "
            "intervals: overlapping intervals mean the data cannot tell two models apart.")
        with gr.Row(equal_height=True):
            choices = gr.CheckboxGroup([], label="Models to evaluate", elem_id="judge-models", scale=3)
            max_tokens = gr.Slider(16, 512, value=256, step=8, label="Longest answer (tokens)",
                                   info="The feedback template needs ~40-120 tokens.", elem_id="judge-max-tokens",
                                   scale=2)
        with gr.Row():
            run_button = gr.Button("Evaluate", variant="primary", elem_id="judge-run")
            cancel_button = gr.Button("Cancel", variant="stop", elem_id="judge-cancel")
            refresh = gr.Button("Refresh models", size="sm", scale=0, min_width=140)
        progress = gr.HTML(view.progress_html(0, 0, "not started"), elem_id="judge-progress")
        status = gr.Markdown(elem_id="judge-status")
        headline = gr.Dataframe(view.headline_frame([]), label="Headline figures (one column per model)",
                                interactive=False, wrap=True, elem_id="judge-headline")
        scatter = gr.Plot(show_label=False, elem_id="judge-scatter")
        gr.Markdown("### Clips, largest disagreement first (select one to hear it and read every answer)")
        clips = gr.Dataframe(view.clips_frame([], []), interactive=False, wrap=True, elem_id="judge-clips")
        rows = gr.State([])
        with gr.Row():
            audio = gr.Audio(type="filepath", interactive=False, label="The clip", elem_id="judge-audio")
            details = gr.Markdown(view.clip_markdown(None), elem_id="judge-clip")

    shown = [status, headline, scatter, clips, rows, audio, details]
    run_button.click(handlers.evaluate, inputs=[choices, max_tokens], outputs=[progress, *shown])
    cancel_button.click(handlers.cancel, outputs=status)
    for event in (tab.select, refresh.click):
        event(handlers.offer_choices, inputs=[model, choices], outputs=choices).then(handlers.show_saved, outputs=shown)
    model.change(handlers.refresh_choices, inputs=[model, choices], outputs=choices)
    clips.select(handlers.select_clip, inputs=rows, outputs=[audio, details])
    return SimpleNamespace(tab=tab, choices=choices, shown=shown)
