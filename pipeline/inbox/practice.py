"""The practice page's setup (one run, one exercise list) and one student attempt answered by the tutor.

`python -m pipeline practice --workspace WS --run NAME --list session|FILE [--kind read_aloud|free_speech]`

The teacher picks the run that answers and the exercises (the recording session's list,
`pipeline.data.session`, or a `.txt`/`.csv` list read by `parse_items`); the setup is kept in
`WS/inbox/practice.json` (atomic, written under its lock: `pipeline.fileio.locked`), so the page,
the studio and the command line share it and a change shows on the page's next load. `answer_attempt` asks the run's tutor (`pipeline.tutor.infer`,
the same conversation as training) and, only when the student consented, keeps the attempt in the
inbox (`pipeline.inbox.store.Inbox`). Without consent nothing is written. An `AttemptRate` bounds how
often one student may ask (checked before the clip is decoded or the model runs).
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable

from pipeline.errors import ConfigError, SampleError
from pipeline.fileio import atomic_write_json, locked
from pipeline.inbox.store import INBOX_DIR, Inbox
from pipeline.workspace import Workspace

SETUP_FILE = "practice.json"
SESSION_LIST = "session"
DEFAULT_ATTEMPTS_PER_HOUR = 60
"""Practice attempts one student may send per hour (a moving window) by default: one a minute on average,
well above a student's pace (record, read, try again) and far below a script's."""
"""`--list session`: the exercises are the workspace's recording-session list (`WS/samples/session.json`)."""


@dataclass
class PracticeSetup:
    """What the practice page offers.

    Attributes:
        run: the run whose tutor answers (it has an adapter), or `classical-scorer` (`pipeline.scoring`: no run needed).
        kind: `read_aloud` (items are sentences to read) or `free_speech` (items are prompts).
        items: the exercises, in order.
        source: where the list came from (`session` or a file name), for the teacher.
        set_at: unix seconds.
    """

    run: str
    kind: str
    items: list[str]
    source: str = ""
    set_at: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _ws(workspace: Workspace | str | Path) -> Workspace:
    return workspace if isinstance(workspace, Workspace) else Workspace(workspace)


def setup_path(workspace: Workspace | str | Path) -> Path:
    """`WS/inbox/practice.json`."""
    return _ws(workspace).root / INBOX_DIR / SETUP_FILE


def session_list(workspace: Workspace | str | Path) -> tuple[list[str], str]:
    """The recording session's (items, kind). Raises `ConfigError` when the workspace has no session."""
    from pipeline.data.session import SessionStore

    session = SessionStore(_ws(workspace)).load()
    if session is None:
        raise ConfigError("This workspace has no recording-session list yet; make one in Samples → Recording session, "
                          "or give a .txt/.csv file of sentences or prompts as the list instead.")
    return list(session.items), session.kind


def save_setup(workspace: Workspace | str | Path, run: str, items: list[str], kind: str = "read_aloud",
               source: str = "") -> PracticeSetup:
    """Check and keep the practice setup; returns it.

    Raises:
        ConfigError: a run without an adapter (names the usable ones), an empty list, or a kind other than
            read_aloud / free_speech.
    """
    from pipeline.scoring.scorer import SCORER_MODEL_ID
    from pipeline.tutor.infer import usable_runs

    ws = _ws(workspace)
    runs = usable_runs(ws) + [SCORER_MODEL_ID]  # the classical scorer answers with no run trained
    if not run or run not in runs:
        shown = ", ".join(runs) if runs else "none yet (train one in the Train tab)"
        raise ConfigError(f"Run `{run or ''}` has no trained adapter in {ws.runs_dir}; pick one of: {shown}.")
    if kind not in ("read_aloud", "free_speech"):
        raise ConfigError(f"Practice exercises are read_aloud sentences or free_speech prompts, not `{kind}`.")
    items = [i for i in (str(s).strip() for s in items) if i]
    if not items:
        raise ConfigError("The exercise list is empty: paste the sentences (or prompts), one per line.")
    setup = PracticeSetup(run=run, kind=kind, items=items, source=source, set_at=round(time.time(), 3))
    with locked(setup_path(ws)):
        atomic_write_json(setup_path(ws), setup.to_dict())
    return setup


def load_setup(workspace: Workspace | str | Path) -> PracticeSetup | None:
    """The saved setup, or None when the teacher has not set one (or the file is unreadable)."""
    path = setup_path(workspace)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return PracticeSetup(**{k: data[k] for k in PracticeSetup.__dataclass_fields__ if k in data})
    except (OSError, ValueError, TypeError):
        return None


def setup_from_list(workspace: Workspace | str | Path, run: str, list_ref: str, kind: str | None = None) -> PracticeSetup:
    """`save_setup` from a list reference: `session` (the recording session's list and kind) or a `.txt`/`.csv`
    file (`pipeline.data.session.parse_items`; `kind` defaults to read_aloud).

    Raises `ConfigError` as `save_setup`, for no session, or for a list file that does not exist.
    """
    from pipeline.data.session import parse_items

    if list_ref == SESSION_LIST:
        items, session_kind = session_list(workspace)
        return save_setup(workspace, run, items, kind or session_kind, source=SESSION_LIST)
    path = Path(list_ref).expanduser()
    if not path.is_file():
        raise ConfigError(f"The exercise list `{list_ref}` is not a file; give a .txt (one sentence per line) or "
                          f"a .csv with a `sentence` or `prompt` column, or `{SESSION_LIST}` for the recording session's list.")
    try:
        items = parse_items(file=path)
    except SampleError as error:
        raise ConfigError(str(error)) from None
    return save_setup(workspace, run, items, kind or "read_aloud", source=path.name)


class AttemptRate:
    """How many practice attempts one student may send: `per_hour` in any moving hour (the `limits`
    library's moving window, kept in this process's memory: the practice page is one process).

    Args:
        per_hour: attempts per student per hour (>= 1; `DEFAULT_ATTEMPTS_PER_HOUR` by default).

    Raises:
        ConfigError: `per_hour` below 1.
    """

    def __init__(self, per_hour: int = DEFAULT_ATTEMPTS_PER_HOUR):
        from limits import RateLimitItemPerHour, storage, strategies

        if int(per_hour) < 1:
            raise ConfigError(f"`--attempts-per-hour` must be at least 1, got {per_hour}; "
                              f"{DEFAULT_ATTEMPTS_PER_HOUR} is the default.")
        self.per_hour = int(per_hour)
        self._item = RateLimitItemPerHour(self.per_hour)
        self._limiter = strategies.MovingWindowRateLimiter(storage.MemoryStorage())

    def take(self, student: str) -> None:
        """Count one attempt of `student`, or refuse it.

        Raises:
            ConfigError: the student sent `per_hour` attempts in the last hour; says the limit and when the
                next attempt is possible (seconds).
        """
        if self._limiter.hit(self._item, "attempts", student):
            return
        wait_s = max(1, int(self._limiter.get_window_stats(self._item, "attempts", student).reset_time - time.time()))
        raise ConfigError(f"You have sent {self.per_hour} attempts in the last hour, the most this page takes; "
                          f"try again in {wait_s // 60} min {wait_s % 60} s (your teacher sets this limit).")


def answer_attempt(workspace: Workspace | str | Path, audio: Any, exercise: int, *, student: str, consent: bool,
                   max_new_tokens: int = 256, rate: AttemptRate | None = None,
                   on_text: Callable[[str], None] | None = None) -> dict[str, Any]:
    """The tutor's answer to one student attempt, kept in the inbox when `consent` is True.

    Args:
        audio: anything `pipeline.data.audio.load_audio` accepts (a path, `(rate, int16 ndarray)` ...).
        exercise: index of the exercise in the setup's list (0-based).
        student: the student's name (required when `consent`).
        consent: keep the clip, exercise, answer and time in the inbox; False stores nothing.
        rate: the attempts a student may send (`AttemptRate`), counted before the clip is decoded; None: no bound.
        on_text: optional `(answer so far) -> None`, called as the tutor's answer is generated (the page
            shows it growing); the attempt is kept, with consent, once the answer is whole.

    Returns:
        `{"text": the answer, "note": str | None (says when the model is the random stand-in),
        "tiny_random_model": bool, "attempt": attempt id or None, "exercise": the sentence or prompt,
        "not_kept": None, or why a consented attempt could not be kept (a full disk): the answer is still given}`.

    Raises:
        ConfigError: no practice setup, an exercise index out of range, or the student's attempt rate is spent.
        AudioError: the clip fails a check (nothing is stored, nothing is asked).
        ModelLoadError: the run's model cannot load.
    """
    from pipeline.data.audio import load_audio
    from pipeline.scoring.scorer import SCORER_MODEL_ID
    from pipeline.tutor.infer import load_tutor

    ws = _ws(workspace)
    setup = load_setup(ws)
    if setup is None:
        raise ConfigError("The teacher has not set up the practice yet (a run and an exercise list): in the studio, "
                          "Inbox → Practice page, or `python -m pipeline practice`.")
    if not 0 <= int(exercise) < len(setup.items):
        raise ConfigError(f"Exercise {int(exercise) + 1} does not exist; the list has {len(setup.items)}. Pick one from the list.")
    if consent and not (student or "").strip():
        raise ConfigError("Type your name first: it is kept with your recordings for your teacher.")
    text = setup.items[int(exercise)]
    if rate is not None:
        rate.take((student or "").strip() or "(no name)")
    clip = load_audio(audio)  # a bad clip is refused before the model loads
    if setup.run == SCORER_MODEL_ID:  # the classical scorer (no fine-tuning): a class practises on day one
        from pipeline.scoring.scorer import ScorerTutor, load_scorer

        tutor = ScorerTutor(load_scorer(ws))
    else:
        tutor = load_tutor(None, run=setup.run, workspace=ws)
    ask = tutor.feedback if setup.kind == "read_aloud" else tutor.free_speech_feedback
    answer = ask(clip, text, max_new_tokens=int(max_new_tokens), on_text=on_text)
    attempt, not_kept = None, None
    if consent:
        try:
            attempt = Inbox(ws).add(clip, student=student, kind=setup.kind, exercise=text, answer=answer.text,
                                    run=setup.run, model=answer.model, tiny_random_model=answer.tiny_random_model).id
        except SampleError as error:  # the disk is full: the student still reads the answer
            not_kept = str(error)
    return {"text": answer.text, "note": answer.note, "tiny_random_model": answer.tiny_random_model,
            "attempt": attempt, "exercise": text, "not_kept": not_kept}
