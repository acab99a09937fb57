"""Pure formatting for the app: numbers to words, results to tables, figures and small HTML.

Everything here turns a result of `pipeline/` (dicts, dataclasses, lists) into something a widget
shows: a `pandas.DataFrame`, a Markdown string, an HTML snippet or a `matplotlib.figure.Figure`.
It does not import gradio, torch or any pipeline module that does work, so it is cheap to import
and easy to test. Figures are built with the object-oriented `matplotlib.figure.Figure` API (no
`pyplot`, so no global figure state is shared between browser sessions or threads).
"""

from __future__ import annotations

import math
from typing import Any, Iterable, Mapping, Sequence

GIB = 1024**3
MIB = 1024**2

# Colours of the memory components in the stacked bar (stable order, colour-blind friendly Tableau 10).
_PALETTE = (
    "#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f",
    "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac",
)


# --------------------------------------------------------------------------------------------
# numbers


def format_bytes(num_bytes: float | int | None) -> str:
    """`7_000_000_000` -> `"6.52 GiB"` (binary units, as `nvidia-smi` and PyTorch report them)."""
    if num_bytes is None:
        return "–"
    value = float(num_bytes)
    if abs(value) >= GIB:
        return f"{value / GIB:.2f} GiB"
    if abs(value) >= MIB:
        return f"{value / MIB:.0f} MiB"
    if abs(value) >= 1024:
        return f"{value / 1024:.0f} KiB"
    return f"{value:.0f} B"


def format_seconds(seconds: float | int | None) -> str:
    """`3725` -> `"1 h 02 min"`, `95` -> `"1 min 35 s"`, `4.2` -> `"4 s"`; None or NaN -> `"–"`."""
    if seconds is None or (isinstance(seconds, float) and not math.isfinite(seconds)):
        return "–"
    seconds = max(0, int(round(float(seconds))))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours} h {minutes:02d} min"
    if minutes:
        return f"{minutes} min {secs:02d} s"
    return f"{secs} s"


def dbfs(amplitude: float | None) -> str:
    """Linear amplitude in [0, 1] -> decibels relative to full scale, `20*log10(a)` (`"-23.1 dBFS"`)."""
    if amplitude is None:
        return "–"
    if amplitude <= 0:
        return "-inf dBFS"
    return f"{20 * math.log10(amplitude):.1f} dBFS"


def _get(obj: Any, name: str, default: Any = None) -> Any:
    """Field `name` of a dict or an object (results arrive as either)."""
    if isinstance(obj, Mapping):
        return obj.get(name, default)
    return getattr(obj, name, default)


# --------------------------------------------------------------------------------------------
# samples


def checks_markdown(report: Any, *, title: str = "Check results", problems: Sequence[str] = ()) -> str:
    """Markdown table of an `AudioReport` (dict or object): duration, loudness, clipping, silence.

    Each line shows the measured value and a mark: ✓ passed, ⚠ passed with the library's warning.
    (A clip that fails a check never gets here: `load_audio` raises `AudioError` with the reason.)
    `problems`: what else stops the sample from being saved (blank texts); they head the panel as
    "✗ Not ready to save" and replace "All checks passed".
    """
    duration = _get(report, "duration_s")
    peak = _get(report, "peak")
    level = _get(report, "level_dbfs")
    clipped = float(_get(report, "clipped_fraction") or 0.0)
    warnings = [str(w) for w in (_get(report, "warnings") or [])]
    rate = _get(report, "source_rate_hz")
    channels = _get(report, "channels")

    def mark(*words: str) -> str:
        hit = any(word in w.lower() for w in warnings for word in words)
        return "⚠" if hit else "✓"

    level_text = f"{level:.1f} dBFS in the loudest 0.25 s" if isinstance(level, (int, float)) else "–"
    lines = [
        f"**{title}**",
        "",
        "| check | measured | |",
        "|---|---|---|",
        f"| duration | {duration:.2f} s (0.3–30 s is heard) | {mark('short', 'long', 'trim')} |"
        if isinstance(duration, (int, float)) else "| duration | – | |",
        f"| loudness / silence | speech level {level_text}; peak {dbfs(peak)} | {mark('quiet', 'silen', 'soft')} |",
        f"| clipping | {clipped * 100:.2f} % of samples at full scale | {mark('clip', 'loud')} |",
        f"| source | {rate or '–'} Hz, {channels or '–'} channel(s) → 16 kHz mono | ✓ |",
    ]
    if warnings:
        lines += ["", *[f"- ⚠ {w}" for w in warnings]]
    elif not problems:
        lines += ["", "All checks passed."]
    if problems:
        lines = [f"**✗ Not ready to save:** {' '.join(problems)}", "", *lines]
    return "\n".join(lines)


def samples_frame(samples: Iterable[Any]):
    """Table of saved samples for the library view: one row per `Sample` (dict or object).

    Columns: id, speaker, duration (s), target sentence, feedback (first 80 characters), warnings.
    """
    import pandas as pd

    rows = []
    for sample in samples:
        checks = _get(sample, "checks") or {}
        warnings = _get(checks, "warnings") or []
        feedback = _get(sample, "feedback") or ""
        rows.append(
            {
                "id": _get(sample, "id"),
                "speaker": _get(sample, "speaker") or "",
                "seconds": round(float(_get(sample, "duration_s") or 0.0), 2),
                "target sentence": _sample_title(sample),
                "feedback": feedback if len(feedback) <= 80 else feedback[:79] + "…",
                "warnings": "; ".join(warnings),
            }
        )
    columns = ["id", "speaker", "seconds", "target sentence", "feedback", "warnings"]
    return pd.DataFrame(rows, columns=columns)


def _sample_title(sample: Any) -> str:
    """The sentence of a read-aloud sample; "[free speech] prompt" or "[dialogue] N turns..." for the other kinds."""
    kind = _get(sample, "kind") or "read_aloud"
    if kind == "read_aloud":
        return _get(sample, "target_text") or ""
    title = getattr(sample, "title", None) or _get(sample, "prompt") or ""
    return f"[{kind.replace('_', ' ')}] {title}"


def import_report_frame(report: Any):
    """Per-file table of an `ImportReport`: imported ids then skipped files with the reason."""
    import pandas as pd

    kinds = {r["id"]: r["kind"] for r in _get(report, "rows") or [] if r["kind"] != "read_aloud"}
    rows = [{"file / sample": sid, "result": f"imported ({kinds[sid].replace('_', ' ')})" if sid in kinds else "imported",
             "reason": ""} for sid in _get(report, "imported") or []]
    for item in _get(report, "skipped") or []:
        rows.append({"file / sample": _get(item, "file"), "result": "skipped", "reason": _get(item, "reason")})
    return pd.DataFrame(rows, columns=["file / sample", "result", "reason"])


def import_summary(report: Any, source: str) -> str:
    """One Markdown line: how many clips were imported and skipped from `source`."""
    imported = len(_get(report, "imported") or [])
    skipped = len(_get(report, "skipped") or [])
    fmt = _get(report, "format")
    fmt_text = f" ({fmt} layout)" if fmt else ""
    line = f"Imported **{imported}** clip(s) from `{source}`{fmt_text}; skipped **{skipped}**."
    if skipped:
        line += " The table below says why each skipped file was left out."
    return line


# --------------------------------------------------------------------------------------------
# dataset


def length_histogram_bins(histogram: Sequence[Mapping[str, int]], max_length: int | None = None,
                          longest: int | None = None, train_lengths: Sequence[int] | None = None):
    """Bar chart of a `LengthStats.histogram` (`[{lo, hi, count}]`, tokens per row, train and eval rows
    together) with the limit line.

    With `train_lengths` (the train split's row lengths, `LengthStats.row_tokens`) each bar is split
    into its train rows and its eval rows (stacked, with a legend); without them the bars are every
    row, and the title says so. Returns a `matplotlib.figure.Figure`.
    """
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    fig = Figure(figsize=(7, 3.2), layout="constrained")
    ax = fig.add_subplot()
    bins = [b for b in histogram if b.get("hi") is not None]
    if not bins:
        ax.text(0.5, 0.5, "no rows", ha="center", va="center", transform=ax.transAxes)
        ax.set_axis_off()
        return fig
    lefts = [b["lo"] for b in bins]
    widths = [b["hi"] - b["lo"] for b in bins]
    totals = [b["count"] for b in bins]
    if train_lengths:
        last = len(bins) - 1
        train = [sum(1 for n in train_lengths if b["lo"] <= n < b["hi"] or (i == last and n == b["hi"]))
                 for i, b in enumerate(bins)]
        evals = [max(0, total - count) for total, count in zip(totals, train)]
        ax.bar(lefts, train, width=widths, align="edge", color=_PALETTE[0], edgecolor="white", label="train rows")
        ax.bar(lefts, evals, width=widths, bottom=train, align="edge", color=_PALETTE[3], edgecolor="white",
               label="eval rows")
        title = "Token length of each row (train and eval)"
    else:
        ax.bar(lefts, totals, width=widths, align="edge", color=_PALETTE[0], edgecolor="white", label="rows")
        title = "Token length of every row (train and eval together)"
    if longest:
        ax.axvline(longest, color=_PALETTE[1], linewidth=1.5, label=f"longest row {longest}")
    top = max(b["hi"] for b in bins)
    if max_length and max_length <= 1.3 * top:
        ax.axvline(max_length, color="#e15759", linestyle="--", linewidth=1.5, label=f"limit {max_length}")
    elif max_length:
        title += f" (limit {max_length}, off the chart)"
    ax.set_xlabel("tokens per row (text + ~192 audio positions)")
    ax.set_ylabel("rows")
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_title(title)
    ax.legend(loc="upper right", fontsize=8)
    return fig


def speakers_frame(speakers: Mapping[str, Any]):
    """Table: split -> number of speakers and their ids (`speakers`: split -> list of ids or a count)."""
    import pandas as pd

    rows = []
    for split, value in speakers.items():
        if isinstance(value, (list, tuple, set)):
            ids = sorted(str(v) for v in value)
            rows.append({"split": split, "speakers": len(ids), "ids": ", ".join(ids)})
        else:
            rows.append({"split": split, "speakers": value, "ids": ""})
    return pd.DataFrame(rows, columns=["split", "speakers", "ids"])


def excluded_frame(excluded: Iterable[Any]):
    """Table of rows left out of the dataset: sample id and the reason."""
    import pandas as pd

    rows = [{"sample": _get(item, "id"), "reason": _get(item, "reason")} for item in excluded]
    return pd.DataFrame(rows, columns=["sample", "reason"])


# --------------------------------------------------------------------------------------------
# memory


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
    name = str(_get(verdict, "verdict", verdict) if not isinstance(verdict, str) else verdict)
    margin = _get(verdict, "margin_bytes") if not isinstance(verdict, str) else None
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
    name = str(_get(verdict, "verdict", verdict) if not isinstance(verdict, str) else verdict)
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


# --------------------------------------------------------------------------------------------
# memory counters (the Memory tab's measured peak, the Train tab's run, the training log)


MEMORY_COUNTERS = {
    "cpu_max_rss": "measured as the process's peak resident memory (RAM)",
    "cuda_max_memory_allocated": "measured as PyTorch's peak allocated GPU memory",
    "cuda_max_memory_reserved": "measured as the GPU memory PyTorch reserved at its peak",
    "mps_driver_allocated_memory": "measured as the memory the Apple GPU driver allocated",
}
"""How each peak-memory counter (`pipeline.training.peak_memory.memory_kind`) is said in the app."""
# The memory probe's `method` texts (`pipeline.training.probe`), by their first words.
_PROBE_METHODS = (("CPU peak RSS", "cpu_max_rss"), ("CUDA max_memory_reserved", "cuda_max_memory_reserved"),
                  ("MPS driver_allocated_memory", "mps_driver_allocated_memory"))


def memory_counter_words(kind: str | None) -> str:
    """How a peak was measured, in plain words: 'measured as the process's peak resident memory (RAM)'
    for `cpu_max_rss` (or the probe's "CPU peak RSS ..."); '' for None."""
    if not kind:
        return ""
    kind = str(kind)
    kind = next((name for prefix, name in _PROBE_METHODS if kind.startswith(prefix)), kind)
    return MEMORY_COUNTERS.get(kind, f"measured by {kind.replace('_', ' ')}")
