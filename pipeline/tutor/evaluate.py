"""Judge a tutor on the built dataset's held-out clips against the experts, and keep the judgement.

`python -m pipeline evaluate --workspace WS (--run NAME | --model M) [--split eval] [--limit N] [--grounding] [--json]`

The tutor (a base model, or a run's adapter on its base) answers every clip of the split with
`pipeline.tutor.infer` (greedy decoding, the training conversation); `pipeline.tutor.metrics` scores
the answers (every answer counts: unparsed answers are a headline figure and count as misses).

Each evaluation is saved, keyed by the data it was computed on (`split_key`: the split's name and
a hash of its data files in `WS/dataset/`, i.e. the dataset build; `-firstN` with `--limit N`):

    WS/runs/NAME/eval/KEY.json          a run's tuned tutor
    WS/evals/MODEL/KEY.json             a base model (MODEL: `model_slug`)

so the app shows saved evaluations without re-running them, and a rebuilt eval split is never
compared with answers to another one. Inference follows the project's CPU thread rule
(`pipeline.host.cpu_threads`: one thread while a run trains in the workspace, else cores - 1;
`TUTOR_INFER_THREADS` overrides it). An evaluation can be cancelled between tokens (`should_stop`);
a cancelled one saves nothing, unless the caller keeps what was answered (`partial`, the app's
background job `pipeline.tutor.eval_jobs`).
This module does not train, and does not score audio itself.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import time
from pathlib import Path
from typing import Any, Callable

from pipeline.errors import DatasetError, EvaluationError, SampleError
from pipeline.tutor.metrics import (  # noqa: F401  (re-exported: the metrics' home is pipeline.tutor.metrics)
    DEFAULT_KIND,
    evaluate_answers,
    pearson,
    precision_recall_f1,
    reference_from,
    spearman,
    summary,
)
from pipeline.workspace import Workspace

RUN_EVAL_DIR = "eval"
"""A run's saved evaluations: `WS/runs/NAME/eval/KEY.json`."""
BASE_EVALS_DIR = "evals"
"""Base models' saved evaluations: `WS/evals/MODEL/KEY.json`."""
TINY_NOTE = "The model is the tiny random stand-in made by make-tiny-model: its answers are meaningless."


def _ws(workspace: Workspace | str | os.PathLike) -> Workspace:
    return workspace if isinstance(workspace, Workspace) else Workspace(Path(workspace))


def split_key(workspace: Workspace | str | os.PathLike, split: str = "eval", limit: int | None = None) -> str:
    """`"eval-<12 hex>"`: the split's name and the SHA-256 of its data files (`WS/dataset/SPLIT/*.arrow`),
    i.e. the rows and audio of the dataset build an evaluation used; `-firstN` is appended for `--limit N`.

    Reads only those files (no `datasets` import), so the app can tell which saved evaluations belong to
    the current build at once. Raises `DatasetError` when the split has no data files.
    """
    ws = _ws(workspace)
    files = sorted((ws.dataset_dir / split).glob("*.arrow")) if split and "/" not in split else []
    if not files:
        raise DatasetError(
            f"No `{split}` split in {ws.dataset_dir}; build the dataset first "
            f"(`python -m pipeline build --workspace {shlex.quote(str(ws.root))}`, or the app's Dataset tab)."
        )
    digest = hashlib.sha256()
    for path in files:
        digest.update(path.name.encode())
        with open(path, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    return f"{split}-{digest.hexdigest()[:12]}" + (f"-first{limit}" if limit else "")


def model_slug(model: str) -> str:
    """A folder name for a base model: `google/gemma-3n-E2B-it` -> `google--gemma-3n-E2B-it`; a local
    folder -> its name plus a hash of its full path (two folders of the same name stay apart)."""
    model = str(model)
    path = Path(model).expanduser()
    if path.is_dir():
        return f"{path.name}-{hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:8]}"
    return re.sub(r"[^A-Za-z0-9._-]+", "--", model).strip("-.") or "model"


def evaluation_path(workspace: Workspace | str | os.PathLike, key: str, *, run: str | None = None,
                    model: str | None = None) -> Path:
    """Where the evaluation of `run` (or of base `model`) on the data `key` is saved."""
    ws = _ws(workspace)
    if run:
        return ws.run_dir(run) / RUN_EVAL_DIR / f"{key}.json"
    if not model:
        raise EvaluationError("An evaluation belongs to a run or a base model; give `--run NAME` or `--model M`.")
    return ws.root / BASE_EVALS_DIR / model_slug(model) / f"{key}.json"


def save_evaluation(workspace: Workspace | str | os.PathLike, result: dict) -> Path:
    """Write `result` (from `evaluate_tutor`) atomically to its place (`evaluation_path`); returns the path."""
    from pipeline.fileio import atomic_write_json

    path = evaluation_path(workspace, result["dataset_key"], run=result.get("run"), model=result.get("model"))
    atomic_write_json(path, result)
    return path


def saved_evaluations(workspace: Workspace | str | os.PathLike, key: str | None = None) -> list[dict]:
    """Every saved evaluation in the workspace (base models first, then runs, by name), each with its
    `path`; only those computed on the data `key` when given. Unreadable files are skipped."""
    ws = _ws(workspace)
    found = []
    patterns = [(ws.root / BASE_EVALS_DIR, "*/*.json"), (ws.runs_dir, f"*/{RUN_EVAL_DIR}/*.json")]
    for folder, pattern in patterns:
        for path in sorted(folder.glob(pattern)) if folder.is_dir() else []:
            try:
                result = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                continue
            if isinstance(result, dict) and "dataset_key" in result and (key is None or result["dataset_key"] == key):
                result["path"] = str(path)
                found.append(result)
    return found


def clip_audio_path(workspace: Workspace | str | os.PathLike, clip_id: str) -> Path | None:
    """The sample library's 16 kHz WAV of clip `clip_id`, or None when the sample is gone."""
    from pipeline.data.samples import SampleLibrary

    try:
        path = SampleLibrary(_ws(workspace)).audio_path(str(clip_id))
    except SampleError:
        return None
    return path if path.exists() else None


def _row_reference(row: dict) -> Any:
    """A dataset row's reference: its expert scores when they carry any, else its feedback text."""
    from pipeline.conversation.feedback import summarize_scores

    if row.get("scores"):
        try:
            return summarize_scores(row["target_text"], json.loads(row["scores"]))
        except (SampleError, json.JSONDecodeError, TypeError):
            pass
    return row.get("feedback") or ""


def evaluate_tutor(
    workspace: Workspace | str | os.PathLike,
    model: str | None = None,
    *,
    run: str | None = None,
    split: str = "eval",
    limit: int | None = None,
    device: str | None = None,
    quantization: str | None = None,
    max_new_tokens: int | None = None,
    progress: Callable[[int, int, str], Any] | None = None,
    should_stop: Callable[[], bool] | None = None,
    grounding: bool = False,
    partial: Callable[[dict], Any] | None = None,
) -> dict:
    """Answer every clip of a built dataset split with a tutor and score the answers.

    The tutor is loaded once with `pipeline.tutor.infer.load_tutor` (base `model`, or `run`'s adapter
    on its training base) and answers each row, whatever its kind (`pipeline.tutor.by_kind.answer_row`:
    `Tutor.feedback`, `free_speech_feedback`, or `dialogue_reply` for each tutor turn).

    Args:
        progress: `progress(done, total, message)`, called before the first clip and after each one.
        should_stop: `() -> bool`, checked before each clip and after every generated token; True
            cancels the evaluation (nothing is returned or saved, unless `partial` is given).
        partial: `partial(result)`, called after each clip but the last with the result over the clips
            answered so far, marked `"partial": {"answered", "of"}` (`pipeline.tutor.eval_jobs` saves it as
            it goes). With it, a cancel returns that result (`"reason": "cancelled"` added to `partial`;
            an answer cut short is not counted) instead of raising.
        grounding: also ask the grounding probes for every read-aloud clip (`pipeline.tutor.grounding`:
            low noise instead of the clip, another learner's clip of the same sentence, the clip with
            another sentence): up to 3 more answers per clip, so up to 4x the time.

    Returns:
        `evaluate_answers`'s metrics over the read-aloud rows (`clips`, `unparsed`,
        `unparsed_fraction`, `scores`, `words`, `phones`, `per_clip` with each clip's `answer`,
        `reference_feedback`, `kind`, ...), `by_kind` (every sample kind present: `answers` and chrF
        against the reference, and for read-aloud these expert metrics,
        `pipeline.tutor.by_kind.metrics_by_kind`), `answers` (every answer of every kind with its
        sentence chrF; one per tutor turn of a dialogue), plus `model`, `run`, `split`, `dataset_key`
        (`split_key`), `device`, `quantization`, `max_new_tokens`, `seconds`, `finished_at` (unix s)
        and `note` (set for the tiny random stand-in). Always `per_phone`
        (`grounding.phone_table`) and `per_learner` (`grounding.learner_table`) over the read-aloud
        clips; with `grounding`, `grounding` (`grounding.grounding_metrics`) and `grounding_clips`
        (every probe's answer).

    Raises:
        DatasetError: no built dataset, unknown or empty split, `limit` < 1.
        EvaluationError: cancelled through `should_stop` (without `partial`).
        ConfigError / ModelLoadError: from `load_tutor` (unknown run, model cannot be loaded).
    """
    from pipeline.data.dataset import DEFAULT_MODEL, load_built_dataset
    from pipeline.tutor.infer import DEFAULT_MAX_NEW_TOKENS, load_tutor

    ws = _ws(workspace)
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
            f"(`python -m pipeline build --workspace {shlex.quote(str(ws.root))} --eval-fraction 0.2`)."
        )
    key = split_key(ws, split, limit if limit is not None and limit < len(data[split]) else None)
    tokens = max_new_tokens or DEFAULT_MAX_NEW_TOKENS
    stop = should_stop or (lambda: False)
    who = f"run `{run}`" if run else f"base model `{model}`"
    started = time.perf_counter()
    # With the grounding probes the job is up to 4 answers per clip (its own + 3 probes): the bar counts them all,
    # so it does not reach 100 % after the clips and fall back when the probes start (exact once they are planned).
    planned_total = len(rows) * (4 if grounding else 1)
    if progress is not None:
        progress(0, planned_total, f"loading {who}")
    from pipeline.tutor.by_kind import answer_row, metrics_by_kind

    tutor = load_tutor(model or (None if run else DEFAULT_MODEL), run=run, workspace=ws, device=device,
                       quantization=quantization)
    items, answers = [], []

    from pipeline.tutor.grounding import learner_table, phone_table

    def result(answered: int, reason: str | None = None) -> dict:
        metrics = evaluate_answers(items)
        out = {
            "model": tutor.model_id,
            "run": run,
            "split": split,
            "dataset_key": key,
            "device": tutor.device,
            "quantization": tutor.quantization,
            "max_new_tokens": tokens,
            "seconds": round(time.perf_counter() - started, 2),
            "finished_at": round(time.time(), 3),
            "note": TINY_NOTE if tutor.tiny_random_model else None,
            **metrics,
            "by_kind": metrics_by_kind(answers, {k: v for k, v in metrics.items() if k != "per_clip"}),
            "answers": answers,
            "per_phone": phone_table(items),
            "per_learner": learner_table(metrics["per_clip"], {str(i["id"]): i["speaker"] for i in items}),
        }
        if answered < len(rows):
            out["partial"] = {"answered": answered, "of": len(rows), **({"reason": reason} if reason else {})}
        return out

    for index, row in enumerate(rows):
        if stop():
            if partial is not None:
                return result(index, "cancelled")
            raise EvaluationError(f"Evaluation of {who} cancelled after {index} of {len(rows)} clips; nothing was saved.")
        row_answers = answer_row(tutor, row, max_new_tokens=tokens, stop=stop)  # every kind; one per tutor turn
        if stop():
            if partial is not None:
                return result(index, "cancelled")
            raise EvaluationError(f"Evaluation of {who} cancelled after {index} of {len(rows)} clips; nothing was saved.")
        answers += row_answers
        if (row.get("kind") or DEFAULT_KIND) == "read_aloud":  # the expert-score template metrics
            items.append({"id": row["id"], "kind": "read_aloud", "target_text": row["target_text"],
                          "answer": row_answers[0]["answer"], "reference": _row_reference(row),
                          "reference_feedback": row.get("feedback") or "", "speaker": row.get("speaker") or "",
                          "index": index})
        if partial is not None and index + 1 < len(rows):  # kept before it is reported as answered
            partial(result(index + 1))
        if progress is not None:
            progress(index + 1, planned_total, f"{who}: answered {row['id']}")
    if not grounding:
        return result(len(rows))
    probe_progress = None if progress is None else (
        lambda done, total, message: progress(len(rows) + done, len(rows) + total, message))
    try:
        probed = _ask_grounding_probes(tutor, data, split, rows, items, max_new_tokens=tokens, stop=stop,
                                       progress=probe_progress, who=who)
    except EvaluationError:
        if partial is None:
            raise
        return result(len(rows))  # cancelled during the probes: every answer is kept, without the probes
    from pipeline.tutor.grounding import grounding_metrics

    return result(len(rows)) | {
        "grounding": grounding_metrics(probed),
        "grounding_clips": [{k: v for k, v in r.items() if k != "reference"} | {
            "other_clip": r["other_clip"] and {k: v for k, v in r["other_clip"].items() if k != "reference"}}
            for r in probed],
    }


def _ask_grounding_probes(tutor: Any, data: Any, split: str, rows: Any, items: list[dict], *, max_new_tokens: int,
                          stop: Callable[[], bool], progress: Callable[[int, int, str], Any] | None,
                          who: str) -> list[dict]:
    """Ask `tutor` the grounding probes (`pipeline.tutor.grounding`) for every read-aloud eval clip in
    `items` (their answers already given); returns the records `grounding_metrics` takes.

    The other learner's clip comes from any split of the built dataset `data`; when it is itself an
    eval clip answered with the same sentence, its answer is reused (greedy decoding gives the same
    text). Raises `EvaluationError` when `stop()` cancels it.
    """
    from pipeline.data.audio import load_audio
    from pipeline.tutor.grounding import plan_probes, probe_noise

    pool, where = [], {}
    for name in data:
        columns = [c for c in ("id", "speaker", "target_text", "kind") if c in data[name].column_names]
        for position, row in enumerate(data[name].select_columns(columns)):
            if (row.get("kind") or DEFAULT_KIND) == "read_aloud":
                pool.append({**row, "split": "eval" if name == split else name})
                where.setdefault(str(row["id"]), (name, position))
    plan = plan_probes(items, pool)
    answered = {str(i["id"]): i for i in items}
    total = sum(1 + (plan[str(i["id"])]["other_clip"] is not None) + (plan[str(i["id"])]["other_sentence"] is not None)
                for i in items)
    done = 0

    def ask(audio: Any, sentence: str, what: str) -> str:
        nonlocal done
        if stop():
            raise EvaluationError(f"Evaluation of {who} cancelled during the grounding probes; nothing was saved.")
        text = tutor.feedback(audio, sentence, max_new_tokens=max_new_tokens, stop=stop).text
        done += 1
        if progress is not None:
            progress(done, total, f"{who}: grounding probe, {what}")
        return text

    records = []
    for item in items:
        row = rows[item["index"]]
        clip = load_audio(row["audio_wav"]).samples
        planned = plan[str(item["id"])]
        record = {"id": item["id"], "target_text": item["target_text"], "reference": item["reference"],
                  "answer": item["answer"], "other_clip": None, "other_sentence": None,
                  "silence": {"answer": ask((16000, probe_noise(clip.size)), item["target_text"],
                                            f"noise instead of {item['id']}")}}
        partner_id = planned["other_clip"]
        if partner_id is not None:
            name, position = where[str(partner_id)]
            partner = data[name][position]
            same = answered.get(str(partner_id))
            reuse = same is not None and same["target_text"] == item["target_text"]
            record["other_clip"] = {
                "id": partner_id, "speaker": partner.get("speaker") or "", "reference": _row_reference(partner),
                "answer": same["answer"] if reuse else ask(partner["audio_wav"], item["target_text"],
                                                          f"{partner_id} reading {item['id']}'s sentence")}
            if reuse:
                done += 1
        if planned["other_sentence"] is not None:
            record["other_sentence"] = {"target_text": planned["other_sentence"],
                                        "answer": ask(row["audio_wav"], planned["other_sentence"],
                                                      f"{item['id']} with another sentence")}
        records.append(record)
    return records
