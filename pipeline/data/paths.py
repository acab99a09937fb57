"""File names written in import metadata on any system, resolved to the files of this folder.

Metadata travels between machines: a `metadata.csv` made on Windows names `clips\\kate\\w0.wav`,
a `wav.scp` keeps the absolute paths of the machine that wrote it (`/home/ann/corpus/WAVE/a.wav`,
`C:\\Users\\ann\\corpus\\WAVE\\a.wav`), a spreadsheet writes `./clips/a.wav` or `file:///...`, and a
macOS or Windows file system forgives case (`Clips/A.WAV` for `clips/a.wav`) and Unicode form (NFD
names from macOS) where Linux does not. `PathResolver.resolve(entry)` tries, in order:

1. the entry as written (absolute, or relative to each search folder), as this system reads it;
2. the entry split on both `/` and `\\` (the Windows separator), without `.` parts, a drive (`C:`),
   a UNC host and share (`\\\\server\\share`) or a `file://` prefix, under each search folder: its
   full form first, then shorter and shorter tails (`corpus/WAVE/a.wav`, `WAVE/a.wav`, `a.wav`), so an
   absolute path of another machine lands on the same file inside the imported folder;
3. steps 1-2 again matching each name without regard to case or Unicode form, when exactly one
   entry of the folder matches (two files differing only in case are never guessed between).

It deliberately never searches a folder tree for a bare file name: a tail is only looked up where
the metadata says it is, relative to the folders the importer names.
"""

from __future__ import annotations

import os
import re
import unicodedata
from pathlib import Path
from typing import Iterable, Sequence
from urllib.parse import unquote, urlparse

_DRIVE = re.compile(r"^[A-Za-z]:$")
MAX_PATH_CHARS = 4096
"""Longest path accepted (Linux `PATH_MAX`; Windows and macOS allow less)."""
MAX_NAME_BYTES = 255
"""Longest file or folder name, in UTF-8 bytes (`NAME_MAX` of ext4, APFS and NTFS alike)."""


def check_file_name(entry: str) -> None:
    """Refuse a metadata value that no file system takes as a path, before it reaches one (an
    `OSError: File name too long` would otherwise abort the import, printing the value).

    Raises:
        ValueError: too long (`MAX_PATH_CHARS` in all, `MAX_NAME_BYTES` per part) or holding a NUL
            character; the message gives the sizes, never the value.
    """
    if "\x00" in entry:
        raise ValueError("the file name holds a NUL character, which no file system allows (is this cell "
                         "binary data rather than a file name?)")
    if len(entry) > MAX_PATH_CHARS:
        raise ValueError(f"the file name is {len(entry):,} characters long; a path has at most {MAX_PATH_CHARS:,} "
                         "(is this cell text or data rather than a file name?)")
    longest = max((len(part.encode("utf-8", "surrogatepass")) for part in re.split(r"[\\/]", entry)), default=0)
    if longest > MAX_NAME_BYTES:
        raise ValueError(f"a part of the file name is {longest:,} bytes long; a file or folder name has at most "
                         f"{MAX_NAME_BYTES} (is this cell text or data rather than a file name?)")


def _key(name: str) -> str:
    """How a name compares when case and Unicode form are ignored (NFC, case-folded)."""
    return unicodedata.normalize("NFC", name).casefold()


def listed_parts(entry: str) -> tuple[list[str], bool]:
    """The path components of a metadata entry written on any system, and whether it was absolute.

    `clips\\kate\\w0.wav` -> (["clips", "kate", "w0.wav"], False); `C:\\data\\a.wav` -> (["data",
    "a.wav"], True); `\\\\server\\share\\a.wav` -> (["a.wav"], True); `./a.wav` -> (["a.wav"], False);
    `file:///home/x/a.wav` -> (["home", "x", "a.wav"], True). `..` parts are kept.
    """
    text = entry.strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "\"'":
        text = text[1:-1].strip()
    if text.lower().startswith("file:"):
        parsed = urlparse(text)
        text = unquote(parsed.path)
        if re.match(r"^/[A-Za-z]:", text):  # file:///C:/x -> C:/x
            text = text[1:]
    unc = text.startswith("\\\\") or (text.startswith("//") and not text.startswith("///"))
    absolute = text.startswith(("/", "\\"))
    parts = [p for p in re.split(r"[\\/]+", text) if p not in ("", ".")]
    if parts and _DRIVE.match(parts[0]):
        parts, absolute = parts[1:], True
    if unc and len(parts) >= 2:
        parts = parts[2:]  # host and share name
    return parts, absolute


class PathResolver:
    """Finds the files that import metadata names, whatever system wrote the metadata.

    Args:
        folders: where a relative entry may be, in order of preference (e.g. the metadata file's
            folder, then the imported folder). The resolver caches folder listings, so make one per
            import and resolve every row with it.
    """

    def __init__(self, folders: Iterable[Path]):
        self.folders = [Path(f) for f in folders]
        self._listings: dict[Path, dict[str, list[str]]] = {}

    def _listing(self, folder: Path) -> dict[str, list[str]]:
        if folder not in self._listings:
            entries: dict[str, list[str]] = {}
            try:
                for name in os.listdir(folder):
                    entries.setdefault(_key(name), []).append(name)
            except OSError:
                pass
            self._listings[folder] = entries
        return self._listings[folder]

    def find(self, folder: Path, parts: Sequence[str]) -> Path | None:
        """`folder / parts` as an existing file, matching each name exactly, else without regard to
        case or Unicode form when exactly one entry matches. None when there is no such file."""
        exact = Path(folder, *parts)
        if exact.is_file():
            return exact
        current = Path(folder)
        for index, part in enumerate(parts):
            if part == "..":
                current = current.parent
                continue
            if (current / part).exists():
                current = current / part
                continue
            matches = self._listing(current).get(_key(part), [])
            if len(matches) != 1:
                return None
            current = current / matches[0]
            if index < len(parts) - 1 and not current.is_dir():
                return None
        return current if current.is_file() else None

    def resolve(self, entry: str) -> Path | None:
        """The existing file that metadata `entry` names (see the module docstring), or None.

        Raises:
            ValueError: `entry` cannot be a file name on any system: longer than `MAX_PATH_CHARS`, a
                part longer than `MAX_NAME_BYTES`, or a NUL character (the message says which,
                without printing the value).
        """
        entry = str(entry)
        if not entry.strip():
            return None
        check_file_name(entry)
        try:
            return self._resolve(entry)
        except OSError:  # e.g. a folder + entry beyond PATH_MAX: no such file here
            return None

    def _resolve(self, entry: str) -> Path | None:
        literal = Path(entry)
        if literal.is_absolute() and literal.is_file():
            return literal
        parts, _ = listed_parts(entry)
        if not parts:
            return None
        # The full entry first, then ever shorter tails of it (an absolute path of another machine).
        for start in range(len(parts)):
            tail = parts[start:]
            if start > 0 and ".." in tail:
                continue
            for folder in self.folders:
                found = self.find(folder, tail)
                if found is not None:
                    return found
        return None
