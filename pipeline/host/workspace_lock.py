"""One training run at a time per workspace: the lock every entry point honours.

The lock is an advisory `flock` on `WS/runs/.train.lock`, held by the process that trains:
- `python -m pipeline train` (and `pipeline.training.train.train`, decorated with
  `hold_workspace_lock`) takes it before creating anything in the run folder and lets it go when the
  run ends; a second run in the same workspace is refused with the name and pid of the one training;
- the app's `pipeline.training.runs.start_run` takes it before it starts the training process and
  hands it over to that process (the open lock is inherited, `TUTOR_TRAIN_LOCK_FD` names it), so
  there is no moment between the check and the start in which another run could slip in.

A lock held by a process that died is free: the operating system drops a `flock` with the last open
descriptor of its holder, so a crashed or killed run never blocks the workspace (the file may still
name the dead pid; it is then simply taken over). The file holds `{"pid", "run", "started_at",
"command"}` of the holder so that others can say who trains.

POSIX only (Linux, macOS), like the rest of the process handling; where `fcntl` is missing (Windows)
the lock is not enforced.
"""

from __future__ import annotations

import functools
import inspect
import json
import os
import sys
import time
from pathlib import Path
from typing import Any, Callable

from pipeline.errors import TrainingError
from pipeline.workspace import Workspace

try:  # pragma: no cover - always present on Linux and macOS
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

LOCK_NAME = ".train.lock"
"""The lock file inside `WS/runs/` (a dot-name: not listed as a run)."""
LOCK_FD_ENV = "TUTOR_TRAIN_LOCK_FD"
"""Set by `start_run` for the training process: the inherited descriptor that already holds the lock."""
BUSY_RETRY_S = 0.5
"""How long `acquire` retries a busy lock: `lock_holder` (the app polls it) holds a shared lock for
a moment, which must not make a starting run think the workspace is busy."""


def lock_path(workspace: Workspace | str | os.PathLike) -> Path:
    """`WS/runs/.train.lock`."""
    ws = workspace if isinstance(workspace, Workspace) else Workspace(Path(workspace))
    return ws.runs_dir / LOCK_NAME


def _read_holder(fd: int) -> dict | None:
    try:
        data = os.pread(fd, 65536, 0)
        holder = json.loads(data.decode("utf-8")) if data.strip() else None
    except (OSError, ValueError):
        return None
    return holder if isinstance(holder, dict) else None


def _write_holder(fd: int, holder: dict) -> None:
    data = json.dumps(holder).encode("utf-8")
    os.ftruncate(fd, 0)
    os.pwrite(fd, data, 0)


def _busy_error(holder: dict | None, run_name: str) -> TrainingError:
    who = (f"run `{holder.get('run')}` (process {holder.get('pid')})" if holder and holder.get("run")
           else "another run")
    return TrainingError(
        f"The workspace is busy: {who} is training in it, and one run at a time may train per workspace, "
        f"so `{run_name}` was not started. Wait for it to finish, or stop it with **Stop** on the Train "
        "tab (on the command line: create its `STOP` file), then start again."
    )


class WorkspaceLock:
    """The training lock of one workspace, taken for run `run_name`.

    `acquire()` raises `TrainingError` naming the holder when another process trains; `release()`
    lets it go. Use `with workspace_lock(ws, run):` or `hold_workspace_lock` rather than these directly.
    """

    def __init__(self, workspace: Workspace | str | os.PathLike, run_name: str):
        self.path = lock_path(workspace)
        self.run_name = run_name
        self.fd: int | None = None

    def _inherited_fd(self) -> int | None:
        """The descriptor `start_run` handed over, when it is open on this very lock file."""
        value = os.environ.get(LOCK_FD_ENV)
        if not value:
            return None
        try:
            fd = int(value)
            same = os.fstat(fd)
            here = os.stat(self.path)
        except (ValueError, OSError):
            return None
        if (same.st_dev, same.st_ino) != (here.st_dev, here.st_ino):
            return None
        os.environ.pop(LOCK_FD_ENV, None)  # not for this process's own children
        os.set_inheritable(fd, False)
        return fd

    def acquire(self, holder: dict | None = None) -> "WorkspaceLock":
        """Take the lock (without waiting) and record `holder` (default: this process, this run).

        Raises:
            TrainingError: another live process holds it; the message names its run and pid.
        """
        if fcntl is None or self.fd is not None:  # pragma: no cover - Windows, or already held
            return self
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = self._inherited_fd()
        if fd is None:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        deadline = time.monotonic() + BUSY_RETRY_S
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() < deadline:
                    time.sleep(0.02)
                    continue
                current = _read_holder(fd)
                os.close(fd)
                raise _busy_error(current, self.run_name) from None
        self.fd = fd
        self.record(holder or {"pid": os.getpid(), "run": self.run_name, "started_at": time.time(),
                               "command": " ".join(sys.argv)[:500]})
        return self

    def record(self, holder: dict) -> None:
        """Write who holds the lock (e.g. the pid of the training process `start_run` just started)."""
        if self.fd is not None:
            _write_holder(self.fd, holder)

    def release(self) -> None:
        """Let the lock go (the file stays, emptied); safe to call twice."""
        if self.fd is None:
            return
        try:
            os.ftruncate(self.fd, 0)
            fcntl.flock(self.fd, fcntl.LOCK_UN)
        finally:
            os.close(self.fd)
            self.fd = None

    def handed_over(self) -> None:
        """Close this process's descriptor without unlocking: the child that inherited it holds the lock."""
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def __enter__(self) -> "WorkspaceLock":
        return self.acquire()

    def __exit__(self, *exc: Any) -> None:
        self.release()


def workspace_lock(workspace: Workspace | str | os.PathLike, run_name: str) -> WorkspaceLock:
    """`with workspace_lock(ws, "run-1"):` holds the workspace's training lock for the block."""
    return WorkspaceLock(workspace, run_name)


def lock_holder(workspace: Workspace | str | os.PathLike) -> dict | None:
    """Who trains in the workspace now: the holder record (`pid`, `run`, ...) while a live process
    holds the lock, else None (a record left by a dead process does not count)."""
    path = lock_path(workspace)
    if fcntl is None or not path.exists():
        return None
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        holder = _read_holder(fd)
        if holder is None:  # emptied on release: nobody trains (or a holder is writing its record)
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return holder
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None  # the record of a process that died: the lock is free
    finally:
        os.close(fd)


def hold_workspace_lock(function: Callable) -> Callable:
    """Decorate `train(config, workspace, run_name, ...)` so that it runs holding the workspace's lock.

    The lock is taken before the function body (so a refused run creates nothing) and released when
    it returns or raises.
    """
    signature = inspect.signature(function)

    @functools.wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        from pipeline.host.distributed import is_main_process

        if not is_main_process():  # several processes train one run (DDP): rank 0 holds the lock for all
            return function(*args, **kwargs)
        bound = signature.bind(*args, **kwargs)
        with workspace_lock(bound.arguments["workspace"], bound.arguments["run_name"]):
            return function(*args, **kwargs)

    return wrapper
