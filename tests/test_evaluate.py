"""Evaluation metrics with hand-computed values (Pearson r, precision/recall/F1 of flagged words)."""

from __future__ import annotations

import json
import math

import pytest

from pipeline.tutor import evaluate as ev
from pipeline.data.feedback import feedback_from_scores


def answer(accuracy, fluency, prosody, total, words="none"):
    return (
        f"Scores (0-10): accuracy {accuracy}, fluency {fluency}, prosody {prosody}, total {total}\n"
        f"Words to practise: {words}\nAdvice: keep going."
    )


def test_pearson_hand_computed():
    # x = 1,2,3; y = 2,4,7: dx = -1,0,1; dy = -7/3,-1/3,8/3; cov = 5; sxx = 2; syy = 114/9
    assert ev.pearson([1, 2, 3], [2, 4, 7]) == pytest.approx(5 / math.sqrt(2 * 114 / 9))
    assert ev.pearson([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)
    assert ev.pearson([1, 2, 3], [5, 5, 5]) is None  # constant side: undefined
    assert ev.pearson([1], [2]) is None
    with pytest.raises(ValueError):
        ev.pearson([1, 2], [1])


def test_precision_recall_f1_hand_computed():
    m = ev.precision_recall_f1(2, 3, 4)
    assert m["precision"] == pytest.approx(2 / 3) and m["recall"] == pytest.approx(0.5)
    assert m["f1"] == pytest.approx(2 * (2 / 3) * 0.5 / (2 / 3 + 0.5))  # = 4/7
    assert m["f1"] == pytest.approx(4 / 7)
    nothing_flagged = ev.precision_recall_f1(0, 0, 2)
    assert nothing_flagged["precision"] is None and nothing_flagged["recall"] == 0 and nothing_flagged["f1"] == 0
    assert ev.precision_recall_f1(0, 0, 0)["f1"] is None  # neither side flags anything: no evidence
    assert ev.precision_recall_f1(0, 2, 0)["f1"] == 0.0


def test_evaluate_answers_sentence_pcc_and_word_f1():
    refs = [
        answer(2, 5, 5, 3, "GREY 2/10 (G as K); DAY 4/10"),
        answer(6, 7, 7, 6, "CAT 5/10"),
        answer(9, 8, 8, 9, "none"),
    ]
    preds = [
        answer(3, 5, 6, 2, "grey 3/10 (G as K); SAY 5/10"),  # GREY right (with its phone), SAY wrong, DAY missed
        answer(5, 7, 7, 6, "CAT 6/10"),  # CAT right
        "I could not hear anything useful.",  # no template at all
    ]
    metrics = ev.evaluate_answers(list(zip(preds, refs)))
    assert metrics["clips"] == 3 and metrics["answers_with_scores"] == 2
    accuracy = metrics["sentence"]["accuracy"]
    # only clips 1 and 2 have both: pred (3, 5) vs expert (2, 6): two points -> r = +1, MAE = 1
    assert accuracy["n"] == 2 and accuracy["pcc"] == pytest.approx(1.0) and accuracy["mae"] == pytest.approx(1.0)
    assert metrics["sentence"]["fluency"]["pcc"] == pytest.approx(1.0)
    assert metrics["sentence"]["total"]["pcc"] == pytest.approx(1.0)
    assert metrics["sentence"]["total"]["mae"] == pytest.approx(0.5)  # |2-3| and |6-6|
    # words: tutor flags GREY, SAY, CAT (3); experts GREY, DAY, CAT (3); 2 agree
    words = metrics["words"]
    assert (words["true_positives"], words["predicted"], words["expected"]) == (2, 3, 3)
    assert words["precision"] == pytest.approx(2 / 3) and words["recall"] == pytest.approx(2 / 3)
    assert words["f1"] == pytest.approx(2 / 3)
    phones = metrics["phones"]
    assert (phones["true_positives"], phones["predicted"], phones["expected"]) == (1, 1, 1)


def test_references_from_expert_scores_use_the_feedback_rule():
    scores = {
        "accuracy": 6, "fluency": 7, "prosodic": 7, "total": 5,
        "words": [
            {"text": "KATE'S", "accuracy": 9, "phones": ["K", "EY0", "T", "S"], "phones-accuracy": [2, 2, 2, 2]},
            {"text": "GREY", "accuracy": 0, "phones": ["G", "R", "EY0"], "phones-accuracy": [0, 0, 0.4],
             "mispronunciations": [{"canonical-phone": "G", "index": 0, "pronounced-phone": "F"}]},
        ],
    }
    perfect = feedback_from_scores("KATE'S GREY", scores)
    for reference in (scores, json.dumps(scores), perfect):
        metrics = ev.evaluate_answers([{"answer": perfect, "reference": reference, "target_text": "KATE'S GREY"}])
        assert metrics["words"]["f1"] == 1.0 and metrics["words"]["expected"] == 1
        assert metrics["phones"]["recall"] == 1.0
    wrong = answer(6, 7, 7, 5, "KATE'S 5/10")
    metrics = ev.evaluate_answers([(wrong, scores)])
    assert metrics["words"]["precision"] == 0 and metrics["words"]["recall"] == 0 and metrics["words"]["f1"] == 0


def test_summary_mentions_every_metric():
    metrics = ev.evaluate_answers([(answer(1, 2, 3, 4), answer(2, 3, 4, 5)), (answer(3, 3, 3, 3), answer(5, 5, 5, 5))])
    text = ev.summary(metrics)
    for word in ("accuracy", "fluency", "prosody", "total", "precision", "recall", "F1"):
        assert word in text


def test_evaluate_command_answers_the_eval_split_with_the_tiny_model(tmp_path, tiny_model_dir, speechocean_dir, capsys):
    """End to end on CPU: real clips and expert scores, the tiny random Gemma 3n as the tutor."""
    from pipeline.data.dataset import build_dataset
    from pipeline.data.importers import import_folder
    from pipeline.workspace import Workspace

    ws = Workspace(tmp_path / "ws")
    import_folder(ws, speechocean_dir / "test", format="kaldi")  # speaker 0003 only: a sample-level split
    build_dataset(ws, str(tiny_model_dir), eval_fraction=0.2, seed=0, max_length=2048)
    out = tmp_path / "eval.json"
    code = ev.main(
        ["--workspace", str(ws.root), "--model", str(tiny_model_dir), "--limit", "2", "--device", "cpu",
         "--quantization", "none", "--max-new-tokens", "6", "--out", str(out), "--json"]
    )
    assert code == 0
    result = json.loads(capsys.readouterr().out)
    assert result["clips"] == 2 and result["split"] == "eval" and len(result["answers"]) == 2
    assert result["note"] and "tiny random" in result["note"]
    assert all(isinstance(a["answer"], str) and a["reference_feedback"] for a in result["answers"])
    # the random model's answers carry no template: nothing to correlate, every expert word missed
    assert result["words"]["recall"] in (0.0, None) and result["sentence"]["total"]["pcc"] is None
    assert json.loads(out.read_text(encoding="utf-8"))["clips"] == 2


def test_evaluate_command_without_a_dataset_says_how_to_build_one(tmp_path):
    from pipeline.errors import DatasetError

    with pytest.raises(DatasetError, match="python -m pipeline build"):
        ev.main(["--workspace", str(tmp_path / "empty"), "--model", "unused"])
