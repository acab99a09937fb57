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

from pipeline.memory.budget import FIT_FRACTION
from pipeline.units import GIB, format_bytes, format_gib, gib_difference, gib_minus, plural
from ui.fields import get_field
from ui.memory_counters import memory_counter_words

PRECISION_WORDS = {"4bit": "4-bit (NF4) weights", "8bit": "8-bit (int8) weights"}
"""How each `--quantization` stores the weights, technically; `none` keeps them in the compute dtype."""
WEIGHTS_EFFECT = {
    "4bit": "The model's weights are compressed to 4 bits, about a quarter of their full size: that is what lets "
            "it fit a smaller machine, with answers close to the full model's",
    "8bit": "The model's weights are compressed to 8 bits, about half their full size",
    "none": "The model's weights are kept at full size (nothing compressed)",
}
"""What each `--quantization` does for the teacher, in a sentence (the Why? of the Memory tab's answer)."""
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
VERDICT_HEADLINES = {"fits": "### ✓ Yes, it fits", "tight": "### ⚠ Yes, but only just",
                     "does not fit": "### ✗ No, it does not fit"}
"""The answer's first line, per verdict (`pipeline.memory.budget.verdict`)."""


def gib(n: float | int | None) -> str:
    """A memory figure as the Memory tab shows every one that could be compared with another: GiB with two
    decimals whatever its size (`pipeline.units.format_gib`), so one quantity reads the same wherever it shows
    and two can be compared at a glance ("1021 MiB" beside "1.00 GiB" could not); None -> "–"."""
    return format_gib(n)


def model_words(model: str) -> str:
    """A model as the teacher knows it: a hub id or folder path -> its last part (`gemma-3n-E2B-it`)."""
    text = str(model or "").strip().rstrip("/\\")
    return text.replace("\\", "/").split("/")[-1] or text


def machine_words(device_asked: str, device: str, memory_gb: float | None, *, typed: bool = False) -> str:
    """The machine an estimate is for, in plain words: "an NVIDIA GPU with 8 GB", "a Mac with 16 GB of
    unified memory", "this computer (CPU)". `device_asked` is the Device setting (may be auto), `device`
    the one it resolved to, `memory_gb` the budget (0 or None: what the device reports); `typed`: the budget
    was typed for "another machine" ("another machine with 20 GB": no kind of machine the user did not pick)."""
    gb = float(memory_gb or 0)
    if typed and gb:  # the user picked no kind of machine: none is named
        return f"another machine with {gb:g} GB"
    kind = {"cuda": "GPU", "mps": "Apple GPU", "cpu": "CPU"}.get(device, device)
    if not gb:
        return f"this computer ({kind})"
    if device == "cuda":
        return f"an NVIDIA GPU with {gb:g} GB"
    if device == "mps":
        return f"a Mac with {gb:g} GB of unified memory"
    return f"a computer with {gb:g} GB of RAM (training on the CPU)"


def budget_gb_words(memory_gb: float, *, typed: bool = False) -> str:
    """A machine's memory in GB (a preset's or the figure typed, `typed`) said in the unit the answer's figures
    use: GPUs and Macs count their "GB" in GiB, so "8 GB" is 8 GiB (8192 MiB), the figure the usable memory
    is taken from (`pipeline.memory.budget.device_memory`)."""
    gb = float(memory_gb)
    whose = f"the {gb:g} GB you typed" if typed else f"the machine's {gb:g} GB"
    return f"{whose}: memory sizes in GB count GiB, so {gb:g} GB = {format_gib(gb * GIB)} = {gb * 1024:.0f} MiB"


def precision_words(settings: Mapping[str, Any], compute_dtype: str | None = None) -> str:
    """The run's precision, technically: "4-bit (NF4) weights, computing in bf16", "bf16 weights, computing in
    bf16". `compute_dtype` is the estimate's `compute_dtype` (bf16 when absent: the training code's default)."""
    compute = DTYPE_WORDS.get(str(compute_dtype), str(compute_dtype)) if compute_dtype else "bf16"
    weights = PRECISION_WORDS.get(str(settings.get("quantization")), f"{compute} weights")
    return f"{weights}, computing in {compute}"


def _processor_words(device: str, this_machine: bool) -> str:
    """Whose processor decides the number format, in words: "this computer's processor", "an NVIDIA GPU"."""
    if device == "cuda":
        return "an NVIDIA GPU (from the 2020 models on)" if not this_machine else "this computer's NVIDIA GPU"
    if device == "mps":
        return "a Mac on macOS 14 or newer" if not this_machine else "this Mac"
    return "this computer's processor"


def precision_why(data: Mapping[str, Any]) -> str:
    """Why the estimate's memory is what it is, precision-wise, in a teacher's words first (what it does to the
    memory and why), the technical terms after: the weights (`settings.quantization`) and the number format
    the device computes in (`compute_dtype`, `compute_dtype_reason`, `device`, `this_machine`)."""
    settings = data.get("settings") or {}
    quantization = str(settings.get("quantization") or "none")
    weights = WEIGHTS_EFFECT.get(quantization, WEIGHTS_EFFECT["none"])
    dtype = str(data.get("compute_dtype") or "bfloat16")
    who = _processor_words(str(data.get("device") or "cpu"), bool(data.get("this_machine", True)))
    reason = str(data.get("compute_dtype_reason") or "").split(": ", 1)[-1].rstrip(".")
    if dtype == "float32":
        work = (f"The training itself uses the longer number format, which takes twice the memory of the shorter one, "
                f"because {who} cannot compute the shorter one quickly")
    else:
        work = (f"The training itself uses the shorter number format, half the memory of the longer one, because "
                f"{who} computes it quickly")
    technical = precision_words(settings, dtype) + (f"; {reason}" if reason else "")
    return f"{weights}. {work} (technically: {technical})."


def elsewhere_words(places: Mapping[str, int] | None, count: int) -> str:
    """Where `count` pieces of evidence came from when not all from this project folder (`places`:
    `pipeline.calibration.this_machine.evidence_places`): "all of them in another project folder on this
    computer", "2 of them in another project folder on this computer"; "" when none is known to be elsewhere."""
    elsewhere = int((places or {}).get("elsewhere") or 0)
    if not elsewhere:
        return ""
    if elsewhere >= count:
        return ("measured in another project folder on this computer" if count == 1
                else "all of them in another project folder on this computer")
    return f"{elsewhere} of them in another project folder on this computer"


def how_sure(data: Mapping[str, Any], *, offer: bool = False) -> str:
    """How far the answer's figure may be off, in a teacher's words: calibrated on this computer (when, how
    many measurements, within how much), or not measured there (up to the estimate's `uncertainty_percent`),
    for this computer or another machine. `offer`: the machine is this computer, so an uncalibrated answer
    offers **Calibrate this machine**."""
    calibration = data.get("calibration")
    percent = data.get("uncertainty_percent")
    if calibration:
        count = calibration.get("n_measurements", "?")
        places = calibration.get("places") or {}
        if places and not places.get("here") and isinstance(count, int):  # nothing measured in this project yet
            return (f"**How sure:** from what this computer measured before, for other projects and the app's own "
                    f"trials ({plural(count, 'measurement')}, the last on {str(calibration.get('date', '?'))[:10]}, "
                    f"each within {percent or 1} % of its estimate); nothing was measured in this project yet"
                    + (": **Calibrate this machine** (below) measures these settings here." if offer else "."))
        where = elsewhere_words(places, count if isinstance(count, int) else 0)
        return (f"**How sure:** calibrated on this computer on {str(calibration.get('date', '?'))[:10]} "
                f"({count} measurement{'s' if count != 1 else ''}, each within {percent or 1} % of its estimate"
                f"{'; ' + where if where else ''}).")
    off = f"it may be off by up to {percent} %" if percent else "how far it may be off is not known"
    if not data.get("this_machine", True):
        return f"**How sure:** an estimate for a machine this app has not measured: {off}."
    text = f"**How sure:** not measured on this computer yet: {off}."
    if offer:
        text += " **Calibrate this machine** (below) measures it in a few minutes."
    return text


def calibration_words(data: Mapping[str, Any], *, offer: bool = False) -> str:
    """The estimate's own sentence about its calibration (`calibration_text`: "calibrated on this machine on
    DATE (N measurements)" or "not calibrated: the device's share is assumed, expect up to ±N %"), as a
    sentence; the technical account under Why? (`how_sure` says it in a teacher's words, and both say when none
    of the measurements was made in this project)."""
    text = str(data.get("calibration_text") or "").strip()
    if not text and data.get("calibration"):
        calibration = data["calibration"]
        text = (f"calibrated on this machine on {calibration.get('date', '?')} "
                f"({calibration.get('n_measurements', '?')} measurements)")
    text = text.replace("on this machine", "on this computer")  # `how_sure`'s word for the same computer
    text = text[:1].upper() + text[1:].rstrip(".") + "." if text else ""
    places = (data.get("calibration") or {}).get("places") or {}
    if text and places and not places.get("here"):  # the story `how_sure` tells: none measured in this project
        text += (" None of these measurements was made in this project yet: they come from other projects on this "
                 "computer and the app's own trials.")
    if offer and not data.get("calibration"):
        text += " **Calibrate this machine** (below) measures it here."
    return text


def memory_answer_markdown(data: Mapping[str, Any], machine: str, *, offer_calibration: bool = False,
                           budget_words: str | None = None) -> str:
    """The Memory tab's answer to "Will MODEL fit on MACHINE?" from an `estimate_for_workspace` dict, a
    teacher's decision first: fits or not (`verdict_markdown`: the model, the machine in words (`machine`),
    the whole run's peak against the usable memory), how sure (`how_sure`) and what to click; then, behind
    "Why?", the precision (`precision_why`), when the peak comes and the training step's figure
    (`step_bytes`), where the usable memory comes from (`budget_words` naming a preset's memory) and the
    calibration in the estimate's own words. Every memory figure is `gib`."""
    model = model_words(str(data.get("model", "")))
    name = str(data.get("verdict", "")).replace("_", " ")
    parts = [verdict_markdown(data.get("verdict"), data.get("total_bytes"), data.get("usable_bytes"),
                              who=f"{model} on {machine}")]
    if data.get("dataset_built") is False:  # no recordings to take the longest of: say what is assumed instead
        parts.append(no_dataset_words(data))
    parts.append(how_sure(data, offer=offer_calibration))
    if name == "does not fit":
        parts.append("**What to do:** click a suggestion below to make it fit, or pick a machine with more memory.")
    elif name == "tight":
        parts.append("**What to do:** train as it is, or click a suggestion below to leave more room.")
    why = [f"- **Precision.** {precision_why(data)}"]
    total, step = data.get("total_bytes"), data.get("step_bytes")
    phase = data.get("run_peak_phase") or "step"
    if total:
        peak = f"- **When the peak comes.** {PEAK_PHASE_WORDS.get(phase, phase)[:1].upper()}{PEAK_PHASE_WORDS.get(phase, phase)[1:]}."
        if step and gib(step) != gib(total):  # one figure when the two show the same
            peak += f" One training step alone needs {gib(step)}"
            peak += " (what **Calibrate this machine** measures)" if data.get("this_machine", True) else ""
            peak += (f"; over a whole run, what stays from step to step adds {gib_minus(total, step)} (technically: kernel "
                     "caches for every row length and the largest batch's memory)." if phase == "step" and total > step
                     else ".")
        elif step:
            peak += " Loading, testing and saving need less."
        why.append(peak)
    usable = usable_words(data.get("usable_bytes"), data.get("device_memory"), budget_words=budget_words)
    if usable:
        why.append(f"- **Usable memory.** {usable}")
    technical = calibration_words(data)
    if technical:
        why.append(f"- **How sure, technically.** {technical}")
    parts.append("<details><summary>Why? (precision, when the peak comes, usable memory)</summary>\n\n"
                 + "\n".join(why) + "\n\n</details>")
    return "\n\n".join(parts)


def no_dataset_words(data: Mapping[str, Any]) -> str:
    """The length an answer assumes when no dataset is built (`dataset_built` False): a row of Max tokens per row
    tokens with a 30-second clip, in place of the dataset's longest recording."""
    return (f"**Length assumed:** no dataset is built yet, so the answer assumes a row of **{data.get('max_length')}** "
            "tokens (**Max tokens per row**) with a 30-second clip. Build the dataset (tab 2) for an answer about "
            "your own longest recording.")


def length_note(data: Mapping[str, Any]) -> str:
    """Why the estimate's row length differs from the Max tokens per row box, when it does (Markdown, or '')."""
    seq_len, max_length = data.get("seq_len"), data.get("max_length")
    if not seq_len or not max_length or seq_len >= max_length:
        return ""
    return (f"\n\n<details><summary>Why {seq_len} tokens and not {max_length}?</summary>\n\nMax tokens per row ({max_length}) is "
            "only a limit: longer recordings are left out. Training works on the longest recording it keeps, so the "
            f"estimate uses the longest one it trains on ({seq_len} tokens). Building the dataset sets Max tokens per row to "
            "the longest recording of training and test together; the test recordings need less memory.\n\n</details>")


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
                   label=f"usable: {gib(usable_bytes)}")
        limit = max(limit, usable_bytes / GIB)
    if device_total_bytes:
        ax.axvline(device_total_bytes / GIB, color="#555555", linestyle=":", linewidth=1.5,
                   label=f"device total: {gib(device_total_bytes)}")
        limit = max(limit, device_total_bytes / GIB)
    if measured_bytes:
        ax.plot([measured_bytes / GIB], [0.36], marker="D", markersize=9, color="black", linestyle="none",
                label=f"measured peak: {gib(measured_bytes)}")
        limit = max(limit, measured_bytes / GIB)
    ax.set_xlim(0, limit * 1.05 if limit > 0 else 1)
    for start, width, label in segments:
        if limit > 0 and width > 0.15 * limit:
            ax.text(start + width / 2, 0, label, ha="center", va="center", fontsize=8, color="black")
    ax.set_ylim(-0.5, 0.5)
    ax.set_yticks([])
    ax.set_xlabel("GiB")
    ax.set_title(f"{title}: {gib(sum(value for _, value in parts))}")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=7, frameon=False)
    return fig


def pretty_name(name: str) -> str:
    """`weights_per_layer_embedding` -> `weights: per layer embedding` (component names for people)."""
    head, _, rest = name.partition("_")
    if head in ("weights", "activations", "lora", "audio") and rest:
        return f"{head}: {rest.replace('_', ' ')}"
    return name.replace("_", " ")


def verdict_markdown(verdict: Any, total_bytes: int | None, usable_bytes: int | None,
                     device: Mapping[str, Any] | None = None, *, budget_words: str | None = None,
                     who: str | None = None) -> str:
    """The answer's first lines: "✓ Yes, it fits" / "⚠ Yes, but only just" / "✗ No, it does not fit", then
    what it needs (`total_bytes`, the whole run's peak) against what is usable, with the margin in GiB and
    percent (`who`: "MODEL on MACHINE", named in that line). With `device` (a `DeviceMemory` dict) a line
    says where the usable figure comes from (`usable_words`)."""
    name = str(get_field(verdict, "verdict", verdict) if not isinstance(verdict, str) else verdict).replace("_", " ")
    margin = get_field(verdict, "margin_bytes") if not isinstance(verdict, str) else None
    if margin is None and total_bytes is not None and usable_bytes:
        margin = usable_bytes - total_bytes
    parts = [VERDICT_HEADLINES.get(name, f"### {name.capitalize()}")]
    subject = f"**{who}** needs" if who else "It needs"
    if total_bytes is not None and usable_bytes is not None and usable_bytes <= 0:
        parts.append(f"{subject} about **{gib(total_bytes)}** at its peak, and **nothing is usable**: the memory kept "
                     "free for the system and other apps takes the whole budget.")
    elif total_bytes is not None and usable_bytes:
        if (margin or 0) >= 0:
            tail = f"{gib_minus(usable_bytes, total_bytes)} to spare ({100.0 * margin / usable_bytes:.0f} % of it)."
            if name == "tight":
                tail += (f" Under {100 - 100 * FIT_FRACTION:.0f} % to spare is called tight: it should fit, with little "
                         "room (how far the figure may be off is under How sure).")
        else:
            tail = f"{gib_minus(total_bytes, usable_bytes)} too much ({total_bytes / usable_bytes:.1f}× what is usable)."
        parts.append(f"{subject} about **{gib(total_bytes)}** at its peak, of **{gib(usable_bytes)}** usable: {tail}")
    usable = usable_words(usable_bytes, device, budget_words=budget_words) if device else ""
    if usable:
        parts.append(usable)
    return "\n\n".join(parts)


def usable_words(usable_bytes: int | None, device: Mapping[str, Any] | None, *, budget_words: str | None = None) -> str:
    """Where the usable memory comes from, a teacher's words first: "Usable X = Y free now minus Z kept free
    for the system and other apps (technically: the headroom rule: ...)" from a `DeviceMemory` dict (free:
    what the device has now, or the budget typed in; `budget_words` names a preset's memory); "" without it."""
    if not device or usable_bytes is None or not device.get("free_bytes"):
        return ""
    what = "free now"
    if str(device.get("source", "")).startswith("--memory-gb"):
        what = budget_words or "the budget you typed"
    note = str(device.get("headroom_note") or "").strip()
    return (f"Usable {gib(usable_bytes)} = {gib(device['free_bytes'])} ({what}) minus {gib_minus(device['free_bytes'], usable_bytes)} kept free for the "
            f"system and other apps" + (f" (technically, the headroom rule: {note})." if note else "."))


def components_frame(components: Mapping[str, int], measured: Mapping[str, int] | None = None):
    """Table of the estimate per component (GiB and bytes)."""
    import pandas as pd

    rows = [{"component": k, "estimate": format_bytes(v), "bytes": int(v)} for k, v in components.items()]
    return pd.DataFrame(rows, columns=["component", "estimate", "bytes"])


def device_markdown(info: Mapping[str, Any]) -> str:
    """The detected device and its memory (a `DeviceMemory` dict, the same reading as the answer's): total,
    free now and usable for training in `gib`, then where the usable figure comes from (`usable_words`)."""
    name = {"cpu": "this computer's processor (CPU)", "cuda": "an NVIDIA GPU (CUDA)", "mps": "the Mac's GPU (MPS)"}.get(
        str(info.get("device")), str(info.get("device", "?")))
    parts = [f"**Training runs on** {name}"]
    if info.get("total_bytes"):
        parts.append(f"total {gib(info['total_bytes'])}")
    if info.get("free_bytes"):
        parts.append(f"free now {gib(info['free_bytes'])}")
    if info.get("usable_bytes") is not None:
        parts.append(f"**usable for training {gib(info['usable_bytes'])}**")
    text = " · ".join(parts)
    usable = usable_words(info.get("usable_bytes"), info)
    return text + (f"  \n{usable}" if usable else "")


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
    return f"Apply: {what}" + (f" → {gib(total)}" if total else "")


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
        lines.append(f"{index}. **{gib(item.get('total_bytes'))}**, {verdict_words}:")
        for step in suggestion_steps(item):
            cost = step.get("cost")
            lines.append(f"    - {step['what']}" + (f" (cost: {cost})" if cost else ""))
    return "\n".join(lines)


PLAN_KIND_WORDS = {("full", "none"): "every weight", ("lora", "none"): "add-on, full-size model",
                   ("lora", "8bit"): "add-on, 8-bit model", ("lora", "4bit"): "add-on, 4-bit model"}
"""A plan row's kind of fine-tune by (finetuning_type, quantization), in a teacher's words (`PLAN_KIND_NOTE` names
the terms): no number format, since the format is the machine's (the answer's Why? says which)."""

PLAN_KIND_NOTE = ("*Every weight*: a full fine-tune, estimated only (training here trains an add-on), to show whether "
                  "one would fit. *Add-on*: a small set of extra weights trained beside the model, which stays as it "
                  "is (a LoRA adapter). *8-bit* and *4-bit* models are stored smaller, for slower steps and a small "
                  "loss of quality (4-bit with an add-on: QLoRA).")
"""The words under the plan table: what its kinds of fine-tune are, with the field's terms."""

ESTIMATE_ONLY_MARK = "†"
"""Marks a plan row's model that is estimated only (not trained or measured here); said once under the table."""


def plan_markdown(result: Mapping[str, Any], *, machine: str | None = None, current: Mapping[str, Any] | None = None) -> str:
    """The "what can this machine do?" table of `pipeline.memory.plan.plan_for_workspace`: one row per
    model and kind of fine-tune, with its peak (`gib`), verdict and the changes it needs (each with its cost).
    `machine`: the machine in words (`machine_words`); `current`: the answer's settings (`model`,
    `finetuning_type`, `quantization`), whose row is marked "(your settings)": the answer above, the same
    estimate. The first four columns are short (they do not wrap, `assets/app.css`), so the table reads at
    1280 px: a model that is estimated only carries `ESTIMATE_ONLY_MARK`, explained once under the table."""
    icons = {"fits": "✓ fits", "tight": "⚠ fits, tightly", "does not fit": "✗ does not fit"}
    where = machine or f"this computer ({result['device']})"
    lines = [f"On **{where}**, with **{gib(result['usable_bytes'])}** usable (as in the answer above):", "",
             "| model | fine-tune | peak | verdict | changes it needs |", "|---|---|---|---|---|"]
    current = current or {}
    estimate_only, marked = [], False
    for row in result["rows"]:
        model = model_words(str(row["model"]))
        kind = PLAN_KIND_WORDS.get((row.get("finetuning_type"), row.get("quantization")), row["label"])
        label = model
        if row.get("estimate_only"):
            label += f" {ESTIMATE_ONLY_MARK}"
            estimate_only += [model] if model not in estimate_only else []
        if (model_words(str(current.get("model") or "")) == model
                and current.get("finetuning_type", "lora") == row.get("finetuning_type")
                and current.get("quantization") == row.get("quantization")):
            kind += " (your settings)"
            marked = True
        if row["verdict"] == "fits":
            changes = "none"
        elif not row["changes"]:
            changes = "none leaves more room" if row["verdict"] == "tight" else "no setting change makes it fit"
        else:
            after = row.get("after_changes") or {}
            changes = "; ".join(f"{step['what']} (cost: {step['cost']})" for step in row["changes"])
            changes += f" → {gib(after.get('total_bytes'))}, {after.get('verdict', '?')}"
        lines.append(f"| {label} | {kind} | {gib(row['total_bytes'])} | "
                     f"{icons.get(row['verdict'], row['verdict'])} | {changes.replace('|', '/')} |")
    yours = ("the row of the settings you picked is the answer above, the same estimate" if marked else
             f"the model you picked ({model_words(str(current.get('model') or ''))}) has no row: the table lists the "
             "published models")
    lines += ["", f"Each row keeps your other settings; {yours}. " + PLAN_KIND_NOTE]
    if estimate_only:
        lines += ["", f"{ESTIMATE_ONLY_MARK} {', '.join(estimate_only)}: estimate only, from its published "
                      "configuration: this app does not train it, and its figures were never measured."]
    return "\n".join(lines)


def measured_markdown(measured: int | None, estimated: int | None, data: Mapping[str, Any], *,
                      elsewhere: str | None = None) -> str:
    """What **Calibrate this machine** found: the measured peak of one training step of these settings on this
    computer against the estimate of one step (`estimated`, the `step_bytes` the answer's Why? shows), with the
    difference in %; `data` is the probe's dict (how the peak was measured). `elsewhere`: the machine that was
    picked before (a preset), which a calibration here cannot measure: said, so the answer's switch to this
    computer is explained."""
    lines = []
    if elsewhere:
        lines.append(f"**Calibrate this machine measures this computer**, the one running the app: the answer above "
                     f"is now for this computer, not for {elsewhere} (pick that machine again to ask about it).")
    if not measured:
        return "\n\n".join(lines + ["The measurement returned no figure."])
    line = f"**Measured here:** one training step of your settings peaked at **{gib(measured)}**"
    if estimated:
        line += f"; the estimate for one step is {gib(estimated)} ({gib_difference(estimated, measured)})"
    lines.append(line + ". The answer above now uses this computer's calibration.")
    kind = data.get("method") or data.get("memory_kind")
    if kind:
        lines.append(f"<small>Peak {memory_counter_words(kind)}.</small>")
    return "\n\n".join(lines)
