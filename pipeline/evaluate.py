"""Judge a tutor on held-out clips: its answers against the experts' scores.

Each answer is read with `pipeline.feedback.parse_feedback`; the reference is the experts' scores
of the clip (speechocean762 layout, summarised with `feedback.summarize_scores`, the same rule that
wrote the training feedback) or, for clips without scores, the reference feedback text parsed the
same way. Metrics, the ones used in the pronunciation-assessment literature:

- Sentence scores (accuracy, fluency, prosody, total; 0-10): Pearson correlation coefficient (PCC)
  between the tutor's and the experts' scores over the clips where both are present, and the mean
  absolute error. speechocean762 papers report PCC, e.g. GOPT 0.742 for the utterance total
  (Gong et al., ICASSP 2022); PCC is undefined (None) with fewer than 2 clips or no variance.
- Flagged words (the "Words to practise" line): micro-averaged precision, recall and F1 of the
  words the tutor flags against the words the experts' scores flag (mispronunciation detection;
  F1 around 0.60 on L2-ARCTIC in the literature). Words are compared per clip, upper-cased, as
  multisets. The same for (word, phone) pairs of the listed phone errors.

`evaluate_answers` is a pure function; `main` generates the answers with `pipeline.infer` on the
built dataset's eval split and writes `WS/runs/NAME/evaluation.json`. It does not train or score
audio itself.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import time
from collections import Counter
from pathlib import Path
from typing import Any, Iterable, Sequence

from pipeline.errors import DatasetError, PipelineError
from pipeline.feedback import SENTENCE_KEYS, ParsedFeedback, parse_feedback, summarize_scores

EVALUATION_FILE = "evaluation.json"


def pearson(xs: Sequence[float], ys: Sequence[float]) -> float | None:
    """Pearson correlation coefficient r = cov(x, y) / (std(x) std(y)), in [-1, 1].

    Returns None when it is undefined: fewer than 2 pairs, or either side constant.
    Raises `ValueError` when the lengths differ.
    """
    if len(xs) != len(ys):
        raise ValueError(f"pearson needs equal lengths, got {len(xs)} and {len(ys)}")
    n = len(xs)
    if n < 2:
        return None
    mx, my = math.fsum(xs) / n, math.fsum(ys) / n
    dx = [x - mx for x in xs]
    dy = [y - my for y in ys]
    sxx, syy = math.fsum(d * d for d in dx), math.fsum(d * d for d in dy)
    if sxx == 0 or syy == 0:
        return None
    r = math.fsum(a * b for a, b in zip(dx, dy)) / math.sqrt(sxx * syy)
    return max(-1.0, min(1.0, r))


def precision_recall_f1(true_positives: int, predicted: int, expected: int) -> dict[str, float | None]:
    """Precision = TP / predicted, recall = TP / expected, F1 = their harmonic mean.

    A ratio with a zero denominator is None (undefined), except F1 when both sides are empty:
    nothing flagged by either is a perfect 1.0 agreement. F1 is 0.0 when precision and recall are 0.
    """
    precision = true_positives / predicted if predicted else None
    recall = true_positives / expected if expected else None
    if predicted == 0 and expected == 0:
        f1: float | None = 1.0
    elif precision is None or recall is None:
        f1 = 0.0 if (predicted or expected) else None
    elif precision + recall == 0:
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


_WORD_CLEAN = re.compile(r"[^\w']+")


def _word_key(word: str) -> str:
    return _WORD_CLEAN.sub("", word.upper())


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


def evaluate_answers(pairs: Iterable[Any]) -> dict:
    """Compare tutor answers with references.

    Args:
        pairs: `(answer_text, reference)` tuples, or dicts with `answer` and `reference` (and
            optionally `target_text`, `id`). `reference` is anything `reference_from` accepts:
            expert scores (dict or JSON string), a reference feedback text, or a `ParsedFeedback`.

    Returns:
        `{"clips": n, "answers_with_scores": n with at least one sentence score parsed,
        "sentence": {key: {"n", "pcc", "mae"}} for accuracy/fluency/prosody/total,
        "words": precision_recall_f1 dict, "phones": precision_recall_f1 dict}`. PCC and ratios
        are None when undefined (see `pearson`, `precision_recall_f1`).
    """
    values: dict[str, tuple[list[float], list[float]]] = {key: ([], []) for key in SENTENCE_KEYS}
    word_counts = [0, 0, 0]  # tp, predicted, expected
    phone_counts = [0, 0, 0]
    clips = 0
    with_scores = 0
    for item in pairs:
        if isinstance(item, dict):
            answer, reference = item.get("answer"), item.get("reference")
            target = item.get("target_text", "") or ""
        else:
            answer, reference = item[0], item[1]
            target = ""
        clips += 1
        predicted = parse_feedback(answer if isinstance(answer, str) else "")
        expected = reference_from(reference, target)
        if any(v is not None for v in predicted.scores.values()):
            with_scores += 1
        for key in SENTENCE_KEYS:
            p, e = predicted.scores[key], expected.scores[key]
            if p is not None and e is not None:
                values[key][0].append(float(p))
                values[key][1].append(float(e))
        for counts, got, want in (
            (word_counts, [_word_key(w) for w in predicted.flagged_words], [_word_key(w) for w in expected.flagged_words]),
            (
                phone_counts,
                [(_word_key(w), ph) for w, ph, _ in predicted.phone_errors],
                [(_word_key(w), ph) for w, ph, _ in expected.phone_errors],
            ),
        ):
            got_c, want_c = Counter(got), Counter(want)
            counts[0] += sum((got_c & want_c).values())
            counts[1] += sum(got_c.values())
            counts[2] += sum(want_c.values())
    sentence = {}
    for key, (pred, exp) in values.items():
        sentence[key] = {
            "n": len(pred),
            "pcc": pearson(pred, exp),
            "mae": (math.fsum(abs(a - b) for a, b in zip(pred, exp)) / len(pred)) if pred else None,
        }
    return {
        "clips": clips,
        "answers_with_scores": with_scores,
        "sentence": sentence,
        "words": precision_recall_f1(*word_counts),
        "phones": precision_recall_f1(*phone_counts),
    }


def _fmt(value: float | None, digits: int = 3) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def summary(metrics: dict) -> str:
    """Human-readable lines for `evaluate_answers`'s result."""
    lines = [
        f"{metrics['clips']} clips, {metrics['answers_with_scores']} answers with scores in the template",
        "sentence scores (Pearson r with the experts, mean abs. error):",
    ]
    for key, m in metrics["sentence"].items():
        lines.append(f"  {key:<9} r {_fmt(m['pcc'])}  MAE {_fmt(m['mae'], 2)}  (n={m['n']})")
    for name in ("words", "phones"):
        m = metrics[name]
        lines.append(
            f"flagged {name}: precision {_fmt(m['precision'])}, recall {_fmt(m['recall'])}, F1 {_fmt(m['f1'])} "
            f"({m['true_positives']} agreed, {m['predicted']} flagged by the tutor, {m['expected']} by the experts)"
        )
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------------
# Command line: answer the eval split with pipeline.infer, then score
# --------------------------------------------------------------------------------------------------


def _row_reference(row: dict) -> Any:
    """A dataset row's reference: its expert scores when they carry any, else its feedback text."""
    from pipeline.errors import SampleError

    if row.get("scores"):
        try:
            return summarize_scores(row["target_text"], json.loads(row["scores"]))
        except (SampleError, json.JSONDecodeError, TypeError):
            pass
    return row.get("feedback") or ""


def _answer_clips(model: str, run: str | None, workspace: Any, clips: list[tuple[Any, str]]) -> list[str]:
    """Answers of the tutor (base `model`, plus the adapter of `run` if given) for `(audio, target)` clips."""
    from pipeline import infer

    batch = getattr(infer, "feedback_for_clips", None)
    if callable(batch):
        return list(batch(model, clips, run=run, workspace=workspace))
    return [infer.feedback_for_clip(model, audio, target, run=run, workspace=workspace) for audio, target in clips]


def main(argv: list[str] | None = None) -> int:
    """`python -m pipeline evaluate --workspace WS --model M [--run NAME] [--split eval] [--limit N] [--json]`."""
    from pipeline.dataset import DEFAULT_MODEL, decode_wav, load_built_dataset
    from pipeline.fileio import atomic_write_json
    from pipeline.workspace import DEFAULT_WORKSPACE, Workspace

    parser = argparse.ArgumentParser(
        prog="python -m pipeline evaluate",
        description="Score a tutor's answers on the built dataset's eval split against the experts' scores.",
    )
    parser.add_argument("--workspace", type=Path, default=DEFAULT_WORKSPACE, help="workspace folder")
    parser.add_argument("--model", default=None, help=f"base model (default: the run's model, else {DEFAULT_MODEL})")
    parser.add_argument("--run", default=None, help="training run whose adapter to evaluate (default: the base model)")
    parser.add_argument("--split", default="eval", help="dataset split (default eval)")
    parser.add_argument("--limit", type=int, default=None, help="evaluate only the first N clips")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)

    ws = Workspace(args.workspace)
    model = args.model
    if args.run:
        run_dir = ws.run_dir(args.run)
        if not run_dir.exists():
            raise PipelineError(f"No run `{args.run}` in {ws.runs_dir}; `python -m pipeline train` creates runs.")
        if model is None and (run_dir / "config.json").exists():
            model = json.loads((run_dir / "config.json").read_text(encoding="utf-8")).get("model")
    model = model or DEFAULT_MODEL

    data = load_built_dataset(ws)
    if args.split not in data:
        raise DatasetError(f"Split `{args.split}` is not in the dataset; it has {sorted(data)}.")
    rows = data[args.split]
    if args.limit is not None:
        if args.limit < 1:
            raise DatasetError(f"`--limit` must be >= 1, got {args.limit}.")
        rows = rows.select(range(min(args.limit, len(rows))))
    if len(rows) == 0:
        raise DatasetError(
            f"The `{args.split}` split is empty; rebuild with a larger --eval-fraction or more speakers."
        )

    started = time.perf_counter()
    clips = [(decode_wav(r["audio_wav"]), r["target_text"]) for r in rows]
    answers = _answer_clips(model, args.run, ws, clips)
    items = [
        {
            "id": r["id"],
            "target_text": r["target_text"],
            "answer": answer,
            "reference": _row_reference(r),
        }
        for r, answer in zip(rows, answers)
    ]
    metrics = evaluate_answers(items)
    result = {
        "model": model,
        "run": args.run,
        "split": args.split,
        "seconds": round(time.perf_counter() - started, 2),
        **metrics,
        "answers": [
            {"id": i["id"], "target_text": i["target_text"], "answer": i["answer"], "reference_feedback": r["feedback"]}
            for i, r in zip(items, rows)
        ],
    }
    if args.run:
        out = ws.run_dir(args.run) / EVALUATION_FILE
        atomic_write_json(out, result)
        result["path"] = str(out)
    if args.json:
        print(json.dumps(result, ensure_ascii=False))
    else:
        who = f"run {args.run}" if args.run else f"base model {model}"
        print(f"Evaluated {who} on {len(items)} {args.split} clips in {result['seconds']} s")
        print(summary(metrics))
        if "path" in result:
            print(f"saved {result['path']}")
    return 0
