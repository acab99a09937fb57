"""Getting a model as a background job: `python -m pipeline get-model --workspace WS` in a process of its own
(`pipeline.jobs`), so closing the tab does not stop it and a reopened page follows it again, like a
training run. The app starts it, follows it and cancels it through its folder only:

    WS/downloads/OWNER/NAME/job.json       {"model", "created_at"}: which model the folder is for
    WS/downloads/OWNER/NAME/progress.json  where it stands (`DownloadProgress.to_dict()` and the process's
                                           "pid"), rewritten at each file and phase and at most twice a second
    WS/downloads/OWNER/NAME/result.json    how it ended: {"status": completed|cancelled|failed, "reason",
                                           "result" (`download_model`'s), "exit_code", "finished_at"}
    WS/downloads/OWNER/NAME/CANCEL         written by `cancel_download`: stop after the chunk in flight
    WS/downloads/OWNER/NAME/pid.json, process.log   the process (`pipeline.jobs`)

The folder is named after the model id (`OWNER/NAME`), so the process's command line holds the folder's name
(`pipeline.jobs.JobKind` recognises its process by it). What was fetched lives in the Hugging Face cache, not
here: a cancelled or failed download continues from there, whichever workspace starts it again. The token is
never in these files: `pipeline.model.download.save_token` saves it with huggingface_hub's own login.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

from pipeline import jobs
from pipeline.errors import HubUnreachableError, ModelLoadError
from pipeline.fileio import atomic_write_json
from pipeline.workspace import Workspace

DOWNLOADS_DIR = "downloads"
"""Download jobs live in `WS/downloads/OWNER/NAME/`."""
JOB_FILES = {"job": "job.json", "progress": "progress.json", "result": "result.json", "cancel": "CANCEL"}
"""File names inside a download's folder (besides `pipeline.jobs`' pid file and log)."""
STATES = ("not_started", "running", "cancelling", "completed", "cancelled", "failed")
GET_MODEL = jobs.JobKind(words=("get-model",), stop_file=JOB_FILES["cancel"], stop_word="cancel")
"""A download as a background job: its command line holds `get-model` and the model's name."""
CANCEL_TIMEOUT_S = 30.0
"""Seconds `cancel_download` waits for the process to stop by itself (it checks after every chunk of
`pipeline.model.download.CHUNK_BYTES` and every block of a hash check) before killing it; what was fetched
is kept either way."""

_START_LOCK = threading.Lock()


def download_dir(workspace: Workspace | str | os.PathLike, model_id: str) -> Path:
    """`WS/downloads/OWNER/NAME/` for hub id `model_id` (checked: `check_hub_id`)."""
    from pipeline.model.download import check_hub_id

    return jobs.as_workspace(workspace).root / DOWNLOADS_DIR / Path(*check_hub_id(model_id).split("/"))


def download_status(workspace: Workspace | str | os.PathLike, model_id: str) -> dict[str, Any]:
    """Where the download of `model_id` stands in this workspace, from its folder's files and process.

    Returns:
        {"model", "state" (one of `STATES`), "alive", "pid", "progress" (progress.json or None), "result"
        (result.json or None), "reason" (why it ended, for cancelled / failed), "folder"}. A process that ended
        without writing its result is `cancelled` when a cancel was asked, else `failed`.
    """
    folder = download_dir(workspace, model_id)
    progress = jobs.read_json(folder / JOB_FILES["progress"])
    result = jobs.read_json(folder / JOB_FILES["result"])
    process = GET_MODEL.read(folder, fallback_pid=(progress or {}).get("pid"))
    reason = (result or {}).get("reason")
    if process.alive:
        state = "cancelling" if process.stop_requested else "running"
    elif result and result.get("status") in STATES:
        state = result["status"]
    elif progress is not None or process.pid:
        state = "cancelled" if process.stop_requested else "failed"
        reason = reason or ("Cancelled." if process.stop_requested else
                            f"The download's process ended without saying why; see {folder / jobs.PROCESS_LOG}.")
    else:
        state = "not_started"
    return {"model": model_id, "state": state, "alive": process.alive, "pid": process.pid, "progress": progress,
            "result": result, "reason": reason, "folder": str(folder)}


def running_download(workspace: Workspace | str | os.PathLike) -> str | None:
    """The model id of a download whose process is alive in this workspace, or None."""
    root = jobs.as_workspace(workspace).root / DOWNLOADS_DIR
    for job_file in sorted(root.glob("**/" + JOB_FILES["job"])) if root.is_dir() else ():
        model = (jobs.read_json(job_file) or {}).get("model")
        try:
            if model and download_status(workspace, model)["alive"]:
                return str(model)
        except ModelLoadError:  # a folder that is not a download's
            continue
    return None


def start_download(workspace: Workspace | str | os.PathLike, model_id: str, *, token: str | None = None,
                   python: str | None = None) -> dict[str, Any]:
    """Get `model_id` in the background: save `token` when one is given (`save_token`: huggingface_hub's login,
    never this folder), ask the hub whether this person may download it (`check_access`: refused at once, with
    the licence page and the token box, for a gated model without a token), then launch `python -m pipeline
    get-model --model ID --workspace WS --json` as a detached process. A second click while it runs returns the
    running one. Nothing secret is on the process's command line or in its folder.

    Returns:
        `download_status` of the download, with "started": False when it was already running.

    Raises:
        ModelAccessError / ModelLoadError: a refused token, no token for a gated model, offline, no network, not a
            hub id. OSError: the folder cannot be written or the process cannot be started.
    """
    from pipeline.model.download import check_access, save_token

    ws = jobs.as_workspace(workspace)
    folder = download_dir(ws, model_id)
    if download_status(ws, model_id)["alive"]:
        return {**download_status(ws, model_id), "started": False}
    if token and token.strip():
        save_token(token)
    check_access(model_id)
    with _START_LOCK:
        status = download_status(ws, model_id)
        if status["alive"]:
            return {**status, "started": False}
        folder.mkdir(parents=True, exist_ok=True)
        for name in (JOB_FILES["cancel"], JOB_FILES["result"], JOB_FILES["progress"]):
            (folder / name).unlink(missing_ok=True)
        atomic_write_json(folder / JOB_FILES["job"], {"model": model_id, "created_at": time.time()})
        command = [python or sys.executable, "-m", "pipeline", "get-model", "--model", model_id,
                   "--workspace", str(ws.root), "--json"]
        jobs.start(folder, command, env=jobs.job_env())
    return {**download_status(ws, model_id), "started": True}


def cancel_download(workspace: Workspace | str | os.PathLike, model_id: str, *, timeout_s: float = CANCEL_TIMEOUT_S,
                    wait: bool = False, poll_s: float = 0.2) -> dict[str, Any]:
    """Ask the download of `model_id` to stop (`CANCEL`); kill its process if it has not ended within
    `timeout_s` seconds. What was fetched stays in the cache for the next download. `wait=True` blocks until
    it ended. A download that is not running is left alone. Returns its `download_status`."""
    folder = download_dir(workspace, model_id)
    status = download_status(workspace, model_id)
    if not status["alive"]:
        return status

    def killed() -> None:
        if not (folder / JOB_FILES["result"]).exists():
            atomic_write_json(folder / JOB_FILES["result"], {"status": "cancelled", "reason": "Cancelled (the process "
                              f"was stopped after {timeout_s:.0f} s).", "exit_code": None, "finished_at": time.time()})

    GET_MODEL.stop(folder, int(status["pid"]), timeout_s=timeout_s, wait=wait, poll_s=poll_s, when_killed=killed)
    return download_status(workspace, model_id)


class JobFiles:
    """The download process's side of the folder (`python -m pipeline get-model --workspace WS`): its progress
    (throttled by `download_model`), whether a cancel was asked, and how it ended."""

    def __init__(self, workspace: Workspace | str | os.PathLike, model_id: str):
        self.folder = download_dir(workspace, model_id)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.model = model_id
        if not (self.folder / JOB_FILES["job"]).exists():  # started from a terminal, not by the app
            atomic_write_json(self.folder / JOB_FILES["job"], {"model": model_id, "created_at": time.time()})
            (self.folder / JOB_FILES["result"]).unlink(missing_ok=True)

    def progress(self, progress) -> None:
        """Write `progress` (a `DownloadProgress`) with this process's pid."""
        atomic_write_json(self.folder / JOB_FILES["progress"], {**progress.to_dict(), "pid": os.getpid(),
                                                                "updated_at": time.time()})

    def cancelled(self) -> bool:
        """True once `CANCEL` is there."""
        return (self.folder / JOB_FILES["cancel"]).exists()

    def finish(self, status: str, *, reason: str | None = None, result: dict | None = None, exit_code: int) -> None:
        """Write result.json: `status` is completed, cancelled or failed."""
        atomic_write_json(self.folder / JOB_FILES["result"], {"status": status, "reason": reason, "result": result,
                                                              "exit_code": exit_code, "finished_at": time.time()})


HUB_ANSWER_KEPT_S = 300.0
"""Seconds the hub's answer about a model (its size, whether it is gated) is reused by `model_facts`, so
picking a model again or following a download does not ask the hub every time."""
HUB_ERROR_KEPT_S = 30.0
"""Seconds a failed look-up (offline, no network) is reused: a page that follows a download every second does
not wait for a time-out every second."""
_HUB_ANSWERS: dict[tuple[str, str], tuple[float, dict]] = {}


def _hub_answer(model_id: str, timeout_s: float) -> dict:
    """{"gated", "total_bytes", "files", "commit"} from the hub (kept `HUB_ANSWER_KEPT_S`), or {"error": message},
    with `"unreachable"`: "offline" (offline mode) or "network" (no connection) when the hub could not be asked."""
    from huggingface_hub import constants

    from pipeline.model.download import hub_model

    key = (model_id, constants.ENDPOINT)
    kept = _HUB_ANSWERS.get(key)
    if kept is not None and time.monotonic() - kept[0] < (HUB_ERROR_KEPT_S if "error" in kept[1] else HUB_ANSWER_KEPT_S):
        return kept[1]
    try:
        listing = hub_model(model_id, timeout_s=timeout_s)
        answer = {"gated": listing.gated, "total_bytes": listing.total_bytes, "files": len(listing.files),
                  "commit": listing.commit}
    except HubUnreachableError as error:  # offline or no network: the panel says so when a download is asked for
        from pipeline.model.hub import _hub_offline

        answer = {"error": str(error), "unreachable": "offline" if _hub_offline() else "network"}
    except ModelLoadError as error:  # an unknown model: said in the panel, asked again later
        answer = {"error": str(error)}
    _HUB_ANSWERS[key] = (time.monotonic(), answer)
    return answer


def model_facts(workspace: Workspace | str | os.PathLike, model_id: str, *, hub_timeout_s: float = 5.0) -> dict[str, Any]:
    """What the app's Get-the-model panel says of `model_id`, in one call: whether it is a hub id, what of it is
    on this computer (`local_copy`), what the hub says (asked only when it is not all here: size, gated), the
    free disk of the cache, the licence page, whether a token is saved, and this workspace's download of it.

    Returns:
        {"model", "hub_id" (False for a local folder: nothing else is filled), "local" (`LocalCopy.to_dict()`),
        "hub" ({"gated", "total_bytes", "files", "commit"} or {"error": message, "unreachable"?: "offline" | "network"} or None when not
        asked),
        "cache_dir", "free_bytes", "needed_bytes" (free disk the rest wants, `disk_room`'s margin), "licence_url", "family_gated" (the family lists a licence page),
        "token_saved", "download" (`download_status`)}.
    """
    from pipeline.fileio import disk_room, free_bytes
    from pipeline.model.catalog import FAMILIES
    from pipeline.model.download import check_hub_id, licence_url
    from pipeline.model.hub_failures import saved_token
    from pipeline.model.hub import is_local_model
    from pipeline.model.local_copy import cache_dir, local_copy

    model_id = str(model_id or "").strip()
    if not model_id or is_local_model(model_id):
        return {"model": model_id, "hub_id": False}
    try:
        check_hub_id(model_id)
    except ModelLoadError as error:
        return {"model": model_id, "hub_id": False, "error": str(error)}
    local = local_copy(model_id)
    download = download_status(workspace, model_id)
    hub = None if local.complete else _hub_answer(model_id, hub_timeout_s)
    cache = cache_dir()
    missing = max(0, int((hub or {}).get("total_bytes") or 0) - local.size_bytes - local.partial_bytes)
    return {"model": model_id, "hub_id": True, "local": local.to_dict(), "hub": hub, "cache_dir": str(cache),
            "free_bytes": free_bytes(cache), "needed_bytes": disk_room(cache, missing)[1] if missing else 0,
            "licence_url": licence_url(model_id),
            "family_gated": any(model_id in f.models and f.licence_url for f in FAMILIES.values()),
            "token_saved": saved_token() is not None, "download": download}
