"""Tab 2, Dataset: build the train/eval split; show token lengths, speakers, excluded rows and the exports.

A build also sets the Memory tab's "Max tokens per row" to the longest row (at least 256), so the estimate
that follows is for the batch that actually runs; `build_ui` wires that output across the tabs. The
tab's text, tables and histogram are `ui/dataset_view.py`; its Draft feedback section (the Classical scorer's drafts
for recordings without feedback) is `ui/dataset_drafts.py`.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import gradio as gr

from pipeline.errors import PipelineError
from ui import dataset_view as view
from ui.dataset_drafts import DraftHandlers, drafts_section
from ui.common import (TabHandlers, DEFAULTS, LOADING, built_report, dataset_family_note, dataset_sentence, filled_on_load,
                       model_text, progress_callback, range_note, share_in_range, ui_errors, whole_number_in_range)
from ui.wording import BUILD_WIDGETS, app_wording, not_here

BUILD_MAX_LENGTH_RANGE = (256, 32768)
"""The Dataset tab's "Longest row to keep" (tokens; the build's `--max-length`, a name apart from the Memory
tab's "Max tokens per row", the training's limit, which a build sets to its longest row): a row holds a clip's
tokens (`clip_tokens_text`: ~192 on Gemma 3n) plus
the texts (a read-aloud row of the sample pack is ~370), and Gemma 3n reads at most 32,768 tokens."""
BUILD_MAX_LENGTH_LABEL = "Longest row to keep"
BUILD_MAX_LENGTH_INFO = ("From {low} to {high} tokens. A token is a piece of a word; each clip takes {clip_tokens}. "
                         "Longer recordings are listed below and left out, never cut. The build then sets the Memory "
                         "tab's Max tokens per row to the longest row it kept.")
"""The text under "Longest row to keep" (`low`, `high`: `BUILD_MAX_LENGTH_RANGE`; `clip_tokens`: `clip_tokens_text`)."""


def clip_tokens_text(model: str | None) -> str:
    """What one clip costs in tokens for `model` (hub id or folder), as every figure on the tab says it: its
    family's `ModelFamily.clip_tokens_text` ("~192" for Gemma 3n, "~25 per second of audio, at most 752" for
    Gemma 4); the default family's for an empty box or a folder whose config cannot be read."""
    from pipeline.model.catalog import DEFAULT_FAMILY, family_for

    try:
        family = family_for(model_text(model) or DEFAULTS.model)
    except PipelineError:
        family = DEFAULT_FAMILY
    return family.clip_tokens_text()


def max_length_info(model: str | None) -> str:
    """The text under "Longest row to keep" for `model` (`BUILD_MAX_LENGTH_INFO`)."""
    low, high = BUILD_MAX_LENGTH_RANGE
    return BUILD_MAX_LENGTH_INFO.format(low=low, high=high, clip_tokens=clip_tokens_text(model))
EVAL_SHARE_RANGE = (0.0, 0.5)
"""The held-out share a build takes (`pipeline.data.dataset.build_dataset`'s eval_fraction)."""
EVAL_SHARE_LABEL = "Held-out share"


class DatasetHandlers(TabHandlers):
    """The Dataset tab's handlers: build the dataset, and show the last build when the page opens."""

    here = "Dataset tab"

    def __init__(self, state):
        super().__init__(state)
        self.drafts = DraftHandlers(state)

    @ui_errors(message_at=0, outputs=6, widgets=BUILD_WIDGETS)
    def build_dataset(self, model: str, eval_fraction: float, seed: float, max_length: float,
                      progress: gr.Progress = gr.Progress()):
        """Build the train/eval dataset; returns (summary, speakers, histogram, excluded, export files, memory max length)."""
        from pipeline.data.dataset import build_dataset

        limit = whole_number_in_range(DEFAULTS.max_length if max_length is None else max_length,
                                      *BUILD_MAX_LENGTH_RANGE, BUILD_MAX_LENGTH_LABEL)
        report = build_dataset(
            self.ws, model_text(model) or DEFAULTS.model,
            eval_fraction=share_in_range(0.0 if eval_fraction is None else eval_fraction, *EVAL_SHARE_RANGE,
                                         EVAL_SHARE_LABEL),
            seed=int(DEFAULTS.seed if seed is None else seed), max_length=limit,
            progress=progress_callback(progress, unit="rows"),
        )
        return self._dataset_outputs(report.to_dict())

    @staticmethod
    def max_length_update(model: str | None):
        """The model box changed: "Longest row to keep" says that model's clip cost (`max_length_info`)."""
        return gr.update(info=max_length_info(model))

    def headline(self) -> str:
        """The tab's first line: the built dataset in a teacher's words (`ui.common.dataset_sentence`)."""
        return dataset_sentence(built_report(self.ws), where_left_out="listed below, with the reason", here=self.here)

    def model_note(self, model: str | None) -> str:
        """Under the headline: that the built dataset was built for another model family than the one picked,
        and to build it again (`ui.common.dataset_family_note`); "" when it fits."""
        return not_here(dataset_family_note(built_report(self.ws), model), self.here)

    def refresh(self):
        """After a build: (headline, library changes)."""
        return self.headline(), self.library_changes()

    def library_changes(self) -> str:
        """Beside Build: how the sample library changed since the last build (added, edited, deleted
        samples, `pipeline.data.dataset.library_changes`), or that it did not (Markdown)."""
        from pipeline.data.dataset import library_changes

        try:
            changes = library_changes(self.ws)
        except PipelineError as error:
            return f"✗ {app_wording(str(error), here=self.here)}"
        return view.library_changes_markdown(changes)

    def dataset_on_load(self):
        """Page (re)opened: the last build's report (settings are restored by `restore_settings`)."""
        from pipeline.data.dataset import load_build_report

        try:
            report = load_build_report(self.ws)
        except PipelineError:
            # Empty frames (not None) keep the real column headers instead of Gradio's "1 2 3"; no summary: the
            # headline says "No dataset yet" already (said twice, one above the other, it was noise).
            return ("", view.speakers_frame({}), None, view.excluded_frame([]), None, gr.skip())
        return (*self._dataset_outputs(report)[:-1], gr.skip())

    def _dataset_outputs(self, report: dict):
        """A build report's outputs: (summary, speakers, histogram, rows left out, the export files that exist,
        the Memory tab's max length), the report's notes and reasons in the app's words."""
        stats = report.get("length_stats", {}) or {}
        notes = [app_wording(note, widgets=BUILD_WIDGETS, here=self.here) for note in report.get("notes", [])]
        clip_tokens = clip_tokens_text(report.get("model"))
        figure = view.length_histogram_bins(stats.get("histogram") or [], report.get("max_length"), stats.get("max"),
                                            train_lengths=stats.get("row_tokens") or [], clip_tokens=clip_tokens)
        exports = [path for path in (report.get("exports") or {}).values() if Path(path).exists()]
        longest = int(stats.get("max") or 0)
        memory_max_length = gr.update(value=max(256, longest)) if longest else gr.skip()
        return (
            view.summary_markdown(report, notes, clip_tokens),
            view.speakers_frame(report.get("speakers", {})),
            figure,
            view.excluded_frame([{**item, "reason": app_wording(item.get("reason"), markdown=False, widgets=BUILD_WIDGETS, here=self.here)} for item in report.get("excluded", [])]),
            exports or None,
            memory_max_length,
        )


def dataset_tab(handlers: DatasetHandlers) -> SimpleNamespace:
    """Lay out the Dataset tab; returns its widgets (the build needs the Memory tab's max length, so `build_ui`
    wires it; `refresh` is what the build's `.then` updates). The headline, the library's changes since the
    last build and the Max tokens check are wired here."""
    d = DEFAULTS
    with gr.Tab("2 · Dataset", id="dataset", elem_id="tab-dataset") as tab:
        headline = filled_on_load(gr.Markdown(LOADING, elem_id="dataset-headline"), handlers.headline)
        model_note = gr.Markdown(elem_id="dataset-model-note")  # built for another model family? (`build_ui` wires it)
        gr.Markdown("Building splits your recordings into a **training set** (the tutor learns from it) and a "
                    "**test set** (kept apart, to check the tutor on learners it has not heard).")
        with gr.Row():
            with gr.Column():
                eval_fraction = gr.Number(value=0.2, step=0.05, label=EVAL_SHARE_LABEL, elem_id="eval-fraction",
                                          info="From 0 to 0.5: the share of your recordings kept apart to test the "
                                               "tutor. Each learner stays on one side when learners are known.")
                eval_fraction_note = gr.Markdown(elem_id="eval-fraction-note")
            with gr.Column():
                build_max_length = gr.Number(value=d.max_length, precision=0, elem_id="build-max-length",
                                             label=BUILD_MAX_LENGTH_LABEL,
                                             info=max_length_info(d.model))
                max_length_note = gr.Markdown(elem_id="build-max-length-note")
        with gr.Accordion("Advanced settings", open=False, elem_id="dataset-advanced"):
            seed_in = gr.Number(value=d.seed, precision=0, label="Split seed",
                                info="Which learners go to the test set: the same seed and library give the "
                                     "same split; another seed draws another one.")
        changes = filled_on_load(gr.Markdown(LOADING, elem_id="library-changes"), handlers.library_changes)
        build_button = gr.Button("Build dataset", variant="primary", elem_id="build-dataset")
        dataset_summary = gr.Markdown(LOADING, elem_id="dataset-summary")  # the page load says what was built
        with gr.Row():
            length_plot = gr.Plot(show_label=False, elem_id="length-plot")
            with gr.Column():
                speakers_df = gr.Dataframe(view.speakers_frame({}), label="Speakers per split", interactive=False,
                                           elem_id="speakers-table", wrap=True)
                excluded_df = gr.Dataframe(view.excluded_frame([]), label="Rows left out, with the reason",
                                           interactive=False, elem_id="excluded-table", wrap=True)
        export_files = gr.File(label="Export (JSONL with messages; Parquet with audio)",
                               file_count="multiple", interactive=False, elem_id="exports")
        drafts = drafts_section(handlers.drafts)
    eval_fraction.change(range_note(*EVAL_SHARE_RANGE, EVAL_SHARE_LABEL, check=share_in_range), inputs=eval_fraction,
                         outputs=eval_fraction_note, show_progress="hidden")
    build_max_length.change(range_note(*BUILD_MAX_LENGTH_RANGE, BUILD_MAX_LENGTH_LABEL), inputs=build_max_length,
                            outputs=max_length_note, show_progress="hidden")
    tab.select(handlers.library_changes, outputs=changes, show_progress="hidden")
    tab.select(handlers.headline, outputs=headline, show_progress="hidden")
    return SimpleNamespace(
        tab=tab, refresh=(handlers.refresh, [headline, changes]), model_note=model_note, drafts=drafts,
        eval_fraction=eval_fraction, seed=seed_in, build_max_length=build_max_length, build_button=build_button,
        # The first five outputs of `build_dataset` / `dataset_on_load`, in order (the sixth is Memory's max length).
        outputs=[dataset_summary, speakers_df, length_plot, excluded_df, export_files],
    )


def wire_dataset_tab(handlers: DatasetHandlers, tab: SimpleNamespace, model: gr.Dropdown,
                     max_length: gr.Number) -> list:
    """Wire the Dataset tab (`dataset_tab`'s namespace) to the page: Build dataset (which also sets the Memory
    tab's `max_length` box to the longest row, then refreshes the tab), and what follows the `model` picker:
    what a clip costs in tokens (Gemma 4: by its length) and the note when the dataset was built for the other
    model family (on a model change and when the tab opens; the Train tab's "Next run" line says it too).
    Returns the build's outputs (the tab's and `max_length`), which the page load fills as well."""
    outputs = [*tab.outputs, max_length]
    tab.build_button.click(
        handlers.build_dataset, inputs=[model, tab.eval_fraction, tab.seed, tab.build_max_length],
        outputs=outputs).then(tab.refresh[0], outputs=tab.refresh[1], show_progress="hidden").then(
        handlers.model_note, inputs=model, outputs=tab.model_note, show_progress="hidden")
    # what a clip costs follows the picker on a model change (a reopened page's restored model is one) and, as the
    # model note, when the tab opens
    for event in (model.change, tab.tab.select):
        event(handlers.max_length_update, inputs=model, outputs=tab.build_max_length, show_progress="hidden")
        event(handlers.model_note, inputs=model, outputs=tab.model_note, show_progress="hidden")
    return outputs
