"""The built dataset as a portable folder of Parquet files, to train where the workspace is not.

    DIR/train.parquet, DIR/eval.parquet   every row with its 16 kHz mono WAV bytes, in the columns
                                          of `pipeline.data.dataset.COLUMNS`
    DIR/build_report.json                 the build's report (model, split, lengths, exclusions)
    DIR/dataset.json                      {"format": 1, "fingerprint", "splits": {name: rows}}

`write_portable_dataset(workspace, dir)` writes it from `WS/dataset`; `load_portable_dataset(dir)`
reads it back as the same `datasets.DatasetDict` `load_built_dataset` gives (same rows, same
order, same features), so `python -m pipeline train --dataset DIR` trains on exactly those rows.
`portable_identity` says which build the folder holds, as `pipeline.data.dataset.build_identity`
does for the workspace (same rows, same fingerprint): a run trained on it records it in its
`dataset.json`, a resume checks it, and `import-run` compares it with the workspace's build.

This module does not build or split anything (that is `pipeline.data.dataset`) and reads Parquet
with pyarrow directly (no copy into the `datasets` cache folder).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from pipeline.errors import DatasetError, cause_words, in_words

FORMAT_VERSION = 1
INFO_NAME = "dataset.json"
SPLIT_FILES = {"train": "train.parquet", "eval": "eval.parquet"}


def portable_identity(folder: str | os.PathLike) -> dict:
    """Which build a portable dataset folder holds, in the shape of `pipeline.data.dataset.build_identity`
    (`fingerprint`, `splits`, `row_ids`, `built_at`), computed from its rows (`fingerprint_rows`):
    equal to the identity of the workspace build it was written from."""
    from pipeline.data.dataset import fingerprint_rows

    data = load_portable_dataset(folder)
    row_ids = {name: sorted(split["id"]) for name, split in data.items()}
    report = read_json(Path(folder) / "build_report.json")
    return {"fingerprint": fingerprint_rows({name: split for name, split in data.items()}),
            "splits": {k: len(v) for k, v in row_ids.items()}, "row_ids": row_ids, "built_at": report.get("built_at")}


def dataset_identity(workspace, dataset_dir: str | os.PathLike | None = None) -> dict:
    """The build a run trains on: the portable folder's (`portable_identity`) when `dataset_dir` is
    given, else the workspace's (`pipeline.data.dataset.build_identity`)."""
    from pipeline.data.dataset import build_identity

    return portable_identity(dataset_dir) if dataset_dir is not None else build_identity(workspace)


def write_portable_dataset(workspace, out_dir: str | os.PathLike) -> dict:
    """Write the workspace's built dataset into `out_dir` (created; an existing file there is replaced)
    as Parquet + `build_report.json` + `dataset.json`.

    Returns the `dataset.json` dict (`format`, `fingerprint`, `splits`, `model`: the model whose
    tokenizer measured the rows). Raises `DatasetError` when the workspace has no built dataset.
    """
    import pyarrow.parquet as pq

    from pipeline.data.dataset import build_identity, load_build_report, load_built_dataset
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
        "fingerprint": build_identity(workspace)["fingerprint"],
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
        found = in_words(sorted(p.name for p in path.iterdir()), limit=20) if path.is_dir() else "the folder does not exist"
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
            raise DatasetError(f"`{file}` is not a readable Parquet file ({cause_words(error)}); "
                               "export the bundle again.") from error
        missing = [c for c in COLUMNS if c not in names]
        if missing:
            raise DatasetError(f"`{file}` lacks the columns {in_words(missing)} (it has {in_words(sorted(names))}); it was not written by "
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


def read_json(path: str | os.PathLike) -> dict:
    """A JSON object file as a dict ({} when absent or unreadable): `dataset.json`, `build_report.json`."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}
