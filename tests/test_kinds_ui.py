"""The Samples and Try tabs' kinds through their handlers: save-and-clear, the dialogue editor, the
recording session (start, save and next, skip, back to re-record, reopened after closing)."""

from __future__ import annotations

import json

import gradio as gr
import numpy as np
import pytest

from tests.studio_app import fresh_app
from tests.studio_app import learner_clip as clip

RATE = 16000


@pytest.fixture()
def ui(tmp_path):
    return fresh_app(tmp_path / "ws")


def test_saving_a_clip_clears_the_form_for_the_next_one(ui, tmp_path, speechocean_dir):
    from pipeline.data.samples import SampleLibrary

    status, table, *cleared = ui.save_clip("Free speech", clip(speechocean_dir, "000010011", tmp_path),
                                           "", "What is it?", "we call it bear", "Clear BEAR.", "kate")
    assert "Saved sample" in status and "(free speech)" in status and cleared == [None, "", "", "", ""]
    assert "[free speech] What is it?" in table["target sentence"].tolist()
    (sample,) = SampleLibrary(ui.ws).list()
    assert (sample.kind, sample.prompt, sample.transcript, sample.speaker) == ("free_speech", "What is it?", "we call it bear", "kate")
    status, table, *cleared = ui.save_clip("Read aloud", clip(speechocean_dir, "000010035", tmp_path),
                                           "ZERO THREE FIVE ONE", "", "", "Fine.", "kate")
    assert "Saved sample" in status and "(free speech)" not in status and cleared == [None, "", "", "", ""]
    # issue 32 rule 1: the status's length in the rounding of its checks and the table (it said 3.4 s by 3.43 s)
    seconds = table.set_index("id")["seconds"][status.split("**")[1]]
    assert f"({seconds} s)" in status and f"| duration | {seconds} s" in status, status
    # a failure keeps everything typed (only the status changes)
    failed = ui.save_clip("Free speech", clip(speechocean_dir, "000010053", tmp_path), "", "  ", "", "Good.", "kate")
    assert failed[0].startswith("**✗") and "Prompt" in failed[0]
    assert all(v == gr.skip() for v in failed[1:]), failed  # the sentence, prompt and feedback typed stay
    assert len(SampleLibrary(ui.ws).list()) == 2


def test_the_dialogue_editor_builds_and_saves_a_dialogue(ui, tmp_path, speechocean_dir):
    from pipeline.data.samples import SampleLibrary

    turns, chat, audio, text, note = ui.add_learner_turn(clip(speechocean_dir, "000010011", tmp_path), "", [])
    assert audio is None and text == "" and chat[0]["role"] == "user" and "path" in chat[0]["content"]
    turns, chat, text, note = ui.add_tutor_turn("Say BEAR with an open EH.", turns)
    turns, chat, audio, text, note = ui.add_learner_turn(None, "Like bear?", turns)
    turns, chat, text, note = ui.add_tutor_turn("Yes, better.", turns)
    assert [m["role"] for m in chat] == ["user", "assistant", "user", "assistant"]
    assert ui.add_tutor_turn("", turns)[-1].startswith("**✗")
    status, table, cleared_turns, cleared_chat = ui.save_dialogue(turns, "kate")
    assert "Saved dialogue" in status and "4 turns, 1 clip," in status and cleared_turns == [] and cleared_chat == []
    (sample,) = SampleLibrary(ui.ws).list()
    assert sample.kind == "dialogue" and [t["role"] for t in sample.turns] == ["learner", "tutor", "learner", "tutor"]
    assert ui.save_dialogue([], "kate")[0].startswith("**✗")


def test_a_recording_session_saves_skips_rerecords_and_survives_closing_the_tab(tmp_path, speechocean_dir):
    from pipeline.data.samples import SampleLibrary
    from ui.tutor_app import TutorApp

    ui = TutorApp(tmp_path / "ws")
    items = tmp_path / "list.csv"
    items.write_text("sentence,notes\nWE CALL IT BEAR,a\nZERO THREE FIVE ONE,b\nTHREE TWO TWO SEVEN,c\n", encoding="utf-8")
    progress, item = ui.start_session("", str(items), "Read aloud (sentences)", "0001")
    assert "1 of 3" in progress and "WE CALL IT BEAR" in item and "0001" in progress
    progress, item, status, audio, feedback, table = ui.session_save_and_next(
        clip(speechocean_dir, "000010011", tmp_path), "Clear.")
    assert "2 of 3 · 1 saved" in progress and "ZERO THREE FIVE ONE" in item and audio is None and feedback == ""
    progress, item, status, audio = ui.session_skip()
    assert "3 of 3" in progress and "1 skipped" in progress
    # closing the tab (a new page, a new app object): the session goes on where it was
    ui = TutorApp(tmp_path / "ws")
    progress, item = ui.session_restore()
    assert "3 of 3" in progress and "THREE TWO TWO SEVEN" in item
    progress, *_ = ui.session_save_and_next(clip(speechocean_dir, "000010053", tmp_path), "")
    assert progress.startswith("**done: 2 saved, 1 skipped of 3")
    # back to the skipped item, record it; back again to re-record the last one (replaces its sample)
    ui.session_back()
    progress, item, status, _ = ui.session_back()
    assert "ZERO THREE FIVE ONE" in item
    ui.session_save_and_next(clip(speechocean_dir, "000010035", tmp_path), "")
    progress, item, status, _ = ui.session_back()
    assert "Re-recording" in status and "THREE TWO TWO SEVEN" in item
    ui.session_save_and_next(clip(speechocean_dir, "000010069", tmp_path), "Second take.")
    samples = SampleLibrary(ui.ws).list()
    assert sorted(s.target_text for s in samples) == ["THREE TWO TWO SEVEN", "WE CALL IT BEAR", "ZERO THREE FIVE ONE"]
    assert {s.speaker for s in samples} == {"0001"} and {s.kind for s in samples} == {"read_aloud"}
    assert next(s for s in samples if s.target_text == "THREE TWO TWO SEVEN").feedback == "Second take."
    saved = json.loads((ui.ws.samples_dir / "session.json").read_text())
    assert saved["position"] == 3 and len(saved["saved"]) == 3
    # a bad clip is refused with the reason and the session stays on its item
    ui.start_session("Describe your last holiday.\n# a comment\n\nWhat do bears eat?", None, "Free speech (prompts)", "")
    silent = tmp_path / "silent.wav"
    import soundfile

    soundfile.write(str(silent), np.zeros(RATE, dtype=np.float32), RATE)
    failed = ui.session_save_and_next(str(silent), "")
    assert failed[2].startswith("**✗") and "silent" in failed[2]
    assert "1 of 2" in ui.session_restore()[0]
    assert ui.start_session("", None, "Read aloud (sentences)", "")[0].startswith("**✗")


def test_the_trim_box_is_honoured_by_every_check_of_a_dialogue_turn_and_a_session_clip(ui, tmp_path, speechocean_dir):
    """A 40 s learner clip: refused with the hint to tick the Trim box, then taken with the box ticked, in
    the dialogue editor (the turn's check and the save) and in the recording session (the automatic check
    and the save), as the single-clip form already did."""
    import soundfile

    from pipeline.data.samples import SampleLibrary

    speech, rate = soundfile.read(clip(speechocean_dir, "000010011", tmp_path), dtype="float32")
    long_clip = tmp_path / "long-answer.wav"
    soundfile.write(str(long_clip), np.tile(speech, int(40 * rate / len(speech)) + 1), rate)

    refused = ui.add_learner_turn(str(long_clip), "", [])
    assert refused[-1].startswith("**✗") and " s; Gemma hears at most 30 s (3n and 4 alike)" in refused[-1] and "Trim clips longer than 30 s" in refused[-1]
    turns, chat, audio, text, note = ui.add_learner_turn(str(long_clip), "", [], True)
    assert len(turns) == 1 and note == "1 turn."
    turns, *_ = ui.add_tutor_turn("Good, a bit slower next time.", turns)
    status, *_ = ui.save_dialogue(turns, "kate", True)
    assert "Saved dialogue" in status and "30.00 s" in status

    ui.start_session("WE CALL IT BEAR", None, "Read aloud (sentences)", "kate")
    refused = ui.session_check(str(long_clip))
    assert refused.startswith("**✗") and "Trim clips longer than 30 s" in refused
    checked = ui.session_check(str(long_clip), True)
    assert "✗" not in checked and "trimmed" in checked
    refused = ui.session_save_and_next(str(long_clip), "", False)
    assert refused[2].startswith("**✗") and "Trim clips longer than 30 s" in refused[2]
    progress, item, status, *_ = ui.session_save_and_next(str(long_clip), "", True)
    assert "Saved" in status and "(30.00 s)" in status
    assert sorted(s.kind for s in SampleLibrary(ui.ws).list()) == ["dialogue", "read_aloud"]


def test_start_session_again_on_the_same_list_continues_it_and_another_learner_starts_over(ui, tmp_path, speechocean_dir):
    """Start pressed a second time (a double click, or after reopening the page with the list still pasted)
    threw the teacher back to "1 of 3 · 0 saved": the clips saved stayed in the library but the session
    forgot them. The same list for the same speaker continues; another speaker or list starts over."""
    from pipeline.data.samples import SampleLibrary

    items = "WE CALL IT BEAR\nZERO THREE FIVE ONE\nTHREE TWO TWO SEVEN"
    ui.start_session(items, None, "Read aloud (sentences)", "0001")
    ui.session_save_and_next(clip(speechocean_dir, "000010011", tmp_path), "Clear.")
    ui.session_skip()
    progress, item = ui.start_session(items, None, "Read aloud (sentences)", "0001")
    assert "3 of 3 · 1 saved, 1 skipped" in progress and "THREE TWO TWO SEVEN" in item
    progress, item = ui.start_session(items, None, "Read aloud (sentences)", "0002")
    assert "1 of 3 · 0 saved" in progress and "WE CALL IT BEAR" in item and "0002" in progress
    progress, item = ui.start_session("WE CALL IT BEAR", None, "Read aloud (sentences)", "0002")
    assert "1 of 1" in progress
    assert len(SampleLibrary(ui.ws).list()) == 1, "starting over deletes nothing saved"


def test_the_sample_pack_says_how_to_add_its_free_speech_and_dialogue_examples(ui):
    """"Load the sample pack" imports the read-aloud clips only; its note names the pack's chat-format
    examples, and the path it gives imports them in Import a folder."""
    import re

    from pipeline.data.samples import SampleLibrary

    summary, *_ = ui.load_sample_pack()
    (path,) = re.findall(r"type `([^`]+tutoring\.jsonl)`", summary)
    summary, *_ = ui.import_folder(path, "auto", False)
    assert "Imported **5 recordings**" in summary and "skipped **0**" in summary, summary
    kinds = sorted(s.kind for s in SampleLibrary(ui.ws).list())
    assert kinds.count("dialogue") == 3 and kinds.count("free_speech") == 2 and kinds.count("read_aloud") == 8


def test_the_library_editor_shows_and_edits_each_kinds_own_texts(ui, tmp_path, speechocean_dir):
    """Clicking a free-speech sample showed an empty "Target sentence" (its prompt could not be seen or fixed);
    a dialogue showed two empty boxes and Save changes warned that its empty feedback leaves it out of the
    build, which is false (a dialogue trains on its tutor turns)."""
    from pipeline.data.samples import SampleLibrary

    ui.save_clip("Free speech", clip(speechocean_dir, "000010011", tmp_path), "", "Waht is it?", "", "Clear BEAR.", "kate")
    turns, *_ = ui.add_learner_turn(clip(speechocean_dir, "000010035", tmp_path), "zero three", [])
    turns, *_ = ui.add_tutor_turn("Good; THREE starts with TH.", turns)
    ui.save_dialogue(turns, "kate")
    library = SampleLibrary(ui.ws)
    free = next(s for s in library.list() if s.kind == "free_speech")
    dialogue = next(s for s in library.list() if s.kind == "dialogue")

    def select(sample_id):
        return ui.select_sample(None, gr.SelectData(None, {"index": [0, 0], "value": sample_id,
                                                             "row_value": [sample_id], "selected": True}))

    _id, _audio, text, feedback, speaker, _checks = select(free.id)
    assert text["value"] == "Waht is it?" and text["label"].startswith("Prompt") and text["interactive"]
    status, _table = ui.update_sample(free.id, "What is it?", feedback["value"], speaker)
    assert "⚠" not in status and library.get(free.id).prompt == "What is it?" and not library.get(free.id).target_text

    _id, _audio, text, feedback, speaker, _checks = select(dialogue.id)
    assert not text["interactive"] and not feedback["interactive"]
    assert feedback["value"].splitlines() == ["Learner: [clip] zero three", "Tutor: Good; THREE starts with TH."]
    status, _table = ui.update_sample(dialogue.id, text["value"], feedback["value"], "kate-2")
    assert status == f"Saved changes to **{dialogue.id}**.", status
    assert library.get(dialogue.id).speaker == "kate-2" and library.get(dialogue.id).turns == dialogue.turns


@pytest.mark.parametrize("typed", ['"{}"', "'{}'", "  {}  ", "file://{}"])
def test_a_pasted_folder_path_with_quotes_or_as_a_file_address_imports(ui, typed):
    """Windows' "Copy as path" pastes "C:\\...\\clips" in double quotes, a file manager's drag or a terminal
    gives '/path/with spaces' or file:///path: each was refused as a folder that does not exist."""
    from pipeline.data.samples import SampleLibrary
    from ui.samples_tab import SAMPLE_PACK_DIR

    source = str(SAMPLE_PACK_DIR)
    if typed.startswith("file://"):
        from urllib.parse import quote

        source = quote(source)
    summary, *_ = ui.import_folder(typed.format(source), "auto", False)
    assert summary.startswith("Imported **8 recordings**"), summary
    assert len(SampleLibrary(ui.ws).list()) == 8


def test_typed_path_keeps_a_plain_path_and_names_with_quotes_inside():
    from ui.common import typed_path

    assert typed_path("/home/me/kate's clips") == "/home/me/kate's clips"
    assert typed_path("'/home/me/my clips'") == "/home/me/my clips"
    assert typed_path("file:///home/me/my%20clips") == "/home/me/my clips"
    assert typed_path('"C:\\Users\\me\\clips"') == "C:\\Users\\me\\clips"
    assert typed_path("   ") == "" and typed_path(None) == ""


def test_a_model_path_pasted_with_spaces_or_quotes_is_the_folder(ui, tiny_model_dir):
    """" /path/to/tiny-gemma3n " in the Model box was taken for a hub id: the build failed with "accept the
    license at https://huggingface.co/ /path..." and a download command for it."""
    from ui import common

    ui.load_sample_pack()
    for typed in (f"  {tiny_model_dir} ", f"'{tiny_model_dir}'", f'"{tiny_model_dir}"'):
        summary = ui.build_dataset(typed, 0.25, 42, 1024)[0]
        assert summary.startswith("**Split:**") and f"(model `{tiny_model_dir}`)" in summary, summary
        assert "random weights" in ui.describe_model(typed)
        assert [value for _label, value in ui.judge_candidates(typed)][0] == f"base:{tiny_model_dir}"
        values = {name: getattr(common.DEFAULTS, name) for name in common.CONFIG_FIELDS}
        assert common.config_from_values({**values, "model": typed}).model == str(tiny_model_dir)
    assert common.model_text(" google/gemma-3n-E2B-it ") == "google/gemma-3n-E2B-it"
    assert common.model_text("./models/x") == "./models/x"


def test_back_and_saving_the_same_take_again_updates_it_instead_of_refusing_a_duplicate(ui, tmp_path, speechocean_dir):
    """Back, then Save and next with the same recording (to fix its feedback): refused as "the same audio as"
    the item's own sample, the session stuck on that item. Now the take's sample is updated and the session
    moves on; a different take still replaces it."""
    from pipeline.data.samples import SampleLibrary

    take = clip(speechocean_dir, "000010011", tmp_path)
    ui.start_session("WE CALL IT BEAR\nZERO THREE FIVE ONE", None, "Read aloud (sentences)", "0001")
    ui.session_save_and_next(take, "")
    ui.session_back()
    progress, item, status, *_ = ui.session_save_and_next(take, "Open the EH in BEAR.")
    assert status.startswith("Saved") and "2 of 2 · 1 saved" in progress and "ZERO THREE FIVE ONE" in item, status
    (sample,) = SampleLibrary(ui.ws).list()
    assert sample.feedback == "Open the EH in BEAR." and sample.target_text == "WE CALL IT BEAR"
    ui.session_back()
    ui.session_save_and_next(clip(speechocean_dir, "000010035", tmp_path / "other"), "Second take.")
    (sample,) = SampleLibrary(ui.ws).list()
    assert sample.feedback == "Second take."
    # the same audio for another item is still refused, and says how to change that sample instead
    refused = ui.session_save_and_next(clip(speechocean_dir, "000010035", tmp_path / "again"), "")
    assert refused[2].startswith("**✗") and "same audio" in refused[2] and "edit it" in refused[2], refused[2]
    assert "2 of 2" in ui.session_restore()[0]
