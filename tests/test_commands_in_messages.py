"""Commands the messages suggest work when pasted into a shell, whatever the workspace path: a teacher's
folder often has spaces ("My Documents/tutor"), and an unquoted path split the command into other
arguments."""

from __future__ import annotations

import re
import shlex

import pytest

from pipeline.errors import PipelineError


def _commands(message: str) -> list[list[str]]:
    """Every backticked `python -m pipeline ...` command of a message, as a shell would split it."""
    return [shlex.split(command) for command in re.findall(r"`(python -m pipeline [^`]+)`", message)]


def _workspace_args(message: str) -> list[str]:
    found = [args[args.index("--workspace") + 1] for args in _commands(message) if "--workspace" in args]
    assert found, f"no command with --workspace in: {message}"
    return found


@pytest.fixture()
def spaced_ws(tmp_path):
    return tmp_path / "My Documents" / "tutor's work"


def test_suggested_commands_keep_a_workspace_path_with_spaces_whole(spaced_ws):
    from pipeline.data.dataset import build_dataset, load_built_dataset
    from pipeline.training.runs import require_built_dataset
    from pipeline.tutor.evaluate import split_key

    for attempt in (lambda: build_dataset(spaced_ws, "unused-model"), lambda: load_built_dataset(spaced_ws),
                    lambda: require_built_dataset(spaced_ws), lambda: split_key(spaced_ws, "eval")):
        with pytest.raises(PipelineError) as caught:
            attempt()
        assert _workspace_args(str(caught.value)) == [str(spaced_ws)], str(caught.value)


def test_the_resume_refusal_command_keeps_the_path_and_run_whole(tmp_path, spaced_ws):
    from pipeline.errors import TrainingError
    from pipeline.training.resume import check_dataset, record_dataset

    run_dir = spaced_ws / "runs" / "run-1"
    run_dir.mkdir(parents=True)
    record_dataset(run_dir, {"fingerprint": "a", "splits": {"train": 2}, "row_ids": {"train": ["x", "y"]}, "built_at": 1})
    with pytest.raises(TrainingError) as caught:
        check_dataset(run_dir, "run-1", {"fingerprint": "b", "splits": {"train": 1}, "row_ids": {"train": ["x"]}, "built_at": 2})
    (args,) = _commands(str(caught.value))
    assert args[args.index("--workspace") + 1] == str(spaced_ws) and args[args.index("--run") + 1] == "run-1"


def test_make_tiny_model_prints_a_model_path_that_pastes_whole(tmp_path, capsys, monkeypatch):
    from pipeline.model import tiny_gemma3n
    from pipeline.model.cli import make_tiny_model_main

    out = tmp_path / "my models" / "tiny"
    monkeypatch.setattr(tiny_gemma3n, "make_tiny_gemma3n", lambda out_dir, seed=0: _fake_tiny(out_dir))
    make_tiny_model_main([str(out)])
    printed = capsys.readouterr().out
    line = next(line for line in printed.splitlines() if "--model" in line)
    model = shlex.split(line.split("--model ", 1)[1].split(";", 1)[0])
    assert model == [str(out.resolve())], printed


def _fake_tiny(out_dir):
    import json
    from pathlib import Path

    from pipeline.model.tiny_model import MARKER_FILE

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / MARKER_FILE).write_text(json.dumps({"parameters": 1}), encoding="utf-8")
    return out


def test_messages_shown_in_the_app_speak_of_the_app_as_the_screen_they_are_on(tmp_path):
    """Issue 32 leftovers: messages written for both the command line and the app read, on the app's screens,
    "(in the app: click it ...)", "the app's Dataset tab (Build dataset), or **Build dataset** (Dataset tab)",
    "Stop in the app, or create /…/STOP" (a file the teacher never saw). In the app each says the app's own
    words once; on the command line the command stays."""
    from pipeline.host.workspace_lock import _busy_error
    from pipeline.model.hub_failures import access_message as _access_message
    from pipeline.training.runs import require_built_dataset
    from pipeline.tutor.infer import _runs_hint
    from pipeline.workspace import Workspace
    from ui.wording import app_wording

    ws = Workspace(tmp_path / "ws")
    with pytest.raises(Exception) as no_dataset:
        require_built_dataset(ws)
    messages = [str(no_dataset.value), str(_busy_error({"run": "r1", "pid": 1}, "r2")), _runs_hint(ws),
                _access_message("google/gemma-3n-E2B-it", 401, True)]
    for message in messages:
        shown = app_wording(message)
        assert "the app's" not in shown and "in the app" not in shown and "STOP" not in shown, shown
    assert "python -m pipeline build" in messages[0] and "STOP" in messages[1]  # the command line keeps its words
    assert "**Build dataset** (Dataset tab)" in app_wording(messages[0])
    assert "**Stop** on the Train tab" in app_wording(messages[1])


def test_a_teachers_words_lead_and_the_engineers_wait_behind_why():
    """Issue 32's leftovers, item 10: the header named "LoRA on Google's Gemma 3n" with Gemma 4 picked; the
    export choices led with format names; HF_HOME and HF_TOKEN were named on screen; a clip's checks led with
    "-23.1 dBFS"; the silent clip's error with its figure. Each now leads with words, the term behind "Why?"."""
    import app
    from ui.common import error_panel
    from ui.get_model_view import progress_html
    from ui.samples_view import checks_markdown
    from ui.common import export_choices
    from ui.try_view import export_markdown
    from ui.wording import app_wording
    from pipeline.errors import AudioError

    def lead(text: str) -> str:
        return text.split("<details>")[0]

    header = app._header_html(__import__("pathlib").Path("/ws"))
    assert "LoRA" not in header and "3n or 4" in header
    labels = dict((value, label) for label, value in export_choices(None, None))
    assert labels["gguf"].startswith("For Ollama / LM Studio") and labels["adapter"].startswith("To share")
    disk = app_wording("The disk is full: free some space (or point HF_HOME at a larger disk) and start again.")
    assert "HF_HOME" not in lead(disk) and "HF_HOME" in disk and "larger disk" in lead(disk)
    note = export_markdown("r", {"format": "bundle", "path": "/p", "bytes": 1, "notes": [
        "The GPU machine downloads `m` from the hub (set HF_TOKEN there)."]}, True)
    assert "HF_TOKEN" not in lead(note) and "HF_TOKEN" in note
    failed = progress_html({"state": "failed", "reason": "Free some space (or point HF_HOME at a larger disk)."})
    assert "HF_HOME" not in lead(failed)
    checks = checks_markdown({"duration_s": 2.0, "peak": 0.5, "level_dbfs": -38.2, "clipped_fraction": 0.0,
                              "warnings": ["quiet: speak closer to the microphone (-38.2 dBFS at its loudest)"],
                              "source_rate_hz": 16000, "channels": 1})
    assert "dBFS" not in lead(checks) and "-38.2 dBFS" in checks and "speak closer" in lead(checks)
    silent = error_panel(AudioError("`x.wav` is silent: nothing in it is loud enough to be speech. Check the "
                                    "microphone. (Its loudest 0.25 s measures -62.0 dBFS, below the -50 dBFS speech "
                                    "threshold.)"))
    assert "dBFS" not in lead(silent) and "-62.0 dBFS" in silent and "silent" in lead(silent)
