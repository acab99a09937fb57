"""The studio as the handler tests meet it (no browser): a `TutorApp` on a fresh workspace, one whose
dataset build reports the sample pack's lengths, and a real learner clip handed over as an upload."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

E2B = "google/gemma-3n-E2B-it"


def fresh_app(root: Path):
    """A `TutorApp` (every tab's handlers) on an empty workspace at `root`."""
    from ui.tutor_app import TutorApp

    return TutorApp(root)


def app_with_built_lengths(root: Path):
    """A `TutorApp` on a workspace at `root` whose built dataset has rows up to 389 tokens, answers up
    to 80 tokens and clips up to 12.0 s (as the sample pack's build), built for E2B: what the Memory
    tab's estimate reads (`build_report.json`), with no dataset rows written."""
    app = fresh_app(root)
    report = app.ws.dataset_dir / "build_report.json"
    report.parent.mkdir(parents=True, exist_ok=True)
    report.write_text(json.dumps({"model": E2B, "length_stats": {
        "max": 389, "row_tokens": [389, 350, 300, 280], "answer_tokens": [80, 70, 60, 60], "max_clip_s": 12.0}}))
    return app


def learner_clip(speechocean_dir: Path, utt: str, folder: Path) -> str:
    """A real learner clip (speechocean762 utterance `utt`, e.g. "000010011") copied to `folder` (as an
    upload would be), as a file path."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{utt}.wav"
    shutil.copyfile(speechocean_dir / "WAVE" / f"SPEAKER{utt[1:5]}" / f"{utt}.WAV", path)
    return str(path)
