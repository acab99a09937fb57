"""The Dataset tab's "Draft feedback": the Classical scorer (no fine-tuning) writes feedback for recordings that
have none; the teacher listens, edits and accepts each draft, which then joins the next build.

A draft stays marked as a draft (`pipeline.scoring.drafts.DRAFT_MARK`) and is never trained on until accepted:
the sample keeps no feedback (so the build leaves it out and counts the drafts waiting) until **Accept draft**.
Every handler calls one `pipeline.scoring.drafts` function.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import gradio as gr

from pipeline.errors import SampleError
from ui.common import TabHandlers, ui_errors


class DraftHandlers(TabHandlers):
    """Draft feedback for recordings without any, and accepting a draft (as it is or edited)."""

    here = "Dataset tab"

    def _choices(self, selected: str | None = None) -> Any:
        from pipeline.data.samples import SampleLibrary
        from pipeline.scoring.drafts import load_drafts, waiting_drafts

        samples = {s.id: s for s in SampleLibrary(self.ws).list()}
        waiting = waiting_drafts(self.ws, {i: s.feedback for i, s in samples.items()})
        drafts = load_drafts(self.ws)
        choices = [(f"{i} · {samples[i].target_text}" + ("" if drafts[i].get("scored") else " · not scored"), i)
                   for i in waiting]
        return gr.update(choices=choices, value=selected if selected in waiting else (waiting[0] if waiting else None))

    def listed(self, selected: str | None = None) -> Any:
        """The drafts waiting, as the section opens: those written by `score --draft` on the command line too."""
        return self._choices(selected)

    @ui_errors(message_at=0, outputs=2)
    def draft(self) -> tuple[str, Any]:
        """Draft feedback for every read-aloud recording without any: (status, the drafts to check)."""
        from pipeline.scoring.drafts import draft_all
        from pipeline.units import plural

        result = draft_all(self.ws)
        lines = [f"✓ Drafted feedback for {plural(len(result['drafted']), 'recording')} without any. Each is a "
                 "**draft**: listen, edit it if needed, then **Accept draft**; until then it is not trained on.",
                 f"({result['note']}.)"]
        lines += [f"- {sample_id}: {reason}" for sample_id, reason in result["not_scored"].items()]
        if not result["drafted"]:
            lines = ["Every recording read aloud has feedback already: nothing to draft."]
        return "\n".join(lines), self._choices()

    def show(self, sample_id: str | None) -> tuple[str, Any, str]:
        """The picked draft: (its text, its recording, its sentence); empty when none is picked."""
        from pipeline.data.samples import SampleLibrary
        from pipeline.scoring.drafts import load_drafts

        draft = load_drafts(self.ws).get(sample_id or "")
        if not draft:
            return "", None, ""
        library = SampleLibrary(self.ws)
        try:
            sample = library.get(sample_id)
        except SampleError:
            return "", None, ""
        return draft["text"], str(library.audio_path(sample)), f"Sentence read: **{sample.target_text}**"

    @ui_errors(message_at=0, outputs=2)
    def accept(self, sample_id: str | None, text: str | None) -> tuple[str, Any]:
        """Make the picked draft (as edited in the box) the recording's feedback: (status, the drafts left)."""
        from pipeline.scoring.drafts import accept_draft

        if not sample_id:
            raise SampleError("No draft picked: press **Draft feedback**, then pick a recording to check.")
        accept_draft(self.ws, sample_id, text)
        return f"✓ Accepted the feedback of {sample_id}: it joins the training set at the next build.", self._choices()


def drafts_section(handlers: DraftHandlers) -> SimpleNamespace:
    """Lay out and wire the Draft feedback section (inside the Dataset tab); returns its widgets."""
    from pipeline.scoring.drafts import DRAFT_MARK

    with gr.Accordion("Draft feedback for recordings without any (Classical scorer, no fine-tuning)", open=False,
                      elem_id="dataset-drafts") as section:
        gr.Markdown("Recordings with no feedback are left out of the build. The **Classical scorer** can draft their "
                    "feedback in the tutor's format: check each draft, edit it, and accept it. A draft is never "
                    "trained on until you accept it.")
        draft_button = gr.Button("Draft feedback", elem_id="draft-feedback")
        status = gr.Markdown(elem_id="draft-status")
        pick = gr.Dropdown([], label="Draft to check", elem_id="draft-pick")
        sentence = gr.Markdown(elem_id="draft-sentence")
        audio = gr.Audio(label="Recording", interactive=False, elem_id="draft-audio")
        text = gr.Textbox(label=f"Feedback {DRAFT_MARK}", lines=4, elem_id="draft-text")
        accept_button = gr.Button("Accept draft", variant="primary", elem_id="accept-draft")
    section.expand(handlers.listed, inputs=pick, outputs=pick, show_progress="hidden")
    draft_button.click(handlers.draft, outputs=[status, pick])
    pick.change(handlers.show, inputs=pick, outputs=[text, audio, sentence], show_progress="hidden")
    accept_button.click(handlers.accept, inputs=[pick, text], outputs=[status, pick])
    return SimpleNamespace(pick=pick, text=text, status=status)
