"""The built dataset's exports: `WS/exports/{train,eval}.jsonl` and `.parquet`, for use outside this
app (each row's kind, texts, scores, token count, audio paths and chat messages, which
`python -m pipeline import` reads back; Parquet with the WAV bytes).

Written by `pipeline.data.dataset.build_dataset` after the dataset itself is saved.
"""

from __future__ import annotations

import io
import json
from typing import Any

from pipeline.data.rows import export_record
from pipeline.workspace import Workspace


def export_splits(ws: Workspace, split_rows: dict[str, list[dict]], library: Any) -> dict[str, str]:
    """Write `WS/exports/{split}.jsonl` (text, scores, audio path, messages) and `{split}.parquet` (with WAV bytes).

    Args:
        ws: the workspace.
        split_rows: split name -> the rows `build_dataset` kept (columns of `pipeline.data.dataset.COLUMNS`).
        library: the `SampleLibrary` (for each row's stored audio path).

    Returns file name -> path of every file written (atomically).
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    from pipeline.fileio import atomic_write_bytes, atomic_write_text

    ws.exports_dir.mkdir(parents=True, exist_ok=True)
    written: dict[str, str] = {}
    samples = {s.id: s for s in library.list()}
    for name, rows in split_rows.items():
        lines = []
        for r in rows:
            paths = [str(p) for p in library.clip_paths(samples[r["id"]])] if r["id"] in samples else []
            lines.append(json.dumps(export_record(r, paths), ensure_ascii=False))
        jsonl = ws.exports_dir / f"{name}.jsonl"
        atomic_write_text(jsonl, "".join(line + "\n" for line in lines))
        table = pa.table(
            {
                "id": pa.array([r["id"] for r in rows], pa.string()),
                "speaker": pa.array([r["speaker"] for r in rows], pa.string()),
                "target_text": pa.array([r["target_text"] for r in rows], pa.string()),
                "feedback": pa.array([r["feedback"] for r in rows], pa.string()),
                "scores": pa.array([r["scores"] for r in rows], pa.string()),
                "audio_wav": pa.array([r["audio_wav"] for r in rows], pa.binary()),
                "num_tokens": pa.array([r["num_tokens"] for r in rows], pa.int32()),
                "duration_s": pa.array([r["duration_s"] for r in rows], pa.float32()),
                "kind": pa.array([r["kind"] for r in rows], pa.string()),
                "prompt": pa.array([r["prompt"] for r in rows], pa.string()),
                "turns": pa.array([r["turns"] for r in rows], pa.string()),
                "extra_audio_wavs": pa.array([r["extra_audio_wavs"] for r in rows], pa.list_(pa.binary())),
                "clips": pa.array([r["clips"] for r in rows], pa.int32()),
            }
        )
        buffer = io.BytesIO()
        pq.write_table(table, buffer)
        parquet = ws.exports_dir / f"{name}.parquet"
        atomic_write_bytes(parquet, buffer.getvalue())
        written[f"{name}.jsonl"] = str(jsonl)
        written[f"{name}.parquet"] = str(parquet)
    return written
