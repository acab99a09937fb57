"""Issue 11 #9: the trainer and the app's inference never ask for more threads than there are cores
together (the rule of `pipeline.host.cpu_threads`; `benchmarks/cpu_threads.py` measures the effect)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from pipeline.host.cpu_threads import available_cores, inference_threads, thread_env, trainer_threads
from pipeline.errors import ConfigError


@pytest.mark.parametrize("cores", [1, 2, 4, 16])
def test_trainer_and_inference_fit_the_cores_together(cores, monkeypatch):
    monkeypatch.delenv("TUTOR_TRAIN_THREADS", raising=False)
    monkeypatch.delenv("TUTOR_INFER_THREADS", raising=False)
    assert trainer_threads(cores) == max(1, cores - 1)
    assert trainer_threads(cores) + inference_threads(True, cores) <= max(cores, 2)
    assert inference_threads(False, cores) == max(1, cores - 1)


def test_overrides_are_checked(monkeypatch):
    monkeypatch.setenv("TUTOR_TRAIN_THREADS", "3")
    monkeypatch.setenv("TUTOR_INFER_THREADS", "2")
    assert trainer_threads(16) == 3 and inference_threads(True, 16) == 2
    monkeypatch.setenv("TUTOR_TRAIN_THREADS", "many")
    with pytest.raises(ConfigError, match="TUTOR_TRAIN_THREADS.*whole number"):
        trainer_threads(16)
    assert thread_env(3)["OMP_NUM_THREADS"] == "3"


def test_an_answer_uses_one_thread_while_a_run_trains(tmp_path, tiny_model_dir, monkeypatch):
    from pipeline.host.workspace_lock import WorkspaceLock
    from pipeline.tutor.infer import load_tutor

    monkeypatch.delenv("TUTOR_TRAIN_THREADS", raising=False)
    monkeypatch.delenv("TUTOR_INFER_THREADS", raising=False)
    before = torch.get_num_threads()
    ws = tmp_path / "ws"
    tutor = load_tutor(str(tiny_model_dir), workspace=ws, device="cpu", quantization="none", use_cache=False)
    t = np.arange(16000) / 16000
    clip = (16000, (0.3 * np.sin(2 * np.pi * 220 * t) * 32767).astype(np.int16))
    # The answer is generated in the tutor's batch engine's thread: the thread count its forwards run with.
    engine, used = tutor.engine, []
    rule = engine.before_step
    engine.before_step = lambda: (rule(), used.append(torch.get_num_threads()))
    try:
        with WorkspaceLock(ws, "training-now"):
            tutor.feedback(clip, "Read this.", max_new_tokens=2)
            assert used[-1] == inference_threads(True, available_cores()) == max(1, available_cores() - trainer_threads())
        tutor.feedback(clip, "Read this.", max_new_tokens=2)
        assert used[-1] == max(1, available_cores() - 1)
    finally:
        torch.set_num_threads(before)
