"""This machine's calibration: read it back for every estimate, add every finished run's evidence,
and forecast a run's time from the step and loading times measured here.

Calibrating (the precision check and the memory probes that write the evidence) is
`pipeline.memory.calibrate.calibrate`. Every completed or stopped run adds its measured phases as
more evidence (`record_run`, called by the trainer). `load_calibration(device)` fits the stored
evidence (`pipeline.calibration.fit`) for this machine's key (`pipeline.calibration.store`); the
estimate (`pipeline.memory.report`, `pipeline.memory.run_compare`) uses it and says which it is
(`calibration_text`).

Torch-free at import (the app imports it).
"""

from __future__ import annotations

import math

from pipeline.calibration.fit import DeviceCalibration, device_parts, fit_entry, uncalibrated_percent, uncalibrated_text
from pipeline.calibration.precision import choose_compute_dtype
from pipeline.calibration.store import calibration_path, device_key, entry_for, now_iso, update_entry

def load_calibration(device: str) -> DeviceCalibration | None:
    """This machine's fitted calibration for `device` with today's software, or None (never calibrated,
    or calibrated with another torch / transformers / bitsandbytes). Raises `ConfigError` for an
    unreadable calibration file (`pipeline.calibration.store.load_store`)."""
    entry = entry_for(device)
    return fit_entry(entry) if entry else None


def calibration_summary(calibration: DeviceCalibration | None) -> dict | None:
    """What `estimate --json` reports as `calibration`: None, or `{date, device_key, n_measurements,
    runtime_overhead_bytes, retention_scale, kernel_cache_scale, spread_scale, max_error_percent, compute_dtype,
    path}`."""
    if calibration is None:
        return None
    keep = ("date", "device_key", "n_measurements", "runtime_overhead_bytes", "retention_scale", "kernel_cache_scale",
            "spread_scale", "max_error_percent", "compute_dtype")
    out = {k: v for k, v in calibration.to_dict().items() if k in keep}
    out["path"] = str(calibration_path())
    return out


def calibration_text(calibration: DeviceCalibration | None, components: dict, members: list[str], total_bytes: int,
                     device: str = "cpu") -> str:
    """The sentence every estimate carries: "calibrated on this machine on DATE (N measurements)" or
    "not calibrated: the device's share is assumed, expect up to ±N %" (`uncalibrated_percent` of the
    estimate's peak phase, `members`, on `device`)."""
    if calibration is not None:
        return calibration.text()
    return uncalibrated_text(uncalibrated_percent(components, members, total_bytes, device))


def compute_dtype_for(device: str) -> tuple[str, str]:
    """(compute dtype, why) for `device` (`pipeline.calibration.precision.choose_compute_dtype`)."""
    return choose_compute_dtype(device)


# --------------------------------------------------------------------------------------------------
# Evidence


def workspace_folder(workspace) -> str | None:
    """The project folder (a workspace, its path or `Workspace`) as evidence records it: its absolute path;
    None for none."""
    if workspace is None:
        return None
    from pathlib import Path  # noqa: PLC0415

    from pipeline.workspace import Workspace  # noqa: PLC0415

    return str(Path(workspace.root if isinstance(workspace, Workspace) else workspace).expanduser().resolve())


def evidence_places(folders: list, workspace) -> dict:
    """Where evidence (`folders`: each record's project folder, None where not recorded) was measured, seen from
    `workspace`: `{"here": in this project folder, "elsewhere": in another project folder of this computer,
    "unknown": not recorded (older records, the stand-in's probes)}`."""
    here = workspace_folder(workspace)
    counts = {"here": 0, "elsewhere": 0, "unknown": 0}
    for folder in folders or []:
        counts["unknown" if not folder else "here" if folder == here else "elsewhere"] += 1
    return counts


def measurement_record(kind: str, measured_bytes: int, components: dict, members: list[str], **extra) -> dict:
    """One piece of evidence: the measured peak next to the uncalibrated estimate's parts for the same
    phase (`structural`, `overhead`, `retention`, `spread`, `kernel_cache`, bytes; `pipeline.calibration.fit.device_parts`)."""
    return {"kind": kind, "date": now_iso(), "measured_bytes": int(measured_bytes), **device_parts(components, members), **extra}


def record_run(result: dict, device_name: str | None = None, total_memory_bytes: int | None = None) -> int:
    """Add a finished (completed or stopped) run's measured phases to this machine's calibration: each
    phase measured exactly (`result["memory"]["exact"]`) beside `result["memory_estimate"]["device_parts"]`
    (`pipeline.memory.run_compare.run_estimate`). Returns the records added (0 when the run has no
    comparable figures: failed, no estimate, or measured on another device)."""
    memory, estimate = result.get("memory") or {}, result.get("memory_estimate") or {}
    parts = estimate.get("device_parts") or {}
    device = estimate.get("device")
    if result.get("status") not in ("completed", "stopped") or not parts or device != result.get("device"):
        return 0
    exact = memory.get("exact") or {}
    records = []
    for phase, measured in (memory.get("phase_peak_bytes") or {}).items():
        if phase in parts and measured and exact.get(phase, False):
            records.append({"kind": "run", "date": now_iso(), "phase": phase, "measured_bytes": int(measured),
                            "run": result.get("run"), "model": result.get("model"), "workspace": result.get("workspace"),
                            **parts[phase]})
    if not records:
        return 0
    key = device_key(device, device_name, total_memory_bytes)
    update_entry(key, lambda entry: entry["measurements"].extend(records))
    return len(records)


# --------------------------------------------------------------------------------------------------
# Time


TIMING_SOURCES = ("run", "probe")
"""Where a stored time was measured: a finished run's steps (the median of many warm steps) or the
calibration's probe (one step on the longest batch). A run's is the better evidence: when both exist, only
the runs' are read."""


def _matching(records: list[dict], model: str, quantization: str, low_memory_heap: bool, device: str) -> list[dict]:
    """The stored time records of `model` at `quantization` in the current compute dtype on `device`, with
    the low-memory heap as asked, from runs when any run was recorded, else from probes (a record from before
    `source` was stored counts as a run's); of the runs' step times, those on the wall clock (`clock`
    "wall", `STEP_CLOCK`) when there are any: older ones left out the batches' loading."""
    dtype = choose_compute_dtype(device)[0]
    same = [t for t in records if t.get("model") == str(model) and t.get("quantization") == quantization
            and t.get("compute_dtype") == dtype and bool(t.get("low_memory_heap", False)) == bool(low_memory_heap)]
    runs = [t for t in same if t.get("source", "run") == "run"]
    wall = [t for t in runs if t.get("clock") == STEP_CLOCK]
    return wall or runs or same


STEP_CLOCK = "wall"
"""How a run's step times are stored since 2026-12-03 (`pipeline.training.step_timer`): from one step's end to
the next, the batches' loading included, per micro-batch each step ran. Records without it timed only from
`on_step_begin` (the stand-in's read 0.19 s a micro-batch where its steps took 0.33 s)."""


def expected_step_seconds(model: str, quantization: str, tokens: int, device: str,
                          low_memory_heap: bool = False) -> dict | None:
    """Seconds per optimizer micro-batch of `tokens` tokens (batch x padded row) for `model` at
    `quantization`, from the step times measured on this machine (runs of the same model and
    quantization in the current compute dtype, else the calibration's probes of them; with the
    low-memory heap or without it as asked: its steps are about twice as long, `pipeline.host.free_heap`):
    the median of their seconds per token, times `tokens` (a step's matmuls are linear in them at these lengths).
    The median, not the measurement with the nearest token count: one run on a busy computer (its steps
    twice as long) was the whole forecast when its token count was nearest, and "varying by up to ±N %"
    (`spread_percent`) is said around this median.

    Returns `{"seconds", "from_tokens", "from_seconds", "date", "source" ("run" | "probe"), "measurements"
    (how many comparable ones there are), "spread_percent" (the largest difference, in %, of one
    measurement's seconds per token from their median; None with one)}`, or None when nothing comparable
    was measured."""
    import statistics  # noqa: PLC0415

    entry = entry_for(device)
    timings = [t for t in _matching((entry or {}).get("step_seconds", []), model, quantization, low_memory_heap, device)
               if t.get("tokens") and t.get("seconds_per_micro_batch")]
    if not timings or tokens <= 0:
        return None
    best = min(timings, key=lambda t: abs(t["tokens"] - tokens))
    rates = [t["seconds_per_micro_batch"] / t["tokens"] for t in timings]
    middle = statistics.median(rates)
    spread = round(100 * max(abs(rate / middle - 1) for rate in rates)) if len(rates) > 1 and middle > 0 else None
    return {"seconds": middle * tokens, "from_tokens": best["tokens"],
            "from_seconds": best["seconds_per_micro_batch"], "date": best["date"],
            "source": best.get("source", "run"), "measurements": len(timings), "spread_percent": spread,
            "folders": [t.get("workspace") for t in timings]}


def expected_load_seconds(model: str, quantization: str, device: str, low_memory_heap: bool = False) -> dict | None:
    """Seconds from a run's start to its first training step on this machine (the process starting, the
    model loading, the preflight step on the longest batch): the median of those measured for `model` at
    `quantization` (runs first, else the calibration's probe of them; `_matching`). Returns `{"seconds",
    "source", "measurements", "date"}` (the latest's date), or None when none was measured."""
    import statistics  # noqa: PLC0415

    entry = entry_for(device)
    loads = [t for t in _matching((entry or {}).get("load_seconds", []), model, quantization, low_memory_heap, device)
             if t.get("seconds")]
    if not loads:
        return None
    return {"seconds": statistics.median(t["seconds"] for t in loads), "source": loads[-1].get("source", "run"),
            "measurements": len(loads), "date": loads[-1].get("date"), "folders": [t.get("workspace") for t in loads]}


def micro_batch_tokens(batch_size: int, row_tokens: list[int]) -> int:
    """The token measure step times are stored and forecast under: `batch_size` x the mean row's tokens
    (`row_tokens`: the token counts of the rows a run trains on), rounded; 0 for no rows."""
    return round(batch_size * sum(row_tokens) / len(row_tokens)) if row_tokens else 0


def run_micro_batches(first_step: int, last_step: int, per_epoch: int | None, grad_accum: int) -> int:
    """Micro-batches that optimizer steps `first_step` + 1 .. `last_step` run, counted as `transformers.Trainer`
    runs them: `grad_accum` per step, except the last step of each epoch, which runs what is left of the epoch's
    `per_epoch` micro-batches (6 rows in batches of 1 with 4 accumulated: steps of 4, 2, 4, 2, ...; counting 4
    for each made a 12-step forecast a third too long). `per_epoch` None (not known): `grad_accum` per step."""
    grad_accum = max(1, int(grad_accum))
    steps = max(0, int(last_step) - int(first_step))
    if not per_epoch or per_epoch <= 0:
        return steps * grad_accum
    steps_per_epoch = math.ceil(per_epoch / grad_accum)
    last = per_epoch - (steps_per_epoch - 1) * grad_accum
    return sum(last if step % steps_per_epoch == steps_per_epoch - 1 else grad_accum
               for step in range(int(first_step), int(first_step) + steps))


def expected_run_seconds(config, tokens: int, optimizer_steps: int, device: str, per_epoch: int | None = None) -> float | None:
    """Seconds the training steps of a run of `optimizer_steps` steps will take before it starts:
    `expected_step_seconds` (one micro-batch) x the micro-batches those steps run (`run_micro_batches`, with
    `per_epoch` micro-batches an epoch when known; loading is `expected_load_seconds`; evaluation and saving not
    counted); None when this machine has no comparable step time."""
    step = expected_step_seconds(config.model, config.quantization, tokens, device, config.low_memory_heap)
    return None if step is None else step["seconds"] * run_micro_batches(0, optimizer_steps, per_epoch, config.grad_accum)


def record_step_time(device: str, model: str, quantization: str, tokens: int, seconds_per_micro_batch: float,
                     low_memory_heap: bool = False, *, source: str = "run", workspace: str | None = None) -> None:
    """Store a step time measured on this machine (a run's median micro-batch time, or a probe's step:
    `source`, one of `TIMING_SOURCES`) for `expected_step_seconds`; `workspace`: the project folder it was measured in."""
    timing = {"date": now_iso(), "model": str(model), "quantization": quantization, "tokens": int(tokens),
              "seconds_per_micro_batch": float(seconds_per_micro_batch), "compute_dtype": choose_compute_dtype(device)[0],
              "low_memory_heap": bool(low_memory_heap), "source": source, "workspace": workspace}
    if source == "run":
        timing["clock"] = STEP_CLOCK
    update_entry(device_key(device), lambda entry: entry.setdefault("step_seconds", []).append(timing))


def record_load_time(device: str, model: str, quantization: str, seconds: float, low_memory_heap: bool = False, *,
                     source: str = "run", workspace: str | None = None) -> None:
    """Store the seconds a run (or the calibration's probe: `source`) took from its process's start to its
    first training step on this machine, for `expected_load_seconds`; `workspace`: the project folder it ran in."""
    timing = {"date": now_iso(), "model": str(model), "quantization": quantization, "seconds": float(seconds),
              "compute_dtype": choose_compute_dtype(device)[0], "low_memory_heap": bool(low_memory_heap),
              "source": source, "workspace": workspace}
    update_entry(device_key(device), lambda entry: entry.setdefault("load_seconds", []).append(timing))


def forecast_run(config, lengths: dict | None, device: str) -> dict:
    """What the next run will be on this machine, said before it starts.

    Args:
        config: the run's `TrainConfig`.
        lengths: the dataset build report's `length_stats` (`row_tokens`: the train rows' token counts),
            or None before a build.
        device: cpu | cuda | mps (what `--device auto` will pick).

    Returns:
        `{"compute_dtype", "compute_dtype_reason", "steps", "seconds", "step", "load_seconds", "load",
        "total_seconds"}`. `steps` counts optimizer steps the way `transformers.Trainer` does
        (micro-batches of `batch_size` rows, `grad_accum` per step, `epochs` passes, or `max_steps`) over
        the rows the run keeps (`max_length`); `seconds` = `expected_run_seconds` for the micro-batches those steps run
        (`run_micro_batches`), each of the mean kept row (the training steps; evaluation and saving not counted); `step` its
        `expected_step_seconds` dict; `load` = `expected_load_seconds`'s dict and `load_seconds` its
        seconds (from Start to the first step); `total_seconds` = loading + steps, the time from Start to
        the last step. None where the build or a comparable measurement is missing.
    """
    import math  # noqa: PLC0415

    dtype, why = choose_compute_dtype(device)
    load = expected_load_seconds(config.model, config.quantization, device, config.low_memory_heap)
    out = {"compute_dtype": dtype, "compute_dtype_reason": why, "steps": None, "seconds": None, "step": None,
           "load": load, "load_seconds": load["seconds"] if load else None, "total_seconds": None}
    rows = [t for t in (lengths or {}).get("row_tokens") or [] if t <= config.max_length]
    if not rows:
        return out
    per_epoch = math.ceil(math.ceil(len(rows) / config.batch_size) / config.grad_accum)
    out["steps"] = config.max_steps if config.max_steps > 0 else max(1, math.ceil(per_epoch * config.epochs))
    tokens = micro_batch_tokens(config.batch_size, rows)
    out["step"] = expected_step_seconds(config.model, config.quantization, tokens, device, config.low_memory_heap)
    out["seconds"] = expected_run_seconds(config, tokens, out["steps"], device, math.ceil(len(rows) / config.batch_size))
    if out["seconds"] is not None and load is not None:
        out["total_seconds"] = load["seconds"] + out["seconds"]
    return out
