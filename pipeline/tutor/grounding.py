"""Does the tutor hear the recording? Grounding probes, and who and what it blames.

Agreement with the experts (PCC, SCC, F1: `pipeline.tutor.metrics`) does not show that a tutor
listens. Speech LLMs used as pronunciation tutors have been found to follow the model's priors
rather than the recording: the same phones blamed whatever the learner said, and reasoning that
reads well but supports the wrong rating ("prior over evidence"); a fine-tuned multimodal LLM
reached PCC ~0.9 against the experts on speechocean762 with Spearman only ~0.6 (Wang et al. 2025,
arXiv 2509.15701). So, for every read-aloud clip of the eval split, the tutor is also asked with
the evidence changed and nothing else:

- `silence`: the clip replaced by low white noise of the same length (`PROBE_NOISE_DBFS`; digital
  silence would be refused by the audio checks before the model hears it). A tutor whose answer
  does not change has not used the recording.
- `other_clip`: another learner's clip of the same sentence (speechocean762 has many readers per
  sentence), found anywhere in the built dataset. Besides whether the answer changes, the
  **score sign agreement**: over pairs whose experts' sentence scores differ, how often the tutor's
  sentence score moves the same way (1), the other way (0), or not at all (0.5: a tie, and an
  unparsed answer, which gives no score, counts as a tie). A tutor that ignores the audio scores
  both clips alike and lands on 0.5, chance; one that copies the experts lands on 1. Its 95 %
  interval is a percentile bootstrap over pairs (`pipeline.tutor.metrics`' resampler).
- `other_sentence`: the learner's clip with another item's target sentence. Reports whether the
  answer changes and `flagged_not_in_sentence`, the fraction of answers that flag a word that is not
  in the sentence the tutor was given (a tutor inventing words to practise).

`answers_differ` compares answers after collapsing whitespace and case. The sentence score is the
template's `total`, or `accuracy` where a reference has no total.

Also here, on the ordinary answers: `phone_table` (for each ARPAbet phone, how often the tutor
flags it against the experts: precision, recall, counts, and in how many clips) so a tutor that
blames TH everywhere shows; and `learner_table` (per learner: the error of the tutor's sentence
score, its bias, word F1), the learners it judges worst first.

This module is pure (no model, no files) apart from `probe_noise`, which makes the noise clip;
`pipeline.tutor.evaluate` asks the tutor and saves the results.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from typing import Any, Sequence

import numpy as np

from pipeline.conversation.feedback import ParsedFeedback, parse_feedback
from pipeline.units import plural
from pipeline.tutor.metrics import (
    BOOTSTRAP_RESAMPLES,
    BOOTSTRAP_SEED,
    _bootstrap_indices,
    _interval,
    precision_recall_f1,
    reference_from,
    score_clip,
)

PROBES = ("silence", "other_clip", "other_sentence")
"""The grounding probes, in the order they are asked."""
PROBE_NOISE_DBFS = -45.0
"""RMS level of the `silence` probe's white noise, dBFS: below anything spoken, above the audio
checks' -50 dBFS silence threshold (`pipeline.data.audio.SILENCE_DBFS`), so the model hears it."""
PROBE_NOISE_SEED = 0
CHANCE = 0.5
"""Score sign agreement of a tutor that does not listen (every pair a tie)."""


# ----------------------------------------------------------------------------- building the probes


def probe_noise(num_samples: int, *, level_dbfs: float = PROBE_NOISE_DBFS, seed: int = PROBE_NOISE_SEED) -> np.ndarray:
    """White Gaussian noise of `num_samples` samples (float32, 16 kHz by the caller's convention) at an
    RMS level of `level_dbfs` dBFS (full scale = 1.0): the `silence` probe's stand-in for the clip.

    Raises `ValueError` when `num_samples` < 1.
    """
    if num_samples < 1:
        raise ValueError(f"probe_noise needs at least one sample, got {num_samples}")
    noise = np.random.default_rng(seed).standard_normal(num_samples)
    noise *= 10 ** (level_dbfs / 20) / max(float(np.sqrt(np.mean(noise ** 2))), 1e-12)
    return noise.astype(np.float32)


def sentence_key(text: str) -> str:
    """A sentence compared as spoken: upper case, punctuation dropped, single spaces."""
    return " ".join(re.sub(r"[^\w' ]+", " ", str(text or "").upper()).split())


def plan_probes(eval_rows: Sequence[dict], pool: Sequence[dict]) -> dict[str, dict]:
    """Which other clip and which other sentence each eval clip is probed with.

    Args:
        eval_rows: the read-aloud eval rows, in order: dicts with `id`, `speaker`, `target_text`.
        pool: every read-aloud row of the built dataset (eval and train) with `id`, `speaker`,
            `target_text`, `split`; the other learner's clip is taken from here.

    Returns:
        `{row id: {"other_clip": partner id or None, "other_sentence": text or None}}`. The partner
        is another learner's reading of the same sentence (`sentence_key`), preferring the eval split,
        then the lowest id (deterministic); None where there is none. The other sentence is the next
        eval row's (cyclically) whose sentence differs; None when every eval row reads the same.
    """
    by_sentence: dict[str, list[dict]] = defaultdict(list)
    for row in sorted(pool, key=lambda r: (r.get("split") != "eval", str(r["id"]))):
        by_sentence[sentence_key(row["target_text"])].append(row)
    plan = {}
    for index, row in enumerate(eval_rows):
        key = sentence_key(row["target_text"])
        speaker = (row.get("speaker") or "").strip()
        partner = next((p for p in by_sentence.get(key, []) if p["id"] != row["id"]
                        and (not speaker or (p.get("speaker") or "").strip() != speaker)), None)
        other = None
        for step in range(1, len(eval_rows)):
            candidate = eval_rows[(index + step) % len(eval_rows)]
            if sentence_key(candidate["target_text"]) != key:
                other = candidate["target_text"]
                break
        plan[str(row["id"])] = {"other_clip": partner["id"] if partner else None, "other_sentence": other}
    return plan


# ----------------------------------------------------------------------------- scoring the probes


def answers_differ(first: Any, second: Any) -> bool:
    """Whether two answers say different things: compared after collapsing whitespace and case."""
    def norm(text: Any) -> str:
        return " ".join(str(text or "").split()).casefold()

    return norm(first) != norm(second)


def sentence_score(feedback: ParsedFeedback) -> float | None:
    """The template's `total` sentence score (0-10), else its `accuracy`, else None."""
    return feedback.total if feedback.total is not None else feedback.accuracy


def _tutor_score(answer: str, reference: Any, target_text: str) -> float | None:
    """The tutor's sentence score when its answer parses against `reference` (`score_clip`'s rule)."""
    record = score_clip(answer, reference, target_text=target_text)
    return sentence_score(parse_feedback(answer)) if record["parsed"] else None


def _sign(value: float) -> int:
    return (value > 0) - (value < 0)


def sign_agreement(tutor_first: float | None, tutor_second: float | None, expert_difference: float) -> float:
    """1 when the tutor's score moves from the first clip to the second the way the experts' does
    (`expert_difference` = second - first, non-zero), 0 when it moves the other way, 0.5 when it does
    not move or a score is missing (no direction: as likely right as wrong)."""
    if tutor_first is None or tutor_second is None or tutor_first == tutor_second:
        return CHANCE
    return 1.0 if _sign(tutor_second - tutor_first) == _sign(expert_difference) else 0.0


def words_not_in(feedback: ParsedFeedback, sentence: str) -> list[str]:
    """Flagged words of `feedback` that are not words of `sentence` (compared by `sentence_key`)."""
    words = set(sentence_key(sentence).split())
    return [w.word for w in feedback.words if sentence_key(w.word) and sentence_key(w.word) not in words]


def _fraction(count: float, n: int) -> float | None:
    return round(count / n, 6) if n else None


def grounding_metrics(records: Sequence[dict], *, resamples: int = BOOTSTRAP_RESAMPLES,
                      seed: int = BOOTSTRAP_SEED) -> dict:
    """The grounding figures of one tutor.

    Args:
        records: one per probed clip: `{"id", "target_text", "reference", "answer", "silence":
            {"answer"} | None, "other_clip": {"id", "reference", "answer"} | None, "other_sentence":
            {"target_text", "answer"} | None}`. `reference` is anything
            `pipeline.tutor.metrics.reference_from` accepts (expert scores, a template text).
        resamples, seed: of the bootstrap interval of the score sign agreement.

    Returns:
        `{"silence": {"n", "changed_fraction"}, "other_clip": {"n", "changed_fraction",
        "score_pairs", "score_sign_agreement", "score_sign_agreement_ci"}, "other_sentence": {"n",
        "changed_fraction", "flagged_not_in_sentence"}}`: fractions in [0, 1], None where n is 0.
        `score_pairs` counts the pairs whose experts' sentence scores differ (the agreement's n). No figure for
        data that is missing: the agreement is None (0 pairs) when no pair's two tutor scores could be read, and
        `flagged_not_in_sentence` None when none of the wrong-sentence answers could be read.
    """
    silence = [r for r in records if r.get("silence")]
    other = [r for r in records if r.get("other_clip")]
    swapped = [r for r in records if r.get("other_sentence")]
    agreements, readable_pairs = [], 0
    for r in other:
        partner = r["other_clip"]
        expert_first = sentence_score(reference_from(r["reference"], r["target_text"]))
        expert_second = sentence_score(reference_from(partner["reference"], r["target_text"]))
        if expert_first is None or expert_second is None or expert_first == expert_second:
            continue
        first = _tutor_score(r["answer"], r["reference"], r["target_text"])
        second = _tutor_score(partner["answer"], partner["reference"], r["target_text"])
        readable_pairs += first is not None and second is not None
        agreements.append(sign_agreement(first, second, expert_second - expert_first))
    interval = None
    if len(agreements) >= 2:
        values = np.asarray(agreements)[_bootstrap_indices(len(agreements), resamples, seed)].mean(axis=1)
        interval = _interval(values)
    if not readable_pairs:  # no pair's two scores could be read: no figure (0.5 "chance" would be one for no data)
        agreements, interval = [], None
    swapped_read = [(parse_feedback(r["other_sentence"]["answer"]), r["other_sentence"]["target_text"]) for r in swapped]
    invented = sum(1 for parsed, sentence in swapped_read if words_not_in(parsed, sentence))
    read_any = any(parsed.words or any(v is not None for v in parsed.scores.values()) for parsed, _ in swapped_read)
    return {
        "silence": {"n": len(silence),
                    "changed_fraction": _fraction(sum(answers_differ(r["answer"], r["silence"]["answer"]) for r in silence),
                                                  len(silence))},
        "other_clip": {"n": len(other),
                       "changed_fraction": _fraction(sum(answers_differ(r["answer"], r["other_clip"]["answer"])
                                                         for r in other), len(other)),
                       "score_pairs": len(agreements),
                       "score_sign_agreement": _fraction(sum(agreements), len(agreements)),
                       "score_sign_agreement_ci": interval},
        "other_sentence": {"n": len(swapped),
                           "changed_fraction": _fraction(sum(answers_differ(r["answer"], r["other_sentence"]["answer"])
                                                             for r in swapped), len(swapped)),
                           "flagged_not_in_sentence": _fraction(invented, len(swapped)) if read_any else None},
    }


def _percent(value: float | None) -> str:
    return f"{100 * value:.0f} %"


def grounding_text(grounding: dict | None) -> str | None:
    """The grounding figures in a teacher's words, e.g. "The tutor's answers change with the recording
    in 84 % of clips; its scores follow the experts' differences in 71 % (chance is 50 %)."; None
    when there are none."""
    if not grounding:
        return None
    silence, other, swapped = (grounding.get(k) or {} for k in PROBES)
    parts = []
    changed = [(p["changed_fraction"], p["n"]) for p in (silence, other) if p.get("changed_fraction") is not None]
    if changed:
        fraction = sum(f * n for f, n in changed) / sum(n for _, n in changed)
        parts.append(f"The tutor's answers change with the recording in {_percent(fraction)} of clips "
                     f"(noise instead of the learner: {_percent(silence['changed_fraction']) if silence.get('n') else 'not tried'}; "
                     f"another learner reading the same sentence: "
                     f"{_percent(other['changed_fraction']) if other.get('n') else 'no such recording'})")
    if other.get("score_sign_agreement") is not None:
        ci = other.get("score_sign_agreement_ci")
        unsure = ci is not None and ci[0] <= CHANCE <= ci[1]
        parts.append(f"its scores follow the experts' differences between two learners in "
                     f"{_percent(other['score_sign_agreement'])} of {other['score_pairs']} pairs (chance is 50 %"
                     + ("; with so few pairs this is not yet told apart from chance" if unsure or ci is None else "") + ")")
    if swapped.get("flagged_not_in_sentence") is not None:
        parts.append(f"given the wrong sentence, it named a word that is not in it in "
                     f"{_percent(swapped['flagged_not_in_sentence'])} of answers")
    if not parts:
        return None
    text = "; ".join(parts)
    return text[0].upper() + text[1:] + "."


# ----------------------------------------------------------------------------- what and whom it blames


def phone_table(items: Sequence[dict]) -> list[dict]:
    """How often the tutor flags each ARPAbet phone against the experts.

    Args:
        items: `{"answer", "reference", "target_text"}` per clip (as `evaluate_answers` takes them);
            an unparsed answer flags nothing (`score_clip`'s rule).

    Returns:
        One row per phone either side flags, most flagged by the tutor first: `{"phone",
        "tutor_flags", "expert_flags", "agreed", "precision", "recall", "tutor_clips", "expert_clips",
        "clips"}`; flags are (word, phone) pairs compared per clip as multisets, `*_clips` count the
        clips where that side flags the phone at least once, `clips` all clips.
    """
    tutor, expert, agreed = Counter(), Counter(), Counter()
    tutor_clips, expert_clips = Counter(), Counter()
    for item in items:
        record = score_clip(item.get("answer"), item.get("reference"), target_text=item.get("target_text") or "")
        predicted = Counter((w, p) for w, p, _ in parse_feedback(item.get("answer")).phone_errors) if record["parsed"] else Counter()
        wanted = Counter((w, p) for w, p, _ in reference_from(item.get("reference"), item.get("target_text") or "").phone_errors)
        common = predicted & wanted
        for counter, pairs in ((tutor, predicted), (expert, wanted), (agreed, common)):
            for (_, phone), count in pairs.items():
                counter[phone] += count
        tutor_clips.update({p for _, p in predicted})
        expert_clips.update({p for _, p in wanted})
    rows = []
    for phone in sorted(set(tutor) | set(expert), key=lambda p: (-tutor[p], -expert[p], p)):
        scores = precision_recall_f1(agreed[phone], tutor[phone], expert[phone])
        rows.append({"phone": phone, "tutor_flags": tutor[phone], "expert_flags": expert[phone], "agreed": agreed[phone],
                     "precision": None if scores["precision"] is None else round(scores["precision"], 6),
                     "recall": None if scores["recall"] is None else round(scores["recall"], 6),
                     "tutor_clips": tutor_clips[phone], "expert_clips": expert_clips[phone], "clips": len(items)})
    return rows


def overblamed_phones(table: Sequence[dict], *, min_clips: int = 3, ratio: float = 2.0) -> list[dict]:
    """Rows of `phone_table` the tutor flags in at least `min_clips` clips and in at least `ratio` times
    as many clips as the experts do: the phones it blames whatever it hears."""
    return [row for row in table
            if row["tutor_clips"] >= min_clips and row["tutor_clips"] >= ratio * max(row["expert_clips"], 1)]


def learner_table(per_clip: Sequence[dict], speakers: dict[str, str]) -> list[dict]:
    """How well the tutor judges each learner, the worst judged first.

    Args:
        per_clip: `score_clip` records (`evaluate_answers(...)["per_clip"]`).
        speakers: clip id -> learner (empty names are grouped as "unknown").

    Returns:
        `[{"speaker", "clips", "unparsed", "total_mae", "total_bias", "words_f1"}]`: the mean absolute
        error of the tutor's total score against the experts' (0-10) and its mean signed error
        (tutor - expert: positive is lenient, negative harsh) over the parsed answers, and the word F1.
        Sorted by `total_mae`, largest first; learners without a parsed total last.
    """
    groups: dict[str, list[dict]] = defaultdict(list)
    for record in per_clip:
        groups[(speakers.get(str(record.get("id"))) or "").strip() or "unknown"].append(record)
    rows = []
    for speaker, records in groups.items():
        pairs = [(r["scores"]["total"]["tutor"], r["scores"]["total"]["expert"]) for r in records
                 if r["scores"]["total"]["tutor"] is not None and r["scores"]["total"]["expert"] is not None]
        totals = [sum(r["words"][k] for r in records) for k in ("true_positives", "predicted", "expected")]
        rows.append({
            "speaker": speaker,
            "clips": len(records),
            "unparsed": sum(1 for r in records if not r["parsed"]),
            "total_mae": round(sum(abs(t - e) for t, e in pairs) / len(pairs), 6) if pairs else None,
            "total_bias": round(sum(t - e for t, e in pairs) / len(pairs), 6) if pairs else None,
            "words_f1": precision_recall_f1(*totals)["f1"],
        })
    return sorted(rows, key=lambda r: (r["total_mae"] is None, -(r["total_mae"] or 0), r["speaker"]))


def blame_summary(result: dict, *, top: int = 5) -> str:
    """Lines for an evaluation result's `per_phone` and `per_learner` tables: the phones the tutor
    flags most (with the experts' counts), any phone it blames whatever it hears
    (`overblamed_phones`), and the learners it judges worst."""
    lines = []
    table = result.get("per_phone") or []
    flagged = [row for row in table if row["tutor_clips"]]
    if table and not flagged:
        lines.append(f"phones the tutor flags: none, in {table[0]['clips']} clips (the experts flag "
                     + ", ".join(f"{row['phone']} in {row['expert_clips']}" for row in table[:top]) + ")")
    if flagged:
        lines.append("phones the tutor flags most (tutor / experts, in how many clips of "
                     f"{table[0]['clips']}; precision, recall):")
        for row in flagged[:top]:
            p = "n/a" if row["precision"] is None else f"{row['precision']:.2f}"
            r = "n/a" if row["recall"] is None else f"{row['recall']:.2f}"
            lines.append(f"  {row['phone']:<3} {row['tutor_clips']} / {row['expert_clips']} clips; precision {p}, recall {r}")
        for row in overblamed_phones(table):
            lines.append(f"  ! {row['phone']} is flagged in {row['tutor_clips']} clips, the experts flag it in "
                         f"{row['expert_clips']}: the tutor may blame it whatever it hears")
    learners = [row for row in result.get("per_learner") or [] if row["total_mae"] is not None]
    if learners:
        lines.append("learners the tutor judges worst (mean error of the total score, 0-10; + lenient, - harsh):")
        for row in learners[:top]:
            lines.append(f"  {row['speaker']}: off by {row['total_mae']:.1f} on average ({row['total_bias']:+.1f}) "
                         f"over {plural(row['clips'], 'clip')}")
    return "\n".join(lines)
