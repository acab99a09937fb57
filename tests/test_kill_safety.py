"""Work killed half-way leaves nothing half-done (issue 44 #3): each long job is stopped at a phase of its own
(`pipeline.fileio.hold_point`, through `tests.processes.held`), killed there with SIGKILL (nothing of it runs
cleanup) or by closing its terminal (SIGHUP), and the next start must resume or start clean, never read a
half-written file as finished. Every test starts child processes, so all are `slow`; each stops what it starts.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from tests.processes import hang_up, held, kill_held, stop_process_group, wait_until

pytestmark = pytest.mark.slow
PY = sys.executable
RATE = 16000


def _tone(freq: float, seconds: float = 0.8) -> np.ndarray:
    t = np.arange(int(RATE * seconds)) / RATE
    return (0.3 * np.sin(2 * np.pi * freq * t)).astype(np.float32)


def _recordings(folder: Path, count: int, first_freq: float = 200.0) -> Path:
    """`count` clips in the audio + `.txt` layout (distinct tones, so none is a duplicate)."""
    folder.mkdir(parents=True)
    for k in range(count):
        sf.write(folder / f"clip{k}.wav", _tone(first_freq + 37 * k), RATE)
        (folder / f"clip{k}.txt").write_text(f"Sentence number {k}.\n", encoding="utf-8")
    return folder


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else "absent"


def _hidden(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith(".") and not p.name.endswith(".lock"))


def _import(ws: Path, source: Path) -> list[str]:
    return [PY, "-m", "pipeline", "import", "--workspace", str(ws), "--source", str(source), "--json"]


@pytest.mark.parametrize("where, hang", [("import:clip#2", False), ("import:clip#2", True), ("write:manifest.json", False)],
                         ids=["sigkill-after-2-clips", "terminal-closed-after-2-clips", "sigkill-before-manifest-rename"])
def test_an_import_killed_half_way_leaves_the_library_as_it_was_and_the_next_one_is_whole(tmp_path, where, hang):
    from pipeline.data.samples import SampleLibrary

    ws = tmp_path / "ws"
    assert subprocess.run(_import(ws, _recordings(tmp_path / "first", 1, 900.0)), capture_output=True).returncode == 0
    manifest = ws / "samples" / "manifest.json"
    before = _digest(manifest)
    source = _recordings(tmp_path / "rec", 4)
    process, _ = held(_import(ws, source), where, tmp_path / "holds", terminal=hang)
    (hang_up if hang else kill_held)(process)

    assert _digest(manifest) == before, "the manifest is the old one, whole"
    assert len(SampleLibrary(ws).list()) == 1
    audio = ws / "samples" / "audio"
    assert len(list(audio.glob("*.wav"))) > 1, "the killed import left clips that no sample lists"
    again = subprocess.run(_import(ws, source), capture_output=True, text=True)
    assert again.returncode == 0, again.stderr
    samples = SampleLibrary(ws).list()
    assert len(samples) == 5 and len({s.audio_sha256 for s in samples}) == 5
    listed = {name for s in samples for name in s.clip_files}
    assert {f"audio/{p.name}" for p in audio.glob("*.wav")} == listed, "the unlisted clips are gone"
    assert not list((ws / "samples").glob(".pending-*")) and not list(audio.glob(".*.tmp"))


def test_a_practice_attempt_killed_between_its_clip_and_its_record_leaves_no_clip(tmp_path):
    from pipeline.inbox.store import Inbox

    ws = tmp_path / "ws"
    clip = tmp_path / "said.wav"
    sf.write(clip, _tone(330.0), RATE)
    code = ("import sys; from pipeline.inbox.store import Inbox\n"
            "Inbox(sys.argv[1]).add(sys.argv[2], student='kim', kind='read_aloud', exercise='Hello.', answer='Good.')\n")
    process, _ = held([PY, "-c", code, str(ws), str(clip)], "inbox:clip", tmp_path / "holds")
    kill_held(process)
    inbox = Inbox(ws)
    assert inbox.list() == [] and len(list((inbox.root / "audio").glob("*.wav"))) == 1
    from ui.practice_page import build_practice

    build_practice(ws)  # the practice page's start removes it
    assert list((inbox.root / "audio").glob("*.wav")) == [] and not list(inbox.root.glob(".pending-*"))
    kept = inbox.add(clip, student="kim", kind="read_aloud", exercise="Hello.", answer="Good.")
    assert [a.id for a in inbox.list()] == [kept.id] and inbox.audio_path(kept).is_file()


@pytest.fixture(scope="module")
def library(tmp_path_factory) -> Path:
    """A workspace with 6 imported clips of 3 speakers (the dataset build's input)."""
    from pipeline.data.samples import SampleLibrary

    root = tmp_path_factory.mktemp("kill-build")
    ws = root / "ws"
    items = [{"audio": (RATE, _tone(200.0 + 41 * k)), "target_text": f"Sentence {k}.", "feedback": "Clear.",
              "speaker": f"s{k % 3}"} for k in range(6)]
    added, skipped = SampleLibrary(ws).add_many(items)
    assert len(added) == 6, skipped
    return ws


def _build(ws: Path, model: Path) -> list[str]:
    return [PY, "-m", "pipeline", "build", "--workspace", str(ws), "--model", str(model), "--eval-fraction", "0.34",
            "--json"]


def test_a_dataset_build_killed_at_each_phase_never_leaves_a_half_dataset(library, tiny_model_dir, tmp_path):
    from pipeline.data import dataset as ds
    from tests.training_data import copy_workspace

    ws = copy_workspace(library, tmp_path / "ws")
    first = subprocess.run(_build(ws, tiny_model_dir), capture_output=True, text=True)
    assert first.returncode == 0, first.stderr[-2000:]
    report = ds.load_build_report(ws)
    for where in ("staged:dataset", "swap:dataset"):  # saved beside the old one; between the two renames
        hang = where == "staged:dataset"  # its terminal closed there; SIGKILL at the swap
        process, _ = held(_build(ws, tiny_model_dir), where, tmp_path / "holds", terminal=hang)
        (hang_up if hang else kill_held)(process)
        assert (ws / "dataset").is_dir() == (where == "staged:dataset")
        data = ds.load_built_dataset(ws)  # the old one, whole (put back by the reader after the swap's kill)
        assert len(data["train"]) + len(data["eval"]) == 6
        assert ds.load_build_report(ws)["built_at"] == report["built_at"]
    process, _ = held(_build(ws, tiny_model_dir), "build:exports", tmp_path / "holds")
    kill_held(process)
    newer = ds.load_build_report(ws)  # the new dataset is in place and whole; it claims no exports
    assert newer["built_at"] > report["built_at"] and newer["exports"] == {}
    assert len(ds.load_built_dataset(ws)["train"]) == report["splits"]["train"]
    again = subprocess.run(_build(ws, tiny_model_dir), capture_output=True, text=True)
    assert again.returncode == 0, again.stderr[-2000:]
    assert set(ds.load_build_report(ws)["exports"]) and _hidden(ws) == [], "every killed build's staging is gone"


def test_the_calibration_record_and_its_stand_in_model_are_whole_or_absent(tmp_path):
    cal = tmp_path / "cal"
    env = {**os.environ, "TUTOR_CALIBRATION_DIR": str(cal)}
    code = ("from pipeline.calibration.store import device_key, update_entry\n"
            "update_entry(device_key('cpu'), lambda entry: entry.update(speed={'compute_dtype': 'float32', 'n': NUMBER}))\n")
    assert subprocess.run([PY, "-c", code.replace("NUMBER", "1")], env=env, cwd=Path(__file__).parents[1]).returncode == 0
    record = cal / "calibration.json"
    before = _digest(record)
    process, _ = held([PY, "-c", code.replace("NUMBER", "2")], "write:calibration.json", tmp_path / "holds", env=env)
    kill_held(process)
    assert _digest(record) == before and json.loads(record.read_text())  # the old record, whole

    stand_in = [PY, "-c", "from pipeline.memory.calibrate import stand_in_model; print(stand_in_model())"]
    process, _ = held(stand_in, "staged:stand-in", tmp_path / "holds", env=env)  # the model written, not in place
    kill_held(process)
    assert not (cal / "stand-in").exists() and _hidden(cal), "only a hidden staging folder is left"
    done = subprocess.run(stand_in, env=env, capture_output=True, text=True, cwd=Path(__file__).parents[1])
    assert done.returncode == 0, done.stderr[-2000:]
    assert (cal / "stand-in" / "model.safetensors").is_file() and _hidden(cal) == []


def test_a_calibration_job_killed_after_its_first_part_is_failed_and_the_next_one_starts(tmp_path, monkeypatch):
    from pipeline import jobs
    from pipeline.calibration.store import load_store
    from pipeline.config import TrainConfig
    from pipeline.memory import calibration_job as cj
    from pipeline.memory.calibrate import calibration_holder

    ws = tmp_path / "ws"
    settings = TrainConfig(model="google/gemma-3n-E2B-it").to_dict()
    monkeypatch.setenv("TUTOR_HOLD_FILE", str(tmp_path / "held.json"))  # the job's process inherits both
    try:
        for where in ("calibrate:stand-in", "calibrate:speed"):  # after the speed part is recorded; at the start
            (tmp_path / "held.json").unlink(missing_ok=True)
            monkeypatch.setenv("TUTOR_HOLD_AT", where)
            started = cj.start_calibration(ws, settings)
            assert started["started"], "a killed calibration never blocks the next one"
            wait_until(lambda: (tmp_path / "held.json").exists(), timeout_s=300)
            os.killpg(cj.CALIBRATION_JOB.read(cj.job_folder(ws)).pid, signal.SIGKILL)
            status = wait_until(lambda: (s := cj.calibration_status(ws))["state"] != "running" and s, timeout_s=60)
            assert status["state"] == "failed" and "killed" in status["result"]["reason"]
            assert calibration_holder() is None, "the calibration lock went with its holder"
    finally:
        for pid in list(jobs._CHILDREN):
            stop_process_group(pid, grace_s=0)
    assert load_store()["devices"], "the record holds the speed part the first one measured, whole"


def test_every_export_killed_before_its_rename_leaves_no_export_and_the_next_is_whole(tmp_path, speechocean_dir,
                                                                                       tiny_model_dir):
    from pipeline.export.tutor import read_run
    from tests.training_data import real_workspace, trained_run

    class _Factory:  # real_workspace wants a tmp_path_factory
        def mktemp(self, name):
            path = tmp_path / name
            path.mkdir()
            return path

    ws = trained_run(real_workspace(_Factory(), speechocean_dir, tiny_model_dir, keep=6), tiny_model_dir, "out",
                     max_steps=1)
    read_run(ws, "out")
    out = tmp_path / "exports"
    for fmt, name, target in (("adapter", "out-adapter.zip", "out-adapter.zip"), ("merged", "out-merged", "out-merged"),
                              ("bundle", "out-bundle", "out-bundle.tar.gz")):
        command = [PY, "-m", "pipeline", "export", "--workspace", str(ws), "--run", "out", "--format", fmt,
                   "--out", str(out), "--json"]
        process, _ = held(command, f"staged:{target}", tmp_path / "holds")
        kill_held(process)
        assert not (out / name).exists() and _hidden(out), f"{fmt}: only a hidden staging path is left"
        done = subprocess.run(command, capture_output=True, text=True, cwd=Path(__file__).parents[1])
        assert done.returncode == 0, done.stderr[-2000:]
        assert (out / name).exists() and _hidden(out) == [], f"{fmt}: whole, and the killed one's staging is gone"


def test_a_gguf_export_s_merged_copy_left_by_a_kill_goes_at_the_next_export(tmp_path):
    """The GGUF export merges into a scratch folder before llama.cpp's converter runs (gigabytes); killed there,
    that folder is named as the target's staging path with the killed pid, and the next export's first step
    (`recover_staging`, before the disk check) removes it. llama.cpp's tools need not be built for this."""
    from pipeline.fileio import recover_staging

    target = tmp_path / "out" / "run-gguf"
    code = ("import sys, tempfile; from pathlib import Path; from pipeline.fileio import hold_point, staging_prefix\n"
            "target = Path(sys.argv[1]); target.parent.mkdir(parents=True)\n"
            "scratch = Path(tempfile.mkdtemp(prefix=staging_prefix(target) + 'merged-', dir=target.parent))\n"
            "(scratch / 'model.safetensors').write_bytes(b'0' * 4096); hold_point('merged')\n")
    process, _ = held([PY, "-c", code, str(target)], "merged", tmp_path / "holds")
    kill_held(process)
    (left,) = target.parent.iterdir()
    assert left.name.startswith(f".run-gguf.staging-{process.pid}-merged-")
    recover_staging(target)
    assert list(target.parent.iterdir()) == []
    # a live writer's scratch folder stays
    live = target.parent / f".run-gguf.staging-{os.getpid()}-merged-x"
    live.mkdir()
    (live / "f").write_text("x")
    recover_staging(target)
    assert live.is_dir()


def test_a_run_killed_after_a_checkpoint_resumes_from_it(library, tiny_model_dir, tmp_path):
    from pipeline.training.run_folder import read_run
    from tests.training_data import copy_workspace

    ws = copy_workspace(library, tmp_path / "ws")
    built = subprocess.run(_build(ws, tiny_model_dir), capture_output=True, text=True)
    assert built.returncode == 0, built.stderr[-2000:]
    flags = ["--workspace", str(ws), "--run", "k", "--model", str(tiny_model_dir), "--device", "cpu",
             "--lora-rank", "4", "--lora-alpha", "8", "--batch-size", "1", "--grad-accum", "1", "--max-steps", "3",
             "--eval-steps", "0", "--save-steps", "1", "--json"]
    process, _ = held([PY, "-m", "pipeline", "train", *flags], "write:result.json", tmp_path / "holds")
    kill_held(process)  # killed as it starts: its settings written, not its result
    assert read_run(ws, "k").state == "not_started"
    process, _ = held([PY, "-m", "pipeline", "train", *flags], "train:saved#1", tmp_path / "holds")  # starts clean
    kill_held(process)
    info = read_run(ws, "k")
    assert info.state == "failed" and not info.alive, info.state
    assert not (ws / "runs" / "k" / "adapter").exists()
    resumed = subprocess.run([PY, "-m", "pipeline", "train", *flags, "--resume"], capture_output=True, text=True,
                             cwd=Path(__file__).parents[1])
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    result = json.loads(resumed.stdout.strip().splitlines()[-1])
    assert result["status"] == "completed" and result["steps"] == 3 and result["resumed_from"].endswith("checkpoint-1")


def test_an_evaluation_job_killed_after_an_answer_keeps_it_partial_and_the_next_one_completes(library, tiny_model_dir,
                                                                                               tmp_path, monkeypatch):
    from pipeline.tutor import eval_jobs as jobs
    from pipeline.tutor import evaluate as ev
    from tests.processes import stop_workspace_eval_jobs
    from tests.training_data import copy_workspace

    ws = copy_workspace(library, tmp_path / "ws")
    built = subprocess.run(_build(ws, tiny_model_dir), capture_output=True, text=True)
    assert built.returncode == 0, built.stderr[-2000:]
    monkeypatch.setenv("TUTOR_HOLD_AT", "evaluate:answer#1")
    monkeypatch.setenv("TUTOR_HOLD_FILE", str(tmp_path / "held.json"))
    try:
        started = jobs.start_job(ws, [{"model": str(tiny_model_dir)}], max_new_tokens=16)
        wait_until(lambda: (tmp_path / "held.json").exists(), timeout_s=300)
        os.killpg(started["pid"], signal.SIGKILL)
        status = wait_until(lambda: (s := jobs.job_status(ws, started["job"]))["state"] != "running" and s, timeout_s=60)
        assert status["state"] == "failed"
        (kept,) = ev.saved_evaluations(ws, ev.split_key(ws))
        assert kept["partial"]["answered"] == 1, "the answer given is kept, marked partial, not as a finished one"
        monkeypatch.delenv("TUTOR_HOLD_AT")
        again = jobs.start_job(ws, [{"model": str(tiny_model_dir)}], max_new_tokens=16)
        done = jobs.wait_for_job(ws, again["job"], timeout_s=300)
        assert done["state"] == "completed", done
        (whole,) = ev.saved_evaluations(ws, ev.split_key(ws))
        assert "partial" not in whole
    finally:
        stop_workspace_eval_jobs(ws)


@pytest.mark.parametrize("where, hang", [("get-model:chunk:model.safetensors#2", False),
                                         ("get-model:chunk:model.safetensors#2", True), ("get-model:placing", False)],
                         ids=["sigkill-mid-weights", "terminal-closed-mid-weights", "sigkill-placing"])
def test_get_model_killed_while_fetching_or_placing_is_not_here_and_the_next_start_finishes(fake_hub, tmp_path, where,
                                                                                             hang):
    from tests.hub_server import GOOD_TOKEN, SERVED_MODEL

    hf_home = tmp_path / "hf-home"
    env = {k: v for k, v in os.environ.items() if k not in ("HF_TOKEN", "HF_HUB_CACHE", "HF_TOKEN_PATH")}
    env = {**env, **fake_hub.env(hf_home), "HF_TOKEN": GOOD_TOKEN}
    command = [PY, "-m", "pipeline", "get-model", "--model", SERVED_MODEL, "--json"]
    process, _ = held(command, where, tmp_path / "holds", env=env, terminal=hang)
    (hang_up if hang else kill_held)(process)
    partial = list(hf_home.rglob("*.incomplete"))
    assert bool(partial) == (where != "get-model:placing"), partial
    here = [PY, "-c", "import sys; from pipeline.model.local_copy import local_copy; "
            f"print(local_copy({SERVED_MODEL!r}).complete)"]
    check = subprocess.run(here, env=env, capture_output=True, text=True, cwd=Path(__file__).parents[1])
    assert check.stdout.strip() == "False", check.stderr[-2000:]  # never taken for a model that is here
    fake_hub.requests.clear()
    done = subprocess.run(command, env=env, capture_output=True, text=True, cwd=Path(__file__).parents[1])
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.strip().splitlines()[-1])["status"] == "ready"
    check = subprocess.run(here, env=env, capture_output=True, text=True, cwd=Path(__file__).parents[1])
    assert check.stdout.strip() == "True"
    weights = [r["range"] for r in fake_hub.gets("model.safetensors")]
    if where == "get-model:placing":
        assert weights == [], "every file was here: nothing fetched again"
    else:
        assert len(weights) == 1 and weights[0] and weights[0] != "bytes=0-", "continued where it was killed"


def _killed_practice_upload(tmp_path, monkeypatch, code: str, where: str) -> None:
    """A recording in Gradio's upload folder (`UPLOAD_DIR/<sha256>/NAME`), a child that runs `code` (argv: the
    workspace, the recording) on the practice page's handlers and is killed at hold point `where`: the practice
    page's next start must delete the recording and its folder, and leave no journal."""
    from ui.practice_page import build_practice

    uploads = tmp_path / "gradio"
    upload = uploads / ("0" * 64) / "said.wav"
    upload.parent.mkdir(parents=True)
    sf.write(upload, _tone(330.0), RATE)
    ws = tmp_path / "ws"
    monkeypatch.setenv("GRADIO_TEMP_DIR", str(uploads))  # for the child and for this process
    process, _ = held([PY, "-c", code, str(ws), str(upload)], where, tmp_path / "holds")
    kill_held(process)
    assert upload.is_file()
    build_practice(ws)
    assert not upload.parent.exists(), f"{where}: the recording and its folder are gone"
    assert list((ws / "inbox" / ".uploads-pending").iterdir()) == []


def test_a_recording_the_practice_page_was_answering_when_the_app_was_killed_is_deleted_at_its_next_start(tmp_path, monkeypatch):
    """Gradio deletes a page's uploads when the app stops, not when it is killed: the one being answered is
    noted first (`Inbox.uploads_journal`), and the practice page's next start deletes it, consent or not."""
    code = ("import sys; from pipeline.workspace import Workspace; from ui.practice_page import PracticeHandlers\n"
            "list(PracticeHandlers(Workspace(sys.argv[1])).answer(sys.argv[2], 0, 'kim', True))\n")
    _killed_practice_upload(tmp_path, monkeypatch, code, "practice:answering")


def test_a_recording_uploaded_but_never_sent_when_the_app_was_killed_is_deleted_at_its_next_start(tmp_path,
                                                                                                   monkeypatch):
    """A student recorded (Gradio stored the upload, the page noted it) and never clicked Get feedback; the app is
    killed, so Gradio's own sweep never runs: the practice page's next start deletes the recording."""
    code = ("import sys; from pipeline.fileio import hold_point; from pipeline.workspace import Workspace\n"
            "from ui.practice_page import PracticeHandlers\n"
            "PracticeHandlers(Workspace(sys.argv[1])).note_upload(sys.argv[2]); hold_point('practice:unsent')\n")
    _killed_practice_upload(tmp_path, monkeypatch, code, "practice:unsent")


def test_an_upload_noted_by_a_process_that_lives_on_is_left_alone(tmp_path, monkeypatch):
    from pipeline.workspace import Workspace
    from ui.practice_page import PracticeHandlers, build_practice

    uploads = tmp_path / "gradio"
    upload = uploads / ("2" * 64) / "recording.wav"
    upload.parent.mkdir(parents=True)
    sf.write(upload, _tone(330.0), RATE)
    monkeypatch.setenv("GRADIO_TEMP_DIR", str(uploads))
    handlers = PracticeHandlers(Workspace(tmp_path / "ws").ensure())
    handlers.note_upload(str(upload))
    handlers.note_upload(str(tmp_path / "not-an-upload.wav"))  # a path outside Gradio's folder: never noted
    build_practice(tmp_path / "ws")
    assert upload.is_file(), "a live page's unsent upload was deleted"
    [journal] = list((tmp_path / "ws" / "inbox" / ".uploads-pending").iterdir())
    assert "not-an-upload" not in journal.read_text()


def test_a_gguf_export_killed_before_converting_or_before_its_rename_leaves_no_gguf(library, tiny_gemma4_dir,
                                                                                     tmp_path):
    """The real GGUF export of a tiny Gemma 4 run (F32: llama.cpp's converter only, no tool to build), killed
    with its merged copy written and with its GGUFs converted but not in place: no `NAME-gguf/` either time,
    and the next export is whole and removes what the killed ones left."""
    from pipeline.export import llama_cpp
    from tests.training_data import copy_workspace

    if not (llama_cpp.cache_dir() / "src" / "convert_hf_to_gguf.py").is_file():
        pytest.skip("llama.cpp's source is not fetched here (`python -m pipeline llama-cpp` fetches it)")
    ws = copy_workspace(library, tmp_path / "ws")
    for command in (_build(ws, tiny_gemma4_dir),
                    [PY, "-m", "pipeline", "train", "--workspace", str(ws), "--run", "g", "--model", str(tiny_gemma4_dir),
                     "--max-steps", "1", "--lora-targets", "language+audio", "--eval-steps", "0", "--json"]):
        done = subprocess.run(command, capture_output=True, text=True, cwd=Path(__file__).parents[1])
        assert done.returncode == 0, done.stderr[-2000:]
    out = tmp_path / "exports"
    export = [PY, "-m", "pipeline", "export", "--workspace", str(ws), "--run", "g", "--format", "gguf", "--quant", "f32",
              "--out", str(out), "--json"]
    for where in ("write:chat_template.jinja", "staged:g-gguf"):
        process, _ = held(export, where, tmp_path / "holds")
        kill_held(process)
        assert not (out / "g-gguf").exists() and _hidden(out), f"{where}: only hidden staging paths are left"
    done = subprocess.run(export, capture_output=True, text=True, cwd=Path(__file__).parents[1])
    assert done.returncode == 0, done.stderr[-3000:]
    files = json.loads(done.stdout.strip().splitlines()[-1])["files"]
    assert {"g.gguf", "mmproj-g.gguf", "Modelfile"} <= set(files) and _hidden(out) == []
