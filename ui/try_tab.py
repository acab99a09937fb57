"""Tab 5, Try: speak a sentence and compare the tuned tutor's feedback with the base model's.

One model load serves both answers: the run's base model with its adapter, and the base answer with
the adapter disabled (`pipeline.tutor.infer.compare_feedback`). Free speech and the voice conversation
with the tutor are in `ui/try_kinds.py`, taking a run out and bringing one back in `ui/try_export.py`; the
tab's text is `ui/try_view.py`.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import gradio as gr

from pipeline.errors import ConfigError
from ui import try_view as view
from ui.common import TabHandlers, LOADING, cleared, filled_on_load, range_note, ui_errors, whole_number_in_range
from ui.state import AppState
from ui.try_export import export_section
from ui.try_kinds import (AUDIO_LABELS, MAX_TOKENS_LABEL, MAX_TOKENS_RANGE, TRY_KINDS, DialogueTryHandlers,
                          dialogue_section, try_kind_selector)


class TryHandlers(TabHandlers):
    """The Try tab's handler: tuned and base feedback for one clip."""

    here = "Try tab"

    def __init__(self, state: AppState):
        super().__init__(state)
        self.dialogue = DialogueTryHandlers(state)

    def headline(self) -> str:
        """The tab's first line, about the teacher's tutors: how many runs saved a tutor (an adapter) to try,
        and the newest, or where to make one (`ui.try_view.headline_markdown`)."""
        from ui.common import list_runs

        tutors = [r["run"] for r in list_runs(self.state.ws)
                  if (Path(r["run_dir"]) / "adapter" / "adapter_config.json").is_file()]
        return view.headline_markdown(tutors)

    @ui_errors(message_at=1, outputs=3)
    def try_feedback(self, audio: Any, target_text: str, run_name: str,
                     max_new_tokens: float = 256, kind_label: str = "Read aloud", picked_model: str | None = None):
        """Tuned and base feedback for one clip from ONE model load (the run's base + adapter; the base
        answer with the adapter disabled), both generated together and shown as they grow: yields
        (tuned text, note on the model, base text) updates.

        What went wrong (no run picked, a clip that fails a check, a model that cannot load) shows in
        the note panel under the button, in plain words; the answer boxes keep what they showed. The note
        names the model that answered only when it is not `picked_model` (the Model box's, whose note the top
        of the page shows: `AppState.answered_by`)."""
        from pipeline.tutor.infer import compare_feedback
        from ui.common import as_it_grows

        if run_name == view.SCORER_CHOICE:  # the classical scorer: scores at once, labelled with its map
            yield self._scorer_feedback(audio, target_text, kind_label)
            return
        if not run_name:
            raise ConfigError("No tuned run picked: choose a trained run in **Tuned run (adapter)** above "
                              "(the Train tab makes one; a stopped run has an adapter too).")
        tokens = whole_number_in_range(256 if max_new_tokens is None else max_new_tokens, *MAX_TOKENS_RANGE,
                                       MAX_TOKENS_LABEL)
        for texts, result in as_it_grows(compare_feedback, audio, target_text or "", run=run_name,
                                         workspace=self.state.ws, max_new_tokens=tokens,
                                         kind=TRY_KINDS.get(kind_label, "read_aloud")):
            if result is None:
                yield texts[0], view.ANSWERING, texts[1]
            else:
                yield (result["tuned"]["text"], self.state.answered_by(result["model"], picked_model),
                       result["base"]["text"])


    def _scorer_feedback(self, audio: Any, target_text: str, kind_label: str) -> tuple[str, str, str]:
        """(the scorer's template or its "Not scored" sentence, the note naming it and its map, the base box's note).

        Raises:
            AudioError: no clip given (`load_audio`'s message says what to do)."""
        from pipeline.data.audio import load_audio
        from pipeline.scoring.scorer import load_scorer

        scorer = load_scorer(self.state.ws)
        if TRY_KINDS.get(kind_label, "read_aloud") != "read_aloud":
            text = "Not scored: the classical scorer scores clips read aloud from a sentence, not free answers."
        else:
            text = scorer.score(load_audio(audio), target_text or "").text
        return text, f"Answered by the {view.SCORER_CHOICE}. {scorer.note}.", view.SCORER_BASE_NOTE


def try_tab(handlers: TryHandlers, export_handlers=None, model=None) -> SimpleNamespace:
    """Lay out the Try tab and wire its button; returns its widgets (the run list is filled by the Train tab's
    poll and refresh, wired in `build_ui`). With `export_handlers` (`ui.try_export.ExportHandlers`) the
    tab ends with the export / import section; `imported` is then its import event. `model`: the page's Model
    box, whose note the answers' note does not repeat."""
    with gr.Tab("5 · Try", id="try", elem_id="tab-try") as tab:
        headline = filled_on_load(gr.Markdown(LOADING, elem_id="try-headline"), handlers.headline)
        try_kind = try_kind_selector()
        with gr.Row():
            with gr.Column():
                try_audio = gr.Audio(sources=["microphone", "upload"], type="filepath",
                                     label=AUDIO_LABELS["read_aloud"], elem_id="try-audio")
                try_target = gr.Textbox(label="Target sentence", elem_id="try-target")
                with gr.Row():
                    try_run = gr.Dropdown([], label="Tuned run (adapter)", elem_id="try-run",
                                          allow_custom_value=True,
                                          info="The tutor a training run made: its adapter is the small set of "
                                               "weights training changed on top of the base model.")
                    try_refresh = gr.Button("Refresh runs", size="sm", scale=0, min_width=120)
                with gr.Accordion("Advanced settings", open=False, elem_id="try-advanced"):
                    low, high = MAX_TOKENS_RANGE
                    try_max_tokens = gr.Number(256, precision=0, label=MAX_TOKENS_LABEL, elem_id="try-max-tokens",
                                               info=f"From {low} to {high}. How long the tutor may talk: a longer "
                                                    "limit lets a rambling answer run on (and takes longer); the "
                                                    "tutor's usual feedback needs about 40-120 tokens (a token is about "
                                                    "¾ of a word).")
                    max_tokens_note = gr.Markdown(elem_id="try-max-tokens-note")
                try_button = gr.Button("Get feedback", variant="primary", elem_id="try-button")
        dialogue = dialogue_section(handlers.dialogue)
        try_note = gr.Markdown(elem_id="try-note")
        with gr.Row() as single_outputs:
            tuned_out = gr.Textbox(label="Your tutor (the tuned run or the classical scorer picked)", lines=8, elem_id="tuned-feedback")
            base_out = gr.Textbox(label="Base model (before your training)", lines=8, elem_id="base-feedback")
        exports = None
        if export_handlers is not None:
            exports = export_section(export_handlers, try_run)

    picked = [model] if model is not None else []
    try_button.click(handlers.try_feedback, inputs=[try_audio, try_target, try_run, try_max_tokens, try_kind, *picked],
                     outputs=[tuned_out, try_note, base_out])
    # Another clip, sentence or tutor picked: the answers shown were to the one before (`input`: the person's
    # changes only; the Train tab's poll sets the run list's value too).
    for changed in (try_audio.input, try_target.input, try_run.input):
        changed(cleared("", "", ""), outputs=[tuned_out, base_out, try_note], show_progress="hidden")
    # Another kind: the answers shown were to the other kind's question.
    try_kind.change(cleared("", "", ""), outputs=[tuned_out, base_out, try_note]).then(
        handlers.dialogue.kind_visibility, inputs=try_kind,
        outputs=[try_audio, try_target, try_button, single_outputs, dialogue.group])
    tab.select(handlers.headline, outputs=headline, show_progress="hidden")
    try_max_tokens.change(range_note(*MAX_TOKENS_RANGE, MAX_TOKENS_LABEL), inputs=try_max_tokens,
                          outputs=max_tokens_note, show_progress="hidden")
    dialogue.wire(try_run, try_max_tokens, model)
    return SimpleNamespace(run=try_run, refresh=try_refresh, imported=exports.imported if exports else None)
