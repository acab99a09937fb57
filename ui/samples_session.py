"""The Samples tab's Recording session: paste or import a list, then record, check, save, next.

The session lives in the workspace (`pipeline.data.session`), so closing the tab keeps what was saved
and reopening the page shows the same item. Each save is an ordinary sample of the library.
"""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import gradio as gr

from pipeline.errors import AudioError
from ui import samples_view as view
from ui.common import TabHandlers, cleared, ui_errors
from ui.samples_kinds import TRIM_HINTS

SESSION_KIND_LABELS = {"Read aloud (sentences)": "read_aloud", "Free speech (prompts)": "free_speech"}


class SessionHandlers(TabHandlers):
    """Handlers of the recording session: start, save and next, skip, back, restore on page load."""

    here = "Samples tab"

    def _store(self):
        from pipeline.data.session import SessionStore

        return SessionStore(self.state.ws)

    @ui_errors(message_at=0, outputs=2)
    def start_session(self, items_text: str, items_file: Any, kind_label: str, speaker: str):
        """Start a session over the pasted list and/or the imported file; returns (progress, item)."""
        from pipeline.data.session import parse_items

        path = items_file if isinstance(items_file, (str, os.PathLike)) or items_file is None else getattr(items_file, "name", None)
        items = parse_items(items_text, path)
        session = self._store().start(items, SESSION_KIND_LABELS.get(kind_label, kind_label or "read_aloud"), speaker)
        return view.session_markdown(session)

    @ui_errors(message_at=2, outputs=6, hints=TRIM_HINTS)
    def save_and_next(self, audio: Any, feedback: str, trim: bool = False):
        """Save the recording for the current item and go to the next; returns (progress, item, status,
        cleared audio, cleared feedback, samples table)."""
        from pipeline.data.samples import SampleLibrary

        if audio is None:
            raise AudioError("No recording yet: record or upload the clip for this item, then save.")
        session, sample = self._store().save_current(audio, feedback, trim=bool(trim))
        progress, item = view.session_markdown(session)
        status = f"Saved **{sample.id}** ({view.clip_seconds(sample.duration_s)})." + (
            f" ⚠ {'; '.join(sample.checks.get('warnings') or [])}" if sample.checks.get("warnings") else "")
        return progress, item, status, None, "", view.samples_frame(SampleLibrary(self.state.ws).list())

    @ui_errors(message_at=2, outputs=4)
    def skip(self):
        """Skip the current item; returns (progress, item, status, cleared audio)."""
        session = self._store().skip()
        return (*view.session_markdown(session), "Skipped.", None)

    @ui_errors(message_at=2, outputs=4)
    def back(self):
        """Go back one item to re-record it; returns (progress, item, status, cleared audio)."""
        session = self._store().back()
        again = str(session.position) in session.saved
        return (*view.session_markdown(session), "Re-recording: saving replaces the earlier clip." if again else "Back one item.", None)

    @ui_errors(message_at=0, outputs=1, hints=TRIM_HINTS)
    def check(self, audio: Any, trim: bool = False) -> str:
        """The automatic check of a fresh recording (the same checks as on save, with the session's
        "Trim clips longer than 30 s" box: `trim`)."""
        from pipeline.data.audio import load_audio

        if audio is None:
            return ""
        name = Path(audio).name if isinstance(audio, (str, os.PathLike)) else None
        return view.checks_markdown(load_audio(audio, name=name, trim=bool(trim)).report)

    def restore(self):
        """On page load: where the saved session stands (progress, item)."""
        return view.session_markdown(self._store().load())


def session_section(handlers: SessionHandlers) -> SimpleNamespace:
    """Lay out the Recording session accordion (inside the Samples tab); returns its widgets and
    `wire(samples_table)`, which connects the buttons once the library table exists."""
    with gr.Accordion("Recording session: a list, one clip after another", open=False, elem_id="session-accordion"):
        with gr.Row():
            with gr.Column(scale=2):
                items_in = gr.Textbox(label="Sentences or prompts, one per line", lines=5, elem_id="session-items",
                                      placeholder="The cat sat on the mat.\nDescribe your last holiday.")
                items_file = gr.File(label="…or import a list (.txt, one per line; .csv with a sentence/prompt column)",
                                     file_types=[".txt", ".csv", ".tsv"], type="filepath", elem_id="session-file")
            with gr.Column(scale=1):
                kind_in = gr.Radio(list(SESSION_KIND_LABELS), value="Read aloud (sentences)", label="The list holds",
                                   elem_id="session-kind")
                speaker_in = gr.Textbox(label="Speaker (set once for the session)", elem_id="session-speaker")
                start = gr.Button("Start session", variant="primary", elem_id="session-start")
        progress = gr.Markdown(elem_id="session-progress")
        item = gr.HTML(elem_id="session-item")
        with gr.Row():
            with gr.Column():
                audio = gr.Audio(sources=["microphone", "upload"], type="filepath", label="Record this item",
                                 elem_id="session-audio")
                feedback = gr.Textbox(label="Tutor feedback (optional now; add it later in the library)", lines=3,
                                      elem_id="session-feedback")
                trim = gr.Checkbox(False, label="Trim clips longer than 30 s", elem_id="session-trim")
                with gr.Row():
                    back = gr.Button("◀ Back (re-record)", elem_id="session-back")
                    skip = gr.Button("Skip ▶", elem_id="session-skip")
                    save = gr.Button("Save and next", variant="primary", elem_id="session-save")
            with gr.Column():
                checks = gr.Markdown(elem_id="session-checks")
                status = gr.Markdown(elem_id="session-status")

    def wire(samples_table: Any) -> None:
        start.click(handlers.start_session, inputs=[items_in, items_file, kind_in, speaker_in], outputs=[progress, item])
        audio.stop_recording(handlers.check, inputs=[audio, trim], outputs=checks)
        audio.upload(handlers.check, inputs=[audio, trim], outputs=checks)
        trim.change(handlers.check, inputs=[audio, trim], outputs=checks)
        save.click(handlers.save_and_next, inputs=[audio, feedback, trim],
                   outputs=[progress, item, status, audio, feedback, samples_table])
        # Another item: the last recording's check results were about the item left behind.
        skip.click(cleared(""), outputs=checks).then(handlers.skip, outputs=[progress, item, status, audio])
        back.click(cleared(""), outputs=checks).then(handlers.back, outputs=[progress, item, status, audio])

    return SimpleNamespace(progress=progress, item=item, restore=handlers.restore, wire=wire)
