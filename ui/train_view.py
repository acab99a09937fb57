"""The Train tab's text and figures: the settings line, the forecast, the progress bar, the loss curves, the
memory against the estimate, the failure panel and the Past runs table.

Inputs are what `pipeline.training.run_folder.read_run` reads (a `RunReading`, its progress rows, its
result.json) and `TrainConfig.to_dict()` settings; the handlers (`ui.train_tab`) apply the app's words
(`ui.wording`) before a reason reaches a panel here. Nothing here imports gradio or torch, or reads a
file. Figures use the object-oriented `matplotlib.figure.Figure` API (no pyplot state shared between
sessions).
"""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from pipeline.units import format_gib, format_loss, format_seconds, gib_difference, plural
from ui.figures import PALETTE
from ui.memory_counters import memory_counter_words

NOTE_CHARS = 160
"""A run's note in the Past runs table is cut after this many characters (the Train tab's failure panel
shows the whole reason of the run being watched)."""
COMPUTE_DTYPE_WORDS = {"float32": "full precision (float32)", "bfloat16": "half precision (bfloat16)"}
"""How the forecast names the precision a run will compute in."""


# --------------------------------------------------------------------------------------------
# before a run: its settings and how long it will take


WEIGHTS_WORDS = {"none": "full-size weights (no compression)", "8bit": "weights compressed to 8 bits",
                 "4bit": "weights compressed to 4 bits"}
"""`--quantization` in a teacher's words."""
DEVICE_WORDS = {"auto": "on the best device here (auto)", "cpu": "on the processor (CPU)", "cuda": "on an NVIDIA GPU",
                "mps": "on the Mac's GPU"}
"""`--device` in a teacher's words."""
TARGET_WORDS = {"language": "the language part (how it answers)",
                "language+audio": "the language and listening parts (how it answers and hears)"}
"""`--lora-targets` in a teacher's words."""
OPTIMIZER_WORDS = {"adamw": "standard updates (AdamW)", "adamw_8bit": "lighter updates (8-bit AdamW)",
                   "adafactor": "lightest updates (Adafactor)"}
"""`--optimizer` in a teacher's words."""
SCHEDULE_WORDS = {"linear": "lowered steadily to 0", "cosine": "lowered along a curve to 0", "constant": "kept the same"}
"""`--lr-schedule` in a teacher's words."""


def _plural(count: float, one: str, many: str) -> str:
    return f"{count:g} {one if count == 1 else many}"


def settings_words(config: Mapping[str, Any]) -> str:
    """A run's settings in one line of plain text (a `TrainConfig.to_dict()`): `settings_lead`, then
    `settings_details` (what a teacher decides on, then the machine-learning settings)."""
    return settings_lead(config) + " · " + settings_details(config)


def settings_lead(config: Mapping[str, Any]) -> str:
    """What a teacher decides on in a run's settings, in words (a `TrainConfig.to_dict()`): "tiny-gemma3n · 3
    passes over the recordings · full-size weights (no compression) · on the best device here (auto) · 1
    recordings per step, 1 at a time · recordings up to 512 tokens · memory saver on: slower steps"."""
    length = (_plural(config["max_steps"], "step", "steps") if config.get("max_steps", -1) > 0
              else _plural(config.get("epochs"), "pass over the recordings", "passes over the recordings"))
    model = str(config["model"])
    model = Path(model).name if Path(model).is_dir() else model  # a local folder by its name, hub ids in full
    if config.get("keep_best"):
        patience = config.get("early_stopping_patience") or 0
        length += (f" · keeps the best of its evaluations ({config.get('judge_clips')} test answers every "
                   f"{config.get('eval_steps')} steps" + (f", stops after {patience} without progress" if patience else "")
                   + ")")
    parts = [
        model, length,
        WEIGHTS_WORDS.get(config["quantization"], config["quantization"]),
        DEVICE_WORDS.get(config["device"], f"on {config['device']}"),
        step_words(config["batch_size"], config["grad_accum"]),
        f"recordings up to {config['max_length']} tokens",
        "memory saver on: slower steps" if config["gradient_checkpointing"] else "memory saver off: faster, more memory",
    ]
    if not config.get("vision_tower", True):
        parts.append("image part not loaded")
    if config.get("ple_on_cpu"):
        parts.append("part of the model kept in the computer's memory")
    if config.get("low_memory_heap"):
        parts.append("low-memory mode")
    return " · ".join(parts)


def step_words(batch_size: int, grad_accum: int) -> str:
    """How many recordings one training step learns from, in words: a step is one update of the tutor (an
    optimizer step, what the progress, the forecast and the loss chart count), over `batch_size` x
    `grad_accum` recordings, `batch_size` of them in memory at a time: "4 recordings per step, 1 at a time"."""
    batch_size, grad_accum = int(batch_size), int(grad_accum)
    return plural(batch_size * grad_accum, "recording") + " per step" + (f", {batch_size} at a time" if grad_accum > 1 else "")


def settings_details(config: Mapping[str, Any]) -> str:
    """The machine-learning settings of a run in words, each with its term in brackets (what "Advanced"
    shows): "what it learns: on the language part (how it answers); adapter rank 16, strength 32 (LoRA) ·
    standard updates (AdamW) · learning rate 0.0002, lowered steadily to 0 · ..."."""
    parts = [
        f"what it learns: {TARGET_WORDS.get(config['lora_targets'], config['lora_targets'])}; adapter rank "
        f"{config['lora_rank']}, strength {config['lora_alpha']} (LoRA)",
        OPTIMIZER_WORDS.get(config["optimizer"], config["optimizer"]),
        f"learning rate {config['learning_rate']:g}, {SCHEDULE_WORDS.get(config['lr_schedule'], config['lr_schedule'])}",
        "memory saver (gradient checkpointing) " + ("on" if config["gradient_checkpointing"] else "off"),
    ]
    if not config.get("vision_tower", True):
        parts.append("image part not loaded (vision tower)")
    if config.get("ple_on_cpu"):
        parts.append("per-layer embeddings in CPU RAM")
    return " · ".join(parts)


def settings_html(config: Mapping[str, Any], heading: str) -> str:
    """`heading` and `settings_lead`, the machine-learning settings (`settings_details`) behind "Advanced"
    (HTML, escaped)."""
    import html

    return (f"{html.escape(heading)} {html.escape(settings_lead(config))}"
            f"<details><summary>Advanced</summary>{html.escape(settings_details(config))}</details>")


def settings_markdown(config: Mapping[str, Any]) -> str:
    """The "Next run" line of the Train tab: `settings_lead` of the settings the next Start uses, its
    machine-learning settings behind "Advanced"."""
    return (f"**Next run:** {settings_lead(config)}\n\n<details><summary>Advanced</summary>\n\n"
            f"{settings_details(config)}\n\n</details>")


def sureness_words(step: Mapping[str, Any] | None, workspace: Any = None) -> str:
    """How sure a forecast from `step` (`pipeline.calibration.expected_step_seconds`'s dict) is, in words:
    from how many runs of these settings and how much they varied, or from the calibration's trial step only;
    "here" only when every one was measured in this project folder (`workspace`), else "on this computer",
    saying how many came from another project folder (the measurements are this computer's, shared)."""
    from pipeline.calibration.this_machine import evidence_places
    from ui.memory_view import elsewhere_words

    if not step:
        return ""
    count = int(step.get("measurements") or 1)
    places = evidence_places(step.get("folders") or [], workspace) if workspace is not None else None
    where = "here" if places is None or places["here"] == count else "on this computer"
    others = elsewhere_words(places, count)
    if step.get("source") == "probe":
        return ("from the calibration's trial step only" + (f" ({others})" if others else "")
                + ", a rough guide: the first run of these settings here will measure it")
    others = f" ({others})" if others else ""
    if count == 1:
        return f"measured once {where}, in an earlier run of this model{others}; a busier computer takes longer"
    spread = step.get("spread_percent")
    return (f"measured {count} times {where}, in earlier runs of this model{others}"
            + (f", varying by up to ±{spread} %" if spread else "") + "; a busier computer takes longer")


def load_from_words(source: str | None, measurements: int | None = None) -> str:
    """Where a loading forecast comes from, in words, always loads of the same model and quantization
    (`pipeline.calibration.expected_load_seconds`, `pipeline.training.runs.measured_load_seconds`): "the
    calibration's load of this model" (`source` "probe") or "your last run" / "your last N runs" (runs)."""
    if source == "probe":
        return "the calibration's load of this model"
    return "your last run" if (measurements or 1) == 1 else f"your last {measurements} runs"


def forecast_markdown(plan: Mapping[str, Any], device: str, workspace: Any = None) -> str:
    """Before a run starts, a teacher's decision first: how long it will take from Start to its last step
    (loading included) and how sure that is, then behind "Why?" the parts of that time and the precision
    the run computes in on `device`, and why (`plan`: `pipeline.calibration.forecast_run`'s dict:
    `compute_dtype`, `compute_dtype_reason`, `seconds` (the steps), `load_seconds`, `total_seconds`,
    `steps`, `step` (the measured step's record), `load` (the measured loading's), `load_from` (where the loading
    figure comes from, `load_from_words`)); `workspace`: the project
    folder asking, against which "How sure" says where its measurements were made (`sureness_words`)."""
    steps = plan.get("steps")
    total, load = plan.get("total_seconds"), plan.get("load_seconds")
    if plan.get("seconds") is not None and total is not None:
        text = (f"**How long the next run takes (forecast):** about **{format_seconds(total)}** from Start to the last of its {steps} steps "
                f"(loading about {format_seconds(load)}{', as ' + plan['load_from'] if plan.get('load_from') else ''}, then the steps about {format_seconds(plan['seconds'])}; "
                f"evaluations and saving add a little). **How sure:** {sureness_words(plan.get('step'), workspace)}.")
    elif plan.get("seconds") is not None:
        text = (f"**How long the next run takes (forecast):** the {steps} steps take about **{format_seconds(plan['seconds'])}**, plus loading, which "
                f"has not been timed here yet. **How sure:** {sureness_words(plan.get('step'), workspace)}.")
    elif steps is not None:
        text = (f"**How long the next run takes (forecast):** {steps} steps; how long they take has not been measured on this computer for these "
                "settings yet: **Calibrate this machine** on the Memory tab measures it, and so does a first run.")
    else:
        text = "**How long the next run takes (forecast):** known once the dataset is built (Dataset tab)."
    where = f"this computer's {device.upper() if device != 'cpu' else 'processor (CPU)'}"
    dtype = plan["compute_dtype"]
    reason = str(plan.get("compute_dtype_reason") or "").split(": ", 1)[-1].rstrip(".")
    precision = (f"It computes in the longer number format, which takes twice the memory of the shorter one, because "
                 f"{where} cannot compute the shorter one quickly (technically: {COMPUTE_DTYPE_WORDS.get(dtype, dtype)}; "
                 f"{reason})." if dtype == "float32" else
                 f"It computes in the shorter number format, half the memory of the longer one (technically: "
                 f"{COMPUTE_DTYPE_WORDS.get(dtype, dtype)}; {reason}).")
    dated = [f"{what} measured on this computer on {str(record['date'])[:10]}" for what, record in
             (("the step", plan.get("step")), ("the loading", plan.get("load"))) if record and record.get("date")]
    why = f"- **Precision.** {precision}"
    if dated:
        why += f"\n- **Measurements.** {'; '.join(dated)}."
    return f"{text}\n\n<details><summary>Why? (how it will run)</summary>\n\n{why}\n\n</details>"


# --------------------------------------------------------------------------------------------
# the run being watched


def progress_html(step: int | None, max_steps: int | None, elapsed_s: float | None, eta_s: float | None,
                  status: str | None, *, label: str = "", settings: Mapping[str, Any] | None = None,
                  loading: bool = False, eta_counts_loading: bool = False, load_from: str = "") -> str:
    """A progress bar (HTML `<progress>` plus a line of text): steps done, elapsed time (since Start, loading
    included), the time left (from this run's own steps so far), status; with `settings` (the run's
    config.json), a second line with the settings this run uses. `loading` (its process has logged no step
    yet): a run with no step done says "loading the model", not "step 0 of ?"; a resumed run with steps done
    says it is loading the model again before its next step. `eta_counts_loading`: `eta_s` includes the
    loading still to come (`run_progress_html`), as long as `load_from` says (`load_from_words`). Before a run starts (no step, status "not started") the line
    says only that: no "step 0 of ?" and no clock."""
    step = int(step or 0)
    total = int(max_steps or 0)
    fraction = min(1.0, step / total) if total > 0 else 0.0
    status_text = html.escape(status or "not started")
    label_text = f"<b>{html.escape(label)}</b> · " if label else ""
    basis = (f"from this run's steps so far, plus loading as long as {load_from or 'before here'}" if eta_counts_loading
             else "from this run's steps so far")
    eta_text = f" · about {format_seconds(eta_s)} left ({basis})" if eta_s else ""  # none once ended
    if not loading and not step and status_text == "not started":  # nothing to count yet: no "step 0 of ?"
        return ('<div class="train-progress">'
                '<progress value="0" max="100" style="width:100%;height:1.4em"></progress>'
                f'<div class="train-progress-text">{label_text}status: <b>not started</b></div>'
                + (f'<div class="train-progress-settings"><small>{settings_html(settings, "This run:")}</small></div>'
                   if settings else "")
                + "</div>")
    if loading and not step:
        steps_text = "<b>loading the model</b>"
    elif loading:  # resumed: this process has not logged a step yet
        steps_text = (f"<b>loading the model again</b> to continue after step <b>{step}</b> of <b>{total or '?'}</b>"
                      f" · {fraction * 100:.0f} %")
    else:
        steps_text = f"step <b>{step}</b> of <b>{total or '?'}</b> · {fraction * 100:.0f} %"
    return (
        '<div class="train-progress">'
        f'<progress value="{fraction * 100:.1f}" max="100" style="width:100%;height:1.4em"></progress>'
        f'<div class="train-progress-text">{label_text}{steps_text} · '
        f'elapsed {format_seconds(elapsed_s)}{eta_text} · '
        f"status: <b>{status_text}</b></div>"
        + (f'<div class="train-progress-settings"><small>{settings_html(settings, "This run:")}</small></div>'
           if settings else "")
        + "</div>"
    )


def started_line(run: str, *, resumed: bool = False, picked_up: bool = False) -> str:
    """The line under Start/Stop while run `run` trains: started, resumed (`resumed`) or found still training
    when the page was opened again (`picked_up`). True for as long as the run trains; `ended_line` replaces it
    once it ends (the watcher's tick)."""
    if picked_up:
        return f"Picked up **{run}**, still training on its own; the progress below follows it."
    what = "Resumed" if resumed else "Started"
    return (f"{what} **{run}**{' from its last checkpoint' if resumed else ''}: it trains on its own, so you can "
            "close this page and come back; the progress below follows it.")


ENDED_WORDS = {"completed": "**{run}** has finished: its tutor is ready in Try and Judge.",
               "stopped": "**{run}** stopped and saved a checkpoint: **Resume** continues it.",
               "failed": "**{run}** did not finish: what happened and what to do are below.",
               "not_started": ""}
"""The line under Start/Stop once a run has ended, by its state (`pipeline.training.run_folder.RUN_STATES`)."""


def ended_line(run: str, state: str) -> str:
    """The line under Start/Stop once run `run` is no longer training (its `state`): it replaces
    `started_line`, which spoke of it as training; empty for a state with nothing to add."""
    return ENDED_WORDS.get(state, "").format(run=run)


def state_words(state: str, loading_s: float | None, expected_load_s: float | None = None,
                expected_from: str = "") -> str:
    """A run's state for its progress line ("not started", "running"), with the seconds its process has
    spent loading before the first step while it does (`loading_s`, None once it has logged a step), and
    how long loading took here before (`expected_load_s`, `pipeline.calibration.expected_load_seconds`) and where
    that figure comes from (`expected_from`, `load_from_words`)."""
    words = state.replace("_", " ")
    if loading_s is not None:
        expected = (f" of about {format_seconds(expected_load_s)}, as {expected_from or 'before here'}"
                    if expected_load_s else "")
        words += f" (loading the model and checking the longest batch: {format_seconds(loading_s)}{expected})"
    return words


def run_progress_html(run: Any, expected_load_s: float | None = None, expected_from: str = "") -> str:
    """`progress_html` of the run being watched (a `pipeline.training.run_folder.RunReading`): its step of
    its steps, its clock since Start, the time left while it runs, its state (with `expected_load_s` while
    it loads) and its own settings. While a resumed run loads the model again, the time left is its last
    forecast of the steps plus the loading still to come (`expected_load_s` less the seconds loaded so far);
    no time left is shown when how long loading takes is not known (the steps' forecast alone would stand
    still while it loads)."""
    eta, counts_loading = run.eta_s, False
    if run.loading_s is not None:
        counts_loading = bool(eta and expected_load_s)
        eta = eta + max(0.0, expected_load_s - run.loading_s) if counts_loading else None
    return progress_html(run.step, run.max_steps, run.elapsed_s, eta,
                         state_words(run.state, run.loading_s, expected_load_s, expected_from), label=run.run,
                         settings=run.settings, loading=run.loading_s is not None, eta_counts_loading=counts_loading,
                         load_from=expected_from)


def loss_curves(progress_rows: Sequence[Mapping[str, Any]]):
    """Training loss and eval loss against the optimizer step (from `progress.jsonl` rows).

    Returns a `matplotlib.figure.Figure`; an empty figure with a note before the first step.
    """
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7, 3.0), layout="constrained")
    ax = fig.add_subplot()
    train = [(r["step"], r["loss"]) for r in progress_rows if r.get("loss") is not None and "step" in r]
    evals = [(r["step"], r["eval_loss"]) for r in progress_rows if r.get("eval_loss") is not None and "step" in r]
    if not train and not evals:
        ax.text(0.5, 0.5, "waiting for the first step…", ha="center", va="center", transform=ax.transAxes)
        ax.set_axis_off()
        return fig
    if train:
        ax.plot(*zip(*train), color=PALETTE[0], marker="." if len(train) < 40 else None, label="train loss")
    if evals:
        ax.plot(*zip(*evals), color=PALETTE[1], marker="o", label="eval loss")
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("training step")
    ax.set_ylabel("loss (tutor's answer)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return fig


PHASE_WORDS = {"load": "loading", "preflight": "the trial step on the longest batch", "step": "a training step",
               "eval": "testing on the eval recordings", "save": "saving a checkpoint", "resume": "resuming"}
"""The phases of a run (`pipeline.memory.run_phases.RUN_PHASES`) in a teacher's words."""


def train_memory_markdown(memory: Mapping[str, Any] | None, estimate: Mapping[str, Any] | None, *,
                          running: bool = False, today_bytes: int | None = None) -> str:
    """A run's measured memory against the estimate for its settings, like with like, a teacher's words first:
    the whole run's peak against the estimate's whole-run peak, each in GiB (`pipeline.units.format_gib`)
    with the phase that set it, and the run's training steps (the largest of them) against the estimate for the
    run's steps (`pipeline.memory.run_compare.compare`; one step alone, the Memory tab's figure, under Why?); the
    estimate's calibration and precision behind "Why?". `memory`: result.json's `memory` (or the progress
    figures so far, with `memory_kind`); `estimate`: its `memory_estimate`. `running`: the run has not
    finished, so the measured peak covers only the phases reached so far. `today_bytes`: the whole run's
    estimate for the same settings now (the Memory tab's figure: this computer's calibration has grown since,
    this run's measurements included), said beside the run's own when the two show different figures."""
    from pipeline.memory.run_compare import STEPS_LABEL, compare, one_step_words

    comparison = compare(memory, estimate)
    measured, total = comparison.get("measured_bytes"), comparison.get("estimate_bytes")
    if not measured and not total:
        return ""
    label = "**Memory so far:**" if running else "**Memory:**"
    text = f"{label} {'it peaked at ' + format_gib(measured) if measured else 'not measured yet'}"
    if measured and comparison.get("measured_phase"):
        text += f" ({PHASE_WORDS.get(comparison['measured_phase'], comparison['measured_phase'])})"
    if total:
        text += f"; the estimate for the whole run, made when it started, was {format_gib(total)}"
        if comparison.get("estimate_phase"):
            text += f" ({PHASE_WORDS.get(comparison['estimate_phase'], comparison['estimate_phase'])})"
        if measured and gib_difference(measured, total):
            text += f": measured, {gib_difference(measured, total)}"
        if today_bytes and format_gib(today_bytes) != format_gib(total):
            text += (f". With what this computer has measured since (this run included), the Memory tab now "
                     f"estimates {format_gib(today_bytes)} for the same settings")
    lines = [text + "."]
    step_measured, step_estimate = comparison.get("step_measured_bytes"), comparison.get("step_estimate_bytes")
    if step_measured or step_estimate:
        step = f"**{STEPS_LABEL}:** {format_gib(step_measured) if step_measured else 'not reached yet'}"
        if step_estimate:
            step += f" against {format_gib(step_estimate)} estimated for them when the run started"
            if step_measured and gib_difference(step_measured, step_estimate):
                step += f" ({gib_difference(step_measured, step_estimate)})"
        lines.append(step + ".")
    why = []
    kind = (memory or {}).get("memory_kind")
    if kind:
        why.append(f"Peaks {memory_counter_words(kind)}, in each phase of the run.")
    one_step = (estimate or {}).get("step_bytes")
    if step_measured and one_step and step_estimate and format_gib(one_step) != format_gib(step_estimate):
        why.append(one_step_words(one_step))
    if comparison.get("calibration_text"):
        why.append(f"The estimate: {comparison['calibration_text']}.")
    if total or step_estimate:  # the Memory tab's answer is today's: it may differ a little (one figure per moment)
        why.append("These estimates were made when the run started; the Memory tab estimates with what this computer "
                   "has measured since (each run adds to it), so its figures for the same settings can differ a little.")
    if comparison.get("compute_dtype"):
        why.append(f"Precision: {comparison['compute_dtype']} ({comparison.get('compute_dtype_reason') or ''}).")
    text = "  \n".join(lines)
    if why:
        text += "\n\n<details><summary>Why? (how it was measured)</summary>\n\n" + " ".join(why) + "\n\n</details>"
    return text


def kept_markdown(rows: list[dict], result: dict) -> str:
    """With `--keep-best`: which step the run keeps and why (result.json's `best_reason` once it ended),
    or while it trains, the last check against the experts with the seconds it took (progress.jsonl's
    `"judge"` lines, `pipeline.training.best_checkpoint`); "" otherwise."""
    if result.get("best_reason"):
        return f"**Kept:** {result['best_reason']}."
    checks = [row for row in rows if row.get("kind") == "judge"]
    if not checks:
        return ""
    last = checks[-1]
    loss = last.get("criterion") != "expert_agreement"
    what = "eval loss" if loss else "agreement with the experts"
    value = (lambda v: format_loss(v) if loss else f"{v:.3g}")  # a loss as every screen rounds it
    return (f"**Checked against the experts:** {what} {value(last['value'])} at step {last['step']} (best "
            f"{value(last['best_value'])} at step {last['best_step']}); that check answered "
            f"{plural(last['clips'], 'test recording')} in {format_seconds(last['seconds'])}.")


def run_memory_markdown(run: Any, today_bytes: int | None = None) -> str:
    """The memory panel of the run being watched (a `RunReading`): with `--keep-best` the step it keeps
    (`kept_markdown`) first, then its measured memory against the estimate (`train_memory_markdown`, with
    `today_bytes`, the Memory tab's estimate for its settings now)."""
    memory = train_memory_markdown(run.memory, run.estimate, running=run.alive, today_bytes=today_bytes)
    kept = kept_markdown(run.rows, run.result or {})
    return f"{kept}\n\n{memory}" if kept else memory


def failure_markdown(status: Mapping[str, Any]) -> str:
    """Why a run failed and what to change (empty unless `status` is failed)."""
    if status.get("status") != "failed":
        return ""
    reason = status.get("reason") or "the run ended with an error (see the log)."
    lines = ["### ✗ Training failed", "", str(reason)]
    suggestions = status.get("suggestions") or []
    if suggestions:
        lines += ["", "**What to change** (Memory tab settings; the estimate there shows what fits):"]
        lines += [f"- {tip}" for tip in suggestions]
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------
# every run


def runs_frame(runs: Iterable[Mapping[str, Any]]):
    """Table of past runs (`pipeline.training.runs.run_status` dicts): name, state, steps, losses, peak memory, note."""
    import pandas as pd

    rows = []
    for run in runs:
        result = run.get("result") or {}
        step, max_steps = run.get("step"), run.get("max_steps")
        rows.append(
            {
                "run": run.get("run"),
                "state": str(run.get("state", "")).replace("_", " "),
                "steps": f"{step or 0}/{max_steps}" if max_steps else (step or 0),
                "final loss": _loss(result.get("final_loss")),
                "eval loss": _loss(result.get("eval_loss")),
                "peak memory": format_gib(result.get("peak_memory_bytes")) if result.get("peak_memory_bytes") else "",
                "model": Path(str(result.get("model") or "")).name if result.get("model") else "",
                "note": _note(run.get("reason")),
            }
        )
    columns = ["run", "state", "steps", "final loss", "eval loss", "peak memory", "model", "note"]
    return pd.DataFrame(rows, columns=columns)


def _note(reason: Any) -> str:
    """A run's reason for the app's table: the command line's "--resume continues" becomes the app's
    "Resume continues" (the Train tab's Resume button), the STOP file the user never saw goes unnamed
    (`ui.wording.stop_words`); cut to `NOTE_CHARS` with "…"."""
    from ui.wording import stop_words

    text = stop_words(str(reason or ""))
    text = text.replace("; --resume continues", ". Resume continues").replace("--resume continues", "Resume continues")
    return text if len(text) <= NOTE_CHARS else text[: NOTE_CHARS - 1].rstrip() + "…"


def _loss(value: Any) -> str:
    """A loss for a table cell: `format_loss` (the one rounding every screen uses), "" when there is none."""
    return format_loss(value) if isinstance(value, (int, float)) else ""


def compare_loss_curves(runs: Mapping[str, Sequence[Mapping[str, Any]]]):
    """Training loss (solid) and eval loss (dashed, circles) of several runs against the optimizer step,
    one colour per run (`runs`: run name -> its `progress.jsonl` rows).

    Returns a `matplotlib.figure.Figure`; a note when no run has a logged step yet.
    """
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    fig = Figure(figsize=(9, 3.6), layout="constrained")
    ax = fig.add_subplot()
    drawn = False
    for index, (name, rows) in enumerate(runs.items()):
        colour = PALETTE[index % len(PALETTE)]
        train = [(r["step"], r["loss"]) for r in rows if r.get("loss") is not None and "step" in r]
        evals = [(r["step"], r["eval_loss"]) for r in rows if r.get("eval_loss") is not None and "step" in r]
        if train:
            ax.plot(*zip(*train), color=colour, linewidth=1.4, label=f"{name}: train")
        if evals:
            ax.plot(*zip(*evals), color=colour, linestyle="--", marker="o", markersize=4, label=f"{name}: eval")
        drawn = drawn or bool(train or evals)
    if not drawn:
        ax.text(0.5, 0.5, "pick runs that have logged a step", ha="center", va="center", transform=ax.transAxes)
        ax.set_axis_off()
        return fig
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("training step")
    ax.set_ylabel("loss (tutor's answer)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    return fig
