"""Every shared file of a workspace holds when many processes change it at once (issue 31 #1).

The audit's repro: 20 `python -m pipeline inbox --accept` processes started together, one per attempt,
left 1 sample in the library while all 20 attempts read "accepted". Here the same commands (and the
other read-change-write paths: adding samples, the practice settings, the recording session, the auth
file, the calibration file, deleting runs; one evaluation job at a time is in tests/test_eval_jobs.py) run
in real processes released at the same moment, and the test counts: nothing lost, nothing doubled.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pipeline.data.samples import SampleLibrary
from pipeline.inbox.store import Inbox

REPO_ROOT = Path(__file__).resolve().parents[1]
PROCESSES = 20


def _clips(speechocean_dir: Path, count: int) -> list[Path]:
    """`count` different real clips (distinct audio: the library refuses a duplicate)."""
    clips = sorted((speechocean_dir / "WAVE").rglob("*.WAV"))
    assert len(clips) >= count
    return clips[:count]


def _together(commands: list[list[str]], *, stdin: list[str] | None = None, timeout_s: float = 240) -> list[subprocess.CompletedProcess]:
    """Run every command in its own process, all released at one moment (each sleeps until a start time
    written into its environment, after its imports), and wait for all; returns their results."""
    start_at = time.time() + 4.0 + 0.15 * len(commands)  # the imports of every process are done by then
    env = {**os.environ, "TUTOR_TEST_START_AT": repr(start_at), "PYTHONPATH": str(REPO_ROOT)}
    processes = [subprocess.Popen(command, cwd=REPO_ROOT, env=env, stdin=subprocess.PIPE if stdin else None,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for command in commands]
    results = []
    try:
        for index, process in enumerate(processes):
            out, err = process.communicate(input=stdin[index] if stdin else None, timeout=timeout_s)
            results.append(subprocess.CompletedProcess(process.args, process.returncode, out, err))
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait()
    return results


WAIT_THEN = ("import os, sys, time; import {module}; "
             "time.sleep(max(0.0, float(os.environ['TUTOR_TEST_START_AT']) - time.time())); ")
"""Python code that imports `module` first, then waits for the common start time (so all begin together)."""


def _main(module: str, function: str, argv: list[str]) -> list[str]:
    """`python -c` running `module.function(argv)` at the common start time."""
    code = WAIT_THEN.format(module=module) + f"sys.exit({module}.{function}({argv!r}))"
    return [sys.executable, "-c", code]


def _ok(results: list[subprocess.CompletedProcess]) -> None:
    failed = [r.stderr[-1500:] for r in results if r.returncode != 0]
    assert not failed, failed[0]


@pytest.mark.slow
def test_20_attempts_accepted_from_20_processes_give_20_samples(tmp_path, speechocean_dir):
    """The audit's repro, as the README's command: `inbox --accept ID`, one process per attempt, all at once."""
    ws = tmp_path / "ws"
    inbox = Inbox(ws)
    attempts = [inbox.add(clip, student=f"student-{n}", kind="read_aloud", exercise=f"Sentence {n}.", answer=f"Draft {n}")
                for n, clip in enumerate(_clips(speechocean_dir, PROCESSES))]
    results = _together([_main("pipeline.inbox.cli", "inbox_main", ["--workspace", str(ws), "--accept", a.id,
                                                                   "--feedback", f"Kept {n}"])
                         for n, a in enumerate(attempts)])
    _ok(results)
    samples = SampleLibrary(ws).list()
    assert len(samples) == PROCESSES  # nothing lost
    assert sorted(s.source for s in samples) == sorted(f"inbox/{a.id}" for a in attempts)  # nothing doubled
    decided = {a.id: a for a in Inbox(ws).list()}
    assert all(decided[a.id].status == "accepted" for a in attempts)
    assert {decided[a.id].sample_id for a in attempts} == {s.id for s in samples}
    assert {s.feedback for s in samples} == {f"Kept {n}" for n in range(PROCESSES)}
    stored = sorted(p.name for p in (ws / "samples" / "audio").iterdir())
    assert stored == sorted(f"{s.id}.wav" for s in samples)  # no orphaned clip


@pytest.mark.slow
def test_samples_added_from_many_processes_are_all_kept_once(tmp_path, speechocean_dir):
    """The app, an import and a second app adding to one library at the same moment; each also adds one clip
    that all of them add (a duplicate), which must be kept once and refused in all the others."""
    ws = tmp_path / "ws"
    clips = _clips(speechocean_dir, 10)
    code = ("from pipeline.data.samples import SampleLibrary; from pipeline.errors import SampleError\n"
            "lib = SampleLibrary(sys.argv[1])\n"
            "lib.add(sys.argv[2], target_text='A sentence.', feedback='Fine.')\n"
            "try:\n    lib.add(sys.argv[3], target_text='A sentence.', feedback='Again.')\n"
            "except SampleError:\n    pass\n")
    results = _together([[sys.executable, "-c", WAIT_THEN.format(module="pipeline.data.samples") + "\n" + code,
                          str(ws), str(clip), str(clips[0])] for clip in clips[1:]])
    _ok(results)
    samples = SampleLibrary(ws).list()
    assert len(samples) == len(clips) and len({s.audio_sha256 for s in samples}) == len(clips)
    assert len(list((ws / "samples" / "audio").iterdir())) == len(clips)


@pytest.mark.slow
def test_the_auth_file_keeps_every_account_added_at_once(tmp_path):
    """`users add` from many processes (a teacher's script adding a class): every account is saved."""
    path = tmp_path / "users.json"
    names = [f"student-{n}" for n in range(8)]
    results = _together([_main("pipeline.access.cli", "users_main",
                               ["--file", str(path), "add", name, "--password-stdin"]) for name in names],
                        stdin=[f"password-{name}\n" for name in names])
    _ok(results)
    from pipeline.access.accounts import Accounts

    accounts = Accounts.load(path)
    assert sorted(accounts.users) == sorted(names)
    assert accounts.can_open("practice", "student-3", "password-student-3")


@pytest.mark.slow
def test_the_recording_session_and_the_practice_settings_lose_no_change(tmp_path):
    """Skip from many processes: every step counts. The practice settings written from many processes at once:
    one complete setup wins (never a mix). The calibration file (shared by every workspace) keeps every
    measurement added at once."""
    from pipeline.data.session import SessionStore
    from pipeline.inbox.practice import load_setup

    ws = tmp_path / "ws"
    SessionStore(ws).start([f"Sentence {n}." for n in range(30)])
    (ws / "runs" / "r1" / "adapter").mkdir(parents=True)
    (ws / "runs" / "r1" / "adapter" / "adapter_config.json").write_text("{}")
    skip = ("from pipeline.data.session import SessionStore; SessionStore(sys.argv[1]).skip()")
    setup = ("from pipeline.inbox.practice import save_setup; "
             "save_setup(sys.argv[1], 'r1', [f'Item {sys.argv[2]}.{k}' for k in range(50)])")
    calibrate = ("from pipeline.calibration.store import update_entry; "
                 "from pipeline.calibration.store import device_key; "
                 "update_entry(device_key('cpu', 'test', 1), lambda e: e['measurements'].append({'n': int(sys.argv[2])}))")
    commands = []
    for n in range(8):
        for body, module in ((skip, "pipeline.data.session"), (setup, "pipeline.inbox.practice"),
                             (calibrate, "pipeline.calibration.store")):
            commands.append([sys.executable, "-c", WAIT_THEN.format(module=module) + body, str(ws), str(n)])
    _ok(_together(commands))
    session = SessionStore(ws).load()
    assert session.position == 8 and sorted(session.skipped) == list(range(8))
    saved = load_setup(ws)
    assert saved is not None and len({item.split(".")[0] for item in saved.items}) == 1  # one writer's, whole
    from pipeline.calibration.store import calibration_path

    store = json.loads(calibration_path().read_text())
    (entry,) = store["devices"].values()
    assert sorted(m["n"] for m in entry["measurements"]) == list(range(8))
    leftovers = [p.name for p in (ws / "inbox").iterdir() if p.name.endswith(".tmp")]
    assert not leftovers


@pytest.mark.slow
def test_the_run_list_deletes_each_run_once_when_many_processes_delete_at_once(tmp_path):
    """The app's Delete and `delete-run` pressed together for the same runs: each run is deleted once, every
    other process is told it was deleted (a clear error, no traceback), and nothing is left half-deleted."""
    from pipeline.fileio import atomic_write_json

    ws = tmp_path / "ws"
    names = [f"run-{n}" for n in range(4)]
    for name in names:
        (ws / "runs" / name / "adapter").mkdir(parents=True)
        (ws / "runs" / name / "adapter" / "adapter_model.safetensors").write_bytes(b"x" * 1000)
        atomic_write_json(ws / "runs" / name / "result.json", {"run": name, "status": "completed"})
    delete = ("from pipeline.errors import TrainingError\n"
              "try:\n    pipeline.training.runs.delete_run(sys.argv[1], sys.argv[2]); print('deleted')\n"
              "except TrainingError as error:\n    print('refused:', error)\n")
    results = _together([[sys.executable, "-c", WAIT_THEN.format(module="pipeline.training.runs") + "\n" + delete,
                          str(ws), name] for name in names for _ in range(3)])
    _ok(results)
    outcomes: dict[str, list[str]] = {}
    for result in results:
        outcomes.setdefault(result.args[-1], []).append(result.stdout.strip())
    for name in names:
        assert sorted(o.split(":")[0] for o in outcomes[name]) == ["deleted", "refused", "refused"], outcomes[name]
        assert all(f"`{name}`" in o for o in outcomes[name] if o.startswith("refused"))
    assert list((ws / "runs").iterdir()) == []  # no run left, no half-deleted `.deleting-*` folder
