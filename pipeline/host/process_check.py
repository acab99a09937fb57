"""Whether a recorded process id is still the process that recorded it, on any system.

Read through psutil (Linux, macOS, Windows), never from `/proc`: a check that needed `/proc` took
every live pid for the trainer on a Mac, so a dead run stayed "running" and blocked new runs.
Torch-free, so the app can ask it at once.
"""

from __future__ import annotations


def command_alive(pid: int | None, *words: str) -> bool:
    """True when process `pid` runs (not a zombie) and its command line holds every one of `words`
    (so a pid the system reused for another program does not count). A process whose command line
    cannot be read (another user's) is taken as alive, as a process that exists."""
    if not pid:
        return False
    import psutil  # noqa: PLC0415 - a dependency (requirements.txt); kept out of the app's start-up imports

    try:
        process = psutil.Process(int(pid))
        if process.status() in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD):
            return False
        cmdline = " ".join(process.cmdline())
    except (psutil.NoSuchProcess, ValueError):
        return False
    except psutil.AccessDenied:
        return True
    return all(word in cmdline for word in words)


def process_started_at(pid: int | None = None) -> float:
    """Unix seconds process `pid` (default: this one) was created, as the system records it (psutil), so
    a clock started from it counts the process's own start-up (Python's imports, an allocator's re-exec,
    which keeps the pid and the time); the current time when it cannot be read."""
    import time  # noqa: PLC0415

    import psutil  # noqa: PLC0415

    try:
        return float(psutil.Process(pid).create_time())
    except (psutil.Error, ValueError, OSError):
        return time.time()


def detached_popen_kwargs() -> dict:
    """`subprocess.Popen` keyword arguments for a process that outlives the app and its tab (a training run,
    an evaluation job): its own session on POSIX, a new process group on Windows, so it can be stopped as
    a group (`kill_process`) and is not stopped by the app's own signals."""
    import os  # noqa: PLC0415
    import subprocess  # noqa: PLC0415

    if os.name == "posix":
        return {"start_new_session": True}
    return {"creationflags": subprocess.CREATE_NEW_PROCESS_GROUP | getattr(subprocess, "DETACHED_PROCESS", 0)}  # pragma: no cover


def kill_process(pid: int, child=None) -> None:
    """Kill process `pid` at once (SIGKILL on POSIX; SIGTERM on Windows): with its whole process group
    when it leads one (a detached process, `detached_popen_kwargs`, and what it started), else alone
    (a child in its parent's group, which must live on). Then reap `child` (its `subprocess.Popen`,
    when this process started it) for up to 10 s. Never raises for a process that is already gone or
    not ours."""
    import os  # noqa: PLC0415
    import signal  # noqa: PLC0415
    import subprocess  # noqa: PLC0415

    try:
        if os.name == "posix":
            if os.getpgid(pid) == pid:
                os.killpg(pid, signal.SIGKILL)
            else:
                os.kill(pid, signal.SIGKILL)
        else:  # pragma: no cover - Windows
            os.kill(pid, signal.SIGTERM)
    except (ProcessLookupError, PermissionError, OSError):
        pass
    if child is not None:
        try:
            child.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
