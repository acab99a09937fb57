"""What changed between dataset builds: the sample library since the last build, and the split.

`sample_digest` is what a build records per sample (`BuildReport.sample_digests`), so `library_changes`
can say, before the next build, which samples were added, edited or deleted since; `split_changes`
compares two builds' reports and says which learners moved between the training and test sets, and
what changed that decides the split (`pipeline.data.dataset.split_ids`). Pure functions of samples and
reports: nothing is read from disk here (`pipeline.data.dataset.library_changes` reads them).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Iterable, Sequence
from pipeline.units import plural


def some_ids(ids: Sequence[str], shown: int = 5) -> str:
    """Up to `shown` ids, in order, then "and N more": which samples a note is about."""
    ids = sorted(ids)
    more = f" and {len(ids) - shown} more" if len(ids) > shown else ""
    return ", ".join(ids[:shown]) + more


def sample_digest(sample: Any) -> str:
    """SHA-256 (hex) of what a build reads from one sample (`pipeline.data.samples.Sample`): its kind,
    texts (sentence, prompt, feedback, transcript), speaker, expert scores, audio digest and a
    dialogue's turns. Two digests differ exactly when an edit could change the sample's row or the
    split it falls in; where the clip came from and its check report do not count."""
    turns = [{k: t.get(k) for k in ("role", "text", "transcript", "audio_sha256")} for t in sample.turns or []]
    content = [sample.kind or "read_aloud", sample.target_text, sample.prompt, sample.feedback, sample.transcript,
               sample.speaker, sample.scores, sample.audio_sha256, turns]
    return hashlib.sha256(json.dumps(content, ensure_ascii=False, sort_keys=True).encode("utf-8")).hexdigest()


def library_changes(samples: Iterable[Any], report: dict) -> dict:
    """How the sample library (`samples`, `pipeline.data.samples.Sample`s as listed now) changed since
    the build whose report is `report` (`BuildReport.to_dict()`).

    Returns `{"added", "edited", "deleted"}` (sorted sample ids), `"changed"` (any of the three) and
    `"built_at"` (unix seconds of that build), `"first_build"` (that build had no build before it: its
    `split_changes` is None; a report older than that field says False). A build made before reports recorded each sample
    (`sample_digests`) is compared by ids only: `"edits_known"` is then False and `edited` empty.
    """
    samples = {s.id: s for s in samples}
    digests = report.get("sample_digests") or {}
    if digests:
        before = set(digests)
        edited = sorted(i for i in before & set(samples) if sample_digest(samples[i]) != digests[i])
    else:
        before = {i for ids in (report.get("row_ids") or {}).values() for i in ids}
        before |= {e["id"] for e in report.get("excluded") or []}
        edited = []
    added, deleted = sorted(set(samples) - before), sorted(before - set(samples))
    return {"added": added, "edited": edited, "deleted": deleted, "changed": bool(added or edited or deleted),
            "edits_known": bool(digests), "built_at": report.get("built_at") or None,
            "first_build": "split_changes" in report and report["split_changes"] is None}


def split_changes(previous: dict | None, current: dict, speaker_of: dict[str, str | None] | None = None) -> dict | None:
    """Which learners (and unnamed samples) changed sides between two builds, and why.

    `previous` and `current` are build reports (`BuildReport.to_dict()`); None for a first build.
    `speaker_of`: row id -> speaker of the current rows; rows of a named learner are then said with
    the learner, not one by one. Returns `{"to_eval", "to_train"}`: speakers that were on the other side before (sorted names);
    `"rows_to_eval"`, `"rows_to_train"`: ids of rows without a speaker that changed sides; `"moved"`
    (any of these); `"reasons"`: what differs between the two builds that decides the split
    (`split_ids`: the set of rows and their speakers, `eval_fraction`, `seed`), in words. A learner
    added or removed is not "moved": only someone present in both builds' splits can move.
    """
    if not previous or not previous.get("row_ids"):
        return None
    old_speakers = {name: set(v) for name, v in (previous.get("speakers") or {}).items()}
    new_speakers = {name: set(v) for name, v in (current.get("speakers") or {}).items()}
    to_eval = sorted(new_speakers.get("eval", set()) & old_speakers.get("train", set()))
    to_train = sorted(new_speakers.get("train", set()) & old_speakers.get("eval", set()))
    old_ids = {name: set(v) for name, v in previous["row_ids"].items()}
    new_ids = {name: set(v) for name, v in (current.get("row_ids") or {}).items()}
    rows_to_eval = sorted(new_ids.get("eval", set()) & old_ids.get("train", set()))
    rows_to_train = sorted(new_ids.get("train", set()) & old_ids.get("eval", set()))
    if speaker_of is not None:  # a named learner's rows are said with the learner
        rows_to_eval = [i for i in rows_to_eval if not speaker_of.get(i)]
        rows_to_train = [i for i in rows_to_train if not speaker_of.get(i)]
    reasons: list[str] = []
    if previous.get("seed") != current.get("seed"):
        reasons.append(f"the split seed changed ({previous.get('seed')} -> {current.get('seed')})")
    if previous.get("eval_fraction") != current.get("eval_fraction"):
        reasons.append(f"the held-out share changed ({previous.get('eval_fraction')} -> {current.get('eval_fraction')})")
    old_all, new_all = set().union(*old_speakers.values()), set().union(*new_speakers.values())
    if new_all - old_all:
        reasons.append(f"{plural(len(new_all - old_all), 'new learner')}: {', '.join(sorted(new_all - old_all))}")
    if old_all - new_all:
        reasons.append(f"{plural(len(old_all - new_all), 'learner')} no longer in the dataset: {', '.join(sorted(old_all - new_all))}")
    old_rows, new_rows = set().union(*old_ids.values()), set().union(*new_ids.values())
    if new_rows != old_rows:
        reasons.append(f"{plural(len(new_rows - old_rows), 'row')} added and {len(old_rows - new_rows)} left out or deleted")
    return {"to_eval": to_eval, "to_train": to_train, "rows_to_eval": rows_to_eval, "rows_to_train": rows_to_train,
            "moved": bool(to_eval or to_train or rows_to_eval or rows_to_train), "reasons": reasons}
