"""Writing an export so that a failure leaves nothing half-written, and checking the disk first.

Every export is written into a hidden staging path beside its target (`.NAME.staging-*`) and
appears under its real name only by one `os.rename` / `os.replace` once complete; an error removes
the staging path. A process killed mid-write leaves only a hidden staging path, which the next
export of the same target removes once it is older than `STALE_STAGING_S`.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Iterator

from pipeline.errors import ExportError

STALE_STAGING_S = 3600.0
"""A staging path older than this (seconds) is a killed export's leftover."""
DISK_MARGIN = 1.05
"""Free space wanted per byte to be written (5 % for file-system overhead and metadata)."""


def free_bytes(folder: str | os.PathLike) -> int:
    """Free bytes on the file system that holds `folder` (or its nearest existing parent)."""
    probe = Path(folder).expanduser().resolve()
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    return shutil.disk_usage(probe).free


def check_free_space(folder: str | os.PathLike, needed_bytes: int, what: str) -> None:
    """Raise `ExportError` unless `folder`'s disk has `needed_bytes * DISK_MARGIN` free.

    `what` names the export in the message, e.g. "the merged model (bf16, 10.2 GiB)".
    """
    free = free_bytes(folder)
    wanted = int(needed_bytes * DISK_MARGIN)
    if free < wanted:
        raise ExportError(
            f"Writing {what} into {folder} needs about {wanted / 1024**3:.2f} GiB but only {free / 1024**3:.2f} GiB is "
            "free there. Free some space, or give --out a folder on a larger disk."
        )


def folder_bytes(folder: str | os.PathLike) -> int:
    """Total size in bytes of the files under `folder` (symlinks followed)."""
    return sum(p.stat().st_size for p in Path(folder).rglob("*") if p.is_file())


def _remove_stale(target: Path) -> None:
    for leftover in target.parent.glob(f".{target.name}.staging-*"):
        try:
            stale = time.time() - leftover.stat().st_mtime > STALE_STAGING_S
        except FileNotFoundError:
            continue
        if stale:
            if leftover.is_dir():
                shutil.rmtree(leftover, ignore_errors=True)
            else:
                leftover.unlink(missing_ok=True)


def _readable(folder: Path) -> None:
    """Folders 0755 and files at least 0644, as a person expects of something to send or upload
    (`tempfile` and `atomic_write_*` create them private)."""
    folder.chmod(0o755)
    for path in folder.rglob("*"):
        if not path.is_symlink():
            path.chmod(0o755 if path.is_dir() else path.stat().st_mode & 0o777 | 0o644)


@contextlib.contextmanager
def staged_folder(target: str | os.PathLike) -> Iterator[Path]:
    """Yield an empty staging folder beside `target`; when the block ends without error it becomes
    `target` (an existing `target` is replaced), otherwise it is removed and `target` is untouched."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    _remove_stale(target)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.staging-", dir=target.parent))
    try:
        yield staging
        _readable(staging)
        old = target.with_name(f".{target.name}.staging-old-{os.getpid()}")
        if target.exists():
            os.rename(target, old)
        try:
            os.rename(staging, target)
        except BaseException:
            if old.exists() and not target.exists():
                os.rename(old, target)
            raise
        shutil.rmtree(old, ignore_errors=True)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


@contextlib.contextmanager
def staged_file(target: str | os.PathLike) -> Iterator[Path]:
    """Yield a staging file path beside `target`; when the block ends without error the file
    replaces `target` atomically (`os.replace`), otherwise it is removed."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    _remove_stale(target)
    fd, name = tempfile.mkstemp(prefix=f".{target.name}.staging-", dir=target.parent)
    os.close(fd)
    staging = Path(name)
    try:
        yield staging
        os.chmod(staging, 0o644)
        os.replace(staging, target)
    finally:
        staging.unlink(missing_ok=True)
