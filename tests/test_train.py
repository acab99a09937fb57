"""LoRA training on the tiny Gemma 3n with 4-bit NF4 on CPU, on a dataset built from real clips."""

from __future__ import annotations

import json
import math
import time

import pytest
import torch
from transformers import TrainerCallback

from pipeline.config import TrainConfig
from pipeline.errors import TrainingError
from pipeline.training.cli import train_main
from pipeline.training.run_folder import logged_elapsed_s, read_progress
from pipeline.training.train import run_probe_step, train
from tests.training_data import real_workspace


@pytest.fixture(scope="module")
def workspace(tmp_path_factory, speechocean_dir, tiny_model_dir):
    # Six real clips (four train, two eval) keep evaluation cheap; every run reads the same dataset.
    return real_workspace(tmp_path_factory, speechocean_dir, tiny_model_dir, keep=6, eval_fraction=0.34)


def _config(tiny_model_dir, **changes) -> TrainConfig:
    base = dict(
        model=str(tiny_model_dir), device="cpu", quantization="4bit", lora_rank=8, lora_alpha=16,
        batch_size=1, grad_accum=2, max_steps=4, eval_steps=0, save_steps=100, learning_rate=1e-3, seed=3,
    )
    base.update(changes)
    return TrainConfig(**base)


class StopAtStep(TrainerCallback):
    """Writes the run's STOP file after optimizer step `step`, as `pipeline.training.runs.request_stop` does."""

    def __init__(self, stop_file, step):
        self.stop_file, self.step = stop_file, step

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == self.step:
            self.stop_file.write_text("stop")


class OutOfMemoryAtStep(TrainerCallback):
    """Raises the error PyTorch raises when an allocation fails, at the start of step `step + 1`."""

    def __init__(self, step):
        self.step = step

    def on_step_begin(self, args, state, control, **kwargs):
        if state.global_step == self.step:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")


@pytest.mark.slow
def test_overfit_a_repeated_small_batch_loss_falls(tmp_path_factory, speechocean_dir, tiny_model_dir):
    ws = real_workspace(tmp_path_factory, speechocean_dir, tiny_model_dir, keep=3, eval_fraction=0.34)
    config = _config(
        tiny_model_dir, batch_size=2, grad_accum=1, max_steps=30, learning_rate=1e-2, lora_rank=16, lora_alpha=32,
        lora_dropout=0.0, warmup_ratio=0.0, lr_schedule="constant", save_steps=0,
    )
    result = train(config, ws, "overfit")
    assert result["status"] == "completed", result
    losses = [p["loss"] for p in read_progress(ws, "overfit") if p["kind"] == "train"]
    assert len(losses) == 30 and all(math.isfinite(x) for x in losses)
    # Memorising two answers: the loss keeps falling (7.6 -> 5.7 measured; the random 4-bit base with
    # Gemma's logit soft-capping limits how low a rank-16 LoRA gets in 30 steps).
    last, early = sum(losses[-5:]) / 5, sum(losses[5:10]) / 5
    assert last < 0.8 * losses[0] and last < early, losses
    adapter = ws / "runs" / "overfit" / "adapter"
    assert (adapter / "adapter_config.json").exists() and (adapter / "adapter_model.safetensors").exists()
    assert result["quantization"]["method"] == "4bit-nf4" and result["quantization"]["quantized_count"] > 0


@pytest.mark.slow
def test_cli_run_then_stop_and_resume_match_the_uninterrupted_run(workspace, tiny_model_dir, capsys):
    flags = [
        "--workspace", str(workspace), "--model", str(tiny_model_dir), "--device", "cpu", "--quantization", "4bit",
        "--lora-rank", "8", "--lora-alpha", "16", "--batch-size", "1", "--grad-accum", "2", "--max-steps", "4",
        "--eval-steps", "2", "--save-steps", "100", "--learning-rate", "1e-3", "--seed", "3", "--json",
    ]
    assert train_main(["--run", "whole", *flags]) == 0
    whole = json.loads(capsys.readouterr().out)
    assert whole["status"] == "completed" and whole["steps"] == 4 and whole["tiny_random_model"] is True
    run_dir = workspace / "runs" / "whole"
    saved = TrainConfig.from_dict(json.loads((run_dir / "config.json").read_text()))
    assert saved.max_steps == 4 and saved.model == str(tiny_model_dir)
    assert whole["preflight"]["peak_memory_bytes"] > 0 and whole["preflight"]["batch_tokens"] > 0
    assert (run_dir / "train.log").read_text().count("step ") >= 4
    progress = read_progress(workspace, "whole")
    train_lines = [p for p in progress if p["kind"] == "train"]
    assert [p["step"] for p in train_lines] == [1, 2, 3, 4]
    assert any(p["kind"] == "eval" and p["eval_loss"] is not None for p in progress)
    for line in train_lines:
        for key in ("epoch", "loss", "learning_rate", "grad_norm", "samples_per_s", "elapsed_s", "eta_s", "peak_memory_bytes"):
            assert line[key] is not None, key

    config = saved
    stopped = train(config, workspace, "split", callbacks=[StopAtStep(workspace / "runs" / "split" / "STOP", 2)])
    assert stopped["status"] == "stopped" and stopped["steps"] in (2, 3)
    assert (workspace / "runs" / "split" / "adapter" / "adapter_config.json").exists()
    assert stopped["checkpoint"] and stopped["checkpoint"].endswith(f"checkpoint-{stopped['steps']}")
    resume_began = time.time()
    resumed = train(None, workspace, "split", resume=True)
    resume_took_s = time.time() - resume_began
    assert resumed["status"] == "completed" and resumed["steps"] == 4
    assert resumed["resumed_from"].endswith(f"checkpoint-{stopped['steps']}")
    whole_losses = [(p["step"], p["loss"]) for p in train_lines]
    split_losses = [(p["step"], p["loss"]) for p in read_progress(workspace, "split") if p["kind"] == "train"]
    assert [s for s, _ in split_losses] == [1, 2, 3, 4][: len(split_losses)]
    assert [s for s, _ in split_losses] == [s for s, _ in whole_losses]
    assert [x for _, x in split_losses] == pytest.approx([x for _, x in whole_losses], rel=1e-5)
    # The clock continues across the resume: elapsed never goes back, the resumed steps add to it.
    split_progress = read_progress(workspace, "split")
    elapsed = [p["elapsed_s"] for p in split_progress]
    assert elapsed == sorted(elapsed), elapsed
    at_checkpoint = logged_elapsed_s(workspace / "runs" / "split" / "progress.jsonl", stopped["steps"])
    after = [p for p in split_progress if p["step"] > stopped["steps"]]
    assert at_checkpoint > 0 and after
    for line in after:  # elapsed = time before the checkpoint + this process's time: its loading and its steps
        steps_s = (line["step"] - stopped["steps"]) * config.effective_batch_size / line["samples_per_s"]
        assert at_checkpoint + 0.99 * steps_s <= line["elapsed_s"] <= at_checkpoint + resume_took_s, (line, at_checkpoint)

    with pytest.raises(TrainingError, match="already exists"):
        train(config, workspace, "whole")
    with pytest.raises(TrainingError, match="already completed"):
        train(None, workspace, "whole", resume=True)


def test_logged_elapsed_is_the_last_line_at_or_before_the_checkpoint_step(tmp_path):
    from pipeline.fileio import append_jsonl

    progress = tmp_path / "progress.jsonl"
    assert logged_elapsed_s(progress, 5) == 0.0  # no file yet
    for step, elapsed in [(1, 10.0), (2, 20.0), (2, 21.0), (3, 30.0), (4, 40.0)]:  # (2, 21.0): the eval line
        append_jsonl(progress, {"kind": "train", "step": step, "elapsed_s": elapsed})
    # Killed after step 4 with the checkpoint at step 2; the resumed process logged step 3 again.
    append_jsonl(progress, {"kind": "train", "step": 3, "elapsed_s": 33.0})
    assert logged_elapsed_s(progress, 2) == 21.0
    assert logged_elapsed_s(progress, 3) == 33.0
    assert logged_elapsed_s(progress, 0) == 0.0


def test_resume_drops_progress_lines_logged_after_the_checkpoint(tmp_path):
    """A process killed after its checkpoint at step 2 had logged steps 3 and 4 (and half a line);
    the resumed run trains them again, so the file keeps only steps <= 2 and shows each step once."""
    from pipeline.fileio import append_jsonl, read_jsonl
    from pipeline.training.run_folder import trim_progress_to_step

    progress = tmp_path / "progress.jsonl"
    assert trim_progress_to_step(progress, 2) == 0  # no file yet
    for step, kind in [(1, "train"), (2, "train"), (2, "eval"), (3, "train"), (4, "train")]:
        append_jsonl(progress, {"kind": kind, "step": step, "elapsed_s": float(step)})
    with open(progress, "a", encoding="utf-8") as handle:
        handle.write('{"kind": "train", "st')  # torn by the kill
    assert trim_progress_to_step(progress, 2) == 3
    assert [(line["step"], line["kind"]) for line in read_jsonl(progress)] == [(1, "train"), (2, "train"), (2, "eval")]
    assert trim_progress_to_step(progress, 2) == 0  # nothing more to drop; file untouched


def test_resume_needs_a_checkpoint_and_rows_must_fit(workspace, tiny_model_dir):
    with pytest.raises(TrainingError, match="nothing to resume"):
        train(None, workspace, "never-started", resume=True)
    with pytest.raises(TrainingError, match="excludes every train row"):
        train(_config(tiny_model_dir, max_length=256), workspace, "too-short")
    result = json.loads((workspace / "runs" / "too-short" / "result.json").read_text())
    assert result["status"] == "failed" and "--max-length" in result["reason"]


@pytest.mark.slow
def test_rows_over_max_length_are_skipped_as_the_estimate_assumes(workspace, tiny_model_dir):
    """The memory search may suggest a lower --max-length "excluding N rows": applied to train as is,
    those rows are skipped (never truncated) and the rest trains."""
    from pipeline.data.dataset import load_built_dataset
    from pipeline.memory import length_stats_from_workspace

    train_lengths = sorted(int(n) for n in load_built_dataset(workspace)["train"]["num_tokens"])
    cut = train_lengths[-1] - 1  # drops the longest train row(s) only
    assert len(train_lengths) >= 2 and train_lengths[0] <= cut
    dropped = sum(n > cut for n in train_lengths)
    result = train(_config(tiny_model_dir, max_length=cut, max_steps=1, grad_accum=1), workspace, "cut")
    assert result["status"] == "completed", result
    assert result["train_rows"] == len(train_lengths) - dropped
    assert "Skipping" in (workspace / "runs" / "cut" / "train.log").read_text()
    stats = length_stats_from_workspace(workspace, cut)
    assert stats.kept_longest(cut) <= cut and stats.excluded(cut) >= dropped


@pytest.mark.slow
def test_a_dataset_without_eval_rows_trains_on_every_row_with_eval_off(tmp_path_factory, speechocean_dir, tiny_model_dir):
    ws = real_workspace(tmp_path_factory, speechocean_dir, tiny_model_dir, keep=3, eval_fraction=0.0)
    result = train(_config(tiny_model_dir, max_steps=2, grad_accum=1, eval_steps=1, save_steps=0), ws, "no-eval")
    assert result["status"] == "completed" and result["steps"] == 2, result
    assert result["train_rows"] == 3 and result["eval_rows"] == 0 and result["eval_loss"] is None
    assert [p["kind"] for p in read_progress(ws, "no-eval")] == ["train", "train"]


@pytest.mark.slow
def test_out_of_memory_fails_with_step_memory_advice_and_keeps_the_checkpoint(workspace, tiny_model_dir):
    config = _config(tiny_model_dir, batch_size=2, grad_accum=1, save_steps=1, max_steps=3)
    result = train(config, workspace, "oom", callbacks=[OutOfMemoryAtStep(2)])
    assert result["status"] == "failed" and result["step"] == 2
    assert "Out of memory at step 2" in result["reason"] and result["peak_memory_bytes"] > 0
    assert any("--batch-size 1" in tip for tip in result["suggestions"])
    assert result["checkpoint"].endswith("checkpoint-2")
    assert (workspace / "runs" / "oom" / "checkpoints" / "checkpoint-2" / "adapter_model.safetensors").exists()
    assert json.loads((workspace / "runs" / "oom" / "result.json").read_text())["status"] == "failed"


@pytest.mark.slow
def test_probe_step_reports_peak_memory_of_the_worst_batch(workspace, tiny_model_dir):
    from datasets import load_from_disk

    probe = run_probe_step(_config(tiny_model_dir, batch_size=2), workspace)
    assert probe["peak_memory_bytes"] > 0 and probe["memory_kind"] == "cpu_max_rss"
    assert math.isfinite(probe["loss"]) and not probe["out_of_memory"]
    train_rows = load_from_disk(str(workspace / "dataset"))["train"]
    by_id = dict(zip(train_rows["id"], train_rows["num_tokens"]))
    clips = dict(zip(train_rows["id"], train_rows["duration_s"]))
    # two copies of the longest row, each with the longest clip (the worst case of every dimension)
    worst = probe["worst_case"]
    assert probe["batch_rows"] == [worst["longest_row"]] * 2 and worst["batch_size"] == 2
    assert by_id[worst["longest_row"]] == max(by_id.values()) and probe["batch_tokens"] == 2 * max(by_id.values())
    assert clips[worst["longest_clip"]] == max(clips.values())
    assert probe["lora_modules"]["language"] > 0


def test_answer_loss_equals_the_models_own_loss_with_fewer_logits(workspace, tiny_model_dir):
    from transformers import Gemma3nForConditionalGeneration

    from pipeline.training.collate import ChatCollator
    from pipeline.data.dataset import load_built_dataset
    from pipeline.model.loading import load_processor
    from pipeline.training.train import answer_loss

    processor = load_processor(str(tiny_model_dir))
    rows = list(load_built_dataset(workspace)["train"])[:3]
    batch = ChatCollator(processor, max_length=512)(rows)
    model = Gemma3nForConditionalGeneration.from_pretrained(tiny_model_dir, dtype=torch.float32, attn_implementation="eager").eval()
    with torch.no_grad():
        reference = model(**batch).loss
        loss, outputs = answer_loss(model, batch)
    assert loss.item() == pytest.approx(reference.item(), rel=1e-5)
    supervised = int((batch["labels"] != -100).sum())
    assert outputs.logits.shape == (supervised, len(processor.tokenizer))
    assert supervised < batch["input_ids"].numel() / 3  # the prompt and ~190 audio positions get no logits


def test_summary_states_peak_memory_in_gib():
    from pipeline.training.run_folder import summary_text

    text = summary_text({"run": "r", "status": "completed", "steps": 4, "max_steps": 4, "final_loss": 1.0,
                         "eval_loss": None, "peak_memory_bytes": 3 * 1024**3 // 2})
    assert "peak memory 1.50 GiB" in text


def test_train_without_a_dataset_leaves_nothing_behind_and_names_the_model(tmp_path, tiny_model_dir):
    from pipeline.errors import DatasetError

    ws = tmp_path / "empty-ws"
    with pytest.raises(DatasetError, match=f"build it first with .*--model {tiny_model_dir}"):
        train(_config(tiny_model_dir), ws, "first")
    assert not (ws / "runs" / "first").exists()


@pytest.mark.slow
def test_every_micro_batch_and_optimizer_step_start_from_a_released_free_heap(workspace, tiny_model_dir, monkeypatch):
    """On CPU each micro-batch (2 steps x 2 accumulated) hands the C heap's free memory back before its
    forward and after its backward, so the optimizer step never runs beside backward's freed heap,
    and each phase of the run does so too (`pipeline.host.free_heap`): each peak is its own."""
    import torch

    from pipeline.training import peak_memory, trainer_setup

    events, phases = [], []
    real_step = torch.optim.AdamW.step

    def recording_step(self, *args, **kwargs):
        events.append("optimizer")
        return real_step(self, *args, **kwargs)

    monkeypatch.setattr(torch.optim.AdamW, "step", recording_step)
    monkeypatch.setattr(trainer_setup, "release_free_heap", lambda: events.append("release") or True)
    monkeypatch.setattr(peak_memory, "release_free_heap", lambda: phases.append(1) or True)
    result = train(_config(tiny_model_dir, max_steps=2, grad_accum=2), workspace, "free-heap")
    assert result["status"] == "completed" and result["steps"] == 2
    assert events == ["release", "release", "release", "release", "optimizer"] * 2
    assert len(phases) >= len(result["memory"]["phase_peak_bytes"])  # load, preflight, step, save
