"""Logins fit for a classroom and pages that keep to their own files (issue 31 #2, #3, #4), on real Gradio
servers in this process: a stand-in studio and practice page behind `ui.login_guard`, as `app.py` launches
them (the page's content does not matter to its door; `tests/test_access.py` runs the whole app).

The audit's repros: scrypt ran on the event loop with no rate limit (40 wrong logins froze the practice
port); any non-empty password was accepted; removing a user counted only at restart; sessions never
expired; a student at the studio read "Incorrect Credentials"; a student fetched, by its path, a clip the
teacher had uploaded; a 50 MB upload was stored.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import httpx
import pytest

from pipeline.access.accounts import Accounts, AccountBook
from tests.browser import free_port

TEACHER, STUDENT = ("ms-lee", "teacher-pass"), ("kim", "kim-pass-1")


def _accounts(users: Path) -> None:
    accounts = Accounts()
    accounts.add(*TEACHER, role="teacher")
    accounts.add(*STUDENT, role="student")
    accounts.save(users)


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """A studio and a practice page (tiny Blocks) behind their guards, sharing one auth file; yields a namespace
    (studio, practice: base URLs; users: the auth file; gates; upload_dir). Closed at teardown."""
    import gradio as gr

    from ui.login_guard import guard_kwargs, page_gates

    tmp_path = tmp_path_factory.mktemp("guard")
    patch = pytest.MonkeyPatch()
    patch.setenv("GRADIO_TEMP_DIR", str(tmp_path / "gradio"))
    users = tmp_path / "users.json"
    _accounts(users)
    book = AccountBook(users)
    practice_url = {"url": None}
    gates = page_gates(book, practice_url=lambda: practice_url["url"], session_hours=12)
    launched = []
    urls = {}
    for name, gate, cap in (("studio", gates.studio, 5_000_000), ("practice", gates.practice, 1_000_000)):
        with gr.Blocks() as page:
            text = gr.Textbox()
            gr.Button().click(lambda t: t, inputs=text, outputs=text)
        port = free_port()
        page.launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True, ssr_mode=False,
                    max_file_size=cap, **guard_kwargs(gate))
        launched.append(page)
        urls[name] = f"http://127.0.0.1:{port}"
    practice_url["url"] = urls["practice"] + "/"
    try:
        yield type("Pages", (), dict(urls, users=users, gates=gates, upload_dir=tmp_path / "gradio"))
    finally:
        for page in launched:
            page.close()
        patch.undo()


@pytest.fixture()
def pages(served):
    """`served` as each test starts it: both accounts as made, no failed login counted, sessions of 12 h."""
    import shutil

    from pipeline.access.logins import LoginThrottle

    _accounts(served.users)
    served.gates.studio.throttle = served.gates.practice.throttle = LoginThrottle()
    served.gates.practice.sessions.max_age_s = served.gates.studio.sessions.max_age_s = 12 * 3600
    shutil.rmtree(served.upload_dir, ignore_errors=True)
    return served


def _login(base: str, user: str, password: str) -> tuple[httpx.Client, httpx.Response]:
    client = httpx.Client(base_url=base, timeout=30)
    return client, client.post("/login", data={"username": user, "password": password})


@pytest.mark.slow  # two real servers
def test_a_login_opens_a_session_and_logging_out_ends_it(pages):
    anonymous = httpx.get(pages.practice + "/config", timeout=30)
    assert anonymous.status_code == 401
    page = httpx.get(pages.practice + "/", timeout=30).text  # our login page, with the label tests and people use
    assert 'id="login-form"' in page and "account your teacher gave you" in page
    client, answer = _login(pages.practice, *STUDENT)
    assert answer.status_code == 200 and client.get("/config").status_code == 200
    assert client.get("/logout", follow_redirects=False).status_code == 302
    assert client.get("/config").status_code == 401


@pytest.mark.slow  # two real servers
def test_a_student_at_the_studio_is_told_where_the_practice_page_is(pages):
    client, answer = _login(pages.studio, *STUDENT)
    assert answer.status_code == 403
    assert answer.json()["detail"] == (f"kim is a student account, and the studio is for teachers. Your practice page "
                                       f"is {pages.practice}/")
    assert client.get("/config").status_code == 401
    assert f"Students: your practice page is {pages.practice}/" in httpx.get(pages.studio + "/", timeout=30).text
    assert _login(pages.studio, *TEACHER)[1].status_code == 200


@pytest.mark.slow  # two real servers
def test_wrong_passwords_are_throttled_per_name_before_any_hash(pages, monkeypatch):
    checked = []
    real_role = AccountBook.role

    def counting_role(self, name, password):
        try:  # the hash runs in a worker thread: no event loop runs in this thread
            asyncio.get_running_loop()
            checked.append("on the event loop")
        except RuntimeError:
            checked.append(threading.current_thread().name)
        return real_role(self, name, password)

    monkeypatch.setattr(AccountBook, "role", counting_role)
    answers = [_login(pages.practice, "kim", f"wrong-{n}")[1] for n in range(7)]
    assert [a.status_code for a in answers] == [400] * 5 + [429] * 2
    assert "Too many wrong passwords for kim (5 within 5 min): try again in" in answers[5].json()["detail"]
    assert len(checked) == 5 and "on the event loop" not in checked  # refused logins cost no hash
    assert _login(pages.practice, *STUDENT)[1].status_code == 429  # even the right one waits
    assert _login(pages.studio, *TEACHER)[1].status_code == 200  # another name is not held up


@pytest.mark.slow  # two real servers
def test_many_wrong_logins_from_one_address_are_throttled(pages):
    codes = [_login(pages.practice, f"guess-{n}", "whatever-1")[1].status_code for n in range(22)]
    assert codes[:20] == [400] * 20 and codes[20:] == [429, 429]


@pytest.mark.slow  # two real servers
def test_removing_a_user_or_changing_a_password_counts_at_once(pages):
    kim, _ = _login(pages.practice, *STUDENT)
    teacher, _ = _login(pages.studio, *TEACHER)
    assert kim.get("/config").status_code == 200 and teacher.get("/config").status_code == 200
    Accounts.change_file(pages.users, lambda accounts: accounts.users.pop("kim"))
    assert kim.get("/config").status_code == 401  # the running page read the file again
    assert _login(pages.practice, *STUDENT)[1].status_code == 400
    Accounts.change_file(pages.users, lambda accounts: accounts.add("ms-lee", "a-new-password", role="teacher"))
    assert teacher.get("/config").status_code == 401
    assert _login(pages.studio, "ms-lee", "a-new-password")[1].status_code == 200


@pytest.mark.slow  # two real servers
def test_sessions_expire(pages):
    import time

    client, _ = _login(pages.practice, *STUDENT)
    assert client.get("/config").status_code == 200
    pages.gates.practice.sessions.max_age_s = 0.5
    time.sleep(0.7)
    assert client.get("/config").status_code == 401
    assert "Your session ended; log in again." in client.get("/").text


def test_short_passwords_are_refused_where_they_are_made():
    from pipeline.errors import ConfigError

    with pytest.raises(ConfigError, match="has 6 characters; a password needs at least 8"):
        Accounts().add("kim", "kim-pw")
    with pytest.raises(ConfigError, match="has 0 characters"):
        Accounts().add("kim", "")


def _upload(client: httpx.Client, name: str, data: bytes) -> httpx.Response:
    return client.post("/gradio_api/upload", files={"files": (name, data, "audio/wav")})


@pytest.mark.slow  # two real servers
def test_the_practice_page_serves_a_file_only_to_its_uploader(pages):
    kim, _ = _login(pages.practice, *STUDENT)
    teacher_here, _ = _login(pages.practice, *TEACHER)
    teacher_studio, _ = _login(pages.studio, *TEACHER)
    (mine,) = _upload(kim, "take.wav", b"RIFF-kim-take").json()
    assert kim.get(f"/gradio_api/file={mine}").content == b"RIFF-kim-take"
    assert teacher_here.get(f"/gradio_api/file={mine}").status_code == 404  # another person's upload
    (studio_file,) = _upload(teacher_studio, "lesson.wav", b"RIFF-teacher-upload").json()
    assert Path(studio_file).is_file()
    assert kim.get(f"/gradio_api/file={studio_file}").status_code == 404  # the audit's repro
    assert kim.get(f"/gradio_api/file/{studio_file}").status_code == 404
    assert teacher_studio.get(f"/gradio_api/file={studio_file}").status_code == 200  # the studio: its own rules


@pytest.mark.slow  # two real servers
def test_uploads_above_the_cap_are_refused_and_not_kept(pages):
    kim, _ = _login(pages.practice, *STUDENT)
    refused = _upload(kim, "huge.wav", b"\0" * 2_000_000)
    assert refused.status_code == 413 and "maximum allowed size of 1000000 bytes" in refused.text
    kept = [p for p in pages.upload_dir.rglob("*") if p.is_file()]
    assert not kept, kept


def test_the_login_page_and_the_throttle_and_file_owners_alone():
    """The guard's parts without a server: the page escapes what it shows, the throttle counts per name and
    per address and forgets a name on success, and files belong to their uploader only."""
    from pipeline.access.logins import LoginThrottle
    from ui.login_guard import OwnFiles, login_page_html

    page = login_page_html("practice", "Students: <log in>", "Your session ended; log in again.")
    assert "Students: &lt;log in&gt;" in page and "Your session ended" in page and 'for="username"' in page
    throttle = LoginThrottle(name_failures=2, address_failures=3, window_s=60)
    assert throttle.refusal("kim", "10.0.0.1") is None
    assert throttle.failed("kim", "10.0.0.1") == 1 and throttle.failed("kim", "10.0.0.1") == 0
    assert "Too many wrong passwords for kim (2 within 1 min)" in throttle.refusal("kim", "10.0.0.2")
    throttle.succeeded("kim")
    assert throttle.refusal("kim", "10.0.0.2") is None
    throttle.failed("lee", "10.0.0.1")  # the third failure from this address, another name
    assert "this computer's address" in throttle.refusal("ann", "10.0.0.1")
    files = OwnFiles()
    files.add("kim", ["/tmp/gradio/abc/take.wav"])
    assert files.owns("kim", "/tmp/gradio/abc/../abc/take.wav") and not files.owns("lee", "/tmp/gradio/abc/take.wav")
    files.forget("/tmp/gradio/abc/take.wav")
    assert not files.owns("kim", "/tmp/gradio/abc/take.wav")
