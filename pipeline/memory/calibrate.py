"""Calibrate this machine: measure what its device adds and store it as evidence for every estimate.

`calibrate(device)` is what the Memory tab's "Calibrate this machine" and `python -m pipeline
estimate --measure` run: (1) the timed precision check (`pipeline.calibration.speed`, a child
process: bf16 against fp32), which decides the compute dtype every later run and estimate use;
(2) the memory probe (`pipeline.memory.measure.measure_peak`: load plus one real optimizer step on
the worst-case batch, a child process) on the offline stand-in (the tiny random Gemma 3n,
`pipeline.model.tiny_model`, written once into the calibration folder) at `CALIBRATION_PROBES`'
two settings, or on the user's own model and dataset when given. Each probe's measured peak is
stored beside the uncalibrated estimate's structural and device parts (`measurement_record`), with
its step time. Time cost, measured 2026-12-01 on the 2-core development machine (AMD EPYC, AVX2,
fp32): 2.4 minutes of CPU time in all (the precision check ~4 s of it, the rest the two probes,
each a fresh process importing torch, loading the stand-in and running 2 steps plus 3 new shapes);
17.5 minutes of wall time while eight other jobs shared the two cores; later, with less load,
`tests/test_calibration.py::test_after_calibrating_here_a_whole_run_is_within_5_percent`
(calibration plus a 6-step tiny run) took 114 s. Expect 1-3 minutes on a 2-core machine.

The evidence is read back, fitted and applied by `pipeline.calibration` (`load_calibration`), for
every estimate alike.

Torch-free at import (the app imports it); the torch work runs in child processes.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from pathlib import Path
from typing import Callable, Iterator

from pipeline import jobs
from pipeline.calibration.store import calibration_dir, calibration_path, device_key, entry_for, now_iso, update_entry
from pipeline.calibration.this_machine import calibration_summary, load_calibration, measurement_record, workspace_folder
from pipeline.errors import TrainingError
from pipeline.fileio import atomic_write_json, hold_point

CALIBRATION_PROBES = ({"seq_len": 256, "quantization": "none", "clip_s": 5.0},
                      {"seq_len": 1024, "quantization": "4bit", "clip_s": 10.0})
"""The stand-in's two probe settings: short bf16/fp32 weights and a longer 4-bit row (the retained heap
grows with the tokens, so the two separate the overhead from it)."""
SPEED_TIMEOUT_S = 300
"""Seconds the precision check may take before its process is killed (it takes ~4 s on a 2-core CPU)."""
NEW_SHAPES = 3
"""Batches of new shapes each stand-in probe runs after its step, to measure the kernels cached per shape."""


def _speed_check(device: str) -> dict:
    """The precision check's result (`python -m pipeline.calibration.speed DEVICE`'s last JSON line), run as a
    blocking child (`pipeline.jobs.run_child`). Raises `TrainingError` when it runs past `SPEED_TIMEOUT_S`
    or prints no result (with its last output)."""
    cmd = [sys.executable, "-m", "pipeline.calibration.speed", device]
    try:
        proc = jobs.run_child(cmd, timeout_s=SPEED_TIMEOUT_S)
    except jobs.ChildTimedOut:
        raise TrainingError(f"The precision check took longer than {SPEED_TIMEOUT_S} s; the machine is too busy to "
                            "calibrate now. Close other work and calibrate again.") from None
    for line in reversed(proc.stdout.strip().splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    raise TrainingError(f"The precision check exited with code {proc.returncode}:\n{(proc.stderr or proc.stdout)[-2000:]}")


def stand_in_model() -> Path:
    """The tiny random Gemma 3n the calibration measures, written once into the calibration folder."""
    from pipeline.model.tiny_gemma3n import make_tiny_gemma3n  # noqa: PLC0415 - torch, only when calibrating

    out = calibration_dir() / "stand-in"
    if not (out / "config.json").exists():
        make_tiny_gemma3n(out)
    return out


CALIBRATION_PARTS = ("speed", "stand-in", "yours")
"""The parts a calibration announces to its `progress` (`calibrate`): the precision check, a probe of the
offline stand-in, a probe of the person's own settings."""


def calibrate(device: str = "auto", *, model: str | None = None, workspace=None, config=None, lengths=None,
              speed_check: bool = True, progress: Callable[[dict], None] | None = None, asked_from=None) -> dict:
    """Calibrate this machine's `device`: the precision check, then probes (see the module docstring).

    Args:
        device: auto | cpu | cuda | mps (auto: `pipeline.memory.budget.auto_device`).
        model, workspace, config, lengths: measure this model with this `TrainConfig` (one probe: the
            workspace's worst-case batch when its dataset is built, else a synthetic batch of `lengths`)
            instead of the stand-in's `CALIBRATION_PROBES`.
        speed_check: run the precision check first (False: keep the stored one).
        asked_from: the project folder (workspace) the calibration was asked from, recorded with its evidence
            (default: `workspace`); the calibration is this computer's, shared by its project folders.
        progress: called as each part and each probe's phase begins with `{"part"` (one of
            `CALIBRATION_PARTS`), `"index"`, `"of"` (this part's place among this call's parts, from 1),
            `"phase"` (None as a part begins, then the probe's `load`, `batch`, `step`, `shapes`:
            `pipeline.training.probe`), `"text"` (what is done, in words, for a log)`}`.
    Returns:
        `{"calibration": calibration_summary, "calibration_text", "speed", "probes": [{"settings",
        "measured_bytes", "estimate_bytes" (uncalibrated step), "step_seconds", "measured" (the probe's
        dict)}], "path"}`.
    Raises:
        TrainingError: a child process failed or ran out of memory; ConfigError: bad settings.
    Time: ~2.4 minutes of CPU time on the stand-in (1-3 minutes on a 2-core CPU; module docstring).
    """
    from pipeline.config import TrainConfig  # noqa: PLC0415
    from pipeline.memory.budget import auto_device  # noqa: PLC0415
    from pipeline.memory.inputs import LengthStats, length_stats_from_workspace  # noqa: PLC0415
    from pipeline.memory.measure import measure_peak  # noqa: PLC0415
    from pipeline.memory.phases import STEP_MOMENTS, estimate_memory  # noqa: PLC0415
    from pipeline.memory.phases import PHASE_MEMBERS, static_prefixes  # noqa: PLC0415
    from pipeline.model.catalog import load_model_config  # noqa: PLC0415
    from pipeline.calibration.this_machine import record_load_time  # noqa: PLC0415

    device = auto_device() if device == "auto" else device
    timed = speed_check or entry_for(device) is None
    parts = int(timed) + (1 if model is not None else len(CALIBRATION_PROBES))

    def say(part: str, index: int, text: str, phase: str | None = None) -> None:
        if progress is not None:
            progress({"part": part, "index": index, "of": parts, "phase": phase, "text": text})
        hold_point(f"calibrate:{part}")

    if timed:
        say("speed", 1, "Timing bf16 against fp32 on this machine...")
        speed = _speed_check(device)
        speed["date"] = now_iso()
        key = device_key(device, speed.get("device_name"), speed.get("total_memory_bytes"))
        update_entry(key, lambda entry: entry.update(speed=speed))
    else:
        entry = entry_for(device)
        speed, key = entry.get("speed") or {}, entry["key"]
    if model is not None:
        base = config or TrainConfig(model=model, device=device)
        if lengths is None:
            lengths = length_stats_from_workspace(workspace, base.max_length) if workspace is not None else LengthStats(base.max_length, 30.0)
        runs = [(base.replace(model=str(model), device=device), lengths, workspace)]
    else:
        say("stand-in", int(timed) + 1, "Writing the offline stand-in model (once)...")
        stand_in = str(stand_in_model())
        runs = [(TrainConfig(model=stand_in, device=device, quantization=p["quantization"], max_length=max(512, p["seq_len"])),
                 LengthStats(p["seq_len"], p["clip_s"], longest_answer_tokens=64), None) for p in CALIBRATION_PROBES]
    probes, records = [], []
    folder = workspace_folder(asked_from if asked_from is not None else workspace)  # where it was asked from
    for i, (cfg, lengths, ws) in enumerate(runs, 1):
        part, index = ("yours" if model is not None else "stand-in"), int(timed) + i
        text = f"Measuring one training step ({i} of {len(runs)}): {cfg.quantization}, {lengths.kept_longest(cfg.max_length)} tokens..."
        say(part, index, text)
        measured = measure_peak(cfg.model, cfg, lengths, device, workspace=ws, new_shapes=0 if ws else NEW_SHAPES,
                                on_phase=lambda phase, part=part, index=index, text=text: say(part, index, text, phase))
        est = estimate_memory(load_model_config(cfg.model), cfg, lengths, device)  # uncalibrated: the structural part
        moment = max(STEP_MOMENTS, key=lambda m: est.phases[m])
        members = [k for k in est.components if k.startswith(static_prefixes(moment))] + list(PHASE_MEMBERS[moment]) + ["runtime_overhead"]
        seconds = measured.get("step_seconds") or measured.get("seconds")
        records.append(measurement_record("probe", measured["peak_bytes"], est.components, members, model=cfg.model,
                                          quantization=cfg.quantization, seq_len=est.seq_len,
                                          baseline_rss_bytes=measured.get("baseline_rss_bytes"), workspace=folder))
        if measured.get("new_shapes"):  # the kernels cached for new batch shapes, against the constants
            from pipeline.calibration.store import device_defaults  # noqa: PLC0415

            sizes = device_defaults()
            per_shape = sizes.cpu_kernel_cache_bytes_per_row_length + (sizes.cpu_kernel_cache_bytes_per_clip_length if lengths.longest_clip_s else 0)
            records.append({"kind": "kernel_cache", "date": now_iso(), "measured_bytes": int(measured["kernel_cache_growth_bytes"]),
                            "structural": 0, "overhead": 0, "retention": 0, "kernel_cache": per_shape * measured["new_shapes"],
                            "model": cfg.model, "quantization": cfg.quantization, "workspace": folder})
        probes.append({"settings": cfg.to_dict(), "measured_bytes": measured["peak_bytes"], "estimate_bytes": est.step_bytes,
                       "step_seconds": seconds, "measured": measured})
        if seconds:  # a probe's step, kept apart from runs' (`pipeline.calibration.this_machine.TIMING_SOURCES`)
            timing = {"date": now_iso(), "model": cfg.model, "quantization": cfg.quantization, "tokens": est.seq_len * cfg.batch_size,
                      "seconds_per_micro_batch": float(seconds), "compute_dtype": speed.get("compute_dtype"),
                      "low_memory_heap": bool(cfg.low_memory_heap), "source": "probe", "workspace": folder}
            update_entry(key, lambda entry, t=timing: entry.setdefault("step_seconds", []).append(t))
        if measured.get("startup_seconds") and ws is not None:  # a run's loading, as this probe went through it
            record_load_time(device, cfg.model, cfg.quantization, measured["startup_seconds"], cfg.low_memory_heap,
                             source="probe", workspace=folder)
    update_entry(key, lambda entry: entry["measurements"].extend(records))
    calibration = load_calibration(device)
    return {"calibration": calibration_summary(calibration), "calibration_text": calibration.text() if calibration else "",
            "speed": speed, "probes": probes, "path": str(calibration_path())}


HOLDER_FILE = "calibrating.json"
"""Beside the per-user calibration lock: who calibrates ({"pid", "started_at", "command"})."""


def _lock_path() -> Path:
    """The per-user calibration lock: `.calibrating.lock` in the calibration folder (`calibration_dir`)."""
    return calibration_dir() / ".calibrating.lock"


def calibration_holder() -> dict | None:
    """The process calibrating this computer now (`{"pid", "started_at", "command"}`), or None when none is:
    the per-user lock is free, or its recorded holder is no longer alive."""
    holder = jobs.read_json(_lock_path().with_name(HOLDER_FILE))
    if not isinstance(holder, dict) or not jobs.alive(holder.get("pid")):
        return None
    from filelock import FileLock, Timeout  # noqa: PLC0415

    probe = FileLock(str(_lock_path()), is_singleton=False)
    try:
        probe.acquire(timeout=0)
    except Timeout:
        return holder
    probe.release()
    return None


@contextlib.contextmanager
def hold_calibration() -> Iterator[None]:
    """Hold the per-user calibration lock while calibrating (a `filelock` lock, dropped when its holder dies),
    recording this process as its holder.

    Raises:
        TrainingError: another process calibrates this computer now (its pid is named): one at a time, since
            two would measure each other's memory and write the same calibration file.
    """
    from filelock import FileLock, Timeout  # noqa: PLC0415

    path = _lock_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = FileLock(str(path), is_singleton=False)
    try:
        lock.acquire(timeout=0)
    except Timeout:
        holder = jobs.read_json(path.with_name(HOLDER_FILE)) or {}
        raise TrainingError(f"This computer is being calibrated already (process {holder.get('pid', '?')}); one "
                            "calibration at a time: wait for it to end, then calibrate again if needed.") from None
    try:
        atomic_write_json(path.with_name(HOLDER_FILE), {"pid": os.getpid(), "started_at": time.time(),
                                                        "command": list(sys.argv)})
        yield
    finally:
        path.with_name(HOLDER_FILE).unlink(missing_ok=True)
        lock.release()
