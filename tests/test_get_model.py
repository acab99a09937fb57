"""Getting the model (issue 33), through huggingface_hub's real download code against a hub on 127.0.0.1
(`tests/hub_server.py`: the tiny model in the hub's protocol, gated by a token, with the faults a download
meets): what is here, the gated refusal, a refused token and a missing licence, a cut connection, a damaged
file, a full disk, a cancel, no network, each continued or fetched again by the next download; a run refused
in a moment when its model is not here; the panel's words. The command line and the background job run in
child processes (`slow`); the browser's flow is tests/test_e2e_get_model.py.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.hub_server import GOOD_TOKEN, NO_LICENCE_TOKEN, OPEN_MODEL, SERVED_MODEL

REPO_ROOT = Path(__file__).resolve().parents[1]
WEIGHTS = "model.safetensors"


@pytest.fixture()
def online(fake_hub, tmp_path, monkeypatch):
    """huggingface_hub in this process online (the suite runs with HF_HUB_OFFLINE=1), its cache in a temporary
    folder and no saved token; the calls below name the fake hub with `endpoint=`. Returns the `FakeHub`."""
    from tests.hub_server import hub_online

    hub_online(monkeypatch, tmp_path / "hf-home")
    return fake_hub


def _download(hub, **kwargs):
    from pipeline.model.download import download_model

    return download_model(kwargs.pop("model", SERVED_MODEL), token=kwargs.pop("token", GOOD_TOKEN), endpoint=hub.url,
                          **kwargs)


def _served(hub, name: str = WEIGHTS, model: str = SERVED_MODEL) -> bytes:
    return hub.repos[model].files[name].data


def _partial(name: str = WEIGHTS, hub=None) -> Path:
    from pipeline.model.local_copy import storage_folder

    sha = hashlib.sha256(_served(hub, name)).hexdigest()
    return storage_folder(SERVED_MODEL) / "blobs" / f"{sha}.incomplete"


def test_a_downloaded_model_is_laid_out_where_every_tool_finds_it(online, tiny_model_dir):
    from huggingface_hub import snapshot_download, try_to_load_from_cache

    from pipeline.model.local_copy import local_copy, require_model_here
    from pipeline.model.tiny_model import is_tiny_random_model

    assert not local_copy(SERVED_MODEL).complete
    result = _download(online)
    folder = Path(result["folder"])
    assert result["size_bytes"] == sum(p.stat().st_size for p in tiny_model_dir.iterdir() if p.is_file())
    assert result["fetched_bytes"] == result["size_bytes"]
    for source in tiny_model_dir.iterdir():  # every file, byte for byte
        assert (folder / source.name).read_bytes() == source.read_bytes(), source.name
    copy = local_copy(SERVED_MODEL)
    assert copy.complete and copy.folder == folder and copy.size_bytes == result["size_bytes"] and not copy.partial_bytes
    assert require_model_here(SERVED_MODEL) == folder
    # huggingface_hub itself reads the cache we wrote, offline: the snapshot, each file, the stand-in's marker
    assert Path(snapshot_download(SERVED_MODEL, local_files_only=True)) == folder
    assert try_to_load_from_cache(SERVED_MODEL, "config.json") == str(folder / "config.json")
    assert is_tiny_random_model(SERVED_MODEL)
    assert not any(r["range"] for r in online.requests), "a first download asks for no range"
    # a second download checks every file against the hub's hashes and fetches nothing
    again = _download(online)
    assert again["fetched_bytes"] == 0 and len(online.gets(WEIGHTS)) == 1


def test_a_gated_model_without_a_token_is_refused_before_any_file(online):
    from pipeline.errors import ModelAccessError

    with pytest.raises(ModelAccessError) as refused:
        _download(online, token=False)
    message = str(refused.value)
    assert "https://huggingface.co/google/gemma-3n-E2B-it" in message and "licence" in message
    assert "--token-stdin" in message and "token box" in message
    assert not [r for r in online.requests if "/resolve/" in r["path"]], "refused before asking for a file"
    _download(online, model=OPEN_MODEL, token=False)  # a model that is not gated needs no token


@pytest.mark.parametrize("token, says", [("hf_mistyped_0123456789", "did not accept the token"),
                                         (NO_LICENCE_TOKEN, "has not accepted the licence")])
def test_a_refused_token_and_a_missing_licence_each_say_their_fix(online, token, says):
    from pipeline.errors import ModelAccessError

    with pytest.raises(ModelAccessError, match=says) as refused:
        _download(online, token=token)
    assert "https://huggingface.co/" in str(refused.value)
    assert not [r for r in online.requests if r["method"] == "GET" and "/resolve/" in r["path"]]


def test_a_cut_connection_is_continued_with_a_range(online):
    online.truncate_once.add(WEIGHTS)
    result = _download(online)
    first, second = online.gets(WEIGHTS)
    size = len(_served(online))
    start = int(second["range"].removeprefix("bytes=").rstrip("-"))  # huggingface_hub's own retry, from what it wrote
    assert first["range"] is None and 0 < start <= size // 2
    assert (Path(result["folder"]) / WEIGHTS).read_bytes() == _served(online)


def test_a_damaged_arrival_is_fetched_again_and_a_second_one_is_an_error(online):
    from pipeline.errors import ModelLoadError
    from pipeline.model.local_copy import storage_folder

    online.corrupt_once.add(WEIGHTS)
    result = _download(online)
    assert [r["range"] for r in online.gets(WEIGHTS)] == [None, None]  # checked against the sha256, fetched whole
    assert (Path(result["folder"]) / WEIGHTS).read_bytes() == _served(online)
    online.corrupt_always.add(WEIGHTS)
    with pytest.raises(ModelLoadError, match="arrived damaged 2 times.*sha256"):
        _download(online, model=OPEN_MODEL, token=False)
    assert not list((storage_folder(OPEN_MODEL) / "blobs").glob("*.incomplete")), "a damaged file is not kept"


def test_a_damaged_or_cut_file_in_the_cache_is_found_and_fetched_again(online):
    from pipeline.errors import ModelLoadError
    from pipeline.model.local_copy import local_copy, require_model_here

    folder = Path(_download(online)["folder"])
    blob = (folder / WEIGHTS).resolve()
    data = bytearray(blob.read_bytes())
    data[100] ^= 0xFF  # same size, one byte changed: only its hash tells
    blob.write_bytes(bytes(data))
    online.requests.clear()
    result = _download(online)
    assert result["fetched_bytes"] == len(data) and (folder / WEIGHTS).read_bytes() == _served(online)
    assert [r["range"] for r in online.gets(WEIGHTS)] == [None]

    cut = len(data) // 3
    (folder / WEIGHTS).resolve().write_bytes(_served(online)[:cut])  # cut short, as by a crash
    assert not local_copy(SERVED_MODEL).complete
    with pytest.raises(ModelLoadError, match="get-model"):
        require_model_here(SERVED_MODEL)
    online.requests.clear()
    result = _download(online)
    assert [r["range"] for r in online.gets(WEIGHTS)] == [f"bytes={cut}-"]  # continued from where it ends
    assert result["fetched_bytes"] == len(data) - cut and local_copy(SERVED_MODEL).complete


class _SmallDisk:
    """A file on a disk with `room` bytes left: what fits is written, then the write fails with ENOSPC, as the
    operating system answers (huggingface_hub writes each chunk with one `write`)."""

    def __init__(self, file, room: int):
        self.file, self.room = file, room

    def write(self, data: bytes) -> int:
        if len(data) > self.room:
            self.file.write(data[: self.room])
            self.room = 0
            raise OSError(errno.ENOSPC, "No space left on device")
        self.room -= len(data)
        return self.file.write(data)

    def __getattr__(self, name):
        return getattr(self.file, name)


def test_a_full_disk_keeps_what_arrived_and_the_next_download_continues(online, monkeypatch):
    import huggingface_hub.file_download as file_download

    from pipeline.errors import ModelLoadError

    real_get = file_download.http_get
    room = 3 * 1024 * 1024 + 12345

    def on_a_small_disk(url, temp_file, **kwargs):
        return real_get(url, _SmallDisk(temp_file, room) if url.endswith(WEIGHTS) else temp_file, **kwargs)

    monkeypatch.setattr(file_download, "http_get", on_a_small_disk)
    with pytest.raises(ModelLoadError, match="is full") as full:
        _download(online)
    assert "kept" in str(full.value) and "continues from there" in str(full.value)
    assert _partial(hub=online).stat().st_size == room  # what arrived is kept
    monkeypatch.setattr(file_download, "http_get", real_get)
    online.requests.clear()
    result = _download(online)
    assert [r["range"] for r in online.gets(WEIGHTS)] == [f"bytes={room}-"]
    assert (Path(result["folder"]) / WEIGHTS).read_bytes() == _served(online)


def test_a_cancel_keeps_what_arrived_and_the_next_download_continues(online):
    from pipeline.errors import DownloadCancelled

    online.throttle_bytes_per_s = 4 * 2**20  # about 2 s for the weights: progress is reported meanwhile
    seen: list[dict] = []

    def two_mib_of_weights_arrived() -> bool:
        return bool(seen) and seen[-1]["file"] == WEIGHTS and seen[-1]["done_bytes"] >= 2 * 2**20

    with pytest.raises(DownloadCancelled, match="continues from there"):
        _download(online, on_progress=lambda p: seen.append(p.to_dict()), should_stop=two_mib_of_weights_arrived)
    kept = _partial(hub=online).stat().st_size
    assert 2**20 <= kept < len(_served(online))
    assert {p["phase"] for p in seen} >= {"listing", "checking", "fetching"}
    assert any(p["rate_bytes_per_s"] and p["eta_s"] is not None for p in seen), "speed and time left were reported"
    online.throttle_bytes_per_s = None
    online.requests.clear()
    _download(online)
    assert [r["range"] for r in online.gets(WEIGHTS)] == [f"bytes={kept}-"]


def test_no_network_is_said_in_seconds(online):
    from pipeline.errors import ModelLoadError
    from pipeline.model.download import download_model

    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{sock.getsockname()[1]}"
    began = time.monotonic()
    with pytest.raises(ModelLoadError, match="cannot be reached from this computer.*internet connection"):
        download_model(SERVED_MODEL, token=GOOD_TOKEN, endpoint=closed)
    assert time.monotonic() - began < 10


def test_a_first_start_without_network_warns_of_nothing_and_says_not_here_once(online, tmp_path, monkeypatch):
    """Issue 32 leftovers: at first start the panel warned "⚠ Hugging Face ... cannot be reached (ConnectError)"
    before any download was asked for, and "is not on this computer yet" was said twice (the note under the
    picker and the panel). Now: one calm line that getting it needs the internet, the fact once; offline mode
    is said once too (in the note, which says what to do)."""
    from huggingface_hub import constants

    from pipeline.errors import HubUnreachableError
    from pipeline.model import download_job
    from ui.tutor_app import TutorApp

    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{sock.getsockname()[1]}"
    monkeypatch.setattr(constants, "ENDPOINT", closed)
    monkeypatch.setattr(download_job, "_HUB_ANSWERS", {})
    app = TutorApp(tmp_path / "ws")
    status = app.get_model.show(SERVED_MODEL)[1]
    note = app.state.describe_model(SERVED_MODEL)
    assert "⚠" not in status + note and "ConnectError" not in status and "cannot be reached" not in status, status
    assert "Getting it needs an internet connection to Hugging Face." in status
    assert (status + note).count("not on this computer") == 1, (status, note)
    assert "**Get the model**" in status and "**Get the model**" in note
    with pytest.raises(HubUnreachableError, match="cannot be reached from this computer.*internet connection"):
        from pipeline.model.download import hub_model

        hub_model(SERVED_MODEL)  # asked for: the download says why, in its own words

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)  # offline mode: said once, in the note, with what to do
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(download_job, "_HUB_ANSWERS", {})
    status = app.get_model.show(SERVED_MODEL)[1]
    note = app.state.describe_model(SERVED_MODEL)
    assert (status + note).count("not on this computer") == 1 and "offline" not in status.lower()
    assert "⚠" not in status and "click **Get the model**" not in status and "Create offline tiny test model" in note
    assert "paste it below" not in status, "no token asked for a download offline mode cannot make"


def test_a_run_on_a_model_not_here_is_refused_in_a_moment(online, tmp_path):
    """`start_run` (the app's Start, and everything that starts runs) and the app's handler refuse at once, with
    the pointer to Get the model, and leave no run folder."""
    from pipeline.config import TrainConfig
    from pipeline.errors import ModelLoadError
    from pipeline.training.runs import start_run
    from pipeline.workspace import Workspace
    from ui import common
    from ui.tutor_app import TutorApp

    ws = Workspace(tmp_path / "ws").ensure()
    ws.dataset_dir.mkdir(parents=True, exist_ok=True)
    (ws.dataset_dir / "build_report.json").write_text(json.dumps({"model": SERVED_MODEL, "splits": {"train": 4}}))
    began = time.monotonic()
    with pytest.raises(ModelLoadError, match=r"not on this computer yet.*python -m pipeline get-model --model "
                                             r"google/gemma-3n-E2B-it"):
        start_run(ws, "r1", TrainConfig(model=SERVED_MODEL))
    assert time.monotonic() - began < 5 and not ws.run_dir("r1").exists()
    # `python -m pipeline train` (and a cloud bundle's train.sh) calls `train`: refused the same way, after the
    # dataset check (an empty build, read by the real loader) and before the run folder or the model's load.
    from datasets import Dataset, DatasetDict

    from pipeline.data.rows import COLUMNS, features
    from pipeline.training.train import train

    empty = Dataset.from_dict({c: [] for c in COLUMNS}, features=features())
    DatasetDict({"train": empty, "eval": empty}).save_to_disk(str(ws.dataset_dir))
    began = time.monotonic()
    with pytest.raises(ModelLoadError, match=r"not on this computer yet.*get-model --model google/gemma-3n-E2B-it"):
        train(TrainConfig(model=SERVED_MODEL, device="cpu"), ws, "r3")
    assert time.monotonic() - began < 5 and not ws.run_dir("r3").exists()
    app = TutorApp(ws.root)
    values = [getattr(common.DEFAULTS, name) for name in common.CONFIG_FIELDS]
    values[common.CONFIG_FIELDS.index("model")] = SERVED_MODEL
    status = app.train.start_training("r2", *values)[1]
    assert "**Get the model** (top of the page)" in status and "python -m" not in status


def test_the_panel_says_what_getting_the_model_takes(online, tmp_path, monkeypatch, tiny_model_dir):
    from huggingface_hub import constants

    from ui.tutor_app import TutorApp

    original = constants.ENDPOINT
    monkeypatch.setattr(constants, "ENDPOINT", online.url)  # as HF_ENDPOINT does at import (for the panel's look-up)
    panel = TutorApp(tmp_path / "ws").get_model
    group, status, token, cancel, bar, timer, watching, get = panel.show(SERVED_MODEL)
    assert group.visible and token.visible and get.visible and not cancel.visible and not bar and not timer.active
    assert watching == ""
    assert "not on this computer yet" in status and "8 MiB from Hugging Face" in status and "free" in status
    assert "(https://huggingface.co/google/gemma-3n-E2B-it)" in status and "huggingface.co/settings/tokens" in status
    assert panel.show(str(tiny_model_dir))[0].visible is False  # a folder of this computer: nothing to get
    assert not panel.show(OPEN_MODEL)[2].visible, "a model that is not gated asks for no token"

    refused = panel.start(SERVED_MODEL, "")[1]  # no token anywhere: refused at once, in the app's words
    assert "gated model" in refused and "token box at the top of the app" in refused and "--token-stdin" not in refused
    monkeypatch.setattr(constants, "ENDPOINT", original)  # `_download` names the hub itself
    _download(online)
    status = panel.show(SERVED_MODEL)[1]
    assert status.startswith("✓ **On this computer**") and "8 MiB" in status and "snapshots" in status
    assert not panel.show(SERVED_MODEL)[2].visible and not panel.show(SERVED_MODEL)[7].visible


def test_the_panel_says_what_is_here_the_room_and_the_licence():
    from ui.get_model_view import needs_token, status_text

    gib = 2**30
    facts = {"model": SERVED_MODEL, "hub_id": True, "cache_dir": "/c/hub", "free_bytes": 5 * gib,
             "needed_bytes": int(7 * gib * 1.1), "licence_url": "https://huggingface.co/google/gemma-3n-E2B-it",
             "local": {"complete": False, "size_bytes": 3 * gib, "partial_bytes": 0}, "token_saved": True,
             "hub": {"gated": True, "total_bytes": 10 * gib}, "download": {"state": "cancelled"}}
    text = status_text(facts)
    assert "10.00 GiB from Hugging Face, of which 3.00 GiB is here already (the download continues from there)" in text
    assert "has 5.00 GiB free" in text and "not enough room: free 2.70 GiB first" in text
    assert "[accept the licence with your Hugging Face account](https://huggingface.co/google/gemma-3n-E2B-it)" in text
    assert "saved on this computer already" in text and needs_token(facts)
    running = {**facts, "download": {"state": "running"}}
    assert "accept the licence" not in status_text(running), "no token talk while it downloads"
    offline = {**facts, "hub": {"error": "Offline mode is on."}, "family_gated": True}
    assert "⚠ Offline mode is on." in status_text(offline) and needs_token(offline)


def test_the_bar_says_bytes_speed_time_left_and_file():
    from ui.get_model_view import progress_html

    running = {"state": "running", "progress": {"phase": "fetching", "file": "model-00002-of-00003.safetensors",
                                                "file_number": 6, "files": 14, "done_bytes": 3 * 2**30,
                                                "total_bytes": 10 * 2**30, "rate_bytes_per_s": 12 * 2**20,
                                                "eta_s": 597.3}}
    bar = progress_html(running)
    assert '<progress value="3221225472" max="10737418240"' in bar
    assert "3.00 GiB of 10.00 GiB (30 %) · 12 MiB/s · about 9 min 57 s left" in bar
    assert "Fetching model-00002-of-00003.safetensors (file 6 of 14)" in bar
    done = {"state": "completed", "result": {"result": {"model": SERVED_MODEL, "size_bytes": 10 * 2**30,
                                                        "folder": "/c/snapshots/abc"}}}
    assert "ready: google/gemma-3n-E2B-it (10.00 GiB) in /c/snapshots/abc" in progress_html(done)
    assert "■ Cancelled" in progress_html({"state": "cancelled", "reason": "Cancelled: 3 GiB are here."})
    assert progress_html({"state": "not_started"}) == ""


def test_a_download_job_s_state_is_read_from_its_folder(tmp_path):
    """What the app shows of a download comes from its folder only (`pipeline.model.download_job`): never
    started; a process that ended without a word (failed, or cancelled when a cancel was asked); how it ended."""
    from pipeline.errors import ModelLoadError
    from pipeline.model.download import DownloadProgress
    from pipeline.model.download_job import JobFiles, cancel_download, download_dir, download_status, running_download

    ws = tmp_path / "ws"
    assert download_status(ws, SERVED_MODEL)["state"] == "not_started" and running_download(ws) is None
    assert download_dir(ws, SERVED_MODEL) == ws / "downloads" / "google" / "gemma-3n-E2B-it"
    with pytest.raises(ModelLoadError, match="folder on this computer"):
        download_dir(ws, str(tmp_path))
    job = JobFiles(ws, SERVED_MODEL)  # as `get-model --workspace` writes it; this process is not a download's
    job.progress(DownloadProgress(SERVED_MODEL, "fetching", WEIGHTS, 4, 8, 2**20, 8 * 2**20))
    status = download_status(ws, SERVED_MODEL)
    assert status["state"] == "failed" and "without saying why" in status["reason"] and not status["alive"]
    assert status["progress"]["done_bytes"] == 2**20 and status["progress"]["pid"] == os.getpid()
    (job.folder / "CANCEL").write_text("cancel")
    assert download_status(ws, SERVED_MODEL)["state"] == "cancelled"
    job.finish("cancelled", reason="Cancelled: 1 MiB of 8 MiB are here.", exit_code=1)
    assert cancel_download(ws, SERVED_MODEL)["reason"] == "Cancelled: 1 MiB of 8 MiB are here."  # not running: as is
    job.finish("completed", result={"model": SERVED_MODEL}, exit_code=0)
    assert download_status(ws, SERVED_MODEL)["state"] == "completed" and running_download(ws) is None


# ------------------------------------------------------------------------------------------- child processes


def _child_env(hub, hf_home: Path, **extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("HF_TOKEN", "HF_HUB_CACHE", "HF_TOKEN_PATH")}
    return {**env, **hub.env(hf_home), "PYTHONPATH": str(REPO_ROOT), **extra}


def _get_model(env: dict, *args: str, stdin: str = "") -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pipeline", "get-model", *args], cwd=REPO_ROOT, env=env,
                          input=stdin, capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_get_model_on_the_command_line_gated_then_with_a_token_then_loaded_offline(fake_hub, tmp_path):
    """The issue's "Done when": without a token, exit 2 and the licence message; with it, the download; then
    `from_pretrained` loads the model offline. The token is saved by huggingface_hub's login, printed nowhere."""
    hf_home = tmp_path / "hf-home"
    env = _child_env(fake_hub, hf_home)
    refused = _get_model(env)
    assert refused.returncode == 2, refused.stderr
    assert "https://huggingface.co/google/gemma-3n-E2B-it" in refused.stderr and "--token-stdin" in refused.stderr
    assert "token box" in refused.stderr and "Traceback" not in refused.stderr
    wrong = _get_model(env, "--token-stdin", stdin="hf_mistyped_0123456789\n")
    assert wrong.returncode == 2 and "did not accept the token" in wrong.stderr
    got = _get_model(env, "--token-stdin", "--json", stdin=GOOD_TOKEN + "\n")
    assert got.returncode == 0, got.stderr
    result = json.loads(got.stdout.strip().splitlines()[-1])
    assert result["status"] == "ready" and result["model"] == SERVED_MODEL and Path(result["folder"]).is_dir()
    assert "%" in got.stderr, "a progress bar was drawn"
    assert GOOD_TOKEN not in got.stdout + got.stderr + wrong.stderr
    assert (hf_home / "token").read_text().strip() == GOOD_TOKEN  # huggingface_hub's login keeps it
    again = _get_model(env)
    assert again.returncode == 0 and again.stdout.startswith(f"ready: {SERVED_MODEL} (8 MiB) in ")

    offline = _child_env(fake_hub, hf_home, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
                         HF_ENDPOINT="http://127.0.0.1:9")  # nothing answers there: a request would fail
    code = ("from pipeline.model.loading import load_model, load_processor\n"
            f"processor = load_processor({SERVED_MODEL!r})\n"
            f"model, report = load_model({SERVED_MODEL!r}, device='cpu')\n"
            "print(type(model).__name__, sum(p.numel() for p in model.parameters()))\n")
    loaded = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, env=offline, capture_output=True, text=True,
                            timeout=300)
    assert loaded.returncode == 0, loaded.stderr[-3000:]
    assert loaded.stdout.split()[-2] == "Gemma3nForConditionalGeneration"


@pytest.mark.slow
def test_the_download_job_is_cancelled_and_continued(fake_hub, tmp_path, monkeypatch):
    """The app's way: a job of its own (closing the tab leaves it running), followed through its folder,
    cancelled, then continued by a second start from where it stopped (a `Range` request)."""
    from huggingface_hub import constants

    from pipeline.model.download_job import cancel_download, download_status, running_download, start_download
    from tests.processes import wait_until

    for name, value in {**fake_hub.env(tmp_path / "hf-home"), "HF_TOKEN": GOOD_TOKEN}.items():
        monkeypatch.setenv(name, value)  # the job's process inherits them
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "ENDPOINT", fake_hub.url)
    fake_hub.throttle_bytes_per_s = 2 * 2**20  # the weights take about 4 s
    ws = tmp_path / "ws"
    try:
        started = start_download(ws, SERVED_MODEL)
        assert started["started"] and started["alive"] and running_download(ws) == SERVED_MODEL

        def fetching_weights():
            progress = download_status(ws, SERVED_MODEL)["progress"] or {}
            return progress.get("file") == WEIGHTS and progress.get("done_bytes", 0) > 2**20 and progress

        progress = wait_until(fetching_weights, timeout_s=120)
        assert progress["total_bytes"] > progress["done_bytes"] and progress["rate_bytes_per_s"]
        assert start_download(ws, SERVED_MODEL)["started"] is False  # a second click follows the running one
        ended = cancel_download(ws, SERVED_MODEL, wait=True)
        assert ended["state"] == "cancelled" and "continues from there" in ended["reason"]
        fake_hub.throttle_bytes_per_s = None
        fake_hub.requests.clear()
        start_download(ws, SERVED_MODEL)
        done = wait_until(lambda: (s := download_status(ws, SERVED_MODEL))["state"] != "running" and s, timeout_s=120)
        assert done["state"] == "completed", done
        ranges = [r["range"] for r in fake_hub.gets(WEIGHTS)]
        assert len(ranges) == 1 and ranges[0] and ranges[0].startswith("bytes=") and ranges[0] != "bytes=0-"
        assert GOOD_TOKEN not in "".join(p.read_text(errors="replace") for p in ws.rglob("*") if p.is_file())
    finally:
        from tests.processes import stop_workspace_downloads

        stop_workspace_downloads(ws)
