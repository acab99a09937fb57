"""Start, watch, stop and list training runs, each in its own process (no Gradio import here).

A run is a kind of background job (`pipeline.jobs`, which starts, watches and stops the process; the
run folder's files and how to read them are `pipeline.training.run_folder`'s). This module says what
is the run's own: its command line, what must hold before it starts, and how a killed run is recorded.

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

import os
import shlex
import sys
import time
from typing import Any

from pipeline import jobs
from pipeline.config import TrainConfig
from pipeline.errors import DatasetError, TrainingError
from pipeline.fileio import atomic_write_json, locked
from pipeline.host.cpu_threads import thread_env, trainer_threads
from pipeline.host.workspace_lock import LOCK_FD_ENV, WorkspaceLock, lock_holder
from pipeline.training.run_folder import RUN_FILES, TRAINING_RUN, ended_without_result, read_run
from pipeline.workspace import Workspace

DEFAULT_STOP_TIMEOUT_S = 300.0
"""Seconds `request_stop` waits for a clean stop (a checkpoint save of E2B's adapter takes seconds;
one training step on a slow machine can take minutes) before killing the process."""


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


def run_status(workspace: Workspace | str | os.PathLike, run_name: str) -> dict[str, Any]:
    """Where a run stands, from its files and process (`pipeline.training.run_folder.read_run`, as a dict).

    Returns:
        `{"run", "state", "alive", "pid", "reason", "stop_requested", "step", "max_steps",
        "last_progress" (last progress.jsonl line or None), "progress_lines", "result"
        (result.json dict or None), "run_dir", "has_checkpoint", "has_adapter"}`. `state` is one of
        `run_folder.RUN_STATES`: `not_started`, `running`, `stopping` (STOP written, process alive),
        `completed`, `stopped`, `failed` (including a process that died without writing its result:
        killed, or out of system memory).

    Raises:
        ConfigError: `run_name` is not a usable run name.
    """
    return read_run(workspace, run_name).status()


def list_runs(workspace: Workspace | str | os.PathLike) -> list[dict[str, Any]]:
    """`run_status` of every run folder in `WS/runs/`, newest first (a folder that is not a run is left out)."""
    ws = jobs.as_workspace(workspace)
    return jobs.list_statuses(ws.runs_dir, lambda name: run_status(ws, name))


def measured_load_seconds(workspace: Workspace | str | os.PathLike, settings: dict[str, Any],
                          last: int = 5) -> dict | None:
    """How long runs of this workspace took from Start to their first step (result.json's `load_seconds`: the
    process starting, the model loading, the longest batch checked) with the model, quantization, device and
    low-memory mode of `settings` (a run's config.json): `{"seconds": the median of the last `last`,
    "measurements": how many}`, or None when no such run was measured here. What a run loading now will take
    is best told by these (the calibration's guess, `pipeline.calibration.expected_load_seconds`, comes from
    its shorter probes)."""
    import statistics

    from pipeline.training.run_folder import run_settings

    ws = jobs.as_workspace(workspace)
    keys = ("model", "quantization", "device", "low_memory_heap")
    wanted = {key: settings.get(key) for key in keys}
    loads = []
    for status in reversed(list_runs(ws)):  # oldest first
        seconds = (status.get("result") or {}).get("load_seconds")
        if not seconds:
            continue
        theirs = run_settings(ws, status["run"])
        if all(theirs.get(key) == value for key, value in wanted.items()):
            loads.append(float(seconds))
    if not loads:
        return None
    return {"seconds": statistics.median(loads[-last:]), "measurements": len(loads[-last:])}


def active_run(workspace: Workspace | str | os.PathLike) -> str | None:
    """Name of the run whose training process is alive in this workspace (the holder of the
    workspace's training lock, whoever started it), or None."""
    holder = lock_holder(workspace)
    if holder and holder.get("run"):
        return str(holder["run"])
    return jobs.first_alive(list_runs(workspace), "run")


def require_built_dataset(workspace: Workspace | str | os.PathLike) -> dict:
    """The built dataset's build report (`pipeline.data.dataset.load_build_report`), checked to have train rows.

    Raises:
        DatasetError: no dataset is built in `WS/dataset`, its `build_report.json` is unreadable, or
            it has no training rows; the message names the command (`python -m pipeline build`) and
            the app's Dataset tab that build it.
    """
    from pipeline.data.dataset import load_build_report

    ws = jobs.as_workspace(workspace)
    fix = (
        f"build it first with "
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
        ModelLoadError: the model is not (all) on this computer (`pipeline.model.local_copy.require_model_here`:
            the message points to Get the model / `python -m pipeline get-model`).
        DatasetError: no dataset with training rows is built (`require_built_dataset`); checked
            before the run folder is created.
    """
    ws = jobs.as_workspace(workspace)
    run_dir = ws.run_dir(run_name)
    config_file, result_file = run_dir / RUN_FILES["config"], run_dir / RUN_FILES["result"]
    with locked(ws.runs_dir):  # the run list: no other start, import or delete between the checks and the start
        active = active_run(ws)
        if active is not None:
            raise TrainingError(
                f"Run `{active}` is still training in this workspace; one run at a time. Wait for it, or stop it first."
            )
        lock = WorkspaceLock(ws, run_name)
        if not resume:
            if config is None:
                raise TrainingError("No training settings given for the new run.")
            if config_file.exists() or result_file.exists():
                raise TrainingError(f"Run `{run_name}` already exists; resume it or choose another name.")
        elif not config_file.exists():
            raise TrainingError(f"Run `{run_name}` has no config.json in {run_dir}; there is nothing to resume.")
        require_built_dataset(ws)
        from pipeline.model.local_copy import require_model_here

        # A run never downloads its model (gigabytes hidden in its "loading" phase): refused here, in a moment.
        require_model_here(config.model if config is not None else (jobs.read_json(config_file) or {}).get("model", ""))
        if resume and not allow_dataset_change:  # refused here, with the reason, not in a process nobody watches
            from pipeline.data.dataset import build_identity
            from pipeline.training.resume import check_dataset, read_dataset_record

            if read_dataset_record(run_dir) is not None:
                check_dataset(run_dir, run_name, build_identity(ws))
        run_dir.mkdir(parents=True, exist_ok=True)
        # The GPU this process's Try/Judge tutor sits on is handed to the run (issue 21 #10)
        from pipeline.tutor.infer import release_for

        device = config.device if config is not None else (jobs.read_json(config_file) or {}).get("device")
        released = release_for(device, what=f"run `{run_name}`")
        command = [python or sys.executable, "-m", "pipeline", "train", "--workspace", str(ws.root), "--run", run_name]
        if resume:
            command += ["--resume"] + (["--allow-dataset-change"] if allow_dataset_change else [])
        else:
            command += config_flags(config)
        env = jobs.job_env({
            # On Apple silicon let a run that does not fit fail instead of swapping (FIELD_NOTES "Memory").
            "PYTORCH_MPS_HIGH_WATERMARK_RATIO": "1.0",
            **thread_env(trainer_threads()),  # cores - 1: one stays for the app (cpu_threads)
        }, extra_env)
        (run_dir / TRAINING_RUN.stop_file).unlink(missing_ok=True)
        lock.acquire()  # held from here until the training process has it: no other run can start in between
        env[LOCK_FD_ENV] = str(lock.fd) if lock.fd is not None else ""
        try:
            process = jobs.start(run_dir, command, env=env, pass_fds=(lock.fd,) if lock.fd is not None else ())
        except BaseException:
            lock.release()
            raise
        lock.record({"pid": process.pid, "run": run_name, "started_at": time.time(), "command": " ".join(command)[:500]})
        lock.handed_over()
        return {"run": run_name, "pid": process.pid, "command": command, "run_dir": str(run_dir), "released": released}


def _record_kill(run_dir, run_name: str, timeout_s: float) -> None:
    """After a run was killed for not stopping in time: its result.json says `stopped`, with why and
    whether it can be resumed (unless the trainer wrote how it ended just before)."""
    result = jobs.read_json(run_dir / RUN_FILES["result"]) or {"run": run_name}
    if result.get("status") in (None, "running"):
        result.update(
            status="stopped",
            reason=ended_without_result(run_dir, f"Killed after not stopping within {timeout_s:.0f} s of the stop request."),
        )
        atomic_write_json(run_dir / RUN_FILES["result"], result)


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
    is still alive after `timeout_s` seconds, kill it (its last checkpoint is kept) and record it as
    stopped. The request stands until the process ends: a `STOP` that vanished meanwhile (cleared by a
    trainer still starting) is written again (`run_folder.TRAINING_RUN`).

    `timeout_s=None` allows `stop_timeout_s(status)`: three times the run's seconds per step
    (the step in flight must finish) plus a minute for the save, and at least 300 s.

    With `wait=True` blocks until the run ended and returns its final `run_status`; otherwise a
    background thread enforces the timeout and the current `run_status` is returned at once.
    A run that is not alive is left alone (its status is returned).
    """
    ws = jobs.as_workspace(workspace)
    run_dir = ws.run_dir(run_name)
    status = run_status(ws, run_name)
    if not status["alive"]:
        return status
    timeout_s = stop_timeout_s(status) if timeout_s is None else timeout_s
    TRAINING_RUN.stop(run_dir, int(status["pid"]), timeout_s=timeout_s, wait=wait, poll_s=poll_s,
                      when_killed=lambda: _record_kill(run_dir, run_name, timeout_s))
    return run_status(ws, run_name)


def wait_for_run(workspace: Workspace | str | os.PathLike, run_name: str, *, timeout_s: float = 3600.0, poll_s: float = 0.5) -> dict[str, Any]:
    """Block until the run's process has ended (or `timeout_s` seconds, checked every `poll_s`), then
    return its `run_status`."""
    ws = jobs.as_workspace(workspace)
    return jobs.wait_for(lambda: run_status(ws, run_name), timeout_s=timeout_s, poll_s=poll_s)


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

    ws = jobs.as_workspace(workspace)
    run_dir = ws.run_dir(run_name)
    if not run_dir.is_dir():
        known = [r["run"] for r in list_runs(ws)]
        raise TrainingError(f"No run named `{run_name}` in {ws.runs_dir}; the runs are: "
                            f"{', '.join(known) if known else 'none'}.")
    status = run_status(ws, run_name)
    if status["alive"] or active_run(ws) == run_name:
        raise TrainingError(f"Run `{run_name}` is {status['state'].replace('_', ' ')} (pid {status['pid']}); "
                            "a run cannot be deleted while its process is alive. Stop it first with **Stop** on the Train tab "
                            f"(on the command line: create `{run_dir / TRAINING_RUN.stop_file}`), then delete it.")
    with locked(ws.runs_dir):  # not while a start of the same run is between its checks and its process
        if not run_dir.is_dir():  # another process deleted it meanwhile
            raise TrainingError(f"Run `{run_name}` was deleted meanwhile (by another window or command); nothing to do.")
        if active_run(ws) == run_name or run_status(ws, run_name)["alive"]:
            raise TrainingError(f"Run `{run_name}` started training meanwhile; stop it first, then delete it.")
        size = sum(p.stat().st_size for p in run_dir.rglob("*") if p.is_file() and not p.is_symlink())
        trash = ws.runs_dir / f".deleting-{run_name}-{os.getpid()}-{time.time_ns()}"
        os.replace(run_dir, trash)
    shutil.rmtree(trash, ignore_errors=True)
    return {"run": run_name, "state": status["state"], "bytes": size}
