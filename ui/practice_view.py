"""The practice page's text: the exercises offered, the note above them, and what became of an attempt.

Pure formatting of the teacher's practice setup (`pipeline.inbox.practice.PracticeSetup`: the exercises and
their kind) and of `pipeline.inbox.practice.answer_attempt`'s result. No gradio, no file reading, no pipeline
call; `ui/practice_page.py` reads the setup and lays these out.
"""

from __future__ import annotations

import html
import time
from typing import Any, Sequence
from pipeline.units import plural

STAND_IN_NOTE = ("**This is a test tutor**, for trying out the page: its feedback is random text, not advice on "
                 "your pronunciation.")
"""The note when the run offered answers with the random stand-in model: said to a student plainly (what it is,
what its feedback is worth), nothing about the teacher or the model's files."""
NOT_SET_UP = "Your teacher has not set up the practice yet. Ask them, then reload this page."
"""The note while there is no practice setup."""


def exercise_choices(items: Sequence[str]) -> list[tuple[str, int]]:
    """The Exercise dropdown's choices: ("1. first exercise", 0), ("2. second", 1), ... (label, index)."""
    return [(f"{number}. {item}", number - 1) for number, item in enumerate(items, start=1)]


def exercise_note(kind: str, count: int, stand_in: bool) -> str:
    """The note above the exercises: what to do for their `kind` (read aloud or free speech) and how many there
    are, headed by `STAND_IN_NOTE` when the tutor is the random stand-in model (Markdown)."""
    what = "Read the sentence aloud" if kind == "read_aloud" else "Answer the question, speaking freely"
    note = f"{what}, then click **Get feedback**. {plural(count, 'exercise')}."
    return f"{STAND_IN_NOTE}\n\n{note}" if stand_in else note


def exercise_text(kind: str, item: str) -> str:
    """The picked exercise in full, under the Exercise box: the sentence to read or the question to answer
    (Markdown)."""
    return f"{'Read aloud' if kind == 'read_aloud' else 'Answer'}: **{html.escape(item)}**"


ANSWERING = "The tutor is answering…"
"""The line under the feedback while the answer is being generated (it grows above)."""


_DECISIONS = {"pending": "not seen yet", "accepted": "kept as a sample", "rejected": "set aside"}
ALREADY_THERE = "already had this recording, so nothing was added (their copy stays if you delete this)"
"""What the teacher did with an attempt whose recording was in the library already (`Attempt.same_as`): the
Inbox marked it done and added nothing, and deleting the attempt leaves the teacher's own sample."""


def decision_words(attempt: Any) -> str:
    """What the teacher did with an attempt, as its student reads it: not seen yet, kept as a sample, set aside,
    or (`same_as`) that the teacher already had the recording (`ALREADY_THERE`)."""
    if attempt.status == "accepted" and getattr(attempt, "same_as", None):
        return ALREADY_THERE
    return _DECISIONS.get(attempt.status, attempt.status)


MINE_NOTE = ("What your teacher can see. Delete any of them: its recording, the exercise and the tutor's answer "
             "are removed, and so is the sample your teacher made from it, if they kept it as one.")
"""Above the student's kept attempts: what a delete removes (`pipeline.inbox.store.Inbox.delete`: the attempt,
and the library sample made from it; a sample the teacher had already, `Attempt.same_as`, stays)."""
ANSWER_SHOWN = 60
"""Characters of the tutor's answer a kept attempt shows (the student heard it whole already)."""


def mine_markdown(attempts: Sequence[Any]) -> str:
    """The student's own kept attempts as a list that wraps to any width (a four-column table was cut off at
    the right on a 390 px phone): per attempt, when (local `YYYY-MM-DD HH:MM`) and the exercise on one line,
    then the first `ANSWER_SHOWN` characters of the tutor's answer and what the teacher did with it. "" when
    none is kept (the status line under it says so). Markdown; the student's texts are HTML-escaped."""
    lines = []
    for a in attempts:
        answer = " ".join(str(a.answer or "").split())
        answer = answer if len(answer) <= ANSWER_SHOWN else answer[: ANSWER_SHOWN - 1] + "…"
        lines.append(f"- **{time.strftime('%Y-%m-%d %H:%M', time.localtime(a.created_at))}** · "
                     f"*{html.escape(str(a.exercise))}*  \n"
                     f"  Tutor: {html.escape(answer) or '(no answer)'}  \n"
                     f"  Your teacher: {decision_words(a)}")
    return "\n".join(lines)


def mine_choices(attempts: Sequence[Any]) -> list[tuple[str, str]]:
    """The delete dropdown's choices: ("2026-12-02 14:03 · She sells sea shells.", attempt id)."""
    return [(f"{time.strftime('%Y-%m-%d %H:%M', time.localtime(a.created_at))} · {a.exercise}", a.id) for a in attempts]


def mine_status(count: int) -> str:
    """How many attempts are kept for the teacher."""
    return {0: "Nothing of yours is kept."}.get(count, f"{count} attempt{'s' if count != 1 else ''} kept for your teacher.")


def deleted_status(attempt: Any) -> str:
    """After a student deleted one of their attempts (`pipeline.inbox.store.Attempt`, as `Inbox.delete` returns
    it): what went, and what happened to the library sample: removed when it was made from the attempt, kept
    when it is the teacher's own recording (`same_as`)."""
    text = f"✓ Deleted your attempt at *{html.escape(str(attempt.exercise))}*: its recording and the tutor's answer are gone"
    if attempt.status == "accepted" and getattr(attempt, "same_as", None):
        return text + ". Your teacher's own copy of this recording stays in their library."
    if attempt.status == "accepted":
        return text + ", and so is the sample your teacher made from it."
    return text + "."


def answer_status(kept: bool, stand_in: bool, not_kept: str | None = None) -> str:
    """The line under the feedback: whether the attempt was `kept` for the teacher (the student's consent), why
    it could not be kept when consent was given (`not_kept`, e.g. a full disk), and a warning when the answer
    comes from the random stand-in model."""
    status = ("✓ Kept for your teacher." if kept else f"✗ Not kept for your teacher: {not_kept}" if not_kept else
              "Not stored: your recording was deleted once answered (you did not tick the box).")
    if stand_in:
        status += " This answer comes from the test tutor: random text, not advice."
    return status
