"""Atomic file writes: a crash mid-write never leaves a half-written manifest or config. Also how a text
file a person made (an import's metadata, a recording session's list) is decoded: `read_text`."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write `data` to `path` atomically (temp file in the same folder, fsync, `os.replace`).

    Either the old content or the complete new content is on disk afterwards, never a mix.
    Creates parent folders. Raises `OSError` if the folder is not writable.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp_name, path)
    except BaseException:
        try:
            os.unlink(tmp_name)
        except FileNotFoundError:
            pass
        raise


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    """Write UTF-8 `text` to `path` atomically; see `atomic_write_bytes`."""
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: str | os.PathLike, obj: Any) -> None:
    """Write `obj` as indented UTF-8 JSON (non-ASCII kept) to `path` atomically."""
    atomic_write_text(path, json.dumps(obj, indent=2, ensure_ascii=False, sort_keys=False) + "\n")


def append_jsonl(path: str | os.PathLike, obj: Any) -> None:
    """Append one JSON object as a line to `path` (flushed and fsynced; readers skip a torn last line)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(json.dumps(obj, ensure_ascii=False) + "\n")
        handle.flush()
        os.fsync(handle.fileno())


def jsonl_lines(text: str) -> list[tuple[int, str]]:
    """The non-blank lines of JSON Lines `text` as `(line number from 1, line)`, split on "\n" only.

    JSON Lines separates values by "\n" (https://jsonlines.org/: "the line separator is '\n'"; a
    "\r\n" ending leaves a "\r" that JSON reads as whitespace). Never `str.splitlines()`: it also
    splits on U+2028, U+2029, U+0085, "\v", "\f" and "\x1c"-"\x1e", and the first three are valid
    raw inside a JSON string (a feedback text pasted from a word processor holds them), so one
    record would become several invalid ones. Lines of only whitespace are left out.
    """
    return [(number, line) for number, line in enumerate(text.split("\n"), start=1) if line.strip()]


def read_jsonl(path: str | os.PathLike) -> list[dict]:
    """Read a JSON-lines file (split on "\n" only, see `jsonl_lines`); a missing file gives `[]` and a
    torn (partial) last line is skipped."""
    path = Path(path)
    if not path.exists():
        return []
    rows = []
    for _, line in jsonl_lines(path.read_text(encoding="utf-8")):
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return rows


_UTF16_BOMS = ((b"\xff\xfe", "utf-16-le"), (b"\xfe\xff", "utf-16-be"))


def read_text(path: str | os.PathLike) -> str:
    """A text file a person made (a CSV or list saved from Excel or a text editor), decoded: UTF-8 with or
    without a byte-order mark, or UTF-16 with one (Excel's "Unicode Text" and some Windows editors).

    Raises `UnicodeDecodeError` for anything else (e.g. a legacy 8-bit code page); `where_not_utf8`
    words where, for the message."""
    data = Path(path).read_bytes()
    for bom, encoding in _UTF16_BOMS:
        if data.startswith(bom):
            return data[len(bom):].decode(encoding).replace("\r\n", "\n").replace("\r", "\n")
    return data.decode("utf-8-sig").replace("\r\n", "\n").replace("\r", "\n")


def where_not_utf8(path: str | os.PathLike, error: UnicodeDecodeError) -> str:
    """Where a file stops being UTF-8, in words for a message: "line 3, near 'Caf'" (no codec internals)."""
    data = Path(path).read_bytes()[: error.start]
    line = data.count(b"\n") + 1
    before = data.rsplit(b"\n", 1)[-1][-20:].decode("utf-8", errors="ignore")
    return f"line {line}" + (f", after {before!r}" if before.strip() else "")
