"""What a killed writer leaves, removed by the next write (`pipeline.fileio`): the fast checks of the mechanism
that `tests/test_kill_safety.py` drives through every long job with real kills."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from pipeline import fileio


def _dead_pid() -> int:
    """The pid of a process that has ended (and been reaped)."""
    done = subprocess.Popen([sys.executable, "-c", "pass"])
    done.wait()
    return done.pid


def test_a_killed_writer_s_journal_undoes_only_what_no_record_holds(tmp_path):
    folder = tmp_path / "samples"
    kept, orphan = folder / "audio" / "a.wav", folder / "audio" / "b.wav"
    kept.parent.mkdir(parents=True)
    kept.write_bytes(b"listed")
    orphan.write_bytes(b"never listed")
    journal = folder / f"{fileio.PENDING_PREFIX}{_dead_pid()}-x.jsonl"
    journal.write_text("".join(json.dumps({"path": str(p.resolve())}) + "\n" for p in (kept, orphan)))
    live = folder / f"{fileio.PENDING_PREFIX}{os.getpid()}-y.jsonl"  # a writer still at work keeps its files
    live.write_text(json.dumps({"path": str(orphan.resolve())}) + "\n")
    assert fileio.undo_pending(folder, keep=lambda path: path == kept.resolve()) == [orphan.resolve()]
    assert kept.read_bytes() == b"listed" and not orphan.exists() and not journal.exists() and live.exists()


def test_a_journal_removes_what_it_noted_when_its_block_fails_and_itself_when_it_ends(tmp_path):
    written = tmp_path / "clip.wav"
    try:
        with fileio.pending_files(tmp_path) as note:
            note(written).write_bytes(b"x")
            assert len(list(tmp_path.glob(fileio.PENDING_PREFIX + "*"))) == 1
            raise OSError("disk full")
    except OSError:
        pass
    assert list(tmp_path.iterdir()) == []
    with fileio.pending_files(tmp_path) as note:
        note(written).write_bytes(b"x")
    assert list(tmp_path.iterdir()) == [written]


def test_a_dead_writer_s_staging_folder_and_temp_file_go_and_a_live_one_s_stay(tmp_path):
    target = tmp_path / "dataset"
    dead, alive = _dead_pid(), os.getpid()
    for pid in (dead, alive):
        (tmp_path / f".dataset.staging-{pid}-abc" / "dataset").mkdir(parents=True)
        (tmp_path / f".dataset.staging-{pid}-abc" / "dataset" / "part").write_text("x")
        (tmp_path / f".manifest.json.staging-{pid}-abc.tmp").write_text("{")
    fileio._SWEPT.clear()
    fileio.recover_staging(target)
    left = sorted(p.name for p in tmp_path.iterdir())
    assert left == [f".dataset.staging-{alive}-abc", f".manifest.json.staging-{alive}-abc.tmp"]


def test_a_staged_write_s_names_carry_its_pid(tmp_path):
    with fileio.staged_folder(tmp_path / "out") as folder:
        assert folder.parent.name.startswith(f".out.staging-{os.getpid()}-")
    assert fileio.staging_prefix(Path(tmp_path / "x.gguf")) == f".x.gguf.staging-{os.getpid()}-"
