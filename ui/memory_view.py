"""The Memory tab's answer in words: "Will MODEL fit on MACHINE?", naming the model, the machine, the
precision and whether the figure is calibrated, with one headline figure (the whole run's peak) and the
step's figure explained under it. Pure formatting of `pipeline.memory.estimate_for_workspace`'s dict
(`python -m pipeline estimate --json`); no gradio, no torch. The numbers and tables of the estimate stay
in `ui.formatting`.
"""

from __future__ import annotations

from typing import Any, Mapping

from pipeline.units import format_bytes
from ui.formatting import verdict_markdown

PRECISION_WORDS = {"4bit": "4-bit (NF4) weights", "8bit": "8-bit (int8) weights"}
"""How each `--quantization` stores the weights, in words; `none` keeps them in the compute dtype."""
DTYPE_WORDS = {"bfloat16": "bf16", "float32": "fp32", "float16": "fp16", "torch.bfloat16": "bf16",
               "torch.float32": "fp32", "torch.float16": "fp16"}
PEAK_PHASE_WORDS = {
    "load": "while the model loads",
    "preflight": "in the preflight (one trial step on the longest batch before training starts)",
    "step": "during a training step on the longest batch",
    "eval": "while the tutor is tested on the eval recordings",
    "save": "while a checkpoint is saved",
    "resume": "when a stopped run resumes",
}
"""When the whole run reaches its peak, per phase of `pipeline.memory.run_phases.RUN_PHASES`."""


def model_words(model: str) -> str:
    """A model as the teacher knows it: a hub id or folder path -> its last part (`gemma-3n-E2B-it`)."""
    text = str(model or "").strip().rstrip("/\\")
    return text.replace("\\", "/").split("/")[-1] or text


def precision_words(settings: Mapping[str, Any], compute_dtype: str | None = None) -> str:
    """The run's precision in words: "4-bit (NF4) weights, computing in bf16", "bf16 weights, computing in
    bf16". `compute_dtype` is the estimate's `compute_dtype` (bf16 when absent: the training code's default)."""
    compute = DTYPE_WORDS.get(str(compute_dtype), str(compute_dtype)) if compute_dtype else "bf16"
    weights = PRECISION_WORDS.get(str(settings.get("quantization")), f"{compute} weights")
    return f"{weights}, computing in {compute}"


def _sentence(text: str | None) -> str:
    """`text` as a sentence on its own: a capital first letter and a full stop ("" stays "")."""
    text = (text or "").strip()
    return text[:1].upper() + text[1:].rstrip(".") + "." if text else ""


def calibration_words(data: Mapping[str, Any], *, offer: bool = False) -> str:
    """Whether the estimate's figure is calibrated, from its `calibration` ({date, device_key,
    n_measurements} or None) and `calibration_text` when the estimate has them. `offer`: the machine is
    this computer, so an uncalibrated answer offers **Calibrate this machine**."""
    calibration = data.get("calibration")
    text = data.get("calibration_text")
    if calibration:
        return _sentence(text) or (f"Calibrated on this machine on {calibration.get('date', '?')} "
                                   f"({calibration.get('n_measurements', '?')} measurements).")
    text = _sentence(text) or ("Not calibrated: the part of the figure that depends on the device (its runtime and "
                               "memory allocator) is assumed, not measured.")
    if offer:
        text += " **Calibrate this machine** (below) measures it here."
    return text


def memory_answer_markdown(data: Mapping[str, Any], machine: str, *, offer_calibration: bool = False,
                           budget_words: str | None = None) -> str:
    """The Memory tab's answer to "Will MODEL fit on MACHINE?" from an `estimate_for_workspace` dict: the
    verdict naming the model, the machine (`machine`, in words), the precision and whether the figure is
    calibrated; one headline number (the whole run's peak, `total_bytes`) against the usable memory
    (`verdict_markdown`, `budget_words` naming a preset's memory), then the training step's figure
    (`step_bytes`) explained under it."""
    settings = data.get("settings") or {}
    name = str(data.get("verdict", "")).replace("_", " ")
    answer = {"fits": "Yes", "tight": "Yes, tightly", "does not fit": "No"}.get(name, name)
    model = model_words(str(data.get("model", "")))
    parts = [f"**Will {model} fit on {machine}? {answer}.** Fine-tuning with "
             f"{precision_words(settings, data.get('compute_dtype'))} on `{data.get('device', '?')}`. "
             + calibration_words(data, offer=offer_calibration),
             verdict_markdown(data.get("verdict"), data.get("total_bytes"), data.get("usable_bytes"),
                              data.get("device_memory"), budget_words=budget_words)]
    total, step = data.get("total_bytes"), data.get("step_bytes")
    phase = data.get("run_peak_phase") or "step"
    if total:
        why = f"<small>The headline figure is the whole run's peak, reached {PEAK_PHASE_WORDS.get(phase, phase)}."
        if step and step != total:
            why += (f" One training step measured alone (what **Calibrate this machine** compares) peaks at "
                    f"{format_bytes(step)}")
            why += (f"; over a whole run, what stays from step to step (kernel caches for every row length, the "
                    f"largest batch's memory) adds {format_bytes(total - step)}." if phase == "step" and total > step
                    else ".")
        elif step:
            why += " Loading, testing and saving need less."
        if data.get("compute_dtype_reason"):
            why += f" Precision: {data['compute_dtype_reason']}"
        parts.append(why + "</small>")
    return "\n\n".join(parts)
