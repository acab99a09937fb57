"""Judge a tutor on held-out clips: its answers against the experts' scores.

Each answer is read with `pipeline.data.feedback.parse_feedback`; the reference is the experts' scores
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

`evaluate_answers` is a pure function; `main` generates the answers with `pipeline.tutor.infer` on the
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

from pipeline.errors import DatasetError
from pipeline.data.feedback import SENTENCE_KEYS, ParsedFeedback, parse_feedback, summarize_scores

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

    A ratio with a zero denominator is None (undefined). F1 is None when neither side flags
    anything (no evidence either way), and 0.0 when only one side flags something or precision and
    recall are both 0.
    """
    precision = true_positives / predicted if predicted else None
    recall = true_positives / expected if expected else None
    f1: float | None
    if predicted == 0 and expected == 0:
        f1 = None
    elif precision is None or recall is None:
        f1 = 0.0
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
# Command line: answer the eval split with pipeline.tutor.infer, then score
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


def evaluate_tutor(
    workspace: Any,
    model: str | None = None,
    *,
    run: str | None = None,
    split: str = "eval",
    limit: int | None = None,
    device: str | None = None,
    quantization: str | None = None,
    max_new_tokens: int | None = None,
    progress: Any = None,
) -> dict:
    """Answer every clip of a built dataset split with a tutor and score the answers.

    The tutor is loaded once with `pipeline.tutor.infer.load_tutor` (base `model`, or `run`'s adapter on
    its training base) and answers each row with `Tutor.feedback` (greedy decoding, the same
    `build_messages` conversation as training). Returns `evaluate_answers`'s metrics plus `model`,
    `run`, `split`, `seconds`, `note` (set for the tiny random stand-in), `by_kind` (every metric per
    sample kind, chrF for all, `pipeline.tutor.by_kind.metrics_by_kind`) and `answers`
    (`[{id, kind, turn, target_text, prompt, answer, reference_feedback}]`, one per tutor answer). The
    top-level expert-score metrics cover the read-aloud rows only. `progress(done, total, message)` is called
    after each clip.

    Raises:
        DatasetError: no built dataset, unknown or empty split, `limit` < 1.
        ConfigError / ModelLoadError: from `load_tutor` (unknown run, model cannot be loaded).
    """
    from pipeline.data.dataset import DEFAULT_MODEL, load_built_dataset
    from pipeline.tutor.infer import DEFAULT_MAX_NEW_TOKENS, load_tutor
    from pipeline.workspace import Workspace

    ws = workspace if isinstance(workspace, Workspace) else Workspace(Path(workspace))
    data = load_built_dataset(ws)
    if split not in data:
        raise DatasetError(f"Split `{split}` is not in the dataset in {ws.dataset_dir}; it has {sorted(data)}.")
    rows = data[split]
    if limit is not None:
        if limit < 1:
            raise DatasetError(f"`--limit` must be >= 1, got {limit}.")
        rows = rows.select(range(min(limit, len(rows))))
    if len(rows) == 0:
        raise DatasetError(
            f"The `{split}` split is empty; rebuild with a larger --eval-fraction or more speakers "
            f"(`python -m pipeline build --workspace {ws.root} --eval-fraction 0.2`)."
        )
    started = time.perf_counter()
    tutor = load_tutor(model or (None if run else DEFAULT_MODEL), run=run, workspace=ws, device=device, quantization=quantization)
    from pipeline.tutor.by_kind import answer_row, metrics_by_kind

    items, answers = [], []
    for index, row in enumerate(rows):  # every kind (pipeline.tutor.by_kind); expert metrics on read-aloud rows
        for answer in answer_row(tutor, row, max_new_tokens=max_new_tokens or DEFAULT_MAX_NEW_TOKENS):
            answers.append(answer)
            if answer["kind"] == "read_aloud":
                items.append({"id": row["id"], "target_text": row["target_text"], "answer": answer["answer"],
                              "reference": _row_reference(row)})
        if progress is not None:
            progress(index + 1, len(rows), f"answered {row['id']}")
    metrics = evaluate_answers(items)
    return {
        "model": tutor.model_id,
        "run": run,
        "split": split,
        "device": tutor.device,
        "quantization": tutor.quantization,
        "seconds": round(time.perf_counter() - started, 2),
        "note": (
            "The model is the tiny random stand-in made by make-tiny-model: its answers are meaningless."
            if tutor.tiny_random_model
            else None
        ),
        **metrics,
        "by_kind": metrics_by_kind(answers, items, evaluate_answers),
        "answers": answers,
    }


def main(argv: list[str] | None = None) -> int:
    """`python -m pipeline evaluate --workspace WS --model M [--run NAME] [--split eval] [--limit N] [--json]`."""
    import sys

    from pipeline.fileio import atomic_write_json
    from pipeline.workspace import DEFAULT_WORKSPACE, Workspace

    parser = argparse.ArgumentParser(
        prog="python -m pipeline evaluate",
        description="Score a tutor's answers on the built dataset's eval split against the experts' scores.",
    )
    parser.add_argument("--workspace", type=Path, default=DEFAULT_WORKSPACE, help="workspace folder")
    parser.add_argument("--model", default=None, help="base model (default: the run's model, else google/gemma-3n-E2B-it)")
    parser.add_argument("--run", default=None, help="training run whose adapter to evaluate (default: the base model)")
    parser.add_argument("--split", default="eval", help="dataset split (default eval)")
    parser.add_argument("--limit", type=int, default=None, help="evaluate only the first N clips")
    parser.add_argument("--device", choices=("auto", "cuda", "mps", "cpu"), default=None, help="default: the run's, else auto")
    parser.add_argument("--quantization", choices=("4bit", "8bit", "none"), default=None, help="default: the run's, else per device")
    parser.add_argument("--max-new-tokens", type=int, default=None, help="longest answer in tokens (default 256)")
    parser.add_argument("--out", type=Path, default=None, help=f"also save the result JSON here (a run's is saved to runs/NAME/{EVALUATION_FILE})")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)

    def progress(done: int, total: int, message: str) -> None:
        print(f"[{done}/{total}] {message}", file=sys.stderr, flush=True)

    ws = Workspace(args.workspace)
    result = evaluate_tutor(
        ws, args.model, run=args.run, split=args.split, limit=args.limit, device=args.device,
        quantization=args.quantization, max_new_tokens=args.max_new_tokens, progress=None if args.json else progress,
    )
    targets = [args.out] if args.out else []
    if args.run:
        targets.append(ws.run_dir(args.run) / EVALUATION_FILE)
    for path in targets:
        atomic_write_json(path, result)
    result["saved"] = [str(p) for p in targets]
    if args.json:
        print(json.dumps(result, ensure_ascii=False))
    else:
        who = f"run {args.run}" if args.run else f"base model {result['model']}"
        print(f"Evaluated {who} on {result['clips']} {args.split} clips in {result['seconds']} s")
        from pipeline.tutor.by_kind import by_kind_summary

        print(summary(result))
        print(by_kind_summary(result["by_kind"]))
        if result["note"]:
            print(f"note: {result['note']}")
        for path in result["saved"]:
            print(f"saved {path}")
    return 0
