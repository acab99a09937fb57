"""What can this machine do? One table: every known model (Gemma 3n and Gemma 4, E2B and E4B;
`pipeline.model.catalog.KNOWN_MODELS`), each as a full fine-tune in bf16, LoRA in
bf16, LoRA on int8 weights and QLoRA (NF4), with its estimated peak, its verdict on this device and
the setting changes it needs to fit.

`plan_for_workspace(workspace, base, memory_gb=)` gives the dict that `python -m pipeline plan --json`
prints and the Memory tab shows (`rows`, `usable_bytes`, ...); `render_plan` its text table; `main`
the command line:

    python -m pipeline plan --workspace WS [--device auto|cuda|mps|cpu] [--memory-gb N] [--json]

Every row is `pipeline.memory.phases.estimate_memory` on the shipped config of the model (assets/)
with the base settings (the command line: `TrainConfig` defaults; the app: its widgets), the longest
rows of the workspace's dataset, and the row's fine-tuning type and quantization; "changes it needs"
is the cheapest suggestion of `pipeline.memory.search.suggest_fits` that keeps those two (another
row of the table is not a change). Training here is LoRA only: the full fine-tune rows answer
"would it fit?", they are not something `train` runs.
"""

from __future__ import annotations

from typing import Any

from pipeline.config import TrainConfig
from pipeline.model.catalog import KNOWN_MODELS
from pipeline.memory.budget import DeviceMemory, auto_device, device_memory, verdict
from pipeline.memory.inputs import EstimateOptions, length_stats_from_workspace
from pipeline.memory.phases import estimate_memory
from pipeline.memory.search import suggest_fits
from pipeline.model.catalog import estimate_only, load_model_config
from pipeline.units import format_bytes

PLAN_MODELS = KNOWN_MODELS
"""The models of the table (their configs ship in assets/, so no download is needed)."""
PLAN_ROWS = (
    ("full", "none", "full fine-tune, bf16"),
    ("lora", "none", "LoRA, bf16"),
    ("lora", "8bit", "LoRA, int8 weights"),
    ("lora", "4bit", "QLoRA, NF4 weights"),
)
"""(finetuning_type, quantization, label) of each row, per model."""


def plan_rows(base: TrainConfig, lengths, device: str, usable_bytes: int,
              options: EstimateOptions | None = None, calibration=None) -> list[dict[str, Any]]:
    """One dict per (model, row of `PLAN_ROWS`): `model`, `finetuning_type`, `quantization`, `label`,
    `total_bytes` (estimated peak, bytes), `peak_phase`, `estimate_only` (True for a model priced but not a
    supported training target, never measured: Gemma 4 E4B, `ModelFamily.estimate_only`), `verdict` (fits / tight / does not fit
    against `usable_bytes`), `changes` (the steps of the cheapest suggestion, each {"changes",
    "what", "cost"}; [] when the row fits as it is or when nothing fits) and `after_changes`
    ({"total_bytes", "verdict"} of that suggestion, or None).

    Args:
        base: the settings every row starts from (batch, rank, checkpointing, placements, ...).
        lengths: `LengthStats` of the dataset.
        device: cpu, cuda or mps (resolved).
        usable_bytes: the device's usable budget (`device_memory(...).usable_bytes`).
        calibration: this machine's `DeviceCalibration` (None: the device's terms assumed), applied to every
            row and its suggestion as `estimate_for_workspace` applies it, so the row with the verdict's
            settings shows the verdict's figure.
    """
    options = options or EstimateOptions()
    rows = []
    for model in PLAN_MODELS:
        model_config = load_model_config(model)
        for finetuning_type, quantization, label in PLAN_ROWS:
            config = base.replace(model=model, device=device, finetuning_type=finetuning_type,
                                  quantization=quantization,
                                  quantize_audio_encoder=base.quantize_audio_encoder and quantization != "none",
                                  lora_targets=base.lora_targets if finetuning_type == "lora" else "language")
            est = estimate_memory(model_config, config, lengths, device, options, calibration=calibration)
            v = verdict(est.total_bytes, usable_bytes)
            changes, after = [], None
            if v.status != "fits":
                found = suggest_fits(model_config, config, lengths, device, usable_bytes, options, limit=1,
                                     accept_tight=v.status == "does not fit",
                                     keep=("finetuning_type", "quantization"), calibration=calibration)
                if found:
                    changes = found[0].steps
                    after = {"total_bytes": found[0].total_bytes, "verdict": found[0].verdict}
            rows.append({
                "model": model, "finetuning_type": finetuning_type, "quantization": quantization, "label": label,
                "total_bytes": est.total_bytes, "peak_phase": est.peak_phase, "verdict": v.status,
                "estimate_only": estimate_only(model),
                "changes": changes, "after_changes": after,
            })
    return rows


def plan_for_workspace(workspace, base: TrainConfig | None = None, *, device: str | None = None,
                       memory_gb: float | None = None, reading: dict | None = None) -> dict:
    """The plan for the dataset built in `workspace` (a path or `Workspace`).

    Args:
        base: the settings every row starts from (the app's widgets); None: `TrainConfig()` with its
            max length raised to the dataset's longest row, so no row is left out.
        device: cpu, cuda, mps or auto (default: `base.device`); auto picks this machine's.
        memory_gb: the device's memory in GiB instead of what it reports (see `device_memory`); without
            it the figures are this machine's, calibrated when it is (`pipeline.calibration.load_calibration`),
            as `estimate_for_workspace`'s are.
        reading: a `DeviceMemory` dict read for the same device and budget (an estimate's `device_memory`),
            used instead of reading the device's free memory again, so a page that shows both shows one
            usable figure; None: read now.
    Returns:
        {"rows": `plan_rows`, "usable_bytes", "device", "device_memory" (`DeviceMemory` dict),
        "lengths_source", "settings" (the base settings), "calibrated" (this machine's calibration applied)}.
    Raises:
        ConfigError: the device is not available here (without `memory_gb`) or a setting is invalid.
    """
    from pipeline.workspace import Workspace  # noqa: PLC0415

    ws = workspace if isinstance(workspace, Workspace) else Workspace(workspace)
    device = device or (base.device if base is not None else "auto")
    device = auto_device() if device == "auto" else device
    if base is None:
        base = TrainConfig()
        longest = length_stats_from_workspace(ws, base.max_length).row_tokens
        if longest and max(longest) > base.max_length:
            base = base.replace(max_length=max(longest))
    base = base.replace(device=device)
    lengths = length_stats_from_workspace(ws, base.max_length)
    mem = DeviceMemory(**reading) if reading and reading.get("device") == device else device_memory(device, memory_gb)
    from pipeline.calibration.this_machine import load_calibration  # noqa: PLC0415

    calibration = None if memory_gb else load_calibration(device)
    return {
        "rows": plan_rows(base, lengths, device, mem.usable_bytes, calibration=calibration),
        "usable_bytes": mem.usable_bytes,
        "device": device,
        "device_memory": mem.to_dict(),
        "lengths_source": lengths.source,
        "settings": base.to_dict(),
        "calibrated": calibration is not None,
    }


def change_words(row: dict) -> str:
    """A row's "changes it needs" in words: "none", "nothing fits", or each change with its cost."""
    if row["verdict"] == "fits":
        return "none"
    if not row["changes"]:
        return "it fits, tightly; nothing leaves more room" if row["verdict"] == "tight" else "no setting change makes it fit"
    steps = "; ".join(f"{step['what']} (cost: {step['cost']})" for step in row["changes"])
    after = row["after_changes"] or {}
    return f"{steps} -> {format_bytes(after.get('total_bytes', 0))}, {after.get('verdict', '?')}"


def render_plan(result: dict) -> str:
    """The plan as text: one line per row (model, kind, peak, verdict, the changes it needs)."""
    mem = result["device_memory"]
    held = mem["free_bytes"] - mem["usable_bytes"]
    lines = [f"What can this machine do? {result['device']}: {format_bytes(result['usable_bytes'])} usable "
             f"({format_bytes(mem['free_bytes'])} free, {format_bytes(held)} held back: {mem['headroom_note']}).",
             f"Rows of your dataset: {result['lengths_source']}.",
             f"{'model':<24} {'fine-tune':<22} {'peak':>10}  {'verdict':<13} changes it needs"]
    for row in result["rows"]:
        only = " (estimate only: not a supported training target, not measured)" if row.get("estimate_only") else ""
        lines.append(f"{row['model']:<24} {row['label']:<22} {format_bytes(row['total_bytes']):>10}  "
                     f"{row['verdict']:<13} {change_words(row)}{only}")
    lines.append("Full fine-tunes are estimated only (`train` runs LoRA); bf16 weights, fp32 master copy and "
                 "AdamW states: 16 bytes per trained parameter.")
    return "\n".join(lines)
