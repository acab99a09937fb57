"""The run folder `WS/runs/NAME/`: the only channel between the trainer process and whoever watches it
(the app, the CLI, the tests), its file names, and the one reader of it (`read_run`). Torch-free, so
the UI can read it.

    config.json      every setting (`TrainConfig.to_dict()`), so the run can be repeated
    progress.jsonl   one JSON line per logging step (see `pipeline.training.train`'s ProgressCallback)
    train.log        human log: settings, quantization/LoRA reports, progress, warnings, errors
    checkpoints/     resumable Trainer checkpoints (adapter + optimizer + scheduler + RNG state)
    adapter/         the final LoRA adapter in PEFT format + the processor (+ base_model.json)
    base_model.json  the base model's identity (`pipeline.model.base_identity`), checked on resume
    dataset.json     the dataset build the run trains on (`pipeline.training.resume`), checked on resume
    result.json      {"status": running|completed|stopped|failed, "reason", ...}
    tensorboard/     TensorBoard event files (`tensorboard --logdir WS/runs`)
    best/            with --keep-best: the adapter of the evaluation that agreed best with the experts, and
                     best.json (`pipeline.training.best_checkpoint`); copied into adapter/ at the end
    eval/            the run's saved evaluations, one per dataset build (`pipeline.tutor.evaluate`)
    STOP             written by `pipeline.training.runs.request_stop`: save and end after the
                     micro-batch in flight (`pipeline.training.stopping`)
    pid.json         the training process the app started (`pipeline.jobs`); a run started from the
                     command line writes its pid into result.json instead
    process.log      that process's own output (`pipeline.jobs`)

A run is a kind of background job (`pipeline.jobs`, `TRAINING_RUN`): its process is recognised by its
command line, `python -m pipeline train ... --run NAME`.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from pipeline.fileio import atomic_write_text, jsonl_lines, read_jsonl
from pipeline.jobs import PID_FILE, PROCESS_LOG, JobKind, as_workspace, read_json
from pipeline.units import format_gib
from pipeline.units import format_loss
from pipeline.workspace import Workspace

RUN_FILES = {
    "config": "config.json",
    "progress": "progress.jsonl",
    "log": "train.log",
    "checkpoints": "checkpoints",
    "adapter": "adapter",
    "result": "result.json",
    "stop": "STOP",
    "tensorboard": "tensorboard",
    "best": "best",
    "pid": PID_FILE,
    "process_log": PROCESS_LOG,
}
"""File names inside a run folder (`WS/runs/NAME/`)."""
ADAPTER_CONFIG = "adapter_config.json"
"""The file that makes `adapter/` a saved adapter (PEFT writes it with the weights)."""
RUN_STATES = ("not_started", "running", "stopping", "completed", "stopped", "failed")
"""What `read_run` says of a run: `stopping` is STOP written with the process alive; `failed` includes a
process that died without writing its result (killed, or out of system memory)."""
TRAINING_RUN = JobKind(words=("pipeline", "train"), stop_file=RUN_FILES["stop"], stop_word="stop", keep_asking=True)
"""A run as a background job: its process's command line holds `pipeline train` (and the run's name);
`STOP` asks it to save and end, and is written again while waiting (a trainer still starting clears a
stale one as it begins, `remove_stale_stop`, which would swallow a Stop pressed during its start-up)."""


def run_paths(workspace: Workspace | str | os.PathLike, run_name: str) -> dict[str, Path]:
    """Paths of the run folder's files (keys of `RUN_FILES` + "dir")."""
    run_dir = as_workspace(workspace).run_dir(run_name)
    paths = {key: run_dir / name for key, name in RUN_FILES.items()}
    paths["dir"] = run_dir
    return paths


def last_checkpoint(run_dir: Path) -> Path | None:
    """The newest complete `checkpoints/checkpoint-N` folder of a run, or None."""
    folder = Path(run_dir) / RUN_FILES["checkpoints"]
    if not folder.is_dir():
        return None
    candidates = []
    for child in folder.iterdir():
        if child.is_dir() and child.name.startswith("checkpoint-") and (child / "trainer_state.json").exists():
            try:
                candidates.append((int(child.name.split("-", 1)[1]), child))
            except ValueError:
                continue
    return max(candidates)[1] if candidates else None


def logged_elapsed_s(progress_path: Path, step: int) -> float:
    """Seconds of training a run had logged by optimizer step `step`: the `elapsed_s` of the last
    progress.jsonl line (in file order) at a step <= `step`, or 0.0 when there is none.

    A resumed run continues its clock from here (its checkpoint's step), so `elapsed_s` and the
    app's progress/ETA count the time of every process that trained the run. Lines logged after the
    checkpoint by a process that was then killed are ignored (those steps are trained again).
    """
    if step <= 0:
        return 0.0
    elapsed = 0.0
    for line in read_jsonl(progress_path):
        value = line.get("elapsed_s")
        if isinstance(line.get("step"), int) and line["step"] <= step and isinstance(value, (int, float)):
            elapsed = float(value)
    return elapsed


def trim_progress_to_step(progress_path: Path, step: int) -> int:
    """Keep only the progress.jsonl lines logged at optimizer steps <= `step` (the checkpoint a run
    resumes from); returns how many lines were dropped. The file is rewritten atomically.

    A process killed after its last checkpoint has logged steps that the resumed run trains again;
    without this, those steps would appear twice in the file and in the app's loss curve. A torn
    last line is dropped too. Raises OSError if the run folder is not writable.
    """
    if not progress_path.exists():
        return 0
    raw_lines = [t for _, t in jsonl_lines(progress_path.read_text(encoding="utf-8"))]
    kept = []
    for text in raw_lines:
        try:
            line = json.loads(text)
        except json.JSONDecodeError:
            continue  # torn by the kill
        if isinstance(line.get("step"), int) and line["step"] <= step:
            kept.append(text)
    if len(kept) == len(raw_lines):
        return 0
    atomic_write_text(progress_path, "".join(text + "\n" for text in kept))
    return len(raw_lines) - len(kept)


def read_progress(workspace: Workspace | str | os.PathLike, run_name: str) -> list[dict]:
    """The run's progress.jsonl lines (a torn last line is skipped)."""
    return read_jsonl(run_paths(workspace, run_name)["progress"])


def remove_stale_stop(stop: Path, result: Path) -> None:
    """Remove a STOP file that an earlier process of the run already answered, so that a resumed run
    does not stop at once: one written before this process started, or before the run's `result`
    file (`result.json`, which the process that stopped wrote after honouring it). A STOP written
    since (the user pressed Stop, or touched the file, while this run was starting) is kept and
    honoured at the first step."""
    import psutil  # noqa: PLC0415

    try:
        written = stop.stat().st_mtime
    except FileNotFoundError:
        return
    answered = result.exists() and result.stat().st_mtime >= written
    if answered or written < psutil.Process(os.getpid()).create_time():
        stop.unlink(missing_ok=True)


def summary_text(result: dict) -> str:
    """Human summary of a result.json dict, with the run's measured memory against the estimate
    for its settings (`pipeline.memory.run_compare`: whole run against whole run, step against step)."""
    from pipeline.memory.run_compare import compare, comparison_text

    status = result.get("status")
    lines = [f"Run `{result.get('run')}` {status}" + (f": {result['reason']}" if result.get("reason") else ".")]
    if result.get("steps") is not None:
        lines.append(
            f"  steps {result['steps']}/{result.get('max_steps')}, final loss {format_loss(result.get('final_loss'))}, "
            f"eval loss {format_loss(result.get('eval_loss'))}, peak memory {format_gib(result.get('peak_memory_bytes') or 0)}"
        )
    memory = comparison_text(compare(measured_memory([], result), result.get("memory_estimate")))
    if memory:
        lines += ["  " + line for line in memory.splitlines()]
    if result.get("adapter_dir"):
        lines.append(f"  adapter: {result['adapter_dir']}")
    if result.get("best_reason"):
        lines.append(f"  kept: {result['best_reason']}")
    if result.get("tiny_random_model"):
        lines.append("  note: the model is the tiny random stand-in; its feedback is meaningless text.")
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------
# reading a run: one read gives its state, progress, clock, log and memory


def pid_alive(pid: int | None, run_name: str | None = None) -> bool:
    """True when process `pid` is running (not a zombie) and is a `pipeline train` process (for
    `run_name` when given), so a pid the system reused for another program is not taken for the trainer.

    Read through psutil on every system (Linux, macOS, Windows), never from `/proc`: a check that
    needed `/proc` took every live pid for the trainer on a Mac. A process whose command line cannot
    be read (another user's) is taken as alive, as a process that exists (`pipeline.jobs.alive`).
    """
    return TRAINING_RUN.alive(pid, run_name)


def run_settings(workspace: Workspace | str | os.PathLike, run_name: str) -> dict:
    """A run's `config.json` as a dict ({} when the run has none yet, or it is not JSON).

    Raises:
        ConfigError: `run_name` is not a usable run name.
    """
    return _settings_in(run_paths(workspace, run_name)["dir"])


def _settings_in(run_dir: Path) -> dict:
    path = run_dir / RUN_FILES["config"]
    try:
        return json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
    except ValueError:
        return {}


def has_checkpoint(run_dir: Path) -> bool:
    """The run saved a `checkpoints/checkpoint-*` folder (what Resume continues from)."""
    return any((Path(run_dir) / RUN_FILES["checkpoints"]).glob("checkpoint-*"))


def has_adapter(run_dir: Path) -> bool:
    """The run saved an adapter (`adapter/adapter_config.json`): a tutor to try, judge or export."""
    return (Path(run_dir) / RUN_FILES["adapter"] / ADAPTER_CONFIG).is_file()


def _process_error(run_dir: Path) -> str | None:
    """The `error: ...` line a command prints when it refuses its settings (the last one in
    process.log), e.g. a device that is not on this machine; None when there is none."""
    try:
        lines = (run_dir / RUN_FILES["process_log"]).read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return None
    for line in reversed(lines[-50:]):
        if line.startswith("error: "):
            return line[len("error: "):].strip() or None
    return None


def ended_without_result(run_dir: Path, how: str) -> str:
    """Why a run whose process ended without its result failed (`how`), where its logs are, and whether
    Resume can continue it. A process that stopped on an error it printed (a setting refused before
    training began) is reported with that error, not as killed or out of memory."""
    error = _process_error(run_dir)
    if error:
        how = f"The training process stopped before training: {error}"
    kept = last_checkpoint(run_dir)
    then = (f"--resume continues from its last checkpoint ({kept.name})." if kept else
            "It saved no checkpoint, so it cannot be resumed: start it again under a new name "
            f"(and delete {run_dir} if you do not need its log).")
    logs = ([path for path in (run_dir / RUN_FILES["log"], run_dir / RUN_FILES["process_log"]) if path.exists()]
            or [run_dir / RUN_FILES["process_log"]])
    return f"{how} See {' and '.join(str(path) for path in logs)}. {then}"


def run_clock(rows: list[dict], started_at: float | None, alive: bool, now: float, *,
              max_steps: int | None = None, stop_requested_at: float | None = None,
              failed_at: float | None = None, ended_at: float | None = None) -> tuple[float | None, float | None]:
    """(elapsed seconds, seconds spent loading) of a run for its progress line.

    `rows`: progress.jsonl lines (each has `elapsed_s`, the run's time across resumes with each
    process's loading included, and `time`, unix seconds); `started_at`: unix time the current (or
    last) process started. Elapsed is the clock of the person who pressed Start, so it never goes
    back: before this process's first step it is what earlier processes took (0 for a new run) plus
    the loading so far (also given apart); after it, it ticks on from the last line until the next
    one, and stops ticking once the last line is the run's final step (`max_steps` reached, or logged
    after STOP was written at `stop_requested_at`), so the figure a finished or stopped run shows (its
    last line's) is never below one shown while it ran.
    A run that failed at `failed_at` (unix seconds) counts its time up to the failure. A run whose last process
    ended at `ended_at` (result.json's `finished_at`) without logging a line (resumed, then stopped while it
    loaded) counts that process's time too: the clock showed it ticking while it loaded.
    Loading is None once this process has logged a line. The clock is read from the last line that
    carries one (`elapsed_s`): a --keep-best judging line (`"kind": "judge"`) has none, and after one
    the run is training (or stopping), not loading again.
    """
    timed = [r for r in rows if r.get("elapsed_s") is not None]
    last = timed[-1] if timed else {}
    logged = last.get("elapsed_s")
    last_time = float(last.get("time") or now)
    if not alive:
        if failed_at and logged is not None:
            return float(logged) + max(0.0, float(failed_at) - last_time), None
        if logged is not None and ended_at and started_at and float(started_at) > last_time:
            return float(logged) + max(0.0, float(ended_at) - float(started_at)), None
        return logged, None
    this_process = [r for r in rows if started_at is None or float(r.get("time") or 0) >= float(started_at)]
    if not this_process or logged is None:
        loading = max(0.0, now - float(started_at)) if started_at else None
        return float(logged or 0.0) + (loading or 0.0), loading
    final = bool(max_steps and int(last.get("step") or 0) >= int(max_steps)) or bool(
        stop_requested_at and last_time >= float(stop_requested_at))
    return float(logged) + (0.0 if final else max(0.0, now - last_time)), None


def _clock_start(result: dict, launched_at: float | None) -> float | None:
    """See `process_started_at`; `launched_at` is pid.json's `started_at`."""
    if result.get("status") == "running" and result.get("started_at"):
        return float(result["started_at"])
    return launched_at or result.get("started_at")


def process_started_at(result: dict, run_dir: Path) -> float | None:
    """Unix time the run's current process started: result.json's `started_at` once that process has
    written it (`status` running), else the launch time in pid.json: a resumed run's new process
    reads its first seconds with the previous process's result.json still in place, whose start would
    make the clock tick from the previous process's last line."""
    return _clock_start(result, TRAINING_RUN.read(Path(run_dir)).started_at)


def measured_memory(rows: list[dict], result: dict) -> dict | None:
    """The run's measured memory per phase (bytes), over all its parts: a resumed run is one run, so its peak
    is the largest of every process's (result.json's `earlier_memory`, carried over by each resume), this
    process's `memory` once it has ended, and every progress line's figures so far (`merge_memory`); runs
    from before phases were recorded: the largest `peak_memory_bytes`, with no phase. None when nothing was
    measured yet."""
    parts = [result.get("earlier_memory"), result.get("memory")]
    parts += [{"phase_peak_bytes": r["phase_peak_bytes"], "memory_kind": r.get("memory_kind")}
              for r in rows if r.get("phase_peak_bytes")]
    merged = merge_memory(parts)
    if merged is not None:
        return merged
    peak = max([r.get("peak_memory_bytes") or 0 for r in rows] + [result.get("peak_memory_bytes") or 0])
    return {"peak_bytes": peak} if peak else None


def merge_memory(parts: list[dict | None]) -> dict | None:
    """One memory record (`pipeline.training.peak_memory.PeakMemory.to_dict`'s keys) of several measured
    parts of one run (the processes before and after a Resume, progress lines): each phase's largest peak in
    bytes, the phase that set the largest, its `exact` and `details` from the part that measured it, the other
    keys from the latest part. None when no part measured a phase."""
    parts = [part for part in parts if part and part.get("phase_peak_bytes")]
    if not parts:
        return None
    merged = dict(parts[-1])
    peaks: dict[str, int] = {}
    exact: dict[str, Any] = {}
    details: dict[str, Any] = {}
    for part in parts:
        for phase, value in part["phase_peak_bytes"].items():
            if value and value >= peaks.get(phase, 0):
                peaks[phase] = value
                if phase in (part.get("exact") or {}):
                    exact[phase] = part["exact"][phase]
                if phase in (part.get("details") or {}):
                    details[phase] = part["details"][phase]
    if not peaks:
        return None
    peak_phase = max(peaks, key=peaks.get)
    merged.update(phase_peak_bytes=peaks, peak_phase=peak_phase, peak_bytes=peaks[peak_phase])
    if exact:
        merged["exact"] = exact
    if details:
        merged["details"] = details
    return merged


def _run_estimate(ws: Workspace, run_name: str, result: dict, estimates: dict | None) -> dict | None:
    """The memory estimate for a run's settings on the device it runs on: the one the trainer wrote into
    result.json when it started (`memory_estimate`), else (runs from before it did), with an `estimates`
    cache, computed once per run (`pipeline.memory.run_compare.run_estimate`) and kept in it."""
    if result.get("memory_estimate"):
        return result["memory_estimate"]
    if estimates is None:
        return None
    if run_name in estimates:
        return estimates[run_name]
    device = result.get("device")
    if device not in ("cpu", "cuda", "mps"):
        return None  # not known until the trainer has resolved `auto`
    from pipeline.config import TrainConfig  # noqa: PLC0415
    from pipeline.errors import PipelineError  # noqa: PLC0415
    from pipeline.memory.run_compare import run_estimate  # noqa: PLC0415

    try:
        config = TrainConfig.from_dict(run_settings(ws, run_name))
    except PipelineError:
        return None
    estimates[run_name] = run_estimate(ws, config, device, on_error=lambda error: None)
    return estimates[run_name]


def _tail(path: Path, lines: int) -> str:
    """The last `lines` lines of a text file ('' when missing); reads at most the last 64 KiB."""
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - 65536))
            text = handle.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


@dataclass(frozen=True)
class RunReading:
    """One read of a run folder (`read_run`): what the Train tab, `run_status`, the CLI and the tests show.

    Times are unix seconds, durations seconds, memory bytes."""

    run: str
    run_dir: Path
    state: str
    """One of `RUN_STATES`."""
    alive: bool
    """The training process runs (`pid_alive`)."""
    pid: int | None
    """pid.json's (started by the app), else the pid a running trainer wrote into result.json."""
    reason: str | None
    """Why it ended as it did (result.json's `reason`, or why a process that ended without one failed)."""
    stop_requested_at: float | None
    """When STOP was written; None: no STOP in the folder."""
    rows: list[dict]
    """progress.jsonl's lines (a torn last line skipped): training steps, evaluations, --keep-best checks."""
    result: dict | None
    """result.json, or None before the trainer wrote it."""
    step: int | None
    """The last logged training step (else result.json's `steps`)."""
    max_steps: int | None
    elapsed_s: float | None
    """The run's clock (`run_clock`): never goes back, counts every process that trained the run, loading included."""
    loading_s: float | None
    """Seconds this process has spent loading before its first step; None once it has logged one."""
    eta_s: float | None
    """The trainer's estimate of the time left, while the process is alive; None otherwise."""
    log_tail: str
    """The last `log_lines` lines of train.log (else of process.log); '' when not asked for."""
    memory: dict | None
    """The measured peaks (`measured_memory`)."""
    estimate: dict | None
    """The estimate of the same phases for its settings (result.json's `memory_estimate`, see `read_run`)."""
    has_checkpoint: bool
    has_adapter: bool

    @property
    def stop_requested(self) -> bool:
        return self.stop_requested_at is not None

    @cached_property
    def settings(self) -> dict | None:
        """config.json as a full `TrainConfig.to_dict()`, or None when missing or unreadable. Read when
        first asked (the run being watched shows them; a list of runs does not ask)."""
        from pipeline.config import TrainConfig  # noqa: PLC0415
        from pipeline.errors import PipelineError  # noqa: PLC0415

        try:
            settings = _settings_in(self.run_dir)
            return TrainConfig.from_dict(settings).to_dict() if settings else None
        except (PipelineError, TypeError, ValueError):
            return None

    @property
    def last_progress(self) -> dict | None:
        """The last progress.jsonl line, or None."""
        return self.rows[-1] if self.rows else None

    def memory_comparison(self) -> dict:
        """The measured memory against the estimate, like with like (`pipeline.memory.run_compare.compare`)."""
        from pipeline.memory.run_compare import compare  # noqa: PLC0415

        return compare(self.memory, self.estimate)

    def status(self) -> dict[str, Any]:
        """The run's status as a dict (`pipeline.training.runs.run_status`): `{"run", "state", "alive", "pid",
        "reason", "stop_requested", "step", "max_steps", "last_progress", "progress_lines", "result",
        "run_dir" (str), "has_checkpoint", "has_adapter"}`."""
        return {
            "run": self.run, "state": self.state, "alive": self.alive, "pid": self.pid, "reason": self.reason,
            "stop_requested": self.stop_requested, "step": self.step, "max_steps": self.max_steps,
            "last_progress": self.last_progress, "progress_lines": len(self.rows), "result": self.result,
            "run_dir": str(self.run_dir), "has_checkpoint": self.has_checkpoint, "has_adapter": self.has_adapter,
        }


def read_run(workspace: Workspace | str | os.PathLike, run_name: str, *, log_lines: int = 0,
             estimates: dict | None = None, now: float | None = None) -> RunReading:
    """Read run `run_name`'s folder once: its state and process, progress, clock, log tail and memory.

    Args:
        log_lines: how many of the log's last lines to read into `log_tail` (0: none).
        estimates: a dict the caller keeps between reads (run name -> estimate): a run whose result.json
            has no `memory_estimate` (runs from before the trainer wrote one) is estimated once
            (`pipeline.memory.run_compare.run_estimate`, when its device is known) and kept there.
            None: such a run shows no estimate, and nothing is computed.
        now: the time of the read in unix seconds (default: now), for the clock.

    Returns:
        a `RunReading`; a folder that does not exist reads as `not_started`.

    Raises:
        ConfigError: `run_name` is not a usable run name.
    """
    ws = as_workspace(workspace)
    run_dir = ws.run_dir(run_name)
    result = read_json(run_dir / RUN_FILES["result"])
    running_pid = result.get("pid") if result and result.get("status") == "running" else None
    process = TRAINING_RUN.read(run_dir, fallback_pid=running_pid)
    rows = read_jsonl(run_dir / RUN_FILES["progress"])
    reason = result.get("reason") if result else None
    if process.alive:
        state = "stopping" if process.stop_requested else "running"
    elif result and result.get("status") in ("completed", "stopped", "failed"):
        state = result["status"]
    elif result or process.pid:
        state = "failed"
        reason = ended_without_result(
            run_dir, "The training process ended without writing its result (it was killed, or the machine ran out of memory).")
    else:
        state = "not_started"
    ended = result or {}
    train_rows = [row for row in rows if row.get("kind", "train") == "train"]
    last = rows[-1] if rows else {}
    max_steps = last.get("max_steps") or ended.get("max_steps")
    elapsed, loading = run_clock(
        rows, _clock_start(ended, process.started_at), process.alive, time.time() if now is None else now,
        max_steps=max_steps, stop_requested_at=process.stop_requested_at,
        failed_at=ended.get("finished_at") if state == "failed" else None,
        ended_at=ended.get("finished_at") if state in ("completed", "stopped") else None)
    log_tail = ((_tail(run_dir / RUN_FILES["log"], log_lines) or _tail(run_dir / RUN_FILES["process_log"], log_lines))
                if log_lines > 0 else "")
    return RunReading(
        run=run_name, run_dir=run_dir, state=state, alive=process.alive, pid=process.pid, reason=reason,
        stop_requested_at=process.stop_requested_at, rows=rows, result=result,
        step=train_rows[-1]["step"] if train_rows else ended.get("steps"), max_steps=max_steps,
        elapsed_s=elapsed, loading_s=loading, eta_s=last.get("eta_s") if process.alive else None,
        log_tail=log_tail, memory=measured_memory(rows, ended),
        estimate=_run_estimate(ws, run_name, ended, estimates),
        has_checkpoint=has_checkpoint(run_dir), has_adapter=has_adapter(run_dir),
    )
