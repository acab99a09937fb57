"""Training runs as separate processes: start, one at a time, status, STOP, resume, dead processes."""

from __future__ import annotations

import argparse
import subprocess
import sys
import time

import pytest

from pipeline import jobs
from pipeline.training import run_folder, runs
from pipeline.config import TrainConfig, add_train_arguments
from pipeline.errors import DatasetError, TrainingError
from pipeline.fileio import atomic_write_json, read_jsonl
from tests.processes import dead_run, wait_until
from tests.training_data import copy_workspace, real_workspace
from ui.wording import app_wording


def test_config_flags_reproduce_the_config():
    config = TrainConfig(model="/m", lora_targets="language+audio", gradient_checkpointing=False, learning_rate=3e-4, max_steps=7)
    parser = argparse.ArgumentParser()
    add_train_arguments(parser)
    assert TrainConfig.from_args(parser.parse_args(runs.config_flags(config))) == config


def test_a_process_that_died_without_a_result_is_failed(tmp_path):
    ws = tmp_path / "ws"
    dead_run(ws, "crashed", {"run": "crashed", "status": "running"})
    status = runs.run_status(ws, "crashed")
    assert status["state"] == "failed" and not status["alive"]
    assert "ended without writing its result" in status["reason"]
    assert runs.active_run(ws) is None
    assert runs.run_status(ws, "never")["state"] == "not_started"
    assert [s["run"] for s in runs.list_runs(ws)] == ["crashed"]


def test_a_reused_pid_is_not_the_trainer_on_a_system_without_proc(tmp_path, monkeypatch):
    """Issue 21 #11: whether a recorded pid is still the trainer is asked through psutil, not read from
    /proc. Here /proc is hidden from the check (as on macOS): a live process that is not the trainer
    (the pid was reused) must not keep the run "running" and block the workspace."""
    from pathlib import Path

    real_exists = Path.exists
    monkeypatch.setattr(Path, "exists", lambda self, *a, **k: False if str(self).startswith("/proc") else real_exists(self, *a, **k))
    ws = tmp_path / "ws"
    run_dir = ws / "runs" / "r1"
    run_dir.mkdir(parents=True)
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        atomic_write_json(run_dir / jobs.PID_FILE, {"pid": other.pid})
        atomic_write_json(run_dir / "result.json", {"run": "r1", "status": "running", "pid": other.pid})
        assert not run_folder.pid_alive(other.pid, "r1")
        status = runs.run_status(ws, "r1")
        assert status["state"] == "failed" and not status["alive"]
        assert runs.active_run(ws) is None
    finally:
        other.kill()
        other.wait()
    zombie = subprocess.Popen([sys.executable, "-c", "pass"])  # ended, not reaped: a zombie
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            import psutil

            if psutil.Process(zombie.pid).status() == psutil.STATUS_ZOMBIE:
                break
            time.sleep(0.05)
        assert not run_folder.pid_alive(zombie.pid)
    finally:
        zombie.wait()


def test_start_without_a_built_dataset_is_refused_before_any_run_folder(tmp_path):
    ws = tmp_path / "ws"
    config = TrainConfig(model="/m", device="cpu", max_steps=2)
    with pytest.raises(DatasetError, match="python -m pipeline build") as refused:
        runs.start_run(ws, "first", config)
    assert "**Build dataset** (Dataset tab)" in app_wording(str(refused.value))  # the app names its button once
    assert not (ws / "runs").exists(), "nothing is created, no process is started"
    # A build report with no training rows is refused the same way.
    atomic_write_json(ws / "dataset" / "build_report.json", {"splits": {"train": 0, "eval": 0}})
    with pytest.raises(DatasetError, match="no training rows"):
        runs.start_run(ws, "first", config)
    assert not (ws / "runs").exists()


@pytest.mark.slow
def test_start_stop_and_resume_a_detached_run(tmp_path_factory, tmp_path, speechocean_dir, tiny_model_dir):
    shared = real_workspace(tmp_path_factory, speechocean_dir, tiny_model_dir, keep=6, eval_fraction=0.34)
    ws = copy_workspace(shared, tmp_path / "ws")
    config = TrainConfig(
        model=str(tiny_model_dir), device="cpu", quantization="4bit", lora_rank=4, lora_alpha=8, batch_size=1,
        grad_accum=1, max_steps=200, eval_steps=0, save_steps=0, logging_steps=1,
    )
    started = runs.start_run(ws, "first", config)
    assert started["pid"] > 0 and (ws / "runs" / "first" / jobs.PID_FILE).exists()
    assert runs.active_run(ws) == "first"
    with pytest.raises(TrainingError, match="one run at a time"):
        runs.start_run(ws, "second", config)
    # The app handed the workspace's training lock to the process it started: the command line honours it.
    from pipeline.training.train import train
    from pipeline.host.workspace_lock import lock_holder

    assert lock_holder(ws)["pid"] == started["pid"]
    # It trains with cores - 1 threads, leaving one to the app (pipeline.host.cpu_threads).
    import os
    from pathlib import Path

    from pipeline.host.cpu_threads import trainer_threads

    if "OMP_NUM_THREADS" not in os.environ:
        environ = Path(f"/proc/{started['pid']}/environ").read_bytes().split(b"\0")
        assert f"OMP_NUM_THREADS={trainer_threads()}".encode() in environ
    with pytest.raises(TrainingError, match=r"busy: run `first`"):
        train(config, ws, "from-cli")
    assert not (ws / "runs" / "from-cli").exists()
    wait_until(lambda: runs.run_status(ws, "first")["progress_lines"] >= 1, timeout_s=240)
    status = runs.request_stop(ws, "first", timeout_s=180, wait=True)
    assert status["state"] == "stopped" and not status["alive"], status
    assert (ws / "runs" / "first" / "adapter" / "adapter_config.json").exists()
    assert status["result"]["steps"] < 200
    assert runs.active_run(ws) is None

    runs.start_run(ws, "first", None, resume=True)
    # A resumed run keeps its settings; stop it again after it has moved on, then check it continued.
    before = status["result"]["steps"]
    wait_until(lambda: (runs.run_status(ws, "first")["step"] or 0) > before, timeout_s=240)
    final = runs.request_stop(ws, "first", timeout_s=180, wait=True)
    assert final["state"] == "stopped" and final["result"]["steps"] > before
    assert final["result"]["resumed_from"].endswith(f"checkpoint-{before}")
    steps = [p["step"] for p in read_jsonl(ws / "runs" / "first" / "progress.jsonl")]
    assert steps == list(range(1, len(steps) + 1))  # one line per step, no gap or repeat across the resume


def test_stop_timeout_grows_with_the_measured_step_time():
    assert runs.stop_timeout_s({"last_progress": None}) == runs.DEFAULT_STOP_TIMEOUT_S
    slow = {"last_progress": {"step": 2, "elapsed_s": 400.0}}  # 200 s per step on a slow machine
    assert runs.stop_timeout_s(slow) == 3 * 200.0 + 60.0


@pytest.mark.slow
def test_stop_pressed_while_the_run_is_still_starting_stops_it_cleanly(tmp_path_factory, tmp_path, speechocean_dir, tiny_model_dir):
    """Stop at once after Start (the process still importing torch): the trainer cleared the STOP file as
    it began, trained on, and was killed at the stop deadline. The request now stands until the run ends:
    it stops after its first micro-batch, with a checkpoint and the adapter, as `stopped`."""
    shared = real_workspace(tmp_path_factory, speechocean_dir, tiny_model_dir, keep=6, eval_fraction=0.34)
    ws = copy_workspace(shared, tmp_path / "ws")
    config = TrainConfig(
        model=str(tiny_model_dir), device="cpu", quantization="none", lora_rank=4, lora_alpha=8, batch_size=1,
        grad_accum=1, max_steps=400, eval_steps=0, save_steps=0, logging_steps=1,
    )
    runs.start_run(ws, "early", config)
    assert not read_jsonl(ws / "runs" / "early" / "progress.jsonl"), "the stop must come before the first step"
    status = runs.request_stop(ws, "early", timeout_s=200, wait=True, poll_s=0.2)
    result = status["result"]
    assert result["status"] == "stopped" and "Killed" not in (result.get("reason") or ""), result
    assert result["steps"] < 400 and (ws / "runs" / "early" / "adapter" / "adapter_config.json").exists()


def test_delete_run_removes_an_ended_run_and_refuses_a_training_one(tmp_path):
    ws = tmp_path / "ws"
    done = ws / "runs" / "done"
    (done / "adapter").mkdir(parents=True)
    (done / "adapter" / "adapter_model.safetensors").write_bytes(b"x" * 1000)
    atomic_write_json(done / "result.json", {"run": "done", "status": "completed"})
    # A live process that looks like `python -m pipeline train --run alive` (pid_alive checks the command line).
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", "pipeline", "train", "alive"])
    try:
        alive = ws / "runs" / "alive"
        alive.mkdir(parents=True)
        atomic_write_json(alive / jobs.PID_FILE, {"pid": live.pid})
        with pytest.raises(TrainingError, match=r"(?s)`alive` is running.*Stop it first"):
            runs.delete_run(ws, "alive")
        assert alive.is_dir(), "a training run is never deleted"
        deleted = runs.delete_run(ws, "done")
        assert deleted["state"] == "completed" and deleted["bytes"] >= 1000
        assert not done.exists() and [r["run"] for r in runs.list_runs(ws)] == ["alive"]
        assert not [p for p in (ws / "runs").iterdir() if p.name.startswith(".deleting")]
        with pytest.raises(TrainingError, match="No run named `done`.*alive"):
            runs.delete_run(ws, "done")
    finally:
        live.kill()
        live.wait()


@pytest.mark.slow
def test_delete_run_command(tmp_path):
    ws = tmp_path / "ws"
    atomic_write_json(ws / "runs" / "old" / "result.json", {"run": "old", "status": "stopped"})
    done = subprocess.run([sys.executable, "-m", "pipeline", "delete-run", "--workspace", str(ws), "--run", "old",
                           "--json"], capture_output=True, text=True, cwd=jobs.REPO_ROOT)
    assert done.returncode == 0, done.stderr
    assert '"state": "stopped"' in done.stdout and not (ws / "runs" / "old").exists()
    again = subprocess.run([sys.executable, "-m", "pipeline", "delete-run", "--workspace", str(ws), "--run", "old"],
                           capture_output=True, text=True, cwd=jobs.REPO_ROOT)
    assert again.returncode == 1 and "error: No run named `old`" in again.stderr


def test_a_process_that_printed_an_error_is_failed_with_that_error(tmp_path):
    """A run refused before training (e.g. Device: mps on a machine without it) names the error
    it printed, not "killed, or out of memory", and does not point to a train.log that was never written."""
    ws = tmp_path / "ws"
    run_dir = dead_run(ws, "refused")
    (run_dir / jobs.PROCESS_LOG).write_text(
        "error: `--device mps` was asked for but Apple MPS is not available; use `--device auto` or `cpu`.\n")
    status = runs.run_status(ws, "refused")
    assert status["state"] == "failed"
    assert "Apple MPS is not available" in status["reason"]
    assert "out of memory" not in status["reason"] and "train.log" not in status["reason"]
