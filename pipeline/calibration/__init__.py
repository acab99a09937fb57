"""Calibration on the user's own machine: what its device adds to the memory estimate, and the
precision and step time it runs at.

One job per module:
  * `store.py`     where the calibration lives (`calibration_path`, per user, `TUTOR_CALIBRATION_DIR`
                   moves it) and its key (`device_key`: device kind and name, memory, CPU model,
                   torch / transformers / bitsandbytes versions); atomic writes; the default
                   calibration record shipped beside it (`device_defaults`, `device_defaults.json`:
                   the device terms before this machine is calibrated, each with its dated note).
  * `precision.py` the compute dtype per device (`choose_compute_dtype`: capability, timed check,
                   `TUTOR_COMPUTE_DTYPE`; `compute_dtype_name`, what the trainer and the estimate
                   both read), torch-free.
  * `speed.py`     the timed bf16-vs-fp32 matmul check (torch; a child process).
  * `fit.py`       evidence -> `DeviceCalibration` (runtime overhead, retained-heap and kernel-cache
                   scales); the uncalibrated uncertainty.
  * `this_machine.py` `record_run` (every finished run is evidence), `load_calibration`,
                   `calibration_text`, `expected_run_seconds` (the time a run will take, from step
                   times measured here).

Calibrating (probes on the stand-in, ~2.4 min of CPU time) is `pipeline.memory.calibrate`: it runs
the memory probe and compares with the estimate, so it stands above both.

Importing this package stays torch-free (the app imports it).
"""

from __future__ import annotations

from pipeline.calibration.this_machine import (
    calibration_summary,
    calibration_text,
    compute_dtype_for,
    expected_load_seconds,
    expected_run_seconds,
    expected_step_seconds,
    forecast_run,
    load_calibration,
    record_load_time,
    record_run,
    record_step_time,
)
from pipeline.calibration.fit import DeviceCalibration, fit_entry
from pipeline.calibration.precision import choose_compute_dtype
from pipeline.calibration.store import CALIBRATION_DIR_ENV, calibration_path, device_defaults, device_key

__all__ = [
    "CALIBRATION_DIR_ENV", "DeviceCalibration", "calibration_path", "calibration_summary", "calibration_text",
    "choose_compute_dtype", "compute_dtype_for", "device_defaults", "device_key", "expected_load_seconds", "expected_run_seconds", "expected_step_seconds", "fit_entry", "forecast_run",
    "load_calibration", "record_load_time", "record_run", "record_step_time",
]
