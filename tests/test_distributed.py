"""The standard trainer under torchrun: 2 CPU processes (PyTorch DDP, gloo backend) on the tiny model.

One progress line per step, written by rank 0 only; the first step's loss equals a single process
with the same global batch; STOP ends both processes at the same step as `stopped`; `--resume`
finishes the run. 4-bit NF4 (bitsandbytes' CPU path) works under DDP here: only the fp32 LoRA
weights take part in the gradient all-reduce.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pipeline.config import TrainConfig
from pipeline.training.run_folder import read_progress
from pipeline.training.train import train
from tests.training_data import copy_workspace, real_workspace

REPO_ROOT = Path(__file__).resolve().parents[1]
TIMEOUT_S = 1200


def torchrun(launched, log_path: Path, args: list[str]) -> subprocess.Popen:
    env = dict(os.environ, OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false",
               PYTHONPATH=str(REPO_ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
               "-m", "pipeline", "train", *args]
    with open(log_path, "ab") as log:
        process = subprocess.Popen(command, cwd=REPO_ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
                                   start_new_session=True)
    launched.append(process)
    return process


def finish(process: subprocess.Popen, log_path: Path) -> None:
    try:
        code = process.wait(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        pytest.fail(f"torchrun did not finish in {TIMEOUT_S} s; its output:\n{log_path.read_text()[-4000:]}")
    assert code == 0, log_path.read_text()[-4000:]


@pytest.mark.slow
def test_two_processes_match_one_stop_together_and_resume(tmp_path, tmp_path_factory, speechocean_dir, tiny_model_dir,
                                                          launched):
    shared = real_workspace(tmp_path_factory, speechocean_dir, tiny_model_dir, keep=6, eval_fraction=0.34)
    ws = copy_workspace(shared, tmp_path / "ws")
    shutil.rmtree(ws / "runs", ignore_errors=True)
    settings = dict(model=str(tiny_model_dir), device="cpu", quantization="4bit", lora_rank=8, lora_alpha=16,
                    lora_dropout=0.0, batch_size=1, eval_steps=0, save_steps=100, learning_rate=1e-3, seed=3)

    # One process with global batch 4 (grad accum 4): the reference first step.
    single = train(TrainConfig(**settings, grad_accum=4, max_steps=1), ws, "single")
    assert single["status"] == "completed" and single["processes"] == 1
    reference_loss = read_progress(ws, "single")[0]["loss"]

    # Two processes, grad accum 2 each: the same global batch of 4 rows per optimizer step. With two
    # micro-batches per step a STOP can land inside a step (`pipeline.training.stopping`): the
    # processes must agree on that too.
    flags = ["--workspace", str(ws), "--run-name", "ddp", "--json"]
    for name, value in TrainConfig(**settings, grad_accum=2, max_steps=4).to_dict().items():
        flag = "--" + name.replace("_", "-")
        flags += ([flag] if value else ["--no-" + name.replace("_", "-")]) if isinstance(value, bool) else [flag, str(value)]
    log_path = tmp_path / "torchrun.log"
    run_dir = ws / "runs" / "ddp"
    process = torchrun(launched, log_path, flags)
    deadline = time.monotonic() + TIMEOUT_S
    while process.poll() is None and time.monotonic() < deadline:  # STOP as soon as step 1 is logged
        if any(line.get("step", 0) >= 1 for line in read_progress(ws, "ddp")):
            (run_dir / "STOP").write_text("stop")
            break
        time.sleep(0.2)
    finish(process, log_path)

    result = json.loads((run_dir / "result.json").read_text())
    assert result["status"] == "stopped", result
    assert result["processes"] == 2 and result["global_batch_size"] == 4
    stopped_at = result["steps"]
    assert 1 <= stopped_at < 4
    lines = read_progress(ws, "ddp")
    assert [line["step"] for line in lines] == list(range(1, stopped_at + 1))  # one line per step: rank 0 only
    assert lines[0]["loss"] == pytest.approx(reference_loss, abs=1e-4)
    checkpoint = run_dir / "checkpoints" / f"checkpoint-{stopped_at}"
    assert (checkpoint / "adapter_model.safetensors").exists()
    assert (checkpoint / "rng_state_0.pth").exists() and (checkpoint / "rng_state_1.pth").exists()
    assert (run_dir / "adapter" / "adapter_config.json").exists()
    log_text = (run_dir / "train.log").read_text()
    assert log_text.count("Starting run `ddp`") == 1 and log_text.count("STOP file found") == 1

    process = torchrun(launched, log_path, ["--workspace", str(ws), "--run-name", "ddp", "--resume", "--json"])
    finish(process, log_path)
    result = json.loads((run_dir / "result.json").read_text())
    assert result["status"] == "completed" and result["steps"] == 4, result
    assert result["resumed_from"].endswith(f"checkpoint-{stopped_at}")
    assert [line["step"] for line in read_progress(ws, "ddp")] == [1, 2, 3, 4]
    assert (run_dir / "train.log").read_text().count("Resuming run `ddp`") == 1


def test_without_a_launcher_everything_is_one_process(monkeypatch):
    from pipeline.host import distributed

    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    assert distributed.world_size() == 1 and distributed.is_main_process() and not distributed.is_distributed()
    assert distributed.any_process(True) is True and distributed.any_process(False) is False
    assert distributed.gather_ints(7) == [7] and distributed.placement("cuda") == "cuda"
    distributed.barrier()
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert not distributed.is_main_process() and distributed.local_world_size() == 2
    assert distributed.placement("cuda") == "cuda:1" and distributed.placement("cpu") == "cpu"


def test_the_memory_estimate_says_it_is_per_process(tmp_path_factory, speechocean_dir, tiny_model_dir):
    from pipeline.memory.report import estimate_for_workspace, render

    ws = real_workspace(tmp_path_factory, speechocean_dir, tiny_model_dir, keep=6, eval_fraction=0.34)
    result = estimate_for_workspace(ws, TrainConfig(model=str(tiny_model_dir), device="cpu"), memory_gb=16)
    assert result["per_process"] is True
    assert any("per training process" in note and "every GPU" in note for note in result["notes"])
    assert "per training process" in render(result)
