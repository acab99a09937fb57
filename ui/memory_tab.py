"""Tab 3, Memory: will the fine-tune fit? What this machine can do, the estimate (or a measured step) of the
run the settings describe, and suggestions applied in one click.

The table at the top is `pipeline.memory.plan.plan_for_workspace` (`python -m pipeline plan --json`),
the estimate `pipeline.memory.estimate_for_workspace` (`python -m pipeline estimate --json`), so the
app and the command line cannot drift. The tab also holds the memory-relevant training settings;
with the Train tab's they form one `TrainConfig`.
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
from pipeline.workspace import Workspace
from ui import formatting as fmt
from ui.common import CONFIG_FIELDS, DEFAULTS, config_from_values, ui_errors
from ui.state import AppState
from ui.wording import app_wording

MAX_SUGGESTIONS = 4


class MemoryHandlers:
    """The Memory tab's handlers: detect the device, estimate, measure, apply a suggestion."""

    def __init__(self, state: AppState):
        self.state = state

    @property
    def ws(self):
        """The workspace whose built dataset gives the longest row."""
        return self.state.ws

    @ui_errors(message_at=0, outputs=1)
    def detect_device(self, device: str, memory_gb: float | None = None) -> str:
        """Which device `device` resolves to and how much memory it has (total, free, usable)."""
        from pipeline.memory import device_memory
        from pipeline.training.model import resolve_device

        resolved = resolve_device(device or "auto")
        text = fmt.device_markdown(device_memory(resolved, float(memory_gb) if memory_gb else None).to_dict())
        return text + f"  \nDefault quantization here: **{default_quantization(resolved)}**. {DEFAULT_QUANTIZATION_REASON[resolved]}"

    @ui_errors
    def plan(self, memory_gb: float | None, *values: Any) -> str:
        """What can this machine do? The plan table (E2B/E4B x full / LoRA / int8 / QLoRA) for the settings'
        device and budget, each row starting from the other settings shown."""
        from pipeline.memory.plan import plan_for_workspace

        config = config_from_values(values)
        result = plan_for_workspace(self.ws, config, memory_gb=float(memory_gb) if memory_gb else None)
        return fmt.plan_markdown(result)

    @ui_errors(message_at=1, outputs=5 + MAX_SUGGESTIONS)
    def estimate(self, memory_gb: float | None, *values: Any):
        """Estimate peak memory of the run the settings describe; returns plot, verdict, table, suggestions."""
        config = config_from_values(values)
        return self._estimate_outputs(_memory_result(self.ws, config, memory_gb))

    def _estimate_outputs(self, data: dict, measured: int | None = None):
        at_peak = data["components_at_peak"]
        figure = fmt.memory_bar(
            at_peak, data.get("usable_bytes"), device_total_bytes=data["device_memory"]["total_bytes"],
            measured_bytes=measured,
            title=f"Estimated peak ({data['device']}, batches padded to the longest train row: {data['seq_len']} tokens)",
        )
        verdict = fmt.verdict_markdown(data["verdict"], data["total_bytes"], data["usable_bytes"], data.get("device_memory"))
        if data.get("excluded_rows"):
            verdict += f"\n\nMax length {data['max_length']} leaves out **{data['excluded_rows']}** row(s)."
        verdict += _length_note(data)
        verdict += "\n\n" + "\n".join(f"- {app_wording(note)}" for note in data.get("notes", []))
        suggestions = list(data.get("suggestions") or [])[:MAX_SUGGESTIONS]
        buttons = []
        for index in range(MAX_SUGGESTIONS):
            if index < len(suggestions):
                buttons.append(gr.Button(value=fmt.suggestion_label(suggestions[index]), visible=True))
            else:
                buttons.append(gr.Button(visible=False))
        hint = fmt.suggestions_markdown(suggestions, data["verdict"])
        return (figure, verdict, fmt.components_frame(data["components"]), hint, suggestions, *buttons)

    def apply_suggestion(self, index: int, suggestions: list[dict]):
        """Set the widgets to suggestion `index`'s settings (one click); returns one update per setting of
        `CONFIG_FIELDS`: a new value for each setting the suggestion names, `gr.skip()` (unchanged) for
        every other one."""
        if not suggestions or index >= len(suggestions):
            return tuple(gr.skip() for _ in CONFIG_FIELDS)
        changes = suggestions[index].get("changes") or {}
        return tuple(gr.update(value=changes[name]) if name in changes else gr.skip() for name in CONFIG_FIELDS)

    @ui_errors(message_at=0, outputs=2)
    def measure(self, memory_gb: float | None, *values: Any, progress: gr.Progress = gr.Progress()):
        """Run the real one-step probe in a child process; returns (markdown, plot with the measured peak)."""
        config = config_from_values(values)
        if progress is not None:
            progress(None, desc="Running one real training step on the longest batch (a child process)…")
        data = _memory_result(self.ws, config, memory_gb, measure=True)
        measured = data["measured"]
        peak = measured.get("peak_bytes") or measured.get("peak_memory_bytes")
        text = fmt.measured_markdown(peak, data.get("step_bytes") or data["total_bytes"], measured)  # step vs step
        if measured.get("released"):  # a Try/Judge tutor let go of the GPU first (pipeline.tutor.infer.release_for)
            text = f"{measured['released']}\n\n{text}"
        return text, self._estimate_outputs(data, measured=peak)[0]


def _length_note(data: dict) -> str:
    """Why the estimate's row length differs from the Max length box, when it does (Markdown, or '')."""
    seq_len, max_length = data.get("seq_len"), data.get("max_length")
    if not seq_len or not max_length or seq_len >= max_length:
        return ""
    return (f"\n\n**Why {seq_len} tokens and not {max_length}?** Max length ({max_length}) is only a limit: longer "
            "rows are left out. Training pads each micro-batch to its longest row, so the estimate uses the longest "
            f"**train** row the limit keeps ({seq_len} tokens). A dataset build sets Max length to the longest row "
            "of train and eval together; eval rows run without gradients and need less memory.")


def _memory_result(ws: Workspace, config: TrainConfig, memory_gb: float | None, *, measure: bool = False) -> dict:
    """The estimate of `python -m pipeline estimate --json` for the app: one call to
    `pipeline.memory.estimate_for_workspace`, the same function the command line prints, so the two
    cannot drift. `memory_gb` is the "Memory budget (GiB)" field: 0 or empty means the real device.
    """
    from pipeline import memory

    return memory.estimate_for_workspace(ws, config, memory_gb=float(memory_gb) if memory_gb else None,
                                         measure=measure)


def memory_tab(handlers: MemoryHandlers) -> SimpleNamespace:
    """Lay out the Memory tab and wire device detection; returns its widgets (the estimate, measure and
    suggestion buttons need every setting widget, so `build_ui` wires them)."""
    d = DEFAULTS
    with gr.Tab("3 · Memory", id="memory", elem_id="tab-memory") as tab:
        gr.Markdown("**What can this machine do?** Gemma 3n E2B and E4B, fully fine-tuned or with LoRA, on "
                    "bf16, int8 or 4-bit weights, for your dataset's longest row and the settings below.")
        plan_out = gr.Markdown(elem_id="plan-table")
        gr.Markdown("Will the fine-tune fit? The estimate uses your dataset's **longest** row, "
                    "not the average: that is the batch that runs out of memory hours in.")
        with gr.Row():
            device = gr.Dropdown(list(DEVICES), value=d.device, label="Device", elem_id="device",
                                 info="auto: CUDA GPU, then Apple silicon (MPS), then CPU")
            memory_gb = gr.Number(value=0, label="Memory budget (GiB)",
                                  info="0: use what the device reports; or type your own budget.")
            detect_button = gr.Button("Detect device", scale=0)
        device_note = gr.Markdown(elem_id="device-note")
        with gr.Row():
            here = likely_device()
            quantization = gr.Radio(list(QUANTIZATIONS), value=default_quantization(here), label="Quantization",
                                    info=f"4bit = NF4 weights (bitsandbytes). Default on {here}: "
                                         f"{default_quantization(here)} (why: under the device, after Detect).")
            lora_rank = gr.Number(value=d.lora_rank, precision=0, minimum=1, label="LoRA rank r")
            lora_targets = gr.Radio(list(LORA_TARGETS), value=d.lora_targets, label="LoRA on")
            optimizer = gr.Dropdown(list(OPTIMIZERS), value=d.optimizer, label="Optimizer")
        with gr.Row():
            batch_size = gr.Number(value=d.batch_size, precision=0, minimum=1, label="Batch size")
            grad_accum = gr.Number(value=d.grad_accum, precision=0, minimum=1, label="Gradient accumulation")
            max_length = gr.Number(value=d.max_length, precision=0, minimum=256, label="Max length (tokens)",
                                   info="Set to the dataset's longest row after a build.", elem_id="max-length")
            gradient_checkpointing = gr.Checkbox(value=d.gradient_checkpointing,
                                                 label="Gradient checkpointing (less memory, ~30 % slower)")
        with gr.Row():
            vision_tower = gr.Checkbox(value=d.vision_tower, label="Load the vision tower",
                                       info="The tutor never sees images: untick to free ~0.55 GiB.")
            ple_on_cpu = gr.Checkbox(value=d.ple_on_cpu, label="Per-layer embeddings in CPU RAM (CUDA)",
                                     info="~3.75 GiB off the GPU on E2B, from loading on; slightly slower steps.")
            quantize_audio_encoder = gr.Checkbox(
                value=d.quantize_audio_encoder, label="Quantize the audio encoder too",
                info="With 4bit/8bit and LoRA on the language model only: ~0.9 GiB less on E2B; slower audio encoding.")
        with gr.Row():
            estimate_button = gr.Button("Estimate", variant="primary", elem_id="estimate")
            measure_button = gr.Button("Measure (one real step)", elem_id="measure")
        verdict_out = gr.Markdown(elem_id="verdict")
        memory_plot = gr.Plot(show_label=False, elem_id="memory-plot")
        suggestions_note = gr.Markdown(elem_id="suggestions-note")
        with gr.Row():
            suggestion_buttons = [
                gr.Button(visible=False, size="sm", elem_id=f"suggestion-{i}") for i in range(MAX_SUGGESTIONS)
            ]
        suggestions_state = gr.State([])
        measured_out = gr.Markdown(elem_id="measured")
        with gr.Accordion("Estimate per component (bytes)", open=False):
            components_df = gr.Dataframe(fmt.components_frame({}), interactive=False, show_label=False)

    detect_button.click(handlers.detect_device, inputs=[device, memory_gb], outputs=device_note)
    tab.select(handlers.detect_device, inputs=[device, memory_gb], outputs=device_note)
    return SimpleNamespace(
        tab=tab, detect_button=detect_button, plan_out=plan_out,
        memory_gb=memory_gb, estimate_button=estimate_button, measure_button=measure_button,
        suggestion_buttons=suggestion_buttons, suggestions_state=suggestions_state, measured_out=measured_out,
        memory_plot=memory_plot,
        # The outputs of `estimate`, in order.
        estimate_outputs=[memory_plot, verdict_out, components_df, suggestions_note, suggestions_state,
                          *suggestion_buttons],
        # This tab's setting widgets, by `TrainConfig` field name.
        settings={"device": device, "quantization": quantization, "lora_rank": lora_rank,
                  "lora_targets": lora_targets, "batch_size": batch_size, "grad_accum": grad_accum,
                  "max_length": max_length, "gradient_checkpointing": gradient_checkpointing,
                  "vision_tower": vision_tower, "ple_on_cpu": ple_on_cpu,
                  "quantize_audio_encoder": quantize_audio_encoder, "optimizer": optimizer},
    )
