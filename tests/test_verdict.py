"""The verdict before the statistics (issue 20 #3): better / worse / can't tell yet, on constructed metric
values, with the figure it rests on and an honest estimate of the recordings that would tell."""

from __future__ import annotations

import math

import pytest

from pipeline.tutor.verdict import base_for, more_recordings_needed, verdict, verdicts
from ui import judge_view as view

BASE = "google/gemma-3n-E2B-it"


def result(run, pcc, ci, *, n=20, coverage=1.0, key="eval-aaaaaaaaaaaa", model=BASE, unparsed=0, clips=20):
    """An evaluation as `evaluate_tutor` saves it, reduced to what the verdict reads."""
    return {"run": run, "model": model, "dataset_key": key, "clips": clips, "unparsed": unparsed,
            "scores": {"total": {"pcc": pcc, "pcc_ci": ci, "n": n, "coverage": coverage}}}


def test_better_when_the_runs_interval_lies_above_the_base_models():
    v = verdict(result("r1", 0.8, [0.7, 0.9]), result(None, 0.3, [0.1, 0.5]))
    assert v["outcome"] == "better" and v["line"].startswith("better than the base model")
    assert "0.80 [0.70, 0.90]" in v["line"] and "base model's 0.30 [0.10, 0.50]" in v["line"]  # the figure


def test_worse_when_it_lies_below():
    v = verdict(result("r1", 0.2, [0.0, 0.35]), result(None, 0.6, [0.4, 0.8]))
    assert v["outcome"] == "worse" and v["line"].startswith("worse than the base model")
    assert "0.20 [0.00, 0.35]" in v["line"]


def test_cant_tell_when_the_intervals_overlap_with_an_estimate_of_the_recordings_needed():
    # run 0.6 [0.4, 0.8], base 0.5 [0.3, 0.7], n = 20: the facing half-widths are 0.2 + 0.2 = 0.4 against a gap
    # of 0.1, so the intervals touch at n' = 20 * (0.4 / 0.1) ** 2 = 320 clips and part at 321: 301 more.
    v = verdict(result("r1", 0.6, [0.4, 0.8]), result(None, 0.5, [0.3, 0.7]))
    assert v["outcome"] == "cant_tell" and v["more_recordings"] == 301
    assert v["line"].startswith("can't tell yet: their likely ranges overlap; about 301 more test recordings would help")
    assert "estimate" in v["line"] and "0.60 [0.40, 0.80]" in v["line"]
    # Only half of the answers could be read: twice the recordings for the same number of scores.
    half = verdict(result("r1", 0.6, [0.4, 0.8], coverage=0.5), result(None, 0.5, [0.3, 0.7]))
    assert half["more_recordings"] == 602


@pytest.mark.parametrize("n, run, run_ci, base, base_ci", [
    (20, 0.6, [0.4, 0.8], 0.5, [0.3, 0.7]),
    (23, 0.41, [0.05, 0.70], 0.52, [0.30, 0.71]),
    (7, 0.9, [0.5, 0.99], 0.7, [0.2, 0.95]),
])
def test_the_estimate_parts_the_intervals_if_they_narrow_as_one_over_root_n(n, run, run_ci, base, base_ci):
    more = more_recordings_needed(n, run, run_ci, base, base_ci)
    facing = (run - run_ci[0]) + (base_ci[1] - base) if run > base else (run_ci[1] - run) + (base - base_ci[0])
    shrink = math.sqrt(n / (n + more))
    assert facing * shrink < abs(run - base)  # enough: the narrowed intervals no longer overlap
    assert facing * math.sqrt(n / (n + more - 1)) >= abs(run - base)  # and one recording fewer would not do


def test_no_difference_gives_no_number():
    v = verdict(result("r1", 0.5, [0.3, 0.7]), result(None, 0.5, [0.2, 0.8]))
    assert v["outcome"] == "cant_tell" and v["more_recordings"] is None and "equally" in v["line"]


def test_unreadable_scores_decide_when_only_one_side_has_them():
    base_unparsed = result(None, None, None, n=0, unparsed=20)
    v = verdict(result("r1", 0.4, [0.1, 0.6]), base_unparsed)
    # the 20 are the read-aloud recordings (the only ones with expert scores), not all the test recordings
    assert v["outcome"] == "better" and "– (none of its 20 answers to read-aloud recordings could be read)" in v["line"]
    assert verdict(result("r1", None, None, n=0, unparsed=20), result(None, 0.4, [0.1, 0.6]))["outcome"] == "worse"
    some = verdict(result("r1", 0.4, [0.1, 0.6]), result(None, None, None, n=2, unparsed=18))
    assert "no readable total score (18 of its 20 answers to read-aloud recordings could not be read)" in some["line"]
    neither = verdict(result("r1", None, None, n=0), base_unparsed)
    assert neither["outcome"] == "cant_tell" and "neither" in neither["line"]


def test_a_run_is_compared_only_with_its_own_base_on_the_same_build():
    run = result("r1", 0.8, [0.7, 0.9])
    other_build = result(None, 0.3, [0.1, 0.5], key="eval-bbbbbbbbbbbb")
    other_model = result(None, 0.3, [0.1, 0.5], model="google/gemma-3n-E4B-it")
    assert base_for(run, [other_build, other_model]) is None
    lonely = verdict(run, None)
    assert lonely["outcome"] == "no_base" and lonely["line"].startswith("can't tell yet") and BASE in lonely["line"]
    same = result(None, 0.3, [0.1, 0.5])
    assert base_for(run, [other_build, same, other_model]) is same


def test_the_verdict_comes_as_one_line_per_run_before_the_table():
    results = [result(None, 0.3, [0.1, 0.5]), result("r1", 0.8, [0.7, 0.9]), result("r2", 0.35, [0.2, 0.5])]
    assert [v["run"] for v in verdicts(results)] == ["r1", "r2"]
    text = view.verdict_markdown(results)
    lines = [line for line in text.splitlines() if line.startswith("- ")]
    assert len(lines) == 2
    assert lines[0].startswith("- ✓ **run · r1**: better than the base model")
    assert lines[1].startswith("- ? **run · r2**: can't tell yet: their likely ranges overlap; about ")
    assert view.verdict_markdown(results[:1]) == ""  # no run evaluated: no verdict


def test_every_headline_figure_has_a_meaning_in_a_teachers_words():
    from pipeline.tutor.metrics import evaluate_answers

    reference = "Scores (0-10): accuracy 6, fluency 7, prosody 7, total 5\nWords to practise: none\nAdvice: ok."
    evaluation = dict(evaluate_answers([(reference, reference)] * 3, resamples=20), model=BASE, run=None)
    frame = view.headline_frame([evaluation])
    assert list(frame.columns)[-1] == "what it means"
    meanings = dict(zip(frame["figure"], frame["what it means"]))
    assert all(meanings[figure] for figure in meanings if figure != "figure"), meanings
    assert "experts'" in meanings["total score: agrees with the experts' (PCC) [likely range]"]
    assert "order" in meanings["total score: ranks recordings as the experts do (SCC) [likely range]"]
    assert "points (of 10)" in meanings["total score: average difference, points of 10 (MAE) (scores read, % read)"]


def test_each_run_is_also_judged_against_the_classical_scorer_once_it_was_evaluated():
    from pipeline.tutor.verdict import against_scorer, scorer_for

    scorer = result(None, 0.3, [0.1, 0.5], model="classical-scorer")
    results = [result(None, 0.3, [0.1, 0.5]), scorer, result("r1", 0.8, [0.7, 0.9]), result("r2", -0.1, [-0.3, 0.05])]
    assert scorer_for(results[2], results) is scorer and base_for(results[2], results) is results[0]
    found = {v["run"]: v["scorer"] for v in verdicts(results)}
    assert found["r1"]["outcome"] == "better" and found["r1"]["line"].startswith("beats the classical scorer")
    assert "the classical scorer's 0.30 [0.10, 0.50]" in found["r1"]["line"]
    assert found["r2"]["outcome"] == "worse" and found["r2"]["line"].startswith("worse than the classical scorer")
    overlap = against_scorer(result("r3", 0.35, [0.2, 0.5]), scorer)
    assert overlap["line"].startswith("can't tell yet whether it beats the classical scorer")
    text = view.verdict_markdown(results)  # the scorer is the main yardstick, the base model a line under it
    assert "- ✓ **run · r1**: beats the classical scorer" in text and "  - ✓ against the base model: better than" in text
    assert "- ✗ **run · r2**: worse than the classical scorer" in text
    assert "Classical scorer (no fine-tuning)" == view.model_label(scorer)
    # No scorer evaluated on this build: the verdict says nothing about it (the base model's line stays as it was).
    assert "classical scorer" not in view.verdict_markdown([results[0], results[2]])
