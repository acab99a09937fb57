"""The feedback template: written from expert scores, read back exactly, tolerant of model answers."""

from __future__ import annotations

import json

import pytest

from pipeline.errors import SampleError
from pipeline.conversation.feedback import (
    MISSING,
    UNCLEAR,
    FlaggedWord,
    ParsedFeedback,
    PhoneError,
    feedback_from_scores,
    parse_feedback,
    render_feedback,
    summarize_scores,
)


def word(text, accuracy, phones, phone_scores, mis=None):
    out = {"text": text, "accuracy": accuracy, "stress": 10, "total": accuracy, "phones": phones,
           "phones-accuracy": phone_scores}
    if mis:
        out["mispronunciations"] = [
            {"canonical-phone": c, "index": i, "pronounced-phone": p} for c, i, p in mis
        ]
    return out


def sentence(words, accuracy=8, fluency=9, prosodic=9, total=8):
    return {"accuracy": accuracy, "fluency": fluency, "prosodic": prosodic, "total": total,
            "completeness": 10, "words": words, "text": " ".join(w["text"] for w in words)}


def test_speechocean_000050083_names_grey_with_its_phones(speechocean_dir):
    scores = json.loads((speechocean_dir / "resource" / "scores.json").read_text())["000050083"]
    text = feedback_from_scores(scores["text"], scores)
    assert text.splitlines() == [
        "Scores (0-10): accuracy 6, fluency 7, prosody 7, total 5",
        "Words to practise: GREY 0/10 (G as F, R unclear, EY as IH)",
        'Advice: In "GREY", say the G sound of "green", not the F sound of "fee".',
    ]
    parsed = parse_feedback(text)
    assert parsed.scores == {"accuracy": 6, "fluency": 7, "prosody": 7, "total": 5}
    assert parsed.flagged_words == ["GREY"]
    assert parsed.phone_errors == [("GREY", "G", "F"), ("GREY", "R", UNCLEAR), ("GREY", "EY", "IH")]


def test_every_real_utterance_roundtrips(speechocean_dir):
    all_scores = json.loads((speechocean_dir / "resource" / "scores.json").read_text())
    lengths = []
    for utt, scores in all_scores.items():
        text = feedback_from_scores(scores["text"], scores)
        assert parse_feedback(text) == summarize_scores(scores["text"], scores), utt
        lengths.append(len(text))
    assert max(lengths) < 260  # short: it is also the training target


CASES = [
    # (id, words, sentence overrides, expected flagged (word, score, [(phone, heard)]), advice fragment)
    ("nothing-low-excellent", [word("HELLO", 10, ["HH", "AH0", "L", "OW1"], [2, 2, 2, 2])], {}, [], "Excellent"),
    ("accent-polish", [word("THREE", 9, ["TH", "R", "IY1"], [1.2, 2, 2])], {}, [], 'TH sound of "theta" in "THREE"'),
    ("low-accuracy-no-phone-detail", [word("BEAR", 6, ["B", "EH1", "R"], [2, 1.4, 1.8])], {},
     [("BEAR", 6, [])], 'In "BEAR", say the EH sound of "Ed" more clearly.'),
    ("weak-phone-flags-good-word", [word("IS", 8, ["IH0", "Z"], [0.8, 2])], {},
     [("IS", 8, [("IH", None)])], 'say the IH sound of "it" clearly'),
    ("deleted-phone", [word("CAT", 4, ["K", "AE1", "T"], [2, 2, 0], mis=[("T", 2, "<DEL>")])], {},
     [("CAT", 4, [("T", MISSING)])], 'do not drop the T sound of "tea"'),
    ("annotation-on-accurate-word", [word("SEE", 8, ["S", "IY1"], [2, 0.4], mis=[("IY", 1, "IH")])], {},
     [("SEE", 8, [("IY", "IH")])], 'not the IH sound of "it"'),
    ("worst-word-drives-advice",
     [word("ONE", 5, ["W", "AH1", "N"], [2, 0.6, 2]), word("TWO", 2, ["T", "UW1"], [0, 1], mis=[("T", 0, "<unk>")])],
     {}, [("ONE", 5, [("AH", None)]), ("TWO", 2, [("T", UNCLEAR)])], 'In "TWO", say the T sound of "tea" clearly.'),
    ("fluency-advice", [word("HELLO", 10, ["HH", "AH0"], [2, 2])], {"fluency": 5, "prosodic": 6}, [], "one smooth go"),
    ("prosody-advice", [word("HELLO", 10, ["HH", "AH0"], [2, 2])], {"prosodic": 5}, [], "natural rhythm"),
    ("fractional-scores", [word("ZERO", 6.5, ["Z", "IH1", "R", "OW0"], [2, 0.6, 2, 2])], {"accuracy": 7.5},
     [("ZERO", 6.5, [("IH", None)])], "ZERO"),
]


@pytest.mark.parametrize("case,words,overrides,flagged,advice", CASES, ids=[c[0] for c in CASES])
def test_feedback_table(case, words, overrides, flagged, advice):
    scores = {**sentence(words), **overrides}
    text = feedback_from_scores(scores["text"], scores)
    parsed = parse_feedback(text)
    assert parsed == summarize_scores(scores["text"], scores)
    assert [(w.word, w.score, [(e.phone, e.heard) for e in w.phones]) for w in parsed.words] == flagged
    assert advice in parsed.advice
    assert parsed.accuracy == float(scores["accuracy"]) and parsed.prosody == float(scores["prosodic"])
    assert len(text.splitlines()) == 3
    if not flagged:
        assert "Words to practise: none" in text


MODEL_ANSWERS = [
    # (id, text, scores, flagged words, phone errors)
    ("exact", "Scores (0-10): accuracy 6, fluency 7, prosody 7, total 5\nWords to practise: GREY 0/10 (G as F)\n"
     "Advice: x", dict(accuracy=6, fluency=7, prosody=7, total=5), ["GREY"], [("GREY", "G", "F")]),
    ("markdown-and-case", "**Scores:** Accuracy: 6/10, Fluency: 7/10, Prosodic: 7/10, Total: 5/10\n"
     "- **Words to practice:** grey (0/10): g -> f, r unclear\n**Advice:** try again",
     dict(accuracy=6, fluency=7, prosody=7, total=5), ["GREY"], [("GREY", "G", "F"), ("GREY", "R", UNCLEAR)]),
    ("comma-separated-words", "Scores (0-10): accuracy 8, total 7\nWords to practise: ZERO 6/10, TWO 5/10 (T missing)",
     dict(accuracy=8, fluency=None, prosody=None, total=7), ["ZERO", "TWO"], [("TWO", "T", MISSING)]),
    ("out-of-and-decimal-comma", "Scores: accuracy 7,5 out of 10, fluency 9 out of 10\nWords to practise: none.",
     dict(accuracy=7.5, fluency=9, prosody=None, total=None), [], []),
    ("word-without-score", "Words to practise: GREY (EY as IH, R weak)",
     dict(accuracy=None, fluency=None, prosody=None, total=None), ["GREY"], [("GREY", "EY", "IH"), ("GREY", "R", None)]),
    ("bulleted-words", "Scores (0-10): total 4\nWords to practise:\n- GREY 0/10 (G as F)\n* CAT 4/10\nAdvice: x",
     dict(accuracy=None, fluency=None, prosody=None, total=4), ["GREY", "CAT"], [("GREY", "G", "F")]),
    ("missing-lines", "Nice job, keep going!", dict(accuracy=None, fluency=None, prosody=None, total=None), [], []),
    ("empty", "", dict(accuracy=None, fluency=None, prosody=None, total=None), [], []),
    ("garbage-numbers", "Scores (0-10): accuracy 60, fluency seven\nWords to practise: ((;;",
     dict(accuracy=None, fluency=None, prosody=None, total=None), [], []),
    ("unparseable-phone-ignored", "Words to practise: CAT 4/10 (the end sounds odd, T as D)",
     dict(accuracy=None, fluency=None, prosody=None, total=None), ["CAT"], [("CAT", "T", "D")]),
]


@pytest.mark.parametrize("case,text,scores,words,phones", MODEL_ANSWERS, ids=[c[0] for c in MODEL_ANSWERS])
def test_parse_tolerates_model_answers(case, text, scores, words, phones):
    parsed = parse_feedback(text)
    assert parsed.scores == scores
    assert parsed.flagged_words == words
    assert parsed.phone_errors == phones


def test_parse_none_and_non_string():
    assert parse_feedback(None) == ParsedFeedback()
    assert parse_feedback(42) == ParsedFeedback()  # type: ignore[arg-type]


def test_render_roundtrip_of_handmade_structure():
    parsed = ParsedFeedback(
        accuracy=5, fluency=6.5, prosody=None, total=5,
        words=[FlaggedWord("KATE'S", 4, [PhoneError("Z", MISSING), PhoneError("EY", None)]), FlaggedWord("GOT", 6)],
        advice='In "KATE\'S", do not drop the Z.',
    )
    text = render_feedback(parsed)
    assert "prosody" not in text
    assert parse_feedback(text) == parsed


@pytest.mark.parametrize("bad", [None, [], {"text": "x"}], ids=["none", "list", "no-scores"])
def test_bad_scores_raise(bad):
    with pytest.raises(SampleError, match="scores"):
        feedback_from_scores("x", bad)
