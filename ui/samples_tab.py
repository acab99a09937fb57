"""Tab 1, Samples: record or upload a clip, check it, save it; import a folder or the sample pack; edit, delete.

The three kinds (read aloud, free speech, dialogue) and the save that clears the form live in
`ui/samples_kinds.py`; the recording session in `ui/samples_session.py`.

Failures show as "✗ message" in the tab's status panel (`ui_errors(message_at=...)`) rather than as a
raised `gr.Error`, which would mark the sample library and the audio input as errored until reload.
"""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import gradio as gr

from pipeline.errors import AudioError, ImportFormatError, PipelineError, SampleError
from ui import samples_view as view
from ui.common import (TabHandlers, CANCELLED, LOADING, REPO_ROOT, cleared, confirm_js, error_panel, filled_on_load,
                       progress_callback, ui_errors)
from ui.samples_kinds import TRIM_HINTS, SampleKindHandlers, dialogue_editor, free_speech_fields, kind_selector
from ui.samples_session import SessionHandlers, session_section
from ui.state import AppState
from ui.wording import app_wording
from pipeline.units import plural

SAMPLE_PACK_DIR = REPO_ROOT / "sample_data" / "speechocean762-pack"
IMPORT_FORMATS = ("auto", "kaldi", "audiofolder", "ljspeech", "commonvoice", "folder", "chat")
TRIM_LABEL = "Trim clips longer than 30 s (keep their first 30 s)"
# Where a clip is refused as too long, this tab's own way to keep it.
_TRIM_HINTS = TRIM_HINTS
# Asks in the browser before a sample and its audio are deleted; a "no" reaches the handler as CANCELLED.
_CONFIRM_DELETE_JS = confirm_js("Delete sample {} and its audio? This cannot be undone.")


class SamplesHandlers(TabHandlers):
    """The Samples tab's handlers: each takes widget values, calls the sample library, returns widget values."""

    here = "Samples tab"

    def __init__(self, state: AppState):
        super().__init__(state)
        self.kinds = SampleKindHandlers(state, check_clip=self.check_clip)
        self.session = SessionHandlers(state)

    @ui_errors(message_at=0, outputs=1, hints=_TRIM_HINTS)
    def check_clip(self, audio: Any, target_text: str | None = None, feedback: str | None = None,
                   trim: bool = False) -> str:
        """"Check clip": is this sample ready to save? Decodes and checks the recording (keeping the
        first 30 s of a longer clip when `trim`, as Save does) and, unless they are None, the target
        sentence and the feedback (blank ones fail); returns the results (or what failed) as Markdown."""
        from pipeline.data.audio import load_audio
        from pipeline.data.samples import text_problems

        if audio is None:
            raise AudioError("No recording yet: record a clip or upload an audio file, then check it.")
        clip = load_audio(audio, name=_clip_name(audio), trim=bool(trim))
        problems = [] if target_text is None and feedback is None else text_problems(target_text, feedback)
        return view.checks_markdown(clip.report, problems=problems)

    def check_recording(self, audio: Any, trim: bool = False):
        """A new recording or upload, or the trim box changed: check the audio only (the texts are
        usually not typed yet); nothing to check (and nothing shown) without a recording."""
        if audio is None:
            return gr.skip()
        return self.check_clip(audio, None, None, trim)

    @ui_errors(message_at=0, outputs=3, hints=_TRIM_HINTS)
    def save_sample(self, audio: Any, target_text: str, feedback: str, speaker: str, trim: bool = False):
        """Check and save a new sample; returns (status, samples table, cleared audio).

        The feedback is required here (a blank one is refused, as "Check clip" says). On a
        `PipelineError` only the status shows what failed; the table and the audio stay as they are.
        """
        from pipeline.data.samples import SampleLibrary

        source = "microphone" if isinstance(audio, tuple) else _clip_name(audio)
        sample = SampleLibrary(self.ws).add(
            audio, target_text or "", feedback or "", speaker=(speaker or "").strip() or None,
            source=source, trim=bool(trim), require_feedback=True,
        )
        return view.saved_markdown(sample), self.samples_table(), None

    @ui_errors
    def samples_table(self):
        """The sample library as a table (one row per sample)."""
        from pipeline.data.samples import SampleLibrary

        return view.samples_frame(SampleLibrary(self.ws).list())

    def library_headline(self) -> str:
        """The tab's first line: the library's first sentence (`library_summary`), or how to start."""
        return self.library_summary().split("\n\n")[0]

    def library_summary(self) -> str:
        """The library in a teacher's words (`ui.samples_view.library_markdown`), or the error panel when the
        library cannot be read (Markdown); its first line is the tab's headline (`library_headline`)."""
        from pipeline.data.samples import SampleLibrary

        try:
            samples = SampleLibrary(self.ws).list()
        except PipelineError as error:
            return error_panel(error)
        return view.library_markdown(samples)

    def library_details(self) -> str:
        """Above the library's table: `library_summary`, except for an empty library, whose how-to-start the
        headline at the top says already (`ui.samples_view.EMPTY_LIBRARY`: said twice, one above the other, it
        was noise): "" then (Markdown)."""
        from pipeline.data.samples import SampleLibrary

        try:
            empty = not SampleLibrary(self.ws).list()
        except PipelineError:
            empty = False  # the error panel, from library_summary
        return "" if empty else self.library_summary()

    @ui_errors(message_at=5, outputs=6)
    def select_sample(self, table: Any, evt: gr.SelectData):
        """Load the clicked sample into the editor: (id, audio path, text, feedback, speaker, checks).

        The two text boxes follow the sample's kind: read aloud, the target sentence and the feedback;
        free speech, the prompt (labelled so) and the feedback; a dialogue, its turns to read (not edited
        here: a dialogue is changed by saving a new one in the dialogue editor), only the speaker editable."""
        from pipeline.data.samples import SampleLibrary

        row = evt.row_value if evt is not None and evt.row_value else None
        if not row:
            return gr.skip(), gr.skip(), gr.skip(), gr.skip(), gr.skip(), gr.skip()
        library = SampleLibrary(self.ws)
        sample = library.get(str(row[0]))
        text, feedback = view.EDIT_LABELS[sample.kind]
        if sample.kind == "dialogue":
            shown_text, shown_feedback = sample.title, view.dialogue_text(sample.turns or [])
        else:
            shown_text = sample.prompt or "" if sample.kind == "free_speech" else sample.target_text
            shown_feedback = sample.feedback
        editable = sample.kind != "dialogue"
        return (
            sample.id,
            _playback(library, sample),
            gr.update(value=shown_text, label=text, interactive=editable),
            gr.update(value=shown_feedback, label=feedback, interactive=editable),
            sample.speaker or "",
            view.checks_markdown(sample.checks, title=f"Checks of {sample.id}"),
        )

    @ui_errors(message_at=0, outputs=2)
    def update_sample(self, sample_id: str, target_text: str, feedback: str, speaker: str):
        """Save edits of the selected sample; returns (status, samples table). `target_text` is the
        editor's first box: the sentence of a read-aloud sample, the prompt of a free-speech one; a
        dialogue keeps its turns (only the speaker changes)."""
        from pipeline.data.samples import SampleLibrary

        if not sample_id:
            raise SampleError("No sample selected: click a sample in the table first, then edit it.")
        library = SampleLibrary(self.ws)
        kind = library.get(sample_id).kind
        if kind == "dialogue":
            sample = library.update(sample_id, speaker=speaker or None)
        elif kind == "free_speech":
            sample = library.update(sample_id, prompt=target_text or "", feedback=feedback or "", speaker=speaker or None)
        else:
            sample = library.update(sample_id, target_text=target_text or "", feedback=feedback or "",
                                    speaker=speaker or None)
        status = f"Saved changes to **{sample.id}**."
        if not sample.has_answer:
            status += (" ⚠ Its tutor feedback is empty, so the dataset build leaves this sample out until "
                       "you write one.")
        return status, self.samples_table()

    @ui_errors(message_at=0, outputs=8)
    def delete_sample(self, sample_id: str):
        """Delete the selected sample and its audio; returns (status, table, cleared editor fields)."""
        from pipeline.data.samples import SampleLibrary

        if sample_id == CANCELLED:
            return ("Nothing deleted.",) + (gr.skip(),) * 7
        if not sample_id:
            raise SampleError("No sample selected: click a sample in the table first, then delete it.")
        removed = SampleLibrary(self.ws).delete(sample_id)
        return f"Deleted **{removed.id}**.", self.samples_table(), "", None, "", "", "", ""

    @ui_errors(message_at=0, outputs=3)
    def import_folder(self, folder: str, format_name: str, trim: bool = False,
                      progress: gr.Progress = gr.Progress()):
        """Import every clip of a folder (any supported layout); returns (summary, per-file table, samples).

        `trim=True` keeps the first 30 s of longer clips instead of refusing them. On a `PipelineError`
        only the summary shows what failed; the per-file table and the sample library stay as they are.
        """
        from pipeline.data.importers import import_folder

        source = self.state.typed_path(folder)
        if not source:
            raise ImportFormatError("No folder given: type the path of a folder on this computer, "
                                    "e.g. /home/me/recordings.")
        report = import_folder(self.ws, source, format=format_name or "auto", progress=progress_callback(progress),
                               trim=bool(trim), confine_to=self.ws.root if self.state.shared else None)
        report.skipped = [{**entry, "reason": app_wording(entry.get("reason"), markdown=False, here=self.here)} for entry in report.skipped]
        return (view.import_summary(report, source), gr.Dataframe(view.import_report_frame(report), visible=True),
                self.samples_table())

    def load_sample_pack(self, progress: gr.Progress = gr.Progress()):
        """One click: import the bundled `sample_data/` pack (real speechocean762 clips, with attribution)."""
        summary, table, samples = self.import_folder(str(SAMPLE_PACK_DIR), "auto", False, progress)
        if summary.startswith("**✗"):
            return summary, table, samples
        return summary + "\n\n" + view.sample_pack_attribution(SAMPLE_PACK_DIR), table, samples


PLAYBACK_GAP_S = 0.4
"""Silence between a dialogue's clips in Playback (seconds)."""


def _playback(library: Any, sample: Any) -> Any:
    """What Playback plays: the sample's clip (its WAV path), or for a dialogue of several clips all of
    them in order, `PLAYBACK_GAP_S` of silence apart, labelled so (a `gr.update` of the Audio with
    `(16000, int16 samples)`), so the duration the table lists is what one hears."""
    import numpy as np

    from pipeline.data.audio import TARGET_SAMPLE_RATE_HZ, pcm16

    clips = library.load_clips(sample) if sample.kind == "dialogue" else []
    if len(clips) < 2:
        return gr.update(value=str(library.audio_path(sample)), label="Playback")
    gap = np.zeros(int(PLAYBACK_GAP_S * TARGET_SAMPLE_RATE_HZ), dtype=np.float32)
    joined = np.concatenate([part for clip in clips for part in (clip, gap)][:-1])
    return gr.update(value=(TARGET_SAMPLE_RATE_HZ, pcm16(joined)),
                     label=f"Playback: the dialogue's {plural(len(clips), 'clip')} in order ({sample.duration_s:.2f} s of speech)")


def _clip_name(audio: Any) -> str | None:
    if isinstance(audio, (str, os.PathLike)):
        return Path(audio).name
    if isinstance(audio, dict) and audio.get("path"):
        return Path(audio["path"]).name
    return None


def samples_tab(handlers: SamplesHandlers) -> SimpleNamespace:
    """Lay out the Samples tab's widgets and wire its buttons (every event stays inside the tab); returns
    the recording session's widgets (its page-load restore is wired in `build_ui`)."""
    with gr.Tab("1 · Samples", id="samples", elem_id="tab-samples") as tab:
        headline = filled_on_load(gr.Markdown(LOADING, elem_id="samples-headline"), handlers.library_headline)
        with gr.Row(equal_height=True):
            pack_button = gr.Button("Load the sample pack (real learner clips)", variant="primary",
                                    elem_id="load-pack", scale=0, min_width=340)
            gr.Markdown("New here? Load a few real learner recordings with expert feedback and try every "
                        "step at once.")
        with gr.Row():
            with gr.Column(scale=1):
                gr.Markdown("### Add a recording")
                kind_in = kind_selector()
                audio_in = gr.Audio(sources=["microphone", "upload"], type="filepath",
                                    label="Record or upload a clip (0.3–30 s)", elem_id="sample-audio")
                target_in = gr.Textbox(label="Target sentence (what the learner was asked to read)",
                                       elem_id="sample-target")
                free = free_speech_fields()
                feedback_in = gr.Textbox(label="Tutor feedback (what a good tutor would say)", lines=4,
                                         elem_id="sample-feedback")
                speaker_in = gr.Textbox(label="Speaker (optional; keeps each learner in one split)",
                                        elem_id="sample-speaker")
                save_trim = gr.Checkbox(False, label=TRIM_LABEL, elem_id="save-trim")
                with gr.Row() as single_buttons:
                    check_button = gr.Button("Check clip", elem_id="check-clip")
                    save_button = gr.Button("Save sample", variant="primary", elem_id="save-sample")
                dialogue = dialogue_editor(handlers.kinds)
            with gr.Column(scale=1):
                checks_out = gr.Markdown("Record or upload a clip, then **Check clip**.", elem_id="checks")
        session = session_section(handlers.session)
        with gr.Accordion("Import a folder", open=False, elem_id="import-accordion"):
            with gr.Row():
                folder_in = gr.Textbox(label="Folder on this computer", scale=3, elem_id="import-folder",
                                       placeholder="/home/me/recordings")
                format_in = gr.Dropdown(list(IMPORT_FORMATS), value="auto", label="Layout", scale=1,
                                        info="auto detects Kaldi, audiofolder, LJSpeech, Common Voice, "
                                             "audio + .txt, or a chat-format .jsonl file")
                import_button = gr.Button("Import", scale=0, elem_id="import-button")
            import_trim = gr.Checkbox(False, label=TRIM_LABEL, elem_id="import-trim")
        import_summary = gr.Markdown(elem_id="import-summary")
        import_table = gr.Dataframe(view.import_report_frame({}), label="Per-file report", interactive=False,
                                    visible=False, elem_id="import-report", max_height=240)
        gr.Markdown("### Saved samples\nClick a row to play it back, edit or delete it; search finds any word "
                    "(a sentence, a learner, an id).")
        library_summary = filled_on_load(gr.Markdown(LOADING, elem_id="library-summary"), handlers.library_details)
        samples_df = filled_on_load(gr.Dataframe(view.samples_frame([]), label="Sample library", interactive=False,
                                                 elem_id="samples-table", max_height=720, wrap=True,
                                                 show_search="search",
                                                 column_widths=["14%", "9%", "8%", "24%", "30%", "15%"]),
                                    handlers.samples_table)
        with gr.Row():
            with gr.Column(scale=1):
                edit_id = gr.Textbox(label="Selected sample", interactive=False, elem_id="edit-id")
                edit_audio = gr.Audio(label="Playback", type="filepath", interactive=False, elem_id="edit-audio")
                edit_checks = gr.Markdown()
            with gr.Column(scale=1):
                edit_target = gr.Textbox(label="Target sentence", elem_id="edit-target")
                edit_feedback = gr.Textbox(label="Tutor feedback", lines=5, elem_id="edit-feedback")
                edit_speaker = gr.Textbox(label="Speaker", elem_id="edit-speaker")
                with gr.Row():
                    update_button = gr.Button("Save changes", elem_id="update-sample")
                    delete_button = gr.Button("Delete sample", variant="stop", elem_id="delete-sample")
                edit_status = gr.Markdown(elem_id="edit-status")

    check_button.click(handlers.kinds.check_clip,
                       inputs=[kind_in, audio_in, target_in, free.prompt, feedback_in, save_trim], outputs=checks_out)
    audio_in.stop_recording(handlers.check_recording, inputs=[audio_in, save_trim], outputs=checks_out)
    audio_in.upload(handlers.check_recording, inputs=[audio_in, save_trim], outputs=checks_out)
    save_trim.change(handlers.check_recording, inputs=[audio_in, save_trim], outputs=checks_out)
    save_button.click(handlers.kinds.save_clip,
                      inputs=[kind_in, audio_in, target_in, free.prompt, free.transcript, feedback_in, speaker_in, save_trim],
                      outputs=[checks_out, samples_df, audio_in, target_in, free.prompt, free.transcript, feedback_in])
    kind_in.change(handlers.kinds.kind_visibility, inputs=kind_in,
                   outputs=[audio_in, target_in, free.prompt, free.transcript, feedback_in, single_buttons, dialogue.group])
    dialogue.wire(speaker_in, save_trim, samples_df)
    # A new import clears the previous one's summary and per-file report first (a failed import then
    # shows its message alone, not above the last import's files).
    import_results = [import_summary, import_table]
    pack_button.click(cleared("Importing…", gr.update(visible=False)), outputs=import_results).then(
        handlers.load_sample_pack, outputs=[*import_results, samples_df])
    import_button.click(cleared("Importing…", gr.update(visible=False)), outputs=import_results).then(
        handlers.import_folder, inputs=[folder_in, format_in, import_trim], outputs=[*import_results, samples_df])
    # Samples are added outside this tab too (Inbox: Accept and next): the library is read again when the tab opens.
    tab.select(handlers.samples_table, outputs=samples_df, show_progress="hidden")
    samples_df.change(handlers.library_details, outputs=library_summary, show_progress="hidden")
    samples_df.change(handlers.library_headline, outputs=headline, show_progress="hidden")
    # Another sample selected: the last edit's "Saved changes to X" was about the one before.
    # (Two listeners: the selection's data reaches only a handler wired to the select event itself.)
    samples_df.select(cleared(""), outputs=edit_status, show_progress="hidden")
    samples_df.select(handlers.select_sample, inputs=samples_df,
                      outputs=[edit_id, edit_audio, edit_target, edit_feedback, edit_speaker, edit_checks])
    update_button.click(handlers.update_sample, inputs=[edit_id, edit_target, edit_feedback, edit_speaker],
                        outputs=[edit_status, samples_df])
    editor = [edit_id, edit_audio, edit_target, edit_feedback, edit_speaker, edit_checks]
    delete_button.click(handlers.delete_sample, inputs=edit_id, js=_CONFIRM_DELETE_JS,
                        outputs=[edit_status, samples_df, *editor])
    session.wire(samples_df)
    return session
