"""Issue 32 leftovers: counts and sizes read as a person says them. "1 saved evaluation(s)", "Imported 51 clip(s)",
"1 turn(s)" became `pipeline.units.plural`'s "1 saved evaluation" / "51 clips"; "Modelfile (0.0 MiB)" became a
true size ("312 bytes")."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PLURAL_MARK = re.compile(r"[A-Za-z]\((s|es)\)")


def _docstrings(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                ids.add(id(first.value))
    return ids


def _marks(path: Path) -> list[str]:
    """Every string of `path` (f-strings' text parts included, docstrings and comments not) with "word(s)"."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skip = _docstrings(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip:
            if PLURAL_MARK.search(node.value):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {node.value[:80]!r}")
    return found


def test_no_user_visible_string_counts_with_a_bracketed_plural():
    files = [p for folder in ("pipeline", "ui") for p in sorted((ROOT / folder).rglob("*.py"))]
    files.append(ROOT / "app.py")
    found = [mark for path in files for mark in _marks(path)]
    assert not found, "say it with pipeline.units.plural(n, 'clip'):\n" + "\n".join(found)


def test_real_messages_count_in_words():
    from pipeline.units import plural
    from ui.judge_view import saved_status_markdown
    from ui.samples_view import import_summary

    assert import_summary({"imported": ["a"], "skipped": [], "format": None}, "x").startswith("Imported **1 recording** ")
    assert "Imported **51 recordings**" in import_summary({"imported": list(range(51)), "skipped": [], "format": None}, "x")
    shown = [{"run": None, "model": "m", "clips": 3}]
    assert saved_status_markdown(shown, "k", []).startswith("1 saved evaluation on this")
    assert plural(2, "child", "children") == "2 children"
    from ui.practice_view import exercise_note

    assert exercise_note("read_aloud", 1, False).endswith("1 exercise.")  # it said "1 exercises."


def test_the_pipelines_own_notes_count_in_words():
    import numpy as np

    from pipeline.data.audio import _over_full_scale_warnings
    from pipeline.tutor.eval_jobs import count_words

    (loud,) = _over_full_scale_warnings(np.array([0.5, 1.2, 0.1]), np.array([0.5, 1.0, 0.1]))
    assert loud.startswith("too loud: 1 sample was louder than"), loud
    assert count_words(3, 22, 0, 1) == "test recordings: 3 of 22 answered, then up to 1 listening check"


def test_a_small_file_shows_a_true_size_not_zero():
    from pipeline.export.cli import summary_text
    from pipeline.export.gguf import gguf_summary
    from pipeline.units import MIB, format_bytes
    from ui.try_view import export_markdown

    assert format_bytes(312) == "312 bytes" and format_bytes(1) == "1 byte" and format_bytes(0) == "0 bytes"
    assert format_bytes(4096) == "4 KiB" and format_bytes(300 * MIB) == "300 MiB"
    gguf = {"format": "gguf", "path": "WS/exports/runs/r/gguf", "bytes": 2 * MIB + 312, "run": "r", "notes": [],
            "files": {"r.gguf": 2 * MIB, "Modelfile": 312}}
    shown = export_markdown("r", gguf)
    assert "`Modelfile` (312 bytes)" in shown and "`r.gguf` (2 MiB)" in shown and "0.0" not in shown, shown
    tiny = {"format": "merged", "path": "p", "bytes": 20_000, "run": "r", "notes": [], "base_model": "m"}
    assert "(20 KiB)" in summary_text(tiny) and "0.0" not in summary_text(tiny)
    assert "0.0" not in "\n".join(gguf_summary({**gguf, "files": {"r.gguf": 900}}))


def test_the_import_summary_says_what_it_read_in_a_teachers_words():
    """New-user pass: "Imported 8 clips from … (kaldi layout)", "(chat layout)": an engineer's word for the
    folder's layout. Every format the importers read has its words, the format's name in brackets."""
    from pipeline.data.importers import FORMATS
    from ui.samples_view import IMPORT_FORMAT_WORDS, import_summary

    assert set(IMPORT_FORMAT_WORDS) == set(FORMATS)
    line = import_summary({"imported": ["a"], "skipped": [], "format": "kaldi"}, "x")
    assert "layout" not in line and "read as a speech-research corpus of sentences read aloud (Kaldi)" in line
    assert "(chat JSON)" in import_summary({"imported": ["a"], "skipped": [], "format": "chat"}, "x")


def test_the_skipped_files_come_first_in_the_import_table():
    """New-user pass item 5: "skipped 9 ... The table below says why", but the short table showed only imported rows
    (the skipped ones came after them, out of sight). The skipped rows come first, with their reasons."""
    from ui.samples_view import import_report_frame, import_summary

    report = {"imported": [f"s{i}" for i in range(40)], "format": None,
              "skipped": [{"file": "a.wav", "reason": "no sentence beside it"}]}
    frame = import_report_frame(report)
    assert list(frame["result"][:1]) == ["skipped"] and frame["reason"].iloc[0] == "no sentence beside it"
    assert len(frame) == 41 and "skipped files first" in import_summary(report, "x")
