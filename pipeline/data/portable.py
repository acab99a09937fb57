"""The built dataset as a portable folder of Parquet files, to train where the workspace is not.

    DIR/train.parquet, DIR/eval.parquet   every row with its 16 kHz mono WAV bytes, in the columns
                                          of `pipeline.data.dataset.COLUMNS`
    DIR/build_report.json                 the build's report (model, split, lengths, exclusions)
    DIR/dataset.json                      {"format": 1, "fingerprint", "splits": {name: rows}}

`write_portable_dataset(workspace, dir)` writes it from `WS/dataset`; `load_portable_dataset(dir)`
reads it back as the same `datasets.DatasetDict` `load_built_dataset` gives (same rows, same
order, same features), so `python -m pipeline train --dataset DIR` trains on exactly those rows.
`dataset_fingerprint` identifies a build's rows (ids, texts, feedback, scores and audio bytes)
whichever form it is read from: a run records it in result.json, and `import-run` compares it with
the workspace's build.

This module does not build or split anything (that is `pipeline.data.dataset`) and reads Parquet
with pyarrow directly (no copy into the `datasets` cache folder).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from pipeline.errors import DatasetError

FORMAT_VERSION = 1
INFO_NAME = "dataset.json"
SPLIT_FILES = {"train": "train.parquet", "eval": "eval.parquet"}


def dataset_fingerprint(data) -> str:
    """SHA-256 (hex) of a `DatasetDict`'s rows: per split (in name order) each row's id, target text,
    feedback, scores and the SHA-256 of its audio bytes, in row order. Equal for the workspace's
    build and its portable copy; any changed, added, removed or reordered row changes it."""
    digest = hashlib.sha256()
    for name in sorted(data):
        digest.update(f"split\x1f{name}\x1e".encode())
        for batch in data[name].iter(batch_size=256):
            for i, row_id in enumerate(batch["id"]):
                audio = hashlib.sha256(batch["audio_wav"][i] or b"").hexdigest()
                fields = (row_id, batch["target_text"][i], batch["feedback"][i], batch["scores"][i], audio)
                digest.update(("\x1f".join(str(f) for f in fields) + "\x1e").encode("utf-8"))
    return digest.hexdigest()


def write_portable_dataset(workspace, out_dir: str | os.PathLike) -> dict:
    """Write the workspace's built dataset into `out_dir` (created; an existing file there is replaced)
    as Parquet + `build_report.json` + `dataset.json`.

    Returns the `dataset.json` dict (`format`, `fingerprint`, `splits`, `model`: the model whose
    tokenizer measured the rows). Raises `DatasetError` when the workspace has no built dataset.
    """
    import pyarrow.parquet as pq

    from pipeline.data.dataset import load_build_report, load_built_dataset
    from pipeline.fileio import atomic_write_json

    data = load_built_dataset(workspace)
    report = load_build_report(workspace)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for name, split in data.items():
        if name in SPLIT_FILES:  # every row, in order, with the build's features
            pq.write_table(split.with_format("arrow")[:], str(out / SPLIT_FILES[name]))
    info = {
        "format": FORMAT_VERSION,
        "fingerprint": dataset_fingerprint(data),
        "splits": {name: len(split) for name, split in data.items()},
        "model": report.get("model"),
    }
    atomic_write_json(out / "build_report.json", report)
    atomic_write_json(out / INFO_NAME, info)
    return info


def check_portable_dataset(folder: str | os.PathLike) -> Path:
    """Check that `folder` holds a portable dataset (`train.parquet` with the dataset's columns);
    returns it as a Path. Raises `DatasetError` naming what is there and how to make one."""
    import pyarrow.parquet as pq

    from pipeline.data.dataset import COLUMNS

    path = Path(folder).expanduser()
    train_file = path / SPLIT_FILES["train"]
    if not train_file.is_file():
        found = sorted(p.name for p in path.iterdir())[:20] if path.is_dir() else "the folder does not exist"
        raise DatasetError(
            f"`{path}` is not a portable dataset folder (no {SPLIT_FILES['train']}; found {found}). Make one with "
            "`python -m pipeline export --workspace WS --run NAME --format bundle` (its dataset/ folder)."
        )
    for file in (path / name for name in SPLIT_FILES.values()):
        if not file.is_file():
            continue
        try:
            names = set(pq.read_schema(file).names)
        except Exception as error:  # noqa: BLE001 - any unreadable file becomes one typed error
            raise DatasetError(f"`{file}` is not a readable Parquet file ({type(error).__name__}: {error}); "
                               "export the bundle again.") from error
        missing = [c for c in COLUMNS if c not in names]
        if missing:
            raise DatasetError(f"`{file}` lacks the columns {missing} (it has {sorted(names)}); it was not written by "
                               "`export --format bundle`. Export the bundle again.")
    return path


def load_portable_dataset(folder: str | os.PathLike):
    """The `datasets.DatasetDict` (splits `train`, `eval`; `eval` empty when its file is absent) held
    in a portable dataset folder, with the features of `load_built_dataset`. Raises `DatasetError`."""
    import pyarrow.parquet as pq
    from datasets import Dataset, DatasetDict, DatasetInfo
    from datasets.table import InMemoryTable

    from pipeline.data.dataset import COLUMNS, _features

    path = check_portable_dataset(folder)
    features = _features()
    splits = {}
    for name, file_name in SPLIT_FILES.items():
        file = path / file_name
        if not file.is_file():
            splits[name] = Dataset.from_dict({c: [] for c in COLUMNS}, features=features)
            continue
        try:
            table = pq.read_table(file).select(list(COLUMNS)).cast(features.arrow_schema)
        except Exception as error:  # noqa: BLE001
            raise DatasetError(f"`{file}` cannot be read as the dataset ({type(error).__name__}: {error}); "
                               "export the bundle again.") from error
        splits[name] = Dataset(InMemoryTable(table), info=DatasetInfo(features=features))
    return DatasetDict(splits)


def read_portable_info(folder: str | os.PathLike) -> dict:
    """The folder's `dataset.json` dict ({} when absent or unreadable)."""
    try:
        return json.loads((Path(folder) / INFO_NAME).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
