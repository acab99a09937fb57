"""Tab 7, Inbox: what students practised, with the tutor's answer as draft feedback; and the practice page's setup.

The teacher goes through the pending attempts one at a time: listen, edit the draft if needed, then
**Accept and next** (or Shift+Enter in the feedback box) or **Reject and next**, or **Delete** it. An
accepted attempt becomes a sample of its kind (`pipeline.inbox.store.Inbox.accept`), ready for the next
build; an attempt another teacher decided meanwhile is refused with who decided what. Above
it, *Practice page for students* picks the run and the exercise list the page offers
(`pipeline.inbox.practice.save_setup`). The tab's text is `ui/inbox_view.py`.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import gradio as gr

from pipeline.errors import PipelineError
from pipeline.inbox.store import Inbox
from ui import inbox_view as view
from ui.common import TabHandlers, ui_errors
from ui.state import AppState
from pipeline.units import plural

def _login(request: gr.Request | None) -> str | None:
    """The teacher's login name, or None when the studio has no accounts."""
    return getattr(request, "username", None) or None


KINDS = {"Read aloud (sentences)": "read_aloud", "Free speech (prompts)": "free_speech"}


def _tutor_words(run: str) -> str:
    """The practice page's tutor in the teacher's words: "run `NAME`", or the Classical scorer (no fine-tuning)."""
    from pipeline.scoring.scorer import SCORER_MODEL_ID, SCORER_NAME

    return f"the {SCORER_NAME}" if run == SCORER_MODEL_ID else f"run `{run}`"


class InboxHandlers(TabHandlers):
    """The Inbox tab's handlers; `practice_url` is where the practice page is served (None: not served)."""

    here = "Inbox tab"

    def __init__(self, state: AppState, practice_url: str | None = None):
        super().__init__(state)
        self.practice_url = practice_url

    @property
    def inbox(self) -> Inbox:
        return Inbox(self.state.ws)

    def _inbox_outputs(self, after: str | None = None, message: str = "") -> tuple:
        """(table, current id, audio, about, feedback, status) for the first pending attempt after `after`
        (or the first one when none follows)."""
        pending = self.inbox.list("pending")
        table = gr.update(value=view.attempt_rows(pending) or None, headers=view.TABLE_HEADERS)
        if not pending:
            return table, None, None, "", gr.update(value="", interactive=False), view.nothing_waiting(message)
        later = [a for a in pending if after is not None and a.id > after]
        current = (later or pending)[0]
        about = view.attempt_markdown(current, pending, same=self.inbox.same_recording(current))
        return (table, current.id, str(self.inbox.audio_path(current)), about,
                gr.update(value=current.answer, interactive=True), message)

    def show(self) -> tuple:
        """The inbox as it is now (page load, Refresh)."""
        return self._inbox_outputs()

    @ui_errors(message_at=5, outputs=6)
    def accept(self, attempt_id: str | None, feedback: str, request: gr.Request = None) -> tuple:
        """Accept the shown attempt with the feedback as edited, then show the next. The tab shows waiting
        attempts, so one another teacher decided meanwhile is refused, saying who decided what. One whose
        recording is in the library already is marked done (`Inbox.accept`), saying which sample it is."""
        if not attempt_id:
            return self._inbox_outputs(message="Nothing to accept.")
        attempt, sample = self.inbox.accept(attempt_id, feedback, expected_status="pending", by=_login(request))
        return self._inbox_outputs(after=attempt_id, message=view.accepted_markdown(attempt, sample))

    @ui_errors(message_at=5, outputs=6)
    def reject(self, attempt_id: str | None, request: gr.Request = None) -> tuple:
        """Reject the shown attempt (it is kept, marked rejected), then show the next."""
        if not attempt_id:
            return self._inbox_outputs(message="Nothing to reject.")
        self.inbox.reject(attempt_id, expected_status="pending", by=_login(request))
        return self._inbox_outputs(after=attempt_id, message="Rejected (kept in the inbox folder).")

    @ui_errors(message_at=5, outputs=6)
    def delete(self, attempt_id: str | None) -> tuple:
        """Delete the shown attempt: its recording, its record and any sample made from it."""
        if not attempt_id:
            return self._inbox_outputs(message="Nothing to delete.")
        deleted = self.inbox.delete(attempt_id)
        return self._inbox_outputs(after=attempt_id, message=f"Deleted {deleted.student}'s attempt and its recording.")

    def skip(self, attempt_id: str | None) -> tuple:
        """Leave the shown attempt waiting and show the next."""
        return self._inbox_outputs(after=attempt_id)

    def run_choices(self, current: str | None = None) -> Any:
        """The runs that can answer (they have an adapter), newest first, an unfinished one (stopped, failed, still
        training) labelled so, then the Classical scorer (no fine-tuning): `current` (the one picked on the page) selected while it can still answer, else the
        saved one, else the newest completed run (the newest run when none completed). Asked again each time the
        tab opens, so a run trained since the page loaded is there to pick (the list was the page load's)."""
        from pipeline.inbox.practice import load_setup
        from pipeline.tutor.infer import usable_runs
        from ui.common import list_runs

        setup = load_setup(self.state.ws)
        usable = set(usable_runs(self.state.ws))
        states = {r["run"]: r.get("state") for r in list_runs(self.state.ws) if r.get("run") in usable}
        runs = [*states, *sorted(usable - set(states))]  # newest first (a run whose status cannot be read last)
        from pipeline.scoring.scorer import SCORER_MODEL_ID, SCORER_NAME

        picked = next((run for run in (current, setup.run if setup else None)
                       if run and (run in usable or run == SCORER_MODEL_ID)), None)
        newest = next((run for run in runs if states.get(run) == "completed"), runs[0] if runs else None)
        # The classical scorer last: it answers with no run trained, so a class can practise on day one.
        choices = [(view.run_label(run, states.get(run)), run) for run in runs] + [(SCORER_NAME, SCORER_MODEL_ID)]
        return gr.update(choices=choices, value=picked or newest)

    def setup_fields(self) -> tuple[Any, Any, Any, str]:
        """Page load: (run choices, kind, exercises text, status) from the saved setup."""
        from pipeline.inbox.practice import load_setup

        setup = load_setup(self.state.ws)
        if setup is None:
            return self.run_choices(), gr.skip(), gr.skip(), self._where("Not set up yet.")
        label = next(k for k, v in KINDS.items() if v == setup.kind)
        return self.run_choices(), label, "\n".join(setup.items), self._where(
            f"Offering {plural(len(setup.items), 'exercise')} with {_tutor_words(setup.run)}.")

    def _where(self, text: str) -> str:
        return view.where_markdown(text, self.practice_url)

    def session_items(self) -> tuple[Any, str]:
        """The recording session's list and kind, to offer as exercises."""
        from pipeline.inbox.practice import session_list

        try:
            items, kind = session_list(self.state.ws)
        except PipelineError as error:  # no recording session yet
            return gr.skip(), gr.skip(), f"✗ {error}"
        label = next(k for k, v in KINDS.items() if v == kind)
        return "\n".join(items), label, f"Copied the recording session's {plural(len(items), 'item')}; click Offer to students."

    @ui_errors(message_at=0, outputs=1)
    def save_setup(self, run: str, kind_label: str, items_text: str) -> str:
        """Offer `items_text` (one per line) with `run` on the practice page."""
        from pipeline.data.session import parse_items
        from pipeline.inbox.practice import save_setup
        from pipeline.tutor.infer import usable_runs

        if not run:
            return view.no_tutor_picked(bool(usable_runs(self.state.ws)))
        setup = save_setup(self.state.ws, run, parse_items(text=items_text or ""), KINDS.get(kind_label, "read_aloud"),
                           source="studio")
        return self._where(f"✓ Offering {plural(len(setup.items), 'exercise')} with {_tutor_words(setup.run)}.")


def inbox_tab(handlers: InboxHandlers) -> SimpleNamespace:
    """Lay out the Inbox tab and wire it; returns its widgets and `outputs` (for the page load)."""
    with gr.Tab("7 · Inbox", id="inbox", elem_id="tab-inbox") as tab:
        with gr.Accordion("Practice page for students", open=False, elem_id="practice-setup"):
            gr.Markdown("Students pick an exercise, record, and read the tutor's feedback; with their consent each "
                        "attempt comes here. Choose the tutor and the exercises:")
            with gr.Row():
                run = gr.Dropdown([], label="Tutor (a trained run)", elem_id="practice-run")
                kind = gr.Radio(list(KINDS), value=next(iter(KINDS)), label="Exercises are", elem_id="practice-kind")
            items = gr.Textbox(label="Exercises, one per line", lines=5, elem_id="practice-items")
            with gr.Row():
                from_session = gr.Button("Use the recording session's list", size="sm", elem_id="practice-from-session")
                offer = gr.Button("Offer to students", variant="primary", elem_id="practice-offer")
            setup_status = gr.Markdown(elem_id="practice-setup-status")
        gr.Markdown("Students' attempts, with the tutor's answer as a draft. Edit the feedback if needed, then "
                    "**Accept and next** (or Shift+Enter in the feedback box): it becomes a sample with the student as "
                    "speaker, ready for the next build.")
        current = gr.State(None)
        about = gr.Markdown(elem_id="inbox-about")
        audio = gr.Audio(label="The student's recording", type="filepath", interactive=False, elem_id="inbox-audio")
        feedback = gr.Textbox(label="Feedback to keep (the tutor's draft)", lines=4, elem_id="inbox-feedback")
        with gr.Row():
            accept = gr.Button("Accept and next", variant="primary", elem_id="inbox-accept")
            reject = gr.Button("Reject and next", variant="stop", elem_id="inbox-reject")
            skip = gr.Button("Skip", elem_id="inbox-skip")
            delete = gr.Button("Delete", elem_id="inbox-delete")
            refresh = gr.Button("Refresh", elem_id="inbox-refresh")
        status = gr.Markdown(elem_id="inbox-status")
        table = gr.Dataframe(headers=view.TABLE_HEADERS, interactive=False, label="Waiting", elem_id="inbox-table")

    outputs = [table, current, audio, about, feedback, status]
    accept.click(handlers.accept, inputs=[current, feedback], outputs=outputs)
    feedback.submit(handlers.accept, inputs=[current, feedback], outputs=outputs)
    reject.click(handlers.reject, inputs=current, outputs=outputs)
    skip.click(handlers.skip, inputs=current, outputs=outputs)
    delete.click(handlers.delete, inputs=current, outputs=outputs)
    for event in (refresh.click, tab.select):
        event(handlers.show, outputs=outputs)
    tab.select(handlers.run_choices, inputs=run, outputs=run)  # a run trained since the page loaded joins the list
    from_session.click(handlers.session_items, outputs=[items, kind, setup_status])
    offer.click(handlers.save_setup, inputs=[run, kind, items], outputs=setup_status)
    setup_outputs = [run, kind, items, setup_status]
    return SimpleNamespace(tab=tab, outputs=outputs, setup_outputs=setup_outputs)
