"""Start, watch, stop and list training runs, each in its own process (no Gradio import here).

The app never imports the trainer: `start_run` launches `python -m pipeline train ...` as a
detached process (its own session, so the UI can exit and a reload re-attaches), writes its pid to
`WS/runs/NAME/pid.json`, and everything else is read from the run folder files that `train.py`
writes (`progress.jsonl`, `result.json`, `train.log`). Stopping writes the `STOP` file (the trainer
saves a checkpoint + the adapter and ends at the next step); a run that has not ended after a
timeout is killed. The process's own stdout/stderr go to `WS/runs/NAME/process.log`.

One run at a time per workspace, whoever starts it: `start_run` takes the workspace's training lock
(`pipeline.host.workspace_lock`) and hands it to the process it starts; `python -m pipeline
train` takes the same lock. A second run (from the app or the command line) is refused with the
name of the one training, and a run started from the command line shows here as running.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from pipeline.config import TrainConfig
from pipeline.host.cpu_threads import thread_env, trainer_threads
from pipeline.errors import DatasetError, TrainingError
from pipeline.fileio import atomic_write_json, read_jsonl
from pipeline.training.run_folder import last_checkpoint
from pipeline.host.workspace_lock import LOCK_FD_ENV, WorkspaceLock, lock_holder
from pipeline.workspace import Workspace

PID_FILE = "pid.json"
PROCESS_LOG = "process.log"
DEFAULT_STOP_TIMEOUT_S = 300.0
"""Seconds `request_stop` waits for a clean stop (a checkpoint save of E2B's adapter takes seconds;
one training step on a slow machine can take minutes) before killing the process."""

REPO_ROOT = Path(__file__).resolve().parents[2]
_CHILDREN: dict[int, subprocess.Popen] = {}
"""Processes started by this process, so `poll()` reaps them (a finished child would otherwise
linger as a zombie and look alive)."""


def _ws(workspace: Workspace | str | os.PathLike) -> Workspace:
    return workspace if isinstance(workspace, Workspace) else Workspace(Path(workspace))


def _read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def config_flags(config: TrainConfig) -> list[str]:
    """`TrainConfig` -> the `python -m pipeline train` flags that reproduce it."""
    flags: list[str] = []
    for name, value in config.to_dict().items():
        flag = "--" + name.replace("_", "-")
        if isinstance(value, bool):
            flags.append(flag if value else "--no-" + name.replace("_", "-"))
        else:
            flags += [flag, str(value)]
    return flags


def pid_alive(pid: int | None, run_name: str | None = None) -> bool:
    """True when process `pid` is running (not a zombie) and is a `pipeline train` process (for
    `run_name` when given), so a pid the system reused for another program is not taken for the trainer.

    Read through psutil on every system (Linux, macOS, Windows), never from `/proc`: a check that
    needed `/proc` took every live pid for the trainer on a Mac. A process whose command line cannot
    be read (another user's) is taken as alive, as a process that exists.
    """
    if not pid:
        return False
    child = _CHILDREN.get(pid)
    if child is not None:
        return child.poll() is None
    from pipeline.host.process_check import command_alive

    return command_alive(pid, "pipeline", "train", *([run_name] if run_name else []))


def _run_pid(run_dir: Path, result: dict | None = None) -> int | None:
    """The training process of a run: `pid.json` (started by the app), else the pid a running
    trainer writes into its result.json (started with `python -m pipeline train`)."""
    info = _read_json(run_dir / PID_FILE)
    if info and info.get("pid"):
        return int(info["pid"])
    if result and result.get("status") == "running" and result.get("pid"):
        return int(result["pid"])
    return None


def _process_error(run_dir: Path) -> str | None:
    """The `error: ...` line a command prints when it refuses its settings (the last one in
    process.log), e.g. a device that is not on this machine; None when there is none."""
    try:
        lines = (run_dir / PROCESS_LOG).read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return None
    for line in reversed(lines[-50:]):
        if line.startswith("error: "):
            return line[len("error: "):].strip() or None
    return None


def _ended_without_result(run_dir: Path, how: str) -> str:
    """Why a run whose process ended without its result failed, and whether Resume can continue it.
    A process that stopped on an error it printed (a setting refused before training began) is
    reported with that error, not as killed or out of memory."""
    error = _process_error(run_dir)
    if error:
        how = f"The training process stopped before training: {error}"
    kept = last_checkpoint(run_dir)
    then = (f"--resume continues from its last checkpoint ({kept.name})." if kept else
            "It saved no checkpoint, so it cannot be resumed: start it again under a new name "
            f"(and delete {run_dir} if you do not need its log).")
    logs = [path for path in (run_dir / "train.log", run_dir / PROCESS_LOG) if path.exists()] or [run_dir / PROCESS_LOG]
    return f"{how} See {' and '.join(str(path) for path in logs)}. {then}"


def run_status(workspace: Workspace | str | os.PathLike, run_name: str) -> dict[str, Any]:
    """Where a run stands, from its files and process.

    Returns:
        `{"run", "state", "alive", "pid", "reason", "stop_requested", "step", "max_steps",
        "last_progress" (last progress.jsonl line or None), "progress_lines", "result"
        (result.json dict or None), "run_dir"}`. `state` is one of: `not_started`, `running`,
        `stopping` (STOP written, process alive), `completed`, `stopped`, `failed` (including a
        process that died without writing its result: killed, or out of system memory).
    """
    ws = _ws(workspace)
    run_dir = ws.run_dir(run_name)
    result = _read_json(run_dir / "result.json")
    pid = _run_pid(run_dir, result)
    alive = pid_alive(pid, run_name)
    progress = read_jsonl(run_dir / "progress.jsonl")
    train_lines = [p for p in progress if p.get("kind", "train") == "train"]
    last = progress[-1] if progress else None
    stop_requested = (run_dir / "STOP").exists()
    reason = result.get("reason") if result else None
    if alive:
        state = "stopping" if stop_requested else "running"
    elif result and result.get("status") in ("completed", "stopped", "failed"):
        state = result["status"]
    elif result or pid:
        state = "failed"
        reason = _ended_without_result(
            run_dir, "The training process ended without writing its result (it was killed, or the machine ran out of memory)."
        )
    else:
        state = "not_started"
    return {
        "run": run_name,
        "state": state,
        "alive": alive,
        "pid": pid,
        "reason": reason,
        "stop_requested": stop_requested,
        "step": train_lines[-1]["step"] if train_lines else (result or {}).get("steps"),
        "max_steps": (last or {}).get("max_steps") or (result or {}).get("max_steps"),
        "last_progress": last,
        "progress_lines": len(progress),
        "result": result,
        "run_dir": str(run_dir),
    }


def list_runs(workspace: Workspace | str | os.PathLike) -> list[dict[str, Any]]:
    """`run_status` of every run folder in `WS/runs/`, newest first."""
    ws = _ws(workspace)
    if not ws.runs_dir.is_dir():
        return []
    folders = [p for p in ws.runs_dir.iterdir() if p.is_dir() and not p.name.startswith(".")]
    folders.sort(key=lambda p: p.stat().st_mtime, reverse=True)
    out = []
    for folder in folders:
        try:
            out.append(run_status(ws, folder.name))
        except Exception:  # noqa: BLE001 - a strange folder name must not hide the others
            continue
    return out


def active_run(workspace: Workspace | str | os.PathLike) -> str | None:
    """Name of the run whose training process is alive in this workspace (the holder of the
    workspace's training lock, whoever started it), or None."""
    holder = lock_holder(workspace)
    if holder and holder.get("run"):
        return str(holder["run"])
    for status in list_runs(workspace):
        if status["alive"]:
            return status["run"]
    return None


def require_built_dataset(workspace: Workspace | str | os.PathLike) -> dict:
    """The built dataset's build report (`pipeline.data.dataset.load_build_report`), checked to have train rows.

    Raises:
        DatasetError: no dataset is built in `WS/dataset`, its `build_report.json` is unreadable, or
            it has no training rows; the message names the command (`python -m pipeline build`) and
            the app's Dataset tab that build it.
    """
    from pipeline.data.dataset import load_build_report

    ws = _ws(workspace)
    fix = (
        f"build it first: the app's Dataset tab (Build dataset), or "
        f"`python -m pipeline build --workspace {shlex.quote(str(ws.root))} --model google/gemma-3n-E2B-it`"
    )
    try:
        report = load_build_report(ws)
    except DatasetError as error:
        raise DatasetError(f"No built dataset to train on in {ws.dataset_dir}; {fix}.") from error
    except (OSError, ValueError) as error:
        raise DatasetError(f"The dataset's build report in {ws.dataset_dir} cannot be read ({error}); {fix}.") from error
    if not (report.get("splits") or {}).get("train"):
        raise DatasetError(
            f"The dataset in {ws.dataset_dir} has no training rows; add samples with feedback, then {fix}."
        )
    return report


def start_run(
    workspace: Workspace | str | os.PathLike,
    run_name: str,
    config: TrainConfig | None = None,
    resume: bool = False,
    *,
    python: str | None = None,
    extra_env: dict[str, str] | None = None,
    allow_dataset_change: bool = False,
) -> dict[str, Any]:
    """Launch `python -m pipeline train --workspace WS --run NAME ...` as a detached process.

    Args:
        config: the settings (required unless `resume`; a resumed run uses its config.json).
        resume: add `--resume` (continue from the last checkpoint).
        python: interpreter (default: this one).
        extra_env: extra environment variables for the child.
        allow_dataset_change: with `resume`, continue although the dataset was rebuilt with other
            rows since the run started (`--allow-dataset-change`, recorded by the run).

    Before the process starts, the tutors this process keeps for Try and Judge on the GPU the run
    will use are unloaded (`pipeline.tutor.infer.release_for`): one GPU, two processes.

    Returns:
        `{"run", "pid", "command", "run_dir", "released"}`; `released` says what was unloaded (None: nothing).

    Raises:
        TrainingError: another run is alive in this workspace, the run exists (without `resume`),
            or `config` is missing.
        DatasetError: no dataset with training rows is built (`require_built_dataset`); checked
            before the run folder is created.
    """
    ws = _ws(workspace)
    run_dir = ws.run_dir(run_name)
    active = active_run(ws)
    if active is not None:
        raise TrainingError(
            f"Run `{active}` is still training in this workspace; one run at a time. Wait for it, or stop it first."
        )
    lock = WorkspaceLock(ws, run_name)
    if not resume:
        if config is None:
            raise TrainingError("No training settings given for the new run.")
        if (run_dir / "config.json").exists() or (run_dir / "result.json").exists():
            raise TrainingError(f"Run `{run_name}` already exists; resume it or choose another name.")
    elif not (run_dir / "config.json").exists():
        raise TrainingError(f"Run `{run_name}` has no config.json in {run_dir}; there is nothing to resume.")
    require_built_dataset(ws)
    if resume and not allow_dataset_change:  # refused here, with the reason, not in a process nobody watches
        from pipeline.data.dataset import build_identity
        from pipeline.training.resume import check_dataset, read_dataset_record

        if read_dataset_record(run_dir) is not None:
            check_dataset(run_dir, run_name, build_identity(ws))
    run_dir.mkdir(parents=True, exist_ok=True)
    # The GPU this process's Try/Judge tutor sits on is handed to the run (issue 21 #10)
    from pipeline.tutor.infer import release_for

    device = config.device if config is not None else (_read_json(run_dir / "config.json") or {}).get("device")
    released = release_for(device, what=f"run `{run_name}`")
    command = [python or sys.executable, "-m", "pipeline", "train", "--workspace", str(ws.root), "--run", run_name]
    if resume:
        command += ["--resume"] + (["--allow-dataset-change"] if allow_dataset_change else [])
    else:
        command += config_flags(config)
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO_ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.setdefault("PYTHONUNBUFFERED", "1")
    # On Apple silicon let a run that does not fit fail instead of swapping (FIELD_NOTES "Memory").
    env.setdefault("PYTORCH_MPS_HIGH_WATERMARK_RATIO", "1.0")
    for name, value in thread_env(trainer_threads()).items():  # cores - 1: one stays for the app (cpu_threads)
        env.setdefault(name, value)
    env.update(extra_env or {})
    (run_dir / "STOP").unlink(missing_ok=True)
    log_handle = open(run_dir / PROCESS_LOG, "ab")
    try:  # held from here until the training process has it: no other run can start in between
        lock.acquire()
    except BaseException:
        log_handle.close()
        raise
    env[LOCK_FD_ENV] = str(lock.fd) if lock.fd is not None else ""
    from pipeline.host.process_check import detached_popen_kwargs

    kwargs: dict[str, Any] = {"pass_fds": (lock.fd,) if lock.fd is not None else (), **detached_popen_kwargs()}
    try:
        process = subprocess.Popen(
            command, cwd=str(REPO_ROOT), env=env, stdin=subprocess.DEVNULL, stdout=log_handle, stderr=subprocess.STDOUT, **kwargs
        )
    except BaseException:
        lock.release()
        raise
    finally:
        log_handle.close()
    lock.record({"pid": process.pid, "run": run_name, "started_at": time.time(), "command": " ".join(command)[:500]})
    lock.handed_over()
    _CHILDREN[process.pid] = process
    atomic_write_json(run_dir / PID_FILE, {"pid": process.pid, "started_at": time.time(), "command": command})
    return {"run": run_name, "pid": process.pid, "command": command, "run_dir": str(run_dir), "released": released}


def _kill(pid: int) -> None:
    from pipeline.host.process_check import kill_process_group

    kill_process_group(pid, _CHILDREN.get(pid))


def _wait_then_kill(ws: Workspace, run_name: str, pid: int, timeout_s: float, poll_s: float) -> dict[str, Any]:
    """Wait for the run to end after a stop request; kill it after `timeout_s`. The request stands until
    the process ends: a trainer still starting clears a stale `STOP` as it begins, which would swallow a
    Stop pressed during its start-up (the run then trained on and was killed at the deadline, losing
    its steps since the last checkpoint), so a `STOP` that vanished while the process lives is written again."""
    deadline = time.monotonic() + timeout_s
    stop_file = ws.run_dir(run_name) / "STOP"
    while time.monotonic() < deadline:
        if not pid_alive(pid, run_name):
            return run_status(ws, run_name)
        if not stop_file.exists():
            stop_file.write_text(f"stop requested (again) at {time.time():.0f}\n", encoding="utf-8")
        time.sleep(poll_s)
    _kill(pid)
    run_dir = ws.run_dir(run_name)
    result = _read_json(run_dir / "result.json") or {"run": run_name}
    if result.get("status") in (None, "running"):
        result.update(
            status="stopped",
            reason=_ended_without_result(run_dir, f"Killed after not stopping within {timeout_s:.0f} s of the stop request."),
        )
        atomic_write_json(run_dir / "result.json", result)
    return run_status(ws, run_name)


def stop_timeout_s(status: dict[str, Any]) -> float:
    """Seconds to wait for a clean stop: 3 x the measured seconds per step + 60 s, at least 300 s."""
    last = status.get("last_progress") or {}
    elapsed, step = last.get("elapsed_s"), last.get("step")
    per_step = (float(elapsed) / int(step)) if elapsed and step else 0.0
    return max(DEFAULT_STOP_TIMEOUT_S, 3.0 * per_step + 60.0)


def request_stop(
    workspace: Workspace | str | os.PathLike,
    run_name: str,
    *,
    timeout_s: float | None = None,
    wait: bool = False,
    poll_s: float = 0.5,
) -> dict[str, Any]:
    """Ask a run to stop: write `STOP` (the trainer saves and ends at the next step); if the process
    is still alive after `timeout_s`, kill it (its last checkpoint is kept).

    `timeout_s=None` allows `stop_timeout_s(status)`: three times the run's seconds per step
    (the step in flight must finish) plus a minute for the save, and at least 300 s.

    With `wait=True` blocks until the run ended and returns its final `run_status`; otherwise a
    background thread enforces the timeout and the current `run_status` is returned at once.
    A run that is not alive is left alone (its status is returned).
    """
    ws = _ws(workspace)
    run_dir = ws.run_dir(run_name)
    status = run_status(ws, run_name)
    if not status["alive"]:
        return status
    (run_dir / "STOP").write_text(f"stop requested at {time.time():.0f}\n", encoding="utf-8")
    pid = int(status["pid"])
    if timeout_s is None:
        timeout_s = stop_timeout_s(status)
    if wait:
        return _wait_then_kill(ws, run_name, pid, timeout_s, poll_s)
    threading.Thread(target=_wait_then_kill, args=(ws, run_name, pid, timeout_s, poll_s), daemon=True).start()
    return run_status(ws, run_name)


def wait_for_run(workspace: Workspace | str | os.PathLike, run_name: str, *, timeout_s: float = 3600.0, poll_s: float = 0.5) -> dict[str, Any]:
    """Block until the run's process has ended (or `timeout_s`), then return its `run_status`."""
    ws = _ws(workspace)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        status = run_status(ws, run_name)
        if not status["alive"]:
            return status
        time.sleep(poll_s)
    return run_status(ws, run_name)


def delete_run(workspace: Workspace | str | os.PathLike, run_name: str) -> dict[str, Any]:
    """Delete the run folder `WS/runs/NAME` (its checkpoints, adapter, logs and saved evaluations).

    The folder is first renamed to a hidden name beside it (one atomic step: the run disappears from
    every list at once, and a crash mid-way never leaves a half-deleted run that looks real), then
    removed. Returns `{"run", "state", "bytes"}`: the state it had and the bytes freed.

    Raises:
        ConfigError: `run_name` is not a usable run name.
        TrainingError: no such run, or the run is training or stopping now (its process is alive,
            or it holds the workspace's training lock): stop it first, then delete it.
    """
    import shutil

    ws = _ws(workspace)
    run_dir = ws.run_dir(run_name)
    if not run_dir.is_dir():
        known = [r["run"] for r in list_runs(ws)]
        raise TrainingError(f"No run named `{run_name}` in {ws.runs_dir}; the runs are: "
                            f"{', '.join(known) if known else 'none'}.")
    status = run_status(ws, run_name)
    if status["alive"] or active_run(ws) == run_name:
        raise TrainingError(f"Run `{run_name}` is {status['state'].replace('_', ' ')} (pid {status['pid']}); "
                            "a run cannot be deleted while its process is alive. Stop it first "
                            f"(create {run_dir / 'STOP'}, or Stop in the app), then delete it.")
    size = sum(p.stat().st_size for p in run_dir.rglob("*") if p.is_file() and not p.is_symlink())
    trash = ws.runs_dir / f".deleting-{run_name}-{os.getpid()}-{time.time_ns()}"
    os.replace(run_dir, trash)
    shutil.rmtree(trash, ignore_errors=True)
    return {"run": run_name, "state": status["state"], "bytes": size}
