"""Workspaces with a dataset built from the real speechocean762 subset, shared by the training tests.

`real_workspace(...)` imports the 60 real clips (Kaldi layout, expert-score feedback) and builds the
dataset with the tiny model's processor, once per test session per variant; tests only add runs.
"""

from __future__ import annotations

import shutil
from pathlib import Path

_BUILT: dict[tuple, Path] = {}


def real_workspace(tmp_path_factory, speechocean_dir: Path, tiny_model_dir: Path, *, keep: int | None = None, eval_fraction: float = 0.34) -> Path:
    """A workspace whose dataset holds the real clips (the first `keep` sample ids, or all 60).

    Built once per session for each (`keep`, `eval_fraction`); do not modify its samples or dataset.
    """
    key = (str(tiny_model_dir), keep, eval_fraction)
    if key in _BUILT:
        return _BUILT[key]
    from pipeline.data.dataset import build_dataset
    from pipeline.data.importers import import_folder
    from pipeline.data.samples import SampleLibrary

    root = tmp_path_factory.mktemp(f"ws-real-{keep or 'all'}")
    report = import_folder(root, speechocean_dir, format="kaldi")
    assert len(report.imported) == 60, report.skipped
    if keep is not None:
        library = SampleLibrary(root)
        for sample in sorted(library.list(), key=lambda s: s.id)[keep:]:
            library.delete(sample.id)
    build_dataset(root, str(tiny_model_dir), eval_fraction=eval_fraction, seed=0, max_length=512)
    _BUILT[key] = root
    return root


def copy_workspace(source: Path, dest: Path) -> Path:
    """A private copy (dataset + samples) a test may add runs to without touching the shared one."""
    shutil.copytree(source, dest)
    return dest
