"""Tab 2, Dataset: build the train/eval split; show token lengths, speakers, excluded rows and the exports.

A build also sets the Memory tab's "Max length" to the longest row (at least 256), so the estimate
that follows is for the batch that actually runs; `build_ui` wires that output across the tabs.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import gradio as gr

from pipeline.errors import PipelineError
from ui import formatting as fmt
from ui.common import DEFAULTS, model_text, progress_callback, ui_errors
from ui.state import AppState
from ui.wording import BUILD_WIDGETS, app_wording


class DatasetHandlers:
    """The Dataset tab's handlers: build the dataset, and show the last build when the page opens."""

    def __init__(self, state: AppState):
        self.state = state

    @property
    def ws(self):
        """The workspace whose samples are built into `WS/dataset`."""
        return self.state.ws

    @ui_errors(message_at=0, outputs=6, widgets=BUILD_WIDGETS)
    def build_dataset(self, model: str, eval_fraction: float, seed: float, max_length: float,
                      progress: gr.Progress = gr.Progress()):
        """Build the train/eval dataset; returns (summary, speakers, histogram, excluded, export files, memory max length)."""
        from pipeline.data.dataset import build_dataset

        report = build_dataset(
            self.ws, model_text(model) or DEFAULTS.model, eval_fraction=float(eval_fraction or 0.0),
            seed=int(DEFAULTS.seed if seed is None else seed),
            max_length=int(DEFAULTS.max_length if max_length is None else max_length),
            progress=progress_callback(progress, unit="rows"),
        )
        return self._dataset_outputs(report.to_dict())

    def dataset_on_load(self):
        """Page (re)opened: the last build's report (settings are restored by `restore_settings`)."""
        from pipeline.data.dataset import load_build_report

        try:
            report = load_build_report(self.ws)
        except PipelineError:
            # Empty frames (not None) keep the real column headers instead of Gradio's "1 2 3".
            return ("No dataset built yet.", fmt.speakers_frame({}), None, fmt.excluded_frame([]), None, gr.skip())
        return (*self._dataset_outputs(report)[:-1], gr.skip())

    def _dataset_outputs(self, report: dict):
        splits = report.get("splits", {})
        stats = report.get("length_stats", {}) or {}
        lines = [
            "**Rows:** " + ", ".join(f"{name} **{rows}**" for name, rows in splits.items())
            + f" (split by {report.get('split_method', '?')}, seed {report.get('seed')})",
            f"**Excluded:** {len(report.get('excluded', []))} row(s)",
        ]
        train_lengths = stats.get("row_tokens") or []
        if stats.get("count"):
            longest_train = f"; longest train row {max(train_lengths)}" if train_lengths else ""
            lines.append(
                f"**Tokens per row** (train and eval): min {stats['min']}, median {stats['median']:g}, "
                f"p90 {stats['p90']}, longest **{stats['max']}**{longest_train} (limit {report.get('max_length')})"
            )
        for kind, k in (report.get("kinds") or {}).items():  # per sample kind (read aloud, free speech, dialogue)
            t = k.get("tokens") or {}
            lines.append(f"**{kind.replace('_', ' ')}:** {k['rows']} rows (train {k['train']}, eval {k['eval']}, "
                         f"excluded {k['excluded']})" + (f", tokens {t['min']}–{t['max']}, median {t['median']:g}" if t else ""))
        lines += [f"- {app_wording(note, widgets=BUILD_WIDGETS)}" for note in report.get("notes", [])]
        lines.append(f"Saved to `{report.get('path')}` (model `{report.get('model')}`).")
        figure = fmt.length_histogram_bins(stats.get("histogram") or [], report.get("max_length"), stats.get("max"),
                                           train_lengths=train_lengths)
        exports = [path for path in (report.get("exports") or {}).values() if Path(path).exists()]
        longest = int(stats.get("max") or 0)
        memory_max_length = gr.update(value=max(256, longest)) if longest else gr.skip()
        return (
            "\n\n".join(lines),
            fmt.speakers_frame(report.get("speakers", {})),
            figure,
            fmt.excluded_frame([{**item, "reason": app_wording(item.get("reason"), markdown=False, widgets=BUILD_WIDGETS)} for item in report.get("excluded", [])]),
            exports or None,
            memory_max_length,
        )


def dataset_tab() -> SimpleNamespace:
    """Lay out the Dataset tab; returns its widgets (its events need the Memory tab's max length: `build_ui`)."""
    d = DEFAULTS
    with gr.Tab("2 · Dataset", id="dataset", elem_id="tab-dataset"):
        with gr.Row():
            eval_fraction = gr.Slider(0.0, 0.5, value=0.2, step=0.05, label="Held-out share (eval split)",
                                      info="Learners are kept in one split when speakers are known.")
            seed_in = gr.Number(value=d.seed, precision=0, label="Split seed")
            build_max_length = gr.Number(value=d.max_length, precision=0, minimum=256, elem_id="build-max-length",
                                         label="Max tokens per row",
                                         info="Longer rows are listed below and left out, never cut.")
        build_button = gr.Button("Build dataset", variant="primary", elem_id="build-dataset")
        dataset_summary = gr.Markdown("No dataset built yet.", elem_id="dataset-summary")
        with gr.Row():
            length_plot = gr.Plot(show_label=False, elem_id="length-plot")
            with gr.Column():
                speakers_df = gr.Dataframe(fmt.speakers_frame({}), label="Speakers per split", interactive=False,
                                           elem_id="speakers-table", wrap=True)
                excluded_df = gr.Dataframe(fmt.excluded_frame([]), label="Rows left out, with the reason",
                                           interactive=False, elem_id="excluded-table", wrap=True)
        export_files = gr.File(label="Export (JSONL with messages; Parquet with audio)",
                               file_count="multiple", interactive=False, elem_id="exports")
    return SimpleNamespace(
        eval_fraction=eval_fraction, seed=seed_in, build_max_length=build_max_length, build_button=build_button,
        # The first five outputs of `build_dataset` / `dataset_on_load`, in order (the sixth is Memory's max length).
        outputs=[dataset_summary, speakers_df, length_plot, excluded_df, export_files],
    )
