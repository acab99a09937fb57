"""`TutorApp`: the handlers of every tab, bound to one workspace folder.

Each tab's handlers are a class in that tab's module (`SamplesHandlers`, `DatasetHandlers`, ...);
they share one `AppState` (the workspace, remembered settings, the model picker). `TutorApp` holds
one of each and also offers every handler under its own name (`app.save_sample`, `app.poll`, ...),
the flat API the handler tests (`tests/test_app_handlers.py`) call.
"""

from __future__ import annotations

import os

from pipeline.workspace import DEFAULT_WORKSPACE, Workspace
from ui.dataset_tab import DatasetHandlers
from ui.get_model import GetModelHandlers
from ui.inbox_tab import InboxHandlers
from ui.judge_tab import JudgeHandlers
from ui.memory_tab import MemoryHandlers
from ui.samples_tab import SamplesHandlers
from ui.state import AppState
from ui.train_tab import TrainHandlers
from ui.try_export import ExportHandlers
from ui.try_tab import TryHandlers


def _handler(part: str, name: str) -> property:
    """A read-only attribute that is `self.<part>.<name>` (a tab's bound handler, or a state attribute);
    `part` may be dotted (`samples.kinds`)."""
    import functools

    return property(lambda self: getattr(functools.reduce(getattr, part.split("."), self), name), doc=f"`{part}.{name}`")


def _last_update(part: str, name: str) -> property:
    """As `_handler`, for a handler that yields its updates (an answer shown as it is generated): the flat
    API returns the last update, what the page ends with."""
    import functools

    def final(self):
        handler = getattr(functools.reduce(getattr, part.split("."), self), name)

        @functools.wraps(handler)
        def last(*args, **kwargs):
            update = None
            for update in handler(*args, **kwargs):
                pass
            return update

        return last

    return property(final, doc=f"`{part}.{name}`, its last update")


class TutorApp:
    """The handlers of the app, bound to one workspace folder. Each calls one `pipeline/` function.

    Handlers are plain methods (testable without a browser): they take widget values and return
    widget values (a handler that shows an answer as it is generated yields them; here it returns the
    last); bad input raises `gr.Error` through `ui_errors`.
    """

    def __init__(self, workspace: str | os.PathLike | Workspace = DEFAULT_WORKSPACE, shared: bool = False,
                 practice_url: str | None = None):
        self.state = AppState(workspace, shared=shared)
        self.samples = SamplesHandlers(self.state)
        self.dataset = DatasetHandlers(self.state)
        self.memory = MemoryHandlers(self.state)
        self.train = TrainHandlers(self.state)
        self.tryout = TryHandlers(self.state)
        self.export = ExportHandlers(self.state)
        self.judge = JudgeHandlers(self.state)
        self.inbox = InboxHandlers(self.state, practice_url)
        self.get_model = GetModelHandlers(self.state)  # the panel under the model picker

    @property
    def ws(self) -> Workspace:
        """The workspace folder every tab works in."""
        return self.state.ws

    # The workspace, its remembered settings and the model picker (ui.state).
    tiny_model_dir = _handler("state", "tiny_model_dir")
    settings_path = _handler("state", "settings_path")
    model_choices = _handler("state", "model_choices")
    make_tiny_model = _handler("state", "make_tiny_model")
    make_tiny_gemma4 = _handler("state", "make_tiny_gemma4")
    describe_model = _handler("state", "describe_model")
    saved_settings = _handler("state", "saved_settings")
    remember_settings = _handler("state", "remember_settings")
    restore_settings = _handler("state", "restore_settings")

    # 1 Samples
    check_clip = _handler("samples", "check_clip")
    check_recording = _handler("samples", "check_recording")
    save_sample = _handler("samples", "save_sample")
    samples_table = _handler("samples", "samples_table")
    select_sample = _handler("samples", "select_sample")
    update_sample = _handler("samples", "update_sample")
    delete_sample = _handler("samples", "delete_sample")
    import_folder = _handler("samples", "import_folder")
    load_sample_pack = _handler("samples", "load_sample_pack")
    save_clip = _handler("samples.kinds", "save_clip")
    add_learner_turn = _handler("samples.kinds", "add_learner_turn")
    add_tutor_turn = _handler("samples.kinds", "add_tutor_turn")
    save_dialogue = _handler("samples.kinds", "save_dialogue")
    start_session = _handler("samples.session", "start_session")
    session_save_and_next = _handler("samples.session", "save_and_next")
    session_skip = _handler("samples.session", "skip")
    session_back = _handler("samples.session", "back")
    session_restore = _handler("samples.session", "restore")
    session_check = _handler("samples.session", "check")

    # 2 Dataset
    build_dataset = _handler("dataset", "build_dataset")
    dataset_on_load = _handler("dataset", "dataset_on_load")

    # 3 Memory
    detect_device = _handler("memory", "detect_device")
    estimate = _handler("memory", "estimate")
    plan = _handler("memory", "plan")
    apply_suggestion = _handler("memory", "apply_suggestion")
    measure = _handler("memory", "measure")

    # 4 Train
    settings_summary = _handler("train", "settings_summary")
    page_settings_summary = _handler("train", "page_settings_summary")
    start_training = _handler("train", "start_training")
    stop_training = _handler("train", "stop_training")
    resume_training = _handler("train", "resume_training")
    poll = _handler("train", "poll")
    runs_table = _handler("train", "runs_table")
    on_load = _handler("train", "on_load")
    refresh_run_lists = _handler("train", "refresh_run_lists")

    # 5 Try
    try_feedback = _last_update("tryout", "try_feedback")
    try_dialogue_send = _last_update("tryout.dialogue", "send")
    try_dialogue_start_over = _handler("tryout.dialogue", "start_over")
    export_run = _handler("export", "export")
    import_run = _handler("export", "import_run")

    # 6 Judge
    judge_candidates = _handler("judge", "candidates")
    evaluate_models = _handler("judge", "evaluate")
    cancel_evaluation = _handler("judge", "cancel")
    saved_evaluations = _handler("judge", "show_saved")

    # 7 Inbox (students' practice attempts) and the practice page's setup
    inbox_show = _handler("inbox", "show")
    inbox_accept = _handler("inbox", "accept")
    inbox_reject = _handler("inbox", "reject")
    practice_setup = _handler("inbox", "save_setup")
