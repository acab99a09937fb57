"""Stopping the processes a test started, whatever its outcome (issue 11 #8).

A training run started through the app (`pipeline.training.runs.start_run`) is detached on purpose:
it has its own session, so killing the app's process group does not stop it. A failed browser test
once left such a run training for 20 minutes. Tests therefore stop, in their teardown:
- every run process of the workspaces they used (`stop_workspace_runs`: the pids in
  `WS/runs/*/pid.json` and the holder of the workspace's training lock), and
- every process this test process started through `start_run` (conftest's autouse fixture).

Also what the tests of detached processes share: a run folder whose process has died (`dead_run`), and
waiting for what a process does (`wait_until`).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path


def stop_process_group(pid: int, *, grace_s: float = 10.0) -> bool:
    """SIGTERM the process group led by `pid` (or the process alone when it leads none), wait up
    to `grace_s`, then SIGKILL; returns True when a live process was signalled."""
    try:
        target_group = os.getpgid(pid) == pid
    except ProcessLookupError:
        return False
    send = (lambda sig: os.killpg(pid, sig)) if target_group else (lambda sig: os.kill(pid, sig))
    try:
        send(signal.SIGTERM)
    except ProcessLookupError:
        return False
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        if not _alive(pid):
            return True
        time.sleep(0.1)
    try:
        send(signal.SIGKILL)
    except ProcessLookupError:
        pass
    return True


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie (our own child not yet reaped) has finished
        return "\nState:\tZ" not in Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return True


def workspace_run_pids(workspace: Path) -> set[int]:
    """Pids of the training processes of a workspace: every `runs/*/pid.json`, the pid a running
    trainer writes into its `result.json`, and the holder of the workspace's training lock."""
    from pipeline.training.run_folder import pid_alive
    from pipeline.host.workspace_lock import lock_holder

    pids: set[int] = set()
    runs = Path(workspace) / "runs"
    for run_dir in runs.iterdir() if runs.is_dir() else ():
        for name in ("pid.json", "result.json"):
            try:
                pid = json.loads((run_dir / name).read_text(encoding="utf-8")).get("pid")
            except (OSError, ValueError, AttributeError):
                continue
            if isinstance(pid, int) and pid_alive(pid, run_dir.name):
                pids.add(pid)
    holder = lock_holder(workspace) if runs.is_dir() else None
    if holder and isinstance(holder.get("pid"), int):
        pids.add(holder["pid"])
    pids.discard(os.getpid())
    return pids


def stop_workspace_runs(workspace: Path) -> list[int]:
    """Stop every training process of `workspace` (see `workspace_run_pids`); returns the pids stopped."""
    return [pid for pid in sorted(workspace_run_pids(workspace)) if stop_process_group(pid)]


def stop_workspace_eval_jobs(workspace: Path) -> list[int]:
    """Stop every evaluation job process of `workspace` (`pipeline.tutor.eval_jobs`: detached like a run; their
    pids are in `WS/eval_jobs/*/pid.json`) and reap those this process started; returns the pids stopped."""
    from pipeline.tutor import eval_jobs

    return _stop_jobs(sorted((Path(workspace) / eval_jobs.JOBS_DIR).glob("*/pid.json")), eval_jobs.job_alive)


def stop_workspace_downloads(workspace: Path) -> list[int]:
    """Stop every model download process of `workspace` (`pipeline.model.download_job`: detached like a run; their
    pids are in `WS/downloads/OWNER/NAME/pid.json`) and reap those this process started; returns the pids stopped."""
    from pipeline.model.download_job import GET_MODEL

    return _stop_jobs(sorted((Path(workspace) / "downloads").glob("**/pid.json")), GET_MODEL.alive)


def _stop_jobs(pid_files: list[Path], alive) -> list[int]:
    """Stop the process group of each `pid.json` in `pid_files` whose job is still alive (`alive(pid, job
    folder name)`), and reap those this process started (`pipeline.jobs`); returns the pids stopped."""
    from pipeline import jobs

    stopped = []
    for pid_file in pid_files:
        try:
            pid = json.loads(pid_file.read_text(encoding="utf-8"))["pid"]
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if alive(pid, pid_file.parent.name) and stop_process_group(pid):
            stopped.append(pid)
        child = jobs._CHILDREN.pop(pid, None)
        if child is not None:
            child.wait(timeout=30)
    return stopped


def dead_run(workspace: Path, run: str, result: dict | None = None) -> Path:
    """`WS/runs/RUN/` as a trainer that died leaves it: `pid.json` names a process that has ended (a
    real pid, reaped), and `result.json` holds `result` when given; returns the run folder."""
    from pipeline.fileio import atomic_write_json
    from pipeline.jobs import PID_FILE

    run_dir = Path(workspace) / "runs" / run
    run_dir.mkdir(parents=True)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    atomic_write_json(run_dir / PID_FILE, {"pid": dead.pid})
    if result is not None:
        atomic_write_json(run_dir / "result.json", result)
    return run_dir


def wait_until(predicate, timeout_s: float = 300.0, poll_s: float = 0.2):
    """Call `predicate` every `poll_s` seconds until it returns something true, and return that; raise
    AssertionError after `timeout_s` seconds."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(poll_s)
    raise AssertionError(f"not reached within {timeout_s} s")


def held(command: list[str], phase: str, folder: Path, *, env: dict | None = None, terminal: bool = False,
         timeout_s: float = 300.0) -> tuple[subprocess.Popen, dict]:
    """Start `command` (in this checkout, its own session) with `pipeline.fileio.HOLD_AT` = `phase`, and wait
    until it stops there (`pipeline.fileio.hold_point`): returns the process and what it wrote ({"pid",
    "phase"}). `terminal=True`: its stdin is a pseudo-terminal it controls, so `hang_up` closes that terminal
    as a closed window does. Its output goes to `folder/held-*.log`; it fails with that output when the
    process ends instead of holding."""
    import tempfile

    folder.mkdir(parents=True, exist_ok=True)
    hold_file = Path(tempfile.mkstemp(prefix="held-", suffix=".json", dir=folder)[1])
    hold_file.unlink()
    log_path = hold_file.with_suffix(".log")
    child_env = {**(os.environ if env is None else env), "TUTOR_HOLD_AT": phase, "TUTOR_HOLD_FILE": str(hold_file),
                 "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    stdin, master = subprocess.DEVNULL, None
    preexec = None
    if terminal:
        import fcntl
        import pty
        import termios

        master, stdin = pty.openpty()
        preexec = lambda: fcntl.ioctl(0, termios.TIOCSCTTY, 0)  # noqa: E731 - after setsid: the session's terminal
    with open(log_path, "wb") as log:
        process = subprocess.Popen(command, cwd=Path(__file__).resolve().parents[1], env=child_env, stdin=stdin,
                                   stdout=log, stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=preexec)
    if terminal:
        os.close(stdin)
    process.terminal = master  # type: ignore[attr-defined]
    try:
        wait_until(lambda: hold_file.exists() or process.poll() is not None, timeout_s=timeout_s)
    except AssertionError:
        stop_process_group(process.pid, grace_s=0)
        raise
    if not hold_file.exists():
        raise AssertionError(f"{command} ended ({process.returncode}) before {phase}:\n"
                             + log_path.read_text(errors="replace")[-3000:])
    return process, json.loads(hold_file.read_text())


def kill_held(process: subprocess.Popen) -> None:
    """SIGKILL the held process's whole group (nothing of it may run cleanup) and reap it."""
    os.killpg(process.pid, signal.SIGKILL)
    process.wait(timeout=60)
    assert process.returncode == -signal.SIGKILL


def hang_up(process: subprocess.Popen) -> None:
    """Close the held process's terminal (`held(terminal=True)`): the system sends it SIGHUP, as when the
    window it runs in is closed; reap it and check that the hang-up ended it."""
    os.close(process.terminal)  # type: ignore[attr-defined]
    try:
        process.wait(timeout=60)
    finally:
        stop_process_group(process.pid, grace_s=0)
    assert process.returncode == -signal.SIGHUP
