"""Tab 3, Memory: will the fine-tune fit? The teacher's question first ("Will MODEL fit on MACHINE?",
a machine picked from presets or a typed budget), the verdict and the suggestions in plain words; the
machine-learning settings, the estimate's details and the "what else fits" table under accordions.

The estimate is `pipeline.memory.estimate_for_workspace` (`python -m pipeline estimate --json`), the
table `pipeline.memory.plan.plan_for_workspace` (`python -m pipeline plan --json`), so the app and the
command line cannot drift; picking a machine applies that device's defaults (`pipeline.config.
default_quantization`, what `estimate --device D` uses when `--quantization` is not given) unless the
teacher chose the precision. The tab also holds the memory-relevant training settings; with the Train
tab's they form one `TrainConfig`. The tab's text, tables and figure are `ui/memory_view.py`.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import gradio as gr

from pipeline.config import (
    DEFAULT_QUANTIZATION_REASON,
    DEVICES,
    LORA_TARGETS,
    OPTIMIZERS,
    QUANTIZATIONS,
    TrainConfig,
    default_quantization,
    likely_device,
)
from pipeline.errors import PipelineError, TrainingError
from pipeline.host.allocator import training_allocator
from pipeline.units import plural
from pipeline.workspace import Workspace
from ui import memory_view as view
from ui.common import (TabHandlers, CONFIG_FIELDS, DEFAULTS, POLL_SECONDS, built_report, config_from_values, dataset_family_note,
                       error_panel, setting_message,
                       ui_errors)
from ui.wording import app_wording

MAX_SUGGESTIONS = 4

THIS_COMPUTER = "This computer"
CUSTOM_MACHINE = "Another machine: type its memory"
MACHINE_PRESETS: dict[str, tuple[str, float]] = {
    THIS_COMPUTER: ("auto", 0),
    **{f"NVIDIA GPU, {gb} GB": ("cuda", gb) for gb in (8, 12, 16, 24)},
    **{f"Mac, {gb} GB unified memory": ("mps", gb) for gb in (16, 24, 36, 48)},
}
"""The machines people have: label -> (`--device`, `--memory-gb`). GB as the OS or the GPU's box reports it,
i.e. GiB (`pipeline.memory.budget.device_memory`). "This computer" is `--device auto` with the memory the
device reports; `CUSTOM_MACHINE` keeps the device and shows the budget field."""
MACHINE_CHOICES = (*MACHINE_PRESETS, CUSTOM_MACHINE)
MEMORY_GB_LABEL = "The machine's memory (GB)"
TYPE_THE_MEMORY = f"Type the other machine's memory in the box **{MEMORY_GB_LABEL}**, then click **Estimate**."
"""The answer's place once `CUSTOM_MACHINE` is picked, until a memory is typed (said once: the box's own message
stays empty until something is typed; the box is named by its label, wherever the page's width puts it)."""

N_ESTIMATE_OUTPUTS = 9 + MAX_SUGGESTIONS
"""`MemoryHandlers.estimate`'s outputs: plot, verdict, components, suggestions note, suggestions, the buttons,
notes, device note, measured, reading."""

NUMBER_FIELDS = ("lora_rank", "batch_size", "grad_accum", "max_length")
"""The Memory tab's number settings; each gets its own message under it when its value is out of range."""

PLAN_WORKING = ("⏳ Working out what fits this machine: each model, four ways to fine-tune it "
                "(usually well under a minute)…")
"""What the plan table shows while it is computed (issue 20 item 7: no more 5-10 s of nothing)."""

CALIBRATE_NOTE = ("**Calibrate this machine** measures **this computer**, whatever machine is picked above: a check "
                  "of its number formats, two short trials with the offline test model, then one real training step "
                  "of your settings, compared with the estimate. It takes a few minutes; the line under it shows each part, "
                  "and from the second time on how long the last one took here. It goes on if you close or reload "
                  "the page.")
CALIBRATING = "Calibrating **this computer**: the answer for it follows when the measurement is done."
"""The answer's place while a calibration runs (after the click, or a page reopened during one)."""
RESTORING = "Your saved settings are still loading: click **Estimate** for the answer in a moment."
"""The answer's place when the tab is opened before the reopened page has its saved settings back."""
CALIBRATION_PART_WORDS = {"speed": "checking which number format this computer computes fastest",
                          "stand-in": "a short trial with the offline test model",
                          "yours": "one training step of your settings"}
"""What each part of a calibration does (`pipeline.memory.calibrate.CALIBRATION_PARTS`), for its progress bar."""
PROBE_PHASE_WORDS = {None: "starting", "load": "loading the model", "batch": "the longest batch",
                     "step": "one measured step", "shapes": "batches of other lengths"}
"""The probe's phases (`pipeline.training.probe`), for the progress bar, with how far into its part each begins."""
PROBE_PHASE_SHARE = {None: 0.0, "load": 0.05, "batch": 0.6, "step": 0.8, "shapes": 0.9}

SETTING_INFO = {
    "device": "Where training runs. The machine above sets it; pick one here to ask about another device.",
    "quantization": "How the model is stored: 4bit takes about a quarter of the memory of none (full size) for "
                    "the text model, with quality close to it; speed depends on the device (technically: NF4, QLoRA).",
    "lora_rank": "How much the tutor can change: a higher rank learns more, for a little more memory and time.",
    "lora_targets": "language: the tutor learns how to answer; language+audio also how to listen "
                    "(more memory, slower steps).",
    "optimizer": "How updates are computed: adamw is the standard; adamw_8bit and adafactor keep less "
                 "state (a little less memory).",
    "batch_size": "Recordings in memory at a time: more is faster per recording and needs more memory.",
    "grad_accum": "Batches added up into one training step: like a bigger batch for quality, with no extra "
                  "memory.",
    "max_length": "The longest recording plus text a training row may have; longer rows are left out, never cut. "
                  "A dataset build sets it to the longest row.",
}
"""One sentence per Advanced setting: what it changes for the teacher (time, memory, quality)."""


def preset_for(device: str, memory_gb: float | None) -> str:
    """The preset label that `device` and `memory_gb` make, or `CUSTOM_MACHINE`. No budget (0) is this
    computer, whichever of its devices is asked for."""
    gb = float(memory_gb or 0)
    if not gb:
        return THIS_COMPUTER
    return next((label for label, (d, g) in MACHINE_PRESETS.items() if d == device and float(g) == gb),
                CUSTOM_MACHINE)


def _resolved(device: str) -> str:
    """`auto` as `estimate --device auto` resolves it (`pipeline.memory.budget.auto_device`), else `device`."""
    if device != "auto":
        return device
    from pipeline.memory.budget import auto_device

    return auto_device()


class MemoryHandlers(TabHandlers):
    """The Memory tab's handlers: pick a machine (with its device's defaults), detect the device, estimate,
    calibrate (measure), the plan table, apply a suggestion, the messages next to number fields."""

    here = "Memory tab"

    def question(self, model: str | None, machine: str | None = THIS_COMPUTER) -> str:
        """The tab's headline question: "Will MODEL fit on MACHINE?" (Markdown)."""
        if machine in MACHINE_PRESETS and machine != THIS_COMPUTER:
            device, gb = MACHINE_PRESETS[machine]
            where = view.machine_words(device, device, gb)
        else:
            where = "this computer" if machine != CUSTOM_MACHINE else "the machine you describe below"
        return f"## Will {view.model_words(model or DEFAULTS.model)} fit on {where}?"

    def device_defaults(self, device: str, quantization: str, quantization_chosen: bool):
        """The quantization after the Device became `device`: that device's default
        (`pipeline.config.default_quantization`, as `estimate --device D` without `--quantization`) unless
        the teacher chose one (`quantization_chosen`); returns a `gr.update` or `gr.skip()`."""
        if quantization_chosen:
            return gr.skip()
        wanted = default_quantization(_resolved(device or "auto"))
        return gr.update(value=wanted) if wanted != quantization else gr.skip()

    def note_quantization(self, chosen: bool, device: str, quantization: str) -> bool:
        """Whether the quantization shown is the teacher's choice: it already was, or it differs from the
        device's default (picked by hand, by a suggestion, or restored from the saved settings)."""
        return bool(chosen) or quantization != default_quantization(_resolved(device or "auto"))

    def choose_machine(self, machine: str, quantization: str, quantization_chosen: bool):
        """A machine picked from `MACHINE_CHOICES`: returns (device, memory budget, quantization, verdict,
        suggestions note, measured, device note, *suggestion buttons): the preset's device and budget, the
        device's default quantization unless the teacher chose one, and every message of the previous
        machine cleared (they were about another machine). `CUSTOM_MACHINE` shows the budget field and keeps
        the device."""
        cleared = ("", "", "", "", *(gr.update(visible=False) for _ in range(MAX_SUGGESTIONS)))
        if machine not in MACHINE_PRESETS:  # the box empty: the last preset's figure is not the other machine's
            return (gr.skip(), gr.update(value=None, visible=True), gr.skip(), TYPE_THE_MEMORY, *cleared[1:])
        device, gb = MACHINE_PRESETS[machine]
        return (gr.update(value=device), gr.update(value=gb, visible=False),
                self.device_defaults(device, quantization, quantization_chosen), *cleared)

    def device_picked(self, device: str, memory_gb: float | None, quantization: str, quantization_chosen: bool):
        """The Device setting picked by hand: (machine, memory budget field, quantization): the preset that
        the device and the budget make, else the custom machine (whose budget field shows), and the device's
        default quantization unless the teacher chose one (`device_defaults`)."""
        machine = preset_for(device, memory_gb)
        return (gr.update(value=machine), gr.update(visible=machine == CUSTOM_MACHINE),
                self.device_defaults(device, quantization, quantization_chosen))

    def field_message(self, name: str, value: Any) -> str:
        """The message shown under number field `name` (`NUMBER_FIELDS` or "memory_gb"): "" when `value`
        is allowed, else what is wrong and the allowed range, from the same checks the command line runs
        (`TrainConfig.validate`, `pipeline.memory.budget.device_memory`)."""
        try:
            if value is None or value == "":
                return "" if name == "memory_gb" else "✗ Type a number here."  # the answer asks (TYPE_THE_MEMORY)
            if name == "memory_gb":
                from pipeline.memory.budget import device_memory

                if float(value) != 0:  # 0 is what the device reports: nothing to check here
                    device_memory("cpu", float(value))
            else:
                return setting_message(name, value)
        except PipelineError as error:
            return "✗ " + app_wording(str(error), here=self.here)
        return ""

    def settings_changed(self):
        """A setting of the run changed by hand: the answer shown was about the earlier settings, so it goes
        (verdict, suggestions note, measured, plot, *suggestion buttons, plan table) and says to estimate again."""
        return ("Settings changed: click **Estimate** for the answer with these settings.", "", "", None,
                *(gr.update(visible=False) for _ in range(MAX_SUGGESTIONS)),
                "Settings changed: the table follows the next **Estimate**.")

    def plan_working(self) -> str:
        """What the plan table shows while it is being computed."""
        return PLAN_WORKING

    @ui_errors(message_at=0, outputs=1)
    def detect_device(self, device: str, memory_gb: float | None = None) -> str:
        """Which device `device` resolves to and how much memory it has (total, free, usable)."""
        from pipeline.memory import device_memory
        from pipeline.model.loading import resolve_device

        resolved = resolve_device(device or "auto")
        text = view.device_markdown(device_memory(resolved, float(memory_gb) if memory_gb else None).to_dict())
        return text + f"  \nDefault quantization here: **{default_quantization(resolved)}**. {DEFAULT_QUANTIZATION_REASON[resolved]}"

    @ui_errors(message_at=0, outputs=1)  # a refusal in the table's place, not a pop-up that stays
    def plan(self, reading: dict | None, memory_gb: float | None, *values: Any) -> str:
        """What can this machine do? The plan table (E2B/E4B x full / LoRA / int8 / QLoRA) for the settings'
        device and budget, each row starting from the other settings shown, from the same reading of the
        device's memory as the answer (`reading`, the estimate's `device_memory`) and calibrated as it is, so
        the row with the answer's settings shows the answer's figure."""
        from pipeline.memory.plan import plan_for_workspace

        config = config_from_values(values)
        typed = bool(reading and reading.get("typed"))  # the answer was about a memory typed for another machine
        reading = {key: value for key, value in (reading or {}).items() if key != "typed"}
        result = plan_for_workspace(self.ws, config, memory_gb=float(memory_gb) if memory_gb else None,
                                    reading=reading or None)
        machine = view.machine_words(config.device, result["device"], memory_gb, typed=typed)
        return view.plan_markdown(result, machine=machine, current=config.to_dict())

    @ui_errors(message_at=1, outputs=N_ESTIMATE_OUTPUTS)
    def estimate(self, memory_gb: float | None, *values: Any):
        """Estimate peak memory of the run the settings describe; returns (plot, verdict, per-component
        table, suggestions note, suggestions, *suggestion buttons, notes, device note, measured, reading):
        the Detect device note and an earlier measurement are cleared (they were about earlier settings);
        `reading` is the device memory the answer used, which the plan table reuses (one usable figure)."""
        config = config_from_values(values)
        return self._estimate_outputs(_memory_result(self.ws, config, memory_gb), memory_gb=memory_gb)

    def estimate_picked(self, machine: str, memory_gb: float | None, *values: Any):
        """The Estimate button: `estimate` for the machine picked; for `CUSTOM_MACHINE` the answer names the
        memory as typed, and with nothing typed yet it asks for it (`TYPE_THE_MEMORY`) instead of answering
        about the machine picked before."""
        if machine == CUSTOM_MACHINE and not memory_gb:
            outputs = [gr.skip()] * N_ESTIMATE_OUTPUTS
            outputs[1] = TYPE_THE_MEMORY
            return tuple(outputs)
        config = config_from_values(values)
        return self._estimate_outputs(_memory_result(self.ws, config, memory_gb), memory_gb=memory_gb,
                                      typed=machine == CUSTOM_MACHINE)

    def estimate_for_machine(self, machine: str, memory_gb: float | None, *values: Any):
        """`estimate` after a preset machine was picked (its answer at once); nothing for the custom machine,
        whose budget is still to be typed."""
        if machine not in MACHINE_PRESETS:
            return tuple(gr.skip() for _ in range(N_ESTIMATE_OUTPUTS))
        return self.estimate(memory_gb, *values)

    def estimate_when_restored(self, restored: bool, machine: str, memory_gb: float | None, *values: Any):
        """Opening the tab: `estimate_for_machine` once the page shows the saved settings (`restored`); before
        that the widgets hold the defaults, so the answer waits (its place says so, the rest is untouched)."""
        if not restored:
            outputs = [gr.skip()] * N_ESTIMATE_OUTPUTS
            outputs[1] = RESTORING
            return tuple(outputs)
        return self.estimate_for_machine(machine, memory_gb, *values)

    def plan_working_when_restored(self, restored: bool):
        """`plan_working` once the page shows the saved settings, else nothing changes."""
        return self.plan_working() if restored else gr.skip()

    def plan_when_restored(self, restored: bool, reading: dict | None, memory_gb: float | None, *values: Any):
        """`plan` once the page shows the saved settings, else nothing changes."""
        return self.plan(reading, memory_gb, *values) if restored else gr.skip()

    def detect_and_estimate(self, machine: str, memory_gb: float | None, *values: Any):
        """Detect device: the answer again (`estimate_for_machine`) with the device note from the same reading
        of the device's memory, so the note and the answer show one usable figure."""
        outputs = list(self.estimate_for_machine(machine, memory_gb, *values))
        reading = outputs[-1]
        if isinstance(reading, dict) and reading.get("device"):
            from pipeline.memory.budget import DeviceMemory  # noqa: PLC0415

            device = reading["device"]
            outputs[-3] = (view.device_markdown(DeviceMemory(**reading).to_dict())
                           + f"  \nDefault quantization here: **{default_quantization(device)}**. "
                           f"{DEFAULT_QUANTIZATION_REASON.get(device, '')}")
        return tuple(outputs)

    def _estimate_outputs(self, data: dict, measured: int | None = None, memory_gb: float | None = None,
                          typed: bool = False):
        at_peak = data["components_at_peak"]
        figure = view.memory_bar(
            at_peak, data.get("usable_bytes"), device_total_bytes=data["device_memory"]["total_bytes"],
            measured_bytes=measured,
            title=f"Whole run's peak ({data['device']}, longest train row: {data['seq_len']} tokens)",
        )
        settings = data.get("settings") or {}
        machine = view.machine_words(settings.get("device", data["device"]), data["device"], memory_gb, typed=typed)
        preset = not typed and preset_for(settings.get("device", data["device"]), memory_gb) != CUSTOM_MACHINE
        verdict = view.memory_answer_markdown(data, machine, offer_calibration=not memory_gb,
                                              budget_words=view.budget_gb_words(memory_gb, typed=not preset)
                                              if memory_gb else None)
        if data.get("excluded_rows"):
            verdict += f"\n\nMax tokens per row {data['max_length']} leaves out **{plural(data['excluded_rows'], 'row')}**."
        verdict += view.length_note(data)
        other_family = dataset_family_note(built_report(self.ws), settings.get("model"))
        if other_family:  # the lengths the answer used are the other family's (the Dataset and Train tabs say so too)
            verdict = f"{other_family}\n\n{verdict}"
        notes = "\n".join(f"- {app_wording(note, here=self.here)}" for note in data.get("notes", []))
        suggestions = list(data.get("suggestions") or [])[:MAX_SUGGESTIONS]
        buttons = []
        for index in range(MAX_SUGGESTIONS):
            if index < len(suggestions):
                buttons.append(gr.Button(value=view.suggestion_label(suggestions[index]), visible=True))
            else:
                buttons.append(gr.Button(visible=False))
        hint = view.suggestions_markdown(suggestions, data["verdict"])
        return (figure, verdict, view.components_frame(data["components"]), hint, suggestions, *buttons,
                notes, "", "" if memory_gb else self.last_calibration_text(data),
                dict(data["device_memory"], typed=True) if typed else data["device_memory"])

    def last_calibration_text(self, data: dict) -> str:
        """The measured panel for an answer about this computer (`data`, `estimate_for_workspace`'s dict): the
        last calibration's measured peak against this answer's step (`view.measured_markdown`) when it measured
        these settings, so a reopened page shows it again; "" when there is none, it failed or is running, or it
        measured other settings (its figure would be about them)."""
        from pipeline.memory.calibration_job import calibration_status

        status = calibration_status(self.ws)
        result = status["result"] or {}
        if status["alive"] or status["state"] != "completed":
            return ""
        if {**(result.get("settings") or {}), "device": "auto"} != {**(data.get("settings") or {}), "device": "auto"}:
            return ""
        measured = result.get("measured") or {}
        peak = measured.get("peak_bytes") or measured.get("peak_memory_bytes")
        if not peak:
            return ""
        step = data.get("step_bytes") or data["total_bytes"]
        return view.measured_markdown(peak, step, measured)

    def apply_suggestion(self, index: int, suggestions: list[dict]):
        """Set the widgets to suggestion `index`'s settings (one click); returns one update per setting of
        `CONFIG_FIELDS`: a new value for each setting the suggestion names, `gr.skip()` (unchanged) for
        every other one."""
        if not suggestions or index >= len(suggestions):
            return tuple(gr.skip() for _ in CONFIG_FIELDS)
        changes = suggestions[index].get("changes") or {}
        return tuple(gr.update(value=changes[name]) if name in changes else gr.skip() for name in CONFIG_FIELDS)

    def calibrate_here(self, machine: str, quantization: str, quantization_chosen: bool, model: str | None):
        """First part of **Calibrate this machine**: it always measures this computer, so the machine becomes
        "This computer" (its device and budget, its default quantization unless the teacher chose one) and the
        answers about the machine picked before are cleared. Returns (machine, device, memory budget,
        quantization, question, the machine picked before in words or "" (`measure` says it), verdict,
        suggestions note, measured, device note, *suggestion buttons)."""
        before = ""
        if machine != THIS_COMPUTER:
            if machine in MACHINE_PRESETS:
                device, gb = MACHINE_PRESETS[machine]
                before = view.machine_words(device, device, gb)
            else:
                before = "the machine you described"
        waiting = CALIBRATING
        return (gr.update(value=THIS_COMPUTER), gr.update(value="auto"), gr.update(value=0, visible=False),
                self.device_defaults("auto", quantization, quantization_chosen),
                self.question(model, THIS_COMPUTER), before, waiting, "", "", "",
                *(gr.update(visible=False) for _ in range(MAX_SUGGESTIONS)))

    @ui_errors(message_at=0, outputs=2)
    def start_calibration(self, elsewhere: str | None, memory_gb: float | None, *values: Any):
        """"Calibrate this machine", after `calibrate_here` made the machine this computer: start the calibration
        in a process of its own (`pipeline.memory.calibration_job.start_calibration`: the precision check, the
        stand-in's probes, then one real step of these settings), or follow the one already running (a second
        click starts nothing). Returns (measured panel: the part and phase, timer on); the timer's
        `calibration_poll` follows it and refreshes the answer when it ends. Closing or reloading the page
        does not stop it (`calibration_on_load` re-attaches)."""
        from pipeline.memory.calibration_job import start_calibration

        config = config_from_values(values).replace(device="auto")
        status = start_calibration(self.ws, config.to_dict(), elsewhere=elsewhere or "")
        text = self.calibration_progress(status)
        if not status["started"]:
            text = "A calibration of this computer is already running: following it.\n\n" + text
        return text, gr.Timer(active=True)

    def calibration_progress(self, status: dict, now: float | None = None) -> str:
        """The running calibration's part and its phases in words, the done ones with their time, with the time
        since it started (Markdown): "⏳ Calibrating this computer · part 4 of 4: one training step of your
        settings · loading the model ✓ 14 s · the longest batch ✓ 2 s · one measured step … (1 min 05 s so
        far)"."""
        import time

        from pipeline.units import format_seconds

        step = status.get("progress") or {}
        part = CALIBRATION_PART_WORDS.get(step.get("part"), "starting")
        phase = step.get("phase")
        phase_words = f" · {PROBE_PHASE_WORDS[phase]}" if phase in PROBE_PHASE_WORDS and phase else ""
        shown = [entry for entry in step.get("phases") or [] if entry.get("phase") in PROBE_PHASE_WORDS]
        if shown:  # every phase of this part so far: the done ones with their time (a short one is not missed)
            phase_words = " · " + " · ".join(
                f"{PROBE_PHASE_WORDS[entry['phase']]} ✓ {format_seconds(entry['seconds'])}" if "seconds" in entry
                else f"{PROBE_PHASE_WORDS[entry['phase']]} …" for entry in shown)
        where = f" · part {step['index']} of {step['of']}: {part}" if step.get("index") else " · starting"
        since = status.get("started_at")
        last = status.get("last_seconds")
        of = f", of about {format_seconds(last)} last time here" if last else ""
        clock = f" ({format_seconds((now or time.time()) - since)} so far{of})" if since else ""
        return (f"⏳ **Calibrating this computer**{where}{phase_words}{clock}. It goes on if you close or reload "
                "this page; the answer above is refreshed when it is done.")

    def calibration_poll(self, memory_gb: float | None, *values: Any):
        """Timer tick while a calibration runs: its part and phase in the measured panel (the rest untouched);
        when it has ended, the answer for this computer again, now calibrated (`estimate`'s outputs, with
        what was measured in the measured panel, or why it failed), its plan table, and the timer off. Returns
        `estimate`'s outputs + (plan table, timer)."""
        from pipeline.memory.calibration_job import calibration_status

        status = calibration_status(self.ws)
        if status["alive"] and status["state"] == "running":
            outputs = [gr.skip()] * (N_ESTIMATE_OUTPUTS + 1)
            outputs[N_ESTIMATE_OUTPUTS - 2] = self.calibration_progress(status)
            return (*outputs, gr.Timer(active=True))
        result = status["result"] or {}
        config = config_from_values(values).replace(device="auto")
        if status["state"] != "completed":
            outputs = list(self.estimate(None, *values))
            outputs[-2] = error_panel(TrainingError(result.get("reason") or "The calibration did not run."), here=self.here)
            return (*outputs, self._plan_after(outputs[-1], values), gr.Timer(active=False))
        try:
            data = _memory_result(self.ws, config, None)
        except PipelineError as error:
            outputs = [gr.skip()] * (N_ESTIMATE_OUTPUTS + 1)
            outputs[1] = error_panel(error, here=self.here)
            return (*outputs, gr.Timer(active=False))
        measured = result.get("measured") or {}
        peak = measured.get("peak_bytes") or measured.get("peak_memory_bytes")
        same = {**(result.get("settings") or {}), "device": "auto"} == config.to_dict()
        step = (data.get("step_bytes") or data["total_bytes"]) if same else result.get("step_bytes")
        text = view.measured_markdown(peak, step, measured, elsewhere=status.get("elsewhere") or None)  # step vs step
        if measured.get("released"):  # a Try/Judge tutor let go of the GPU first (pipeline.tutor.infer.release_for)
            text = f"{measured['released']}\n\n{text}"
        outputs = list(self._estimate_outputs(data, measured=peak if same else None, memory_gb=None))
        outputs[-2] = text
        return (*outputs, self._plan_after(outputs[-1], values), gr.Timer(active=False))

    def _plan_after(self, reading: Any, values: tuple) -> Any:
        """The plan table for this computer from the answer's own reading of its memory (`plan`), or its
        message when it cannot be made."""
        try:
            return self.plan(reading if isinstance(reading, dict) else None, None, *values)
        except gr.Error as error:
            return f"✗ {error.message}"

    def calibration_on_load(self):
        """Page (re)opened: re-attach to a calibration still running (the machine is this computer, the answer
        waits for it, the measured panel shows its part and phase, the timer on); else nothing changes.
        Returns (machine, memory budget, verdict, measured, timer)."""
        from pipeline.memory.calibration_job import calibration_status

        status = calibration_status(self.ws)
        if not (status["alive"] and status["state"] == "running"):
            return gr.skip(), gr.skip(), gr.skip(), gr.skip(), gr.Timer(active=False)
        return (gr.update(value=THIS_COMPUTER), gr.update(value=0, visible=False), CALIBRATING,
                self.calibration_progress(status), gr.Timer(active=True))


def _memory_result(ws: Workspace, config: TrainConfig, memory_gb: float | None, *, measure: bool = False,
                   progress=None) -> dict:
    """The estimate of `python -m pipeline estimate --json` for the app: one call to
    `pipeline.memory.estimate_for_workspace`, the same function the command line prints, so the two
    cannot drift. `memory_gb` is the "The machine's memory (GB)" field: 0 or empty means the real device.
    `progress` hears a calibration's parts and phases (`measure`).
    """
    from pipeline import memory

    return memory.estimate_for_workspace(ws, config, memory_gb=float(memory_gb) if memory_gb else None,
                                         measure=measure, progress=progress)


def _number(field: str, label: str, **kwargs: Any) -> tuple[gr.Number, gr.Markdown]:
    """A number setting with its message line under it (`MemoryHandlers.field_message`). No `minimum=`:
    Gradio would refuse an out-of-range value with red "Error" badges over the page instead of a message."""
    with gr.Column(min_width=160):
        number = gr.Number(value=getattr(DEFAULTS, field), precision=0, label=label, info=SETTING_INFO[field],
                           **kwargs)
        message = gr.Markdown(elem_id=f"{field.replace('_', '-')}-message", elem_classes=["field-message"])
    return number, message


def _training_switches(d) -> tuple:
    """The Advanced settings' switches, made in the row the caller opened, with their defaults `d`:
    `(gradient_checkpointing, vision_tower, ple_on_cpu, quantize_audio_encoder, low_memory_heap)`."""
    gradient_checkpointing = gr.Checkbox(
        value=d.gradient_checkpointing, label="Gradient checkpointing (less memory, ~30 % slower)",
        info="Recomputes in the backward pass instead of keeping: much less memory, slower steps.")
    vision_tower = gr.Checkbox(value=d.vision_tower, label="Load the vision tower",
                               info="The tutor never sees images: untick to free ~0.55 GiB.")
    ple_on_cpu = gr.Checkbox(value=d.ple_on_cpu, label="Per-layer embeddings in CPU RAM (CUDA)",
                             info="~3.75 GiB off the GPU on E2B, from loading on; slightly slower steps.")
    quantize_audio_encoder = gr.Checkbox(
        value=d.quantize_audio_encoder, label="Quantize the audio encoder too",
        info="With 4bit/8bit and LoRA on the language model only: ~0.9 GiB less on E2B; slower audio "
             "encoding.")
    low_memory_heap = gr.Checkbox(  # nothing to give back where training runs on TCMalloc
        value=d.low_memory_heap, visible=training_allocator() != "tcmalloc",
        label="Low-memory mode (training on this computer's processor)",
        info="Gives freed memory back at once: 0.5-2 GiB less, steps about twice as long. Not used on "
             "a GPU (technically: glibc's mmap threshold pinned at 64 KiB).")
    return gradient_checkpointing, vision_tower, ple_on_cpu, quantize_audio_encoder, low_memory_heap


def _wire_field_messages(handlers: MemoryHandlers, fields: dict[str, tuple]) -> None:
    """Each number box says what is wrong with its value below it as it changes: `fields` is
    `{field name: (box, its message)}` (`handlers.field_message`)."""
    for name, (widget, message) in fields.items():
        widget.change(lambda value, name=name: handlers.field_message(name, value), inputs=widget,
                      outputs=message, show_progress="hidden")


def memory_tab(handlers: MemoryHandlers) -> SimpleNamespace:
    """Lay out the Memory tab and wire what stays inside it (machine presets, device defaults, field
    messages, Detect device); returns its widgets. The estimate, plan, calibrate and suggestion buttons need
    every setting widget, so `wire_memory_tab` wires them from `build_ui`."""
    d = DEFAULTS
    here = likely_device()
    with gr.Tab("3 · Memory", id="memory", elem_id="tab-memory") as tab:
        question = gr.Markdown(handlers.question(d.model), elem_id="memory-question")
        gr.Markdown("Pick the machine the tutor will be trained on. The answer is for the **longest** training row "
                    "(a recording with its text), not the average: that is the one that runs out of memory hours in.")
        with gr.Row(equal_height=True):
            machine = gr.Dropdown(list(MACHINE_CHOICES), value=THIS_COMPUTER, label="Machine", elem_id="machine",
                                  info="This computer, a typical GPU or Mac, or type the memory of another machine.",
                                  scale=2)
            memory_gb = gr.Number(value=0, label=MEMORY_GB_LABEL, visible=False, elem_id="memory-gb",
                                  info="As its box or system says it; 0: this computer's.")
            estimate_button = gr.Button("Estimate", variant="primary", elem_id="estimate", scale=0, min_width=160)
        memory_gb_message = gr.Markdown(elem_id="memory-gb-message", elem_classes=["field-message"])
        verdict_out = gr.Markdown(elem_id="verdict")
        suggestions_note = gr.Markdown(elem_id="suggestions-note")
        with gr.Row():
            suggestion_buttons = [
                gr.Button(visible=False, size="sm", elem_id=f"suggestion-{i}") for i in range(MAX_SUGGESTIONS)
            ]
        suggestions_state = gr.State([])
        with gr.Row(equal_height=True):
            measure_button = gr.Button("Calibrate this machine", elem_id="measure", scale=0, min_width=220)
            gr.Markdown(CALIBRATE_NOTE)
        measured_out = gr.Markdown(elem_id="measured")

        with gr.Accordion("Advanced settings", open=False, elem_id="memory-advanced"):
            gr.Markdown("The machine-learning settings of the run. The defaults serve; each says what it changes "
                        "for you. **Estimate** again after a change.")
            with gr.Row():
                device = gr.Dropdown(list(DEVICES), value=d.device, label="Device", elem_id="device",
                                     info=SETTING_INFO["device"] + " auto: CUDA GPU, then Apple silicon (MPS), then CPU.")
                detect_button = gr.Button("Detect device", scale=0)
                quantization = gr.Radio(list(QUANTIZATIONS), value=default_quantization(here), label="Quantization",
                                        info=SETTING_INFO["quantization"] + f" Default on {here}: "
                                             f"{default_quantization(here)}; picking a machine sets its default.")
            device_note = gr.Markdown(elem_id="device-note")
            with gr.Row():
                lora_rank, lora_rank_message = _number("lora_rank", "LoRA rank r")
                lora_targets = gr.Radio(list(LORA_TARGETS), value=d.lora_targets, label="LoRA on",
                                        info=SETTING_INFO["lora_targets"])
                optimizer = gr.Dropdown(list(OPTIMIZERS), value=d.optimizer, label="Optimizer",
                                        info=SETTING_INFO["optimizer"])
            with gr.Row():
                batch_size, batch_size_message = _number("batch_size", "Batch size")
                grad_accum, grad_accum_message = _number("grad_accum", "Gradient accumulation")
                max_length, max_length_message = _number("max_length", "Max tokens per row", elem_id="max-length")
            with gr.Row():
                (gradient_checkpointing, vision_tower, ple_on_cpu, quantize_audio_encoder,
                 low_memory_heap) = _training_switches(d)
            memory_plot = gr.Plot(label="What the peak is made of, against the usable memory", show_label=False,
                                  elem_id="memory-plot")
            with gr.Accordion("Details of the estimate: per component, and what each figure rests on", open=False):
                notes_out = gr.Markdown(elem_id="estimate-notes")
                components_df = gr.Dataframe(view.components_frame({}), interactive=False, show_label=False)
        with gr.Accordion("What else fits this machine? Each model, four ways to fine-tune it",
                          open=False, elem_id="plan-accordion"):
            plan_out = gr.Markdown(elem_id="plan-table", min_height=80)
        quantization_chosen = gr.State(False)
        # Inside the tab: a component made outside it is a child of gr.Tabs and shifts the tabs' order (the
        # Judge tab's button became a second "4 · Train").
        reading = gr.State(None)  # the device memory the answer used; the plan table reuses it (one usable figure)
        elsewhere = gr.State("")  # the machine picked before Calibrate this machine switched to this computer
        calibration_timer = gr.Timer(POLL_SECONDS, active=False)  # follows a calibration running in its own process

    _wire_field_messages(handlers, {
        "lora_rank": (lora_rank, lora_rank_message), "batch_size": (batch_size, batch_size_message),
        "grad_accum": (grad_accum, grad_accum_message), "max_length": (max_length, max_length_message),
        "memory_gb": (memory_gb, memory_gb_message)})
    settings = {"device": device, "quantization": quantization, "lora_rank": lora_rank,
                "lora_targets": lora_targets, "batch_size": batch_size, "grad_accum": grad_accum,
                "max_length": max_length, "gradient_checkpointing": gradient_checkpointing,
                "vision_tower": vision_tower, "ple_on_cpu": ple_on_cpu,
                "quantize_audio_encoder": quantize_audio_encoder, "low_memory_heap": low_memory_heap,
                "optimizer": optimizer}
    stale = [verdict_out, suggestions_note, measured_out, memory_plot, *suggestion_buttons, plan_out]
    for widget in (memory_gb, *settings.values()):
        widget.input(handlers.settings_changed, outputs=stale, show_progress="hidden")
    quantization.change(handlers.note_quantization, inputs=[quantization_chosen, device, quantization],
                        outputs=quantization_chosen, show_progress="hidden")
    # by hand only (`.input`): a preset sets the device and the budget together, restored settings keep theirs
    device.input(handlers.device_picked, inputs=[device, memory_gb, quantization, quantization_chosen],
                 outputs=[machine, memory_gb, quantization], show_progress="hidden")
    return SimpleNamespace(
        tab=tab, detect_button=detect_button, plan_out=plan_out, machine=machine, question=question,
        memory_gb=memory_gb, estimate_button=estimate_button, measure_button=measure_button,
        suggestion_buttons=suggestion_buttons, suggestions_state=suggestions_state, measured_out=measured_out,
        memory_plot=memory_plot, verdict_out=verdict_out, device_note=device_note, suggestions_note=suggestions_note,
        quantization_chosen=quantization_chosen, stale=stale, reading=reading, elsewhere=elsewhere,
        calibration_timer=calibration_timer,
        # The outputs of `estimate`, in order.
        estimate_outputs=[memory_plot, verdict_out, components_df, suggestions_note, suggestions_state,
                          *suggestion_buttons, notes_out, device_note, measured_out, reading],
        settings=settings,  # this tab's setting widgets, by `TrainConfig` field name
    )


def wire_memory_tab(handlers: MemoryHandlers, memory: SimpleNamespace, model: gr.components.Component,
                    setting_widgets: list, restored: gr.State | None = None) -> None:
    """Wire the Memory tab's events that read every setting (`setting_widgets`, in `CONFIG_FIELDS` order):
    a picked machine (its defaults, then its answer), Estimate, Detect device, opening the tab, Calibrate
    this machine and the suggestion buttons each give the answer, then the plan table (a sign of work
    first) from the same reading of the device's memory; the question follows the Model picker. `restored`
    (a `gr.State`, True once the page shows the saved settings): opening the tab before then estimates nothing
    (the widgets still hold the defaults)."""
    import functools

    settings = dict(zip(CONFIG_FIELDS, setting_widgets))
    estimate_inputs = [memory.memory_gb, *setting_widgets]

    def then_plan(event) -> None:
        event.then(handlers.plan_working, outputs=memory.plan_out, show_progress="hidden").then(
            handlers.plan, inputs=[memory.reading, *estimate_inputs], outputs=memory.plan_out)

    model.change(handlers.question, inputs=[model, memory.machine], outputs=memory.question, show_progress="hidden")
    model.input(handlers.settings_changed, outputs=memory.stale, show_progress="hidden")
    then_plan(memory.machine.input(
        handlers.choose_machine, inputs=[memory.machine, settings["quantization"], memory.quantization_chosen],
        outputs=[settings["device"], memory.memory_gb, settings["quantization"], memory.verdict_out,
                 memory.suggestions_note, memory.measured_out, memory.device_note, *memory.suggestion_buttons],
        show_progress="hidden").then(
        handlers.question, inputs=[model, memory.machine], outputs=memory.question, show_progress="hidden").then(
        handlers.estimate_for_machine, inputs=[memory.machine, *estimate_inputs], outputs=memory.estimate_outputs))
    then_plan(memory.estimate_button.click(handlers.estimate_picked, inputs=[memory.machine, *estimate_inputs],
                                           outputs=memory.estimate_outputs))
    then_plan(memory.detect_button.click(handlers.detect_and_estimate, inputs=[memory.machine, *estimate_inputs],
                                         outputs=memory.estimate_outputs))
    if restored is None:
        then_plan(memory.tab.select(handlers.estimate_for_machine, inputs=[memory.machine, *estimate_inputs],
                                    outputs=memory.estimate_outputs))
    else:
        memory.tab.select(handlers.estimate_when_restored, inputs=[restored, memory.machine, *estimate_inputs],
                          outputs=memory.estimate_outputs).then(
            handlers.plan_working_when_restored, inputs=restored, outputs=memory.plan_out, show_progress="hidden").then(
            handlers.plan_when_restored, inputs=[restored, memory.reading, *estimate_inputs], outputs=memory.plan_out)
    for index, button in enumerate(memory.suggestion_buttons):
        then_plan(button.click(functools.partial(handlers.apply_suggestion, index), inputs=memory.suggestions_state,
                               outputs=setting_widgets).then(
            handlers.estimate, inputs=estimate_inputs, outputs=memory.estimate_outputs))
    memory.measure_button.click(
        handlers.calibrate_here, inputs=[memory.machine, settings["quantization"], memory.quantization_chosen, model],
        outputs=[memory.machine, settings["device"], memory.memory_gb, settings["quantization"], memory.question,
                 memory.elsewhere, memory.verdict_out, memory.suggestions_note, memory.measured_out, memory.device_note,
                 *memory.suggestion_buttons], show_progress="hidden").then(
        handlers.start_calibration, inputs=[memory.elsewhere, *estimate_inputs],
        outputs=[memory.measured_out, memory.calibration_timer], show_progress="hidden")
    # The calibration runs in its own process: the timer follows it, and its end refreshes the answer and the plan.
    memory.calibration_timer.tick(handlers.calibration_poll, inputs=estimate_inputs,
                                  outputs=[*memory.estimate_outputs, memory.plan_out, memory.calibration_timer],
                                  show_progress="hidden")
