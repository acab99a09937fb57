"""Honest metrics for a tutor's answers against the experts: every answer counts.

Each answer is read with `pipeline.conversation.feedback.parse_feedback`; the reference is the experts'
scores of the clip (speechocean762 layout, summarised with `feedback.summarize_scores`, the rule that
wrote the training feedback) or a reference feedback text parsed the same way.

An answer is **unparsed** when it lacks a part of the template the reference carries: a sentence
score the reference has (accuracy, fluency, prosody, total), or the `Words to practise:` line
(`none` is a list; a missing line is not). A reference with no template part at all is judged
against the full template. The unparsed fraction is a headline figure, and an unparsed answer is
never left out silently:

- Sentence scores (0-10): Pearson's r (PCC), Spearman's rank correlation (SCC) and the mean absolute
  error over the PARSED answers, with their count `n` and `coverage` = n / clips whose reference
  has that score. PCC alone overstates agreement (a fine-tuned multimodal LLM on speechocean762:
  PCC 0.9 but SCC ~0.6, Wang et al. 2025, arXiv 2509.15701); GOPT reports PCC 0.742 for the
  utterance total (Gong et al., ICASSP 2022). A correlation is null, with its `reason`, from fewer
  than `MIN_CORRELATION_PAIRS` parsed answers (r from 2 points is always +-1) or when one side is
  constant.
- Flagged words and phone errors: micro-averaged precision, recall and F1 over all clips; words are
  compared per clip, upper-cased, as multisets, phone errors as (word, phone) pairs. An unparsed
  answer flags nothing and misses every word the experts flagged (it counts against recall). When no
  answer was parsed at all, precision, recall and F1 are None with `reason` `NOT_MEASURABLE` (a 0 would
  be a figure for data that is missing).
- 95 % intervals: percentile bootstrap over clips (Efron & Tibshirani 1993, ch. 13),
  `BOOTSTRAP_RESAMPLES` resamples with a fixed seed, for PCC and SCC (resampling the parsed pairs)
  and F1 (resampling every clip). Resamples where the statistic is undefined are dropped; the
  interval is null when more than 10 % are.

Every clip carries a `kind` (default `read_aloud`, the only kind scored with this template today):
`aggregate` takes any list of per-clip records, so metrics can be split by kind (`by_kind`).
This module is pure (no model, no files); `pipeline.tutor.evaluate` runs the tutor and saves results.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from typing import Any, Iterable, Sequence

from pipeline.units import plural
from pipeline.conversation.feedback import (
    SENTENCE_KEYS,
    ParsedFeedback,
    has_words_line,
    parse_feedback,
    render_feedback,
    summarize_scores,
)

DEFAULT_KIND = "read_aloud"
MIN_CORRELATION_PAIRS = 3
"""Fewest parsed answers a correlation is computed from (with 2 points r is +-1 whatever they are)."""
NOT_MEASURABLE = "not measurable: none of the answers could be read"
"""The reason every expert figure gives when no answer was parsed (a recall or F1 of 0 would be a figure for
missing data)."""
BOOTSTRAP_RESAMPLES = 1000
BOOTSTRAP_SEED = 0
_MAX_UNDEFINED_RESAMPLES = 0.10


def pearson(xs: Sequence[float], ys: Sequence[float]) -> float | None:
    """Pearson correlation coefficient r = cov(x, y) / (std(x) std(y)), in [-1, 1] (`scipy.stats.pearsonr`).

    Returns None when it is undefined: fewer than 2 pairs, or either side constant.
    Raises `ValueError` when the lengths differ.
    """
    return _correlation(xs, ys, "pearson")


def spearman(xs: Sequence[float], ys: Sequence[float]) -> float | None:
    """Spearman's rank correlation (Pearson's r of the ranks, ties averaged; `scipy.stats.spearmanr`).

    Returns None when undefined (fewer than 2 pairs, or either side constant). Raises `ValueError`
    when the lengths differ.
    """
    return _correlation(xs, ys, "spearman")


def _correlation(xs: Sequence[float], ys: Sequence[float], method: str) -> float | None:
    if len(xs) != len(ys):
        raise ValueError(f"{method} needs equal lengths, got {len(xs)} and {len(ys)}")
    if len(xs) < 2 or len(set(xs)) < 2 or len(set(ys)) < 2:
        return None
    from scipy import stats

    result = stats.pearsonr(xs, ys) if method == "pearson" else stats.spearmanr(xs, ys)
    value = float(result.statistic)
    return None if math.isnan(value) else max(-1.0, min(1.0, value))


def precision_recall_f1(true_positives: int, predicted: int, expected: int) -> dict[str, Any]:
    """Precision = TP / predicted, recall = TP / expected, F1 = their harmonic mean = 2 TP / (predicted + expected).

    A ratio with a zero denominator is None (undefined). F1 is None when neither side flags
    anything (no evidence either way), and 0.0 when only one side flags something or precision and
    recall are both 0.
    """
    precision = true_positives / predicted if predicted else None
    recall = true_positives / expected if expected else None
    f1: float | None
    if predicted == 0 and expected == 0:
        f1 = None
    elif precision is None or recall is None or precision + recall == 0:
        f1 = 0.0
    else:
        f1 = 2 * precision * recall / (precision + recall)
    return {
        "precision": precision,
        "recall": recall,
        "f1": f1,
        "true_positives": true_positives,
        "predicted": predicted,
        "expected": expected,
    }


def _word_key(word: str) -> str:
    import re

    return re.sub(r"[^\w']+", "", word.upper())


def reference_from(reference: Any, target_text: str = "") -> ParsedFeedback:
    """The expected content for a clip.

    `reference` is a `ParsedFeedback`, a dict of expert scores (speechocean762 layout, or its JSON
    string as stored in the dataset's `scores` column), or a reference feedback text.
    """
    if isinstance(reference, ParsedFeedback):
        return reference
    if isinstance(reference, str) and reference.strip().startswith("{"):
        try:
            reference = json.loads(reference)
        except json.JSONDecodeError:
            pass
    if isinstance(reference, dict):
        return summarize_scores(target_text, reference)
    return parse_feedback(reference if isinstance(reference, str) else "")


def _expects_words_line(reference: Any) -> bool:
    """Whether the reference carries a `Words to practise:` line (expert scores always do)."""
    if isinstance(reference, (ParsedFeedback, dict)):
        return True
    if isinstance(reference, str) and reference.strip().startswith("{"):
        return True
    return has_words_line(reference if isinstance(reference, str) else "")


def score_clip(answer: Any, reference: Any, *, target_text: str = "", clip_id: Any = None,
               kind: str | None = None, reference_feedback: str | None = None) -> dict:
    """One clip's record: what the tutor said against what the experts say.

    Args:
        answer: the tutor's answer text (anything else counts as an empty answer).
        reference: expert scores (dict or JSON string), a reference feedback text, or a `ParsedFeedback`.
        target_text: the sentence read (needed to summarise expert scores).
        clip_id, kind: carried into the record (`kind` defaults to `read_aloud`).
        reference_feedback: the reference text to show; default: the template written from `reference`.

    Returns:
        `{"id", "kind", "target_text", "answer", "reference_feedback", "parsed", "unparsed_reason",
        "scores": {aspect: {"tutor", "expert"}}, "words": {"true_positives", "predicted", "expected"},
        "phones": {...}, "total_error"}`. `tutor` scores are None when the answer is unparsed (it
        is judged as a whole); `total_error` = |tutor total - expert total| (None when either is missing).
    """
    text = answer if isinstance(answer, str) else ""
    expected = reference_from(reference, target_text)
    predicted = parse_feedback(text)
    required = [key for key in SENTENCE_KEYS if expected.scores[key] is not None]
    wants_words = _expects_words_line(reference)
    if not required and not wants_words and not expected.words:  # nothing in the template: judge against all of it
        required, wants_words = list(SENTENCE_KEYS), True
    missing = [f"{key} score" for key in required if predicted.scores[key] is None]
    if wants_words and not has_words_line(text):
        missing.append("the 'Words to practise' line")
    parsed = not missing
    record: dict[str, Any] = {
        "id": clip_id,
        "kind": kind or DEFAULT_KIND,
        "target_text": target_text,
        "answer": text,
        "reference_feedback": reference_feedback if reference_feedback is not None else (
            reference if isinstance(reference, str) and not reference.strip().startswith("{") else render_feedback(expected)),
        "parsed": parsed,
        "unparsed_reason": None if parsed else ("no answer" if not text.strip() else "missing " + ", ".join(missing)),
        "scores": {key: {"tutor": predicted.scores[key] if parsed else None, "expert": expected.scores[key]}
                   for key in SENTENCE_KEYS},
    }
    for name, got, want in (
        ("words", [_word_key(w) for w in predicted.flagged_words], [_word_key(w) for w in expected.flagged_words]),
        ("phones", [(_word_key(w), ph) for w, ph, _ in predicted.phone_errors],
         [(_word_key(w), ph) for w, ph, _ in expected.phone_errors]),
    ):
        got_c = Counter(got) if parsed else Counter()  # an unparsed answer flags nothing: every expert flag is missed
        want_c = Counter(want)
        record[name] = {"true_positives": sum((got_c & want_c).values()), "predicted": sum(got_c.values()),
                        "expected": sum(want_c.values())}
    total = record["scores"]["total"]
    record["total_error"] = (abs(total["tutor"] - total["expert"])
                             if total["tutor"] is not None and total["expert"] is not None else None)
    return record


# ----------------------------------------------------------------------------- aggregation


def _bootstrap_indices(n: int, resamples: int, seed: int):
    import numpy as np

    return np.random.default_rng(seed).integers(0, n, size=(resamples, n))


NO_LIKELY_RANGE = "no likely range: too few clips, or scores that hardly vary"
"""Said where an interval is None (`correlation_intervals`: under `MIN_CORRELATION_PAIRS` pairs, or over 10 % of the
resamples undefined because one side's scores are (nearly) all the same)."""


def _interval(values) -> list[float] | None:
    """The 2.5th and 97.5th percentiles of the defined bootstrap values; None when over 10 % are undefined."""
    import numpy as np

    defined = values[np.isfinite(values)]
    if values.size == 0 or defined.size < (1 - _MAX_UNDEFINED_RESAMPLES) * values.size:
        return None
    low, high = np.percentile(defined, [2.5, 97.5])
    return [round(float(low), 6), round(float(high), 6)]


def _rowwise_pearson(x, y):
    """Pearson's r of each row of two (B, n) arrays; NaN where a row is constant."""
    import numpy as np

    dx = x - x.mean(axis=1, keepdims=True)
    dy = y - y.mean(axis=1, keepdims=True)
    denominator = np.sqrt((dx * dx).sum(axis=1) * (dy * dy).sum(axis=1))
    with np.errstate(invalid="ignore", divide="ignore"):
        r = (dx * dy).sum(axis=1) / denominator
    r[~(denominator > 1e-12)] = np.nan
    return np.clip(r, -1.0, 1.0)


def correlation_intervals(xs: Sequence[float], ys: Sequence[float], *, resamples: int = BOOTSTRAP_RESAMPLES,
                          seed: int = BOOTSTRAP_SEED) -> tuple[list[float] | None, list[float] | None]:
    """Percentile-bootstrap 95 % intervals `([low, high] or None)` of PCC and SCC, resampling the pairs."""
    import numpy as np
    from scipy.stats import rankdata

    if len(xs) < MIN_CORRELATION_PAIRS:
        return None, None
    index = _bootstrap_indices(len(xs), resamples, seed)
    x, y = np.asarray(xs, dtype=float)[index], np.asarray(ys, dtype=float)[index]
    pcc = _rowwise_pearson(x, y)
    scc = _rowwise_pearson(rankdata(x, axis=1), rankdata(y, axis=1))
    return _interval(pcc), _interval(scc)


def f1_interval(counts: Sequence[tuple[int, int, int]], *, resamples: int = BOOTSTRAP_RESAMPLES,
                seed: int = BOOTSTRAP_SEED) -> list[float] | None:
    """Percentile-bootstrap 95 % interval of micro F1 = 2 TP / (predicted + expected), resampling clips.

    `counts`: one `(true_positives, predicted, expected)` per clip.
    """
    import numpy as np

    if not counts or not any(p or e for _, p, e in counts):
        return None
    table = np.asarray(counts, dtype=float)[_bootstrap_indices(len(counts), resamples, seed)]  # (B, n, 3)
    sums = table.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        f1 = 2 * sums[:, 0] / (sums[:, 1] + sums[:, 2])
    return _interval(f1)


def _score_metrics(records: Sequence[dict], key: str, resamples: int, seed: int) -> dict:
    """PCC, SCC, MAE over the parsed answers for one sentence score, with n, coverage and intervals."""
    with_reference = [r for r in records if r["scores"][key]["expert"] is not None]
    pairs = [(r["scores"][key]["tutor"], r["scores"][key]["expert"]) for r in with_reference
             if r["parsed"] and r["scores"][key]["tutor"] is not None]
    tutor, expert = [p for p, _ in pairs], [e for _, e in pairs]
    n = len(pairs)
    out: dict[str, Any] = {
        "pcc": None, "scc": None,
        "mae": round(math.fsum(abs(a - b) for a, b in pairs) / n, 6) if n else None,
        "n": n,
        "coverage": round(n / len(with_reference), 6) if with_reference else None,
        "pcc_ci": None, "scc_ci": None, "reason": None,
    }
    if not with_reference:
        out["reason"] = f"no reference has a {key} score"
    elif n == 0:
        out["reason"] = NOT_MEASURABLE
    elif n < MIN_CORRELATION_PAIRS:
        out["reason"] = f"only {plural(n, 'parsed answer')} of {len(with_reference)}; a correlation needs {MIN_CORRELATION_PAIRS}"
    elif len(set(tutor)) < 2:
        out["reason"] = f"the tutor gave every parsed answer the same {key} score ({tutor[0]:g})"
    elif len(set(expert)) < 2:
        out["reason"] = f"the experts gave every clip the same {key} score ({expert[0]:g})"
    else:
        out["pcc"], out["scc"] = round(pearson(tutor, expert), 6), round(spearman(tutor, expert), 6)
        out["pcc_ci"], out["scc_ci"] = correlation_intervals(tutor, expert, resamples=resamples, seed=seed)
    return out


def _flag_metrics(records: Sequence[dict], name: str, resamples: int, seed: int) -> dict:
    if records and not any(r["parsed"] for r in records):  # no flag was read: not a recall of 0, no figure at all
        totals = [sum(r[name][k] for r in records) for k in ("true_positives", "predicted", "expected")]
        return {"precision": None, "recall": None, "f1": None, "true_positives": totals[0], "predicted": totals[1],
                "expected": totals[2], "f1_ci": None, "reason": NOT_MEASURABLE}
    counts = [(r[name]["true_positives"], r[name]["predicted"], r[name]["expected"]) for r in records]
    totals = [sum(c[i] for c in counts) for i in range(3)]
    out = precision_recall_f1(*totals)
    out["f1_ci"] = f1_interval(counts, resamples=resamples, seed=seed) if out["f1"] is not None else None
    return out


def aggregate(records: Sequence[dict], *, resamples: int = BOOTSTRAP_RESAMPLES, seed: int = BOOTSTRAP_SEED) -> dict:
    """The headline metrics of per-clip records (`score_clip`), e.g. of one kind.

    Returns:
        `{"clips", "unparsed", "unparsed_fraction", "scores": {aspect: {"pcc", "scc", "mae", "n",
        "coverage", "pcc_ci", "scc_ci", "reason"}}, "words": {"precision", "recall", "f1", "f1_ci",
        "true_positives", "predicted", "expected"}, "phones": {...}}`. Undefined values are None.
    """
    clips = len(records)
    unparsed = sum(1 for r in records if not r["parsed"])
    return {
        "clips": clips,
        "unparsed": unparsed,
        "unparsed_fraction": round(unparsed / clips, 6) if clips else None,
        "scores": {key: _score_metrics(records, key, resamples, seed) for key in SENTENCE_KEYS},
        "words": _flag_metrics(records, "words", resamples, seed),
        "phones": _flag_metrics(records, "phones", resamples, seed),
    }


def evaluate_answers(pairs: Iterable[Any], *, resamples: int = BOOTSTRAP_RESAMPLES, seed: int = BOOTSTRAP_SEED) -> dict:
    """Score tutor answers against references; every answer counts.

    Args:
        pairs: `(answer_text, reference)` tuples, or dicts with `answer` and `reference` (and
            optionally `target_text`, `id`, `kind`, `reference_feedback`). `reference` is anything
            `reference_from` accepts.
        resamples, seed: of the bootstrap intervals.

    Returns:
        `aggregate(...)` of all clips plus `per_clip` (the `score_clip` records, in input order) and,
        when clips of more than one kind are present, `by_kind` ({kind: `aggregate` of its clips}).
    """
    records = []
    for item in pairs:
        if isinstance(item, dict):
            records.append(score_clip(item.get("answer"), item.get("reference"), target_text=item.get("target_text") or "",
                                      clip_id=item.get("id"), kind=item.get("kind"),
                                      reference_feedback=item.get("reference_feedback")))
        else:
            records.append(score_clip(item[0], item[1]))
    result = aggregate(records, resamples=resamples, seed=seed)
    kinds = sorted({r["kind"] for r in records})
    if len(kinds) > 1:
        result["by_kind"] = {kind: aggregate([r for r in records if r["kind"] == kind], resamples=resamples, seed=seed)
                             for kind in kinds}
    result["per_clip"] = records
    return result


# ----------------------------------------------------------------------------- text


def _fmt(value: float | None, digits: int = 3) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def _ci(interval: Sequence[float] | None) -> str:
    return f" [{interval[0]:.2f}, {interval[1]:.2f}]" if interval else ""


def summary(metrics: dict) -> str:
    """Human-readable lines for `evaluate_answers`'s (or `aggregate`'s) result."""
    lines = [
        f"{plural(metrics['clips'], 'clip')}; {plural(metrics['unparsed'], 'answer')} unparsed "
        f"({_fmt(metrics['unparsed_fraction'] and 100 * metrics['unparsed_fraction'], 0)} %): they count as misses",
        "sentence scores over the parsed answers (PCC / SCC with 95 % bootstrap intervals, mean abs. error):",
    ]
    for key, m in metrics["scores"].items():
        coverage = "n/a" if m["coverage"] is None else f"{100 * m['coverage']:.0f} %"
        line = (f"  {key:<9} PCC {_fmt(m['pcc'])}{_ci(m['pcc_ci'])}  SCC {_fmt(m['scc'])}{_ci(m['scc_ci'])}  "
                f"MAE {_fmt(m['mae'], 2)}  (n={m['n']}, coverage {coverage})")
        lines.append(line + (f": {m['reason']}" if m.get("reason") else ""))
    for name in ("words", "phones"):
        m = metrics[name]
        if m.get("reason"):
            lines.append(f"flagged {name}: {m['reason']}")
            continue
        lines.append(
            f"flagged {name}: precision {_fmt(m['precision'])}, recall {_fmt(m['recall'])}, "
            f"F1 {_fmt(m['f1'])}{_ci(m['f1_ci'])} ({m['true_positives']} agreed, {m['predicted']} flagged by the "
            f"tutor, {m['expected']} by the experts)"
        )
    return "\n".join(lines)
