"""Evaluation: metrics that cannot flatter a tutor (hand-computed values, real expert scores), and the
`evaluate` command on the tiny model with its saved result."""

from __future__ import annotations

import json
import math

import pytest

from pipeline.conversation.feedback import feedback_from_scores
from pipeline.tutor import evaluate as ev
from pipeline.tutor.cli import evaluate_main
from pipeline.tutor import metrics

GARBAGE = "<unused12> kabel Grün ?? 7 7"


def answer(accuracy, fluency, prosody, total, words="none"):
    return (
        f"Scores (0-10): accuracy {accuracy}, fluency {fluency}, prosody {prosody}, total {total}\n"
        f"Words to practise: {words}\nAdvice: keep going."
    )


@pytest.fixture(scope="module")
def expert_clips(speechocean_dir):
    """All 60 real clips: (id, sentence, expert scores)."""
    scores = json.loads((speechocean_dir / "resource" / "scores.json").read_text())
    texts = {}
    for split in ("train", "test"):
        for line in (speechocean_dir / split / "text").read_text().splitlines():
            utt, text = line.split(maxsplit=1)
            texts[utt] = text
    clips = [(utt, texts[utt], scores[utt]) for utt in sorted(texts)]
    assert len(clips) == 60
    return clips


def test_pearson_and_spearman_hand_computed():
    # x = 1,2,3; y = 2,4,7: dx = -1,0,1; dy = -7/3,-1/3,8/3; cov = 5; sxx = 2; syy = 114/9
    assert metrics.pearson([1, 2, 3], [2, 4, 7]) == pytest.approx(5 / math.sqrt(2 * 114 / 9))
    assert metrics.spearman([1, 2, 3], [2, 4, 7]) == pytest.approx(1.0)  # same order: ranks agree exactly
    # ranks of x = 1,2,3,4; of y = 10,30,20,40 -> 1,3,2,4: d = 0,1,1,0; rho = 1 - 6*2/(4*15) = 0.8
    assert metrics.spearman([1, 2, 3, 4], [10, 30, 20, 40]) == pytest.approx(0.8)
    assert metrics.pearson([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)
    assert metrics.pearson([1, 2, 3], [5, 5, 5]) is None and metrics.spearman([1, 2, 3], [5, 5, 5]) is None
    assert metrics.pearson([1], [2]) is None
    with pytest.raises(ValueError):
        metrics.pearson([1, 2], [1])


def test_precision_recall_f1_hand_computed():
    m = metrics.precision_recall_f1(2, 3, 4)
    assert m["precision"] == pytest.approx(2 / 3) and m["recall"] == pytest.approx(0.5)
    assert m["f1"] == pytest.approx(4 / 7)  # 2 * (2/3) * (1/2) / (2/3 + 1/2) = 2 TP / (predicted + expected)
    nothing_flagged = metrics.precision_recall_f1(0, 0, 2)
    assert nothing_flagged["precision"] is None and nothing_flagged["recall"] == 0 and nothing_flagged["f1"] == 0
    assert metrics.precision_recall_f1(0, 0, 0)["f1"] is None  # neither side flags anything: no evidence
    assert metrics.precision_recall_f1(0, 2, 0)["f1"] == 0.0


def test_every_answer_counts_hand_computed():
    refs = [
        answer(2, 5, 5, 3, "GREY 2/10 (G as K); DAY 4/10"),
        answer(6, 7, 7, 6, "CAT 5/10"),
        answer(9, 8, 8, 9, "none"),
        answer(4, 4, 4, 4, "RED 3/10"),
        answer(8, 9, 9, 8, "BLUE 5/10 (B as P)"),
    ]
    preds = [
        answer(3, 5, 6, 2, "grey 3/10 (G as K); SAY 5/10"),  # GREY right (with its phone), SAY wrong, DAY missed
        answer(5, 7, 7, 6, "CAT 6/10"),  # CAT right
        answer(8, 9, 7, 9, "none"),
        "I could not hear anything useful.",  # no template at all: unparsed
        "Scores (0-10): accuracy 8, fluency 9, prosody 9, total 8",  # no words line: unparsed
    ]
    result = metrics.evaluate_answers(list(zip(preds, refs)))
    assert result["clips"] == 5 and result["unparsed"] == 2 and result["unparsed_fraction"] == pytest.approx(0.4)
    reasons = [c["unparsed_reason"] for c in result["per_clip"]]
    assert reasons[:3] == [None, None, None] and "accuracy score" in reasons[3] and "Words to practise" in reasons[4]
    accuracy = result["scores"]["accuracy"]
    # parsed: tutor (3, 5, 8) vs experts (2, 6, 9): dx = -7,-1,8 (/3), dy = -11,1,10 (/3):
    # r = 156 / sqrt(114 * 222); ranks identical -> SCC 1; MAE (1 + 1 + 1) / 3 = 1
    assert accuracy["n"] == 3 and accuracy["coverage"] == pytest.approx(0.6)
    assert accuracy["pcc"] == pytest.approx(156 / math.sqrt(114 * 222), abs=1e-6)
    assert accuracy["scc"] == pytest.approx(1.0) and accuracy["mae"] == pytest.approx(1.0)
    assert accuracy["reason"] is None
    # 3 points: 3 of the 27 resamples repeat one clip (constant, r undefined): over 10 %, so no interval
    assert accuracy["pcc_ci"] is None and accuracy["scc_ci"] is None
    # words: tutor flags GREY, SAY, CAT (3); experts GREY, DAY, CAT, RED, BLUE (5, the last two in
    # unparsed answers count as misses); 2 agree
    words = result["words"]
    assert (words["true_positives"], words["predicted"], words["expected"]) == (2, 3, 5)
    assert words["precision"] == pytest.approx(2 / 3) and words["recall"] == pytest.approx(2 / 5)
    assert words["f1"] == pytest.approx(2 * 2 / (3 + 5))
    phones = result["phones"]
    assert (phones["true_positives"], phones["predicted"], phones["expected"]) == (1, 1, 2)


def test_mix_of_perfect_and_garbage_answers_gives_coverage_and_recall_counts_the_misses(expert_clips):
    """The issue's reproduction: half of 60 answers replaced by garbage. r over the parsed half is 1 (they
    are perfect), but n, coverage and the unparsed fraction say half is missing, and recall counts it."""
    items, perfect_words, all_words = [], 0, 0
    for index, (utt, text, scores) in enumerate(expert_clips):
        perfect = feedback_from_scores(text, scores)
        flagged = len(metrics.reference_from(scores, text).words)
        all_words += flagged
        garbage = index % 2 == 1
        perfect_words += 0 if garbage else flagged
        items.append({"id": utt, "answer": GARBAGE if garbage else perfect, "reference": scores, "target_text": text})
    result = metrics.evaluate_answers(items)
    assert result["clips"] == 60 and result["unparsed"] == 30 and result["unparsed_fraction"] == 0.5
    for key in ("accuracy", "fluency", "prosody", "total"):
        m = result["scores"][key]
        assert m["n"] == 30 and m["coverage"] == 0.5, (key, m)
        assert m["pcc"] == pytest.approx(1.0) and m["mae"] == pytest.approx(0.0)
    words = result["words"]
    assert words["precision"] == 1.0
    assert words["expected"] == all_words and words["true_positives"] == perfect_words < all_words
    assert words["recall"] == pytest.approx(perfect_words / all_words) and words["recall"] < 0.75
    assert words["f1"] < 1.0 and words["f1_ci"][1] <= 1.0
    assert metrics.summary(result).startswith("60 clips; 30 answers unparsed (50 %)")


def test_expert_feedback_answered_back_to_itself_is_perfect(expert_clips):
    items = [{"id": utt, "answer": feedback_from_scores(text, scores), "reference": scores, "target_text": text}
             for utt, text, scores in expert_clips]
    result = metrics.evaluate_answers(items)
    assert result["unparsed"] == 0
    for key, m in result["scores"].items():
        assert m["pcc"] == pytest.approx(1.0) and m["scc"] == pytest.approx(1.0), (key, m)
        assert m["mae"] == 0 and m["n"] == 60 and m["coverage"] == 1.0
        assert m["pcc_ci"] == [pytest.approx(1.0)] * 2 and m["scc_ci"] == [pytest.approx(1.0)] * 2
    for name in ("words", "phones"):
        assert result[name]["f1"] == 1.0 and result[name]["f1_ci"] == [1.0, 1.0], name


def test_too_few_or_constant_answers_give_no_correlation_and_say_why():
    two = metrics.evaluate_answers([(answer(3, 3, 3, 3), answer(2, 3, 4, 5)), (answer(5, 5, 5, 5), answer(6, 6, 6, 6))])
    assert two["scores"]["total"]["pcc"] is None and two["scores"]["total"]["scc"] is None
    assert "only 2 parsed" in two["scores"]["total"]["reason"] and two["scores"]["total"]["mae"] == pytest.approx(1.5)  # |3-5| and |5-6|
    same = metrics.evaluate_answers([(answer(5, 5, 5, 5), answer(i, i, i, i)) for i in (2, 5, 8)])
    assert same["scores"]["total"]["pcc"] is None and "same total score (5)" in same["scores"]["total"]["reason"]
    none = metrics.evaluate_answers([(GARBAGE, answer(i, i, i, i, "CAT 3/10")) for i in (2, 5, 8)])
    # Nothing read: no recall or F1 of 0 (a figure for missing data) but the reason it is not measurable.
    assert none["unparsed_fraction"] == 1.0 and none["words"]["recall"] is None and none["words"]["f1"] is None
    assert none["words"]["reason"] == metrics.NOT_MEASURABLE and none["words"]["expected"] == 3
    assert all(m["pcc"] is None and m["n"] == 0 and metrics.NOT_MEASURABLE in m["reason"] for m in none["scores"].values())
    assert f"flagged words: {metrics.NOT_MEASURABLE}" in metrics.summary(none)


def test_bootstrap_intervals_are_reproducible_and_bracket_the_estimate():
    tutor = [2, 3, 5, 4, 6, 8, 7, 9, 5, 6]
    expert = [1, 4, 4, 5, 6, 7, 9, 8, 6, 5]
    first = metrics.correlation_intervals(tutor, expert, seed=1)
    assert first == metrics.correlation_intervals(tutor, expert, seed=1)  # fixed seed: same interval
    (pcc_low, pcc_high), (scc_low, scc_high) = first
    assert pcc_low < metrics.pearson(tutor, expert) < pcc_high <= 1.0
    assert scc_low < metrics.spearman(tutor, expert) < scc_high <= 1.0
    assert metrics.f1_interval([(1, 1, 1)] * 5) == [1.0, 1.0]
    low, high = metrics.f1_interval([(1, 2, 1), (0, 1, 1), (2, 2, 3), (1, 1, 1)])
    assert 0 <= low < 2 * 4 / (6 + 6) < high <= 1


def test_metrics_split_by_kind():
    items = [{"answer": answer(i, i, i, i), "reference": answer(i, i, i, i), "kind": "read_aloud"} for i in (2, 5, 8)]
    items.append({"answer": GARBAGE, "reference": "Nice story; say THREE with TH.", "kind": "free_speech"})
    result = metrics.evaluate_answers(items)
    assert [c["kind"] for c in result["per_clip"]] == ["read_aloud"] * 3 + ["free_speech"]
    assert result["by_kind"]["read_aloud"]["unparsed"] == 0 and result["by_kind"]["free_speech"]["clips"] == 1
    assert "by_kind" not in metrics.evaluate_answers(items[:3])


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
        result = ev.evaluate_answers([{"answer": perfect, "reference": reference, "target_text": "KATE'S GREY"}])
        assert result["words"]["f1"] == 1.0 and result["words"]["expected"] == 1 and result["unparsed"] == 0
        assert result["phones"]["recall"] == 1.0
    wrong = answer(6, 7, 7, 5, "KATE'S 5/10")
    result = ev.evaluate_answers([(wrong, scores)])
    assert result["words"]["precision"] == 0 and result["words"]["recall"] == 0 and result["words"]["f1"] == 0


def test_summary_mentions_every_metric():
    result = metrics.evaluate_answers([(answer(i, 2, 3, i), answer(i + 1, 3, 4, 5 + i)) for i in (1, 3, 4, 7)])
    text = metrics.summary(result)
    for word in ("unparsed", "accuracy", "fluency", "prosody", "total", "PCC", "SCC", "MAE", "coverage",
                 "precision", "recall", "F1"):
        assert word in text


def test_evaluate_command_on_the_tiny_model_reports_everything_unparsed_and_saves_it(
        tmp_path, tiny_model_dir, speechocean_dir, capsys):
    """End to end on CPU: real clips and expert scores, the tiny random Gemma 3n as the tutor."""
    from pipeline.data.dataset import build_dataset
    from pipeline.data.importers import import_folder
    from pipeline.workspace import Workspace

    ws = Workspace(tmp_path / "ws")
    import_folder(ws, speechocean_dir / "test", format="kaldi")  # speaker 0003 only: a sample-level split
    build_dataset(ws, str(tiny_model_dir), eval_fraction=0.2, seed=0, max_length=2048)
    out = tmp_path / "eval.json"
    code = evaluate_main(
        ["--workspace", str(ws.root), "--model", str(tiny_model_dir), "--limit", "3", "--device", "cpu",
         "--quantization", "none", "--max-new-tokens", "6", "--out", str(out), "--json"]
    )
    assert code == 0
    result = json.loads(capsys.readouterr().out)
    assert {"clips", "unparsed", "unparsed_fraction", "scores", "words", "phones", "per_clip"} <= set(result)
    assert set(result["scores"]) == {"accuracy", "fluency", "prosody", "total"}
    assert {"pcc", "scc", "mae", "n", "pcc_ci", "scc_ci"} <= set(result["scores"]["total"])
    assert {"precision", "recall", "f1", "f1_ci"} <= set(result["words"]) and {"f1_ci"} <= set(result["phones"])
    assert result["clips"] == 3 and result["split"] == "eval" and len(result["per_clip"]) == 3
    assert result["note"] and "tiny random" in result["note"]
    assert all(isinstance(c["answer"], str) and c["reference_feedback"] and c["kind"] == "read_aloud"
               for c in result["per_clip"])
    # The random model's answers carry no template: every one unparsed, no correlation from zero answers.
    assert result["unparsed_fraction"] == 1.0 and result["unparsed"] == 3
    for m in result["scores"].values():
        assert m["pcc"] is None and m["scc"] is None and m["n"] == 0 and "none of the answers could be read" in m["reason"]
    assert result["words"]["recall"] in (0.0, None) and result["words"]["precision"] is None
    # Saved under WS/evals/MODEL/, keyed by the dataset build (the eval split's data files).
    key = ev.split_key(ws, "eval", 3)
    assert result["dataset_key"] == key and key.startswith("eval-") and key.endswith("-first3")
    saved = ev.saved_evaluations(ws, key)
    assert [s["path"] for s in saved] == [str(ev.evaluation_path(ws, key, model=str(tiny_model_dir)))]
    assert saved[0]["path"].startswith(str(ws.root / "evals")) and result["saved"][0] == saved[0]["path"]
    assert json.loads(out.read_text(encoding="utf-8"))["clips"] == 3
    assert ev.saved_evaluations(ws, ev.split_key(ws, "eval")) == []  # a different key: the whole split


def test_a_cancelled_evaluation_stops_and_saves_nothing(tmp_path, tiny_model_dir, speechocean_dir):
    from pipeline.data.dataset import build_dataset
    from pipeline.data.importers import import_folder
    from pipeline.errors import EvaluationError
    from pipeline.workspace import Workspace

    ws = Workspace(tmp_path / "ws")
    import_folder(ws, speechocean_dir / "test", format="kaldi")
    build_dataset(ws, str(tiny_model_dir), eval_fraction=0.2, seed=0, max_length=2048)
    seen = []
    with pytest.raises(EvaluationError, match="cancelled after 1 of"):
        ev.evaluate_tutor(ws, str(tiny_model_dir), device="cpu", quantization="none", max_new_tokens=4,
                          progress=lambda done, total, message: seen.append(done), should_stop=lambda: len(seen) >= 2)
    assert seen == [0, 1] and ev.saved_evaluations(ws) == []


def test_evaluate_command_without_a_dataset_says_how_to_build_one(tmp_path):
    from pipeline.errors import DatasetError

    with pytest.raises(DatasetError, match="python -m pipeline build"):
        evaluate_main(["--workspace", str(tmp_path / "empty"), "--model", "unused"])
    with pytest.raises(DatasetError, match="python -m pipeline build"):
        ev.split_key(tmp_path / "empty")
