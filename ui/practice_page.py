"""The practice page for students: pick an exercise, record, read the tutor's feedback. Nothing else.

A page of its own (its own `gr.Blocks`, served on its own port by `app.py`), so a student's account
reaches none of the studio's handlers: no folders, no library, no training, no export. It offers the
one run and exercise list the teacher set (`pipeline.inbox.practice`, read again on every page
load), asks the tutor through `pipeline.inbox.practice.answer_attempt`, and keeps an attempt in the
workspace's inbox only when the student ticked consent. When the page has accounts, the student's
name is their login name (the name box is then locked, and the server uses the login, not the box).
The page's text is `ui/practice_view.py`.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import gradio as gr

from pipeline.errors import ConfigError
from pipeline.workspace import Workspace
from ui import practice_view as view
from ui.common import ui_errors

CONSENT_LABEL = ("Keep my recordings for my teacher (each attempt's clip, exercise, the tutor's answer and the time). "
                 "Untick: nothing is stored.")


def _login(request: gr.Request | None) -> str | None:
    """The logged-in user's name, or None when the page has no accounts."""
    return getattr(request, "username", None) or None


class PracticeHandlers:
    """The practice page's handlers, bound to one workspace."""

    def __init__(self, workspace: Workspace):
        self.ws = workspace

    def _stand_in(self, run: str) -> bool:
        from pipeline.model.tiny_model import is_tiny_random_model
        from ui.common import run_settings

        model = run_settings(self.ws, run).get("model")
        return bool(model) and is_tiny_random_model(str(model))

    def on_load(self, remembered: dict | None = None, request: gr.Request = None) -> tuple[Any, Any, str, Any]:
        """Page (re)opened: the exercises the teacher set, the login (else the name this browser remembers) as
        the name, the consent this browser remembers, the stand-in note.

        Returns (name box update, exercise dropdown update, note markdown, consent box update)."""
        from pipeline.inbox.practice import load_setup

        remembered = remembered if isinstance(remembered, dict) else {}
        user = _login(request)
        name = (gr.update(value=user, interactive=False) if user else
                gr.update(value=remembered["name"]) if remembered.get("name") else gr.skip())
        consent = gr.update(value=bool(remembered.get("consent")))
        setup = load_setup(self.ws)
        if setup is None:
            return name, gr.update(choices=[], value=None), view.NOT_SET_UP, consent
        note = view.exercise_note(setup.kind, len(setup.items), self._stand_in(setup.run))
        return name, gr.update(choices=view.exercise_choices(setup.items), value=0), note, consent

    @ui_errors(message_at=1, outputs=2)
    def answer(self, audio: Any, exercise: Any, name: str, consent: bool,
               request: gr.Request = None) -> tuple[str, str]:
        """The tutor's feedback on one attempt; returns (feedback text, status line)."""
        from pipeline.inbox.practice import answer_attempt

        if audio is None:
            raise ConfigError("Record yourself first (or upload a clip), then click Get feedback.")
        if exercise is None or exercise == "":
            raise ConfigError("Pick an exercise first.")
        student = _login(request) or (name or "").strip()
        result = answer_attempt(self.ws, audio, int(exercise), student=student, consent=bool(consent))
        return result["text"], view.answer_status(bool(result["attempt"]), bool(result["tiny_random_model"]))


def practice_page(handlers: PracticeHandlers) -> gr.Blocks:
    """The practice page's `gr.Blocks` (no heavy imports while building it)."""
    with gr.Blocks(title="Pronunciation practice", analytics_enabled=False) as page:
        gr.Markdown("# Pronunciation practice\nPick an exercise, record yourself, and read your tutor's feedback.")
        with gr.Row(elem_id="practice-who"):  # side by side on a wide screen, one above the other on a phone (app.css)
            name = gr.Textbox(label="Your name", elem_id="practice-name", scale=2, min_width=240)
            consent = gr.Checkbox(label=CONSENT_LABEL, value=False, elem_id="practice-consent", scale=3, min_width=300)
        note = gr.Markdown(elem_id="practice-note")
        exercise = gr.Dropdown([], label="Exercise", elem_id="practice-exercise")
        audio = gr.Audio(sources=["microphone", "upload"], type="filepath", label="Your recording",
                         elem_id="practice-audio")
        submit = gr.Button("Get feedback", variant="primary", elem_id="practice-submit")
        status = gr.Markdown(elem_id="practice-status")
        feedback = gr.Textbox(label="Your tutor says", lines=6, interactive=False, elem_id="practice-feedback")
        submit.click(handlers.answer, inputs=[audio, exercise, name, consent], outputs=[feedback, status])
        # another exercise starts with a fresh recording and no earlier feedback
        exercise.input(lambda: (None, "", ""), outputs=[audio, feedback, status], show_progress="hidden")
        # the name and the consent are given once: this browser remembers them (encrypted local storage)
        remembered = gr.BrowserState({"name": "", "consent": False}, storage_key="pronunciation-practice")
        for widget in (name, consent):
            widget.input(lambda who, agreed: {"name": (who or "").strip(), "consent": bool(agreed)},
                         inputs=[name, consent], outputs=remembered, show_progress="hidden")
        page.load(handlers.on_load, inputs=remembered, outputs=[name, exercise, note, consent])
    return page


def serve_practice(workspace: Workspace, port: int, launch_kwargs: dict) -> tuple[gr.Blocks | None, str | None, str | None]:
    """Serve the practice page for `workspace` on `port` (else on a free port the system picks), with
    `launch_kwargs` (address, share, auth: `app.py` gives the same as the studio's, with the practice
    page's login rule). Returns (page, local URL, share URL), or (None, None, None) when no port could
    be had (the studio goes on without it; a warning says why)."""
    import socket
    import sys

    page = build_practice(workspace).page
    page.queue(default_concurrency_limit=2)
    for candidate in (port, 0):
        if candidate == 0:
            with socket.socket() as sock:  # a free port the system picks
                sock.bind(("127.0.0.1", 0))
                candidate = sock.getsockname()[1]
        try:
            _, local_url, share_url = page.launch(server_port=candidate, **launch_kwargs)
            return page, local_url, share_url
        except OSError as error:
            print(f"warning: the practice page cannot use port {candidate} ({error}).", file=sys.stderr)
    return None, None, None


def build_practice(workspace: Workspace) -> SimpleNamespace:
    """The page and its handlers for `workspace`."""
    handlers = PracticeHandlers(workspace)
    return SimpleNamespace(page=practice_page(handlers), handlers=handlers)
