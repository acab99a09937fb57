"""The practice page for students: pick an exercise, record, read the tutor's feedback. Nothing else.

A page of its own (its own `gr.Blocks`, served on its own port by `app.py`), so a student's account
reaches none of the studio's handlers: no folders, no library, no training, no export. It offers the
one run and exercise list the teacher set (`pipeline.inbox.practice`, read again on every page
load), asks the tutor through `pipeline.inbox.practice.answer_attempt`, and keeps an attempt in the
workspace's inbox only when the student ticked consent. When the page has accounts, the student's
name is their login name (the name box is then locked, and the server uses the login, not the box).

Consent means nothing kept: once an attempt is answered, the clip Gradio stored on upload (and any copy
it converted) is deleted, with or without consent (`discard_upload`); with consent the inbox's copy is
the only one. An upload never sent is deleted by Gradio's own cache sweep (`UNSENT_UPLOAD_S`), or, when the
app was killed, at the page's next start (`PracticeHandlers.note_upload`). Under
*My kept attempts* a student sees and deletes their own attempts (consent withdrawn). An attempt rate
per student (`pipeline.inbox.practice.AttemptRate`) is checked before any work. The page's text is
`ui/practice_view.py`.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import gradio as gr

from pipeline.errors import ConfigError
from pipeline.workspace import Workspace
from ui import practice_view as view
from ui.common import ui_errors

UNSENT_UPLOAD_S = 900
"""An uploaded recording never sent is deleted this many seconds after upload at most (Gradio's
`delete_cache` sweep runs every `UNSENT_UPLOAD_S // 3` seconds and removes uploads older than this)."""
ANSWERS_AT_ONCE = 16
"""Students answered at the same time: the tutor generates up to 8 answers together
(`pipeline.tutor.batching.DEFAULT_MAX_BATCH`) and the next ones wait there, read as soon as a row frees,
instead of in the page's queue."""
CONSENT_LABEL = ("Tick to keep my recordings for my teacher (each attempt's clip, exercise, the tutor's answer and "
                 "the time). Left unticked, nothing is stored.")
"""The consent box's label: it starts unticked (this browser remembers a tick), so it says what ticking does."""


def _login(request: gr.Request | None) -> str | None:
    """The logged-in user's name, or None when the page has no accounts."""
    return getattr(request, "username", None) or None


def is_upload(path: Any) -> bool:
    """True when `path` (a str or Path) lies inside Gradio's upload folder (`GRADIO_TEMP_DIR`, default
    `TMP/gradio`), below the upload's own folder: a file this page may delete."""
    from pathlib import Path

    from gradio.utils import get_upload_folder

    if not isinstance(path, (str, Path)) or not str(path):
        return False
    return Path(get_upload_folder()).resolve() in Path(path).resolve().parent.parents


def discard_upload(path: Any) -> None:
    """Delete a recording Gradio stored on upload, with every copy Gradio made of it (a converted format sits
    beside it, in the upload's own folder `UPLOAD_DIR/<sha256>/`). Nothing outside Gradio's upload folder
    (`GRADIO_TEMP_DIR`, default `TMP/gradio`) is ever touched: a path given by a test or a script stays."""
    import shutil
    from pathlib import Path

    from gradio.utils import get_upload_folder

    if not is_upload(path):  # not an upload: leave it
        return
    root, file = Path(get_upload_folder()).resolve(), Path(path).resolve()
    folder = file.parent
    if folder.parent == root:  # the upload's own folder (named by its content's hash)
        shutil.rmtree(folder, ignore_errors=True)
    else:
        file.unlink(missing_ok=True)


class PracticeHandlers:
    """The practice page's handlers, bound to one workspace.

    Args:
        rate: the attempts a student may send (`AttemptRate`; None: no bound).
        own_files: the page's uploads by owner (`ui.login_guard.OwnFiles`), told when one is deleted.
    """

    def __init__(self, workspace: Workspace, rate: Any = None, own_files: Any = None):
        self.ws = workspace
        self.rate = rate
        self.own_files = own_files
        self._uploads_noted = None  # the journal of every upload this process received (`note_upload`)

    def note_upload(self, audio: Any) -> None:
        """A recording arrived (uploaded or recorded, not sent yet): note it in this process's journal of uploads
        (`Inbox.uploads_journal`, kept while the process lives). Gradio deletes a page's unsent uploads after
        `UNSENT_UPLOAD_S` and when the app stops, but not when it is killed: the next start of the practice
        page then deletes every upload the killed process noted (`build_practice`). Only files in Gradio's
        upload folder are noted (`is_upload`)."""
        import atexit
        import contextlib

        from pipeline.fileio import pending_files
        from pipeline.inbox.store import Inbox

        if not is_upload(audio):
            return
        if self._uploads_noted is None:
            journal = contextlib.ExitStack()
            self._uploads_noted = journal.enter_context(pending_files(Inbox(self.ws).uploads_journal))
            atexit.register(journal.close)  # a process that ends normally leaves no journal (Gradio cleans up)
        self._uploads_noted(audio)

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

    def exercise_text(self, exercise: Any) -> str:
        """The picked exercise in full, under the Exercise box (on a phone the box shows its start only)."""
        from pipeline.inbox.practice import load_setup

        setup = load_setup(self.ws)
        if setup is None or exercise is None or exercise == "" or not 0 <= int(exercise) < len(setup.items):
            return ""
        return view.exercise_text(setup.kind, setup.items[int(exercise)])

    @ui_errors(message_at=1, outputs=2)
    def answer(self, audio: Any, exercise: Any, name: str, consent: bool, request: gr.Request = None):
        """The tutor's feedback on one attempt, shown as it is generated: yields (feedback text, status
        line) updates, the last with what became of the attempt."""
        from pipeline.fileio import hold_point, pending_files
        from pipeline.inbox.practice import answer_attempt
        from pipeline.inbox.store import Inbox
        from ui.common import as_it_grows

        if audio is None:
            raise ConfigError("Record yourself first (or upload a clip), then click Get feedback.")
        if exercise is None or exercise == "":
            raise ConfigError("Pick an exercise first.")
        student = _login(request) or (name or "").strip()
        try:  # the upload noted first: if the app is killed while answering, its next start deletes it
            with pending_files(Inbox(self.ws).uploads_journal) as note:
                if is_upload(audio):  # never a file of the workspace's, a test's or a script's
                    note(audio)
                hold_point("practice:answering")
                for text, result in as_it_grows(answer_attempt, self.ws, audio, int(exercise), student=student,
                                                consent=bool(consent), rate=self.rate):
                    if result is None:
                        yield text, view.ANSWERING
                    else:
                        yield result["text"], view.answer_status(bool(result["attempt"]),
                                                                 bool(result["tiny_random_model"]), result.get("not_kept"))
        finally:  # answered, refused or left: Gradio's copy goes (with consent the inbox holds the only one)
            discard_upload(audio)
            if self.own_files is not None and isinstance(audio, str):
                self.own_files.forget(audio)

    def _student(self, name: str, request: gr.Request | None) -> str:
        student = _login(request) or (name or "").strip()
        if not student:
            raise ConfigError("Type your name first: your kept attempts are listed under it.")
        return student

    @ui_errors(message_at=2, outputs=3)
    def my_attempts(self, name: str, request: gr.Request = None) -> tuple[Any, Any, str]:
        """The student's own kept attempts: (list, choices to delete, status line); the list is
        `ui.practice_view.mine_markdown`, which reads on a phone."""
        from pipeline.inbox.store import Inbox

        mine = Inbox(self.ws).list(student=self._student(name, request))
        choices = view.mine_choices(mine)
        return (view.mine_markdown(mine),
                gr.update(choices=choices, value=choices[-1][1] if choices else None), view.mine_status(len(mine)))

    def refresh_mine(self, name: str, consent: bool, request: gr.Request = None) -> tuple[Any, Any, str]:
        """After an answer: the student's kept attempts again (`my_attempts`), so a kept one is listed without a
        click; nothing changes when nothing could have been kept (no consent, or no name yet)."""
        if not consent or not (_login(request) or (name or "").strip()):
            return gr.skip(), gr.skip(), gr.skip()
        return self.my_attempts(name, request)

    @ui_errors(message_at=2, outputs=3)
    def delete_mine(self, attempt_id: str | None, name: str, request: gr.Request = None) -> tuple[Any, Any, str]:
        """Delete one of the student's own attempts (its clip, record and any sample made from it)."""
        from pipeline.inbox.store import Inbox

        if not attempt_id:
            raise ConfigError("Pick the attempt to delete first.")
        deleted = Inbox(self.ws).delete(attempt_id, student=self._student(name, request))
        table, choices, _status = self.my_attempts(name, request)
        return table, choices, view.deleted_status(deleted)


def practice_page(handlers: PracticeHandlers, logins: bool = False) -> gr.Blocks:
    """The practice page's `gr.Blocks` (no heavy imports while building it); `logins`: it has accounts (a
    Log out link)."""
    with gr.Blocks(title="Pronunciation practice", analytics_enabled=False,
                   delete_cache=(UNSENT_UPLOAD_S // 3, UNSENT_UPLOAD_S)) as page:
        gr.Markdown("# Pronunciation practice\nPick an exercise, record yourself, and read your tutor's feedback.")
        if logins:
            gr.HTML('<a href="logout" id="practice-logout">Log out</a>', elem_id="practice-logout-row")
        with gr.Row(elem_id="practice-who"):  # side by side on a wide screen, one above the other on a phone (app.css)
            name = gr.Textbox(label="Your name", elem_id="practice-name", scale=2, min_width=240)
            consent = gr.Checkbox(label=CONSENT_LABEL, value=False, elem_id="practice-consent", scale=3, min_width=300)
        note = gr.Markdown(elem_id="practice-note")
        exercise = gr.Dropdown([], label="Exercise", elem_id="practice-exercise")
        sentence = gr.Markdown(elem_id="practice-sentence")  # the exercise in full (the box shows its start on a phone)
        audio = gr.Audio(sources=["microphone", "upload"], type="filepath", label="Your recording",
                         elem_id="practice-audio")
        submit = gr.Button("Get feedback", variant="primary", elem_id="practice-submit")
        status = gr.Markdown(elem_id="practice-status")
        feedback = gr.Textbox(label="Your tutor says", lines=6, interactive=False, elem_id="practice-feedback")
        answered = submit.click(handlers.answer, inputs=[audio, exercise, name, consent], outputs=[feedback, status],
                                concurrency_limit=ANSWERS_AT_ONCE)
        audio.change(handlers.note_upload, inputs=audio, outputs=None, show_progress="hidden")  # see note_upload
        exercise.change(handlers.exercise_text, inputs=exercise, outputs=sentence, show_progress="hidden")
        # another exercise starts with a fresh recording and no earlier feedback
        exercise.input(lambda: (None, "", ""), outputs=[audio, feedback, status], show_progress="hidden")
        # the name and the consent are given once: this browser remembers them (encrypted local storage)
        remembered = gr.BrowserState({"name": "", "consent": False}, storage_key="pronunciation-practice")
        for widget in (name, consent):
            widget.input(lambda who, agreed: {"name": (who or "").strip(), "consent": bool(agreed)},
                         inputs=[name, consent], outputs=remembered, show_progress="hidden")
        with gr.Accordion("My kept attempts", open=False, elem_id="practice-mine"):
            gr.Markdown(view.MINE_NOTE)
            mine_table = gr.Markdown(elem_id="practice-mine-table")  # a list: a table was cut off on a phone
            with gr.Row():
                mine_choice = gr.Dropdown([], label="Attempt", elem_id="practice-mine-choice", scale=3)
                show = gr.Button("Show my attempts", size="sm", elem_id="practice-mine-show", scale=1)
                delete = gr.Button("Delete this attempt", variant="stop", size="sm", elem_id="practice-mine-delete",
                                   scale=1)
            mine_status = gr.Markdown(elem_id="practice-mine-status")
        mine = [mine_table, mine_choice, mine_status]
        show.click(handlers.my_attempts, inputs=name, outputs=mine)
        answered.then(handlers.refresh_mine, inputs=[name, consent], outputs=mine, show_progress="hidden")  # kept: listed
        delete.click(handlers.delete_mine, inputs=[mine_choice, name], outputs=mine)
        page.load(handlers.on_load, inputs=remembered, outputs=[name, exercise, note, consent])
    return page


def serve_practice(workspace: Workspace, port: int, launch_kwargs: dict, *, rate: Any = None, own_files: Any = None,
                   logins: bool = False) -> tuple[gr.Blocks | None, str | None, str | None]:
    """Serve the practice page for `workspace` on `port` (else on a free port the system picks), with
    `launch_kwargs` (address, share, the login guard: `app.py` gives the same as the studio's, with the
    practice page's rules), `rate`, `own_files` and `logins` as `PracticeHandlers` and `practice_page` take
    them. Returns (page, local URL, share URL), or (None, None, None) when no port could be had (the studio
    goes on without it; a warning says why)."""
    import socket
    import sys

    page = build_practice(workspace, rate=rate, own_files=own_files, logins=logins).page
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


def build_practice(workspace: Workspace, *, rate: Any = None, own_files: Any = None,
                   logins: bool = False) -> SimpleNamespace:
    """The page and its handlers for `workspace` (`rate`, `own_files`: see `PracticeHandlers`). First the
    clips of attempts whose keeping was killed half-way, and the uploads a killed app was answering, are
    removed (`Inbox.undo_killed_writes`)."""
    from pipeline.inbox.store import Inbox

    Inbox(workspace).undo_killed_writes(remove_upload=discard_upload)
    handlers = PracticeHandlers(workspace, rate=rate, own_files=own_files)
    return SimpleNamespace(page=practice_page(handlers, logins=logins), handlers=handlers)
