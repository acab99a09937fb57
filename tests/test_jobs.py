"""The background-job runner (`pipeline.jobs`) on trivial Python jobs: a detached start with its pid file
and log, alive by command line, the stop file honoured, a job that ignores it killed after the timeout
(and asked again meanwhile), the list and the active job, a blocking child killed after its timeout.
Every process a test starts is stopped in its teardown, whatever the outcome."""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path

import pytest

from pipeline import jobs
from pipeline.fileio import atomic_write_json
from tests.processes import stop_process_group

WORD = "jobs-test-job"
"""In the command line of every test job, so `JobKind.alive` tells it from any other process."""
KIND = jobs.JobKind(words=(WORD,), stop_file="STOP", stop_word="stop", keep_asking=True)

POLITE = """
import pathlib, sys, time
folder = pathlib.Path(sys.argv[3])
print("started", flush=True)
while not (folder / "STOP").exists():
    time.sleep(0.02)
(folder / "done").write_text("stopped on request")
"""
"""A job that ends when its stop file appears (argv: WORD, name, folder)."""
STUBBORN = """
import pathlib, sys, time
folder = pathlib.Path(sys.argv[3])
print("started", flush=True)
while True:
    stop = folder / "STOP"
    if stop.exists():
        stop.unlink()
        with open(folder / "removed", "a") as seen:
            seen.write("x")
    time.sleep(0.02)
"""
"""A job that never ends by itself and clears its stop file each time (as a trainer still starting does)."""


@pytest.fixture()
def started():
    """Start test jobs through `jobs.start`; each is stopped (its whole group) and reaped at teardown."""
    processes = []

    def start(folder: Path, script: str):
        folder.mkdir(parents=True, exist_ok=True)
        process = jobs.start(folder, [sys.executable, "-c", script, WORD, folder.name, str(folder)], env=jobs.job_env())
        processes.append(process)
        return process

    yield start
    for process in processes:
        if process.poll() is None:
            stop_process_group(process.pid, grace_s=2.0)
        process.wait(timeout=30)
        jobs._CHILDREN.pop(process.pid, None)


def _wait(predicate, timeout_s: float = 60.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.02)
    raise AssertionError(f"not reached within {timeout_s} s")


def test_a_detached_job_records_its_process_and_stops_on_its_stop_file(tmp_path, started):
    folder = tmp_path / "jobs" / "polite"
    process = started(folder, POLITE)
    record = jobs.read_json(folder / jobs.PID_FILE)
    assert record["pid"] == process.pid and record["command"][-3:] == [WORD, "polite", str(folder)]
    assert abs(record["started_at"] - time.time()) < 60
    if os.name == "posix":
        assert os.getsid(process.pid) == process.pid, "its own session: the app can exit and re-attach"
    _wait(lambda: "started" in (folder / jobs.PROCESS_LOG).read_text())
    now = KIND.read(folder)
    assert now.alive and now.pid == process.pid and now.started_at == record["started_at"] and not now.stop_requested
    killed = []
    KIND.stop(folder, process.pid, timeout_s=60, wait=True, poll_s=0.05, when_killed=lambda: killed.append(True))
    assert not killed and (folder / "done").read_text() == "stopped on request"
    after = KIND.read(folder)
    assert not after.alive and after.stop_requested and after.stop_requested_at <= time.time()
    assert (folder / "STOP").read_text().startswith("stop requested at ")


def test_a_job_that_does_not_stop_is_asked_again_then_killed_after_the_timeout(tmp_path, started):
    folder = tmp_path / "jobs" / "stubborn"
    process = started(folder, STUBBORN)
    _wait(lambda: "started" in (folder / jobs.PROCESS_LOG).read_text())
    killed = []
    began = time.monotonic()
    KIND.stop(folder, process.pid, timeout_s=1.5, wait=True, poll_s=0.05, when_killed=lambda: killed.append(True))
    assert killed == [True] and time.monotonic() - began >= 1.5
    assert process.poll() is not None and not KIND.read(folder).alive
    assert len((folder / "removed").read_text()) >= 2, "the stop file was written again after the job cleared it"


def test_stop_without_waiting_returns_at_once_and_kills_in_the_background(tmp_path, started):
    folder = tmp_path / "jobs" / "background"
    process = started(folder, STUBBORN)
    killed = []
    began = time.monotonic()
    KIND.stop(folder, process.pid, timeout_s=1.0, wait=False, poll_s=0.05, when_killed=lambda: killed.append(True))
    assert time.monotonic() - began < 1.0
    _wait(lambda: killed == [True], timeout_s=60)
    assert process.poll() is not None


def test_list_newest_first_and_the_active_job(tmp_path, started):
    parent = tmp_path / "jobs"
    dead = jobs.run_child([sys.executable, "-c", "pass"], timeout_s=60)
    (parent / "old").mkdir(parents=True)
    atomic_write_json(parent / "old" / jobs.PID_FILE, {"pid": dead.pid, "started_at": 1.0, "command": []})
    (parent / ".deleting-x").mkdir()  # hidden: a folder being deleted is no job
    (parent / "strange").mkdir()
    time.sleep(0.05)
    started(parent / "live", POLITE)

    def status(name: str) -> dict:
        if name == "strange":
            raise ValueError("not a job of this kind")
        process = KIND.read(parent / name)
        return {"job": name, "alive": process.alive, "pid": process.pid}

    statuses = jobs.list_statuses(parent, status)
    assert [s["job"] for s in statuses] == ["live", "old"] and not statuses[1]["alive"]
    assert jobs.first_alive(statuses, "job") == "live"
    assert jobs.first_alive(statuses[1:], "job") is None
    assert jobs.list_statuses(tmp_path / "none", status) == []
    (parent / "live" / "STOP").write_text("stop")
    ended = jobs.wait_for(lambda: status("live"), timeout_s=60, poll_s=0.05)
    assert not ended["alive"]


def test_alive_needs_the_jobs_words_in_the_command_line():
    """A process another app started (not this process's child) is the job's only by its command line."""
    import subprocess

    assert not jobs.alive(None) and not jobs.alive(0)
    assert jobs.alive(os.getpid()), "this process, no words asked"
    assert not KIND.alive(os.getpid(), "x"), "a live process that is not the job (a reused pid)"
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", WORD, "someone-elses"])
    try:
        _wait(lambda: KIND.alive(other.pid, "someone-elses"))  # once it has exec'd python
        assert KIND.alive(other.pid)
        assert not KIND.alive(other.pid, "another-job"), "a process of the same kind working for another job"
    finally:
        other.kill()
        other.wait()
    assert not KIND.alive(other.pid, "someone-elses")


def test_a_blocking_child_returns_its_output_or_is_killed_after_its_timeout():
    done = jobs.run_child([sys.executable, "-c", "import sys; print('out'); print('err', file=sys.stderr); sys.exit(3)"],
                          timeout_s=60)
    assert (done.returncode, done.stdout, done.stderr) == (3, "out\n", "err\n") and done.seconds > 0
    assert done.pid not in jobs._CHILDREN and not jobs.alive(done.pid, "-c")
    began = time.monotonic()
    with pytest.raises(jobs.ChildTimedOut) as caught:
        jobs.run_child([sys.executable, "-c", "import time; time.sleep(120)"], timeout_s=1.0)
    assert caught.value.timeout_s == 1.0 and time.monotonic() - began < 60
    assert not [pid for pid, child in jobs._CHILDREN.items() if child.poll() is None and "sleep(120)" in str(child.args)]
    # It shared this process's group: killing it did not kill the group (this test is still running).


def test_a_blocking_child_reports_its_stderr_lines_while_it_runs():
    """`on_phase` hears each phase a child announces (`say_phase`: the memory probe's loading, longest batch,
    step) as it is announced, not when the child ends; other stderr lines are not phases."""
    heard: list[tuple[str, float]] = []
    threads: list[int] = []
    script = ("import sys, time; from pipeline.jobs import say_phase; say_phase('load'); "
              "print('a warning', file=sys.stderr, flush=True); time.sleep(1.5); say_phase('step'); "
              "print('{\"done\": 1}')")
    done = jobs.run_child([sys.executable, "-c", script], timeout_s=60, env=jobs.job_env(),
                          on_phase=lambda name: (heard.append((name, time.monotonic())), threads.append(threading.get_ident())))
    ended = time.monotonic()
    assert [name for name, _ in heard] == ["load", "step"]
    assert ended - heard[0][1] > 1.0, "the first phase was heard only when the child ended"
    assert {thread for thread in threads} == {threading.get_ident()}, "heard in the calling thread (gr.Progress lives there)"
    assert done.stdout == '{"done": 1}\n' and "a warning" in done.stderr and done.returncode == 0
