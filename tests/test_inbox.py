"""The practice page's setup and answers, and the inbox (issue 22 #2 and #4): consent decides what is
kept; accepted attempts become samples of their kind with the student as speaker; nothing is lost."""

from __future__ import annotations

import json

import pytest

from pipeline.data.samples import SampleLibrary
from pipeline.data.session import SessionStore
from pipeline.errors import AudioError, ConfigError, SampleError
from pipeline.inbox.cli import inbox_main
from pipeline.inbox.practice import answer_attempt, load_setup, save_setup, setup_from_list
from pipeline.inbox.store import Inbox
from tests.training_data import copy_workspace, real_workspace

CLIPS = ["WAVE/SPEAKER0001/000010011.WAV", "WAVE/SPEAKER0001/000010035.WAV", "WAVE/SPEAKER0001/000010053.WAV"]
ITEMS = ["WE CALL IT BEAR", "ZERO THREE FIVE ONE", "THREE TWO TWO SEVEN"]


@pytest.fixture(scope="module")
def trained(tmp_path_factory, speechocean_dir, tiny_model_dir):
    """A workspace with run `r1` (one step on the tiny random model: an adapter that answers)."""
    from pipeline.config import TrainConfig
    from pipeline.training.train import train

    ws = copy_workspace(real_workspace(tmp_path_factory, speechocean_dir, tiny_model_dir, keep=6, eval_fraction=0.34),
                        tmp_path_factory.mktemp("inbox") / "ws")
    config = TrainConfig(model=str(tiny_model_dir), device="cpu", quantization="none", lora_rank=4, lora_alpha=8,
                         batch_size=1, grad_accum=1, max_steps=1, eval_steps=0, save_steps=0, seed=1)
    assert train(config, ws, "r1")["status"] == "completed"
    return ws


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
    assert exercises["choices"][2] == ("3. THREE TWO TWO SEVEN", 2) and "random stand-in" in note
    assert consent["value"] is False  # never ticked for the student
    name, _exercises, _note, consent = handlers.on_load({"name": "lee", "consent": True}, None)
    assert name["value"] == "lee" and consent["value"] is True  # given once, remembered by this browser
    count = len(Inbox(trained).list())
    updates = list(handlers.answer(str(speechocean_dir / CLIPS[2]), 2, "lee", True))  # the answer as it grows
    text, status = updates[-1]
    assert all(update[1] == "The tutor is answering…" and text.startswith(update[0]) for update in updates[:-1])
    assert "Kept for your teacher" in status and "stand-in" in status
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
    assert "no trained adapter" in app.practice_setup("", "Read aloud (sentences)", "A sentence.")
    assert load_setup(trained) == setup  # a refused setup leaves the saved one


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
