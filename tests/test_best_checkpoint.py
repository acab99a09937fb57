"""Keeping the checkpoint that agrees best with the experts (`--keep-best`), and early stopping."""

from __future__ import annotations

import json

import pytest

from pipeline.config import TrainConfig
from pipeline.conversation.feedback import feedback_from_scores
from pipeline.errors import ConfigError
from pipeline.training import best_checkpoint as bc
from pipeline.training.run_folder import read_progress, run_paths
from pipeline.training.train import train
from tests.training_data import copy_workspace, real_workspace


def row(total, words=()):
    return {"target_text": "WE CALL IT BEAR", "scores": json.dumps({"accuracy": total, "fluency": 8, "prosodic": 8,
                                                                     "total": total, "words": list(words)})}


def test_expert_agreement_is_one_minus_the_mean_total_error_over_ten_and_unparsed_counts_fully_wrong():
    rows = [row(8), row(4)]
    exact = [feedback_from_scores(r["target_text"], json.loads(r["scores"])) for r in rows]
    assert bc.expert_agreement(exact, rows) == 1.0
    off_by_two = [exact[0].replace("total 8", "total 6"), exact[1]]
    assert bc.expert_agreement(off_by_two, rows) == pytest.approx(1 - (2 + 0) / 2 / 10)
    assert bc.expert_agreement(["I heard nothing.", exact[1]], rows) == pytest.approx(0.5)
    with pytest.raises(ValueError):
        bc.expert_agreement([], [])


def test_the_judged_subset_is_the_first_read_aloud_rows_with_expert_scores_by_id():
    from datasets import Dataset

    data = Dataset.from_list([
        {"id": "c", "kind": "read_aloud", "scores": "{\"total\": 5}"},
        {"id": "a", "kind": "free_speech", "scores": ""},
        {"id": "b", "kind": "read_aloud", "scores": "{\"total\": 7}"},
        {"id": "d", "kind": "read_aloud", "scores": ""},
    ])
    assert [r["id"] for r in bc.judge_rows(data, 5)] == ["b", "c"]
    assert [r["id"] for r in bc.judge_rows(data, 1)] == ["b"]
    assert bc.judge_rows(data.select([1, 3]), 5) == []  # no expert scores: the criterion is the eval loss


def test_settings_that_cannot_work_are_refused_with_the_fix():
    with pytest.raises(ConfigError, match="needs `--keep-best`"):
        TrainConfig(early_stopping_patience=2)
    with pytest.raises(ConfigError, match="--eval-steps 0"):
        TrainConfig(keep_best=True, eval_steps=0)
    with pytest.raises(ConfigError, match="--judge-clips"):
        TrainConfig(keep_best=True, judge_clips=0)


@pytest.fixture(scope="module")
def built(tmp_path_factory, speechocean_dir, tiny_model_dir):
    return real_workspace(tmp_path_factory, speechocean_dir, tiny_model_dir, keep=6, eval_fraction=0.34)


def _config(tiny_model_dir, **changes) -> TrainConfig:
    base = dict(model=str(tiny_model_dir), device="cpu", quantization="none", lora_rank=8, lora_alpha=16, batch_size=1,
                grad_accum=1, max_steps=3, eval_steps=1, save_steps=100, learning_rate=1e-3, seed=3, keep_best=True,
                judge_clips=2)
    base.update(changes)
    return TrainConfig(**base)


def _weights(folder):
    return (folder / "adapter_model.safetensors").read_bytes()


@pytest.mark.slow
def test_the_adapter_is_the_step_that_agreed_best_not_the_last(built, tmp_path, tiny_model_dir, monkeypatch):
    ws = copy_workspace(built, tmp_path / "ws")
    scripted = iter([0.2, 0.6, 0.4])  # the experts agree most with step 2's answers
    judged = []

    def agreement(answers, rows):
        judged.append(len(rows))
        return next(scripted)

    monkeypatch.setattr(bc, "expert_agreement", agreement)
    result = train(_config(tiny_model_dir), ws, "best")
    paths = run_paths(ws, "best")
    assert result["status"] == "completed" and result["steps"] == 3 and judged == [2, 2, 2]
    assert result["best"]["step"] == 2 and result["best"]["value"] == 0.6 and result["best"]["criterion"] == bc.AGREEMENT
    assert "step 2's" in result["best_reason"] and "2 eval clips" in result["best_reason"]
    assert result["early_stopped"] is False
    assert _weights(paths["adapter"]) == _weights(paths["best"])
    judge_lines = [line for line in read_progress(ws, "best") if line["kind"] == "judge"]
    assert [line["step"] for line in judge_lines] == [1, 2, 3] and [line["best_step"] for line in judge_lines] == [1, 2, 2]
    assert all(line["seconds"] >= 0 and line["clips"] == 2 for line in judge_lines)
    # The kept adapter loads as the run's tutor.
    from pipeline.tutor.infer import load_tutor

    tutor = load_tutor(run="best", workspace=ws, device="cpu", use_cache=False)
    assert tutor.run == "best"


@pytest.mark.slow
def test_early_stopping_after_the_patience_keeps_the_best_and_says_why(built, tmp_path, tiny_model_dir):
    """The tiny random model's answers never follow the template: agreement 0 at every evaluation, so
    the first evaluation stays the best and patience 1 stops the run at the second."""
    ws = copy_workspace(built, tmp_path / "ws")
    result = train(_config(tiny_model_dir, max_steps=5, early_stopping_patience=1), ws, "early")
    paths = run_paths(ws, "early")
    assert result["status"] == "completed" and result["early_stopped"] is True and result["steps"] == 2
    assert "stopped early" in result["reason"]
    assert result["best"]["step"] == 1 and result["best"]["value"] == 0.0
    assert _weights(paths["adapter"]) == _weights(paths["best"])
    best = bc.read_best(paths["best"])
    assert best["evaluations"] == 2 and best["since_best"] == 1
    assert json.loads(paths["result"].read_text())["best_reason"] == result["best_reason"]


def test_the_train_tab_offers_it_under_advanced_and_says_what_is_kept():
    from ui.common import CONFIG_FIELDS, config_from_values
    from ui.train_view import kept_markdown, settings_words

    values = dict(TrainConfig().to_dict(), keep_best=True, judge_clips=4.0, early_stopping_patience=2.0)
    config = config_from_values({name: values[name] for name in CONFIG_FIELDS})
    assert (config.keep_best, config.judge_clips, config.early_stopping_patience) == (True, 4, 2)
    assert "keeps the best of its evaluations (4 test answers every 50 steps, stops after 2 without progress)" in \
        settings_words(config.to_dict())
    rows = [{"kind": "train", "step": 1},
            {"kind": "judge", "step": 50, "criterion": bc.AGREEMENT, "value": 0.61, "best_step": 50, "best_value": 0.61,
             "clips": 4, "seconds": 12.5}]
    text = kept_markdown(rows, {})
    assert "agreement with the experts 0.61 at step 50" in text and "answered 4 test recordings in" in text
    done = {"best_reason": bc.best_reason({"criterion": bc.AGREEMENT, "value": 0.61, "step": 50, "clips": 4,
                                           "evaluations": 3})}
    assert kept_markdown(rows, done) == "**Kept:** the adapter is step 50's: its answers agreed best with the experts " \
                                        "on 4 eval clips (agreement 0.61 of 1), the best of 3 evaluations."
    assert kept_markdown([{"kind": "train"}], {}) == ""
    # a new (or random) model whose answers never parse: every evaluation ties at 0, and the words say why step 1 is kept
    tied = bc.best_reason({"criterion": bc.AGREEMENT, "value": 0.0, "step": 1, "clips": 4, "evaluations": 3})
    assert "could be compared" in tied and "earliest evaluation is kept" in tied and "agreed best" not in tied
