"""`pipeline.data.exports`: each split of a build as JSON Lines (texts, scores, the clip's path, the
chat messages) and Parquet (with the WAV bytes), which `python -m pipeline import` reads back."""

from __future__ import annotations

import json

import pyarrow.parquet as pq

from pipeline.data.exports import export_splits
from pipeline.data.importers import import_folder
from pipeline.data.rows import sample_row
from pipeline.data.samples import SampleLibrary
from pipeline.workspace import Workspace

CLIP = "WAVE/SPEAKER0001/000010011.WAV"


def test_each_split_is_written_as_jsonl_and_parquet_and_the_jsonl_imports_back(tmp_path, speechocean_dir):
    ws = Workspace(tmp_path / "ws").ensure()
    library = SampleLibrary(ws)
    sample = library.add(str(speechocean_dir / CLIP), "WE CALL IT BEAR", "Open the EH in BEAR.", speaker="kate")
    row, reason = sample_row(sample, library, 30.0)
    assert reason is None
    row["num_tokens"] = 250  # counted by the build, in one batch

    written = export_splits(ws, {"train": [row], "eval": []}, library)
    assert set(written) == {"train.jsonl", "train.parquet", "eval.jsonl", "eval.parquet"}
    (line,) = (ws.exports_dir / "train.jsonl").read_text(encoding="utf-8").splitlines()
    record = json.loads(line)
    assert (record["id"], record["kind"], record["speaker"], record["num_tokens"]) == (sample.id, "read_aloud", "kate", 250)
    assert [m["role"] for m in record["messages"]][-1] == "assistant" and record["audio_path"]
    table = pq.read_table(ws.exports_dir / "train.parquet")
    assert table.num_rows == 1 and table.column("audio_wav")[0].as_py() == row["audio_wav"]
    assert (ws.exports_dir / "eval.jsonl").read_text(encoding="utf-8") == ""

    back = import_folder(tmp_path / "other", ws.exports_dir / "train.jsonl", format="chat")
    assert len(back.imported) == 1, back.skipped
    (again,) = SampleLibrary(tmp_path / "other").list()
    assert (again.kind, again.target_text, again.feedback, again.speaker) == (
        "read_aloud", "WE CALL IT BEAR", "Open the EH in BEAR.", "kate")
