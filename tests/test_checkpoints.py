"""Issue 21 #7: checkpoints checked before a resume, damaged ones set aside for the newest intact one,
save errors and a full disk named (checkpoint, file, free and needed), result.json never hiding the
first error."""

from __future__ import annotations

import errno
import json
import shutil

import pytest

from pipeline import fileio
from pipeline.errors import TrainingError
from pipeline.training import checkpoints
from pipeline.training.checkpoints import checkpoint_problems
from pipeline.training.train import train
from tests.test_stop_and_resume import _config
from tests.test_train import StopAtStep
from tests.training_data import copy_workspace, real_workspace


@pytest.fixture(scope="module")
def stopped_at_two(tmp_path_factory, speechocean_dir, tiny_model_dir):
    """A workspace whose run `r` stopped at step 2 of 3 with checkpoint-1 and checkpoint-2 saved."""
    shared = real_workspace(tmp_path_factory, speechocean_dir, tiny_model_dir, keep=6, eval_fraction=0.34)
    ws = copy_workspace(shared, tmp_path_factory.mktemp("checkpoints") / "ws")
    stopped = train(_config(tiny_model_dir, grad_accum=1, max_steps=3, save_steps=1), ws, "r",
                    callbacks=[StopAtStep(ws / "runs" / "r" / "STOP", 1)])  # noticed during step 2, saved after it
    assert stopped["status"] == "stopped" and stopped["steps"] == 2, stopped
    folder = ws / "runs" / "r" / "checkpoints"
    assert sorted(p.name for p in folder.iterdir()) == ["checkpoint-1", "checkpoint-2"]
    return ws


@pytest.mark.slow
def test_every_file_a_resume_reads_is_checked(stopped_at_two, tmp_path):
    intact = stopped_at_two / "runs" / "r" / "checkpoints" / "checkpoint-1"
    assert checkpoint_problems(intact) == []
    cases = {
        "trainer_state.json": (lambda p: p.write_text(""), "empty file"),
        "adapter_model.safetensors": (lambda p: p.write_bytes(p.read_bytes()[:-100]), "cut short"),
        "optimizer.pt": (lambda p: p.write_bytes(p.read_bytes()[: p.stat().st_size // 2]), "cut short or damaged"),
        "scheduler.pt": (lambda p: p.unlink(), "missing"),
        "rng_state.pth": (lambda p: p.write_bytes(b""), "empty file"),
        "adapter_config.json": (lambda p: p.write_text("{"), "not valid JSON"),
    }
    for name, (damage, cause) in cases.items():
        copy = tmp_path / name / "checkpoint-1"
        shutil.copytree(intact, copy)
        damage(copy / name)
        problems = checkpoint_problems(copy)
        assert len(problems) == 1 and problems[0].startswith(f"`{name}`: {cause}"), (name, problems)


@pytest.mark.slow
def test_a_resume_falls_back_to_the_newest_intact_checkpoint_and_says_so(stopped_at_two, tmp_path):
    ws = copy_workspace(stopped_at_two, tmp_path / "ws")
    folder = ws / "runs" / "r" / "checkpoints"
    (folder / "checkpoint-2" / "trainer_state.json").write_text("")  # what a kill during the save leaves
    resumed = train(None, ws, "r", resume=True)  # was a raw JSONDecodeError, on every retry
    assert resumed["status"] == "completed" and resumed["steps"] == 3, resumed
    assert resumed["resumed_from"].endswith("checkpoint-1")
    assert "checkpoint-2 (`trainer_state.json`: empty file)" in resumed["note"] and "resuming from checkpoint-1" in resumed["note"]
    assert (folder / "damaged-checkpoint-2" / "trainer_state.json").read_text() == ""  # kept, never deleted
    assert "checkpoint-2 (`trainer_state.json`: empty file)" in (ws / "runs" / "r" / "train.log").read_text()

    # nothing intact left: refused with each checkpoint and its cause, not a traceback
    ws2 = copy_workspace(stopped_at_two, tmp_path / "ws2")
    for name in ("checkpoint-1", "checkpoint-2"):
        (ws2 / "runs" / "r" / "checkpoints" / name / "optimizer.pt").write_bytes(b"")
    with pytest.raises(TrainingError, match=r"(?s)checkpoint-2 \(`optimizer.pt`: empty file\).*checkpoint-1 .*no intact checkpoint"):
        train(None, ws2, "r", resume=True)


@pytest.mark.slow
def test_a_full_disk_and_a_failed_save_are_named(stopped_at_two, tmp_path, monkeypatch, tiny_model_dir):
    import torch

    config = _config(tiny_model_dir, grad_accum=1, max_steps=2, save_steps=1)
    # before the run starts: how much is free, how much is needed
    monkeypatch.setattr(fileio, "free_bytes", lambda folder: 2**20)
    with pytest.raises(TrainingError, match=r"Not enough free disk for run `a`.*1\.0 MiB free, about [\d.]+ MiB needed"):
        train(config, copy_workspace(stopped_at_two, tmp_path / "a"), "a")
    # before a save
    calls = []
    monkeypatch.setattr(fileio, "free_bytes", lambda folder: calls.append(folder) or (2**40 if len(calls) == 1 else 2**20))
    ws = copy_workspace(stopped_at_two, tmp_path / "b")
    with pytest.raises(TrainingError, match=r"Not enough free disk for `checkpoint-1`.*MiB free, about"):
        train(config, ws, "b")
    assert json.loads((ws / "runs" / "b" / "result.json").read_text())["status"] == "failed"
    monkeypatch.undo()

    # a save that fails (the disk filled during it), and then result.json cannot be written either:
    # the save's error is the one raised, naming the checkpoint, the file and the cause
    real_save, real_write = torch.save, checkpoints.atomic_write_json

    def full_disk_save(obj, f, *args, **kwargs):
        if str(f).endswith("optimizer.pt"):
            raise OSError(errno.ENOSPC, "No space left on device", str(f))
        return real_save(obj, f, *args, **kwargs)

    def full_disk_result(path, data, *args, **kwargs):
        if str(path).endswith("result.json") and data.get("status") == "failed":
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        return real_write(path, data, *args, **kwargs)

    monkeypatch.setattr(torch, "save", full_disk_save)
    monkeypatch.setattr(checkpoints, "atomic_write_json", full_disk_result)
    with pytest.raises(TrainingError, match=r"Saving checkpoint `checkpoint-1` .* failed writing `optimizer.pt`: .*No space left"):
        train(config, copy_workspace(stopped_at_two, tmp_path / "c"), "c")
