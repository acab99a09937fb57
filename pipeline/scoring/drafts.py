"""Draft feedback: the classical scorer writes the template for clips that have none, and a teacher accepts it.

A draft lives in `WS/scoring/drafts.json` (`{sample_id: {"text", "scored", "note", "drafted_at"}}`, written
atomically under its lock), never in the sample's `feedback`: a sample without feedback stays out of the
dataset build (so a draft is never trained on) until a teacher accepts it, as it is or edited
(`accept_draft`, which writes the sample's feedback through `SampleLibrary.update` and removes the draft).
The build report counts the drafts still waiting (`pipeline.data.dataset`).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from pipeline.errors import SampleError
from pipeline.workspace import Workspace

DRAFT_MARK = "[draft by the Classical scorer (no fine-tuning): check it, edit it, accept it]"
"""How a draft is marked wherever it is shown before a teacher accepts it (never part of the accepted text)."""


def _ws(workspace: Workspace | str | os.PathLike) -> Workspace:
    return workspace if isinstance(workspace, Workspace) else Workspace(Path(workspace))


def load_drafts(workspace: Workspace | str | os.PathLike) -> dict[str, dict]:
    """The drafts waiting in the workspace (`{}` when none or the file cannot be read)."""
    path = _ws(workspace).drafts_path
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _write(ws: Workspace, change) -> dict[str, dict]:
    """Apply `change(drafts)` to the saved drafts under their lock, write them atomically, return them."""
    from pipeline.fileio import atomic_write_json, locked

    ws.scoring_dir.mkdir(parents=True, exist_ok=True)
    with locked(ws.drafts_path):
        drafts = load_drafts(ws)
        change(drafts)
        atomic_write_json(ws.drafts_path, drafts)
    return drafts


def draft_all(workspace: Workspace | str | os.PathLike) -> dict:
    """Score every read-aloud sample that has a sentence and no feedback, and keep each answer as a draft.

    Returns:
        `{"drafted": [ids], "not_scored": {id: one-sentence reason}, "path", "note"}` (`note`: the map's provenance).
    """
    from pipeline.data.samples import SampleLibrary
    from pipeline.scoring.scorer import load_scorer

    ws = _ws(workspace)
    library = SampleLibrary(ws)
    scorer = load_scorer(ws)
    drafts, not_scored = {}, {}
    for sample in library.list():  # slow work (decoding, aligning) before the lock is taken
        if (sample.feedback or "").strip() or sample.kind != "read_aloud" or not (sample.target_text or "").strip():
            continue
        clip = scorer.score(library.audio_path(sample.id), sample.target_text)
        drafts[sample.id] = {"text": clip.text, "scored": clip.scored, "note": scorer.note,
                             "drafted_at": round(time.time(), 3)}
        if not clip.scored:
            not_scored[sample.id] = clip.reason
    _write(ws, lambda saved: saved.update(drafts))
    return {"drafted": sorted(drafts), "not_scored": not_scored, "path": str(ws.drafts_path), "note": scorer.note}


def accept_draft(workspace: Workspace | str | os.PathLike, sample_id: str, text: str | None = None):
    """Make a draft the sample's feedback: `text` (the teacher's edit) or the draft as it is; the draft is removed.

    Returns:
        the updated `Sample`.

    Raises:
        SampleError: no draft for `sample_id` and no `text`, a "Not scored" draft accepted unedited, an
            unknown sample, or text the library refuses (`SampleLibrary.update`'s checks).
    """
    from pipeline.conversation.feedback import is_not_scored
    from pipeline.data.samples import SampleLibrary

    ws = _ws(workspace)
    draft = load_drafts(ws).get(sample_id)
    feedback = (text if text is not None else (draft or {}).get("text") or "").replace(DRAFT_MARK, "").strip()
    if not feedback:
        raise SampleError(f"The feedback for sample `{sample_id}` is empty; type the feedback to keep." if draft else
                          f"No draft feedback for sample `{sample_id}`; press Draft feedback first, or type the feedback.")
    if is_not_scored(feedback):
        raise SampleError(f"The draft of `{sample_id}` is not feedback ({feedback}); write the feedback yourself, "
                          "or record the clip again.")
    sample = SampleLibrary(ws).update(sample_id, feedback=feedback)
    _write(ws, lambda saved: saved.pop(sample_id, None))
    return sample


def waiting_drafts(workspace: Workspace | str | os.PathLike, feedback_of: dict[str, str]) -> list[str]:
    """The ids of drafts whose sample (in `feedback_of`: sample id -> feedback) still has no feedback."""
    return sorted(i for i in load_drafts(workspace) if i in feedback_of and not (feedback_of[i] or "").strip())
