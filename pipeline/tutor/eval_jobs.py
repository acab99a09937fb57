"""Evaluations as background jobs: each in its own process, like a training run (no Gradio import here).

An evaluation of several models takes minutes to hours, so the app never runs it inside the page:
`start_job` writes the request into a job folder and launches `python -m pipeline eval-job run` as a
detached process (its own session: closing the tab or restarting the app leaves it running), and
everything else is read from the job folder's files, which the job process writes atomically:

    WS/eval_jobs/ID/job.json       what to evaluate: {"id", "targets": [{"model", "run"}], "max_new_tokens",
                                   "limit", "grounding", "created_at"}
    WS/eval_jobs/ID/pid.json       the job process ({"pid", "started_at", "command"})
    WS/eval_jobs/ID/progress.json  where it stands: {"target_index", "targets", "label", "done", "total",
                                   "message", "updated_at"}, rewritten after every answer
    WS/eval_jobs/ID/result.json    how it ended: {"status": completed|cancelled|failed, "reason", "saved",
                                   "finished_at"}
    WS/eval_jobs/ID/CANCEL         written by `request_cancel`: stop at the next generated token
    WS/eval_jobs/ID/partial-N.json the answers so far of the N-th model, while it is evaluated
    WS/eval_jobs/ID/process.log    the process's own output

An evaluation job is a kind of background job (`pipeline.jobs`: the detached start, the pid file, alive
by command line, the cancel file, the kill after a timeout, the list); this module keeps what is its
own: its command line, its files and its states.

Each model is evaluated with `pipeline.tutor.evaluate.evaluate_tutor` and saved with `save_evaluation`
where the Judge tab reads it. What was answered is kept as it goes: after every answer the result so
far (marked `"partial": {"answered", "of"}`) is written to the job folder, and to the model's saved
evaluation of this build unless a complete one (or a partial one with more answers) is there already,
so a cancelled, killed or crashed job loses at most the answer in flight and nothing saved earlier.

One evaluation job at a time per workspace (`start_job` refuses a second while one is alive). The job
process sizes its CPU threads by the project rule (`pipeline.host.cpu_threads.inference_threads`: one thread
while a run trains in the workspace, else cores - 1; `pipeline.tutor.infer` re-applies it before every
answer, so a run started meanwhile gets its cores).

This module does not score answers (`pipeline.tutor.metrics`) and does not load models itself.
"""

from __future__ import annotations

import os
import secrets
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from pipeline import jobs
from pipeline.errors import EvaluationError, PipelineError
from pipeline.fileio import atomic_write_json, hold_point, locked
from pipeline.units import plural
from pipeline.workspace import Workspace

JOBS_DIR = "eval_jobs"
"""Evaluation jobs live in `WS/eval_jobs/ID/` (apart from `WS/evals/`, where results are saved)."""
JOB_FILES = {"job": "job.json", "pid": jobs.PID_FILE, "progress": "progress.json", "result": "result.json",
             "cancel": "CANCEL", "log": jobs.PROCESS_LOG}
"""File names inside a job folder."""
DEFAULT_CANCEL_TIMEOUT_S = 120.0
"""Seconds `request_cancel` waits for the job to stop by itself (it checks after every generated token;
loading a model does not look) before killing its process; what was answered is saved already."""
PACE_WINDOW = 20
"""The last answers whose pace `time_left` measures (a model's first answers, slower while it warms up,
drop out of it as more come)."""
PACE_MIN_ANSWERS = 3
"""Answers after the first needed before `time_left` forecasts: before that it says it is measuring (the
first answer also holds the model's loading, so only the gaps after it count)."""
STATES = ("not_started", "running", "cancelling", "completed", "cancelled", "failed")
EVALUATION_JOB = jobs.JobKind(words=("eval-job",), stop_file=JOB_FILES["cancel"], stop_word="cancel")
"""An evaluation as a background job: its process's command line holds `eval-job` (and the job's id);
`CANCEL` asks it to stop at the next generated token."""



def jobs_dir(workspace: Workspace | str | os.PathLike) -> Path:
    """`WS/eval_jobs/`."""
    return jobs.as_workspace(workspace).root / JOBS_DIR


def job_dir(workspace: Workspace | str | os.PathLike, job_id: str) -> Path:
    """`WS/eval_jobs/ID/`. Raises `EvaluationError` for an id that is not a plain folder name."""
    if not job_id or "/" in job_id or "\\" in job_id or job_id.startswith("."):
        raise EvaluationError(f"`{job_id}` is not an evaluation job id; the ids are the folder names in "
                              f"{jobs_dir(workspace)} (`python -m pipeline eval-job list`).")
    return jobs_dir(workspace) / job_id


def target_label(target: dict) -> str:
    """`run NAME` or `base model M`: how a job names what it evaluates (a local model folder by its name,
    `pipeline.tutor.evaluate.model_name`, so its progress and reasons show no workspace path)."""
    from pipeline.tutor.evaluate import model_name

    if target.get("scorer"):
        return "the classical scorer"
    return f"run {target['run']}" if target.get("run") else f"base model {model_name(target.get('model'))}"


def job_alive(pid: int | None, job_id: str) -> bool:
    """True when `pid` is a live (not zombie) evaluation job process of `job_id`: its command line is
    checked through psutil on every system (`pipeline.jobs.alive`), so a reused pid does not count."""
    return EVALUATION_JOB.alive(pid, job_id)


def job_status(workspace: Workspace | str | os.PathLike, job_id: str) -> dict[str, Any]:
    """Where a job stands, from its folder's files and process.

    Returns:
        `{"job", "state", "alive", "pid", "targets", "target_index", "label", "done", "total", "message",
        "reason", "saved", "created_at", "dataset_key", "finished_at", "job_dir"}`; `dataset_key`: the dataset
        build it evaluates (`split_key`). `state` is one of `STATES`: `running`,
        `cancelling` (CANCEL written, process alive), `completed`, `cancelled`, `failed` (from result.json,
        the job's last write, even while its process is still exiting; `failed` also for a process that
        ended without writing its result: killed, or out of memory); `done`/`total` are the test
        recordings answered by the model being evaluated (`target_index`, 0-based, of `targets`), and
        `checks_done`/`checks_total` its listening checks (the grounding probes, asked after the
        recordings; 0 of 0 without them); `answer_times`: unix seconds of the model's last answers (`time_left`).

    Raises:
        EvaluationError: `job_id` is not a job folder name.
    """
    folder = job_dir(workspace, job_id)
    job = jobs.read_json(folder / JOB_FILES["job"]) or {}
    process = EVALUATION_JOB.read(folder)
    progress = jobs.read_json(folder / JOB_FILES["progress"]) or {}
    result = jobs.read_json(folder / JOB_FILES["result"])
    reason = (result or {}).get("reason")
    if result and result.get("status") in ("completed", "cancelled", "failed"):  # written last: the work is over
        state = result["status"]
    elif process.alive:
        state = "cancelling" if process.stop_requested else "running"
    elif process.pid:
        state = "failed"
        reason = (f"The evaluation process ended without writing its result (it was killed, or the machine ran "
                  f"out of memory); the answers it had given are kept. See {folder / JOB_FILES['log']}.")
    else:
        state = "not_started"
    targets = job.get("targets") or []
    return {
        "job": job_id, "state": state, "alive": process.alive, "pid": process.pid, "targets": targets,
        "target_index": progress.get("target_index", 0), "label": progress.get("label"),
        "done": progress.get("done", 0), "total": progress.get("total", 0),
        "checks_done": progress.get("checks_done", 0), "checks_total": progress.get("checks_total", 0),
        "answer_times": progress.get("answer_times") or [],
        "message": progress.get("message") or ("waiting to start" if process.alive else ""),
        "reason": reason, "saved": (result or {}).get("saved", []), "created_at": job.get("created_at"),
        "dataset_key": job.get("dataset_key"),
        "finished_at": (result or {}).get("finished_at"), "job_dir": str(folder),
    }


def list_jobs(workspace: Workspace | str | os.PathLike) -> list[dict[str, Any]]:
    """`job_status` of every job folder in `WS/eval_jobs/`, newest first (by creation time)."""
    statuses = jobs.list_statuses(jobs_dir(workspace), lambda job_id: job_status(workspace, job_id))
    return sorted(statuses, key=lambda s: (s["created_at"] or 0, s["job"]), reverse=True)


def active_job(workspace: Workspace | str | os.PathLike) -> str | None:
    """The id of the job whose process is alive in this workspace, or None."""
    return jobs.first_alive(list_jobs(workspace), "job")


def start_job(
    workspace: Workspace | str | os.PathLike,
    targets: list[dict],
    *,
    max_new_tokens: int | None = None,
    limit: int | None = None,
    grounding: bool = False,
    python: str | None = None,
    extra_env: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Launch `python -m pipeline eval-job run --workspace WS --job ID` as a detached process (`pipeline.jobs.start`).

    Args:
        targets: what to evaluate, in order: `{"model": M}` (a base model) or `{"run": NAME}` (a run's
            adapter on its base), each optionally with both; `{"scorer": True}` the classical scorer.
        max_new_tokens: longest answer in tokens (None: `pipeline.tutor.infer`'s default, 256).
        limit: evaluate only the first N clips of the eval split.
        grounding: also ask the grounding probes (`pipeline.tutor.grounding`: does the tutor hear the
            recording?), up to 3 more answers per clip.
        python: interpreter (default: this one). extra_env: more environment variables for the process.

    Returns:
        `{"job", "pid", "command", "job_dir"}`.

    Raises:
        EvaluationError: nothing to evaluate, a target that names neither a model nor a run, or another
            evaluation job is running in this workspace (its id is named).
        DatasetError: no built eval split (checked before anything is written).
    """
    from pipeline.host.cpu_threads import inference_threads, thread_env
    from pipeline.host.workspace_lock import lock_holder
    from pipeline.tutor.evaluate import split_key

    ws = jobs.as_workspace(workspace)
    targets = [{"model": t.get("model") or None, "run": t.get("run") or None, **({"scorer": True} if t.get("scorer") else {})}
               for t in targets or []]
    if not targets:
        raise EvaluationError("Nothing to evaluate: give at least one base model (`--model M`) or run (`--run NAME`).")
    if any(not (t["model"] or t["run"] or t.get("scorer")) for t in targets):
        raise EvaluationError(f"Each thing to evaluate needs a base model or a run, got {targets}.")
    if limit is not None and limit < 1:
        raise EvaluationError(f"`--limit` must be >= 1, got {limit}; leave it out to evaluate every clip.")
    key = split_key(ws, "eval")  # DatasetError with the fix when nothing is built
    with locked(jobs_dir(ws)):  # held across processes until the job's pid is recorded: one job at a time
        running = active_job(ws)
        if running is not None:
            raise EvaluationError(f"Evaluation job `{running}` is still running in this workspace; one at a time. "
                                  "Wait for it, or cancel it first.")
        job_id = time.strftime("judge-%Y%m%d-%H%M%S") + "-" + secrets.token_hex(2)
        folder = job_dir(ws, job_id)
        folder.mkdir(parents=True)
        atomic_write_json(folder / JOB_FILES["job"], {"id": job_id, "targets": targets, "max_new_tokens": max_new_tokens,
                                                      "limit": limit, "grounding": bool(grounding), "dataset_key": key, "created_at": time.time()})
        command = [python or sys.executable, "-m", "pipeline", "eval-job", "run", "--workspace", str(ws.root),
                   "--job", job_id]
        threads = inference_threads(training_active=lock_holder(ws) is not None)  # the project's rule (cpu_threads)
        process = jobs.start(folder, command, env=jobs.job_env(thread_env(threads), extra_env))
    return {"job": job_id, "pid": process.pid, "command": command, "job_dir": str(folder)}


def _record_kill(folder: Path, timeout_s: float) -> None:
    """After a job was killed for not stopping in time: its result.json says `cancelled`, and why (unless
    the job wrote how it ended just before)."""
    if not (jobs.read_json(folder / JOB_FILES["result"]) or {}).get("status"):
        atomic_write_json(folder / JOB_FILES["result"], {
            "status": "cancelled", "finished_at": time.time(), "saved": [],
            "reason": f"Stopped by force after not stopping within {timeout_s:.0f} s of Cancel; the answers it had "
                      "given are kept."})


def request_cancel(workspace: Workspace | str | os.PathLike, job_id: str, *, timeout_s: float = DEFAULT_CANCEL_TIMEOUT_S,
                   wait: bool = False, poll_s: float = 0.25) -> dict[str, Any]:
    """Ask a job to stop: write `CANCEL` (it stops at the next generated token, keeping what was answered,
    marked cancelled); kill its process if it is still alive after `timeout_s` seconds.

    With `wait=True` blocks until the job ended and returns its final `job_status`; otherwise a
    background thread enforces the timeout and the current status is returned. A job that is not
    alive is left alone.
    """
    ws = jobs.as_workspace(workspace)
    status = job_status(ws, job_id)
    if not status["alive"]:
        return status
    folder = job_dir(ws, job_id)
    EVALUATION_JOB.stop(folder, int(status["pid"]), timeout_s=timeout_s, wait=wait, poll_s=poll_s,
                        when_killed=lambda: _record_kill(folder, timeout_s))
    return job_status(ws, job_id)


def wait_for_job(workspace: Workspace | str | os.PathLike, job_id: str, *, timeout_s: float = 3600.0,
                 poll_s: float = 0.25) -> dict[str, Any]:
    """Block until the job's process has ended (or `timeout_s` seconds, checked every `poll_s`), then
    return its `job_status`."""
    return jobs.wait_for(lambda: job_status(workspace, job_id), timeout_s=timeout_s, poll_s=poll_s)


def keep_partial(workspace: Workspace | str | os.PathLike, result: dict) -> Path | None:
    """Save a partial evaluation (`result["partial"]`) where the Judge tab reads it, unless that would
    replace more: a complete evaluation, or a partial one with more answers. Returns the path written,
    or None when what is there was kept."""
    from pipeline.tutor.evaluate import evaluation_path, save_evaluation

    path = evaluation_path(workspace, result["dataset_key"], run=result.get("run"), model=result.get("model"))
    with locked(path):  # a complete evaluation saved meanwhile by another process is never replaced
        existing = jobs.read_json(path)
        if isinstance(existing, dict) and existing.get("dataset_key") == result["dataset_key"]:
            had = existing.get("partial")
            if not had or int(had.get("answered", 0)) > int(result["partial"]["answered"]):
                return None
        return save_evaluation(workspace, result)


def run_job(workspace: Workspace | str | os.PathLike, job_id: str) -> dict[str, Any]:
    """The job process's work: evaluate each target in turn, saving as it goes; returns its result.json.

    Each target's evaluation is saved by `save_evaluation` when complete; meanwhile the answers so far are
    written after each one (`partial-N.json` and `keep_partial`). A `CANCEL` file stops at the next
    generated token: the target in progress is kept as a partial evaluation marked cancelled, and the
    targets after it are not started. A `PipelineError` ends the job `failed` with its message.
    """
    from pipeline.tutor.evaluate import evaluate_tutor, save_evaluation

    ws = jobs.as_workspace(workspace)
    folder = job_dir(ws, job_id)
    job = jobs.read_json(folder / JOB_FILES["job"])
    if not job:
        raise EvaluationError(f"No readable {JOB_FILES['job']} in {folder}; start jobs with `eval-job start`.")
    targets = job["targets"]
    cancel = folder / JOB_FILES["cancel"]
    saved: list[str] = []

    def finish(status: str, reason: str | None) -> dict[str, Any]:
        result = {"status": status, "reason": reason, "saved": saved, "finished_at": time.time()}
        atomic_write_json(folder / JOB_FILES["result"], result)
        return result

    try:
        for index, target in enumerate(targets):
            label = target_label(target)

            answer_times: list[float] = []  # when each answer of this model came (`time_left`)

            def progress(done: int, total: int, message: str, index=index, label=label, checks=(0, 0),
                         answer_times=answer_times) -> None:
                now = time.time()
                if done + checks[0] > len(answer_times):
                    answer_times.append(now)
                atomic_write_json(folder / JOB_FILES["progress"], {
                    "target_index": index, "targets": len(targets), "label": label, "done": done, "total": total,
                    "checks_done": checks[0], "checks_total": checks[1], "message": message,
                    "answer_times": answer_times[-PACE_WINDOW - 1:], "updated_at": now})

            def partial(result: dict, index=index) -> Path | None:
                result["job"] = job_id
                atomic_write_json(folder / f"partial-{index}.json", result)
                kept = keep_partial(ws, result)
                hold_point("evaluate:answer")  # an answer is kept: where the kill tests stop a job
                return kept

            progress(0, 0, f"starting {label}")
            result = evaluate_tutor(ws, target.get("model"), run=target.get("run"), limit=job.get("limit"),
                                    max_new_tokens=job.get("max_new_tokens"), progress=progress,
                                    should_stop=cancel.exists, partial=partial, grounding=bool(job.get("grounding")),
                                    scorer=bool(target.get("scorer")))
            result["job"] = job_id
            if result.get("partial"):  # cancelled: keep what was answered, start nothing more
                answered = result["partial"]
                if not answered["answered"]:
                    return finish("cancelled", f"Cancelled before {label} had answered anything; nothing of it "
                                               "was saved" + (" (the models before it are kept)." if saved else "."))
                kept = partial(result)
                saved += [str(kept)] if kept else []
                where = "" if kept else (f" in {folder / f'partial-{index}.json'} (the fuller evaluation saved "
                                         "before stays shown)")
                return finish("cancelled", f"Cancelled during {label} after {answered['answered']} of "
                                           f"{answered['of']} answers; those answers are kept{where}, marked partial.")
            saved.append(str(save_evaluation(ws, result)))
            (folder / f"partial-{index}.json").unlink(missing_ok=True)  # the complete evaluation supersedes it
            if cancel.exists() and index + 1 < len(targets):
                return finish("cancelled", f"Cancelled after {label}; the evaluations finished before are kept.")
    except PipelineError as error:
        return finish("failed", str(error))
    except BaseException as error:  # noqa: BLE001 - written where the app reads it, then raised
        finish("failed", f"{type(error).__name__}: {error} (see {folder / JOB_FILES['log']})")
        traceback.print_exc()
        raise
    return finish("completed", None)


def count_words(done: int, total: int, checks_done: int = 0, checks_total: int = 0) -> str:
    """An evaluation's progress in words, one count per kind of work: `test recordings: 12 of 22 answered`,
    and with the grounding probes `, then up to 66 listening checks` before they start or `; listening checks: 30
    of 66` once they have (the Judge headline counts the recordings; the checks are other work)."""
    line = f"test recordings: {done} of {total or '?'} answered"
    if checks_total and not checks_done:
        line += f", then up to {plural(checks_total, 'listening check')}"
    elif checks_total:
        line += f"; listening checks: {checks_done} of {checks_total}"
    return line


def describe(status: dict[str, Any]) -> str:
    """One line for a person: `judge-... · running · run r1 (2 of 3): test recordings: 12 of 23 answered`
    (`count_words`)."""
    line = f"{status['job']} · {status['state'].replace('_', ' ')}"
    if status["targets"]:
        line += f" · {status.get('label') or target_label(status['targets'][0])} ({status['target_index'] + 1} of " \
                f"{len(status['targets'])}): " + count_words(status["done"], status["total"],
                                                             status.get("checks_done", 0), status.get("checks_total", 0))
    return line + (f" · {status['reason']}" if status.get("reason") else "")


def time_left(answer_times: list[float], left: int) -> tuple[float, float] | None:
    """About how long the `left` answers still to give take, from this evaluation's own pace: the gaps
    between its recorded answers (`answer_times`, unix seconds, oldest first; the last `PACE_WINDOW`).

    Returns `(seconds, give_or_take)` in seconds, `give_or_take` about one standard deviation of that
    forecast (the mean gap's uncertainty times `left`, plus the spread of `left` gaps of their own); None
    while fewer than `PACE_MIN_ANSWERS` gaps are measured (say it is measuring), or with nothing left.
    """
    times = [float(t) for t in answer_times or []][-PACE_WINDOW - 1:]
    gaps = [b - a for a, b in zip(times, times[1:]) if b >= a]
    if left <= 0 or len(gaps) < PACE_MIN_ANSWERS:
        return None
    mean = sum(gaps) / len(gaps)
    spread = (sum((g - mean) ** 2 for g in gaps) / (len(gaps) - 1)) ** 0.5
    return mean * left, left * spread / len(gaps) ** 0.5 + spread * left ** 0.5


def time_left_words(answer_times: list[float], left: int, of_what: str = "") -> str:
    """`time_left` in a teacher's words: "about 4 min 10 s left (give or take 40 s, from this evaluation's
    pace so far)", "measuring the pace: time left after 4 answers" before there are enough, "" with
    nothing left. `of_what`: words after "left" (" for this model" when the job evaluates several)."""
    from pipeline.units import format_seconds

    if left <= 0:
        return ""
    forecast = time_left(answer_times, left)
    if forecast is None:
        return f"measuring the pace: time left after {plural(PACE_MIN_ANSWERS + 1, 'answer')}"
    seconds, give_or_take = forecast
    sure = f"give or take {format_seconds(give_or_take)}, " if give_or_take >= 1 else ""  # "± 0 s" says nothing
    return f"about {format_seconds(seconds)} left{of_what} ({sure}from this evaluation's pace so far)"
