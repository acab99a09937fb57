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


@contextlib.contextmanager
def staged_folder(target: str | os.PathLike) -> Iterator[Path]:
    """Yield an empty staging folder beside `target`; when the block ends without error it is made
    readable (`_readable`) and becomes `target` (an existing `target` is replaced,
    `pipeline.fileio.staged_folder`), otherwise it is removed and `target` is untouched."""
    with fileio.staged_folder(target) as folder:
        yield folder
        _readable(folder)


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
