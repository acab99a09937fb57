"""`pipeline.host.process_check`: whether a recorded pid is still the process that recorded it, and the
detached process group a run or an evaluation job gets (started, then stopped as a group)."""

from __future__ import annotations

import subprocess
import sys

from pipeline.host.process_check import command_alive, detached_popen_kwargs, kill_process
from tests.processes import wait_until


def test_a_live_process_counts_only_with_every_word_of_its_command_line_and_not_once_stopped():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", "pipeline", "train", "r1"],
                             **detached_popen_kwargs())
    try:
        # until the child has exec'd, its command line is still this process's
        wait_until(lambda: command_alive(child.pid, "pipeline", "train", "r1"), timeout_s=60, poll_s=0.05)
        assert not command_alive(child.pid, "pipeline", "train", "another-run")  # a reused pid is not the trainer
    finally:
        kill_process(child.pid, child)
    assert child.poll() is not None, "the group was stopped and the child reaped"
    assert not command_alive(child.pid, "pipeline")
    assert not command_alive(None) and not command_alive(0)
    kill_process(child.pid)  # already gone: never raises
