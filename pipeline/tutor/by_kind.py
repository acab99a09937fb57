"""Evaluation across sample kinds: the tutor's answers for every kind of row, chrF, metrics per kind.

Read-aloud answers keep the expert-score metrics of `pipeline.tutor.evaluate` (Pearson r of the
sentence scores, precision/recall/F1 of flagged words and phones). Free-speech feedback and
dialogue replies have no expert scores and no fixed template, so they are compared with the
reference text by chrF (Popović, "chrF: character n-gram F-score for automatic MT evaluation", WMT
2015), computed by `sacrebleu` (Post, "A Call for Clarity in Reporting BLEU Scores", WMT 2018)
with its defaults: character n-grams up to 6, no word n-grams, beta = 2 (recall weighted twice),
on a 0-100 scale. chrF is reported for every kind, so the report splits every metric by kind.

A dialogue row is answered turn by turn: for each tutor turn, the tutor is given the reference
history before it (learner clips and text, earlier reference tutor turns), the way training saw
the conversation, and its reply is compared with that turn.
"""

from __future__ import annotations

from typing import Any, Sequence

from pipeline.conversation.messages import KINDS, LEARNER, TUTOR


def chrf(answers: Sequence[str], references: Sequence[str]) -> dict[str, Any]:
    """Corpus chrF and the mean sentence chrF of `answers` against `references` (0-100; sacrebleu's
    `CHRF()` defaults: char order 6, word order 0, beta 2).

    Returns `{"n", "chrf", "sentence_mean"}`; the scores are None when `n` is 0.
    Raises `ValueError` when the lengths differ.
    """
    from sacrebleu.metrics import CHRF

    if len(answers) != len(references):
        raise ValueError(f"chrf needs one reference per answer, got {len(answers)} answers and {len(references)} references")
    if not answers:
        return {"n": 0, "chrf": None, "sentence_mean": None}
    metric = CHRF()
    corpus = metric.corpus_score(list(answers), [list(references)]).score
    sentences = [metric.sentence_score(a, [r]).score for a, r in zip(answers, references)]
    return {"n": len(answers), "chrf": round(corpus, 2), "sentence_mean": round(sum(sentences) / len(sentences), 2)}


def answer_row(tutor: Any, row: dict, *, max_new_tokens: int, stop: Any = None) -> list[dict]:
    """The tutor's answers for one dataset row (`pipeline.data.rows` layout), one per supervised answer.

    `stop`: optional `() -> bool` passed to the tutor (ends an answer early, to cancel).

    Returns `[{"id", "kind", "turn", "target_text", "prompt", "answer", "reference_feedback", "chrf"}]`:
    one entry for a read-aloud or free-speech row (`turn` None), one per tutor turn of a dialogue
    (`turn` = its index among the dialogue's turns); `chrf` is the answer's sentence chrF.
    """
    from pipeline.data.rows import row_clips, row_kind, row_turns

    kind = row_kind(row)
    base = {"id": row["id"], "kind": kind, "turn": None, "target_text": row.get("target_text") or "",
            "prompt": row.get("prompt") or ""}
    if kind == "read_aloud":
        answer = tutor.feedback(row["audio_wav"], row["target_text"], max_new_tokens=max_new_tokens, stop=stop)
        return [_scored(dict(base, answer=answer.text, reference_feedback=row.get("feedback") or ""))]
    if kind == "free_speech":
        answer = tutor.free_speech_feedback(row["audio_wav"], row["prompt"], max_new_tokens=max_new_tokens, stop=stop)
        return [_scored(dict(base, answer=answer.text, reference_feedback=row.get("feedback") or ""))]
    clips = row_clips(row)
    out, history = [], []
    for index, turn in enumerate(row_turns(row)):
        if turn.get("role") == TUTOR and history:
            reply = tutor.dialogue_reply(history, max_new_tokens=max_new_tokens, stop=stop)
            out.append(_scored(dict(base, turn=index, answer=reply.text, reference_feedback=turn.get("text") or "")))
        if turn.get("role") == LEARNER:
            clip = turn.get("clip")
            history.append({"role": LEARNER, "text": turn.get("text"),
                            "audio": (16000, clips[clip]) if clip is not None else None})
        else:
            history.append({"role": TUTOR, "text": turn.get("text")})
    return out


def _scored(answer: dict) -> dict:
    """`answer` with its sentence chrF against its reference (`chrf`, 0-100)."""
    from sacrebleu.metrics import CHRF

    return dict(answer, chrf=round(CHRF().sentence_score(answer["answer"], [answer["reference_feedback"]]).score, 2))


def metrics_by_kind(answers: Sequence[dict], read_aloud_expert: dict | None = None) -> dict[str, dict]:
    """Every metric split by kind, for the kinds present in `answers` (`answer_row` entries).

    Each kind gets `{"answers": n, "chrf": chrf(...)}`; read-aloud also gets `read_aloud_expert`
    (the expert-score metrics of `pipeline.tutor.metrics.evaluate_answers` over the read-aloud
    rows, computed by the caller) under `"expert"`.
    """
    out: dict[str, dict] = {}
    for kind in KINDS:
        mine = [a for a in answers if a.get("kind", "read_aloud") == kind]
        if not mine:
            continue
        out[kind] = {"answers": len(mine),
                     "chrf": chrf([a["answer"] for a in mine], [a["reference_feedback"] for a in mine])}
        if kind == "read_aloud" and read_aloud_expert is not None:
            out[kind]["expert"] = read_aloud_expert
    return out


def by_kind_summary(by_kind: dict[str, dict]) -> str:
    """One line per kind: answers and chrF (the expert metrics of read-aloud are printed by `evaluate.summary`)."""
    lines = ["per kind (chrF 0-100 against the reference feedback, sacrebleu):"]
    for kind, metrics in by_kind.items():
        c = metrics["chrf"]
        lines.append(f"  {kind:<11} {metrics['answers']} answers, chrF {c['chrf'] if c['chrf'] is not None else 'n/a'} "
                     f"(mean per answer {c['sentence_mean'] if c['sentence_mean'] is not None else 'n/a'})")
    return "\n".join(lines)
