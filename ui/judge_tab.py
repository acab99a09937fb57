"""Tab 6, Judge: is run B better than run A and the base model, on clips none of them trained on?

Pick the base model and any runs; each is evaluated on the built dataset's eval split one after the
other in a background job (`pipeline.tutor.eval_jobs`: its own process, like a training run), so closing
the page or restarting the app does not stop it; a timer follows the job's files, and a reopened page
re-attaches to it ("12 of 23 answers"). Cancel stops at the next generated token and keeps what was
answered, marked partial. The results (saved per dataset build, so a reopened page shows them without
re-running) appear as a verdict per run (better than its base model, worse, or can't tell yet;
`pipeline.tutor.verdict`), then a headline table with one column per model and each figure's meaning, a
scatter of expert vs tutor total scores, and a per-clip table, largest disagreement first, whose selected
row plays the clip and shows the experts' feedback and every model's answer in full. Evaluations made
on other data (an earlier dataset build) stay listed under the status, marked. The tab's text, tables and
figure are `ui/judge_view.py`.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import gradio as gr

from pipeline.errors import DatasetError, EvaluationError, PipelineError
from ui import judge_view as view
from ui.common import (TabHandlers, POLL_SECONDS, error_panel, list_runs, model_text, range_note, run_settings, ui_errors,
                       whole_number_in_range)
from ui.try_kinds import MAX_TOKENS_LABEL, MAX_TOKENS_RANGE
from ui.wording import app_wording
from pipeline.units import plural

BASE, RUN = "base:", "run:"
SCORER = "scorer:classical"
"""The Judge's value for the classical scorer (`pipeline.scoring`), the yardstick offered beside the models."""
NO_TEST_RECORDINGS = ("No test recordings to evaluate on yet: build the dataset first (**2 · Dataset**, **Build "
                      "dataset**); it keeps some learners' clips apart as test recordings.")
"""Judge's state before a dataset is built, in the teacher's words (the pipeline's message names the folder
and the split's field name, for the command line)."""


def app_note(result: dict) -> str | None:
    """A saved evaluation's note in the app's words: for the random stand-in (`tiny_random_model`, or an
    evaluation saved before that fact was, whose note named `make-tiny-model`) the pipeline's one note
    (`pipeline.model.tiny_model.stand_in_note`) with its command renamed to the button that makes the
    stand-in (`app_wording`); any other note through `app_wording`; None when there is none."""
    from pipeline.model.tiny_model import stand_in_note

    note = result.get("note")
    if result.get("tiny_random_model") or (note and "tiny random stand-in" in note):
        return app_wording(stand_in_note())
    return app_wording(note) if note else None


class JudgeHandlers(TabHandlers):
    """The Judge tab's handlers: what can be evaluated, start/cancel/follow evaluation jobs, show saved ones,
    one clip."""

    here = "Judge tab"

    def candidates(self, model: str | None) -> list[tuple[str, str]]:
        """(label, value) of what can be evaluated: the picked base model, the base models of the runs,
        then every run with an adapter, then the classical scorer (no fine-tuning: the yardstick every run is
        judged against). Values are `base:MODEL`, `run:NAME` or `SCORER`."""
        runs = [r for r in list_runs(self.ws) if (Path(r["run_dir"]) / "adapter" / "adapter_config.json").is_file()]
        bases = [model_text(model)] if model_text(model) else []
        for run in runs:
            base = run_settings(self.ws, run["run"]).get("model")
            if base and str(base) not in bases:
                bases.append(str(base))
        choices = [(view.model_label({"model": base}), BASE + base) for base in bases]
        return (choices + [(view.model_label({"run": r["run"]}), RUN + r["run"]) for r in runs]
                + [(view.model_label({"model": "classical-scorer"}), SCORER)])

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
        """The saved evaluations of the current dataset build: (status, verdict, headline, scatter, clips table,
        clip rows, audio, clip details). The status also lists, marked, the evaluations made on other data
        (an earlier dataset build, or the first N clips of this one)."""
        from pipeline.tutor.eval_jobs import active_job, job_status
        from pipeline.tutor.evaluate import saved_evaluations, split_key

        try:
            key = split_key(self.ws, "eval")
        except DatasetError:  # its message is the command line's: a folder path and the split's field name
            return (NO_TEST_RECORDINGS, "", self._headline_table([]), view.scatter_figure([]), self._clips_table([], []),
                    [], None, view.clip_markdown(None))
        except PipelineError as error:
            return (error_panel(error), "", self._headline_table([]), view.scatter_figure([]), self._clips_table([], []),
                    [], None, view.clip_markdown(None))
        every = saved_evaluations(self.ws)
        results = [r for r in every if r.get("dataset_key") == key]
        order = sorted(results, key=lambda r: (r.get("run") is not None, str(r.get("run") or r.get("model"))))
        rows = view.clip_rows(order)
        labels = [view.model_label(r) for r in order]
        running = active_job(self.ws)
        job = job_status(self.ws, running) if running else {}
        status = view.saved_status_markdown([dict(r, note=app_note(r)) for r in order], key,
                                            [r for r in every if r.get("dataset_key") != key],
                                            job_running=bool(running), running_targets=job.get("targets") or [],
                                            job_on_earlier_build=bool(job.get("dataset_key")) and job["dataset_key"] != key)
        first = rows[0] if rows else None
        verdict = "\n\n".join(part for part in (view.verdict_markdown(order), view.hearing_markdown(order)) if part)
        return (status, verdict, self._headline_table(order), view.scatter_figure(order),
                self._clips_table(rows, labels), rows, self._audio(first), view.clip_markdown(first))

    @staticmethod
    def _headline_table(results: list[dict]):
        """The headline figures with column widths that keep the numbers on one line and let the meanings wrap."""
        frame = view.headline_frame(results)
        return gr.Dataframe(value=frame, column_widths=view.column_widths(frame, max_px=440))

    @staticmethod
    def _clips_table(rows: list[dict], labels: list[str]):
        """The per-clip table with column widths that keep every header word whole (`view.column_widths`)."""
        frame = view.clips_frame(rows, labels)
        return gr.Dataframe(value=frame, column_widths=view.column_widths(frame))

    def _audio(self, row: dict | None) -> str | None:
        from pipeline.tutor.evaluate import clip_audio_path

        path = clip_audio_path(self.ws, row["id"]) if row else None
        return str(path) if path else None

    def select_clip(self, rows: list[dict], evt: gr.SelectData):
        """A row of the per-clip table was selected: its audio and its full texts."""
        index = evt.index[0] if isinstance(evt.index, (list, tuple)) else evt.index
        row = rows[index] if rows and 0 <= int(index) < len(rows) else None
        return self._audio(row), view.clip_markdown(row)

    def _saved_signature(self) -> str:
        """Which saved evaluations exist and when each was written: the tables are redrawn when it changes."""
        from pipeline.tutor.evaluate import saved_evaluations

        return "|".join(f"{r['path']}@{Path(r['path']).stat().st_mtime_ns}" for r in saved_evaluations(self.ws)
                        if Path(r["path"]).exists())

    @ui_errors(message_at=2, outputs=5)
    def evaluate(self, selected: list[str] | None, max_new_tokens: float = 256, grounding: bool = False):
        """Start evaluating each ticked model in turn, in a background job (`pipeline.tutor.eval_jobs`: its
        own process, so closing the page or restarting the app does not stop it); returns (job id,
        progress, status, timer, seen) and the timer's `poll` follows it. `grounding`: also ask the
        probes that show whether the tutor hears the recording (`pipeline.tutor.grounding`)."""
        from pipeline.tutor.eval_jobs import active_job, job_status, start_job

        if active_job(self.ws):  # the pipeline's refusal names the job's folder id, which the teacher never saw
            raise EvaluationError("An evaluation is still running (progress above); one runs at a time. Wait for it "
                                  "to finish, or press Cancel, then press Evaluate again.")
        if not selected:
            raise EvaluationError("No model is ticked: tick at least one model to evaluate (the base model, a run, "
                                  "or both), then press Evaluate.")
        targets = [{"scorer": True} if c == SCORER else {"run": c[len(RUN):]} if c.startswith(RUN)
                   else {"model": c[len(BASE):]} for c in selected]
        tokens = whole_number_in_range(256 if max_new_tokens is None else max_new_tokens, *MAX_TOKENS_RANGE,
                                       MAX_TOKENS_LABEL)
        started = start_job(self.ws, targets, max_new_tokens=tokens, grounding=bool(grounding))
        return (started["job"], view.job_progress_html(job_status(self.ws, started["job"])),
                f"Evaluating {plural(len(targets), 'model')} in the background: you can close this "
                "page; it goes on, and the page shows it again when reopened. Each model's results appear when "
                "it is done; Cancel keeps what was answered.", gr.Timer(active=True), "")

    @ui_errors(message_at=0, outputs=1)
    def cancel(self) -> str:
        """Ask the running evaluation job to stop at its next generated token (what was answered is kept)."""
        from pipeline.tutor.eval_jobs import active_job, request_cancel

        job = active_job(self.ws)
        if job is None:
            return "No evaluation is running."
        request_cancel(self.ws, job)
        return ("Cancelling: the evaluation stops within the answer it is writing; the answers given so far are "
                "kept, marked partial.")

    def on_load(self):
        """Page (re)opened: re-attach to a running evaluation job (else show how the last one ended, when it was
        about the dataset built now: `last_job_progress`); returns (job id, progress, timer)."""
        from pipeline.tutor.eval_jobs import list_jobs

        jobs = list_jobs(self.ws)
        job = next((j for j in jobs if j["alive"]), jobs[0] if jobs else None)
        return (job["job"] if job else "", self.last_job_progress(job), gr.Timer(active=bool(job and job["alive"])))

    def _current_key(self) -> str | None:
        """The dataset build now (`split_key` of its test recordings), None when nothing is built."""
        from pipeline.tutor.evaluate import split_key

        try:
            return split_key(self.ws, "eval")
        except PipelineError:
            return None

    def last_job_progress(self, job: dict | None = None) -> str:
        """The progress bar for `job` (a `job_status` dict; None: the newest job): a running job's (marked
        when it evaluates an earlier build of the dataset), or how an ended one ended; an ended job of an
        earlier build gets one line instead of a bar, so "3 of 3 answered · done" never stands above "No
        evaluation on this dataset's test recordings yet"."""
        from pipeline.tutor.eval_jobs import list_jobs

        if job is None:
            jobs = list_jobs(self.ws)
            job = next((j for j in jobs if j["alive"]), jobs[0] if jobs else None)
        if not job:
            return ""
        current = self._current_key()
        if not job["alive"] and job.get("dataset_key") and current != job["dataset_key"]:
            return view.earlier_job_line(job)
        return view.job_progress_html(job, current_key=current)

    def poll(self, job_id: str, seen: str | None):
        """Timer tick: the job's progress, and the saved evaluations again when one was written (a model
        finished, or partial answers were kept); returns (progress, timer, seen, *`show_saved`)."""
        from pipeline.tutor.eval_jobs import job_status

        if not job_id:
            return (gr.skip(), gr.Timer(active=False), seen) + (gr.skip(),) * 8
        status = job_status(self.ws, job_id)
        signature = self._saved_signature()
        shown = self.show_saved() if signature != seen or not status["alive"] else (gr.skip(),) * 8
        return (view.job_progress_html(status, current_key=self._current_key()), gr.Timer(active=status["alive"]),
                signature, *shown)


def judge_tab(handlers: JudgeHandlers, model: gr.Dropdown) -> SimpleNamespace:
    """Lay out the Judge tab and wire it (it reads the model picker `model`); returns its widgets. A page
    (re)load shows the saved evaluations, re-attaches to a running job (`attach`, `handlers.on_load`) and,
    once the settings are restored, the choices (`build_ui`)."""
    with gr.Tab("6 · Judge", id="judge", elem_id="tab-judge") as tab:
        gr.Markdown(
            "Is the tuned tutor better than the base model? Evaluate both on the **test recordings** (the "
            "learners' clips no run trained on) against the experts' scores. The evaluation runs in the background: "
            "you can close this page and come back. Every answer counts: an answer whose scores cannot be read is "
            "**not readable** (unparsed) and counts as a miss. The verdict compares each run with its base model and, once it "
            "is evaluated too, with the **Classical scorer (no fine-tuning)**, the yardstick a tuned tutor must beat; when their "
            "likely ranges (95 %) overlap, these recordings cannot tell them apart yet.")
        with gr.Row(equal_height=True):
            choices = gr.CheckboxGroup([], label="Models to evaluate", elem_id="judge-models", scale=3)
            with gr.Column(scale=2):
                max_tokens = gr.Number(value=256, precision=0, label=MAX_TOKENS_LABEL, elem_id="judge-max-tokens",
                                       info=f"From {MAX_TOKENS_RANGE[0]} to {MAX_TOKENS_RANGE[1]}. A token is a piece "
                                            "of a word; the tutor's usual feedback needs ~40-120.")
                max_tokens_note = gr.Markdown(elem_id="judge-max-tokens-note")
        hearing = gr.Checkbox(False, label="Also check that the tutor hears the learner (slower: up to 4x)",
                              info="After the test recordings, up to 3 listening checks each: the tutor answers noise "
                                   "instead of the learner, another learner reading the same sentence, and another "
                                   "sentence; a tutor that listens changes its answer.", elem_id="judge-grounding")
        with gr.Row():
            run_button = gr.Button("Evaluate", variant="primary", elem_id="judge-run")
            cancel_button = gr.Button("Cancel", variant="stop", elem_id="judge-cancel")
            refresh = gr.Button("Refresh models", size="sm", scale=0, min_width=140)
        progress = gr.HTML(elem_id="judge-progress")  # the page load says how the last evaluation stands
        status = gr.Markdown(elem_id="judge-status")
        verdict = gr.Markdown(elem_id="judge-verdict")
        headline = gr.Dataframe(view.headline_frame([]), label="Headline figures (one column per model)",
                                interactive=False, wrap=True, elem_id="judge-headline")
        scatter = gr.Plot(show_label=False, elem_id="judge-scatter")
        gr.Markdown("### Clips, largest disagreement first (select one to hear it and read every answer)")
        clips = gr.Dataframe(view.clips_frame([], []), interactive=False, wrap=True, elem_id="judge-clips")
        rows = gr.State([])
        with gr.Row():
            audio = gr.Audio(type="filepath", interactive=False, label="The clip", elem_id="judge-audio")
            details = gr.Markdown(view.clip_markdown(None), elem_id="judge-clip")
        job = gr.State("")
        seen = gr.State("")
        timer = gr.Timer(POLL_SECONDS, active=False)

    shown = [status, verdict, headline, scatter, clips, rows, audio, details]
    max_tokens.change(range_note(*MAX_TOKENS_RANGE, MAX_TOKENS_LABEL), inputs=max_tokens, outputs=max_tokens_note,
                      show_progress="hidden")
    run_button.click(handlers.evaluate, inputs=[choices, max_tokens, hearing], outputs=[job, progress, status, timer, seen])
    cancel_button.click(handlers.cancel, outputs=status)
    timer.tick(handlers.poll, inputs=[job, seen], outputs=[progress, timer, seen, *shown], show_progress="hidden")
    for event in (tab.select, refresh.click):
        event(handlers.offer_choices, inputs=[model, choices], outputs=choices).then(handlers.show_saved, outputs=shown)
        event(handlers.last_job_progress, outputs=progress, show_progress="hidden")  # an earlier build's: cleared
    model.change(handlers.refresh_choices, inputs=[model, choices], outputs=choices)
    clips.select(handlers.select_clip, inputs=rows, outputs=[audio, details])
    return SimpleNamespace(tab=tab, choices=choices, shown=shown, attach=[job, progress, timer])
