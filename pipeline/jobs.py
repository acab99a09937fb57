"""Background jobs: work done by a process of its own, started, watched, stopped and listed through a
job folder's files (no Gradio, no torch).

A training run (`pipeline.training.runs`, folder `WS/runs/NAME/`) and an evaluation job
(`pipeline.tutor.eval_jobs`, folder `WS/eval_jobs/ID/`) are detached jobs; the memory probe
(`pipeline.memory.measure`) and the calibration's precision check (`pipeline.memory.calibrate`) are
blocking children (`run_child`). What every kind shares lives here:

    FOLDER/pid.json      the job's process, written by `start`: {"pid", "started_at" (unix s), "command"}
    FOLDER/process.log   the process's own stdout and stderr (appended)
    FOLDER/<stop file>   written by `JobKind.stop`: end at the next safe point (a run's `STOP`,
                         an evaluation's `CANCEL`); the process is killed if it has not ended in time

A job's process is its own session (POSIX; a new process group on Windows), so the app can exit and a
reopened page re-attaches to it through its folder. Whether the pid in a folder is still the job's
process is asked by command line (`pipeline.host.process_check.command_alive`): a pid the system reused
for another program does not count.

What this module does not know: a kind's command line, its result file and what its states mean. Each
kind says those (`pipeline.training.run_folder`, `pipeline.tutor.eval_jobs`).
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

from pipeline.fileio import atomic_write_json
from pipeline.host.process_check import command_alive, detached_popen_kwargs, kill_process
from pipeline.workspace import Workspace

PID_FILE = "pid.json"
"""The job's process, in its folder: {"pid", "started_at" (unix seconds), "command" (argv list)}."""
PROCESS_LOG = "process.log"
"""The job process's own stdout and stderr, in its folder (appended across restarts)."""
REPO_ROOT = Path(__file__).resolve().parents[1]
"""Children run here, with it first on PYTHONPATH, so `python -m pipeline ...` imports this checkout."""

_CHILDREN: dict[int, subprocess.Popen] = {}
"""Processes started by this process (pid -> Popen), so a finished one is reaped rather than left a zombie
that looks alive."""


def as_workspace(workspace: Workspace | str | os.PathLike) -> Workspace:
    """`workspace` as a `Workspace` (a path is wrapped; nothing is created)."""
    return workspace if isinstance(workspace, Workspace) else Workspace(Path(workspace))


def read_json(path: str | os.PathLike) -> Any:
    """The JSON value in `path`, or None when the file is missing, unreadable or not JSON (a job's files are
    written atomically, so None means "not written yet" or "not a job's file")."""
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def alive(pid: int | None, *words: str) -> bool:
    """True when process `pid` runs (not a zombie) and its command line holds every one of `words`.

    A process this process started is asked through its `Popen` (reaped once ended); any other through
    psutil (`pipeline.host.process_check.command_alive`: a process whose command line cannot be read,
    another user's, counts as alive). None or 0 is never alive."""
    if not pid:
        return False
    child = _CHILDREN.get(pid)
    if child is not None:
        return child.poll() is None
    return command_alive(pid, *words)


def kill(pid: int) -> None:
    """Kill process `pid` at once: its whole process group when it leads one (a detached job and what it
    started), else the process alone (a blocking child shares this process's group, which must live on);
    a child of this process is then reaped (up to 10 s). Never raises for a process already gone or not
    ours (`pipeline.host.process_check.kill_process`)."""
    kill_process(pid, _CHILDREN.get(pid))


def job_env(defaults: Mapping[str, str] | None = None, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of a job's process: this process's, with this checkout first on PYTHONPATH and
    PYTHONUNBUFFERED=1 (its log is written as it goes), then each of `defaults` unless already set, then
    `extra` over everything."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO_ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.setdefault("PYTHONUNBUFFERED", "1")
    for name, value in (defaults or {}).items():
        env.setdefault(name, value)
    env.update(extra or {})
    return env


def start(folder: Path, command: Sequence[str], *, env: Mapping[str, str], pass_fds: Sequence[int] = (),
          cwd: Path = REPO_ROOT) -> subprocess.Popen:
    """Launch `command` as the detached process of the job in `folder` (which must exist).

    Its own session (`pipeline.host.process_check.detached_popen_kwargs`), stdin closed, stdout and stderr
    appended to `folder/process.log`, `pass_fds` inherited (a run's workspace lock). It is remembered so
    this process reaps it, and `folder/pid.json` records it: {"pid", "started_at" (unix seconds), "command"}.

    Raises:
        OSError: the log cannot be opened or the program cannot be started (nothing was started).
    """
    kwargs: dict[str, Any] = {"pass_fds": tuple(pass_fds)} if pass_fds else {}
    with open(Path(folder) / PROCESS_LOG, "ab") as log:
        process = subprocess.Popen(list(command), cwd=str(cwd), env=dict(env), stdin=subprocess.DEVNULL, stdout=log,
                                   stderr=subprocess.STDOUT, **kwargs, **detached_popen_kwargs())
    _CHILDREN[process.pid] = process
    atomic_write_json(Path(folder) / PID_FILE, {"pid": process.pid, "started_at": time.time(), "command": list(command)})
    return process


@dataclass(frozen=True)
class JobProcess:
    """A job's process as its folder records it, read once (`JobKind.read`)."""

    pid: int | None
    """From the pid file (else the fallback the kind gave); None: no process was ever recorded."""
    alive: bool
    """The process runs and is this job's (`JobKind.alive`)."""
    started_at: float | None
    """Unix seconds the process was launched (the pid file's `started_at`); None without a pid file."""
    stop_requested_at: float | None
    """Unix seconds the stop file was last written (its modification time); None: no stop asked."""

    @property
    def stop_requested(self) -> bool:
        """The stop file is there."""
        return self.stop_requested_at is not None


@dataclass(frozen=True)
class JobKind:
    """One kind of detached job: how its process is recognised and how it is asked to stop.

    `words` are in the command line of every process of this kind (`("pipeline", "train")`); the job's
    folder name (its run name or job id) is checked with them, so a process of the same kind working for
    another job does not count. `stop_file` is the file, in the job's folder, that asks the process to
    end at its next safe point; `stop_word` words its content ("stop requested at 1767225600").
    `keep_asking`: while waiting for the process to end, write the stop file again if it vanished (a
    trainer still starting clears a stale `STOP` as it begins, which would swallow a fresh one).
    """

    words: tuple[str, ...]
    stop_file: str
    stop_word: str = "stop"
    keep_asking: bool = False

    def alive(self, pid: int | None, name: str | None = None) -> bool:
        """True when `pid` is a live process of this kind (of job `name` when given); see `alive`."""
        return alive(pid, *self.words, *([name] if name else []))

    def read(self, folder: Path, *, fallback_pid: int | None = None) -> JobProcess:
        """The process of the job in `folder` (named by the folder): its pid file's pid (else
        `fallback_pid`, e.g. the pid a trainer started from the command line writes into its result),
        whether it is alive, when it was launched and when a stop was asked."""
        folder = Path(folder)
        record = read_json(folder / PID_FILE)
        record = record if isinstance(record, dict) else {}
        pid = int(record["pid"]) if record.get("pid") else (int(fallback_pid) if fallback_pid else None)
        started = record.get("started_at")
        try:
            stop_at: float | None = (folder / self.stop_file).stat().st_mtime
        except OSError:
            stop_at = None
        return JobProcess(pid=pid, alive=self.alive(pid, folder.name),
                          started_at=float(started) if isinstance(started, (int, float)) else None,
                          stop_requested_at=stop_at)

    def ask_to_stop(self, folder: Path, *, again: bool = False) -> None:
        """Write the stop file into `folder` ("stop requested at UNIX_SECONDS"). Raises OSError if the
        folder is not writable."""
        (Path(folder) / self.stop_file).write_text(
            f"{self.stop_word} requested{' (again)' if again else ''} at {time.time():.0f}\n", encoding="utf-8")

    def stop(self, folder: Path, pid: int, *, timeout_s: float, wait: bool, poll_s: float,
             when_killed: Callable[[], None]) -> None:
        """Ask the job in `folder` to stop (`ask_to_stop`), then kill process `pid` if it has not ended
        within `timeout_s` seconds (checked every `poll_s` seconds) and call `when_killed` (the kind
        records how the job ended). `wait=True` blocks until then; otherwise a daemon thread waits and
        this returns at once."""
        self.ask_to_stop(folder)
        if wait:
            self._wait_then_kill(Path(folder), pid, timeout_s, poll_s, when_killed)
        else:
            threading.Thread(target=self._wait_then_kill, args=(Path(folder), pid, timeout_s, poll_s, when_killed),
                             daemon=True).start()

    def _wait_then_kill(self, folder: Path, pid: int, timeout_s: float, poll_s: float,
                        when_killed: Callable[[], None]) -> bool:
        """True when the process ended within `timeout_s`; False when it was killed (then `when_killed()`)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if not self.alive(pid, folder.name):
                return True
            if self.keep_asking and not (folder / self.stop_file).exists():
                self.ask_to_stop(folder, again=True)
            time.sleep(poll_s)
        kill(pid)
        when_killed()
        return False


def wait_for(status: Callable[[], dict], *, timeout_s: float, poll_s: float) -> dict:
    """Call `status()` every `poll_s` seconds until its `"alive"` is false or `timeout_s` seconds have
    passed; returns the last status (read once more at the deadline)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        current = status()
        if not current["alive"]:
            return current
        time.sleep(poll_s)
    return status()


def list_statuses(parent: Path, status: Callable[[str], dict]) -> list[dict]:
    """`status(name)` of every job folder in `parent` (not hidden ones: a folder being deleted or staged),
    newest folder first by modification time; [] when `parent` does not exist. A folder whose status
    raises (a strange name, a file that is not the kind's) is left out, so it cannot hide the others."""
    if not Path(parent).is_dir():
        return []
    folders = []
    for path in Path(parent).iterdir():
        if path.name.startswith("."):
            continue
        try:  # another process may delete or rename a folder between the listing and here
            if path.is_dir():
                folders.append((path.stat().st_mtime, path))
        except FileNotFoundError:
            continue
    out = []
    for _, folder in sorted(folders, key=lambda pair: pair[0], reverse=True):
        try:
            out.append(status(folder.name))
        except Exception:  # noqa: BLE001 - one strange folder must not hide the others
            continue
    return out


def first_alive(statuses: Iterable[dict], key: str) -> str | None:
    """`status[key]` (the job's name) of the first status whose process is alive, or None."""
    return next((status[key] for status in statuses if status["alive"]), None)


PHASE_LINE = "[phase] "
"""How a blocking child announces a phase on its stderr (`say_phase`), for `run_child(on_phase=...)`."""
PHASE_POLL_S = 0.5
"""How often `run_child` passes the phases a child announced on to its `on_phase` (seconds)."""


def say_phase(name: str) -> None:
    """In a blocking child: announce that phase `name` begins (one line on stderr, flushed at once), so the
    parent's `run_child(on_phase=...)` hears it while the child runs."""
    import sys  # noqa: PLC0415

    print(PHASE_LINE + name, file=sys.stderr, flush=True)


class ChildTimedOut(Exception):
    """A blocking child (`run_child`) ran past its timeout and was killed; `timeout_s` says how long it had."""

    def __init__(self, command: Sequence[str], timeout_s: float):
        super().__init__(f"{' '.join(command)[:200]} ran past {timeout_s:.0f} s and was killed")
        self.timeout_s = float(timeout_s)


@dataclass(frozen=True)
class ChildRun:
    """How a blocking child ended (`run_child`): its pid, exit code and text output."""

    pid: int
    returncode: int
    stdout: str
    stderr: str
    seconds: float
    """Wall-clock seconds from start to exit."""


def run_child(command: Sequence[str], *, timeout_s: float, env: Mapping[str, str] | None = None,
              cwd: Path = REPO_ROOT, on_phase: Callable[[str], None] | None = None) -> ChildRun:
    """Run `command` to its end in a child process (this process's session: an interrupt reaches it too),
    stdout and stderr captured as text; `alive(pid)` answers for it while it runs. Like `subprocess.run`
    with a timeout, but stopped by this module's `kill`.

    `on_phase`: called with the phase's name each time the child announces one (`say_phase`: a line
    `PHASE_LINE` + name on its stderr), within `PHASE_POLL_S` of it, in the calling thread (where a
    progress display of the caller's lives): how a blocking child (the memory probe) says what it is
    doing while it runs.

    Raises:
        ChildTimedOut: it ran more than `timeout_s` seconds; it was killed (its output is dropped).
        OSError: the program cannot be started. Anything raised while waiting (an interrupt, or by
            `on_phase`) kills it first.
    """
    import queue  # noqa: PLC0415

    began = time.monotonic()
    process = subprocess.Popen(list(command), cwd=str(cwd), env=None if env is None else dict(env),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _CHILDREN[process.pid] = process
    out: list[str] = []
    err: list[str] = []
    phases: queue.Queue[str] = queue.Queue()

    def read(stream, into: list[str], announce: bool) -> None:
        for line in iter(stream.readline, ""):
            into.append(line)
            if announce and line.startswith(PHASE_LINE):
                phases.put(line[len(PHASE_LINE):].strip())
        stream.close()

    readers = [threading.Thread(target=read, args=(process.stdout, out, False), daemon=True),
               threading.Thread(target=read, args=(process.stderr, err, on_phase is not None), daemon=True)]
    for reader in readers:
        reader.start()

    def tell() -> None:
        while on_phase is not None and not phases.empty():
            on_phase(phases.get_nowait())

    try:
        deadline = began + timeout_s
        while True:
            try:
                process.wait(timeout=max(0.0, min(PHASE_POLL_S, deadline - time.monotonic())))
                break
            except subprocess.TimeoutExpired:
                if time.monotonic() >= deadline:
                    raise
            tell()
    except subprocess.TimeoutExpired:
        kill(process.pid)
        process.wait()
        raise ChildTimedOut(command, timeout_s) from None
    except BaseException:
        kill(process.pid)
        raise
    finally:
        if process.poll() is not None:
            _CHILDREN.pop(process.pid, None)
    for reader in readers:  # the pipes close when the child (and anything holding them) has exited
        reader.join(timeout=30)
    tell()
    return ChildRun(pid=process.pid, returncode=process.returncode, stdout="".join(out), stderr="".join(err),
                    seconds=time.monotonic() - began)
