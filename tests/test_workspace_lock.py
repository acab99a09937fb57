"""Issue 11 #7 and #8: one training run per workspace from every entry point, honest status for a
run that died, and tests that stop what they started whatever the outcome."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from pipeline.config import TrainConfig
from pipeline.errors import TrainingError
from pipeline.fileio import atomic_write_json
from pipeline.training import run_folder, runs
from tests.processes import dead_run, stop_process_group

REPO_ROOT = Path(__file__).resolve().parents[1]
HOLD = textwrap.dedent("""
    # stands in for `python -m pipeline train` (a trainer's command line names pipeline, train, the run)
    import sys, time
    from pipeline.host.workspace_lock import WorkspaceLock
    WorkspaceLock(sys.argv[1], sys.argv[2]).acquire()
    print("held", flush=True)
    time.sleep(600)
""")
"""A process that holds a workspace's training lock as a trainer does (its command line names
`pipeline`, `train` and the run, as a real trainer's does: `TRAINER_WORDS` and the run follow the code)."""
TRAINER_WORDS = "pipeline train"
"""What `pipeline.training.runs.pid_alive` looks for in a trainer's command line (the lock's module,
`pipeline.host.workspace_lock`, no longer names `train`)."""


@pytest.fixture
def lock_holding_process():
    """Start `HOLD` for (workspace, run); teardown stops it whatever the outcome."""
    started: list[subprocess.Popen] = []

    def start(ws: Path, run: str) -> subprocess.Popen:
        proc = subprocess.Popen([sys.executable, "-c", HOLD, str(ws), run, TRAINER_WORDS], cwd=REPO_ROOT, stdout=subprocess.PIPE,
                                text=True, start_new_session=True)
        started.append(proc)
        assert proc.stdout.readline().strip() == "held"
        return proc

    yield start
    for proc in started:
        stop_process_group(proc.pid)
        proc.wait(timeout=30)


def _config(model="/no/model") -> TrainConfig:
    return TrainConfig(model=model, device="cpu", quantization="none", max_steps=1, save_steps=0, eval_steps=0)


def test_a_command_line_run_is_refused_while_another_trains(tmp_path, lock_holding_process):
    from pipeline.training.cli import train_main
    from pipeline.host.workspace_lock import lock_holder

    ws = tmp_path / "ws"
    holder = lock_holding_process(ws, "app-run")
    assert lock_holder(ws)["pid"] == holder.pid and runs.active_run(ws) == "app-run"
    with pytest.raises(TrainingError, match=rf"busy: run `app-run` \(process {holder.pid}\).*`cli-run` was not started"):
        train_main(["--workspace", str(ws), "--run", "cli-run", "--model", "/no/model", "--device", "cpu", "--max-steps", "1"])
    assert not (ws / "runs" / "cli-run").exists(), "a refused run leaves nothing behind"
    # The app's entry point honours the same lock (a run started on the command line holds it).
    atomic_write_json(ws / "dataset" / "build_report.json", {"splits": {"train": 3, "eval": 0}})
    with pytest.raises(TrainingError, match="`app-run` is still training"):
        runs.start_run(ws, "app-2", _config())
    # The command-line run shows as running (its result.json names its pid; no pid.json).
    atomic_write_json(ws / "runs" / "app-run" / "result.json", {"run": "app-run", "status": "running", "pid": holder.pid})
    assert runs.run_status(ws, "app-run")["state"] == "running"


def test_a_lock_left_by_a_dead_process_is_taken_over(tmp_path, lock_holding_process):
    from pipeline.host.workspace_lock import WorkspaceLock, lock_holder, lock_path

    ws = tmp_path / "ws"
    holder = lock_holding_process(ws, "crashed")
    stop_process_group(holder.pid, grace_s=0.1)  # killed: it never released the lock
    holder.wait(timeout=30)
    assert json.loads(lock_path(ws).read_text())["pid"] == holder.pid  # the file still names the dead pid
    assert lock_holder(ws) is None and runs.active_run(ws) is None
    with WorkspaceLock(ws, "next"):
        assert lock_holder(ws)["run"] == "next"
    assert lock_holder(ws) is None


def test_a_run_that_died_without_a_checkpoint_does_not_offer_resume(tmp_path):
    ws = tmp_path / "ws"
    run_dir = dead_run(ws, "orphan", {"run": "orphan", "status": "running"})
    status = runs.run_status(ws, "orphan")
    assert status["state"] == "failed"
    assert "resume" not in status["reason"].lower().replace("cannot be resumed", ""), status["reason"]
    assert "saved no checkpoint" in status["reason"] and "new name" in status["reason"]
    (run_dir / "checkpoints" / "checkpoint-4").mkdir(parents=True)
    (run_dir / "checkpoints" / "checkpoint-4" / "trainer_state.json").write_text("{}")
    assert "--resume continues from its last checkpoint (checkpoint-4)" in runs.run_status(ws, "orphan")["reason"]


@pytest.mark.slow
def test_a_failing_test_still_stops_the_runs_it_started(pytester, tmp_path):
    """The e2e fixture's teardown (`stop_workspace_runs`) stops a detached run of the workspace
    even when the test body fails, as a failed browser test did not (its run trained 20 more minutes)."""
    ws = tmp_path / "ws"
    pid_file = tmp_path / "started.pid"
    pytester.makeconftest(f"""
        import json, subprocess, sys
        from pathlib import Path
        import pytest
        sys.path.insert(0, {str(REPO_ROOT)!r})
        from tests.processes import stop_workspace_runs

        @pytest.fixture
        def app_with_a_run():
            ws = Path({str(ws)!r})
            (ws / "runs" / "r1").mkdir(parents=True)
            # What the app does: a detached process (own session) registered in the run folder.
            proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", "pipeline", "train", "r1"],
                                    start_new_session=True)
            (ws / "runs" / "r1" / "pid.json").write_text(json.dumps({{"pid": proc.pid}}))
            Path({str(pid_file)!r}).write_text(str(proc.pid))
            try:
                yield ws
            finally:
                stop_workspace_runs(ws)
                proc.wait(timeout=30)
    """)
    pytester.makepyfile(test_inner="""
        def test_fails_mid_run(app_with_a_run):
            assert False, "the browser step failed"
    """)
    result = pytester.runpytest_subprocess("-q", "-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    pid = int(pid_file.read_text())
    assert not run_folder.pid_alive(pid, "r1"), "the detached run outlived its failed test"
