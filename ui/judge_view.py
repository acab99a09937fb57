"""The Judge tab's text, tables and figure: the saved evaluations' status, the verdict, the headline table (one
column per model), the expert-vs-tutor scatter plot, the per-clip table (largest disagreement first), a
clip's details and an evaluation job's progress bar.

Inputs are `pipeline.tutor.evaluate` results (dicts, as saved in `runs/NAME/eval/` and `evals/`).
Nothing here imports gradio, torch or pipeline modules that do work. Figures use the object-oriented
`matplotlib.figure.Figure` API (no pyplot state shared between sessions).
"""

from __future__ import annotations

import html
import math
from typing import Any, Mapping, Sequence

from pipeline.conversation.messages import KIND_LABELS
from pipeline.tutor.metrics import NO_LIKELY_RANGE, NOT_MEASURABLE
from pipeline.units import format_seconds, plural

ASPECTS = ("total", "accuracy", "fluency", "prosody")
UNPARSED_DISAGREEMENT = 10.0
"""An unparsed answer disagrees by the whole 0-10 scale (it said nothing usable)."""
_COLOURS = ("#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#b07aa1", "#76b7b2", "#edc948", "#9c755f")


def model_label(result: Mapping[str, Any]) -> str:
    """`base · NAME` for a base model (a local folder by its name, `pipeline.tutor.evaluate.model_name`), `run ·
    NAME` for a tuned run; a partial evaluation (cancelled or stopped, `result["partial"]`) adds ` · partial 3
    of 6`: test recordings answered (`answered_count`, the count every other place shows) of all."""
    from pipeline.tutor.evaluate import model_name

    partial = result.get("partial")
    mark = f" · partial {answered_count(result)} of {partial['of']}" if partial else ""
    if result.get("run"):
        return f"run · {result['run']}{mark}"
    if result.get("scorer") or result.get("model") == "classical-scorer":  # a saved evaluation, or a job's target
        return f"Classical scorer (no fine-tuning){mark}"
    return f"base · {model_name(result.get('model'))}{mark}"


def answered_count(result: Mapping[str, Any]) -> int:
    """How many test recordings `result` answered, every kind together: its read-aloud clips (`clips`, the
    ones the experts scored) plus the recordings of other kinds (a dialogue of several tutor turns counts
    once). The one count behind "partial N of M", "N answered so far", "test recordings answered" and the
    list of evaluations on other data; it is what the progress bar counted (a saved result without its
    answers falls back on the count its job recorded, `partial.answered`)."""
    others = {str(a.get("id")) for a in result.get("answers") or () if a.get("kind", "read_aloud") != "read_aloud"}
    clips = result.get("clips")
    if clips is None and result.get("partial"):
        return int(result["partial"].get("answered") or 0)
    return int(clips or 0) + len(others)


MEANINGS = {
    "recordings": "test recordings the tutor answered, of every kind; the score and flag figures count the "
                  "read-aloud ones (those the experts scored: n), the feedback-wording figure counts each answer "
                  "(a dialogue gives one per tutor turn)",
    "unparsed": "answers whose scores or word list could not be read; each counts as a miss",
    "PCC": "do the tutor's scores rise and fall with the experts'? 1 = in step, 0 = unrelated; [range] = "
           "where the true value likely lies (95 %). Why? Pearson's correlation (PCC)",
    "SCC": "does the tutor rank the recordings best to worst as the experts do? 1 = same order. Why? Spearman's "
           "rank correlation (SCC)",
    "MAE": "points (of 10) the tutor's score is off the experts' on average; lower is better (n = scores read, % "
           "= share of answers read). Why? mean absolute error (MAE)",
    "precision": "of what the tutor told learners to practise, the share the experts also flagged (precision)",
    "recall": "of what the experts flagged, the share the tutor flagged too (recall)",
    "F1": "the two shares above in one number: 1 = flags exactly what the experts flagged. Why? their harmonic "
          "mean (F1)",
    "chrF": "how much the tutor's text overlaps the reference feedback, letter by letter (0-100). Why? character "
            "n-gram F-score (chrF)",
    "longest answer": "the answer length limit of this evaluation, in tokens (word pieces)",
    "seconds": "how long the evaluation took",
}
"""One line per headline figure, in a teacher's words, with the field's term after "Why?" (the last column
of `headline_frame`)."""

ASPECT_WORDS = {"total": "total score", "accuracy": "accuracy score", "fluency": "fluency score",
                "prosody": "rhythm and intonation score (prosody)"}
"""The four sentence scores of speechocean762 as the headline names them."""


def _num(value: float | None, digits: int = 2) -> str:
    return "–" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.{digits}f}"


def _with_ci(value: float | None, interval: Sequence[float] | None, reason: str | None = None) -> str:
    if value is None:
        return f"– ({reason})" if reason else "–"
    return _num(value) + (f" [{interval[0]:.2f}, {interval[1]:.2f}]" if interval else f" [{NO_LIKELY_RANGE}]")


def unreadable(result: Mapping[str, Any]) -> bool:
    """Whether none of `result`'s read-aloud answers could be read (every one unparsed): then no score or flag
    figure is measurable (an evaluation saved before `NOT_MEASURABLE` holds recall 0.00 / F1 0.00 there)."""
    return bool(result.get("clips")) and result.get("unparsed") == result.get("clips")


def recordings_answered(result: Mapping[str, Any]) -> str:
    """How many test recordings `result` answered, every kind together: the count the progress bar went up to
    (one per recording, a dialogue of several tutor turns included), with the read-aloud ones the score
    figures count when other kinds are there: `22 (20 read aloud, 2 of other kinds)`."""
    total, clips = answered_count(result), int(result.get("clips") or 0)
    if total == clips:
        return str(total)
    return f"{total} ({clips} read aloud, {total - clips} of other kinds)"


def _mae(score: Mapping[str, Any]) -> str:
    coverage = _num(100 * score["coverage"], 0) if score.get("coverage") is not None else "–"
    return f"{_num(score['mae'])} (n={score['n']}, {coverage} %)"


def headline_frame(results: Sequence[Mapping[str, Any]]):
    """The headline figures side by side: one row per figure, one column per model (`model_label`).

    Rows, each named in a teacher's words first with the field's term in brackets: test recordings answered
    (`recordings_answered`); unreadable answers (count and %); for each sentence score (`ASPECT_WORDS`) PCC and
    SCC with their 95 % bootstrap intervals ("likely range") and MAE with n and coverage; precision, recall
    and F1 (with interval) of flagged words and of phone errors (read-aloud rows, against the experts); chrF
    against the reference feedback for each sample kind present (`pipeline.tutor.by_kind`); the answer length
    limit and the seconds taken. The last column, "what it means", gives each figure's meaning in a
    teacher's words (`MEANINGS`). When none of a model's answers could be read (`unreadable`), its score and
    flag figures say `NOT_MEASURABLE` instead of a number.
    """
    import pandas as pd

    rows: list[tuple[str, list[str], str]] = [
        ("test recordings answered", [recordings_answered(r) for r in results], "recordings"),
        ("answers that could not be read (count as misses)",
         [f"{r['unparsed']} of {r['clips']} read-aloud ({100 * (r['unparsed_fraction'] or 0):.0f} %)"
          for r in results], "unparsed"),
    ]

    def cells(figure) -> list[str]:  # `figure(r)` per result, or why it cannot be measured (no number for no data)
        return [NOT_MEASURABLE if unreadable(r) else figure(r) for r in results]

    for aspect in ASPECTS:
        words = ASPECT_WORDS[aspect]
        rows += [
            (f"{words}: agrees with the experts' (PCC) [likely range]",
             cells(lambda r: _with_ci(r["scores"][aspect]["pcc"], r["scores"][aspect]["pcc_ci"],
                                      r["scores"][aspect].get("reason"))), "PCC"),
            (f"{words}: ranks recordings as the experts do (SCC) [likely range]",  # its reason: the row above
             cells(lambda r: _with_ci(r["scores"][aspect]["scc"], r["scores"][aspect]["scc_ci"])), "SCC"),
            (f"{words}: average difference, points of 10 (MAE) (scores read, % read)",
             cells(lambda r: _mae(r["scores"][aspect])), "MAE"),
        ]
    for name, title in (("words", "words to practise"), ("phones", "sounds to practise")):
        rows += [
            (f"{title}: share the experts also flagged (precision)", cells(lambda r: _num(r[name]["precision"])),
             "precision"),
            (f"{title}: share of the experts' flags found (recall)", cells(lambda r: _num(r[name]["recall"])),
             "recall"),
            (f"{title}: flagged like the experts, 0-1 (F1) [likely range]",
             cells(lambda r: _with_ci(r[name]["f1"], r[name]["f1_ci"])), "F1"),
        ]
    kinds = [kind for kind in KIND_LABELS if any(kind in (r.get("by_kind") or {}) for r in results)]
    for kind in kinds:  # every kind against its reference feedback (chrF, sacrebleu), beside the expert scores
        cells = []
        for r in results:
            entry = (r.get("by_kind") or {}).get(kind)
            chrf = (entry or {}).get("chrf") or {}
            cells.append("–" if not chrf else f"{_num(chrf.get('chrf'), 1)} (n={entry.get('answers', '?')})")
        rows.append((f"{KIND_LABELS[kind]}: feedback worded like the reference, 0-100 (chrF) (answers)", cells,
                     "chrF"))
    rows += [
        ("longest answer allowed (tokens)", [str(r.get("max_new_tokens", "–")) for r in results], "longest answer"),
        ("time taken (seconds)", [_num(r.get("seconds"), 0) for r in results], "seconds"),
    ]
    columns = ["figure", *[model_label(r) for r in results], "what it means"]
    return pd.DataFrame([[name, *values, MEANINGS[key]] for name, values, key in rows], columns=columns)


def scatter_figure(results: Sequence[Mapping[str, Any]]):
    """Expert total score (x) against each model's total score (y), one colour per model; unparsed
    answers are drawn as crosses in a band below 0, so none disappears from the picture. With no results, a
    blank figure: the status above says there is no evaluation yet (said twice, one above the other, it was
    noise)."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6.4, 4.4), layout="constrained")
    ax = fig.add_subplot()
    if not results:
        ax.set_axis_off()
        return fig
    ax.plot([0, 10], [0, 10], color="#999999", linestyle="--", linewidth=1, label="agreement")
    ax.axhspan(-1.6, -0.4, color="#f3f3f3", zorder=0)
    for index, result in enumerate(results):
        colour = _COLOURS[index % len(_COLOURS)]
        shift = (index - (len(results) - 1) / 2) * 0.08  # models side by side at the same expert score
        parsed = [(c["scores"]["total"]["expert"], c["scores"]["total"]["tutor"]) for c in result["per_clip"]
                  if c["scores"]["total"]["expert"] is not None and c["scores"]["total"]["tutor"] is not None]
        unparsed = [c["scores"]["total"]["expert"] for c in result["per_clip"]
                    if c["scores"]["total"]["expert"] is not None and not c["parsed"]]
        label = f"{model_label(result)} ({len(parsed)} scored, {len(unparsed)} not readable)"
        if parsed:
            ax.scatter([x + shift for x, _ in parsed], [y for _, y in parsed], color=colour, alpha=0.75, s=28,
                       label=label)
        if unparsed:
            ax.scatter([x + shift for x in unparsed], [-1.0] * len(unparsed), color=colour, marker="x", s=32,
                       label=None if parsed else label)
    ax.set_xlim(-0.5, 10.5)
    ax.set_ylim(-1.6, 10.5)
    ax.set_yticks([-1, 0, 2, 4, 6, 8, 10], ["not readable", "0", "2", "4", "6", "8", "10"])
    ax.set_xlabel("experts' total score (points of 10)")
    ax.set_ylabel("tutor's total score (points of 10)")
    ax.set_title("Expert vs tutor: total score per read-aloud recording")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper left")
    return fig


def clip_rows(results: Sequence[Mapping[str, Any]]) -> list[dict]:
    """One entry per clip over all `results`, largest disagreement first.

    Each: `id`, `sentence`, `expert_total`, `expert_feedback`, `answers` ({label: {"answer", "total",
    "parsed", "reason"}}) and `disagreement`: the largest |tutor - expert| total over the models, an
    unparsed answer counting `UNPARSED_DISAGREEMENT` (10, the whole scale) for the order only: a clip whose
    every answer is unreadable is shown with `disagreement_words` ("no answer could be read"), not a figure.
    """
    clips: dict[str, dict] = {}
    for result in results:
        label = model_label(result)
        for clip in result["per_clip"]:
            entry = clips.setdefault(str(clip["id"]), {
                "id": str(clip["id"]), "sentence": clip.get("target_text") or "",
                "expert_total": clip["scores"]["total"]["expert"],
                "expert_feedback": clip.get("reference_feedback") or "", "answers": {},
            })
            entry["answers"][label] = {"answer": clip.get("answer") or "", "total": clip["scores"]["total"]["tutor"],
                                       "parsed": clip["parsed"], "reason": clip.get("unparsed_reason")}
    for entry in clips.values():
        gaps = []
        for answer in entry["answers"].values():
            if not answer["parsed"]:
                gaps.append(UNPARSED_DISAGREEMENT)
            elif answer["total"] is not None and entry["expert_total"] is not None:
                gaps.append(abs(answer["total"] - entry["expert_total"]))
        entry["disagreement"] = max(gaps) if gaps else None
        entry["unreadable"] = bool(entry["answers"]) and not any(a["parsed"] for a in entry["answers"].values())
    return sorted(clips.values(), key=lambda e: (-(e["disagreement"] if e["disagreement"] is not None else -1), e["id"]))


def _short(text: str, limit: int = 90) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def disagreement_words(row: Mapping[str, Any]) -> str:
    """A clip's disagreement as shown (one decimal), or "no answer could be read" when every model's answer
    was unreadable: no figure for data that is missing (`UNPARSED_DISAGREEMENT` only orders the table)."""
    return "no answer could be read" if row.get("unreadable") else _num(row["disagreement"], 1)


def clips_frame(rows: Sequence[Mapping[str, Any]], labels: Sequence[str]):
    """The per-clip table of `clip_rows`: clip, sentence, disagreement, expert total and feedback, then
    each model's total and answer (first 90 characters; select a row for the whole text and the audio)."""
    import pandas as pd

    columns = ["clip", "sentence", "disagreement", "expert total", "expert feedback"]
    for label in labels:
        columns += [f"{label}: total", f"{label}: answer"]
    table = []
    for row in rows:
        line = [row["id"], row["sentence"], disagreement_words(row), _num(row["expert_total"], 1),
                _short(row["expert_feedback"])]
        for label in labels:
            answer = row["answers"].get(label)
            if answer is None:
                line += ["", ""]
            else:
                line += ["not readable" if not answer["parsed"] else _num(answer["total"], 1), _short(answer["answer"])]
        table.append(line)
    return pd.DataFrame(table, columns=columns)


def clip_markdown(row: Mapping[str, Any] | None) -> str:
    """A clip's full texts: the sentence, the experts' feedback and every model's answer (with why an
    answer could not be read)."""
    if not row:
        return "Select a clip in the table to hear it and read every answer in full."
    parts = [f"**Clip `{row['id']}`** · sentence: *{html.escape(row['sentence'])}* · disagreement "
             f"{disagreement_words(row)}", "", "**Experts' feedback**", "", _quote(row["expert_feedback"])]
    for label, answer in row["answers"].items():
        status = "" if answer["parsed"] else f" — ✗ could not be read (unparsed): {answer['reason']}"
        parts += ["", f"**{label}**{status}", "", _quote(answer["answer"] or "(empty answer)")]
    return "\n".join(parts)


def _quote(text: str) -> str:
    return "\n".join("> " + html.escape(line) for line in str(text).splitlines() or [""])


def progress_html(done: int, total: int, message: str, elapsed_s: float | None = None, *,
                  checks: tuple[int, int] = (0, 0), left: str = "", ended: bool = False) -> str:
    """The evaluation's progress bar: test recordings answered of all to answer (the count the headline's "test
    recordings answered" shows when it is done), the listening checks `(done, total)` named apart when the
    evaluation asks them (`pipeline.tutor.eval_jobs.count_words`); the bar and its % cover both. Then what
    happens now (`message`, plain text: its code marks are dropped, since HTML shows no Markdown) and, while
    it runs, about how long is left (`left`: `pipeline.tutor.eval_jobs.time_left_words`). `elapsed_s`: seconds
    "so far", or, once `ended`, how long it "took"."""
    from pipeline.tutor.eval_jobs import count_words

    work, work_done = total + checks[1], done + checks[0]
    fraction = min(1.0, work_done / work) if total else 0.0
    elapsed = "" if elapsed_s is None else (f" · took {format_seconds(elapsed_s)}" if ended else
                                            f" · {format_seconds(elapsed_s)} so far")
    elapsed += f" · {left}" if left else ""
    return (
        '<div class="judge-progress">'
        f'<progress value="{fraction * 100:.1f}" max="100" style="width:100%;height:1.4em"></progress>'
        f"<div>{html.escape(count_words(done, total, *checks))} · {fraction * 100:.0f} %{elapsed} · "
        f"{html.escape(str(message).replace('`', ''))}</div></div>"
    )


def full_stop(text: str) -> str:
    """`text` ending with one full stop: "tick it and press Evaluate." stays as it is, and a fragment gets
    one (joining a sentence that has one already gave "Evaluate..")."""
    text = str(text).rstrip()
    return text if text.endswith((".", "!", "?", "…")) else text + "."


VERDICT_WORDS = {"better": "✓", "worse": "✗", "cant_tell": "?", "no_base": "?", "no_scorer": "?"}


def verdict_markdown(results: Sequence[Mapping[str, Any]]) -> str:
    """The verdict before the statistics: one line per run among `results` (`pipeline.tutor.verdict`):
    better than its base model, worse, or can't tell yet (with how many more test recordings would
    help), each with the figure it rests on. Once the classical scorer was evaluated on the same build it is the
    main yardstick (beats it, worse, can't tell yet), with the base model's line under it. Empty when no run
    was evaluated."""
    from pipeline.tutor.verdict import verdicts

    labels = {r["run"]: model_label(r) for r in results if r.get("run")}  # marks a partial evaluation
    lines = []
    for v in verdicts(results):
        yardstick = v["scorer"]
        if yardstick["outcome"] == "no_scorer":  # the classical scorer not judged on this build: the base model alone
            lines.append(f"- {VERDICT_WORDS[v['outcome']]} **{labels[v['run']]}**: {full_stop(v['line'])}")
            continue
        # The classical scorer is the main yardstick; the base model stays a line under it.
        lines.append(f"- {VERDICT_WORDS[yardstick['outcome']]} **{labels[v['run']]}**: {full_stop(yardstick['line'])}")
        lines.append(f"  - {VERDICT_WORDS[v['outcome']]} against the base model: {full_stop(v['line'])}")
    return "**Verdict**\n\n" + "\n".join(lines) if lines else ""


def _when(stamp: float | None) -> str:
    import time

    return time.strftime("%Y-%m-%d %H:%M", time.localtime(stamp)) if stamp else "at an unknown time"


def other_builds_markdown(others: Sequence[Mapping[str, Any]], key: str) -> str:
    """The saved evaluations not made on the current build's whole eval split `key`, each marked: made on
    another dataset build (the split changed since: not compared with the results above), or on the
    first N clips of this build (`--limit`). Empty when there are none."""
    if not others:
        return ""
    lines = []
    for result in sorted(others, key=lambda r: -(r.get("finished_at") or 0)):
        other = str(result.get("dataset_key"))
        where = (f"on the first {other.rsplit('-first', 1)[1]} clips of this build" if other.startswith(key + "-first")
                 else "on an earlier build of the dataset")
        total = result["scores"]["total"]
        if total.get("pcc") is None or unreadable(result):  # no figure for missing data: the reason in words
            figure = f"total scores' agreement with the experts (PCC): {total.get('reason') or NOT_MEASURABLE}"
        else:
            figure = f"total scores agree with the experts' (PCC) {_with_ci(total['pcc'], total['pcc_ci'])}"
        lines.append(f"- **{model_label(result)}**, {where}, {_when(result.get('finished_at'))}: "
                     f"{plural(answered_count(result), 'test recording')} answered{_read_aloud_aside(result)}, "
                     f"{figure}")
    return (f"**{plural(len(others), 'evaluation')} made on other data**, kept but not compared with the ones above "
            "(their test recordings differ; evaluate again to compare):\n\n" + "\n".join(lines))


def _read_aloud_aside(result: Mapping[str, Any]) -> str:
    """" (19 read aloud)" when the recordings answered (`answered_count`) include other kinds than the
    read-aloud clips the score figures count; "" when they are all read aloud."""
    clips = int(result.get("clips") or 0)
    return f" ({clips} read aloud)" if answered_count(result) != clips else ""


def _same_target(result: Mapping[str, Any], target: Mapping[str, Any]) -> bool:
    """Whether a saved evaluation `result` is of the job's `target` ({"run": NAME} or {"model": MODEL})."""
    if target.get("run"):
        return result.get("run") == target["run"]
    return not result.get("run") and str(result.get("model")) == str(target.get("model"))


def _saved_count_words(shown: Sequence[Mapping[str, Any]], growing: Sequence[Mapping[str, Any]]) -> str:
    """The first line of the status: the `shown` evaluations counted apart, finished ones, partial ones
    (stopped before the end) and the ones being evaluated now (`growing`): an unfinished evaluation is not a
    saved one. "2 saved evaluations on this dataset's test recordings." when all are finished."""
    finished = [r for r in shown if not r.get("partial")]
    stopped = [r for r in shown if r.get("partial") and r not in growing]
    if not stopped and not growing:
        return f"{plural(len(finished), 'saved evaluation')} on this dataset's test recordings."
    parts = [f"{len(finished)} finished" if finished else "none finished yet"]
    if stopped:
        parts.append(f"{len(stopped)} stopped before the end (partial)")
    if growing:
        parts.append("one is running" if len(growing) == 1 else f"{len(growing)} are running")
    return "Evaluations on this dataset's test recordings: " + "; ".join(parts) + "."


def saved_status_markdown(shown: Sequence[Mapping[str, Any]], key: str, others: Sequence[Mapping[str, Any]], *,
                          job_running: bool = False, running_targets: Sequence[Mapping[str, Any]] = (),
                          job_on_earlier_build: bool = False) -> str:
    """The status above the saved evaluations: how many of the current build's eval split `key` are `shown`
    (or, with none, what to do: tick models and press Evaluate, or wait for the `job_running`), which are
    partial, the first note among them, then the `others` made on other data (`other_builds_markdown`).

    A partial evaluation of a model the running job still evaluates (`running_targets`, the job's targets)
    is its answers so far: said as such, with no warning and no invitation to evaluate again (a second job
    would only wait). One that was cancelled, or whose job ended without finishing it, gets the warning.

    `job_on_earlier_build`: the running job evaluates an earlier build of the dataset (rebuilt since it
    started): said as such, since its results will not be these test recordings' (they join the list of
    evaluations on other data), and Evaluate waits for it to end."""
    # While a job runs (a page reopened during an evaluation) "press Evaluate" would contradict the progress bar.
    if job_running and job_on_earlier_build:
        waiting = ("the evaluation running now (progress above) is of an earlier build of the dataset, so its "
                   "results will be listed with the evaluations on other data. When it has finished, or after "
                   "Cancel, tick models and press Evaluate.")
    elif job_running:
        waiting = "one is running (progress above): each model's results appear here when it is done."
    else:
        waiting = "tick models and press Evaluate."
    growing = [r for r in shown if r.get("partial") and not r["partial"].get("reason") and job_running
               and not job_on_earlier_build and any(_same_target(r, target) for target in running_targets)]
    status = (_saved_count_words(shown, growing) if shown else
              f"No evaluation on this dataset's test recordings yet: {waiting}")
    if growing:
        status += ("\n\nBeing evaluated now (progress above): " + ", ".join(
            f"{model_label(dict(r, partial=None))}, {answered_count(r)} of {r['partial']['of']} answered so far"
            for r in growing) + ". Its figures below grow as it goes; they are final when it is done.")
    ended = [r for r in shown if r.get("partial") and r not in growing]
    if ended:
        how = {"cancelled": "cancelled"}
        status += ("\n\n⚠ Partial: " + ", ".join(
            f"{model_label(r)} ({how.get(r['partial'].get('reason'), 'its evaluation stopped before the end')})"
            for r in ended) + ". What was answered is kept; Evaluate again for all the test recordings.")
    notes = {}  # each note once: a stand-in's answers warn; the classical scorer's map note only informs
    for result in shown:
        if result.get("note"):
            scorer = result.get("scorer") or result.get("model") == "classical-scorer"
            notes.setdefault(result["note"], "About the classical scorer: " if scorer else "⚠ ")
    status += "".join(f"\n\n{prefix}{note}" for note, prefix in notes.items())
    other_data = other_builds_markdown(others, key)
    if other_data:
        status += "\n\n" + other_data
    return status


def reason_words(status: Mapping[str, Any]) -> str:
    """How a job ended (`status["reason"]`, the command line's sentence) without the paths of its folder, which
    the teacher never saw: "(see .../process.log)" and "See .../process.log." are dropped, any other file of
    the job's folder (`status["job_dir"]`) is "the evaluation's own folder"."""
    import re

    reason, folder = str(status.get("reason") or ""), str(status.get("job_dir") or "")
    if not folder:
        return reason
    path = re.escape(folder) + r"[^\s)]*"
    reason = re.sub(r"\s*\(see " + path + r"\)", "", reason)
    reason = re.sub(r"\s*See " + path + r"\.?", "", reason)
    return re.sub(path, "the evaluation's own folder", reason).strip()


def job_progress_html(status: Mapping[str, Any] | None, now: float | None = None, *,
                      current_key: str | None = None) -> str:
    """The progress bar of an evaluation job (`pipeline.tutor.eval_jobs.job_status`): answers of the model
    being evaluated, which model of how many, about how long is left while it runs (from its own pace,
    `time_left_words`), and how the job stands or ended: "✓ done: run · r1 and base · m evaluated" (with
    the reason of a cancel or failure). When the job's dataset build is not `current_key` (the build
    now; None: not known) the bar says it is about an earlier build of the dataset."""
    import time

    from pipeline.tutor.eval_jobs import time_left_words

    if not status or status.get("state") == "not_started":
        return progress_html(0, 0, "not started")
    done, total, state = int(status.get("done") or 0), int(status.get("total") or 0), status["state"]
    count = len(status.get("targets") or [])
    which = f"model {int(status.get('target_index') or 0) + 1} of {count}" if count > 1 else ""
    checks = (int(status.get("checks_done") or 0), int(status.get("checks_total") or 0))
    left = ""
    if state in ("running", "cancelling"):
        message = ": ".join(part for part in (which, status.get("message") or "") if part)
        message += " · cancelling" if state == "cancelling" else ""
        if state == "running" and total:
            left = time_left_words(status.get("answer_times") or [], (total - done) + (checks[1] - checks[0]),
                                   " for this model" if count > 1 else "")
    elif state == "completed":
        names = [model_label(t) for t in status.get("targets") or []]
        message = f"✓ done: {' and '.join(names) or 'every model'} evaluated; the results are below"
    else:
        message = {"cancelled": "cancelled", "failed": "failed"}[state]
        message += f": {reason_words(status)}" if status.get("reason") else ""
    if current_key and status.get("dataset_key") and status["dataset_key"] != current_key:
        message = "on an earlier build of the dataset · " + message.replace(
            "the results are below", "the results are listed with the evaluations on other data below")
    started = status.get("created_at")
    end = status.get("finished_at") or (now if now is not None else time.time())
    return progress_html(done, total, message, (end - started) if started else None, checks=checks, left=left,
                         ended=state not in ("running", "cancelling"))


def earlier_job_line(status: Mapping[str, Any]) -> str:
    """An ended evaluation job of an earlier dataset build, in one line instead of its bar (its figures are
    not this build's): what it evaluated, how it ended, and where its results are."""
    names = " and ".join(model_label(t) for t in status.get("targets") or []) or "the models"
    how = {"completed": "finished", "cancelled": "was cancelled", "failed": "failed"}.get(status.get("state"), "ended")
    return (f'<div class="judge-progress">The last evaluation ({html.escape(names)}) {how} on an earlier build of '
            "the dataset; what it answered is listed with the evaluations on other data below.</div>")


def column_widths(frame, *, min_px: int = 90, max_px: int = 320, char_px: int = 9) -> list[str]:
    """Pixel widths for a table's columns: wide enough that no header word is broken across lines (a
    1280 px page squeezed "disagreement" into "disag/reeme/nt"), nor a cell word up to `max_px`; long texts
    get up to `max_px` and wrap onto about two lines. The table scrolls sideways when the widths add up to
    more than the page. `char_px`: an upper estimate of one character's width at the table's font size."""
    widths = []
    for column in frame.columns:
        cells = [str(v) for v in frame[column].head(50)]
        header_word = max((len(w) for w in str(column).split()), default=0)
        cell_word = max((len(w) for text in cells for w in text.split()), default=0)
        longest = max((len(text) for text in cells), default=0)
        fit = min(max_px, max(char_px * cell_word, char_px * longest // 2) + 24)
        widths.append(f"{max(min_px, char_px * header_word + 24, fit)}px")
    return widths


def hearing_markdown(results: Sequence[Mapping[str, Any]]) -> str:
    """Per model, in a teacher's words: whether the tutor hears the recording (the grounding probes,
    when the evaluation asked them), the phones it blames whatever it hears, and the learners it judges
    worst (`pipeline.tutor.grounding`); "" when there is nothing to say."""
    from pipeline.tutor.grounding import grounding_text, overblamed_phones

    lines = []
    for result in results:
        said = []
        heard = grounding_text(result.get("grounding"))
        if heard:
            said.append(heard)
        for row in overblamed_phones(result.get("per_phone") or []):
            said.append(f"It flags the sound **{row['phone']}** in {row['tutor_clips']} of {plural(row['clips'], 'clip')}, the "
                        f"experts in {row['expert_clips']}: it may blame it whatever it hears.")
        worst = next((r for r in result.get("per_learner") or [] if r.get("total_mae") is not None), None)
        if worst is not None and len(result.get("per_learner") or []) > 1:
            direction = "too kind" if worst["total_bias"] > 0 else "too harsh" if worst["total_bias"] < 0 else "off"
            said.append(f"It judges learner **{worst['speaker']}** least like the experts: {direction}, by "
                        f"{worst['total_mae']:.1f} points of 10 on average over {plural(int(worst['clips']), 'clip')}.")
        if said:
            lines.append(f"- **{model_label(result)}**: " + " ".join(said))
    if not lines:
        return ""
    return "#### Does the tutor hear the learner?\n" + "\n".join(lines)
