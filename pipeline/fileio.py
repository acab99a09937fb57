"""Atomic writes: a crash mid-write never leaves a half-written manifest, config, dataset, adapter or
export. A file is replaced in one `os.replace` (`atomic_write_bytes`/`_text`/`_json`); a folder is
filled beside its target and swapped in whole (`staged_folder`), the old one kept aside until the new
one is in place, so a crash between the two renames is undone on the next read or write
(`recover_staging`). Before a large write, `disk_room` says what the disk has free and what the write
wants (one margin, `DISK_MARGIN`). JSON Lines: a log appended line by line (`append_jsonl`,
`read_jsonl`) and a child process's result line (`last_json_line`). Also how a text file a person made
(an import's metadata, a recording session's list) is decoded: `read_text`, and `read_person_text`
with the caller's typed error.
A file that is read, changed and written back (the sample manifest, an inbox attempt, the practice
settings, an auth file, a job list) is changed under `locked(path)`: a lock held across threads and
processes (`filelock`, an advisory `flock` on `.NAME.lock` beside the file), so the app, the command
line and a second app never lose each other's changes.

Killed half-way: a process killed at any moment (SIGKILL, a closed terminal's SIGHUP) runs no cleanup, so
every path a write leaves behind is hidden and names its writer's pid (`.NAME.staging-PID-*`, a journal
`.pending-PID-*.jsonl`); the next write removes those whose writer is gone (`recover_staging`,
`sweep_killed_writes`, `undo_pending`; a pid is asked of this system, so writers in another container that
shares the folder are not told apart). Files written one by one and made real only by a later record (an import's clips before
the manifest, a practice clip before its attempt's record) are noted first in such a journal
(`pending_files`), so a killed writer's clips are removed rather than left unlisted. `hold_point` names
the phases of long work, where the kill tests (`tests/test_kill_safety.py`) hold a process to kill it.

What it deliberately does not do: raise the typed error of a full disk (each caller names its own
write and its own fix) or decide whether an existing target may be replaced (callers check first).
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import shutil
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import filelock


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write `data` to `path` atomically (temp file in the same folder, fsync, `os.replace`).

    Either the old content or the complete new content is on disk afterwards, never a mix. The temp file is
    `.NAME.staging-PID-*.tmp`: one left by a killed writer is removed by the next process that writes
    into the folder (`sweep_killed_writes`). Creates parent folders. Raises `OSError` if the folder is
    not writable.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    sweep_killed_writes(path.parent)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.staging-{os.getpid()}-", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        hold_point(f"write:{path.name}")
        os.replace(tmp_name, path)
    except BaseException:
        try:
            os.unlink(tmp_name)
        except FileNotFoundError:
            pass
        raise


HOLD_AT = "TUTOR_HOLD_AT"
"""Environment variable: the phase (`hold_point` name, shell-style pattern, optionally `#N` for its N-th
time in the process, default the first) at which a process stops and waits to be killed. For the kill
tests only; unset, `hold_point` does nothing."""
HOLD_FILE = "TUTOR_HOLD_FILE"
"""Environment variable: the file a held process writes ({"pid", "phase"}) once it waits at its phase."""
_HOLD_COUNTS: dict[str, int] = {}


def hold_point(name: str) -> None:
    """Mark phase `name` of long work ("import:clip", "write:manifest.json", "swap:dataset"). When the
    environment's `HOLD_AT` matches it (`fnmatch`; "NAME#N": its N-th time here), write `HOLD_FILE` and
    wait there for ever, so a test kills the process at exactly this point; otherwise return at once.
    Never raises (a `HOLD_AT` without `HOLD_FILE` holds without telling)."""
    wanted = os.environ.get(HOLD_AT)
    if not wanted:
        return
    import fnmatch  # noqa: PLC0415

    pattern, _, nth = wanted.partition("#")
    if not fnmatch.fnmatchcase(name, pattern):
        return
    count = _HOLD_COUNTS[pattern] = _HOLD_COUNTS.get(pattern, 0) + 1
    if count != (int(nth) if nth.isdigit() else 1):
        return
    if os.environ.get(HOLD_FILE):
        Path(os.environ[HOLD_FILE]).write_text(json.dumps({"pid": os.getpid(), "phase": name}), encoding="utf-8")
    while True:
        time.sleep(60)


def writer_gone(pid: int) -> bool:
    """True when process `pid` surely no longer runs (POSIX: `kill(pid, 0)` finds none); False when it runs,
    belongs to another user, or this system cannot tell (Windows, where that call would end the process)."""
    if os.name != "posix" or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:
        return False
    return False


_SWEPT: set[tuple[int, str]] = set()


def sweep_killed_writes(folder: str | os.PathLike) -> list[Path]:
    """Remove the temp files of `atomic_write_bytes` in `folder` (`.NAME.staging-PID-*.tmp`) whose writer is
    gone (`writer_gone`: killed before its rename); once per folder and process (one listing), so a folder of
    thousands of clips is not listed at every write. Returns the files removed; never raises."""
    key = (os.getpid(), os.path.abspath(folder))
    if key in _SWEPT:
        return []
    _SWEPT.add(key)
    removed = []
    try:
        entries = [entry.name for entry in os.scandir(folder)]
    except OSError:
        return []
    for name in entries:
        if not (name.startswith(".") and name.endswith(".tmp") and ".staging-" in name):
            continue
        head, _, rest = name.rsplit(".staging-", 1)[1].partition("-")
        if rest and head.isdigit() and int(head) != os.getpid() and writer_gone(int(head)):
            try:
                os.unlink(os.path.join(folder, name))
                removed.append(Path(folder) / name)
            except OSError:
                continue
    return removed


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    """Write UTF-8 `text` to `path` atomically; see `atomic_write_bytes`."""
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: str | os.PathLike, obj: Any) -> None:
    """Write `obj` as indented UTF-8 JSON (non-ASCII kept) to `path` atomically."""
    atomic_write_text(path, json.dumps(obj, indent=2, ensure_ascii=False, sort_keys=False) + "\n")


LOCK_TIMEOUT_S = 900.0
"""How long `locked` waits for a lock (seconds). A change under a lock takes milliseconds (one accept
writes a WAV and a manifest); the longest holder is an import of a large folder into the library (clip by
clip, about 20 clips/s here: `benchmarks/import_build.py`), so 15 minutes is a holder that hangs."""
_FILE_LOCKS: dict[str, filelock.FileLock] = {}
_FILE_LOCKS_GUARD = threading.Lock()


def lock_file(path: str | os.PathLike) -> Path:
    """The lock file that `locked(path)` holds: `.NAME.lock` beside `path` (hidden: no listing shows it)."""
    path = Path(path)
    return path.with_name(f".{path.name}.lock")


@contextlib.contextmanager
def locked(path: str | os.PathLike, *, timeout_s: float = LOCK_TIMEOUT_S) -> Iterator[None]:
    """Hold the lock of `path` (a file, or a folder standing for a set of files) for the block: one
    holder at a time across the threads of this process and across processes (the app, the command line,
    a second app on the same workspace).

    The lock is `filelock.FileLock` on `lock_file(path)`: an advisory `flock` on POSIX (`LockFileEx`
    on Windows), which the system drops when its holder dies, so a crashed process never leaves the
    file locked. One lock object per path in a process, thread-local, so the same thread may nest
    `locked(path)` (re-entrant) while another thread waits. Read the file inside the block, change it,
    write it with `atomic_write_*`: no other holder's change is lost between the read and the write.

    Raises:
        TimeoutError: another holder kept the lock more than `timeout_s` seconds (names the lock file).
    """
    target = lock_file(path)
    key = os.path.abspath(target)
    with _FILE_LOCKS_GUARD:
        lock = _FILE_LOCKS.get(key)
        if lock is None:
            target.parent.mkdir(parents=True, exist_ok=True)
            lock = _FILE_LOCKS[key] = filelock.FileLock(key)
    try:
        lock.acquire(timeout=timeout_s)
    except filelock.Timeout:
        raise TimeoutError(f"{target} was held by another process for more than {timeout_s:.0f} s; if none is "
                           "working on this workspace, delete that lock file and try again.") from None
    try:
        yield
    finally:
        lock.release()


STALE_STAGING_S = 3600.0
"""A staging folder or file older than this (seconds) is a crashed or killed write's leftover."""
PREVIOUS = "previous"
"""Inside a staging folder: the replaced target, kept there until the new one is in place."""


def _staging_prefix(target: Path, prefix: str | None) -> str:
    return prefix or f".{target.name}.staging-"


def staging_prefix(target: str | os.PathLike, prefix: str | None = None) -> str:
    """The name start of this process's staging paths for `target` (`prefix`, default `.NAME.staging-`, then
    this pid and "-"), for a caller's own scratch path (`tempfile.mkdtemp(prefix=...)` beside `target`) that
    `recover_staging(target)` is to remove once its writer is gone."""
    return f"{_staging_prefix(Path(target), prefix)}{os.getpid()}-"


def _leftover_writer(leftover: Path, start: str) -> int | None:
    """The pid in a staging path's name (`START` + "PID-..."), or None (a name written before pids were)."""
    head = leftover.name[len(start):].split("-", 1)[0]
    return int(head) if head.isdigit() and "-" in leftover.name[len(start):] else None


def recover_staging(target: str | os.PathLike, *, prefix: str | None = None) -> None:
    """Undo a swap of `target` cut short by a crash, then clear crashed writes' leftovers beside it.

    When `target` is missing and a staging folder (`prefix`*, default `.NAME.staging-`*) holds the
    replaced one (`PREVIOUS`), that one is put back; then every staging folder or file whose writer is
    gone (the pid in its name, `writer_gone`: killed, crashed), or older than `STALE_STAGING_S`, and every
    empty staging folder, is removed (a write running at the same moment keeps its own). `staged_folder`
    calls it before every write; a reader of `target` may call it before reading (the built dataset's
    loaders do)."""
    target = Path(target)
    if not target.parent.is_dir():
        return
    sweep_killed_writes(target.parent)
    start = _staging_prefix(target, prefix)
    leftovers = sorted(target.parent.glob(glob.escape(start) + "*"))
    if not target.exists():
        for folder in leftovers:
            if (folder / PREVIOUS).exists():
                os.replace(folder / PREVIOUS, target)
                break
    for leftover in leftovers:
        try:
            writer = _leftover_writer(leftover, start)
            stale = (time.time() - leftover.stat().st_mtime > STALE_STAGING_S
                     or (writer is not None and writer != os.getpid() and writer_gone(writer)))
            empty = leftover.is_dir() and not any(leftover.iterdir())
        except FileNotFoundError:
            continue
        if stale or empty:
            if leftover.is_dir():
                shutil.rmtree(leftover, ignore_errors=True)
            else:
                leftover.unlink(missing_ok=True)


@contextlib.contextmanager
def staged_folder(target: str | os.PathLike, *, prefix: str | None = None) -> Iterator[Path]:
    """Yield an empty folder to fill; when the block ends without error it takes `target`'s place
    (an existing `target` is replaced), otherwise it is removed and `target` is untouched.

    The folder is `STAGING/NAME` in a hidden staging folder beside `target` (`prefix`*, default
    `.NAME.staging-`*; on the same file system, so both renames are atomic). The swap moves the old
    `target` to `STAGING/previous`, then the new folder to `target`; a crash between the two leaves
    the old one there for `recover_staging`. The staging folder is removed in every case.
    Raises what the block raises, or `OSError` from the renames (the old `target` is then put back).
    """
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    recover_staging(target, prefix=prefix)
    staging = Path(tempfile.mkdtemp(prefix=staging_prefix(target, prefix), dir=target.parent))
    try:
        new = staging / target.name
        new.mkdir()
        yield new
        hold_point(f"staged:{target.name}")
        previous = staging / PREVIOUS
        if target.exists():
            os.replace(target, previous)
            hold_point(f"swap:{target.name}")
        try:
            os.replace(new, target)
        except BaseException:
            if previous.exists() and not target.exists():
                os.replace(previous, target)
            raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)


PENDING_PREFIX = ".pending-"
"""A journal of files being written (`pending_files`): `.pending-PID-RANDOM.jsonl` in their folder."""


@contextlib.contextmanager
def pending_files(folder: str | os.PathLike) -> Iterator[Callable[[str | os.PathLike], Path]]:
    """Note, before each is written, the files that a later record makes real (an import's clips, listed by
    the manifest written after them): yields `note(path) -> path`, which adds `path` to a journal
    `FOLDER/.pending-PID-*.jsonl` (fsynced) before the caller writes it. The block's end removes the journal;
    an error in the block also removes every noted file. A process killed inside the block leaves the
    journal, and `undo_pending(folder, keep=...)` at the next write removes the files it noted that the
    record does not hold. Raises what the block raises, or `OSError` when the journal cannot be written."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f"{PENDING_PREFIX}{os.getpid()}-", suffix=".jsonl", dir=folder)
    os.close(fd)
    journal, noted = Path(name), []

    def note(path: str | os.PathLike) -> Path:
        append_jsonl(journal, {"path": str(Path(path).resolve())})
        noted.append(Path(path))
        return Path(path)

    try:
        yield note
    except BaseException:
        for path in noted:
            Path(path).unlink(missing_ok=True)
        raise
    finally:
        journal.unlink(missing_ok=True)


def undo_pending(folder: str | os.PathLike, keep: Callable[[Path], bool],
                 remove: Callable[[Path], Any] | None = None) -> list[Path]:
    """Finish what killed writers left in `folder` (`pending_files`): for each journal whose writer is gone
    (`writer_gone`) or that noted nothing for `STALE_STAGING_S`, delete every file it noted for which
    `keep(path)` (a resolved `Path`) is false (`remove(path)`, default `Path.unlink`), then the journal.
    Call it where the record is read, under its lock. Returns the files deleted."""
    folder, removed = Path(folder), []
    for journal in sorted(folder.glob(PENDING_PREFIX + "*.jsonl")) if folder.is_dir() else ():
        writer = _leftover_writer(journal, PENDING_PREFIX)
        try:
            stale = time.time() - journal.stat().st_mtime > STALE_STAGING_S
        except FileNotFoundError:
            continue
        if not stale and (writer is None or writer == os.getpid() or not writer_gone(writer)):
            continue
        for row in read_jsonl(journal):
            path = Path(str(row.get("path", ""))) if isinstance(row, dict) else None
            if path is not None and path.is_file() and not keep(path):
                (remove or (lambda gone: gone.unlink(missing_ok=True)))(path)
                removed.append(path)
        journal.unlink(missing_ok=True)
    return removed


DISK_MARGIN = 1.1
"""Free disk wanted per byte a write is expected to take: 10 % over the estimate, for the file
system's own overhead (blocks, metadata) and the small files an estimate leaves out (a checkpoint's
processor files, an export's README). The one margin of every free-disk check: checkpoints and the
adapter (`pipeline.training.checkpoints`), exports and imported runs (`pipeline.export.staging`), a
model download (`pipeline.model.hub`)."""


def free_bytes(folder: str | os.PathLike) -> int:
    """Free bytes on the file system that holds `folder` (or its nearest existing parent; `~` expanded)."""
    probe = Path(folder).expanduser().resolve()
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    return shutil.disk_usage(probe).free


def disk_room(folder: str | os.PathLike, needed_bytes: float) -> tuple[int, int]:
    """(free, wanted) bytes for a write of about `needed_bytes` into `folder`: what its disk has free
    (`free_bytes`) and what the write wants, `needed_bytes` x `DISK_MARGIN`. The caller refuses when
    free < wanted, with its own typed error naming both figures and its fix."""
    return free_bytes(folder), int(needed_bytes * DISK_MARGIN)


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


def last_json_line(output: str) -> dict | None:
    """The last line of a child process's `output` that is a JSON object (the result it prints after its
    logs: the memory probe, the precision check, a benchmark's child), or None when there is none."""
    for line in reversed(output.strip().splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    return None


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


def read_person_text(path: str | os.PathLike, error: type[Exception], *, name: str, kind: str = "text",
                     fix: str = "save it as UTF-8 and import again") -> str:
    """`read_text(path)`, its failures raised as the caller's typed `error` naming the file as `name`:
    "NAME is not UTF-8 KIND (from line 3, after 'Caf'); FIX." for a file in another encoding, or
    "NAME cannot be read (CAUSE); check the file." for one the system cannot read (a folder, no
    permission). `name` is how the caller's person knows the file (e.g. "The list `words.txt`")."""
    try:
        return read_text(path)
    except UnicodeDecodeError as decode_error:
        raise error(f"{name} is not UTF-8 {kind} (from {where_not_utf8(path, decode_error)}); {fix}.") from None
    except OSError as os_error:
        raise error(f"{name} cannot be read ({os_error.strerror or os_error}); check the file.") from None


def where_not_utf8(path: str | os.PathLike, error: UnicodeDecodeError) -> str:
    """Where a file stops being UTF-8, in words for a message: "line 3, near 'Caf'" (no codec internals)."""
    data = Path(path).read_bytes()[: error.start]
    line = data.count(b"\n") + 1
    before = data.rsplit(b"\n", 1)[-1][-20:].decode("utf-8", errors="ignore")
    return f"line {line}" + (f", after {before!r}" if before.strip() else "")


class UnsafeArchiveMember(ValueError):
    """An archive member that would be written outside the target folder, or is no plain file, folder or link."""


def extract_tar(archive, target: str | os.PathLike, members=None) -> None:
    """Extract `members` (default: all) of the open `tarfile.TarFile` `archive` into `target`, refusing what would
    land outside it: with tarfile's `data` filter where this Python has it (3.11.4+, 3.12+: PEP 706), else by the
    same rules checked here first (Debian 12's Python 3.11.2 has no `filter` argument): no absolute or `..` path,
    no link leading out, no device or fifo.

    Raises:
        UnsafeArchiveMember: a member breaks a rule (its message names it); nothing of the archive is written.
        tarfile.TarError: the `data` filter refused a member (Pythons that have it)."""
    import tarfile

    members = archive.getmembers() if members is None else members
    if hasattr(tarfile, "data_filter"):
        archive.extractall(target, members=members, filter="data")
        return
    root = Path(target).resolve()
    for member in members:
        where = (root / member.name).resolve()
        link = (where.parent / member.linkname).resolve() if member.issym() else (root / member.linkname).resolve()
        if (Path(member.name).is_absolute() or not where.is_relative_to(root)
                or ((member.issym() or member.islnk()) and not link.is_relative_to(root))):
            raise UnsafeArchiveMember(f"`{member.name}`, which would be written outside {target}")
        if not (member.isfile() or member.isdir() or member.issym() or member.islnk()):
            raise UnsafeArchiveMember(f"`{member.name}`, which is not a plain file, folder or link")
    archive.extractall(target, members=members)
