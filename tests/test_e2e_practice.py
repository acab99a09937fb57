"""End-to-end (issue 22): a student practises on the practice page, the teacher accepts from the inbox.

The app runs as `python app.py --shared --auth-file USERS --practice-run r1 --practice-list LIST` (a
login required, as when shared beyond this computer). The student (one browser context) logs in on
the practice page, ticks consent once, records two attempts (uploaded clips) and reads the tutor's
feedback, which the page says comes from a test tutor. The teacher (another context) logs in
to the studio, opens the Inbox, edits the first draft and accepts it with Shift+Enter, which shows
the next attempt; the accepted one is then a sample of the library with the student as speaker.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.access.accounts import Accounts
from pipeline.data.samples import SampleLibrary
from pipeline.inbox.store import Inbox
from tests.browser import VIEWPORT, WAIT_MS, free_port, launch_app, open_tab, shot, wait_text, write_voice
from tests.training_data import copy_workspace, one_step_run

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

EXERCISES = ["She sells sea shells.", "The quick brown fox."]


@pytest.fixture()
def practice_app(tmp_path, tmp_path_factory, speechocean_dir, tiny_model_dir):
    """The app on free loopback ports in shared mode with a teacher and a student account and a trained run
    offered for practice; yields (studio URL, practice URL, workspace). Stopped at teardown."""
    ws = copy_workspace(one_step_run(tmp_path_factory, speechocean_dir, tiny_model_dir), tmp_path / "ws")
    accounts = Accounts()
    accounts.add("ms-lee", "teach-pass", role="teacher")
    accounts.add("kim", "kim-pass1", role="student")
    accounts.save(tmp_path / "users.json")
    (tmp_path / "week3.txt").write_text("\n".join(EXERCISES) + "\n", encoding="utf-8")
    port, practice_port = free_port(), free_port()
    log_path = tmp_path / "app.log"
    with launch_app(ws, log_path, "--port", str(port), "--practice-port", str(practice_port), "--shared",
                    "--auth-file", str(tmp_path / "users.json"), "--practice-run", "r1",
                    "--practice-list", str(tmp_path / "week3.txt"),
                    ready=lambda: "Students' practice page" in log_path.read_text(), timeout_s=90):
        yield f"http://127.0.0.1:{port}/", f"http://127.0.0.1:{practice_port}/", ws


def _login(page, url: str, user: str, password: str) -> None:
    page.goto(url)
    page.get_by_label("username").fill(user)
    page.get_by_label("password").fill(password)
    page.get_by_role("button", name="Login").click()


def _attempt(page, clip: Path, number: int) -> str:
    """Pick exercise `number` (1-based), upload `clip`, get feedback; returns the feedback text."""
    if number > 1:
        page.locator("#practice-exercise input").first.click()
        page.get_by_role("option", name=f"{number}. {EXERCISES[number - 1]}").click()
        page.wait_for_selector("#practice-audio button[aria-label='Upload file']")
    page.locator("#practice-audio button[aria-label='Upload file']").click()
    page.locator("#practice-audio input[type=file]").set_input_files(str(clip))
    page.wait_for_selector("#practice-audio audio, #practice-audio .waveform-container", state="attached")
    page.click("#practice-submit")
    wait_text(page, "#practice-status", r"Kept for your teacher", timeout_s=240)
    return page.locator("#practice-feedback textarea").first.input_value()


def test_student_practises_and_the_teacher_accepts_from_the_inbox(practice_app, browser, tmp_path):
    studio_url, practice_url, ws = practice_app
    clips = [write_voice(tmp_path / f"{name}.wav", pitch_hz=pitch, seed=int(pitch))
             for name, pitch in (("one", 140.0), ("two", 190.0))]
    student = browser.new_context(viewport={"width": 1100, "height": 900}).new_page()
    student.set_default_timeout(WAIT_MS)
    _login(student, practice_url, "kim", "kim-pass1")
    wait_text(student, "#practice-note", r"test tutor", timeout_s=60)
    wait_text(student, "#practice-name", r"kim")  # the login is the name
    assert not student.locator("#practice-name input, #practice-name textarea").first.is_editable()
    assert not student.locator("#tab-samples, #load-pack").count()  # nothing of the studio here
    student.locator("#practice-consent input").check()
    answers = [_attempt(student, clip, number) for number, clip in enumerate(clips, start=1)]
    assert all(answers)
    shot(student, "practice-student")
    student.reload()  # consent is given once: the reopened page remembers it
    wait_text(student, "#practice-note", r"test tutor", timeout_s=60)
    assert student.locator("#practice-consent input").is_checked()

    # a student's account does not open the studio
    intruder = browser.new_context().new_page()
    _login(intruder, studio_url, "kim", "kim-pass1")
    wait_text(intruder, "#login-message", r"kim is a student account.*practice page is " + practice_url, timeout_s=30)
    assert not intruder.locator("#load-pack").count()

    teacher = browser.new_context(viewport=VIEWPORT).new_page()
    teacher.set_default_timeout(WAIT_MS)
    _login(teacher, studio_url, "ms-lee", "teach-pass")
    teacher.wait_for_selector("#load-pack")
    open_tab(teacher, "7 · Inbox")
    wait_text(teacher, "#inbox-about", r"1 of 2 waiting.*kim.*She sells sea shells", timeout_s=60)
    box = teacher.locator("#inbox-feedback textarea").first
    assert box.input_value() == answers[0]  # the tutor's answer is the draft
    box.fill("Clear S sounds; stress SHELLS.")
    box.press("Shift+Enter")  # accept and go to the next
    wait_text(teacher, "#inbox-status", r"Accepted: sample", timeout_s=60)
    wait_text(teacher, "#inbox-about", r"1 of 1 waiting.*The quick brown fox")
    shot(teacher, "practice-inbox")

    accepted = Inbox(ws).list("accepted")
    assert len(accepted) == 1 and len(Inbox(ws).list("pending")) == 1
    sample = SampleLibrary(ws).get(accepted[0].sample_id)
    assert (sample.kind, sample.speaker, sample.target_text, sample.feedback) == (
        "read_aloud", "kim", EXERCISES[0], "Clear S sounds; stress SHELLS.")
