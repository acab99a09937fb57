"""A training run's measured memory against the estimate for its settings, like with like.

The trainer records the peak of every phase of the run (`pipeline.training.peak_memory.PhaseMemory`:
load, preflight, step, eval, save, resume) and, when it starts, the estimate of the same phases for
the same settings, dataset and device (`run_estimate`, written into result.json as
`memory_estimate`). `compare` puts the two side by side: the whole run's peak against the
estimate's whole-run peak, each naming the phase that set it, and the run's training steps (the largest
of them) against the estimate of the run's steps (`STEPS_LABEL`). The Train tab and `python -m pipeline train`'s summary both print `comparison_text`, so they
cannot disagree. Torch-free (the app imports it).
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

from pipeline.errors import PipelineError
from pipeline.units import format_gib, gib_difference


STEPS_LABEL = "The training steps (the largest of the run)"
"""What the measured `step` phase is: the peak over all the run's optimizer steps (`PhaseMemory` keeps the
largest), so it is compared with the estimate of the run's step phase (`run_phases["step"]`), never with
one step alone (`step_bytes`, the Memory tab's "One training step alone")."""


def one_step_words(step_bytes: int) -> str:
    """Why the Memory tab's "One training step alone" (`step_bytes`) is not the figure the run's steps are
    compared with: one step on the longest batch, without what the run keeps from step to step."""
    return (f"One training step alone (the Memory tab's figure) is estimated at {format_gib(step_bytes)}; over a run, "
            "what stays from step to step (kernel caches for every row length) comes on top, so the run's steps are "
            "compared with the estimate for all of them.")


def run_estimate(workspace, config, device: str, on_error: Callable[[PipelineError], Any] | None = None,
                 dataset_dir=None, calibrated: bool = True) -> dict | None:
    """The estimate for a run's settings on `device` (cpu, cuda or mps) with the lengths of the
    dataset built in `workspace` (or in `dataset_dir`, `train --dataset`): `{"total_bytes", "run_peak_phase", "run_phases", "step_bytes",
    "device", "calibration", "calibration_text", "device_parts", "compute_dtype", "compute_dtype_reason"}` (bytes; `run_phases` includes the runtime
    overhead). The figures use this machine's calibration when it has one (`pipeline.calibration`;
    `calibrated` False: the constants, as an uncalibrated machine would);
    `device_parts` (phase -> structural / overhead / retention / spread / kernel_cache bytes of the
    uncalibrated estimate) is what `pipeline.calibration.record_run` stores beside the measured phases.

    Raises what `pipeline.memory.phases.estimate_memory` raises (`PipelineError` subclasses, e.g. a
    model folder without a readable config.json), unless `on_error` is given: then it is called
    with the error and None is returned (the trainer logs it and trains without an estimate)."""
    from pipeline.memory.inputs import length_stats_from_workspace  # noqa: PLC0415
    from pipeline.memory.phases import estimate_memory  # noqa: PLC0415
    from pipeline.model.catalog import load_model_config  # noqa: PLC0415

    from pipeline.calibration.precision import choose_compute_dtype  # noqa: PLC0415
    from pipeline.calibration.this_machine import calibration_summary, calibration_text, load_calibration  # noqa: PLC0415
    from pipeline.calibration.fit import device_parts  # noqa: PLC0415

    try:
        lengths = length_stats_from_workspace(workspace, config.max_length, dataset_dir)
        model_config = load_model_config(config.model)
        plain = estimate_memory(model_config, config, lengths, device)
        calibration = load_calibration(device) if calibrated else None
        est = estimate_memory(model_config, config, lengths, device, calibration=calibration) if calibration else plain
        dtype, why = choose_compute_dtype(device)
    except PipelineError as error:
        if on_error is None:
            raise
        on_error(error)
        return None
    return {"total_bytes": est.total_bytes, "run_peak_phase": est.run_peak_phase, "run_phases": est.run_phases,
            "step_bytes": est.step_bytes, "device": device, "calibration": calibration_summary(calibration),
            "calibration_text": calibration_text(calibration, est.components, est.run_members[est.run_peak_phase], est.total_bytes, est.device),
            "device_parts": {phase: device_parts(plain.components, names) for phase, names in plain.run_members.items() if names},
            "compute_dtype": dtype, "compute_dtype_reason": why}


def compare(memory: Mapping[str, Any] | None, estimate: Mapping[str, Any] | None) -> dict:
    """Measured against estimated, like with like.

    Args:
        memory: the run's measured `memory` (`PhaseMemory.to_dict`: `phase_peak_bytes`,
            `peak_phase`, `peak_bytes`, `method`), from result.json or the last progress.jsonl line.
        estimate: `run_estimate`'s dict.
    Returns:
        `{"measured_bytes", "measured_phase", "estimate_bytes", "estimate_phase", "percent",
        "step_measured_bytes" (the peak of all the run's steps), "step_estimate_bytes" (the estimate of the run's step
        phase), "step_percent", "one_step_estimate_bytes" (one step alone, `step_bytes`), "phases": {phase:
        {"measured", "estimate"}}, "method"}`; a figure is None where a side is missing, and
        `percent` is measured as a percentage of the estimate.
    """
    memory = memory or {}
    estimate = estimate or {}
    measured_phases = dict(memory.get("phase_peak_bytes") or {})
    estimate_phases = dict(estimate.get("run_phases") or {})
    measured = memory.get("peak_bytes") or (max(measured_phases.values()) if measured_phases else None)
    total = estimate.get("total_bytes")
    step_measured = measured_phases.get("step")
    step_estimate = estimate_phases.get("step") or estimate.get("step_bytes")

    def percent(a, b):
        return round(100.0 * a / b, 1) if a and b else None

    return {
        "measured_bytes": measured,
        "measured_phase": memory.get("peak_phase"),
        "estimate_bytes": total,
        "estimate_phase": estimate.get("run_peak_phase"),
        "percent": percent(measured, total),
        "step_measured_bytes": step_measured,
        "step_estimate_bytes": step_estimate,
        "one_step_estimate_bytes": estimate.get("step_bytes"),
        "step_percent": percent(step_measured, step_estimate),
        "phases": {p: {"measured": measured_phases.get(p), "estimate": estimate_phases.get(p)}
                   for p in list(estimate_phases) + [p for p in measured_phases if p not in estimate_phases]},
        "method": memory.get("method"),
        "calibration_text": estimate.get("calibration_text"),
        "compute_dtype": estimate.get("compute_dtype"),
        "compute_dtype_reason": estimate.get("compute_dtype_reason"),
    }


def comparison_text(comparison: Mapping[str, Any], *, running: bool = False, markdown: bool = False) -> str:
    """Two lines: the whole run's peak against the estimate's whole-run peak, each with the phase
    that set it, then the run's training steps (the largest of them) against the estimate for them. `running`: the run has not finished, so
    the measured peak covers only the phases reached so far. Every figure in GiB (`format_gib`: one unit for
    figures compared with one another); the estimate is the one made when the run started (`run_estimate`),
    which the Memory tab's answer of today may differ from as this computer's calibration grows."""
    b = (lambda s: f"**{s}**") if markdown else (lambda s: s)
    measured, total = comparison.get("measured_bytes"), comparison.get("estimate_bytes")
    if not measured and not total:
        return ""
    label = "Peak memory so far" if running else "Peak memory of the run"
    text = f"{b(label + ':')} {format_gib(measured) if measured else 'not measured yet'}"
    if measured and comparison.get("measured_phase"):
        text += f" (set by {comparison['measured_phase']})"
    if total:
        text += f" · {b('estimate for the whole run when it started:')} {format_gib(total)}"
        if comparison.get("estimate_phase"):
            text += f" (peak in {comparison['estimate_phase']})"
        if measured and gib_difference(measured, total):
            text += f"; measured: {gib_difference(measured, total)}"
    if comparison.get("calibration_text"):
        text += f" ({comparison['calibration_text']})"
    lines = [text]
    step_measured, step_estimate = comparison.get("step_measured_bytes"), comparison.get("step_estimate_bytes")
    if step_measured or step_estimate:
        step = f"{b(STEPS_LABEL + ':')} {format_gib(step_measured) if step_measured else 'not reached yet'}"
        if step_estimate:
            step += f" against {format_gib(step_estimate)} estimated for them when the run started"
            if step_measured and gib_difference(step_measured, step_estimate):
                step += f" ({gib_difference(step_measured, step_estimate)})"
        lines.append(step)
        one_step = comparison.get("one_step_estimate_bytes")
        if step_measured and one_step and step_estimate and format_gib(one_step) != format_gib(step_estimate):
            lines.append(one_step_words(one_step))
    if comparison.get("compute_dtype"):
        lines.append(f"{b('Precision:')} {comparison['compute_dtype']} ({comparison.get('compute_dtype_reason') or ''})")
    return ("  \n" if markdown else "\n").join(lines)
