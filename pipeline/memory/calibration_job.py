"""Calibrate this machine as a background job: its own process, followed through its folder, one at a time.

The Memory tab's **Calibrate this machine** starts `python -m pipeline calibration-job run --workspace WS`
(`start_calibration`), which runs what `python -m pipeline estimate --measure` runs
(`pipeline.memory.report.estimate_for_workspace(measure=True)`: the precision check, the stand-in's probes,
one step of the teacher's settings) and writes, like an evaluation job (`pipeline.tutor.eval_jobs`):

    WS/calibration/job.json       what was asked: {"settings" (a `TrainConfig` dict), "elsewhere", "created_at"}
    WS/calibration/progress.json  the part and phase now: `calibrate`'s progress dict + "updated_at" and the
                                  part's phases so far with their seconds ("phases", `phases_so_far`)
    WS/calibration/result.json    written last: {"status": completed | failed, "reason", "measured",
                                  "step_bytes", "total_bytes", "settings", "finished_at"}
    WS/calibration/pid.json, process.log   `pipeline.jobs`

so a reloaded page re-attaches to it (`calibration_status`) and refreshes its answer when it ends. One
calibration at a time on this computer: the process that calibrates (this job, or `estimate --measure`)
holds `pipeline.memory.calibrate.hold_calibration`'s lock in the per-user calibration folder, and `start_calibration` refuses (or,
for the app, reports the running one) while a calibration runs. This module does not word anything for the
app (`ui/memory_tab.py` does) and runs no torch itself (the probes are children of the job's process).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

from pipeline import jobs
from pipeline.errors import PipelineError, TrainingError
from pipeline.fileio import atomic_write_json, locked
from pipeline.memory.calibrate import calibration_holder
from pipeline.workspace import Workspace

JOB_FOLDER = "calibration"
"""The calibration job's folder inside the workspace (`WS/calibration/`), used again by each calibration."""
JOB_FILES = {"job": "job.json", "progress": "progress.json", "result": "result.json", "log": jobs.PROCESS_LOG,
             "cancel": "CANCEL"}
"""The files of the job's folder (see the module docstring)."""
CALIBRATION_JOB = jobs.JobKind(words=("pipeline", "calibration-job"), stop_file=JOB_FILES["cancel"],
                               stop_word="cancel")
"""How a calibration job's process is recognised: its command line holds these words and the folder's name."""
def job_folder(workspace: Workspace | str | os.PathLike) -> Path:
    """`WS/calibration/`."""
    return jobs.as_workspace(workspace).root / JOB_FOLDER


def calibration_status(workspace: Workspace | str | os.PathLike) -> dict[str, Any]:
    """Where the workspace's calibration job stands, from its folder.

    Returns:
        `{"state": "running" | "completed" | "failed" | "not_started", "alive" (its process runs),
        "progress" (the last progress.json: `part`, `index`, `of`, `phase`, `text`, `updated_at`, `phases`
        (`phases_so_far`); {}),
        "result" (result.json, or None), "settings", "elsewhere", "created_at" and "last_seconds" (job.json's:
        how long the calibration before it took, `last_calibration_seconds`), "started_at" (unix s, or None),
        "job_dir"}`. A process that ended without writing its result is `failed`, with a `reason`.
    """
    folder = job_folder(workspace)
    job = jobs.read_json(folder / JOB_FILES["job"]) or {}
    process = CALIBRATION_JOB.read(folder)
    result = jobs.read_json(folder / JOB_FILES["result"])
    if isinstance(result, dict) and result.get("status") in ("completed", "failed"):
        state = result["status"]
    elif process.alive:
        state = "running"
    elif process.pid:
        state = "failed"
        result = {"status": "failed", "reason": "The calibration's process ended without its result (it was killed, "
                                                "or the machine ran out of memory).", "finished_at": None}
    else:
        state = "not_started"
    return {"state": state, "alive": process.alive, "progress": jobs.read_json(folder / JOB_FILES["progress"]) or {},
            "result": result if isinstance(result, dict) else None, "settings": job.get("settings") or {},
            "elsewhere": job.get("elsewhere") or "", "started_at": process.started_at, "job_dir": str(folder),
            "created_at": job.get("created_at"), "last_seconds": job.get("last_seconds")}


def last_calibration_seconds(status: dict[str, Any]) -> float | None:
    """How long the calibration before this one took here, in seconds (`calibration_status` of the job
    folder before a new start): its measured time from its job's creation to its result when it completed,
    else what the one before it measured (job.json's `last_seconds`); None when none completed yet. The
    forecast of the next one comes from this computer, not from a figure for another."""
    result = status.get("result") or {}
    created = status.get("created_at")
    if status.get("state") == "completed" and result.get("finished_at") and created:
        return round(float(result["finished_at"]) - float(created), 1)
    return status.get("last_seconds")


def start_calibration(workspace: Workspace | str | os.PathLike, settings: dict[str, Any], *, elsewhere: str = "",
                      python: str | None = None) -> dict[str, Any]:
    """Start calibrating this computer in a process of its own (`python -m pipeline calibration-job run`), or
    find the one already running in this workspace.

    Args:
        settings: the `TrainConfig` dict whose step is measured last (its device is set to auto: this computer).
        elsewhere: the machine the person had picked before, in words, kept for the result's words.
        python: the interpreter (default: this one).
    Returns:
        `calibration_status` plus `"started"`: True when this call started it, False when one was running.
    Raises:
        TrainingError: another process (a second app, `estimate --measure`) calibrates this computer now.
    """
    ws = jobs.as_workspace(workspace)
    folder = job_folder(ws)
    folder.mkdir(parents=True, exist_ok=True)
    with locked(folder):  # held across processes until the job's pid is recorded: a second click finds it
        status = calibration_status(ws)
        if status["alive"]:
            return dict(status, started=False)
        holder = calibration_holder()
        if holder is not None:
            raise TrainingError(f"This computer is being calibrated already (process {holder.get('pid')}, from "
                                "another window or the command line); wait for it to end, then estimate again.")
        last = last_calibration_seconds(status)
        for name in ("progress", "result", "cancel"):
            (folder / JOB_FILES[name]).unlink(missing_ok=True)
        atomic_write_json(folder / JOB_FILES["job"], {"settings": dict(settings, device="auto"),
                                                      "elsewhere": elsewhere, "created_at": time.time(),
                                                      "last_seconds": last})
        command = [python or sys.executable, "-m", "pipeline", "calibration-job", "run", "--workspace", str(ws.root)]
        jobs.start(folder, command, env=jobs.job_env())
        return dict(calibration_status(ws), started=True)


def phases_so_far(seen: list[dict], step: dict, now: float) -> dict:
    """Record `step` (a `calibrate` progress dict: `part`, `index`, `phase`) in `seen`, the phases met so far in
    order, and return the progress record's `updated_at` (`now`, unix seconds) and `phases`: the current part's
    (its name and number: the stand-in's two probes share a name) phases, each `{"phase", "at"}` plus `seconds` (how long it took, 0.1 s) once the next one began. A phase
    shorter than the app's poll (the tiny model's longest batch: about 2 s) is kept, so the panel shows it done
    even when no read fell inside it."""
    part, phase = (step.get("part"), step.get("index")), step.get("phase")  # two parts can share a name (two probes)
    if phase and (not seen or (seen[-1]["part"], seen[-1]["phase"]) != (part, phase)):
        if seen and "seconds" not in seen[-1]:
            seen[-1]["seconds"] = round(now - seen[-1]["at"], 1)
        seen.append({"part": part, "phase": phase, "at": now})
    elif not phase and seen and seen[-1]["part"] != part and "seconds" not in seen[-1]:
        seen[-1]["seconds"] = round(now - seen[-1]["at"], 1)  # a new part began: the last phase is done
    current = [{key: value for key, value in entry.items() if key != "part"} for entry in seen if entry["part"] == part]
    return {"updated_at": now, "phases": current}


def run_calibration(workspace: Workspace | str | os.PathLike) -> dict[str, Any]:
    """The job process's work: `estimate_for_workspace(measure=True)` for job.json's settings (which holds the
    calibration lock, `pipeline.memory.calibrate.hold_calibration`), its progress written to progress.json; returns the result.json it writes last
    (`failed` with the message for a `PipelineError`, which is not raised again)."""
    from pipeline.config import TrainConfig  # noqa: PLC0415
    from pipeline.memory.report import estimate_for_workspace  # noqa: PLC0415

    ws = jobs.as_workspace(workspace)
    folder = job_folder(ws)
    job = jobs.read_json(folder / JOB_FILES["job"]) or {}

    seen: list[dict] = []  # every phase seen, in order: {"part", "phase", "at", "seconds" once the next began}

    def progress(step: dict) -> None:
        atomic_write_json(folder / JOB_FILES["progress"], dict(step, **phases_so_far(seen, step, time.time())))

    def finish(result: dict) -> dict:
        result = dict(result, settings=job.get("settings") or {}, finished_at=time.time())
        atomic_write_json(folder / JOB_FILES["result"], result)
        return result

    try:
        config = TrainConfig.from_dict(job.get("settings") or {}).replace(device="auto")
        progress({"part": "speed", "index": 1, "of": 4, "phase": None, "text": "starting"})
        data = estimate_for_workspace(ws, config, measure=True, progress=progress)  # holds calibrate.hold_calibration
    except PipelineError as error:
        return finish({"status": "failed", "reason": str(error)})
    except BaseException as error:  # noqa: BLE001 - written where the app reads it, then raised
        finish({"status": "failed", "reason": f"{type(error).__name__}: {error} (see {folder / JOB_FILES['log']})"})
        raise
    return finish({"status": "completed", "reason": None, "measured": data["measured"],
                   "step_bytes": data["step_bytes"], "total_bytes": data["total_bytes"]})
