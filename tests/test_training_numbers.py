"""Training numbers that mean what they say: gradient accumulation equals the equivalent batch, the
constant schedule warms up, and every run writes TensorBoard event files (tiny Gemma 3n, real clips)."""

from __future__ import annotations

import pytest
import torch

from pipeline.config import TrainConfig
from pipeline.training.run_folder import read_progress
from pipeline.training.train import train
from tests.training_data import copy_workspace, real_workspace


@pytest.fixture(scope="module")
def two_row_workspace(tmp_path_factory, speechocean_dir, tiny_model_dir):
    """Two train rows (and one eval row) of real clips: both rows are in the first optimizer step."""
    shared = real_workspace(tmp_path_factory, speechocean_dir, tiny_model_dir, keep=3, eval_fraction=0.34)
    return copy_workspace(shared, tmp_path_factory.mktemp("accum") / "ws")


def _first_step(ws, tiny_model_dir, name: str, batch_size: int, grad_accum: int) -> dict:
    config = TrainConfig(
        model=str(tiny_model_dir), device="cpu", quantization="none", lora_rank=8, lora_alpha=16, lora_dropout=0.0,
        batch_size=batch_size, grad_accum=grad_accum, max_steps=1, eval_steps=0, save_steps=0, seed=5,
        gradient_checkpointing=False,
    )
    result = train(config, ws, name)
    assert result["status"] == "completed", result
    return next(p for p in read_progress(ws, name) if p["kind"] == "train" and p["step"] == 1)


@pytest.fixture(scope="module")
def first_steps(two_row_workspace, tiny_model_dir) -> dict:
    """The step-1 progress lines of batch 2 x accumulation 1 and of batch 1 x accumulation 2.

    Computed in fp32: the two are equal in exact arithmetic, and bf16's 8-bit mantissa (the CPU
    default) rounds batched and single-row matmuls differently by ~3e-4 relative, above the tolerance.
    """
    from pipeline.model import loading as model_module

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(model_module, "compute_dtype", lambda device: torch.float32)
        return {
            "batch2": _first_step(two_row_workspace, tiny_model_dir, "batch2", batch_size=2, grad_accum=1),
            "accum2": _first_step(two_row_workspace, tiny_model_dir, "accum2", batch_size=1, grad_accum=2),
        }


@pytest.mark.slow
def test_accumulating_two_rows_equals_one_batch_of_two(two_row_workspace, tiny_model_dir, first_steps):
    from pipeline.data.dataset import load_built_dataset
    from pipeline.training.collate import ChatCollator
    from pipeline.model.loading import load_processor

    rows = list(load_built_dataset(two_row_workspace)["train"])
    assert len(rows) == 2
    # The test can fail: the rows' answers differ in length, so averaging the two micro-batch means
    # (what a stock Trainer does for Gemma 3n) is not the mean over the batch's answer tokens.
    collator = ChatCollator(load_processor(str(tiny_model_dir)), max_length=512)
    answer_tokens = [int((collator([row])["labels"] != -100).sum()) for row in rows]
    assert answer_tokens[0] != answer_tokens[1], answer_tokens

    batched, accumulated = first_steps["batch2"], first_steps["accum2"]
    assert accumulated["loss"] == pytest.approx(batched["loss"], rel=1e-4)
    assert accumulated["grad_norm"] == pytest.approx(batched["grad_norm"], rel=1e-4)


@pytest.mark.slow
def test_answer_loss_sums_to_the_window_mean_over_micro_batches(two_row_workspace, tiny_model_dir):
    """`answer_loss` with the window's token count: the micro-batch losses add up to the window's token mean."""
    from transformers import Gemma3nForConditionalGeneration

    from pipeline.data.dataset import load_built_dataset
    from pipeline.training.collate import ChatCollator
    from pipeline.model.loading import load_processor
    from pipeline.training.trainer_setup import answer_loss

    rows = list(load_built_dataset(two_row_workspace)["train"])
    collator = ChatCollator(load_processor(str(tiny_model_dir)), max_length=512)
    model = Gemma3nForConditionalGeneration.from_pretrained(tiny_model_dir, dtype=torch.float32, attn_implementation="eager").eval()
    singles = [collator([row]) for row in rows]
    window = sum(int((b["labels"][:, 1:] != -100).sum()) for b in singles)
    with torch.no_grad():
        means = [answer_loss(model, b)[0].item() for b in singles]
        parts = [answer_loss(model, b, torch.tensor(window))[0].item() for b in singles]
        counts = [int((b["labels"][:, 1:] != -100).sum()) for b in singles]
    token_mean = sum(m * n for m, n in zip(means, counts)) / window
    assert sum(parts) == pytest.approx(token_mean, rel=1e-6)
    assert sum(parts) != pytest.approx(sum(means) / 2, rel=1e-6)  # what averaging the means would give


def test_constant_schedule_warms_up_then_holds(tmp_path, tiny_model_dir):
    from transformers import get_scheduler

    from pipeline.training.session import training_arguments

    config = TrainConfig(model=str(tiny_model_dir), lr_schedule="constant", warmup_ratio=0.25, max_steps=8,
                         learning_rate=1e-3)
    args = training_arguments(config, tmp_path, "cpu", has_eval=False)
    assert args.lr_scheduler_type.value == "constant_with_warmup"
    parameter = torch.nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.SGD([parameter], lr=config.learning_rate)
    scheduler = get_scheduler(args.lr_scheduler_type, optimizer, num_warmup_steps=args.get_warmup_steps(8),
                              num_training_steps=8)
    rates = []
    for _ in range(8):
        rates.append(scheduler.get_last_lr()[0])
        optimizer.step()
        scheduler.step()
    assert rates[0] == 0.0 and 0 < rates[1] < 1e-3  # 2 warmup steps (25 % of 8)
    assert rates[2:] == [pytest.approx(1e-3)] * 6


@pytest.mark.slow
def test_a_run_writes_tensorboard_event_files(two_row_workspace, first_steps):
    """Each run logs its loss, learning rate and grad norm for TensorBoard in its own folder."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    folder = two_row_workspace / "runs" / "batch2" / "tensorboard"
    assert list(folder.glob("events.out.tfevents.*")), sorted(p.name for p in folder.parent.iterdir())
    events = EventAccumulator(str(folder))
    events.Reload()
    tags = set(events.Tags()["scalars"])
    assert {"train/loss", "train/learning_rate", "train/grad_norm"} <= tags, tags
    assert events.Scalars("train/loss")[0].step == 1
    assert events.Scalars("train/loss")[0].value == pytest.approx(first_steps["batch2"]["loss"], rel=1e-4)
