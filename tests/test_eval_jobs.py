"""Evaluations as background jobs (issue 20 #2): each in its own process, surviving an app restart (a new
app re-attaches to it), keeping the answers given so far when cancelled or killed, one at a time per
workspace, and evaluations of other dataset builds still listed. Real clips, the tiny random Gemma 3n."""

from __future__ import annotations

import json
import os
import shutil
import signal
from pathlib import Path

import pytest

from pipeline import jobs as runner
from pipeline.errors import EvaluationError
from pipeline.tutor import eval_jobs as jobs
from pipeline.tutor.cli import eval_job_main
from pipeline.tutor import evaluate as ev
from pipeline.workspace import Workspace
from tests.processes import stop_workspace_eval_jobs, wait_until


@pytest.fixture(scope="module")
def built_once(tmp_path_factory, tiny_model_dir, speechocean_dir) -> Path:
    """One speaker's 20 real clips built with the tiny model (4 eval clips, sample-level split)."""
    from pipeline.data.dataset import build_dataset
    from pipeline.data.importers import import_folder

    ws = Workspace(tmp_path_factory.mktemp("jobs") / "ws")
    import_folder(ws, speechocean_dir / "test", format="kaldi")
    build_dataset(ws, str(tiny_model_dir), eval_fraction=0.2, seed=0, max_length=2048)
    return ws.root


@pytest.fixture()
def ws(built_once, tmp_path) -> Workspace:
    """A fresh copy of the built workspace (same dataset build, no evaluations), its job processes stopped
    at teardown whatever the outcome."""
    root = tmp_path / "ws"
    shutil.copytree(built_once, root)
    yield Workspace(root)
    stop_workspace_eval_jobs(root)


@pytest.mark.slow
def test_a_cancelled_evaluation_can_keep_what_was_answered(ws, tiny_model_dir):
    """`evaluate_tutor(partial=...)`: the result so far after each clip, and on cancel the answered clips
    (marked partial, cancelled) instead of an error; without `partial` a cancel still saves nothing."""
    seen, kept = [], []
    result = ev.evaluate_tutor(ws, str(tiny_model_dir), device="cpu", quantization="none", max_new_tokens=4,
                               progress=lambda done, total, message: seen.append(done),
                               should_stop=lambda: len(seen) >= 3, partial=kept.append)
    assert seen == [0, 1, 2]  # each answer kept before it is reported
    assert [k["partial"] for k in kept] == [{"answered": 1, "of": 4}, {"answered": 2, "of": 4}]
    assert result["partial"] == {"answered": 2, "of": 4, "reason": "cancelled"}
    assert result["clips"] == 2 and len(result["per_clip"]) == 2 and result["dataset_key"] == ev.split_key(ws)
    assert ev.saved_evaluations(ws) == []  # saving is the caller's choice


def test_a_partial_evaluation_never_replaces_more(tmp_path):
    """`keep_partial` writes where the Judge tab reads unless a complete evaluation, or a partial one with
    more answers, is there already."""
    ws = Workspace(tmp_path / "ws")

    def evaluation(answered: int | None) -> dict:
        out = {"model": "google/gemma-3n-E2B-it", "run": None, "dataset_key": "eval-aaaaaaaaaaaa", "clips": 4}
        return out if answered is None else {**out, "partial": {"answered": answered, "of": 4}}

    path = ev.evaluation_path(ws, "eval-aaaaaaaaaaaa", model="google/gemma-3n-E2B-it")
    assert jobs.keep_partial(ws, evaluation(2)) == path
    assert jobs.keep_partial(ws, evaluation(1)) is None  # 2 answers kept, not 1
    assert json.loads(path.read_text())["partial"]["answered"] == 2
    assert jobs.keep_partial(ws, evaluation(3)) == path
    ev.save_evaluation(ws, evaluation(None))  # a complete one
    assert jobs.keep_partial(ws, evaluation(3)) is None and "partial" not in json.loads(path.read_text())


@pytest.mark.slow
def test_a_job_runs_in_its_own_process_and_saves_each_model(ws, tiny_model_dir, capsys):
    code = eval_job_main(["start", "--workspace", str(ws.root), "--model", str(tiny_model_dir), "--limit", "2",
                      "--max-new-tokens", "4", "--json"])
    started = json.loads(capsys.readouterr().out)
    assert code == 0 and started["pid"] != os.getpid()
    status = jobs.wait_for_job(ws, started["job"], timeout_s=600)
    assert status["state"] == "completed" and status["reason"] is None, status
    assert (status["done"], status["total"]) == (2, 2)
    key = ev.split_key(ws, "eval", 2)
    (saved,) = ev.saved_evaluations(ws, key)
    assert saved["clips"] == 2 and "partial" not in saved and saved["job"] == started["job"]
    assert status["saved"] == [saved["path"]]
    assert not list(Path(status["job_dir"]).glob("partial-*.json"))  # superseded by the complete evaluation
    assert eval_job_main(["status", "--workspace", str(ws.root), "--json"]) == 0  # the newest job by default
    assert json.loads(capsys.readouterr().out)["state"] == "completed"


@pytest.mark.slow
def test_a_job_survives_an_app_restart_and_a_killed_one_keeps_its_answers(ws, tiny_model_dir):
    from ui.tutor_app import TutorApp

    started = jobs.start_job(ws, [{"model": str(tiny_model_dir)}], max_new_tokens=512)
    with pytest.raises(EvaluationError, match=f"`{started['job']}` is still running"):
        jobs.start_job(ws, [{"model": str(tiny_model_dir)}])  # one at a time
    wait_until(lambda: jobs.job_status(ws, started["job"])["done"] >= 1)  # reported once kept
    # The app that started it goes away: a new app knows nothing of the process but its files.
    child = runner._CHILDREN.pop(started["pid"])
    assert jobs.active_job(ws) == started["job"]
    job_id, progress, timer = TutorApp(ws.root).judge.on_load()
    assert job_id == started["job"] and timer.active and "of 4 answered" in progress
    os.killpg(started["pid"], signal.SIGKILL)  # killed (out of memory, a reboot): no result written
    child.wait(timeout=30)
    status = jobs.job_status(ws, started["job"])
    assert status["state"] == "failed" and "ended without writing its result" in status["reason"]
    (kept,) = ev.saved_evaluations(ws, ev.split_key(ws))  # the answers it had given, marked partial
    assert kept["partial"]["answered"] >= 1 and kept["partial"]["of"] == 4 and "reason" not in kept["partial"]
    assert kept["clips"] == kept["partial"]["answered"]


def test_a_page_reopened_during_the_first_evaluation_does_not_say_press_evaluate(ws, monkeypatch):
    """Reloading the page while the first evaluation loaded its model showed the progress bar running and,
    under it, "No evaluation ... yet: tick models and press Evaluate"."""
    from ui.tutor_app import TutorApp

    monkeypatch.setattr(jobs, "active_job", lambda workspace: "judge-running")
    status, *_ = TutorApp(ws.root).judge.show_saved()
    assert "one is running" in status and "press Evaluate" not in status
    monkeypatch.setattr(jobs, "active_job", lambda workspace: None)
    status, *_ = TutorApp(ws.root).judge.show_saved()
    assert "tick models and press Evaluate" in status


def test_evaluations_of_an_earlier_build_stay_listed_marked(ws):
    """After a rebuild the Judge tab said "No evaluation of this dataset's eval split yet" and nothing of
    the evaluations that exist: they are listed, marked as made on another build."""
    from pipeline.tutor.metrics import evaluate_answers
    from ui.tutor_app import TutorApp

    reference = "Scores (0-10): accuracy 6, fluency 7, prosody 7, total 5\nWords to practise: none\nAdvice: ok."
    metrics = evaluate_answers([(reference, reference)] * 3, resamples=20)
    ev.save_evaluation(ws, dict(metrics, model="google/gemma-3n-E2B-it", run=None, dataset_key="eval-0123456789ab",
                                finished_at=1_790_000_000))
    ev.save_evaluation(ws, dict(metrics, model="google/gemma-3n-E2B-it", run=None,
                                dataset_key=ev.split_key(ws) + "-first3", finished_at=1_790_000_100))
    status, verdict, headline, *_ = TutorApp(ws.root).judge.show_saved()
    assert status.startswith("No evaluation on this dataset's test recordings")
    assert "2 evaluations made on other data" in status
    assert "on an earlier build of the dataset" in status and "3 test recordings answered" in status
    assert "eval-0123456789ab" not in status and ev.split_key(ws) not in status  # no build id on screen
    assert "on the first 3 clips of this build" in status
    assert headline.value["headers"] == ["figure", "what it means"] and verdict == ""  # not compared with this build


@pytest.mark.slow
def test_two_jobs_started_at_once_from_two_processes_give_one(ws, tiny_model_dir):
    """Issue 31 #5: one from the command line and one from the app could both start (the check was a lock
    of one process). Two `eval-job start` commands released together: one job runs, the other is refused."""
    import subprocess
    import sys
    import time

    start_at = time.time() + 6.0
    code = ("import os, sys, time; from pipeline.__main__ import main; "
            f"time.sleep(max(0.0, {start_at!r} - time.time())); "
            f"sys.exit(main(['eval-job', 'start', '--workspace', {str(ws.root)!r}, '--model', {str(tiny_model_dir)!r}, "
            "'--max-new-tokens', '512']))")
    processes = [subprocess.Popen([sys.executable, "-c", code], cwd=Path(__file__).resolve().parents[1],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outputs = [process.communicate(timeout=300) for process in processes]
    codes = sorted(process.returncode for process in processes)
    assert codes == [0, 1], outputs
    assert any("is still running in this workspace; one at a time" in err for _out, err in outputs), outputs
    assert len(list(jobs.jobs_dir(ws).glob("*/pid.json"))) == 1
