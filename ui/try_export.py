"""The Try tab's "Take the tutor out" section: export a run (adapter zip, merged model, cloud job
bundle, GGUF for llama.cpp / Ollama) and bring back a run trained elsewhere.

Each handler calls one `pipeline/` function (`pipeline.export.cli.export_run`,
`pipeline.export.import_run.import_run`); both import torch only when the merged export needs it.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import gradio as gr

from pipeline.errors import ExportError, ImportRunError
from ui import try_view as view
from ui.common import TabHandlers, cleared, export_choices, export_choices_note, export_preview, quant_choices, ui_errors

class ExportHandlers(TabHandlers):
    """Export the chosen run; import a run folder or archive into this workspace."""

    here = "Try tab"

    @ui_errors(message_at=0, outputs=2)
    def export(self, run_name: str, fmt: str, out_dir: str = "", quant: str | None = None) -> tuple[str, str | None]:
        """Export `run_name` as `fmt` (adapter / merged / bundle / gguf / gguf-text-only; `quant`: the GGUF's
        weight type, `ui.common.quant_choices`); returns (markdown, file to download
        or None: the zip or the .tar.gz when it lies in the workspace, which the app may serve). What went
        wrong shows in the export note, in the app's words (the button cleared the last export's file first)."""
        from pipeline.export.cli import export_run

        if not run_name:
            raise ExportError("No run picked: choose a trained run in **Tuned run (adapter)** above (the Train tab "
                              "makes one; a stopped run has an adapter too), then press Export.")
        if run_name == view.SCORER_CHOICE:
            raise ExportError(f"The {view.SCORER_CHOICE} has nothing to export: it is not a trained run, and it comes "
                              "with the app (it needs no model file). Pick a trained run above to export a tutor.")
        from pipeline.export.gguf import GEMMA3N_DEAF

        try:
            result = export_run(self.state.ws, run_name, fmt or "adapter", self.state.typed_path(out_dir) or None,
                                quant=(quant or None) if (fmt or "").startswith("gguf") else None)
        except ExportError as error:
            if str(error) == GEMMA3N_DEAF.format(run=run_name):  # said for the command line: the app's choices instead
                raise ExportError(view.no_gguf_for_gemma3n(run_name)) from error
            raise
        download = result.get("archive") or (result["path"] if result["format"] == "adapter" else None)
        if download and not Path(download).resolve().is_relative_to(self.state.ws.root):
            download = None  # the app serves files from the workspace only
        return view.export_markdown(run_name, result, downloadable=bool(download)), download

    def quants(self, run_name: str | None, fmt: str | None, quant: str | None) -> dict:
        """The weight types with this run's expected sizes (`ui.common.quant_choices`), shown for a GGUF only."""
        offered = quant_choices(export_preview(self.state.ws, run_name or None))
        value = quant if quant in {value for _, value in offered} else offered[0][1]
        return gr.update(choices=offered, value=value, visible=(fmt or "").startswith("gguf"))

    def choices(self, run_name: str | None, fmt: str | None) -> tuple[dict, str]:
        """The export choices for the picked run (`ui.common.export_choices`: its own merged size, the Ollama /
        llama.cpp file only for a tutor that hears there) and the note of why a choice is missing; the picked
        choice stays when the run still offers it, else the adapter zip. Returns (radio update, Markdown)."""
        preview = export_preview(self.state.ws, run_name or None)
        offered = export_choices(self.state.ws, run_name or None, preview)
        value = fmt if fmt in {value for _, value in offered} else "adapter"
        return gr.update(choices=offered, value=value), export_choices_note(self.state.ws, run_name or None, preview)

    @ui_errors(message_at=0, outputs=1)
    def import_run(self, source: str, name: str = "") -> str:
        """Copy a run trained elsewhere (its folder or a .tar.gz) into this workspace; returns markdown
        with what was checked and what differs (or, in the same note, what stopped the import)."""
        from pipeline.export.import_run import import_run

        source = self.state.typed_path(source)
        if not source:
            raise ExportError("No run given to import: type the path of the run folder copied back from the other "
                              "machine (OUTPUT/runs/NAME) or of its .tar.gz, then press Import run.")
        try:
            result = import_run(self.state.ws, source, name=(name or "").strip() or None)
        except ImportRunError as error:  # the command line's words name the run folder's files: the app says it
            raise ExportError(view.import_refusal(error.reason, error.facts)) from error
        return view.import_markdown(result)


def export_section(handlers: ExportHandlers, run: gr.Dropdown) -> SimpleNamespace:
    """Lay out the section (inside the Try tab, under its run list `run`) and wire its buttons;
    returns the import button, whose success the page wires to refresh the run lists."""
    with gr.Accordion("Take the tutor out: export a run, or bring one back", open=False, elem_id="export-section"):
        with gr.Row():
            fmt = gr.Radio(export_choices(handlers.state.ws, None), value="adapter", label="Export the tuned run above as",
                           elem_id="export-format")
            out_dir = gr.Textbox(label="Output folder (optional)", placeholder="empty: the exports folder of your workspace folder",
                                 elem_id="export-out")
        quant = gr.Radio(quant_choices(None), value="q8_0", visible=False, elem_id="export-quant",
                         label="Size of the file for llama.cpp / Ollama (the audio part always stays full size)")
        choices_note = gr.Markdown(elem_id="export-choices-note")
        export_button = gr.Button("Export", elem_id="export-button")
        export_note = gr.Markdown(elem_id="export-note")
        export_file = gr.File(label="Download", interactive=False, elem_id="export-file")
        with gr.Row():
            source = gr.Textbox(label="Run trained elsewhere: its folder or .tar.gz",
                                placeholder="e.g. /home/me/NAME (copied back from the GPU machine)", elem_id="import-source")
            name = gr.Textbox(label="Name here (optional)", elem_id="import-name")
        import_button = gr.Button("Import run", elem_id="import-run-button")
        import_note = gr.Markdown(elem_id="import-note")
    # The note and the file of the export before never stand beside this one's (a ✗ beside the last zip).
    export_button.click(cleared("", None), outputs=[export_note, export_file], show_progress="hidden").then(
        handlers.export, inputs=[run, fmt, out_dir, quant], outputs=[export_note, export_file])
    run.change(handlers.choices, inputs=[run, fmt], outputs=[fmt, choices_note], show_progress="hidden").then(
        handlers.quants, inputs=[run, fmt, quant], outputs=quant, show_progress="hidden")
    fmt.change(handlers.quants, inputs=[run, fmt, quant], outputs=quant, show_progress="hidden")
    imported = import_button.click(handlers.import_run, inputs=[source, name], outputs=import_note)
    return SimpleNamespace(imported=imported)
