"""Consent means nothing kept (issue 31 #2), on the real practice page served by Gradio in this process.

The audit's repro: every practice upload stayed in Gradio's temporary folder with no expiry; a no-consent
clip was still there after the page said "Not stored". Here a student logs in, uploads a recording through
Gradio's own upload route and asks for feedback (the page's `answer` event, through `gradio_client`, as the
browser calls it); then every file under the workspace, Gradio's upload folder and the system's temporary
folder is searched for the recording's bytes. Without consent none holds them; with consent only the inbox.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import numpy as np
import pytest
import soundfile

from pipeline.access.accounts import Accounts, AccountBook
from pipeline.inbox.practice import save_setup
from pipeline.inbox.store import Inbox
from tests.browser import free_port
from tests.training_data import copy_workspace, real_workspace, trained_run

pytestmark = pytest.mark.slow  # a trained run and a real server
STUDENT = ("kim", "kim-pass-1")


def _recording(path: Path, seed: int) -> bytes:
    """A 2 s 16 kHz PCM16 WAV of seeded noise at `path` (no two seeds share a byte run); returns 64 bytes from
    the middle of its samples: the marker searched for."""
    rng = np.random.default_rng(seed)
    soundfile.write(str(path), (0.3 * rng.standard_normal(32000)).astype(np.float32), 16000, subtype="PCM_16")
    return path.read_bytes()[30000:30064]


def _holding(marker: bytes, folders: list[Path], since: float, mine: Path) -> list[Path]:
    """Files under `folders` (changed since `since`, unix s, where the folder is shared) that contain `marker`,
    leaving out the student's own folder `mine` (where the recording was made)."""
    found = []
    for folder in folders:
        for path in folder.rglob("*") if folder.is_dir() else []:
            try:
                if mine in path.parents or not path.is_file() or path.is_symlink() or path.stat().st_size > 200_000_000:
                    continue
                if folder == Path(tempfile.gettempdir()) and path.stat().st_mtime < since:
                    continue
                if marker in path.read_bytes():
                    found.append(path)
            except OSError:
                continue
    return found


@pytest.fixture()
def practice(tmp_path, tmp_path_factory, speechocean_dir, tiny_model_dir, monkeypatch):
    """The practice page of a workspace with a trained run, served with a student's login; yields (url, ws,
    upload folder). Closed at teardown."""
    from pipeline.inbox.practice import AttemptRate
    from ui.login_guard import guard_kwargs, page_gates
    from ui.practice_page import build_practice

    source = real_workspace(tmp_path_factory, speechocean_dir, tiny_model_dir, keep=6, eval_fraction=0.34)
    ws = copy_workspace(source, tmp_path / "ws")
    trained_run(ws, tiny_model_dir, "r1", max_steps=1)
    save_setup(ws, "r1", ["She sells sea shells.", "The quick brown fox."])
    uploads = tmp_path / "gradio"
    monkeypatch.setenv("GRADIO_TEMP_DIR", str(uploads))
    users = tmp_path / "users.json"
    accounts = Accounts()
    accounts.add(*STUDENT, role="student")
    accounts.save(users)
    gates = page_gates(AccountBook(users), practice_url=lambda: None, session_hours=1)
    from pipeline.workspace import Workspace

    page = build_practice(Workspace(ws), rate=AttemptRate(), own_files=gates.practice.own_files, logins=True).page
    port = free_port()
    page.queue()
    page.launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True, ssr_mode=False,
                max_file_size=10_000_000, **guard_kwargs(gates.practice))
    try:
        yield f"http://127.0.0.1:{port}/", ws, uploads
    finally:
        page.close()


def _ask(url: str, clip: Path, consent: bool) -> tuple[str, str]:
    from gradio_client import Client, handle_file

    client = Client(url, auth=STUDENT, verbose=False, download_files=False, analytics_enabled=False)
    try:
        client.predict({"name": "", "consent": False}, api_name="/on_load")  # the page opened: its exercises
        return client.predict(handle_file(str(clip)), 0, "kim", consent, api_name="/answer")
    finally:
        client.close()


def test_no_byte_of_a_clip_sent_without_consent_is_kept(practice, tmp_path):
    url, ws, uploads = practice
    started = time.time()
    elsewhere = tmp_path / "mine"  # the student's own copy, outside every folder searched
    elsewhere.mkdir()
    marker = _recording(elsewhere / "take.wav", seed=31)
    text, status = _ask(url, elsewhere / "take.wav", consent=False)
    assert text and "Not stored: your recording was deleted once answered" in status
    folders = [ws, uploads, Path(tempfile.gettempdir())]
    assert _holding(marker, folders, started, elsewhere) == []
    assert Inbox(ws).list() == []
    assert not [p for p in uploads.rglob("*") if p.is_file()]  # no copy in another format either

    marker = _recording(elsewhere / "kept.wav", seed=32)
    _text, status = _ask(url, elsewhere / "kept.wav", consent=True)
    assert "Kept for your teacher" in status
    (attempt,) = Inbox(ws).list()
    assert Inbox(ws).audio_path(attempt).is_file()  # the inbox's copy: the only one
    outside_inbox = [p for p in _holding(marker, folders, started, elsewhere) if (ws / "inbox") not in p.parents]
    assert outside_inbox == []
    assert not [p for p in uploads.rglob("*") if p.is_file()]  # Gradio's upload folder is empty again
