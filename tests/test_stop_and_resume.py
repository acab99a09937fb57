"""Issue 11 #10 and #5: STOP within one micro-batch with results identical to an uninterrupted run,
and no silent resume on a changed dataset."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file
from transformers import TrainerCallback

from pipeline.config import TrainConfig
from pipeline.errors import TrainingError
from pipeline.training.run_folder import read_progress
from pipeline.training.cli import train_main
from pipeline.training.train import train
from tests.training_data import copy_workspace, real_workspace


class StopDuringStep(TrainerCallback):
    """Writes the run's STOP file after micro-batch `micro` of optimizer step `step` (both 1-based),
    as `pipeline.training.runs.request_stop` does, and counts the micro-batches trained after it."""

    def __init__(self, stop_file, step, micro):
        self.stop_file, self.step, self.micro = stop_file, step, micro
        self.in_step = 0
        self.after_stop = None

    def on_step_begin(self, args, state, control, **kwargs):
        self.in_step = 0

    def _micro_batch_done(self, step):
        self.in_step += 1
        if self.after_stop is not None:
            self.after_stop += 1
        elif step == self.step and self.in_step == self.micro:
            self.stop_file.write_text("stop")
            self.after_stop = 0

    def on_substep_end(self, args, state, control, **kwargs):
        self._micro_batch_done(state.global_step + 1)

    def on_step_end(self, args, state, control, **kwargs):  # after the step's last micro-batch
        self._micro_batch_done(state.global_step)


def _config(tiny_model_dir, **changes) -> TrainConfig:
    base = dict(model=str(tiny_model_dir), device="cpu", quantization="none", lora_rank=4, lora_alpha=8,
                lora_dropout=0.2, batch_size=1, grad_accum=3, max_steps=3, eval_steps=0, save_steps=100,
                learning_rate=2e-3, warmup_ratio=0.0, seed=11)
    base.update(changes)
    return TrainConfig(**base)


@pytest.mark.slow
def test_stop_mid_accumulation_then_resume_equals_the_uninterrupted_run(tmp_path_factory, speechocean_dir, tiny_model_dir):
    """Issue 11 #10: STOP waited for the whole optimizer step (65 s with 4 micro-batches on the tiny model)."""
    shared = real_workspace(tmp_path_factory, speechocean_dir, tiny_model_dir, keep=9, eval_fraction=0.34)
    ws = copy_workspace(shared, tmp_path_factory.mktemp("midstep") / "ws")
    config = _config(tiny_model_dir)
    from pipeline.data.dataset import load_build_report

    assert load_build_report(ws)["splits"]["train"] >= 2 * config.grad_accum, "two steps per epoch: stop mid-epoch"
    whole = train(config, ws, "whole")
    assert whole["status"] == "completed" and whole["steps"] == 3

    # STOP after the first micro-batch of step 2: noticed after the second; the third is never trained.
    probe = StopDuringStep(ws / "runs" / "split" / "STOP", step=2, micro=1)
    stopped = train(config, ws, "split", callbacks=[probe])
    assert stopped["status"] == "stopped" and stopped["steps"] == 1, stopped
    assert probe.after_stop == 1, f"{probe.after_stop} micro-batches trained after STOP (at most one)"
    assert stopped["checkpoint"].endswith("checkpoint-1")
    assert [p["step"] for p in read_progress(ws, "split") if p["kind"] == "train"] == [1]

    resumed = train(None, ws, "split", resume=True)
    assert resumed["status"] == "completed" and resumed["steps"] == 3
    losses = lambda run: [(p["step"], p["loss"]) for p in read_progress(ws, run) if p["kind"] == "train"]  # noqa: E731
    assert [s for s, _ in losses("split")] == [1, 2, 3]
    assert [x for _, x in losses("split")] == pytest.approx([x for _, x in losses("whole")], rel=1e-6)
    assert resumed["final_loss"] == pytest.approx(whole["final_loss"], rel=1e-6)
    a = load_file(str(ws / "runs" / "whole" / "adapter" / "adapter_model.safetensors"))
    b = load_file(str(ws / "runs" / "split" / "adapter" / "adapter_model.safetensors"))
    assert a.keys() == b.keys() and all(torch.allclose(a[k], b[k], rtol=1e-5, atol=1e-7) for k in a)


@pytest.mark.slow
def test_resume_after_the_dataset_changed_is_refused_or_recorded(tmp_path_factory, speechocean_dir, tiny_model_dir, capsys):
    """Issue 11 #5: stop a run, delete samples and rebuild, then resume: it went on silently on other data."""
    from pipeline.data.dataset import build_dataset, build_identity
    from pipeline import jobs
    from pipeline.data.samples import SampleLibrary
    from pipeline.training import runs
    from tests.test_train import StopAtStep

    shared = real_workspace(tmp_path_factory, speechocean_dir, tiny_model_dir, keep=6, eval_fraction=0.34)
    ws = copy_workspace(shared, tmp_path_factory.mktemp("changed") / "ws")
    config = _config(tiny_model_dir, grad_accum=1, max_steps=3)
    stopped = train(config, ws, "r", callbacks=[StopAtStep(ws / "runs" / "r" / "STOP", 1)])
    assert stopped["status"] == "stopped"
    recorded = json.loads((ws / "runs" / "r" / "dataset.json").read_text())
    assert recorded["fingerprint"] == build_identity(ws)["fingerprint"]

    # Rebuilding from the same samples is the same build: the resume is not refused for that.
    build_dataset(ws, str(tiny_model_dir), eval_fraction=0.34, seed=0, max_length=512)
    assert build_identity(ws)["fingerprint"] == recorded["fingerprint"]

    library = SampleLibrary(ws)
    gone = sorted(recorded["row_ids"]["train"])[:2]
    for sample_id in gone:
        library.delete(sample_id)
    build_dataset(ws, str(tiny_model_dir), eval_fraction=0.34, seed=0, max_length=512)
    result_before = (ws / "runs" / "r" / "result.json").read_text()
    with pytest.raises(TrainingError, match=rf"(?s)another build of the dataset.*2 removed: {gone[0]}, {gone[1]}.*--allow-dataset-change"):
        train(None, ws, "r", resume=True)
    assert (ws / "runs" / "r" / "result.json").read_text() == result_before, "a refused resume changes nothing"
    children_before = set(jobs._CHILDREN)  # other tests' finished runs may still be listed here
    with pytest.raises(TrainingError, match="another build of the dataset"):
        runs.start_run(ws, "r", resume=True)  # the app refuses before starting a process
    assert set(jobs._CHILDREN) == children_before, "a refused resume starts no training process"

    code = train_main(["--workspace", str(ws), "--run", "r", "--resume", "--allow-dataset-change", "--json"])
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert code == 0 and result["status"] == "completed"
    assert result["dataset_change"]["checkpoint"] == stopped["checkpoint"].rsplit("/", 1)[-1]
    assert gone[0] in result["dataset_change"]["summary"]
    record = json.loads((ws / "runs" / "r" / "dataset.json").read_text())
    assert record["fingerprint"] == build_identity(ws)["fingerprint"] and len(record["changes"]) == 1


@pytest.mark.slow
def test_the_train_tab_resumes_on_a_changed_dataset_only_with_its_box_ticked(tmp_path_factory, speechocean_dir, tiny_model_dir):
    """The app's refusal named "Start training" as the way to resume anyway, which starts nothing of
    the kind: it names the Resume button with its box, and the box does resume (recording the change)."""
    import time

    from pipeline.data.dataset import build_dataset
    from pipeline.data.samples import SampleLibrary
    from pipeline.training import runs
    from tests.test_train import StopAtStep
    from ui.tutor_app import TutorApp
    from ui.wording import RESUME_ANYWAY_LABEL

    shared = real_workspace(tmp_path_factory, speechocean_dir, tiny_model_dir, keep=6, eval_fraction=0.34)
    ws = copy_workspace(shared, tmp_path_factory.mktemp("tab-resume") / "ws")
    stopped = train(_config(tiny_model_dir, grad_accum=1, max_steps=2), ws, "r",
                    callbacks=[StopAtStep(ws / "runs" / "r" / "STOP", 1)])
    assert stopped["status"] == "stopped"
    recorded = json.loads((ws / "runs" / "r" / "dataset.json").read_text())
    SampleLibrary(ws).delete(sorted(recorded["row_ids"]["train"])[0])
    build_dataset(ws, str(tiny_model_dir), eval_fraction=0.34, seed=0, max_length=512)

    ui = TutorApp(ws)
    refused = ui.resume_training("r")[1]
    assert refused.startswith("**✗") and "another build of the dataset" in refused
    assert f"**Resume** after ticking **{RESUME_ANYWAY_LABEL}**" in refused, refused
    assert "Train tab" not in refused, "the Train tab's own message does not name the Train tab"
    assert "Start training" not in refused and "python -m pipeline" not in refused
    assert RESUME_ANYWAY_LABEL in [getattr(block, "label", None) for block in __import__("app").build_ui(ui).blocks.values()]

    name, status, *_, box = ui.resume_training("r", True)
    assert name == "r" and status.startswith("Resumed"), status
    assert box["value"] is False, "the box applied to this resume only: it is unticked again"
    row = ui.runs_table().set_index("run").loc["r"]
    assert row["state"] == "running" and row["note"] == "", "no 'stopped by request' while the resumed run trains"
    deadline = time.time() + 240
    while runs.run_status(ws, "r")["alive"] and time.time() < deadline:
        time.sleep(1)
    result = json.loads((ws / "runs" / "r" / "result.json").read_text())
    assert result["status"] == "completed" and result["dataset_change"]["summary"]


@pytest.mark.slow
def test_a_stop_written_while_the_run_starts_is_honoured_and_an_old_one_is_not(tmp_path_factory, speechocean_dir,
                                                                              tiny_model_dir):
    """A new user's pass (issue 11): `touch WS/runs/NAME/STOP` while the model loads was deleted by the
    starting trainer, so the run trained on. A STOP older than the process is a leftover and is removed."""
    import os

    shared = real_workspace(tmp_path_factory, speechocean_dir, tiny_model_dir, keep=6, eval_fraction=0.34)
    ws = copy_workspace(shared, tmp_path_factory.mktemp("early-stop") / "ws")
    config = _config(tiny_model_dir, grad_accum=1, max_steps=3)

    stop = ws / "runs" / "early" / "STOP"
    stop.parent.mkdir(parents=True)
    stop.touch()  # written after this process started: the user pressed Stop while the run was starting
    result = train(config, ws, "early")
    assert result["status"] == "stopped" and result["steps"] == 1, result

    stop = ws / "runs" / "late" / "STOP"
    stop.parent.mkdir(parents=True)
    stop.touch()
    os.utime(stop, (0, 0))  # left behind by a process long gone
    result = train(config, ws, "late")
    assert result["status"] == "completed" and result["steps"] == 3, result
