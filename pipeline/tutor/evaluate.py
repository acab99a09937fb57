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
from pipeline.model.tiny_model import stand_in_note
from pipeline.tutor.metrics import (  # noqa: F401  (re-exported: the metrics' home is pipeline.tutor.metrics)
    DEFAULT_KIND,
    evaluate_answers,
    pearson,
    precision_recall_f1,
    reference_from,
    spearman,
    summary,
)
from pipeline.units import plural
from pipeline.workspace import Workspace

RUN_EVAL_DIR = "eval"
"""A run's saved evaluations: `WS/runs/NAME/eval/KEY.json`."""
BASE_EVALS_DIR = "evals"
"""Base models' saved evaluations: `WS/evals/MODEL/KEY.json`."""
TINY_NOTE = stand_in_note()
"""A saved evaluation's note when the model is the random stand-in (with `tiny_random_model` true beside it)."""


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
            f"No built dataset with test recordings (its `{split}` rows) in {ws.dataset_dir} yet; build the dataset "
            f"first: `python -m pipeline build --workspace {shlex.quote(str(ws.root))}`."
        )
    digest = hashlib.sha256()
    for path in files:
        digest.update(path.name.encode())
        with open(path, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    return f"{split}-{digest.hexdigest()[:12]}" + (f"-first{limit}" if limit else "")


def model_name(model: Any) -> str:
    """A model as the studio names it to the teacher: a local folder (an absolute path) by its folder name
    (`/ws/models/tiny-gemma3n` -> `tiny-gemma3n`, as the Judge tab's "base · tiny-gemma3n"), a hub id as it
    is (`google/gemma-3n-E2B-it`); "?" when unknown. No workspace path reaches the screen."""
    text = str(model or "").strip()
    if not text:
        return "?"
    path = Path(text.rstrip("/\\"))
    return path.name if path.is_absolute() or text.startswith(("~", ".")) else text


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
    """Write `result` (from `evaluate_tutor`) atomically to its place (`evaluation_path`), under that file's
    lock (`pipeline.fileio.locked`: `keep_partial` reads and decides under it); returns the path."""
    from pipeline.fileio import atomic_write_json, locked

    path = evaluation_path(workspace, result["dataset_key"], run=result.get("run"), model=result.get("model"))
    with locked(path):
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
    scorer: bool = False,
) -> dict:
    """Answer every clip of a built dataset split with a tutor and score the answers.

    The tutor is loaded once with `pipeline.tutor.infer.load_tutor` (base `model`, or `run`'s adapter
    on its training base) and answers each row, whatever its kind (`pipeline.tutor.by_kind.answer_row`:
    `Tutor.feedback`, `free_speech_feedback`, or `dialogue_reply` for each tutor turn).

    Args:
        progress: `progress(done, total, message)`, called before the first clip and after each one: `done` of
            `total` test recordings answered (every kind; the count the Judge headline shows). With
            `grounding`, also `checks=(done, total)`: the listening checks asked so far of those planned
            (3 per read-aloud clip at most, exact once planned: a clip with no other learner reading its
            sentence has 2), which follow the recordings.
        should_stop: `() -> bool`, checked before each clip and after every generated token; True
            cancels the evaluation (nothing is returned or saved, unless `partial` is given).
        partial: `partial(result)`, called after each clip but the last with the result over the clips
            answered so far, marked `"partial": {"answered", "of"}` (`pipeline.tutor.eval_jobs` saves it as
            it goes). With it, a cancel returns that result (`"reason": "cancelled"` added to `partial`;
            an answer cut short is not counted) instead of raising.
        grounding: also ask the grounding probes for every read-aloud clip (`pipeline.tutor.grounding`:
            low noise instead of the clip, another learner's clip of the same sentence, the clip with
            another sentence): up to 3 more answers per clip, so up to 4x the time.
        scorer: judge the classical scorer (`pipeline.scoring`, no model: `model` and `run` are ignored) the same
            way; its result's `model` is `classical-scorer`, saved under `WS/evals/classical-scorer/`, and its
            `note` says which map scored it.

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
    from pipeline.data.dataset import DEFAULT_MODEL
    from pipeline.tutor.infer import DEFAULT_MAX_NEW_TOKENS, load_tutor

    ws = _ws(workspace)
    data, rows, key = _split_rows(ws, split, limit)
    tokens = max_new_tokens or DEFAULT_MAX_NEW_TOKENS
    stop = should_stop or (lambda: False)
    who = "the classical scorer" if scorer else f"run `{run}`" if run else f"base model `{model_name(model)}`"
    started = time.perf_counter()
    # One count of recordings (what the headline counts); with the grounding probes the listening checks are
    # counted apart (`checks`), planned as 3 per clip from the start so a bar over both never falls back.
    if progress is not None and grounding:
        kinds = rows["kind"] if "kind" in rows.column_names else [None] * len(rows)
        planned_checks = 3 * sum(1 for kind in kinds if (kind or DEFAULT_KIND) == "read_aloud")
        recordings_progress = progress
        progress = (lambda done, total, message, checks=(0, planned_checks):  # noqa: E731
                    recordings_progress(done, total, message, checks=checks))
    planned_total = len(rows)
    if progress is not None:
        progress(0, planned_total, f"loading {who}")
    if scorer:
        run = None
        tutor = _scorer_for(ws, rows, progress, planned_total)
    else:
        tutor = load_tutor(model or (None if run else DEFAULT_MODEL), run=run, workspace=ws, device=device,
                           quantization=quantization)
    evaluation = _Evaluation(tutor, run=run, split=split, key=key, max_new_tokens=tokens, rows=len(rows),
                             started=started)
    cancelled_at = _answer_rows(evaluation, rows, stop=stop, who=who, partial=partial, progress=progress,
                                planned_total=planned_total)
    if cancelled_at is not None:
        return evaluation.result(cancelled_at, "cancelled")
    if not grounding:
        return evaluation.result(len(rows))
    return _with_grounding(evaluation, data, rows, stop=stop, who=who, partial=partial, progress=progress)


def _split_rows(ws: Workspace, split: str, limit: int | None) -> tuple[Any, Any, str]:
    """The built dataset, the rows of `split` to answer (its first `limit` with `limit`), and the key of
    the data they are (`split_key`; `-firstN` only when `limit` leaves rows out).

    Raises:
        DatasetError: no built dataset, `split` not in it, `limit` < 1, no row to answer.
    """
    from pipeline.data.dataset import load_built_dataset

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
    return data, rows, split_key(ws, split, limit if limit is not None and limit < len(data[split]) else None)


def _scorer_for(ws: Workspace, rows, progress, planned_total: int):
    """The classical scorer as a tutor for judging `rows`: with the workspace's map, fitted again first on this
    build's train split when the saved map was fitted on any of `rows` (the dataset was rebuilt since, and its
    split moved): a yardstick is never graded on its own training clips.

    Raises:
        ScoringError: the map must be fitted again and cannot be (too few scored train clips), or cannot be read.
    """
    from pipeline.errors import ScoringError
    from pipeline.scoring.fit import clips_seen_by_map, fit_workspace
    from pipeline.scoring.scorer import ScorerTutor, load_scorer

    seen = clips_seen_by_map(ws, rows["id"]) if "id" in rows.column_names else []
    if seen:
        if progress is not None:
            progress(0, planned_total, "fitting the classical scorer's map again on this build's train split")
        try:
            fit_workspace(ws)
        except ScoringError as error:
            raise ScoringError(f"The classical scorer's map was fitted on {plural(len(seen), 'clip')} judged here (the "
                               f"dataset was rebuilt since), so it cannot judge them, and fitting it again failed: "
                               f"{error}") from None
    scorer = load_scorer(ws)
    if seen:
        scorer.score_map.note += (f" (fitted again before this judgement: the saved map had been fitted on "
                                  f"{plural(len(seen), 'clip')} judged here)")
    return ScorerTutor(scorer)


class _Evaluation:
    """One evaluation under way: the tutor, what it is evaluated on, the answers given so far, and the
    result they make (`result`).

    `answers`: every answer of every kind (`pipeline.tutor.by_kind.answer_row`'s records, one per tutor
    turn of a dialogue); `items`: the read-aloud clips with their answer and reference, which the
    expert-score metrics, the per-phone and per-learner tables and the grounding probes read.
    """

    def __init__(self, tutor: Any, *, run: str | None, split: str, key: str, max_new_tokens: int, rows: int,
                 started: float):
        self.tutor, self.run, self.split, self.key = tutor, run, split, key
        self.max_new_tokens, self.rows, self.started = max_new_tokens, rows, started
        self.items: list[dict] = []
        self.answers: list[dict] = []

    def add(self, index: int, row: dict, row_answers: list[dict]) -> None:
        """Keep `row_answers`, the answers to dataset row `row` (position `index` in the split)."""
        self.answers += row_answers
        if (row.get("kind") or DEFAULT_KIND) == "read_aloud":  # the expert-score template metrics
            self.items.append({"id": row["id"], "kind": "read_aloud", "target_text": row["target_text"],
                               "answer": row_answers[0]["answer"], "reference": _row_reference(row),
                               "reference_feedback": row.get("feedback") or "", "speaker": row.get("speaker") or "",
                               "index": index})

    def result(self, answered: int, reason: str | None = None) -> dict:
        """The result over the first `answered` rows (`evaluate_tutor`'s Returns); marked `partial`
        (`{"answered", "of", "reason"?}`) when rows are left; `seconds` counts from the start."""
        from pipeline.tutor.by_kind import metrics_by_kind
        from pipeline.tutor.grounding import learner_table, phone_table

        tutor, items = self.tutor, self.items
        metrics = evaluate_answers(items)
        out = {
            "model": tutor.model_id,
            "run": self.run,
            "split": self.split,
            "dataset_key": self.key,
            "device": tutor.device,
            "quantization": tutor.quantization,
            "max_new_tokens": self.max_new_tokens,
            "seconds": round(time.perf_counter() - self.started, 2),
            "finished_at": round(time.time(), 3),
            "note": TINY_NOTE if tutor.tiny_random_model else getattr(getattr(tutor, "scorer", None), "note", None),
            "tiny_random_model": bool(tutor.tiny_random_model),
            **metrics,
            "by_kind": metrics_by_kind(self.answers, {k: v for k, v in metrics.items() if k != "per_clip"}),
            "answers": self.answers,
            "per_phone": phone_table(items),
            "per_learner": learner_table(metrics["per_clip"], {str(i["id"]): i["speaker"] for i in items}),
        }
        if answered < self.rows:
            out["partial"] = {"answered": answered, "of": self.rows, **({"reason": reason} if reason else {})}
        return out


def _answer_rows(evaluation: _Evaluation, rows: Any, *, stop: Callable[[], bool], who: str,
                 partial: Callable[[dict], Any] | None, progress: Callable[[int, int, str], Any] | None,
                 planned_total: int) -> int | None:
    """Ask the tutor every row of `rows` in turn (any kind, `pipeline.tutor.by_kind.answer_row`) and keep
    the answers in `evaluation`; `partial(result)` after each row but the last, `progress(done,
    planned_total, message)` after each row. `stop()` is checked before each row and after every
    generated token.

    Returns None when every row was answered, or, when `stop()` cancels with `partial` given, how many
    rows were answered (an answer cut short is not counted).

    Raises:
        EvaluationError: cancelled without `partial` (nothing is saved).
    """
    from pipeline.tutor.by_kind import answer_row

    for index, row in enumerate(rows):
        if stop():
            return _cancelled(index, len(rows), who, partial)
        row_answers = answer_row(evaluation.tutor, row, max_new_tokens=evaluation.max_new_tokens, stop=stop)
        if stop():
            return _cancelled(index, len(rows), who, partial)
        evaluation.add(index, row, row_answers)
        if partial is not None and index + 1 < len(rows):  # kept before it is reported as answered
            partial(evaluation.result(index + 1))
        if progress is not None:
            progress(index + 1, planned_total, f"{who}: answered {row['id']}")
    return None


def _cancelled(answered: int, total: int, who: str, partial: Callable[[dict], Any] | None) -> int:
    """`answered` when a cancelled evaluation keeps what was answered (`partial` given).

    Raises:
        EvaluationError: otherwise (nothing was saved).
    """
    if partial is None:
        raise EvaluationError(f"Evaluation of {who} cancelled after {answered} of {total} clips; nothing was saved.")
    return answered


def _with_grounding(evaluation: _Evaluation, data: Any, rows: Any, *, stop: Callable[[], bool], who: str,
                    partial: Callable[[dict], Any] | None, progress: Callable[[int, int, str], Any] | None) -> dict:
    """The result of an evaluation whose rows were all answered, with the grounding probes asked
    (`_ask_grounding_probes`): `grounding` (`grounding_metrics`) and `grounding_clips` (every probe's
    answer, without the references). `progress` counts on after the rows.

    Raises:
        EvaluationError: cancelled during the probes without `partial` (with it, the result keeps
            every answer, without the probes).
    """
    probe_progress = None if progress is None else (
        lambda done, total, message: progress(len(rows), len(rows), message, checks=(done, total)))
    try:
        probed = _ask_grounding_probes(evaluation.tutor, data, evaluation.split, rows, evaluation.items,
                                       max_new_tokens=evaluation.max_new_tokens, stop=stop, progress=probe_progress,
                                       who=who)
    except EvaluationError:
        if partial is None:
            raise
        return evaluation.result(len(rows))  # cancelled during the probes: every answer is kept, without the probes
    from pipeline.tutor.grounding import grounding_metrics

    return evaluation.result(len(rows)) | {
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
            progress(done, total, f"{who}: listening check, {what}")
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
