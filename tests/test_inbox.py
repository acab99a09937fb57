"""The practice page's setup and answers, and the inbox (issue 22 #2 and #4): consent decides what is
kept; accepted attempts become samples of their kind with the student as speaker; nothing is lost."""

from __future__ import annotations

import json
import re

import gradio as gr
import pytest

from pipeline.data.samples import SampleLibrary
from pipeline.data.session import SessionStore
from pipeline.errors import AudioError, ConfigError, SampleError
from pipeline.inbox.cli import inbox_main
from pipeline.inbox.practice import answer_attempt, load_setup, save_setup, setup_from_list
from pipeline.inbox.store import Inbox
from tests.training_data import copy_workspace, one_step_run

CLIPS = ["WAVE/SPEAKER0001/000010011.WAV", "WAVE/SPEAKER0001/000010035.WAV", "WAVE/SPEAKER0001/000010053.WAV"]
ITEMS = ["WE CALL IT BEAR", "ZERO THREE FIVE ONE", "THREE TWO TWO SEVEN"]


@pytest.fixture(scope="module")
def trained(tmp_path_factory, speechocean_dir, tiny_model_dir):
    """A workspace with run `r1` (one step on the tiny random model: an adapter that answers): this module's
    copy of the session's `one_step_run`."""
    return copy_workspace(one_step_run(tmp_path_factory, speechocean_dir, tiny_model_dir),
                          tmp_path_factory.mktemp("inbox") / "ws")


@pytest.fixture()
def inbox_ws(tmp_path):
    """An empty workspace (the inbox and library need no model)."""
    return tmp_path / "ws"


@pytest.mark.slow
def test_consent_decides_what_is_kept(trained, speechocean_dir):
    save_setup(trained, "r1", ITEMS)
    inbox = Inbox(trained)
    before = len(inbox.list())
    result = answer_attempt(trained, speechocean_dir / CLIPS[0], 0, student="kim", consent=False, max_new_tokens=8)
    assert result["attempt"] is None and result["exercise"] == ITEMS[0]
    assert result["tiny_random_model"] and "meaningless" in result["note"]  # the page says it is a stand-in
    assert len(inbox.list()) == before and not list((trained / "inbox").glob("audio/*"))
    result = answer_attempt(trained, speechocean_dir / CLIPS[1], 1, student="kim", consent=True, max_new_tokens=8)
    attempt = inbox.get(result["attempt"])
    assert (attempt.student, attempt.exercise, attempt.answer, attempt.run) == ("kim", ITEMS[1], result["text"], "r1")
    assert attempt.status == "pending" and attempt.tiny_random_model and inbox.audio_path(attempt).is_file()
    assert attempt.duration_s > 0.3 and attempt.created_at > 0
    with pytest.raises(ConfigError, match="name"):
        answer_attempt(trained, speechocean_dir / CLIPS[0], 0, student=" ", consent=True)
    with pytest.raises(ConfigError, match="Exercise 9 does not exist"):
        answer_attempt(trained, speechocean_dir / CLIPS[0], 8, student="kim", consent=True)


@pytest.mark.slow
def test_the_practice_handlers_answer_and_say_what_is_kept(trained, speechocean_dir):
    from ui.practice_page import PracticeHandlers

    save_setup(trained, "r1", ITEMS)
    handlers = PracticeHandlers(SampleLibrary(trained).workspace)
    _name, exercises, note, consent = handlers.on_load(None, None)
    assert exercises["choices"][2] == ("3. THREE TWO TWO SEVEN", 2) and "test tutor" in note and "teacher" not in note
    assert consent["value"] is False  # never ticked for the student
    name, _exercises, _note, consent = handlers.on_load({"name": "lee", "consent": True}, None)
    assert name["value"] == "lee" and consent["value"] is True  # given once, remembered by this browser
    count = len(Inbox(trained).list())
    updates = list(handlers.answer(str(speechocean_dir / CLIPS[2]), 2, "lee", True))  # the answer as it grows
    text, status = updates[-1]
    assert all(update[1] == "The tutor is answering…" and text.startswith(update[0]) for update in updates[:-1])
    assert "Kept for your teacher" in status and "test tutor" in status
    assert Inbox(trained).list()[-1].answer == text and len(Inbox(trained).list()) == count + 1
    [(_text, status)] = handlers.answer(None, 2, "lee", True)
    assert "Record yourself first" in status and len(Inbox(trained).list()) == count + 1


def test_the_practice_page_before_its_setup_says_so_and_asks_for_a_clip_and_an_exercise(inbox_ws):
    """The page builds without a run; until the teacher sets the practice it says so, and an attempt
    without a clip or without an exercise is answered with what to do, nothing kept."""
    from pipeline.workspace import Workspace
    from ui.practice_page import build_practice

    built = build_practice(Workspace(inbox_ws).ensure())
    _name, exercises, note, consent = built.handlers.on_load(None, None)
    assert exercises["choices"] == [] and "has not set up the practice yet" in note and consent["value"] is False
    [(_text, status)] = built.handlers.answer(None, 0, "lee", True)
    assert "Record yourself first" in status
    [(_text, status)] = built.handlers.answer("take.wav", None, "lee", True)
    assert "Pick an exercise first" in status
    assert Inbox(inbox_ws).list() == []


def test_accept_makes_a_sample_of_its_kind_with_the_student_as_speaker(inbox_ws, speechocean_dir):
    inbox = Inbox(inbox_ws)
    read = inbox.add(speechocean_dir / CLIPS[0], student="kim", kind="read_aloud", exercise=ITEMS[0], answer="Good BEAR.")
    free = inbox.add(speechocean_dir / CLIPS[1], student="lee", kind="free_speech", exercise="Describe your home",
                     answer="Fluent.")
    dropped = inbox.add(speechocean_dir / CLIPS[2], student="kim", kind="read_aloud", exercise=ITEMS[2], answer="x")
    assert [a.id for a in inbox.list("pending")] == [read.id, free.id, dropped.id]

    attempt, sample = inbox.accept(read.id, "Say BEAR with an open EH.")
    assert (sample.kind, sample.speaker, sample.target_text, sample.feedback) == (
        "read_aloud", "kim", ITEMS[0], "Say BEAR with an open EH.")
    assert attempt.status == "accepted" and attempt.sample_id == sample.id and attempt.feedback == sample.feedback
    _attempt, free_sample = inbox.accept(free.id)  # the tutor's draft as it was
    assert (free_sample.kind, free_sample.prompt, free_sample.feedback, free_sample.speaker) == (
        "free_speech", "Describe your home", "Fluent.", "lee")
    inbox.reject(dropped.id)
    assert [a.status for a in inbox.list()] == ["accepted", "accepted", "rejected"]
    assert inbox.audio_path(inbox.get(dropped.id)).is_file()  # rejected, but kept

    # accepting again (a double click, or after a crash between the two writes) adds no second sample
    assert inbox.accept(read.id)[1].id == sample.id and len(SampleLibrary(inbox_ws).list()) == 2
    with pytest.raises(SampleError, match="already sample"):
        inbox.reject(read.id)
    with pytest.raises(SampleError, match="empty"):
        inbox.accept(dropped.id, "   ")
    assert inbox.get(dropped.id).status == "rejected"  # a refused accept changes nothing
    with pytest.raises(SampleError, match="No attempt"):
        inbox.get("a-1-000000")
    with pytest.raises(AudioError):
        inbox.add(b"not audio", student="kim", kind="read_aloud", exercise=ITEMS[0], answer="x")
    assert len(inbox.list()) == 3


def test_a_not_scored_answer_is_never_accepted_as_feedback(inbox_ws, speechocean_dir):
    """A new user's finding: the classical scorer's "Not scored: ..." answer, accepted from the inbox, became a
    sample's feedback and then a training row; Accept draft already refused it."""
    inbox = Inbox(inbox_ws)
    before = len(SampleLibrary(inbox_ws).list())
    tried = inbox.add(speechocean_dir / CLIPS[0], student="kim", kind="read_aloud", exercise="I have 3 cats",
                      answer="Not scored: The recording does not fit the sentence.")
    with pytest.raises(SampleError, match="is not feedback .*Not scored: The recording.*type the feedback"):
        inbox.accept(tried.id)
    assert inbox.get(tried.id).status == "pending" and len(SampleLibrary(inbox_ws).list()) == before
    assert inbox.accept(tried.id, "Scores (0-10): accuracy 7, fluency 8, prosody 8, total 7")[1].feedback.startswith("Scores")


@pytest.mark.slow
def test_setup_from_the_session_list_or_a_file_and_its_errors(trained, tmp_path):
    with pytest.raises(ConfigError, match="no trained adapter.*r1"):
        save_setup(trained, "nope", ITEMS)
    with pytest.raises(ConfigError, match="empty"):
        save_setup(trained, "r1", ["  "])
    SessionStore(trained).start(["Describe your home", "Your last holiday"], kind="free_speech", speaker="kim")
    setup = setup_from_list(trained, "r1", "session")
    assert (setup.kind, setup.items, setup.source) == ("free_speech", ["Describe your home", "Your last holiday"],
                                                       "session")
    (tmp_path / "list.txt").write_text("# week 3\nWE CALL IT BEAR\n\nZERO THREE FIVE ONE\n", encoding="utf-8")
    setup = setup_from_list(trained, "r1", str(tmp_path / "list.txt"))
    assert (setup.kind, setup.items) == ("read_aloud", ITEMS[:2]) and load_setup(trained) == setup
    with pytest.raises(ConfigError, match="not a file"):
        setup_from_list(trained, "r1", str(tmp_path / "missing.txt"))


def test_inbox_command_lists_accepts_and_rejects(inbox_ws, speechocean_dir, capsys):
    inbox = Inbox(inbox_ws)
    first = inbox.add(speechocean_dir / CLIPS[0], student="kim", kind="read_aloud", exercise=ITEMS[0], answer="Good.")
    second = inbox.add(speechocean_dir / CLIPS[1], student="kim", kind="read_aloud", exercise=ITEMS[1], answer="Hm.")
    assert inbox_main(["--workspace", str(inbox_ws), "--json"]) == 0
    assert [a["id"] for a in json.loads(capsys.readouterr().out)["attempts"]] == [first.id, second.id]
    assert inbox_main(["--workspace", str(inbox_ws), "--accept", first.id, "--feedback", "Very good.", "--json"]) == 0
    sample_id = json.loads(capsys.readouterr().out)["sample"]
    assert SampleLibrary(inbox_ws).get(sample_id).feedback == "Very good."
    assert inbox_main(["--workspace", str(inbox_ws), "--reject", second.id]) == 0
    assert "Rejected" in capsys.readouterr().out
    assert inbox_main(["--workspace", str(inbox_ws), "--status", "pending"]) == 0
    assert "The inbox is empty." in capsys.readouterr().out


def test_the_inbox_tab_accepts_and_moves_to_the_next(inbox_ws, speechocean_dir):
    from ui.tutor_app import TutorApp

    app = TutorApp(inbox_ws)
    inbox = Inbox(app.ws)
    first = inbox.add(speechocean_dir / CLIPS[0], student="kim", kind="read_aloud", exercise=ITEMS[0], answer="Draft 1")
    second = inbox.add(speechocean_dir / CLIPS[1], student="lee", kind="read_aloud", exercise=ITEMS[1], answer="Draft 2")
    _table, current, audio, about, feedback, _status = app.inbox_show()
    assert current == first.id and audio.endswith(f"{first.id}.wav") and "1 of 2 waiting" in about
    assert feedback["value"] == "Draft 1"
    _table, current, _audio, about, feedback, status = app.inbox_accept(first.id, "Edited 1")
    assert current == second.id and feedback["value"] == "Draft 2" and "Accepted" in status
    assert [s.feedback for s in SampleLibrary(app.ws).list()] == ["Edited 1"]
    _table, current, *_rest, status = app.inbox_reject(second.id)
    assert current is None and "No attempts waiting" in status


@pytest.mark.slow
def test_the_studio_sets_the_practice(trained):
    from ui.tutor_app import TutorApp

    app = TutorApp(trained, practice_url="http://127.0.0.1:7861/")
    status = app.practice_setup("r1", "Free speech (prompts)", "Describe your home\n# not this one\nYour last holiday\n")
    assert "Offering 2 exercises" in status and "http://127.0.0.1:7861/" in status
    setup = load_setup(trained)
    assert (setup.run, setup.kind, setup.items) == ("r1", "free_speech", ["Describe your home", "Your last holiday"])
    assert "No tutor picked" in app.practice_setup("", "Read aloud (sentences)", "A sentence.")
    assert load_setup(trained) == setup  # a refused setup leaves the saved one


def test_the_practice_setups_tutor_list_is_asked_again_and_offer_without_a_pick_says_what_to_pick(inbox_ws):
    """Issue 32 rules 2 and 4: the Tutor list was the page load's, so a run trained since was missing and Offer
    answered "Run `` has no trained adapter in /…/runs; pick one of: walk-run" (an empty name, a folder the
    teacher never saw). The list is asked again when the tab opens (the pick kept); Offer without one says what
    to pick."""
    from ui.tutor_app import TutorApp

    app = TutorApp(inbox_ws)
    assert "No tutor to offer yet" in app.practice_setup("", "Read aloud (sentences)", "A sentence.")
    for run in ("r1", "r2"):  # two runs trained after the page loaded
        (app.ws.runs_dir / run / "adapter").mkdir(parents=True)
        (app.ws.runs_dir / run / "adapter" / "adapter_config.json").write_text("{}")
    choices = app.inbox.run_choices()
    assert sorted(value for _, value in choices["choices"]) == ["classical-scorer", "r1", "r2"] and choices["value"] in ("r1", "r2")
    assert choices["choices"][-1] == ("Classical scorer (no fine-tuning)", "classical-scorer")
    assert app.inbox.run_choices("r1")["value"] == "r1"  # the teacher's pick stays
    status = app.practice_setup("", "Read aloud (sentences)", "A sentence.")
    assert status.startswith("✗ No tutor picked") and "runs" not in status and "``" not in status


def test_attempts_arriving_together_are_all_kept(inbox_ws, speechocean_dir):
    """One file per attempt: students answering at the same moment never overwrite each other."""
    from concurrent.futures import ThreadPoolExecutor

    inbox = Inbox(inbox_ws)

    def add(number: int):
        return inbox.add(speechocean_dir / CLIPS[number % 3], student=f"s{number}", kind="read_aloud",
                         exercise=ITEMS[number % 3], answer=f"answer {number}").id

    with ThreadPoolExecutor(4) as pool:
        ids = list(pool.map(add, range(8)))
    assert sorted(a.id for a in inbox.list()) == sorted(ids) and len(set(ids)) == 8


@pytest.mark.slow
def test_the_practice_page_builds_without_heavy_imports(tmp_path):
    """Like the studio, the students' page comes up without torch / transformers / datasets."""
    import subprocess
    import sys

    from tests.browser import REPO_ROOT

    code = ("import sys\nfrom pipeline.workspace import Workspace\nfrom ui.practice_page import build_practice\n"
            f"build_practice(Workspace({str(tmp_path / 'ws')!r}).ensure())\n"
            "print(sorted(m for m in ('torch', 'transformers', 'datasets', 'peft') if m in sys.modules))\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "[]"


def test_two_teachers_deciding_one_attempt_are_told_not_overwritten(inbox_ws, speechocean_dir):
    """Issue 31 #5: both teachers were told "Accepted" and the last feedback silently won."""
    inbox = Inbox(inbox_ws)
    attempt = inbox.add(speechocean_dir / CLIPS[0], student="kim", kind="read_aloud", exercise=ITEMS[0], answer="Draft")
    inbox.accept(attempt.id, "First teacher's words.", expected_status="pending", by="ms-lee")
    with pytest.raises(SampleError, match=r"was accepted by ms-lee at \d\d:\d\d with the feedback .First teacher's "
                                          r"words.* while you had it open, so it was not accepted again"):
        inbox.accept(attempt.id, "Second teacher's words.", expected_status="pending", by="mr-park")
    with pytest.raises(SampleError, match="accepted by ms-lee"):
        inbox.reject(attempt.id, expected_status="pending", by="mr-park")
    (sample,) = SampleLibrary(inbox_ws).list()
    assert sample.feedback == "First teacher's words." and inbox.get(attempt.id).decided_by == "ms-lee"


def test_attempts_are_deleted_by_their_student_or_a_teacher_with_their_sample(inbox_ws, speechocean_dir, capsys):
    """Issue 31 #2: consent could not be withdrawn. A student deletes their own attempts (not another's); a
    teacher any; an accepted one takes its library sample with it."""
    inbox = Inbox(inbox_ws)
    kims = [inbox.add(speechocean_dir / clip, student="kim", kind="read_aloud", exercise=item, answer="x")
            for clip, item in zip(CLIPS[:2], ITEMS[:2])]
    lees = inbox.add(speechocean_dir / CLIPS[2], student="lee", kind="read_aloud", exercise=ITEMS[2], answer="y")
    inbox.accept(kims[0].id)
    assert [a.id for a in inbox.list(student="kim")] == [a.id for a in kims]
    with pytest.raises(SampleError, match="not yours"):
        inbox.delete(lees.id, student="kim")
    inbox.delete(kims[0].id, student="kim")
    assert SampleLibrary(inbox_ws).list() == [] and not inbox.audio_path(kims[0]).exists()
    assert inbox_main(["--workspace", str(inbox_ws), "--delete", lees.id]) == 0
    assert "Deleted" in capsys.readouterr().out
    assert [a.id for a in inbox.list()] == [kims[1].id]
    with pytest.raises(SampleError, match="No attempt"):
        inbox.delete(lees.id)


def test_a_full_disk_keeps_no_orphan_clip_and_the_student_still_reads_the_answer(inbox_ws, speechocean_dir, monkeypatch):
    """Issue 31 #5: on a full disk `Inbox.add` could leave a clip without its record, and the student got a raw
    error after the tutor had answered."""
    import errno

    import pipeline.inbox.store as store

    inbox = Inbox(inbox_ws)
    real_write = store.atomic_write_json

    def full_disk(path, obj):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(store, "atomic_write_json", full_disk)
    with pytest.raises(SampleError, match="not kept: writing it into .* failed .No space left on device.*Nothing of it was stored"):
        inbox.add(speechocean_dir / CLIPS[0], student="kim", kind="read_aloud", exercise=ITEMS[0], answer="x")
    assert not list((inbox_ws / "inbox").rglob("*.wav"))  # the clip written first went too
    monkeypatch.setattr(store, "atomic_write_json", real_write)
    monkeypatch.setattr(store, "disk_room", lambda folder, wanted: (1000, int(wanted)))
    with pytest.raises(SampleError, match="has 1000 bytes free"):
        inbox.add(speechocean_dir / CLIPS[0], student="kim", kind="read_aloud", exercise=ITEMS[0], answer="x")
    assert inbox.list() == []


def test_the_attempt_rate_is_checked_before_any_work():
    from pipeline.inbox.practice import AttemptRate

    rate = AttemptRate(3)
    for _ in range(3):
        rate.take("kim")
    with pytest.raises(ConfigError, match=r"You have sent 3 attempts in the last hour, the most this page takes; "
                                          r"try again in \d+ min \d+ s"):
        rate.take("kim")
    rate.take("lee")  # another student is not held up
    with pytest.raises(ConfigError, match="at least 1"):
        AttemptRate(0)


def test_a_student_sees_and_deletes_their_own_kept_attempts_on_the_page(inbox_ws, speechocean_dir):
    """Issue 31 #2: under My kept attempts a student lists and deletes their own attempts (never another's)."""
    from pipeline.workspace import Workspace
    from ui.practice_page import build_practice

    inbox = Inbox(inbox_ws)
    kims = [inbox.add(speechocean_dir / clip, student="kim", kind="read_aloud", exercise=item, answer="Good.")
            for clip, item in zip(CLIPS[:2], ITEMS[:2])]
    inbox.add(speechocean_dir / CLIPS[2], student="lee", kind="read_aloud", exercise=ITEMS[2], answer="Fine.")
    handlers = build_practice(Workspace(inbox_ws)).handlers
    table, choices, status = handlers.my_attempts("kim", None)
    assert re.findall(r"^- \*\*[^*]+\*\* · \*(.+)\*", table, re.M) == ITEMS[:2]
    assert status == "2 attempts kept for your teacher." and "Tutor: Good." in table and "not seen yet" in table
    assert [value for _label, value in choices["choices"]] == [a.id for a in kims]
    _table, choices, status = handlers.delete_mine(kims[0].id, "kim", None)
    assert "Deleted your attempt at *WE CALL IT BEAR*" in status
    assert [value for _label, value in choices["choices"]] == [kims[1].id]
    lees = inbox.list(student="lee")[0].id
    *_rest, status = handlers.delete_mine(lees, "kim", None)
    assert "not yours" in status and len(inbox.list()) == 2
    *_rest, status = handlers.my_attempts("  ", None)
    assert "Type your name first" in status
    # the new-user pass: right after "Kept for your teacher" the table stayed empty until Show my attempts; the
    # answer's event now lists them, and changes nothing when nothing could have been kept
    table, _choices, status = handlers.refresh_mine("kim", True, None)
    assert re.findall(r"^- \*\*[^*]+\*\* · \*(.+)\*", table, re.M) == ITEMS[1:2]
    assert status == "1 attempt kept for your teacher."
    assert all(update == gr.skip() for update in handlers.refresh_mine("kim", False, None))
    assert all(update == gr.skip() for update in handlers.refresh_mine(" ", True, None))
    page = build_practice(Workspace(inbox_ws)).page
    refresh = [fn for fn in page.fns.values() if getattr(fn.fn, "__name__", "") == "refresh_mine"]
    assert refresh and "practice-mine-table" in {getattr(block, "elem_id", None) for block in refresh[0].outputs}
    answer = next(fn for fn in page.fns.values() if getattr(fn.fn, "__name__", "") == "answer")
    assert refresh[0].trigger_after == answer._id, "the list follows the answer"


def test_an_upload_is_discarded_with_its_copies_and_nothing_else(tmp_path, monkeypatch):
    """Issue 31 #2: what Gradio stored on upload (and a converted copy beside it) goes once answered; a path
    outside Gradio's upload folder (a test's clip, a script's file) is never touched."""
    from ui.practice_page import discard_upload

    monkeypatch.setenv("GRADIO_TEMP_DIR", str(tmp_path / "gradio"))
    upload = tmp_path / "gradio" / "3f2a" / "take.webm"
    upload.parent.mkdir(parents=True)
    upload.write_bytes(b"webm")
    upload.with_suffix(".wav").write_bytes(b"wav")
    other = tmp_path / "gradio" / "77aa" / "someone-else.wav"
    other.parent.mkdir()
    other.write_bytes(b"x")
    outside = tmp_path / "mine.wav"
    outside.write_bytes(b"keep")
    discard_upload(str(upload.with_suffix(".wav")))
    assert not upload.parent.exists() and other.is_file()
    discard_upload(str(outside))
    discard_upload(None)
    assert outside.read_bytes() == b"keep"


def test_the_page_says_why_a_consented_attempt_was_not_kept():
    from ui.practice_view import answer_status

    assert answer_status(True, False) == "✓ Kept for your teacher."
    assert answer_status(False, False).startswith("Not stored: your recording was deleted once answered")
    assert answer_status(False, False, "the disk is full").startswith("✗ Not kept for your teacher: the disk is full")


def test_the_inbox_tab_deletes_the_shown_attempt_and_refuses_a_stale_decision(inbox_ws, speechocean_dir):
    from ui.tutor_app import TutorApp

    app = TutorApp(inbox_ws)
    inbox = Inbox(app.ws)
    first = inbox.add(speechocean_dir / CLIPS[0], student="kim", kind="read_aloud", exercise=ITEMS[0], answer="Draft 1")
    second = inbox.add(speechocean_dir / CLIPS[1], student="lee", kind="read_aloud", exercise=ITEMS[1], answer="Draft 2")
    _table, current, *_rest, status = app.inbox.delete(first.id)
    assert current == second.id and "Deleted kim's attempt" in status and [a.id for a in inbox.list()] == [second.id]
    inbox.accept(second.id, "Another teacher's words.", expected_status="pending", by="mr-park")
    *_rest, status = app.inbox.accept(second.id, "Mine.")  # the tab still showed it waiting
    assert "accepted by mr-park" in status and "was not accepted again" in status
    assert SampleLibrary(app.ws).list()[0].feedback == "Another teacher's words."


def test_an_attempt_already_in_the_library_says_which_sample_and_is_marked_done(inbox_ws, speechocean_dir):
    """Issue 32 leftovers: an attempt whose clip was already a sample stayed stuck (Accept refused it as a
    duplicate, with "(in the app: click it in the Saved samples table)", words for another screen). The tab now
    says which sample it is before anything is clicked, and Accept marks it done: nothing added or changed."""
    from ui.tutor_app import TutorApp
    from ui.wording import app_wording

    app = TutorApp(inbox_ws)
    library = SampleLibrary(app.ws)
    mine = library.add(speechocean_dir / CLIPS[0], target_text=ITEMS[0], feedback="Teacher's own.", speaker="s1")
    inbox = Inbox(app.ws)
    again = inbox.add(speechocean_dir / CLIPS[0], student="kim", kind="read_aloud", exercise=ITEMS[0], answer="Draft")
    new = inbox.add(speechocean_dir / CLIPS[1], student="lee", kind="read_aloud", exercise=ITEMS[1], answer="Draft 2")
    _table, current, _audio, about, _feedback, _status = app.inbox_show()
    assert current == again.id and f"already in the library: sample `{mine.id}`" in about and "marks this" in about
    _table, current, _audio, about, _feedback, status = app.inbox_accept(again.id, "Edited")
    assert current == new.id and "already in the library" not in about  # the next one is not a duplicate
    assert status.startswith("✓ Marked done") and f"sample `{mine.id}`" in status and "✗" not in status, status
    assert [(s.id, s.feedback) for s in library.list()] == [(mine.id, "Teacher's own.")]  # nothing added or changed
    done = inbox.get(again.id)
    assert done.status == "accepted" and done.same_as == mine.id and inbox.list("pending") == [new]
    with pytest.raises(SampleError, match="marked done.*nothing to reject"):
        inbox.reject(again.id)
    # New-user pass: kim's "My kept attempts" said "Your teacher: kept as a sample", and the note above it that a
    # delete removes it "also from the teacher's library", where the teacher's own sample stays: each true now.
    from ui.practice_page import CONSENT_LABEL, build_practice
    from ui.practice_view import MINE_NOTE

    student = build_practice(app.ws).handlers
    table, _choices, _status = student.my_attempts("kim", None)
    assert "Your teacher: already had this recording, so nothing was added" in table and "kept as a sample" not in table
    assert "also from the teacher's library" not in MINE_NOTE and "if they kept it as one" in MINE_NOTE
    assert "Untick" not in CONSENT_LABEL and CONSENT_LABEL.startswith("Tick to keep"), "the box starts unticked"
    *_rest, status = student.delete_mine(again.id, "kim", None)  # deleting the attempt keeps the teacher's sample
    assert "Your teacher's own copy of this recording stays in their library." in status, status
    assert [s.id for s in library.list()] == [mine.id]
    app.inbox_accept(new.id, "Kept")  # a sample made from lee's attempt: deleting it removes that sample too
    assert len(library.list()) == 2
    *_rest, status = student.delete_mine(new.id, "lee", None)
    assert "and so is the sample your teacher made from it." in status, status
    assert [s.id for s in library.list()] == [mine.id]
    # The library's duplicate message, shown on the Samples tab, speaks of that screen, not "(in the app: …)".
    with pytest.raises(SampleError) as refused:
        library.add(speechocean_dir / CLIPS[0], target_text=ITEMS[0], feedback="x")
    shown = app_wording(str(refused.value))
    assert "in the app" not in shown and "edit it: click it in the Saved samples table" in shown, shown


def test_the_practice_setup_offers_the_newest_completed_run_and_labels_unfinished_ones(inbox_ws):
    """Issue 32 leftovers: the practice setup picked an unfinished run (the last by name, which was a stopped one)
    by default. It picks the newest completed run, and the list says which runs are unfinished."""
    import os
    import time

    from ui.tutor_app import TutorApp

    app = TutorApp(inbox_ws)
    for age, (run, status) in enumerate((("c-old", "completed"), ("done", "completed"), ("z-stopped", "stopped"))):
        folder = app.ws.runs_dir / run
        (folder / "adapter").mkdir(parents=True)
        (folder / "adapter" / "adapter_config.json").write_text("{}")
        (folder / "result.json").write_text(json.dumps({"status": status, "reason": "Stopped."}))
        stamp = time.time() - 100 + 10 * age  # made in this order: z-stopped newest
        os.utime(folder, (stamp, stamp))
    choices = app.inbox.run_choices()
    assert choices["value"] == "done", choices  # the newest completed run, not the newer stopped one
    assert choices["choices"] == [("z-stopped · unfinished: stopped before the end", "z-stopped"), ("done", "done"),
                                  ("c-old", "c-old"), ("Classical scorer (no fine-tuning)", "classical-scorer")]
    assert app.inbox.run_choices("z-stopped")["value"] == "z-stopped"  # the teacher may still pick it, knowingly

