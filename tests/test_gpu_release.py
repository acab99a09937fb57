"""Issue 21 #10: one GPU shared by the app and the trainer. Before a run or a memory probe uses the
GPU a Try/Judge tutor holds, the app lets go of it and says so; a probe while a run trains is refused.

Run on CPU through the decision (which device the app's tutors hold, what is released): the tutors
below are the app's cache entries labelled with the device they would sit on."""

from __future__ import annotations

import pytest

from pipeline.config import TrainConfig
from pipeline.errors import TrainingError
from pipeline.fileio import atomic_write_json
from pipeline.tutor import infer
from tests.test_workspace_lock import lock_holding_process  # noqa: F401 - the fixture


@pytest.fixture
def app_tutors(monkeypatch):
    """The app process's tutor cache with one tutor per given device; emptied afterwards."""
    monkeypatch.setattr(infer, "_CACHE", {})

    def keep(*devices: str) -> None:
        for number, device in enumerate(devices):
            infer._CACHE[(f"model-{number}", None, device, "4bit")] = infer.Tutor(
                None, None, model_id=f"model-{number}", run=f"r{number}", adapter_dir=None, device=device, quantization="4bit")

    return keep


@pytest.mark.parametrize("work, held, released", [
    ("cuda", "cuda", True), ("auto", "cuda", True), ("mps", "mps", True), ("auto", "mps", True),
    ("cpu", "cuda", False), ("cuda", "cpu", False), ("auto", "cpu", False), ("cuda", "mps", False), (None, "cuda", True),
])
def test_which_work_needs_the_gpu_a_tutor_holds(work, held, released):
    assert infer.holds_device_for(work, held) is released


def test_only_tutors_on_the_gpu_the_work_uses_are_released_and_it_is_said(app_tutors):
    app_tutors("cuda", "cpu")
    assert infer.release_for("cpu") is None and len(infer._CACHE) == 2  # CPU work takes no GPU memory
    message = infer.release_for("auto", what="run `r9`")
    assert "`model-0` with run `r0` on cuda" in message and "run `r9`" in message and "loads again" in message
    assert [key[2] for key in infer._CACHE] == ["cpu"]  # the CPU tutor holds no GPU memory: kept
    assert infer.release_for("cuda") is None  # nothing left on the GPU


@pytest.mark.slow
def test_starting_a_run_releases_the_gpu_tutor(app_tutors, tmp_path):
    from pipeline.training import runs

    app_tutors("cuda")
    ws = tmp_path / "ws"
    atomic_write_json(ws / "dataset" / "build_report.json", {"splits": {"train": 3, "eval": 0}})
    unloadable = tmp_path / "unloadable-model"  # here (it passes the start's check), but no model loads from it
    atomic_write_json(unloadable / "config.json", {})
    atomic_write_json(unloadable / "tokenizer_config.json", {})
    config = TrainConfig(model=str(unloadable), device="cuda", quantization="none", max_steps=1, save_steps=0, eval_steps=0)
    started = runs.start_run(ws, "r1", config)  # the process fails at once (no model loads): only the release matters
    runs.wait_for_run(ws, "r1", timeout_s=300)
    assert started["released"] and "run `r1`" in started["released"] and not infer._CACHE


def test_a_memory_probe_is_refused_while_a_run_trains(app_tutors, tmp_path, lock_holding_process):  # noqa: F811
    from pipeline.memory.inputs import LengthStats
    from pipeline.memory.measure import measure_peak

    app_tutors("cuda")
    ws = tmp_path / "ws"
    holder = lock_holding_process(ws, "busy-run")
    config = TrainConfig(model="/no/model", device="cuda")
    with pytest.raises(TrainingError, match=rf"Not measured: run `busy-run` \(process {holder.pid}\) is training"):
        measure_peak("/no/model", config, LengthStats(longest_tokens=256, longest_clip_s=1.0), "cuda", workspace=ws)
    assert infer._CACHE, "a refused probe unloads nothing"
