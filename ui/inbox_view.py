"""The Inbox tab's text: the waiting attempts' table, the attempt shown (who, which exercise, of how many),
and where students find the practice page.

Pure formatting of `pipeline.inbox.store.Attempt`s (student, exercise, kind, the tutor's answer, when it was
made): table rows and Markdown. No gradio, no file reading, no pipeline call; `ui/inbox_tab.py` reads the
inbox and lays these out.
"""

from __future__ import annotations

import time
from typing import Any, Sequence

TABLE_HEADERS = ["student", "exercise", "tutor's answer", "when"]
"""The Waiting table's columns."""


def attempt_rows(pending: Sequence[Any]) -> list[list[str]]:
    """One row per waiting attempt (`TABLE_HEADERS`): the student, the exercise, the first 80 characters of the
    tutor's answer, and when it was made (local time, `YYYY-MM-DD HH:MM`)."""
    return [[a.student, a.exercise, a.answer[:80], time.strftime("%Y-%m-%d %H:%M", time.localtime(a.created_at))]
            for a in pending]


def nothing_waiting(message: str = "") -> str:
    """The status when no attempt waits, after `message` (what was just done) when there is one."""
    return message + (" " if message else "") + "No attempts waiting."


def attempt_markdown(current: Any, pending: Sequence[Any], same: Any = None) -> str:
    """The attempt shown, above its recording: its place among the `pending` ones, the student, the kind and
    the exercise, and a warning when the draft comes from the random stand-in model; with `same` (the library
    sample whose recording this attempt's already is, `Inbox.same_recording`), that it is there already and
    what Accept does with it (Markdown)."""
    ids = [a.id for a in pending]
    about = (f"**{ids.index(current.id) + 1} of {len(pending)} waiting** · **{current.student}** · "
             f"{'read aloud' if current.kind == 'read_aloud' else 'free speech'}: *{current.exercise}*")
    if current.tiny_random_model:
        about += " · ⚠ the draft comes from the random stand-in model"
    if same is not None:
        about += (f"\n\nThis recording is already in the library: sample `{same.id}` ({_said(same)}). "
                  "**Accept and next** marks this attempt done without adding it again (that sample keeps its own "
                  "feedback; edit it on the **1 · Samples** tab); **Delete** removes this attempt.")
    return about


def _said(sample: Any) -> str:
    """What a sample's recording is of, in a few words: its sentence or prompt and its learner."""
    text = getattr(sample, "target_text", None) or getattr(sample, "prompt", None) or "no sentence"
    who = f", {sample.speaker}" if getattr(sample, "speaker", None) else ""
    return f"*{text[:60]}*{who}"


def accepted_markdown(attempt: Any, sample: Any) -> str:
    """The status after **Accept and next**: the sample it became, or (`attempt.same_as`) that its recording
    was in the library already and it is marked done."""
    if getattr(attempt, "same_as", None):
        return (f"✓ Marked done: {attempt.student}'s recording is already sample `{sample.id}` in the library (it "
                "keeps its own feedback; edit it on the **1 · Samples** tab).")
    return f"✓ Accepted: sample `{sample.id}` (speaker {attempt.student})."


UNFINISHED = {"stopped": "stopped before the end", "stopping": "stopping", "failed": "failed part way",
              "running": "still training", "not_started": "not finished"}
"""How the Tutor list says a run did not finish, by its state (`pipeline.training.runs.run_status`)."""


def run_label(run: str, state: str | None) -> str:
    """A run in the practice page's Tutor list: its name, and when it did not complete, that it is unfinished
    (`r2 · unfinished: stopped before the end`); a completed run is its name alone."""
    if state == "completed":
        return run
    return f"{run} · unfinished: {UNFINISHED.get(state or '', 'not finished')}"


def no_tutor_picked(runs_exist: bool) -> str:
    """Offer to students pressed with no tutor picked: what to pick, or (`runs_exist` False) where a tutor
    comes from (Markdown)."""
    if runs_exist:
        return "✗ No tutor picked: choose one in **Tutor (a trained run)** above, then **Offer to students**."
    return ("✗ No tutor to offer yet: train one on the **4 · Train** tab (a stopped run has a tutor too), then "
            "pick it here.")


def where_markdown(text: str, practice_url: str | None) -> str:
    """`text` (the practice setup's status) followed by where students open the practice page, or that this
    app does not serve it (`practice_url` None)."""
    where = (f" Students open **{practice_url}**" if practice_url else
             " The practice page is not served by this app (see the README: `--practice-port`).")
    return text + where
