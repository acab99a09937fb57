"""The Memory tab's text, tables and figure: the answer in words ("Will MODEL fit on MACHINE?", naming the
model, the machine, the precision and whether the figure is calibrated, with one headline figure, the whole
run's peak, and the step's figure explained under it), the verdict, the estimate per component (a stacked
bar and a table), the device, the "make it fit" suggestions, the "what else fits" plan and a calibration's
measured peak.

Pure formatting of `pipeline.memory.estimate_for_workspace`'s dict (`python -m pipeline estimate --json`),
`pipeline.memory.plan.plan_for_workspace`'s (`plan --json`) and a `DeviceMemory` dict: Markdown strings, a
`pandas.DataFrame` and a `matplotlib.figure.Figure` (object-oriented, no `pyplot`). No gradio, no torch, no
file reading, no pipeline call; `ui/memory_tab.py` asks `pipeline.memory` and lays these out.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from pipeline.units import GIB, format_bytes
from ui.fields import get_field
from ui.memory_counters import memory_counter_words

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


def machine_words(device_asked: str, device: str, memory_gb: float | None) -> str:
    """The machine an estimate is for, in plain words: "an NVIDIA GPU with 8 GB", "a Mac with 16 GB of
    unified memory", "this computer (CPU)". `device_asked` is the Device setting (may be auto), `device`
    the one it resolved to, `memory_gb` the budget (0 or None: what the device reports)."""
    gb = float(memory_gb or 0)
    kind = {"cuda": "GPU", "mps": "Apple GPU", "cpu": "CPU"}.get(device, device)
    if not gb:
        return f"this computer ({kind})"
    if device == "cuda":
        return f"an NVIDIA GPU with {gb:g} GB"
    if device == "mps":
        return f"a Mac with {gb:g} GB of unified memory"
    return f"a computer with {gb:g} GB of RAM (training on the CPU)"


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


def length_note(data: Mapping[str, Any]) -> str:
    """Why the estimate's row length differs from the Max length box, when it does (Markdown, or '')."""
    seq_len, max_length = data.get("seq_len"), data.get("max_length")
    if not seq_len or not max_length or seq_len >= max_length:
        return ""
    return (f"\n\n**Why {seq_len} tokens and not {max_length}?** Max length ({max_length}) is only a limit: longer "
            "rows are left out. Training pads each micro-batch to its longest row, so the estimate uses the longest "
            f"**train** row the limit keeps ({seq_len} tokens). A dataset build sets Max length to the longest row "
            "of train and eval together; eval rows run without gradients and need less memory.")


def memory_bar(
    components: Mapping[str, int],
    usable_bytes: int | None,
    *,
    device_total_bytes: int | None = None,
    measured_bytes: int | None = None,
    title: str = "Estimated peak memory",
):
    """One horizontal stacked bar of the estimate per component against the usable memory.

    `components`: name -> bytes (zero-byte components are left out), in stacking order. A dashed
    red line marks the usable budget, a dotted one the device total, a black diamond the measured
    peak when given. The legend (right) names every component with its size.
    Returns a `matplotlib.figure.Figure`.
    """
    from matplotlib import colormaps
    from matplotlib.figure import Figure

    colours = colormaps["tab20"].colors
    fig = Figure(figsize=(10, 3.4), layout="constrained")
    ax = fig.add_subplot()
    parts = [(name, value) for name, value in components.items() if value and value > 0]
    total = sum(value for _, value in parts) / GIB
    left = 0.0
    segments = []
    for i, (name, value) in enumerate(parts):
        width = value / GIB
        label = pretty_name(name)
        ax.barh([0], [width], left=left, color=colours[i % len(colours)], edgecolor="white", height=0.5,
                label=f"{label}: {format_bytes(value)}")
        segments.append((left, width, label))
        left += width
    limit = total
    if usable_bytes:
        ax.axvline(usable_bytes / GIB, color="#d62728", linestyle="--", linewidth=2,
                   label=f"usable: {format_bytes(usable_bytes)}")
        limit = max(limit, usable_bytes / GIB)
    if device_total_bytes:
        ax.axvline(device_total_bytes / GIB, color="#555555", linestyle=":", linewidth=1.5,
                   label=f"device total: {format_bytes(device_total_bytes)}")
        limit = max(limit, device_total_bytes / GIB)
    if measured_bytes:
        ax.plot([measured_bytes / GIB], [0.36], marker="D", markersize=9, color="black", linestyle="none",
                label=f"measured peak: {format_bytes(measured_bytes)}")
        limit = max(limit, measured_bytes / GIB)
    ax.set_xlim(0, limit * 1.05 if limit > 0 else 1)
    for start, width, label in segments:
        if limit > 0 and width > 0.15 * limit:
            ax.text(start + width / 2, 0, label, ha="center", va="center", fontsize=8, color="black")
    ax.set_ylim(-0.5, 0.5)
    ax.set_yticks([])
    ax.set_xlabel("GiB")
    ax.set_title(f"{title}: {format_bytes(total * GIB)}")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=7, frameon=False)
    return fig


def pretty_name(name: str) -> str:
    """`weights_per_layer_embedding` -> `weights: per layer embedding` (component names for people)."""
    head, _, rest = name.partition("_")
    if head in ("weights", "activations", "lora", "audio") and rest:
        return f"{head}: {rest.replace('_', ' ')}"
    return name.replace("_", " ")


def verdict_markdown(verdict: Any, total_bytes: int | None, usable_bytes: int | None,
                     device: Mapping[str, Any] | None = None, *, budget_words: str | None = None) -> str:
    """Verdict line: fits / tight / does not fit, with the margin in bytes and percent. With `device`
    (a `DeviceMemory` dict), it also says where the usable budget comes from: the memory the device
    has (or the budget typed in; `budget_words` names it otherwise, e.g. "the machine's memory" for a
    preset) and what is held back for the OS and other apps, and why."""
    name = str(get_field(verdict, "verdict", verdict) if not isinstance(verdict, str) else verdict)
    margin = get_field(verdict, "margin_bytes") if not isinstance(verdict, str) else None
    if margin is None and total_bytes is not None and usable_bytes:
        margin = usable_bytes - total_bytes
    label = {"fits": "Fits", "tight": "Fits, tightly", "does not fit": "Does not fit"}.get(
        name.replace("_", " "), name.replace("_", " ").capitalize())
    icon = {"fits": "✓", "tight": "⚠", "does not fit": "✗"}.get(name.replace("_", " "), "")
    parts = [f"### {icon} {label}"]
    if total_bytes is not None and usable_bytes is not None and usable_bytes <= 0:
        parts.append(f"Estimated peak **{format_bytes(total_bytes)}** against **nothing usable**: the headroom "
                     "held back for the OS and other apps takes the whole budget.")
    elif total_bytes is not None and usable_bytes:
        if (margin or 0) >= 0:
            tail = f"{format_bytes(margin)} to spare ({100.0 * margin / usable_bytes:.0f} % of the budget)."
            if name == "tight":
                tail += " Under 10 % to spare is within the estimate's error: it should fit, with little room."
        else:
            tail = f"{format_bytes(-margin)} too much ({total_bytes / usable_bytes:.1f}× the budget)."
        parts.append(
            f"Estimated peak **{format_bytes(total_bytes)}** against **{format_bytes(usable_bytes)}** usable: {tail}"
        )
    if device and usable_bytes is not None and device.get("free_bytes"):
        held = int(device["free_bytes"]) - int(usable_bytes)
        what = "budget you typed" if str(device.get("source", "")).startswith("--memory-gb") else "free now"
        what = budget_words if budget_words and what == "budget you typed" else what
        parts.append(f"Usable {format_bytes(usable_bytes)} = {format_bytes(device['free_bytes'])} ({what}) minus "
                     f"{format_bytes(held)} held back (the headroom rule: {device.get('headroom_note', '')}).")
    return "\n\n".join(parts)


def components_frame(components: Mapping[str, int], measured: Mapping[str, int] | None = None):
    """Table of the estimate per component (GiB and bytes)."""
    import pandas as pd

    rows = [{"component": k, "estimate": format_bytes(v), "bytes": int(v)} for k, v in components.items()]
    return pd.DataFrame(rows, columns=["component", "estimate", "bytes"])


def device_markdown(info: Mapping[str, Any]) -> str:
    """Detected device and its memory (a `DeviceMemory` dict): total, free now, usable budget, headroom."""
    name = info.get("device", "?")
    parts = [f"**Device:** `{name}`"]
    if info.get("total_bytes"):
        parts.append(f"total {format_bytes(info['total_bytes'])}")
    if info.get("free_bytes"):
        parts.append(f"free now {format_bytes(info['free_bytes'])}")
    if info.get("usable_bytes") is not None:
        parts.append(f"**usable for training {format_bytes(info['usable_bytes'])}**")
    text = " · ".join(parts)
    if info.get("headroom_note"):
        text += f"  \nHeadroom: {info['headroom_note']}. Source: {info.get('source', '?')}."
    return text


def suggestion_steps(suggestion: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """A suggestion's changes, one per step ({"changes", "what", "cost"}, `pipeline.memory.search.Move`);
    an older suggestion without steps becomes one step per setting."""
    steps = suggestion.get("steps")
    if steps:
        return list(steps)
    changes = suggestion.get("changes") or {}
    return [{"changes": {k: v}, "what": f"{pretty_setting(k)} {_setting_value(v)}", "cost": ""} for k, v in changes.items()]


def pretty_setting(name: str) -> str:
    """A `TrainConfig` field as the widget calls it: `lora_rank` -> `LoRA rank`."""
    words = {"lora_rank": "LoRA rank", "lora_alpha": "LoRA alpha", "lora_dropout": "LoRA dropout",
             "lora_targets": "LoRA on", "ple_on_cpu": "per-layer embeddings in CPU RAM",
             "vision_tower": "vision tower", "max_length": "max length", "batch_size": "batch size",
             "grad_accum": "gradient accumulation", "gradient_checkpointing": "gradient checkpointing",
             "quantize_audio_encoder": "quantized audio encoder", "finetuning_type": "fine-tuning type",
             "low_memory_heap": "low-memory mode"}
    return words.get(name, name.replace("_", " "))


def suggestion_label(suggestion: Mapping[str, Any]) -> str:
    """Button text of one "make it fit" suggestion: its changes (each once) and the new estimate."""
    what = " + ".join(str(step["what"]) for step in suggestion_steps(suggestion))
    total = suggestion.get("total_bytes")
    return f"Apply: {what}" + (f" → {format_bytes(total)}" if total else "")


def _setting_value(value: Any) -> str:
    if value is True:
        return "on"
    if value is False:
        return "off"
    return str(value)


def suggestions_markdown(suggestions: Sequence[Mapping[str, Any]], verdict: Any) -> str:
    """The "make it fit" list: each suggestion's new estimate and verdict, then each of its changes once,
    with that change's own cost. With no suggestion: nothing when the run fits, "it fits, tightly"
    when it is tight (never "nothing fits"), else that no setting change fits."""
    name = str(get_field(verdict, "verdict", verdict) if not isinstance(verdict, str) else verdict)
    if not suggestions:
        if name == "fits":
            return ""
        if name == "tight":
            return ("It fits, tightly: under 10 % to spare. No setting change found that leaves more room; "
                    "a shorter max length or a machine with more memory would.")
        return "No setting change found that fits this device; try a smaller model or a device with more memory."
    intro = "**Make it fit**" if name == "does not fit" else "**Leave more room**"
    lines = [f"{intro} (click a button below to apply one; only the settings it names change, then the estimate reruns):"]
    for index, item in enumerate(suggestions, 1):
        verdict_words = "fits, tightly: under 10 % to spare" if item.get("verdict") == "tight" else "fits"
        lines.append(f"{index}. **{format_bytes(item.get('total_bytes'))}**, {verdict_words}:")
        for step in suggestion_steps(item):
            cost = step.get("cost")
            lines.append(f"    - {step['what']}" + (f" (cost: {cost})" if cost else ""))
    return "\n".join(lines)


def plan_markdown(result: Mapping[str, Any]) -> str:
    """The "what can this machine do?" table of `pipeline.memory.plan.plan_for_workspace`: one row per
    model and kind of fine-tune, with its peak, verdict and the changes it needs (each with its cost)."""
    icons = {"fits": "✓ fits", "tight": "⚠ fits, tightly", "does not fit": "✗ does not fit"}
    mem = result.get("device_memory") or {}
    held = int(mem.get("free_bytes") or 0) - int(result["usable_bytes"])
    lines = [f"On **{result['device']}** with **{format_bytes(result['usable_bytes'])}** usable "
             f"({format_bytes(held)} held back: {mem.get('headroom_note', '')}):", "",
             "| model | fine-tune | peak | verdict | changes it needs |", "|---|---|---|---|---|"]
    for row in result["rows"]:
        model = str(row["model"]).split("/")[-1].replace("gemma-3n-", "")
        if row["verdict"] == "fits":
            changes = "none"
        elif not row["changes"]:
            changes = "none leaves more room" if row["verdict"] == "tight" else "no setting change makes it fit"
        else:
            after = row.get("after_changes") or {}
            changes = "; ".join(f"{step['what']} (cost: {step['cost']})" for step in row["changes"])
            changes += f" → {format_bytes(after.get('total_bytes'))}, {after.get('verdict', '?')}"
        lines.append(f"| {model} | {row['label']} | {format_bytes(row['total_bytes'])} | "
                     f"{icons.get(row['verdict'], row['verdict'])} | {changes.replace('|', '/')} |")
    lines += ["", "Full fine-tunes are estimated only (training here is LoRA): they show whether one would fit."]
    return "\n".join(lines)


def measured_markdown(measured: int | None, estimated: int | None, data: Mapping[str, Any]) -> str:
    """Measured peak of one step vs the estimate of one step (`estimated`), with the relative error."""
    if not measured:
        return "The probe returned no measurement."
    lines = [f"**Measured peak:** {format_bytes(measured)} (one real optimizer step on the worst-case batch)"]
    if estimated:
        err = 100.0 * (estimated - measured) / measured
        lines.append(f"**Estimated for one step:** {format_bytes(estimated)} ({err:+.1f} % vs measured)")
    kind = data.get("method") or data.get("memory_kind")
    if kind:
        lines.append(f"Peak {memory_counter_words(kind)}.")
    return "\n\n".join(lines)
