"""The Try tab's kinds: the kind selector (read aloud, free speech, dialogue) and the voice conversation.

Free speech uses the read-aloud widgets with the text box asking for the prompt. The dialogue is a
`gr.Chatbot` with a microphone: each learner turn (a recording and/or typed text) is appended to the
history, and the tuned tutor answers the whole history the way training saw a dialogue (every
learner clip heard again, `pipeline.tutor.infer.Tutor.dialogue_reply`). Start over clears it.
"""

from __future__ import annotations

import os
from types import SimpleNamespace
from typing import Any

import gradio as gr

from pipeline.errors import ConfigError, SampleError
from ui.common import TabHandlers, chat_messages, ui_errors, whole_number_in_range
from ui.state import AppState

TRY_KINDS = {"Read aloud": "read_aloud", "Free speech": "free_speech", "Dialogue": "dialogue"}
TARGET_LABELS = {"read_aloud": "Target sentence", "free_speech": "Prompt (the question the learner answers)"}
AUDIO_LABELS = {"read_aloud": "Say the sentence (record or upload)",
                "free_speech": "Answer the prompt in your own words (record or upload)"}
"""The Try tab's clip input, per kind."""
MAX_TOKENS_RANGE = (16, 1024)
"""The "Longest answer (tokens)" box's allowed range: the feedback template needs ~40-120 tokens; a longer
limit only lets a rambling answer run on."""
MAX_TOKENS_LABEL = "Longest answer (tokens)"


class DialogueTryHandlers(TabHandlers):
    """A voice conversation with the tuned tutor: send a turn, start over."""

    here = "Try tab"

    @staticmethod
    def kind_visibility(kind_label: str):
        """For the chosen kind: (clip input, target/prompt box, Get feedback button, the answers row,
        the conversation); the run picker and the answer length stay for every kind."""
        kind = TRY_KINDS.get(kind_label, "read_aloud")
        single = kind != "dialogue"
        return (gr.update(visible=single, label=AUDIO_LABELS.get(kind, AUDIO_LABELS["read_aloud"])),
                gr.update(visible=single, label=TARGET_LABELS.get(kind, "Target sentence")),
                gr.update(visible=single), gr.update(visible=single), gr.update(visible=not single))

    @ui_errors(message_at=4, outputs=5)
    def send(self, audio: Any, text: str, history: list[dict], run_name: str, max_new_tokens: float = 128,
             picked_model: str | None = None):
        """The learner's turn and the tutor's reply, shown as it is generated: yields (history, chat,
        audio, text, note) updates, the last with the reply kept in the history and the inputs cleared.
        What went wrong shows in the note; the conversation stays as it was. The note names the model only
        when it is not `picked_model` (`AppState.answered_by`)."""
        from pipeline.tutor.infer import load_tutor
        from ui.common import as_it_grows

        if not run_name:
            raise ConfigError("No tuned run picked: choose a trained run in **Tuned run (adapter)** above "
                              "(the Train tab makes one; a stopped run has an adapter too).")
        from ui.try_view import SCORER_CHOICE

        if run_name == SCORER_CHOICE:
            raise ConfigError("The Classical scorer (no fine-tuning) scores a sentence read aloud; it holds no "
                              "conversation. Choose a trained run in **Tuned run (adapter)** above to talk with.")
        if audio is None and not (text or "").strip():
            raise SampleError("Record what the learner says (or type it), then send.")
        tokens = whole_number_in_range(128 if max_new_tokens is None else max_new_tokens, *MAX_TOKENS_RANGE,
                                       MAX_TOKENS_LABEL)
        turn = {"role": "learner", "audio": os.fspath(audio) if isinstance(audio, (str, os.PathLike)) else audio,
                "text": (text or "").strip() or None}
        turns = list(history or []) + [turn]
        tutor = load_tutor(None, run=run_name, workspace=self.state.ws)
        for partial, reply in as_it_grows(tutor.dialogue_reply, turns, max_new_tokens=tokens):
            if reply is None:
                growing = chat_messages(turns + [{"role": "tutor", "text": partial or "…"}])
                yield gr.skip(), growing, gr.skip(), gr.skip(), "The tutor is answering…"
        turns.append({"role": "tutor", "text": reply.text or "…"})
        yield turns, chat_messages(turns), None, "", self.state.answered_by(tutor.model_id, picked_model,
                                                                            "✓ The tutor answered.")

    def start_over(self):
        """A new conversation: (history, chat, note)."""
        return [], [], "New conversation: record the learner's first turn."


def try_kind_selector() -> Any:
    """The kind selector at the top of the Try tab."""
    return gr.Radio(list(TRY_KINDS), value="Read aloud", label="What to try", elem_id="try-kind")


def dialogue_section(handlers: DialogueTryHandlers) -> SimpleNamespace:
    """The conversation widgets (hidden unless Dialogue is chosen); `wire(run, max_tokens, model)` connects them (`model`: the Model box, for the note)."""
    with gr.Group(visible=False, elem_id="try-dialogue") as group:
        history = gr.State([])
        chat = gr.Chatbot(label="Conversation with the tuned tutor", height=360, elem_id="try-chat")
        audio = gr.Audio(sources=["microphone", "upload"], type="filepath", label="Learner: speak your turn",
                         elem_id="try-dialogue-audio")
        text = gr.Textbox(label="…or type it (optional with a recording)", elem_id="try-dialogue-text")
        with gr.Row():
            send = gr.Button("Send", variant="primary", elem_id="try-dialogue-send")
            reset = gr.Button("Start over", elem_id="try-dialogue-reset")
        note = gr.Markdown(elem_id="try-dialogue-note")

    def wire(run: Any, max_tokens: Any, model: Any = None) -> None:
        send.click(handlers.send, inputs=[audio, text, history, run, max_tokens, *([model] if model is not None else [])],
                   outputs=[history, chat, audio, text, note])
        reset.click(handlers.start_over, outputs=[history, chat, note])

    return SimpleNamespace(group=group, wire=wire)
