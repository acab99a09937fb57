"""The model hub, whatever it answers (issue 44 #1): every hub call the product makes (the login check, the
model's information and licence, a file's metadata and bytes, a resumed file, the file listing) meets each kind
of fault of `tests/hub_server.py` in turn (any HTTP status, a body that is not what was asked for, a dropped or
stalled connection) and says one sentence naming what failed and what to do, never a traceback; what arrived
is kept; the command line prints that sentence, and the app's Get the model panel shows the same one.
"""

from __future__ import annotations

import hashlib
import html
import io
import json
import time
import types

import pytest

from tests.hub_server import ENDPOINTS, FAULTS, GOOD_TOKEN, OPEN_MODEL, SERVED_MODEL, serving

WEIGHTS = "model.safetensors"
STEP_WORDS = {"whoami": ("the login check",), "info": ("the model's information",), "tree": ("the file listing",),
              "head": ("fetching `", "the file listing"), "get": ("fetching `",), "resume": (f"fetching `{WEIGHTS}`",)}
"""What each endpoint's message names as the step that failed (a file's HEAD is asked again while the files are
laid out: a HEAD answered 302 without an address fails there, the file itself being fetched whole)."""
FIXES = ("start again", "try again", "start the download again", "fetches nothing twice", "check its name", "paste it", "Read token", "then start the download again")
"""Every message ends with what to do: one of these."""


@pytest.fixture(scope="module")
def module_hub(tiny_model_dir):
    """One fake hub for this module's tests (each resets its faults and its log: `hub`)."""
    with serving(tiny_model_dir) as served:
        yield served


@pytest.fixture()
def hub(module_hub, tmp_path, monkeypatch):
    """The fake hub, huggingface_hub online with its cache in a temporary folder, no saved token, its address for
    the login check (downloads name it with `endpoint=`), a stall shorter than the time-outs,
    and huggingface_hub's 1 s pauses between a file's retries skipped."""
    from huggingface_hub import constants, file_download, hf_api
    from huggingface_hub.utils import _http as hf_http

    from pipeline.model import download

    from tests.hub_server import hub_online

    hub_online(monkeypatch, tmp_path / "hf-home")
    monkeypatch.setattr(hf_api.api, "endpoint", module_hub.url)  # `whoami`/`login`'s HfApi, made at import from HF_ENDPOINT
    monkeypatch.setattr(constants, "HF_HUB_DOWNLOAD_TIMEOUT", 0.5)
    monkeypatch.setattr(constants, "HF_HUB_ETAG_TIMEOUT", 0.5)
    monkeypatch.setattr(download, "HUB_TIMEOUT_S", 0.5)
    hf_time = types.SimpleNamespace(**{**vars(time), "sleep": lambda _s: None})  # hf's own 1 s waits between retries
    monkeypatch.setattr(file_download, "time", hf_time)
    monkeypatch.setattr(hf_http, "time", hf_time)  # and its backoff on 429 and 5xx (1+2+4+8+8 s)
    fake_hub = module_hub
    fake_hub.faults.clear()
    fake_hub.requests.clear()
    fake_hub.stall_s = 0.8
    return fake_hub


def _partial_weights(hub) -> None:
    """Half of the weights in the cache's partial file, as a cut download leaves them: the next one resumes."""
    from pipeline.model.local_copy import storage_folder

    data = hub.repos[SERVED_MODEL].files[WEIGHTS].data
    blob = storage_folder(SERVED_MODEL) / "blobs" / f"{hashlib.sha256(data).hexdigest()}.incomplete"
    blob.parent.mkdir(parents=True, exist_ok=True)
    blob.write_bytes(data[: len(data) // 2])


def _call(endpoint: str, hub):
    """The product's call that meets `endpoint` first (the login check; a download for the rest)."""
    from pipeline.model.download import download_model, save_token

    if endpoint == "whoami":
        return save_token(GOOD_TOKEN)
    if endpoint == "resume":
        _partial_weights(hub)
    return download_model(SERVED_MODEL, token=GOOD_TOKEN, endpoint=hub.url)


def _assert_one_sentence(message: str, endpoint: str) -> None:
    assert "Traceback" not in message and "\n" not in message and len(message) < 700, message
    assert any(words in message.lower() for words in STEP_WORDS[endpoint]), (endpoint, message)
    assert any(fix in message for fix in FIXES), message


CASES = [pytest.param(endpoint, fault, id=f"{endpoint}-{fault}",
                      marks=[pytest.mark.slow] if fault == "stall" and endpoint in ("tree", "get", "resume") else [])
         for endpoint in ENDPOINTS for fault in FAULTS] + [pytest.param("resume", "ignore-range", id="resume-ignore-range")]
"""Every endpoint with every fault; a stalled file or listing is `slow` (huggingface_hub waits out its time-out
at each of its retries)."""


@pytest.mark.parametrize("endpoint, fault", CASES)
def test_every_hub_call_meets_every_fault_with_one_sentence(hub, endpoint, fault):
    from pipeline.errors import PipelineError

    hub.faults[endpoint] = fault
    if fault == "ignore-range":  # a CDN that ignores `Range`: the whole file comes again, and that is fine
        result = _call(endpoint, hub)
        assert result["size_bytes"] and [r["range"] for r in hub.gets(WEIGHTS)][0]
        return
    with pytest.raises(PipelineError) as failed:
        _call(endpoint, hub)
    message = str(failed.value)
    _assert_one_sentence(message, endpoint)
    if fault.startswith("status:") and fault not in ("status:204", "status:302"):
        assert f"HTTP {fault[7:]}" in message, message


def test_a_404_on_the_login_check_says_what_failed_on_the_command_line_without_a_traceback(hub, monkeypatch, capsys):
    """The issue's example: `get-model --token-stdin` against a server whose whoami answers 404."""
    from pipeline.model.cli import get_model_main

    hub.faults["whoami"] = "status:404"
    monkeypatch.setattr("sys.stdin", io.StringIO(GOOD_TOKEN + "\n"))
    code = get_model_main(["--model", SERVED_MODEL, "--token-stdin", "--json"])
    out, err = capsys.readouterr()
    assert code == 1 and "Traceback" not in err
    printed = json.loads(out.strip().splitlines()[-1])["error"]
    assert err.strip() == f"error: {printed}"
    assert "HTTP 404 Not Found while checking the token (the login check)" in printed and "HF_ENDPOINT" in printed


@pytest.mark.parametrize("endpoint, fault", [("whoami", "status:404"), ("info", "html"), ("info", "drop")])
def test_the_panel_shows_the_command_line_s_sentence(hub, tmp_path, endpoint, fault, monkeypatch, capsys):
    """Get the model in the app: the login check (a pasted token) and the model's information are asked before
    the job starts, so their failure is the panel's status, the same sentence as the command line's (in the
    app's words)."""
    from pipeline.model.cli import get_model_main
    from ui.tutor_app import TutorApp
    from ui.wording import app_wording

    from huggingface_hub import constants

    monkeypatch.setattr(constants, "ENDPOINT", hub.url)  # as HF_ENDPOINT does at import (the CLI and the panel name none)
    hub.faults[endpoint] = fault
    monkeypatch.setattr("sys.stdin", io.StringIO(GOOD_TOKEN + "\n"))
    get_model_main(["--model", SERVED_MODEL, "--token-stdin", "--json"])
    cli = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["error"]
    panel = TutorApp(tmp_path / "ws").get_model
    status = panel.start(SERVED_MODEL, GOOD_TOKEN if endpoint == "whoami" else "")[1]
    assert app_wording(cli) in status, (cli, status)
    assert not (tmp_path / "ws" / "downloads").exists() or not any((tmp_path / "ws" / "downloads").rglob("pid.json"))


def test_what_arrived_is_kept_when_the_resumed_file_fails(hub):
    """A resume that meets a 503 keeps the half that was here, and says so; the next download continues."""
    from pipeline.errors import ModelLoadError
    from pipeline.model.download import download_model

    hub.faults["resume"] = "status:503"
    with pytest.raises(ModelLoadError, match="fetched so far are kept") as failed:
        _call("resume", hub)
    assert "HTTP 503 Service Unavailable" in str(failed.value)
    del hub.faults["resume"]
    hub.requests.clear()
    result = download_model(SERVED_MODEL, token=GOOD_TOKEN, endpoint=hub.url)
    size = len(hub.repos[SERVED_MODEL].files[WEIGHTS].data)
    assert hub.gets(WEIGHTS)[0]["range"] == f"bytes={size // 2}-" and result["size_bytes"]


def test_a_download_job_that_fails_shows_the_command_line_s_sentence_in_the_panel(hub, tmp_path, monkeypatch, capsys):
    """A failure after the job started (here HTTP 503 on a file) is the job's reason: the panel's bar shows the
    sentence the command line printed, in the app's words."""
    from huggingface_hub import constants

    from pipeline.model.cli import get_model_main
    from ui.tutor_app import TutorApp
    from ui.wording import app_wording

    monkeypatch.setattr(constants, "ENDPOINT", hub.url)  # as HF_ENDPOINT does at import
    monkeypatch.setattr(constants, "HUGGINGFACE_CO_URL_TEMPLATE", hub.url + "/{repo_id}/resolve/{revision}/{filename}")
    monkeypatch.setenv("HF_TOKEN", GOOD_TOKEN)
    hub.faults["get"] = "status:503"
    ws = tmp_path / "ws"
    assert get_model_main(["--model", SERVED_MODEL, "--workspace", str(ws), "--json"]) == 1
    cli = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["error"]
    assert "HTTP 503 Service Unavailable while fetching `" in cli
    bar = TutorApp(ws).get_model.show(SERVED_MODEL)[4]
    assert html.escape(app_wording(cli, markdown=False)) in bar, (cli, bar)


@pytest.mark.parametrize("endpoint, fault", [("info", "html"), ("info", "json-list"), ("head", "status:418"),
                                             ("get", "status:410"), ("get", "drop")])
def test_loading_a_model_that_is_not_here_meets_a_fault_with_one_sentence(hub, monkeypatch, endpoint, fault):
    """A load of a hub id not in the cache asks the hub too (its information, then the files through
    transformers): each fault there is one sentence, never a traceback."""
    from huggingface_hub import constants
    from transformers import AutoConfig

    from pipeline.errors import ModelLoadError
    from pipeline.model.hub import from_pretrained_cached_first, translate_load_errors

    monkeypatch.setattr(constants, "ENDPOINT", hub.url)
    monkeypatch.setattr(constants, "HUGGINGFACE_CO_URL_TEMPLATE", hub.url + "/{repo_id}/resolve/{revision}/{filename}")
    hub.faults[endpoint] = fault
    with pytest.raises(ModelLoadError) as failed, translate_load_errors(OPEN_MODEL, "configuration"):
        from_pretrained_cached_first(AutoConfig.from_pretrained, OPEN_MODEL)
    message = str(failed.value)
    assert "Traceback" not in message and "\n" not in message and OPEN_MODEL in message, message
    assert any(fix in message for fix in FIXES + ("copy a downloaded model folder",)), message
