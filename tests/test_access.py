"""Sharing safely (issue 22 #3): logins beyond loopback, students reach only the practice page, typed
paths confined to the workspace; and real servers refusing and admitting on this machine's addresses."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pipeline.access.accounts import (Accounts, accounts_from_args, check_sharing, confine_path, hash_password, is_loopback,
                             needs_login, verify_password)
from pipeline.access.cli import users_main
from pipeline.errors import ConfigError

REPO_ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("host, loopback", [
    ("127.0.0.1", True), ("127.0.0.2", True), ("localhost", True), ("::1", True), ("[::1]", True),
    ("0.0.0.0", False), ("::", False), ("192.168.1.20", False), ("10.0.0.5", False), ("my-laptop.lan", False),
    ("", False),
])
def test_loopback_decision(host, loopback):
    assert is_loopback(host) is loopback
    assert needs_login(host, share=False) is (not loopback)
    assert needs_login(host, share=True) is True  # a public link is never loopback


def test_passwords_are_hashed_and_checked():
    stored = hash_password("correct horse")
    assert "correct horse" not in stored and stored.startswith("scrypt$")
    assert verify_password("correct horse", stored)
    assert not verify_password("correct hors", stored)
    assert hash_password("correct horse") != stored  # a fresh salt each time
    assert not verify_password("x", "not-a-hash")


def test_roles_decide_which_page_opens(tmp_path):
    accounts = Accounts()
    accounts.add("ms-lee", "teach-pass", role="teacher")
    accounts.add("kim", "kim-pass1", role="student")
    accounts.save(tmp_path / "users.json")
    assert "kim-pass1" not in (tmp_path / "users.json").read_text()
    loaded = Accounts.load(tmp_path / "users.json")
    assert loaded.can_open("studio", "ms-lee", "teach-pass") and loaded.can_open("practice", "ms-lee", "teach-pass")
    assert loaded.can_open("practice", "kim", "kim-pass1")
    assert not loaded.can_open("studio", "kim", "kim-pass1")
    assert not loaded.can_open("practice", "kim", "wrong") and not loaded.can_open("practice", "nobody", "kim-pass1")


def test_sharing_is_refused_without_a_teacher_login(tmp_path):
    with pytest.raises(ConfigError, match=r"--host 0\.0\.0\.0.*--auth USER.*TUTOR_AUTH_PASSWORD.*--auth-file"):
        check_sharing("0.0.0.0", False, Accounts())
    with pytest.raises(ConfigError, match="--share"):
        check_sharing("127.0.0.1", True, Accounts())
    with pytest.raises(ConfigError, match="--shared"):
        check_sharing("127.0.0.1", False, Accounts(), forced=True)
    students_only = Accounts()
    students_only.add("kim", "kim-pass1", role="student")
    with pytest.raises(ConfigError, match="teacher"):
        check_sharing("0.0.0.0", False, students_only)
    check_sharing("127.0.0.1", False, Accounts())  # this computer only: no login needed
    check_sharing("0.0.0.0", False, accounts_from_args("ms-lee:teach-pass"))
    with pytest.raises(ConfigError, match="TUTOR_AUTH_PASSWORD"):
        accounts_from_args("no-password-given")
    with pytest.raises(ConfigError, match="has 2 characters; a password needs at least 8"):
        accounts_from_args("ms-lee:pw")
    (tmp_path / "bad.json").write_text('{"users": {"kim": {"role": "student", "password": "plain"}}}')
    with pytest.raises(ConfigError, match="kim.*scrypt"):
        accounts_from_args(auth_file=tmp_path / "bad.json")


def test_paths_are_confined_to_the_workspace(tmp_path):
    ws = tmp_path / "ws"
    (ws / "incoming").mkdir(parents=True)
    outside = tmp_path / "secret"
    outside.mkdir()
    (ws / "escape").symlink_to(outside)
    assert confine_path(ws / "incoming", ws) == (ws / "incoming").resolve()
    assert confine_path("incoming", ws) == (ws / "incoming").resolve()  # relative: from the workspace
    for bad in (outside, "/etc", ws / ".." / "secret", "../secret", ws / "escape"):
        with pytest.raises(ConfigError, match="outside the workspace"):
            confine_path(bad, ws)


def test_shared_studio_path_boxes_stay_in_the_workspace(tmp_path, speechocean_dir):
    """Every path box goes through `AppState.typed_path`: the import folder, the export folder and the
    run import refuse a path outside the workspace when shared, and behave as before otherwise."""
    from ui.tutor_app import TutorApp

    shared = TutorApp(tmp_path / "ws", shared=True)
    summary, _table, _samples = shared.import_folder(str(speechocean_dir), "auto")
    assert "outside the workspace" in summary
    assert shared.import_run(str(tmp_path)).count("outside the workspace") == 1
    note, download = shared.export_run("no-such-run", "adapter", "/tmp/elsewhere")
    assert "outside the workspace" in note and not (tmp_path / "ws" / "exports").exists()
    local = TutorApp(tmp_path / "ws")
    summary, _table, _samples = local.import_folder(str(speechocean_dir), "kaldi")
    assert "outside the workspace" not in summary and "60" in summary


def test_users_command_manages_the_auth_file(tmp_path, capsys, monkeypatch):
    import io

    path = tmp_path / "users.json"
    monkeypatch.setattr("sys.stdin", io.StringIO("kim-pass1\n"))
    assert users_main(["--file", str(path), "add", "kim", "--password-stdin"]) == 0
    monkeypatch.setenv("TUTOR_PASSWORD", "teacher-pass")
    assert users_main(["--file", str(path), "add", "ms-lee", "--role", "teacher"]) == 0
    assert users_main(["--file", str(path), "list"]) == 0
    assert "kim\tstudent" in capsys.readouterr().out
    assert Accounts.load(path).can_open("studio", "ms-lee", "teacher-pass")
    assert oct(path.stat().st_mode & 0o777) == "0o600"  # the hashes are for this user only
    assert users_main(["--file", str(path), "remove", "kim"]) == 0
    assert "kim" not in json.loads(path.read_text())["users"]


# ---------------------------------------------------------------- real servers on this machine's addresses


def _free_port(host: str) -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def _app(tmp_path, *args: str) -> subprocess.Popen:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "GRADIO_ANALYTICS_ENABLED": "False", "PYTHONUNBUFFERED": "1"}
    log = open(tmp_path / "app.log", "w", encoding="utf-8")
    return subprocess.Popen([sys.executable, str(REPO_ROOT / "app.py"), "--workspace", str(tmp_path / "ws"), *args],
                            cwd=REPO_ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


@pytest.fixture()
def app_process(tmp_path):
    """Start `python app.py ARGS` (call it), stopped at teardown whatever the outcome."""
    from tests.processes import stop_process_group

    started: list[subprocess.Popen] = []

    def start(*args: str) -> subprocess.Popen:
        started.append(_app(tmp_path, *args))
        return started[-1]

    yield start
    for process in started:
        stop_process_group(process.pid, grace_s=10)
        process.wait(timeout=30)


def _wait_up(process: subprocess.Popen, url: str, log: Path) -> None:
    import httpx

    deadline = time.time() + 90
    while time.time() < deadline:
        assert process.poll() is None, f"the app exited:\n{log.read_text()}"
        try:
            if httpx.get(url, timeout=2).status_code in (200, 401):
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    raise AssertionError(f"{url} never came up:\n{log.read_text()}")


def _login_and_config(base: str, user: str | None, password: str | None) -> tuple[int | None, int]:
    """(login status or None, /config status afterwards) in a fresh cookie jar."""
    import httpx

    with httpx.Client(timeout=10) as client:
        login = client.post(f"{base}/login", data={"username": user, "password": password}).status_code if user else None
        return login, client.get(f"{base}/config").status_code


@pytest.mark.slow
def test_served_beyond_loopback_without_login_is_refused(tmp_path, app_process):
    process = app_process("--host", "0.0.0.0", "--port", str(_free_port("127.0.0.1")))
    assert process.wait(timeout=120) == 2
    log = (tmp_path / "app.log").read_text()
    assert "a login is required" in log and "--auth USER" in log and "--auth-file" in log


def _check_pages(tmp_path, process, host: str, port: int, practice_port: int) -> None:
    studio, practice = f"http://{host}:{port}", f"http://{host}:{practice_port}"
    _wait_up(process, f"{studio}/config", tmp_path / "app.log")
    _wait_up(process, f"{practice}/config", tmp_path / "app.log")
    # no credentials: refused on both pages, and the workspace's files are not served either
    assert _login_and_config(studio, None, None) == (None, 401)
    assert _login_and_config(practice, None, None) == (None, 401)
    import httpx

    manifest = tmp_path / "ws" / "settings.json"
    manifest.write_text("{}")
    assert httpx.get(f"{studio}/gradio_api/file={manifest}", timeout=10).status_code in (401, 403)
    # wrong password, and a student on the studio: refused; the teacher: both pages; the student: practice
    assert _login_and_config(studio, "ms-lee", "wrong") == (400, 401)
    assert _login_and_config(studio, "kim", "kim-pass1") == (403, 401)
    assert _login_and_config(studio, "ms-lee", "teach-pass") == (200, 200)
    assert _login_and_config(practice, "ms-lee", "teach-pass") == (200, 200)
    assert _login_and_config(practice, "kim", "kim-pass1") == (200, 200)


@pytest.fixture()
def users_file(tmp_path) -> Path:
    accounts = Accounts()
    accounts.add("ms-lee", "teach-pass", role="teacher")
    accounts.add("kim", "kim-pass1", role="student")
    accounts.save(tmp_path / "users.json")
    return tmp_path / "users.json"


@pytest.mark.slow
def test_a_non_loopback_address_needs_the_login(tmp_path, app_process, users_file):
    """Served on every interface (`--host 0.0.0.0`: beyond loopback); the checks connect through
    127.0.0.1 only, so no test traffic leaves the loopback range."""
    port, practice_port = _free_port("0.0.0.0"), _free_port("0.0.0.0")
    process = app_process("--host", "0.0.0.0", "--port", str(port), "--practice-port", str(practice_port),
                          "--auth-file", str(users_file))
    _check_pages(tmp_path, process, "127.0.0.1", port, practice_port)


@pytest.mark.slow
def test_shared_on_loopback_needs_the_login(tmp_path, app_process, users_file):
    """`--shared` (behind a proxy or tunnel) on 127.0.0.1: the same login rules; `--auth` adds the teacher."""
    port, practice_port = _free_port("127.0.0.1"), _free_port("127.0.0.1")
    process = app_process("--shared", "--port", str(port), "--practice-port", str(practice_port),
                          "--auth-file", str(users_file))
    _check_pages(tmp_path, process, "127.0.0.1", port, practice_port)


def test_shared_studio_model_box_takes_only_folders_in_the_workspace(tmp_path, tiny_model_dir):
    """The Model box is a path box too when it holds a folder: outside the workspace it is refused in
    its note and in every action that reads it (build, estimate, train settings); hub ids are not paths."""
    from pipeline.config import DEFAULT_MODEL
    from ui.common import CONFIG_FIELDS, DEFAULTS, config_from_values
    from ui.tutor_app import TutorApp

    outside = str(tiny_model_dir)  # a real model folder, outside the workspace
    shared = TutorApp(tmp_path / "ws", shared=True)
    try:
        assert "outside the workspace" in shared.state.describe_model(outside)
        summary = shared.build_dataset(outside, 0.2, 0, 512)[0]
        assert "outside the workspace" in summary
        values = dict(DEFAULTS.to_dict(), model=outside)
        with pytest.raises(Exception, match="outside the workspace"):
            config_from_values({name: values[name] for name in CONFIG_FIELDS})
        inside = tmp_path / "ws" / "models" / "mine"
        inside.mkdir(parents=True)
        assert config_from_values(dict(values, model=str(inside))).model == str(inside.resolve())
        assert config_from_values(dict(values, model=DEFAULT_MODEL)).model == DEFAULT_MODEL
    finally:
        local = TutorApp(tmp_path / "ws")  # an app on this computer only: any folder again
    assert "outside the workspace" not in local.state.describe_model(outside)
