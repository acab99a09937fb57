"""Where everything lives inside a workspace folder; the one place that names these paths.

Layout:
    WS/samples/manifest.json     the sample library (written atomically)
    WS/samples/audio/<id>.wav    normalized 16 kHz mono PCM16 audio of each sample
    WS/dataset/                  the built `datasets.DatasetDict` (`save_to_disk`)
    WS/exports/                  JSONL / Parquet exports of the dataset
    WS/runs/<name>/              one training run (config.json, progress.jsonl, train.log,
                                 checkpoints/, adapter/, result.json, STOP, tensorboard/, eval/)
    WS/evals/<model>/<key>.json  saved evaluations of base models (`pipeline.tutor.evaluate`)
    WS/scoring/map.json          the classical scorer's map, fitted on the build's train split (`pipeline.scoring`)
    WS/scoring/lexicon.txt       pronunciations of words outside CMUdict (an import's `resource/lexicon.txt`, a teacher's)
    WS/scoring/drafts.json       the scorer's draft feedback for samples without any (never trained on until accepted)
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

DEFAULT_WORKSPACE = Path(os.environ.get("TUTOR_WORKSPACE", Path.home() / "pronunciation-tutor"))


@dataclass(frozen=True)
class Workspace:
    """Paths of one workspace folder. Creating the object touches no files; `ensure()` makes folders."""

    root: Path

    def __post_init__(self) -> None:
        object.__setattr__(self, "root", Path(self.root).expanduser().resolve())

    @property
    def samples_dir(self) -> Path:
        return self.root / "samples"

    @property
    def manifest_path(self) -> Path:
        return self.samples_dir / "manifest.json"

    @property
    def audio_dir(self) -> Path:
        return self.samples_dir / "audio"

    @property
    def dataset_dir(self) -> Path:
        return self.root / "dataset"

    @property
    def exports_dir(self) -> Path:
        return self.root / "exports"

    @property
    def runs_dir(self) -> Path:
        return self.root / "runs"

    def run_dir(self, name: str) -> Path:
        """Folder of run `name`: letters, digits, `-`, `_`, `.` only (it becomes a folder name)."""
        from pipeline.errors import ConfigError

        if not name or not all(c.isalnum() or c in "-_." for c in name) or name.startswith("."):
            raise ConfigError(
                f"Run name `{name}` is not usable as a folder name; use letters, digits, '-', '_' or '.'"
                " (e.g. `run-1`)."
            )
        return self.runs_dir / name

    @property
    def scoring_dir(self) -> Path:
        return self.root / "scoring"

    @property
    def scorer_map_path(self) -> Path:
        return self.scoring_dir / "map.json"

    @property
    def lexicon_path(self) -> Path:
        return self.scoring_dir / "lexicon.txt"

    @property
    def drafts_path(self) -> Path:
        return self.scoring_dir / "drafts.json"

    def ensure(self) -> "Workspace":
        """Create the workspace folders if missing; returns self."""
        for folder in (self.samples_dir, self.audio_dir, self.runs_dir):
            folder.mkdir(parents=True, exist_ok=True)
        return self
