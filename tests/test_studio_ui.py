"""A studio a teacher can use (issue 20) through the handlers: a double-clicked Save, the library's
summary, a dialogue's playback, deleting a run, headlines and what changed since the last build, and
numbers out of range answered beside their box."""

from __future__ import annotations

import gradio as gr
import pytest

from pipeline.fileio import atomic_write_json
from tests.studio_app import fresh_app
from tests.studio_app import learner_clip as clip


@pytest.fixture()
def ui(tmp_path):
    return fresh_app(tmp_path / "ws")


def test_a_double_clicked_save_says_saved_once_and_another_text_on_the_same_clip_is_still_refused(
        ui, tmp_path, speechocean_dir):
    """The second click of a double click sends the same clip and texts: it finds them saved by the first
    and says so as a save, not "✗ ... it was not added twice" (the teacher believed nothing was saved)."""
    from pipeline.data.samples import SampleLibrary

    audio = clip(speechocean_dir, "000010011", tmp_path)
    form = ("Read aloud", audio, "WE CALL IT BEAR", "", "", "Open the EH in BEAR.", "kate")
    first = ui.save_clip(*form)
    second = ui.save_clip(*form)
    (sample,) = SampleLibrary(ui.ws).list()
    assert first[0].startswith(f"Saved sample **{sample.id}**") and "already saved" not in first[0]
    assert second[0].startswith(f"Saved sample **{sample.id}**") and "already saved" in second[0], second[0]
    assert second[2:] == (None, "", "", "", ""), "the form is cleared as after any save"
    other = ui.save_clip("Read aloud", audio, "WE CALL IT BEAR", "", "", "Another feedback.", "kate")
    assert other[0].startswith("**✗") and "not added twice" in other[0], "a different text is not the same save"
    assert len(SampleLibrary(ui.ws).list()) == 1


def test_the_library_summary_counts_each_kind_and_names_what_cannot_train_or_has_no_learner(ui, tmp_path,
                                                                                          speechocean_dir):
    from pipeline.data.samples import SampleLibrary

    assert "No recordings yet" in ui.samples.library_summary()
    # Issue 32 leftovers: "No recordings yet: add one above…" stood twice, as the headline and above the table.
    assert "No recordings yet" in ui.samples.library_headline() and ui.samples.library_details() == ""
    assert "above" not in ui.samples.library_headline()  # the headline is the tab's top line: the recorder is below
    assert ui.dataset.dataset_on_load()[0] == "" and "No dataset yet" in ui.dataset.headline()
    ui.save_clip("Read aloud", clip(speechocean_dir, "000010011", tmp_path), "WE CALL IT BEAR", "", "", "Good.", "kate")
    ui.save_clip("Free speech", clip(speechocean_dir, "000010035", tmp_path), "", "What is it?", "", "Fine.", "")
    SampleLibrary(ui.ws).add(clip(speechocean_dir, "000010053", tmp_path), "A sentence.", "", speaker="lee")
    no_speaker = next(s.id for s in SampleLibrary(ui.ws).list() if not s.speaker)
    no_feedback = next(s.id for s in SampleLibrary(ui.ws).list() if not s.feedback)
    summary = ui.samples.library_summary()
    assert summary.startswith("**3 recordings from 2 learners**: 2 read aloud, 1 free speech answer."), summary
    assert f"No learner (speaker) set" in summary and f"`{no_speaker}`" in summary
    assert "No tutor feedback yet" in summary and f"`{no_feedback}`" in summary
    assert ui.samples.library_details() == summary  # with recordings, above the table too


def test_a_dialogue_of_several_clips_plays_every_clip_it_lists(ui, tmp_path, speechocean_dir):
    """The table listed a dialogue as 6.01 s while Playback played only its first clip."""
    from pipeline.data.samples import SampleLibrary

    turns, *_ = ui.add_learner_turn(clip(speechocean_dir, "000010011", tmp_path), "", [])
    turns, *_ = ui.add_tutor_turn("Open the EH.", turns)
    turns, *_ = ui.add_learner_turn(clip(speechocean_dir, "000010035", tmp_path), "", turns)
    turns, *_ = ui.add_tutor_turn("Good.", turns)
    ui.save_dialogue(turns, "kate")
    (dialogue,) = SampleLibrary(ui.ws).list()
    event = gr.SelectData(None, {"index": [0, 0], "value": dialogue.id, "row_value": [dialogue.id], "selected": True})
    audio = ui.select_sample(None, event)[1]
    rate, samples = audio["value"]
    gaps_s = 0.4  # ui.samples_tab.PLAYBACK_GAP_S between the two clips
    assert rate == 16000 and abs(len(samples) / rate - (dialogue.duration_s + gaps_s)) < 0.01
    assert "2 clips" in audio["label"] and f"{dialogue.duration_s:.2f} s" in audio["label"]


def test_deleting_a_run_from_the_train_tab(ui):
    from ui.common import CANCELLED

    atomic_write_json(ui.ws.runs_dir / "old" / "result.json", {"run": "old", "status": "stopped"})
    atomic_write_json(ui.ws.runs_dir / "keep" / "result.json", {"run": "keep", "status": "completed"})
    picker = ui.train.delete_choices("old")
    assert sorted(c[0] for c in picker.choices) == ["keep", "old"] and picker.value == "old"
    assert ui.train.delete_run(CANCELLED)[0] == "Nothing deleted." and (ui.ws.runs_dir / "old").is_dir()
    assert ui.train.delete_run("")[0].startswith("**✗") and "Run to delete" in ui.train.delete_run("")[0]
    status, table, resume, choices = ui.train.delete_run("old")
    assert status.startswith("Deleted **old** (stopped") and not (ui.ws.runs_dir / "old").exists()
    assert table["run"].tolist() == ["keep"] and [c[0] for c in choices.choices] == ["keep"]
    failed = ui.train.delete_run("old")
    assert failed[0].startswith("**✗") and "No run named" in failed[0] and failed[1:] == (gr.skip(),) * 3


def test_numbers_out_of_range_are_answered_beside_their_box_with_the_range(ui, tmp_path, speechocean_dir):
    """Max tokens -5 gave a generic toast and red "Error" badges over every panel: the boxes now carry
    no bounds Gradio enforces; the handler's note (and the note under the box) says the allowed range."""
    from ui.dataset_tab import BUILD_MAX_LENGTH_RANGE
    from ui.try_kinds import MAX_TOKENS_RANGE
    from ui.common import range_note

    audio = clip(speechocean_dir, "000010011", tmp_path)
    tuned, note, base = ui.try_feedback(audio, "WE CALL IT BEAR", "some-run", -5)
    assert note.startswith("**✗") and "**Longest answer (tokens)** must be a whole number from 16 to 1024, got -5" in note
    assert tuned == base == gr.skip()
    reply = ui.try_dialogue_send(audio, "", [], "some-run", 0)
    assert reply[-1].startswith("**✗") and "from 16 to 1024, got 0" in reply[-1]
    built = ui.build_dataset("/no/model", 0.2, 42, 100)
    assert built[0].startswith("**✗") and "**Longest row to keep** must be a whole number from 256 to 32768, got 100" in built[0]
    assert range_note(*MAX_TOKENS_RANGE, "Longest answer (tokens)")(-5).startswith("✗ **Longest answer")
    assert range_note(*MAX_TOKENS_RANGE, "Longest answer (tokens)")(256) == ""
    assert range_note(*BUILD_MAX_LENGTH_RANGE, "Max tokens per row")(300.5).startswith("✗")
    labels = {getattr(block, "elem_id", None): block for block in __import__("app").build_ui(ui).blocks.values()}
    for elem_id in ("try-max-tokens", "build-max-length"):
        box = labels[elem_id]
        assert box.minimum is None and box.maximum is None, f"{elem_id}: Gradio would refuse out-of-range values"
        assert "From " in box.info


@pytest.mark.slow
def test_headlines_and_what_changed_since_the_last_build(ui, tiny_model_dir):
    from pipeline.data.samples import SampleLibrary

    assert "No dataset yet" in ui.dataset.headline() and "No tutor trained yet" in ui.train.headline()
    assert "Dataset** tab" not in ui.dataset.headline() and "Dataset** tab" in ui.train.headline()  # not to itself
    assert ui.dataset.library_changes() == "", "the headline says No dataset yet: once"
    ui.load_sample_pack()
    ui.build_dataset(str(tiny_model_dir), 0.25, 42, 1024)
    headline = ui.dataset.headline()
    assert headline.startswith("**8 recordings from 3 learners**:") and "to test the tutor with." in headline
    assert ui.train.headline().startswith(headline[:-1]) and "No tutor trained yet." in ui.train.headline()
    assert ui.dataset.library_changes() == "", "a first build has no last build to speak of"
    library = SampleLibrary(ui.ws)
    first, second = [s.id for s in library.list()][:2]
    library.update(first, feedback="Edited.")
    library.delete(second)
    changes = ui.dataset.library_changes()
    assert changes.startswith("**Since the last build:** 1 sample edited") and first in changes and second in changes
    assert "1 sample deleted" in changes


def test_the_try_tab_opens_with_the_teachers_tutors(ui):
    assert "No tuned tutor yet" in ui.tryout.headline()
    atomic_write_json(ui.ws.runs_dir / "first" / "adapter" / "adapter_config.json", {})
    atomic_write_json(ui.ws.runs_dir / "first" / "result.json", {"run": "first", "status": "completed"})
    atomic_write_json(ui.ws.runs_dir / "no-tutor" / "result.json", {"run": "no-tutor", "status": "failed"})
    assert ui.tryout.headline().startswith("**1 tuned tutor to try** (newest: **first**)")


def test_the_dataset_tab_says_who_moved_between_training_and_test_and_why():
    """Adding one learner and rebuilding moved two samples from the test set into training, silently."""
    from ui.dataset_view import moves_lines

    assert moves_lines(None) == [] and moves_lines({"moved": False, "to_eval": [], "to_train": []}) == []
    (line,) = moves_lines({"moved": True, "to_eval": ["ann"], "to_train": ["cal"], "rows_to_eval": [],
                           "rows_to_train": ["s-1", "s-2"], "reasons": ["1 new learner: eve"]})
    assert line.startswith("**Moved since the last build:** learner ann moved into the test set; learner cal, "
                           "2 samples with no learner (s-1, s-2) moved into training. Why: 1 new learner: eve."), line
    assert "Resume even though the dataset was rebuilt" in line


def test_the_samples_tab_reads_the_library_again_when_opened(tmp_path):
    """A sample accepted in the Inbox did not show on the Samples tab ("10 recordings", table and headline
    as before) until the page was reloaded: opening the tab now reads the library again."""
    import app as app_module
    from ui.tutor_app import TutorApp

    demo = app_module.build_ui(TutorApp(tmp_path / "ws"))
    blocks = demo.blocks
    refreshes = [dep for dep in demo.fns.values() if getattr(dep.fn, "__name__", "") == "samples_table"
                 and any(getattr(blocks.get(target_id), "elem_id", None) == "tab-samples" and event == "select"
                         for target_id, event in dep.targets)]
    assert refreshes, "the Samples tab's select does not refresh the library"
    assert [getattr(out, "elem_id", None) for out in refreshes[0].outputs] == ["samples-table"]


def test_texts_filled_on_load_say_loading_until_read_never_the_empty_state(tmp_path, speechocean_dir):
    """Issue 32 leftovers: "No recordings yet" showed for 15-19 s after a page reload while the library (of 8
    recordings) was still loading: Gradio shows the value read when the page was BUILT until its load event has
    run. Every text the page fills on load now starts as the loading line and is filled by a load event."""
    import app as app_module
    from ui.common import LOADING

    ui = fresh_app(tmp_path / "ws")  # empty when the page is built: its empty-state text must not be baked in
    demo = app_module.build_ui(ui)
    blocks = {getattr(block, "elem_id", None): block for block in demo.blocks.values()}
    for elem_id in ("samples-headline", "library-summary", "dataset-headline", "library-changes", "train-headline",
                    "try-headline", "dataset-summary"):
        assert blocks[elem_id].value == LOADING, (elem_id, blocks[elem_id].value)
        loads = [dep for dep in demo.fns.values() if any(event == "load" for _, event in dep.targets)
                 and any(getattr(out, "elem_id", None) == elem_id for out in dep.outputs)]
        assert loads, f"nothing fills #{elem_id} when the page loads"
    assert not blocks["judge-progress"].value  # not "not started" before the page load has looked for a job
    assert blocks["samples-table"].value["data"] in ([], [[]]) or not blocks["samples-table"].value["data"][0][0]
    ui.save_sample(clip(speechocean_dir, "000010011", tmp_path / "up"), "WE CALL IT BEAR", "Good.", "s1")
    fill = next(dep for dep in demo.fns.values() if any(event == "load" for _, event in dep.targets)
                and [getattr(out, "elem_id", None) for out in dep.outputs] == ["library-summary"])
    assert "1 recording from 1 learner" in fill.fn()


def test_the_held_out_share_and_judges_longest_answer_are_answered_beside_their_box_too(ui):
    """The two sliders left (Held-out share, Judge's Longest answer) refused a typed out-of-range value with
    Gradio's generic toast before any handler ran: they are number boxes with the range beside them now."""
    from ui.common import range_note, share_in_range
    from ui.dataset_tab import EVAL_SHARE_LABEL, EVAL_SHARE_RANGE

    built = ui.build_dataset("/no/model", 0.9, 42, 512)
    assert built[0].startswith("**✗") and "**Held-out share** must be a number from 0 to 0.5, got 0.9" in built[0]
    assert range_note(*EVAL_SHARE_RANGE, EVAL_SHARE_LABEL, check=share_in_range)(-0.1).startswith("✗ **Held-out")
    assert range_note(*EVAL_SHARE_RANGE, EVAL_SHARE_LABEL, check=share_in_range)(0.25) == ""
    judged = ui.evaluate_models(["base:some/model"], 2000)
    assert "**Longest answer (tokens)** must be a whole number from 16 to 1024, got 2000" in judged[2]
    labels = {getattr(block, "elem_id", None): block for block in __import__("app").build_ui(ui).blocks.values()}
    for elem_id in ("eval-fraction", "judge-max-tokens"):
        box = labels[elem_id]
        assert not isinstance(box, gr.Slider) and box.minimum is None and box.maximum is None, elem_id
        assert "From " in box.info


def test_a_run_is_not_started_on_a_device_this_computer_lacks(ui, monkeypatch):
    """A Memory-tab machine preset (a Mac, an NVIDIA GPU) sets the device to answer "would it fit there?";
    Start on this computer then failed once the trainer looked for that device. It is refused first."""
    import pipeline.config
    from ui.common import CONFIG_FIELDS, DEFAULTS

    monkeypatch.setattr(pipeline.config, "likely_device", lambda: "cpu")
    values = dict(DEFAULTS.to_dict(), device="mps", quantization="none")
    current, status, *_ = ui.start_training("r1", *[values[name] for name in CONFIG_FIELDS])
    assert "no Apple GPU" in status and "This computer" in status
    assert not (ui.ws.runs_dir / "r1").exists()


def test_the_train_tabs_numbers_are_answered_under_their_own_box(ui):
    """Train settings out of range were said only in the "Next run" line above Start: each number box now
    has its message under it, from the checks the command line runs."""
    from ui.common import setting_message

    assert setting_message("lora_alpha", -5) == "✗ **LoRA alpha** must be a whole number >= 1, got -5."
    assert setting_message("eval_steps", -1).startswith("✗ **Eval every N steps** must be a whole number >= 0")
    assert setting_message("early_stopping_patience", 3) == ""  # checked with its box (keep-best) ticked
    assert setting_message("learning_rate", 2e-4) == "" and setting_message("epochs", "") == "✗ Type a number here."
    blocks = {getattr(block, "elem_id", None): block for block in __import__("app").build_ui(ui).blocks.values()}
    for name in ("epochs", "learning-rate", "max-steps", "lora-alpha", "lora-dropout", "eval-steps", "save-steps",
                 "judge-clips", "early-stopping-patience"):
        assert f"{name.replace('-', '-')}-message" in blocks, name


def test_an_answer_shown_as_it_grows_ends_with_its_result_and_stops_when_the_page_leaves():
    """`ui.common.as_it_grows`, what the practice page and the Try tab stream through: each text the answer
    reports is an update (when the page keeps up), then the result; an error is raised in the page's
    thread; a page that leaves (the generator closed) makes the answer's next report raise, ending it."""
    import threading
    import time

    from pipeline.errors import ConfigError
    from ui.common import as_it_grows

    shown = threading.Semaphore(0)

    def answer(first: str, *, on_text):
        text = first
        for word in (" two", " three"):
            on_text(text)
            assert shown.acquire(timeout=30)  # the next piece once the page has shown this one
            text += word
        on_text(text)
        assert shown.acquire(timeout=30)
        return text.upper()

    seen = []
    for text, result in as_it_grows(answer, "one"):
        seen.append((text, result))
        if result is None:
            shown.release()
    assert seen == [("one", None), ("one two", None), ("one two three", None), (None, "ONE TWO THREE")]

    def refused(*, on_text):
        raise ConfigError("Record yourself first.")

    with pytest.raises(ConfigError, match="Record yourself first"):
        list(as_it_grows(refused))

    ended, raised = threading.Event(), []

    def endless(*, on_text):
        try:
            for count in range(100_000):
                on_text(str(count))
                time.sleep(0.005)
        except Exception as error:
            raised.append(error)
            raise
        finally:
            ended.set()

    updates = as_it_grows(endless)
    assert next(updates)[1] is None
    updates.close()  # the page went away
    assert ended.wait(30) and len(raised) == 1  # the answer stopped at its next report instead of running on


def test_the_try_tabs_answers_are_cleared_when_the_clip_sentence_or_tutor_changes(tmp_path):
    """Issue 32 rule 2: a new clip uploaded (or another sentence typed, another tutor picked) after Get feedback
    left the answers to the previous one beside it. A person's change clears both answers and the note; the
    Train tab's poll, which sets the run list, does not (`input`, not `change`)."""
    import app as app_module
    from ui.tutor_app import TutorApp

    demo = app_module.build_ui(TutorApp(tmp_path / "ws"))
    blocks = demo.blocks
    cleared_by = {}
    for dep in demo.fns.values():
        outputs = [getattr(out, "elem_id", None) for out in dep.outputs]
        if outputs == ["tuned-feedback", "base-feedback", "try-note"]:
            for target_id, event in dep.targets:
                cleared_by[getattr(blocks.get(target_id), "elem_id", None)] = event
    assert {key: cleared_by.get(key) for key in ("try-audio", "try-target", "try-run")} == {
        "try-audio": "input", "try-target": "input", "try-run": "input"}, cleared_by


def test_timer_ticks_never_show_gradios_progress_timers(tmp_path):
    """The new-user pass: "processing | 0.9/1.2s" and "queue: 1/1" flashed inside the Train tab's headline,
    status and memory lines and the Memory tab's calibration line. Every timer tick (and anything chained after
    one) refreshes with `show_progress="hidden"`, the Train and Memory panels included."""
    import app as app_module
    from ui.tutor_app import TutorApp

    demo = app_module.build_ui(TutorApp(tmp_path / "ws"))
    ticks = {i for i, dep in demo.fns.items() if any(event == "tick" for _, event in dep.targets)}
    chained = {i for i, dep in demo.fns.items() if dep.trigger_after in ticks}
    outputs = {getattr(out, "elem_id", None) for i in ticks for out in demo.fns[i].outputs}
    assert {"train-headline", "train-status", "train-memory", "measured"} <= outputs, outputs
    for i in ticks | chained:
        assert demo.fns[i].show_progress == "hidden", [getattr(o, "elem_id", None) for o in demo.fns[i].outputs]
