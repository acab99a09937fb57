"""The Samples tab's three kinds: the kind selector, the free-speech fields, the dialogue editor, and a
save that leaves the form ready for the next clip (sentence, prompt, transcript and feedback cleared;
the speaker kept).

A dialogue is edited as a list of turns shown in a `gr.Chatbot`: a learner turn is a recording and/or
typed text, a tutor turn is typed text; saving stores it as one `dialogue` sample
(`SampleLibrary.add(kind="dialogue", turns=...)`), every clip checked.
"""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import gradio as gr

from pipeline.errors import AudioError, ClipTooLongError, SampleError
from ui import samples_view as view
from ui.common import TabHandlers, chat_messages, ui_errors
from ui.state import AppState
from pipeline.units import plural

KIND_CHOICES = {"Read aloud": "read_aloud", "Free speech": "free_speech", "Dialogue": "dialogue"}
TRIM_HINTS = {ClipTooLongError: "Or tick **Trim clips longer than 30 s** to keep its first 30 s."}
"""Where a clip is refused as too long, the Samples tab's own way to keep it."""


class SampleKindHandlers(TabHandlers):
    """Saving a read-aloud or free-speech clip (then clearing the form) and editing a dialogue."""

    here = "Samples tab"

    def __init__(self, state: AppState, check_clip: Any = None):
        super().__init__(state)
        self._check_read_aloud = check_clip  # the Samples tab's "Check clip" for a read-aloud sample

    def _table(self):
        from pipeline.data.samples import SampleLibrary

        return view.samples_frame(SampleLibrary(self.state.ws).list())

    @staticmethod
    def kind_visibility(kind_label: str):
        """Which fields the kind shows: (audio, target, prompt, transcript, feedback, single-clip buttons, dialogue editor)."""
        kind = KIND_CHOICES.get(kind_label, "read_aloud")
        single = kind != "dialogue"
        return (gr.update(visible=single), gr.update(visible=kind == "read_aloud"),
                gr.update(visible=kind == "free_speech"), gr.update(visible=kind == "free_speech"),
                gr.update(visible=single), gr.update(visible=single), gr.update(visible=not single))

    @ui_errors(message_at=0, outputs=1, hints=TRIM_HINTS)
    def check_clip(self, kind_label: str, audio: Any, target_text: str, prompt: str, feedback: str,
                   trim: bool = False) -> str:
        """"Check clip" for the chosen kind: the recording's checks and what stops the texts from being
        saved (read aloud: the sentence and feedback, as the Samples tab's own check; free speech: the
        prompt and feedback); Markdown."""
        from pipeline.conversation.messages import is_blank
        from pipeline.data.audio import load_audio

        kind = KIND_CHOICES.get(kind_label, "read_aloud")
        if kind == "read_aloud" and self._check_read_aloud is not None:
            return self._check_read_aloud(audio, target_text, feedback, trim)
        if audio is None:
            raise AudioError("No recording yet: record a clip or upload an audio file, then check it.")
        clip = load_audio(audio, name=Path(audio).name if isinstance(audio, (str, os.PathLike)) else None, trim=bool(trim))
        problems = []
        if is_blank(prompt):
            problems.append("The prompt is empty; type the question the learner answered.")
        if is_blank(feedback):
            problems.append("The tutor feedback is empty; write what a good tutor would say about this answer.")
        return view.checks_markdown(clip.report, problems=problems)

    @ui_errors(message_at=0, outputs=7, hints=TRIM_HINTS)
    def save_clip(self, kind_label: str, audio: Any, target_text: str, prompt: str, transcript: str, feedback: str,
                  speaker: str, trim: bool = False):
        """Check and save a read-aloud or free-speech clip (the feedback is required, as on the Samples
        tab); returns (status, table, and the cleared audio, sentence, prompt, transcript and feedback)
        so the form is ready for the next clip. On a failure only the status changes: nothing typed
        is lost."""
        from pipeline.data.samples import SampleLibrary

        kind = KIND_CHOICES.get(kind_label, "read_aloud")
        name = Path(audio).name if isinstance(audio, (str, os.PathLike)) else None
        fields = dict(target_text=target_text or "") if kind == "read_aloud" else dict(prompt=prompt or "")
        library = SampleLibrary(self.state.ws)
        try:
            sample = library.add(
                audio, feedback=feedback or "", speaker=(speaker or "").strip() or None, kind=kind,
                transcript=(transcript or "").strip() or None if kind == "free_speech" else None,
                source="microphone" if isinstance(audio, tuple) else name, trim=bool(trim), require_feedback=True,
                **fields)
        except SampleError:
            # A second click on Save (a double click) finds the sample the first click saved: that is a save.
            sample = _same_sample(library, audio, kind, trim=bool(trim), feedback=feedback, speaker=speaker, **fields)
            if sample is None:
                raise
            again = " (it was already saved: one sample, not two)"
        else:
            again = ""
        what = "" if kind == "read_aloud" else f" ({kind.replace('_', ' ')})"
        status = view.saved_markdown(sample, f"{what}{again}; the form is ready for the next clip.")
        return status, self._table(), None, "", "", "", ""

    @ui_errors(message_at=4, outputs=5, hints=TRIM_HINTS)
    def add_learner_turn(self, audio: Any, text: str, turns: list[dict], trim: bool = False):
        """Add a learner turn (a recording and/or text), checking the clip now as the dialogue's save
        will (`trim`: the tab's "Trim clips longer than 30 s" box, which the save also gets); returns
        (turns, chat, cleared audio, cleared text, status)."""
        from pipeline.data.audio import load_audio

        if audio is None and not (text or "").strip():
            raise SampleError("Record a clip or type what the learner said, then add the learner turn.")
        if audio is not None:
            load_audio(audio, name=Path(audio).name if isinstance(audio, (str, os.PathLike)) else None, trim=bool(trim))
        turns = list(turns or []) + [{"role": "learner", "audio": audio, "text": (text or "").strip() or None}]
        return turns, chat_messages(turns), None, "", f"{plural(len(turns), 'turn')}."

    @ui_errors(message_at=3, outputs=4)
    def add_tutor_turn(self, text: str, turns: list[dict]):
        """Add a tutor turn (typed); returns (turns, chat, cleared text, status)."""
        if not (text or "").strip():
            raise SampleError("Type the tutor's answer, then add the tutor turn.")
        if not turns:
            raise SampleError("A dialogue starts with the learner: add a learner turn first.")
        turns = list(turns) + [{"role": "tutor", "text": text.strip()}]
        return turns, chat_messages(turns), "", f"{plural(len(turns), 'turn')}."

    def remove_last_turn(self, turns: list[dict]):
        """Drop the last turn; returns (turns, chat, status)."""
        turns = list(turns or [])[:-1]
        return turns, chat_messages(turns), f"{plural(len(turns), 'turn')}."

    @ui_errors(message_at=0, outputs=4, hints=TRIM_HINTS)
    def save_dialogue(self, turns: list[dict], speaker: str, trim: bool = False):
        """Save the dialogue as one sample (every clip checked); returns (status, table, cleared turns, chat)."""
        from pipeline.data.samples import SampleLibrary

        if not turns:
            raise AudioError("The dialogue is empty: add a learner turn (record or type) and a tutor turn first.")
        shaped = [{"role": t["role"], "text": t.get("text"), "audio": t.get("audio"),
                   "file": Path(t["audio"]).name if isinstance(t.get("audio"), (str, os.PathLike)) else None}
                  for t in turns]
        sample = SampleLibrary(self.state.ws).add(None, kind="dialogue", turns=shaped, trim=bool(trim),
                                                  speaker=(speaker or "").strip() or None)
        clips = len(sample.clip_files)
        return (f"Saved dialogue **{sample.id}** ({len(turns)} turns, {plural(clips, 'clip')}, {view.clip_seconds(sample.duration_s)}).",
                self._table(), [], [])


def _same_sample(library: Any, audio: Any, kind: str, *, trim: bool, feedback: str | None, speaker: str | None,
                 target_text: str | None = None, prompt: str | None = None) -> Any:
    """The saved sample that has exactly this clip and these texts (what a second click on Save would
    add again), or None. The clip is compared by the digest of its decoded samples, as the library's
    duplicate check does (`pipeline.data.samples.audio_sha256`); the texts after the library's own
    normalisation (`nfc`, surrounding spaces)."""
    from pipeline.data.audio import load_audio
    from pipeline.data.samples import audio_sha256, nfc

    if audio is None:
        return None
    try:
        digest = audio_sha256(load_audio(audio, trim=trim).samples)
    except (AudioError, OSError):
        return None
    wanted = {"target_text": nfc((target_text or "").strip()) if kind == "read_aloud" else None,
              "prompt": nfc((prompt or "").strip()) if kind == "free_speech" else None,
              "feedback": nfc((feedback or "").strip()), "speaker": nfc((speaker or "").strip()) or None}
    for sample in library.list():
        if sample.kind == kind and sample.audio_sha256 == digest and sample.feedback == wanted["feedback"] \
                and sample.speaker == wanted["speaker"] and (wanted["target_text"] is None or sample.target_text == wanted["target_text"]) \
                and (wanted["prompt"] is None or sample.prompt == wanted["prompt"]):
            return sample
    return None


def kind_selector() -> Any:
    """The kind selector (placed at the top of the "Add a recording" column)."""
    return gr.Radio(list(KIND_CHOICES), value="Read aloud", label="Kind of sample", elem_id="sample-kind",
                    info="Read aloud: a sentence read. Free speech: an answer to a prompt. Dialogue: a tutoring "
                         "conversation.")


def free_speech_fields() -> SimpleNamespace:
    """The prompt and transcript boxes of a free-speech clip (hidden for the other kinds)."""
    prompt = gr.Textbox(label="Prompt (the question the learner answered)", visible=False, elem_id="sample-prompt",
                        placeholder="Describe your last holiday.")
    transcript = gr.Textbox(label="Transcript (optional: what the learner said)", visible=False,
                            elem_id="sample-transcript")
    return SimpleNamespace(prompt=prompt, transcript=transcript)


def dialogue_editor(handlers: SampleKindHandlers) -> SimpleNamespace:
    """The dialogue editor (hidden unless the kind is Dialogue); returns its `group` and
    `wire(speaker, trim, samples_table)`, which connects its buttons to the tab's widgets (every result,
    the save's included, shows in the editor's own note under its buttons)."""
    with gr.Group(visible=False, elem_id="dialogue-editor") as group:
        turns = gr.State([])
        chat = gr.Chatbot(label="The dialogue so far", height=300, elem_id="dialogue-chat")
        turn_audio = gr.Audio(sources=["microphone", "upload"], type="filepath", label="Learner: record a turn",
                              elem_id="dialogue-audio")
        turn_text = gr.Textbox(label="Text of the turn (learner: optional with a recording; tutor: the answer)",
                               lines=2, elem_id="dialogue-text")
        with gr.Row():
            learner = gr.Button("Add learner turn", elem_id="dialogue-add-learner")
            tutor = gr.Button("Add tutor turn", elem_id="dialogue-add-tutor")
            undo = gr.Button("Remove last turn", elem_id="dialogue-undo")
            save = gr.Button("Save dialogue", variant="primary", elem_id="dialogue-save")
        note = gr.Markdown(elem_id="dialogue-note")

    def wire(speaker: Any, trim: Any, samples_table: Any) -> None:
        learner.click(handlers.add_learner_turn, inputs=[turn_audio, turn_text, turns, trim],
                      outputs=[turns, chat, turn_audio, turn_text, note])
        tutor.click(handlers.add_tutor_turn, inputs=[turn_text, turns], outputs=[turns, chat, turn_text, note])
        undo.click(handlers.remove_last_turn, inputs=turns, outputs=[turns, chat, note])
        # The save's result replaces the turn count under the dialogue's own buttons (the checks panel beside
        # the form is off-screen below a long dialogue).
        save.click(handlers.save_dialogue, inputs=[turns, speaker, trim], outputs=[note, samples_table, turns, chat])

    return SimpleNamespace(group=group, wire=wire)
