"""Writing an export so that a failure leaves nothing half-written, readable by the person it is for,
and checking the disk first.

Every export is written into a hidden staging path beside its target (`.NAME.staging-*`) and
appears under its real name only by one rename once complete: a folder through
`pipeline.fileio.staged_folder` (the one folder swap of the project, which the dataset build, the
adapter and the kept best checkpoint use too), one file through `staged_file`; an error removes the
staging path. A process killed mid-write leaves only a hidden staging path named with its pid, which the next export of
the same target removes (`pipeline.fileio.recover_staging`: its writer is gone, or it is older than
`pipeline.fileio.STALE_STAGING_S`). What an export adds
to the swap: its files are readable by others (`_readable`: it is something to send or upload), and a
full disk is refused before writing with `ExportError` (`check_free_space`).
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from pathlib import Path
from typing import Iterator

from pipeline.errors import ExportError
from pipeline import fileio
from pipeline.units import format_bytes


def check_free_space(folder: str | os.PathLike, needed_bytes: int, what: str) -> None:
    """Raise `ExportError` unless `folder`'s disk has `needed_bytes` x `pipeline.fileio.DISK_MARGIN` free.

    `what` names the export in the message, e.g. "the merged model (bf16, 10.2 GiB)".
    """
    free, wanted = fileio.disk_room(folder, needed_bytes)
    if free < wanted:
        raise ExportError(
            f"Writing {what} into {folder} needs about {format_bytes(wanted)} but only {format_bytes(free)} is "
            "free there. Free some space, or give --out a folder on a larger disk."
        )


def folder_bytes(folder: str | os.PathLike) -> int:
    """Total size in bytes of the files under `folder` (symlinks followed)."""
    return sum(p.stat().st_size for p in Path(folder).rglob("*") if p.is_file())


def _readable(folder: Path) -> None:
    """Folders 0755 and files at least 0644, as a person expects of something to send or upload
    (`tempfile` and `atomic_write_*` create them private)."""
    folder.chmod(0o755)
    for path in folder.rglob("*"):
        if not path.is_symlink():
            path.chmod(0o755 if path.is_dir() else path.stat().st_mode & 0o777 | 0o644)


SYSTEM_LITTER = frozenset({".DS_Store", "Thumbs.db", "desktop.ini"})
"""Files a file browser leaves in a folder it showed (macOS Finder, Windows Explorer): never a person's work."""


def _files_in(folder: Path) -> set[str]:
    """Relative POSIX paths of the files (and links) under `folder`, less `SYSTEM_LITTER` and macOS `._*` files."""
    return {path.relative_to(folder).as_posix() for path in folder.rglob("*")
            if (path.is_file() or path.is_symlink()) and path.name not in SYSTEM_LITTER
            and not path.name.startswith("._")}


def _record_files(folder: Path, record: str) -> None:
    """Add `"files"`, the sorted list of what `folder` holds, to its JSON `record` (export.json, bundle.json):
    what the next export of the same target may replace (`check_replaceable`)."""
    data = json.loads((folder / record).read_text(encoding="utf-8"))
    data["files"] = sorted(_files_in(folder) - {record})
    fileio.atomic_write_json(folder / record, data)


def check_replaceable(target: str | os.PathLike, record: str) -> str | None:
    """Refuse, before any work, to replace a `target` folder that holds something an earlier export did not write.

    An export replaces its earlier self whole (`staged_folder`). That is safe only for the files it wrote, which
    its `record` (export.json, bundle.json) lists under "files". `SYSTEM_LITTER` does not count.

    Returns:
        None when `target` is missing or empty; otherwise the note "Replaced the earlier export in TARGET."

    Raises:
        ExportError: `target` is a file; it is a folder that no export wrote (no readable `record`); or it holds
            files that its record does not list (a person's own, named). A record without "files" (written
            before exports listed theirs) is taken as the export's whole folder.
    """
    target = Path(target)
    if not target.exists():
        return None
    move_it = "Move what you want to keep out of it, or give --out another folder."
    if not target.is_dir():
        raise ExportError(f"`{target}` is a file, where this export writes a folder. {move_it}")
    present = _files_in(target)
    if not present:
        return None
    try:
        listed = json.loads((target / record).read_text(encoding="utf-8")).get("files")
    except (OSError, ValueError, AttributeError):
        raise ExportError(f"`{target}` already exists and no export wrote it (it has no {record}); it holds "
                          f"{_some(present)}. {move_it}") from None
    added = sorted(present - set(listed) - {record}) if isinstance(listed, list) else []
    if added:
        raise ExportError(f"`{target}` holds {_some(added)}, which the earlier export there did not write; this "
                          f"export would replace the folder whole. {move_it}")
    return f"Replaced the earlier export in {target}."


def _some(names) -> str:
    """Up to five names, then how many more."""
    names = sorted(names)
    shown = ", ".join(f"`{name}`" for name in names[:5])
    return shown + (f" and {len(names) - 5} more" if len(names) > 5 else "")


@contextlib.contextmanager
def staged_folder(target: str | os.PathLike, record: str | None = "export.json") -> Iterator[Path]:
    """Yield an empty staging folder beside `target`; when the block ends without error its files are listed
    in its JSON `record` (`_record_files`), it is made readable (`_readable`) and it becomes `target` (an
    earlier export there is replaced, `pipeline.fileio.staged_folder`), otherwise it is removed and `target`
    is untouched. `record=None` (a folder that is not an export: an imported run) skips the listing and the checks.

    Raises:
        ExportError: `target` holds what no export wrote (`check_replaceable`, checked on entry and again
            before the swap: the block may take an hour); the block's own errors.
    """
    if record:
        check_replaceable(target, record)
    with fileio.staged_folder(target) as folder:
        yield folder
        if record:
            _record_files(folder, record)
        _readable(folder)
        if record:
            check_replaceable(target, record)


@contextlib.contextmanager
def out_folder(out: str | os.PathLike) -> Iterator[Path]:
    """Make the export folder `out` (and its missing parents) for the block; if the block fails, remove again
    those it made that are still empty, so that a refused export leaves no empty folder behind."""
    out = Path(out)
    made = []
    folder = out
    while not folder.exists() and folder != folder.parent:
        made.append(folder)
        folder = folder.parent
    out.mkdir(parents=True, exist_ok=True)
    try:
        yield out
    except BaseException:
        for folder in made:  # the deepest first
            try:
                folder.rmdir()
            except OSError:
                break
        raise


@contextlib.contextmanager
def staged_file(target: str | os.PathLike) -> Iterator[Path]:
    """Yield a staging file path beside `target`; when the block ends without error the file
    replaces `target` atomically (`os.replace`), otherwise it is removed."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    fileio.recover_staging(target)
    fd, name = tempfile.mkstemp(prefix=fileio.staging_prefix(target), dir=target.parent)
    os.close(fd)
    staging = Path(name)
    try:
        yield staging
        os.chmod(staging, 0o644)
        fileio.hold_point(f"staged:{target.name}")
        os.replace(staging, target)
    finally:
        staging.unlink(missing_ok=True)
