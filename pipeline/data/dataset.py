"""Sample library -> chat-formatted Hugging Face `DatasetDict` (train / eval) for Gemma 3n.

`pipeline.conversation.messages` defines the conversation the tutor sees (for each sample kind: read-aloud,
free speech, tutoring dialogue); training, the memory estimate and inference all read it, so the
prompt cannot drift between them. `pipeline.data.rows` turns a sample into a row (a dialogue row
holds all its clips). `build_dataset` splits
the library (speaker-disjoint when speakers are known), measures every row's length in tokens as
Gemma 3n sees it (text tokens + the fixed audio span: `pipeline.data.row_lengths`), lists rows that
cannot be trained on with the reason, saves the result atomically to `WS/dataset` and exports JSONL / Parquet to `WS/exports`.

What it deliberately does not do: truncate anything (a row too long is excluded, never cut), decode
audio with `datasets`' `Audio` feature (audio is stored as 16 kHz PCM16 WAV bytes and decoded with
`pipeline.data.audio`, so nothing depends on torchcodec / FFmpeg), or tokenize audio features (the
feature extractor runs at training time; every clip takes the same number of positions).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import random
import shlex
import statistics
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from pipeline.errors import DatasetError, cause_words
from pipeline.fileio import atomic_write_json, recover_staging, staged_folder
from pipeline.conversation.messages import KINDS
from pipeline.model.catalog import DEFAULT_MODEL
from pipeline.model.tokens import TokenCounter
from pipeline.data.build_changes import sample_digest, some_ids, split_changes
from pipeline.data.row_lengths import asked_turn_rows, render_rows, rows_that_fit
from pipeline.data.rows import COLUMNS, features as _features
from pipeline.workspace import Workspace
from pipeline.units import plural

SPLITS = ("train", "eval")
ROW_RULE = 2
"""How rows are written: 2 (issue 43) every trained answer follows the generation prompt the tutor is
asked with (`pipeline.data.row_lengths.asked_turn_rows`); builds before it (no `row_rule`) wrote the
rendered conversation."""
BUILD_REPORT_NAME = "build_report.json"
SUMMARY_EXCLUDED_LINES = 15
STAGING_PREFIX = ".dataset-tmp-"
"""The build's staging folders beside `WS/dataset` (`WS/.dataset-tmp-*`; a crashed build's leftover is
removed once older than `pipeline.fileio.STALE_STAGING_S`)."""


# --------------------------------------------------------------------------------------------------
# Length statistics
# --------------------------------------------------------------------------------------------------


@dataclass
class LengthDistribution:
    """Distribution of row lengths in tokens (text tokens + audio positions): the build report's
    `length_stats`, what the Dataset tab draws. Not the estimate's input: the memory estimate reads
    this record into its own `pipeline.memory.inputs.LengthStats` (the worst cases a `max_length`
    keeps, with its methods).

    `histogram` is a list of `{"lo", "hi", "count"}` bins covering [lo, hi) of equal integer width,
    the last bin closed. `p90` is the nearest-rank 90th percentile, `median` the lower median (a row's
    length: at least half the rows take at most it; token counts are whole, never "252.5"). The figures cover every kept
    row; `row_tokens` (sorted), `answer_tokens` and `max_clip_s` (seconds) cover the train split,
    the rows whose worst case sets training memory (read by
    `pipeline.memory.length_stats_from_workspace`). `answer_tokens[i]` is the supervised token
    count (answer + `<end_of_turn>`, as `pipeline.training.collate.build_labels` labels it) of the row of
    `row_tokens[i]`; `max_answer_tokens` its maximum. `row_clips[i]` is the number of clips of that
    row (the audio encoder runs on each; a dialogue has several), `max_clips` its maximum;
    `row_audio_tokens[i]` its clips' audio positions (Gemma 4's grow with the clip). `eval_*`
    are the same for the eval split (evaluation's worst case); `distinct_tokens` (in the report) the
    distinct token ids of every kept row. Reports written before these fields existed load with them
    empty / 0.
    """

    count: int = 0
    min: int = 0
    median: int = 0
    mean: float = 0.0
    p90: int = 0
    max: int = 0
    histogram: list[dict] = field(default_factory=list)
    row_tokens: list[int] = field(default_factory=list)
    max_clip_s: float = 0.0
    answer_tokens: list[int] = field(default_factory=list)
    max_answer_tokens: int = 0
    row_clips: list[int] = field(default_factory=list)
    max_clips: int = 0
    row_audio_tokens: list[int] = field(default_factory=list)
    eval_row_tokens: list[int] = field(default_factory=list)
    eval_answer_tokens: list[int] = field(default_factory=list)
    eval_max_clip_s: float = 0.0

    @classmethod
    def from_lengths(cls, lengths: Iterable[int], bins: int = 10) -> "LengthDistribution":
        values = sorted(int(v) for v in lengths)
        if not values:
            return cls()
        p90 = values[max(0, math.ceil(0.9 * len(values)) - 1)]
        lo, hi = values[0], values[-1]
        width = max(1, math.ceil((hi - lo + 1) / bins))
        histogram = []
        edge = lo
        while edge <= hi:
            top = edge + width
            n = sum(1 for v in values if edge <= v < top)
            histogram.append({"lo": edge, "hi": top, "count": n})
            edge = top
        return cls(
            count=len(values),
            min=lo,
            median=int(statistics.median_low(values)),
            mean=round(statistics.fmean(values), 1),
            p90=p90,
            max=hi,
            histogram=histogram,
        )

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "LengthDistribution":
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})


# --------------------------------------------------------------------------------------------------
# Splitting
# --------------------------------------------------------------------------------------------------


@dataclass
class Split:
    """Result of `split_ids`: sample ids per split, the method used and notes for the person."""

    train: list[str]
    eval: list[str]
    method: str  # "speaker" (speaker-disjoint) or "sample"
    notes: list[str] = field(default_factory=list)


def split_ids(
    rows: Sequence[tuple[str, str | None]], *, eval_fraction: float = 0.2, seed: int = 42
) -> Split:
    """Split `(sample_id, speaker)` pairs into train and eval ids.

    Speaker-disjoint when at least two speakers are known: whole speakers go to eval, chosen in a
    seeded shuffle, each added if it brings the eval row count closer to `eval_fraction * n`; at
    least one speaker stays on each side. Speakers are compared without regard to case or spacing ("Kate",
    "kate " and "KATE" are one learner; a note names such spellings). Samples without a speaker are then split
    at sample level (a note says so). With one known speaker or none, the split is sample-level, with a note.
    The result depends only on the set of pairs, `eval_fraction` and `seed` (not their order).

    Raises `DatasetError` when `eval_fraction` is outside [0, 1).
    """
    if not isinstance(eval_fraction, (int, float)) or not 0.0 <= float(eval_fraction) < 1.0:
        raise DatasetError(
            f"`--eval-fraction` must be in [0, 1) (share of rows held out for evaluation), got {eval_fraction!r}; "
            "0.2 is a good default."
        )
    rng = random.Random(seed)
    by_speaker: dict[str, list[str]] = {}
    spellings: dict[str, set[str]] = {}
    unknown: list[str] = []
    for sample_id, speaker in sorted(rows, key=lambda r: r[0]):
        written = " ".join((speaker or "").split())
        speaker = written.casefold()  # "Kate", "kate" and "KATE " are one learner, on one side of the split
        if speaker:
            by_speaker.setdefault(speaker, []).append(sample_id)
            spellings.setdefault(speaker, set()).add(written)
        else:
            unknown.append(sample_id)
    n = len(rows)
    notes: list[str] = [
        f"{' and '.join(sorted(names))} are taken as one learner (names are compared without regard to case)."
        for names in spellings.values() if len(names) > 1]
    if eval_fraction == 0 or n < 2:
        if eval_fraction > 0:
            notes.append(f"Only {plural(n, 'trainable row')}: nothing held out for evaluation; add more samples.")
        else:
            notes.append(
                "--eval-fraction 0: no rows held out, training uses every row and reports no eval loss "
                "(set 0.2 to measure how well the tutor does on unseen clips)."
            )
        return Split(train=sorted(r[0] for r in rows), eval=[], method="none", notes=notes)

    if len(by_speaker) >= 2:
        speakers = sorted(by_speaker)
        rng.shuffle(speakers)
        known_target = eval_fraction * sum(len(v) for v in by_speaker.values())
        eval_speakers: list[str] = []
        count = 0
        for speaker in speakers:
            if len(eval_speakers) == len(speakers) - 1:
                break
            size = len(by_speaker[speaker])
            if not eval_speakers or abs(count + size - known_target) < abs(count - known_target):
                eval_speakers.append(speaker)
                count += size
        train_ids = [i for s in speakers if s not in eval_speakers for i in by_speaker[s]]
        eval_ids = [i for s in eval_speakers for i in by_speaker[s]]
        if unknown:
            extra = _sample_split(unknown, eval_fraction, rng)
            train_ids += extra[0]
            eval_ids += extra[1]
            notes.append(
                f"{plural(len(unknown), 'sample')} {'has' if len(unknown) == 1 else 'have'} no speaker ({some_ids(unknown)}) and were split sample by sample; "
                "give them a speaker so that no learner ends up in both splits."
            )
        return Split(sorted(train_ids), sorted(eval_ids), "speaker", notes)

    train_ids, eval_ids = _sample_split([r[0] for r in rows], eval_fraction, rng)
    if len(by_speaker) == 1:
        notes.append(
            "All samples come from one speaker, so the split is sample by sample (the eval clips are "
            "from the same learner as the training clips); add a second speaker for a speaker-disjoint split."
        )
    else:
        notes.append(
            "No sample has a speaker, so the split is sample by sample and one learner may appear in both "
            "splits; set each sample's speaker for a speaker-disjoint split."
        )
    return Split(sorted(train_ids), sorted(eval_ids), "sample", notes)


def _sample_split(ids: list[str], eval_fraction: float, rng: random.Random) -> tuple[list[str], list[str]]:
    ids = sorted(ids)
    rng.shuffle(ids)
    n_eval = round(eval_fraction * len(ids))
    if len(ids) >= 2:
        n_eval = min(max(n_eval, 1), len(ids) - 1)
    else:
        n_eval = 0
    return ids[n_eval:], ids[:n_eval]


# --------------------------------------------------------------------------------------------------
# Building
# --------------------------------------------------------------------------------------------------


@dataclass
class BuildReport:
    """What `build_dataset` made: where, how many rows per split, what was left out and why.

    `splits`: split name -> rows. `excluded`: `[{id, reason, num_tokens?, speaker}]` (speaker: the sample's learner or None). `speakers`: split
    name -> sorted speaker names. `length_stats`: `LengthDistribution` dict over the kept rows (tokens).
    `split_method`: "speaker" (speaker-disjoint), "sample" or "none" (no eval split).
    `lengths`: every kept row's tokens, sorted (for histograms and the memory estimate).
    `kinds`: kind -> `{"rows", "train", "eval", "excluded", "tokens": {min, median, max}}` for each
    kind in the library (`pipeline.conversation.messages.KINDS`).
    `fingerprint`: SHA-256 of the rows' content per split (`fingerprint_rows`), `row_ids`: split
    name -> sorted ids, `built_at`: unix seconds; a run records them and a resume compares them
    (`pipeline.training.resume`). `sample_digests`, `split_changes`: see `pipeline.data.build_changes`.
    `drafts`: samples left out for want of feedback that have the classical scorer's draft waiting for a
    teacher (`WS/scoring/drafts.json`, `pipeline.scoring.drafts`): a draft is never trained on until accepted.
    `asked_rows`: how the train split's rows follow the answer-time prompt (`pipeline.data.row_lengths.
    asked_turn_rows`: what the generation prompt adds, rows and tokens before and after the rule, one row
    per tutor answer of a dialogue where needed); `row_rule`: `ROW_RULE` of the build.
    Reports written before these fields existed load with them empty.
    """

    path: str
    splits: dict[str, int]
    excluded: list[dict]
    length_stats: dict
    speakers: dict[str, list[str]]
    split_method: str
    notes: list[str]
    model: str
    max_length: int
    eval_fraction: float
    seed: int
    lengths: list[int] = field(default_factory=list)
    exports: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0
    kinds: dict[str, dict] = field(default_factory=dict)
    fingerprint: str = ""
    row_ids: dict[str, list[str]] = field(default_factory=dict)
    built_at: float = 0.0
    sample_digests: dict[str, str] = field(default_factory=dict)
    split_changes: dict | None = None
    drafts: int = 0
    asked_rows: dict = field(default_factory=dict)
    row_rule: int = 0

    def to_dict(self) -> dict:
        return asdict(self)

    def summary(self) -> str:
        """A few human-readable lines (used by the command line and the app)."""
        s = self.length_stats
        lines = [
            f"Dataset saved to {self.path}",
            "  " + ", ".join(f"{name}: {plural(rows, 'row')}" for name, rows in self.splits.items())
            + f" (split by {self.split_method})",
        ]
        for name, speakers in self.speakers.items():
            if speakers:
                lines.append(f"  {name} speakers: {', '.join(speakers)}")
        for kind, k in self.kinds.items():
            t = k.get("tokens") or {}
            left_out = f"; {k['excluded']} more excluded" if k["excluded"] else ""  # not among the rows counted
            lines.append(f"  {kind}: {plural(k['rows'], 'row')} (train {k['train']}, eval {k['eval']}{left_out})"
                         + (f", tokens min {t['min']}, median {t['median']:g}, max {t['max']}" if t else ""))
        a = self.asked_rows
        if a.get("template_adds"):
            lines.append(
                f"  each trained answer follows the prompt the tutor is asked with (it adds {a['template_adds']!r}): "
                f"train {plural(a['rows_before'], 'row')} -> {a['rows']}, {a['tokens_before']:,} -> {a['tokens']:,} tokens, "
                f"supervised {a['supervised_before']:,} -> {a['supervised']:,}")
        if s.get("count"):
            lines.append(
                f"  length in tokens: min {s['min']}, median {s['median']:g}, p90 {s['p90']}, max {s['max']} "
                f"(max allowed {self.max_length})"
            )
        if self.excluded:
            lines.append(f"  excluded {plural(len(self.excluded), 'row')}:")
            shown = self.excluded[:SUMMARY_EXCLUDED_LINES]
            lines.extend(f"    {e['id']}: {e['reason']}" for e in shown)
            if len(self.excluded) > len(shown):
                lines.append(f"    ... and {len(self.excluded) - len(shown)} more (all listed with --json)")
        lines.extend(f"  note: {n}" for n in self.notes)
        if self.drafts:
            lines.append(f"  {plural(self.drafts, 'draft')} of feedback waiting to be accepted (left out until accepted)")
        moved = self.split_changes or {}
        lines.extend(f"  moved to {side[3:]} since the last build: {', '.join(moved[side] + moved['rows_' + side])}"
                     for side in ("to_eval", "to_train") if moved.get(side) or moved.get("rows_" + side))
        lines.extend(f"  why: {reason}" for reason in moved.get("reasons") or [] if moved.get("moved"))
        return "\n".join(lines)


def fingerprint_rows(split_rows: dict[str, Iterable[dict]]) -> str:
    """SHA-256 (hex) of a dataset's content: per split (by name), per row (by id): id, target text,
    feedback, scores, token count and the SHA-256 of the WAV bytes (and, for free-speech and dialogue
    rows, the kind, prompt, turns and every further clip). The same rows give the same
    fingerprint whatever their order or when they were built; any removed, added or edited row,
    another split or another tokenizer's token counts change it."""
    digest = hashlib.sha256()
    for name in sorted(split_rows):
        digest.update(f"split:{name}\n".encode("utf-8"))
        for row in sorted(split_rows[name], key=lambda r: str(r["id"])):
            text = json.dumps([row["id"], row["target_text"], row["feedback"], row["scores"], int(row["num_tokens"])],
                              ensure_ascii=False)
            digest.update(text.encode("utf-8"))
            digest.update(hashlib.sha256(bytes(row["audio_wav"])).digest())
            if (row.get("kind") or "read_aloud") != "read_aloud":  # read-aloud rows hash as before kinds existed
                digest.update(json.dumps([row["kind"], row.get("prompt") or "", row.get("turns") or ""],
                                         ensure_ascii=False).encode("utf-8"))
                for extra in row.get("extra_audio_wavs") or []:
                    digest.update(hashlib.sha256(bytes(extra)).digest())
    return digest.hexdigest()


def library_changes(workspace: Workspace | str | os.PathLike) -> dict | None:
    """How the sample library changed since the last build (`pipeline.data.build_changes.library_changes`:
    added, edited, deleted sample ids), or None when nothing was built yet."""
    from pipeline.data.build_changes import library_changes as changes_since
    from pipeline.data.samples import SampleLibrary

    try:
        report = load_build_report(workspace)
    except DatasetError:
        return None
    return changes_since(SampleLibrary(workspace).list(), report)


def build_identity(workspace: Workspace | str | os.PathLike) -> dict:
    """Which build of the dataset `WS/dataset` holds: `{"fingerprint", "splits" {name: rows},
    "row_ids" {name: sorted ids}, "built_at"}`. Read from the build report; for a dataset built
    before reports had a fingerprint it is computed from the saved rows (same `fingerprint_rows`).

    Raises `DatasetError` when no dataset is built."""
    report = load_build_report(workspace)
    fingerprint, row_ids = report.get("fingerprint") or "", report.get("row_ids") or {}
    if not fingerprint or not row_ids:
        data = load_built_dataset(workspace)
        fingerprint = fingerprint_rows({name: split for name, split in data.items()})
        row_ids = {name: sorted(split["id"]) for name, split in data.items()}
    return {"fingerprint": fingerprint, "splits": {k: len(v) for k, v in row_ids.items()}, "row_ids": row_ids,
            "built_at": report.get("built_at") or None}


def _length_stats(rows: list[dict], train_rows: list[dict], eval_rows: list[dict]) -> LengthDistribution:
    stats = LengthDistribution.from_lengths(r["num_tokens"] for r in rows)
    quads = sorted((r["num_tokens"], r["answer_tokens"], r["clips"], r.get("audio_tokens", 0)) for r in train_rows)
    stats.row_tokens = [n for n, _, _, _ in quads]
    stats.answer_tokens = [a for _, a, _, _ in quads]
    stats.row_clips = [c for _, _, c, _ in quads]
    stats.row_audio_tokens = [t for _, _, _, t in quads]
    stats.max_answer_tokens = max(stats.answer_tokens, default=0)
    stats.max_clips = max(stats.row_clips, default=0)
    stats.max_clip_s = max((r["longest_clip_s"] for r in train_rows), default=0.0)
    pairs = sorted((r["num_tokens"], r["answer_tokens"]) for r in eval_rows)
    stats.eval_row_tokens, stats.eval_answer_tokens = [n for n, _ in pairs], [a for _, a in pairs]
    stats.eval_max_clip_s = max((r["longest_clip_s"] for r in eval_rows), default=0.0)
    return stats


def _kind_stats(samples: list, rows: list[dict], split_rows: dict[str, list[dict]], excluded: list[dict]) -> dict:
    """Rows, split sizes, exclusions and token lengths per sample kind (kinds present in the library)."""
    kind_of = {s.id: s.kind or "read_aloud" for s in samples}
    out: dict[str, dict] = {}
    for kind in KINDS:
        if kind not in kind_of.values():
            continue
        lengths = sorted(r["num_tokens"] for r in rows if r["kind"] == kind)
        out[kind] = {
            "rows": len(lengths),
            **{name: sum(1 for r in rs if r["kind"] == kind) for name, rs in split_rows.items()},
            "excluded": sum(1 for e in excluded if kind_of.get(e["id"]) == kind),
            "tokens": {"min": lengths[0], "median": int(statistics.median_low(lengths)), "max": lengths[-1]} if lengths else {},
        }
    return out


def _split_rows(rows: list[dict], too_long: list[dict], *, eval_fraction: float, seed: int,
                max_length: int) -> tuple[Split, dict[str, list[dict]]]:
    """Split the kept `rows` (`split_ids`: speaker-disjoint when speakers are known, the same split for
    the same rows, fraction and seed); with rows left out as longer than `max_length` (`too_long`, from
    `rows_that_fit`), a note names the `--max-length` that keeps them all.

    Returns the `Split` (method, notes) and split name ("train", "eval") -> rows in the split's order.
    """
    split = split_ids([(r["id"], r["speaker"]) for r in rows], eval_fraction=eval_fraction, seed=seed)
    lengths = [e["num_tokens"] for e in too_long]
    if lengths:
        split.notes.append(
            f"{plural(len(lengths), 'row')} {'is' if len(lengths) == 1 else 'are'} longer than --max-length {max_length}; --max-length {max(lengths)} "
            "keeps them all (each token takes memory while training: check the memory estimate)."
        )
    by_id = {r["id"]: r for r in rows}
    return split, {"train": [by_id[i] for i in split.train], "eval": [by_id[i] for i in split.eval]}


def _processor_name(processor: Any) -> str:
    """What the build report calls a processor passed in loaded: its tokenizer's `name_or_path`, else its class."""
    return getattr(getattr(processor, "tokenizer", None), "name_or_path", None) or type(processor).__name__


def _library_samples(ws: Workspace):
    """`(library, samples)`: the workspace's sample library and its samples.

    Raises:
        DatasetError: the library is empty (the message gives the import command).
    """
    from pipeline.data.samples import SampleLibrary

    library = SampleLibrary(ws)
    samples = library.list()
    if not samples:
        raise DatasetError(
            f"The sample library in {ws.root} is empty; add or import samples first "
            f"(e.g. `python -m pipeline import --workspace {shlex.quote(str(ws.root))} --source FOLDER`)."
        )
    return library, samples


def build_dataset(
    workspace: Workspace | str | os.PathLike,
    model: Any = DEFAULT_MODEL,
    *,
    eval_fraction: float = 0.2,
    seed: int = 42,
    max_length: int = 512,
    progress: Callable[[int, int, str], None] | None = None,
) -> BuildReport:
    """Build `WS/dataset` (a `datasets.DatasetDict` with `train` and `eval`) from the sample library.

    Args:
        workspace: the workspace folder (or `Workspace`).
        model: hub id or local folder of the model whose processor measures lengths, or an already
            loaded processor.
        eval_fraction: share of rows held out, in [0, 1); speaker-disjoint when speakers are known.
        seed: seed of the split; the same library, fraction and seed give the same split.
        max_length: longest row in tokens; longer rows are excluded with the reason, never cut.
        progress: optional `progress(done, total, message)` callback.

    Returns a `BuildReport`. Also writes `WS/dataset/build_report.json`, and
    `WS/exports/{train,eval}.{jsonl,parquet}`. The dataset folder is replaced atomically: it is
    built in a temporary folder beside it and swapped in only when complete, so a failed build
    leaves the previous dataset as it was.

    Raises:
        DatasetError: empty library, no trainable row, bad `eval_fraction` / `max_length`.
        ModelLoadError: the processor cannot be loaded.
    """
    started = time.perf_counter()
    ws = workspace if isinstance(workspace, Workspace) else Workspace(Path(workspace))
    if not isinstance(max_length, int) or isinstance(max_length, bool) or max_length < 1:
        raise DatasetError(f"`--max-length` must be a whole number of tokens >= 1, got {max_length!r}; 512 is typical.")
    split_ids([], eval_fraction=eval_fraction, seed=seed)  # validates eval_fraction early

    report_progress = progress or (lambda done, total, message: None)
    library, samples = _library_samples(ws)
    report_progress(0, len(samples), "loading the processor")
    from pipeline.model.loading import load_processor  # torch: only when a build runs, not when the app starts

    processor = load_processor(model) if isinstance(model, (str, os.PathLike)) else model
    counter = TokenCounter(processor)

    candidates, excluded = render_rows(samples, library, counter, report_progress)
    report_progress(len(samples), len(samples), "counting tokens")
    rows, too_long, seen_tokens = rows_that_fit(candidates, counter, max_length)
    speaker_of = {s.id: s.speaker for s in samples}
    excluded = sorted(({**e, "speaker": speaker_of.get(e["id"])} for e in excluded + too_long), key=lambda e: e["id"])

    if not rows:
        reasons = "; ".join(f"{e['id']}: {e['reason']}" for e in excluded[:5])
        raise DatasetError(
            f"None of the {len(samples)} samples can be trained on ({reasons}"
            f"{'; ...' if len(excluded) > 5 else ''}). The previous dataset, if any, is kept."
        )

    split, split_rows = _split_rows(rows, too_long, eval_fraction=eval_fraction, seed=seed, max_length=max_length)
    trained, asked = asked_turn_rows(split_rows["train"], counter)  # what the trainer reads
    saved_rows = {**split_rows, "train": trained}
    speakers = {name: sorted({r["speaker"] for r in rs if r["speaker"]}) for name, rs in split_rows.items()}
    report = BuildReport(
        path=str(ws.dataset_dir),
        splits={name: len(rs) for name, rs in split_rows.items()},
        excluded=excluded,
        length_stats=dict(_length_stats(trained + split_rows["eval"], trained, split_rows["eval"]).to_dict(),
                          distinct_tokens=len(seen_tokens)),
        speakers=speakers,
        split_method=split.method,
        notes=split.notes,
        model=str(model) if isinstance(model, (str, os.PathLike)) else _processor_name(processor),
        max_length=max_length,
        eval_fraction=float(eval_fraction),
        seed=seed,
        lengths=sorted(r["num_tokens"] for r in rows),
        kinds=_kind_stats(samples, rows, split_rows, excluded),
        fingerprint=fingerprint_rows(saved_rows),
        row_ids={name: sorted(r["id"] for r in rs) for name, rs in split_rows.items()},
        built_at=round(time.time(), 3),
        sample_digests={s.id: sample_digest(s) for s in samples},
        drafts=_drafts_waiting(ws, samples),
        asked_rows=asked,
        row_rule=ROW_RULE,
    )

    previous = load_build_report(ws) if (ws.dataset_dir / BUILD_REPORT_NAME).exists() else None  # first build: None
    report.split_changes = split_changes(previous, report.to_dict(), {r["id"]: r["speaker"] for r in rows})
    if previous is not None and int(previous.get("row_rule") or 0) < ROW_RULE and asked.get("template_adds"):
        report.notes.append(_rows_changed_note(asked))

    report_progress(len(samples), len(samples), "saving")
    _save_and_export(ws, saved_rows, split_rows, library, report)
    report.seconds = round(time.perf_counter() - started, 3)
    from pipeline.fileio import atomic_write_json

    atomic_write_json(ws.dataset_dir / BUILD_REPORT_NAME, report.to_dict())
    report_progress(len(samples), len(samples), "done")
    return report


def _save_and_export(ws: Workspace, saved_rows: dict, split_rows: dict, library: Any, report: BuildReport) -> None:
    """Swap the new dataset in (after putting back one a killed build left half-swapped), then write its exports
    (`report.exports`); the report is written after this, with the build's time."""
    from pipeline.data.exports import export_splits
    from pipeline.fileio import hold_point

    _recover_interrupted_swap(ws)
    _save_atomically(ws, saved_rows, report)
    hold_point("build:exports")  # the new dataset is in place, its exports not yet written
    report.exports = export_splits(ws, split_rows, library)


def _drafts_waiting(ws: Workspace, samples: list) -> int:
    """How many samples without feedback have a draft in `WS/scoring/drafts.json` (an unreadable file: 0)."""
    try:
        drafts = json.loads(ws.drafts_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return 0
    return sum(1 for s in samples if isinstance(drafts, dict) and s.id in drafts and not (s.feedback or "").strip())
def _rows_changed_note(asked: dict) -> str:
    """What a rebuild of a dataset made before `ROW_RULE` says: its rows changed, and why."""
    return (
        f"The rows changed since the last build: this model's chat template asks for an answer with "
        f"{asked['template_adds']!r} after the model turn's start (the empty thought channel of thinking off), "
        "which the rows of a rendered conversation lacked, so the tutor learned to answer after a prompt it is "
        f"never sent. Each trained answer now follows that prompt (the channel itself is not learned), and a "
        f"dialogue trains one row per tutor answer: train {plural(asked['rows_before'], 'row')} -> {asked['rows']}, "
        f"{asked['tokens_before']:,} -> {asked['tokens']:,} tokens. Runs trained on the old rows keep them; "
        "train again to use the new ones."
    )


def _to_dataset_dict(split_rows: dict[str, list[dict]]):
    from datasets import Dataset, DatasetDict

    features = _features()
    return DatasetDict(
        {
            name: Dataset.from_dict({c: [r[c] for r in rs] for c in COLUMNS}, features=features)
            for name, rs in split_rows.items()
        }
    )


def _recover_interrupted_swap(ws: Workspace) -> None:
    """Undo a swap cut short by a crash (old dataset moved aside, new one not yet in place) and
    remove staging folders left by crashed builds (`pipeline.fileio.recover_staging`: those older
    than `pipeline.fileio.STALE_STAGING_S`, so a build running at the same moment keeps its own).
    Called before every build and load."""
    recover_staging(ws.dataset_dir, prefix=STAGING_PREFIX)


def _save_atomically(ws: Workspace, split_rows: dict[str, list[dict]], report: BuildReport) -> None:
    """save_to_disk into a staging folder `WS/.dataset-tmp-*/dataset`, then swap it in place of
    `WS/dataset` (`pipeline.fileio.staged_folder`: a crash leaves the old dataset whole)."""
    import datasets

    ws.root.mkdir(parents=True, exist_ok=True)
    bars_were_on = datasets.is_progress_bar_enabled()
    datasets.disable_progress_bars()  # keep stdout/stderr clean for `--json`; our own progress reports saving
    try:
        with staged_folder(ws.dataset_dir, prefix=STAGING_PREFIX) as new_dir:
            data = _to_dataset_dict(split_rows)
            # An empty split (e.g. --eval-fraction 0) is saved as ONE empty shard that keeps the schema:
            # datasets' default writes zero shards for it, which `load_from_disk` cannot read back.
            data.save_to_disk(str(new_dir), num_shards={name: 1 if len(split) == 0 else None for name, split in data.items()})
            atomic_write_json(new_dir / BUILD_REPORT_NAME, report.to_dict())
    finally:
        if bars_were_on:
            datasets.enable_progress_bars()


# --------------------------------------------------------------------------------------------------
# Loading
# --------------------------------------------------------------------------------------------------


def load_built_dataset(workspace: Workspace | str | os.PathLike):
    """The `datasets.DatasetDict` saved by `build_dataset` (splits `train`, `eval`).

    Rows: `id`, `speaker`, `target_text`, `feedback` (str), `scores` (JSON str, "" when none),
    `audio_wav` (16 kHz mono PCM16 WAV bytes; decode with `pipeline.data.audio.load_audio(bytes)` or
    `decode_wav`), `num_tokens` (int, text tokens + audio positions), `duration_s` (float, seconds
    of audio, all clips), `kind`, `prompt` (free speech), `turns` (dialogue, JSON), `extra_audio_wavs`
    (a dialogue's clips after the first), `clips` (int); `pipeline.data.rows` reads them (datasets
    built before kinds existed lack the last five and read as read-aloud). A split may have no rows (`--eval-fraction 0`: no eval split rows, training uses all
    rows); it keeps the columns. Raises `DatasetError` (never another error) when the folder is
    missing or unreadable.
    """
    ws = workspace if isinstance(workspace, Workspace) else Workspace(Path(workspace))
    path = ws.dataset_dir
    if not (path / "dataset_dict.json").exists():
        _recover_interrupted_swap(ws)
    if not (path / "dataset_dict.json").exists():
        raise DatasetError(
            f"No built dataset in {path}; build it first with "
            f"`python -m pipeline build --workspace {shlex.quote(str(ws.root))} --model google/gemma-3n-E2B-it`."
        )
    from datasets import Dataset, DatasetDict

    try:
        names = json.loads((path / "dataset_dict.json").read_text(encoding="utf-8"))["splits"]
        splits = {}
        for name in names:
            state = json.loads((path / name / "state.json").read_text(encoding="utf-8"))
            if state.get("_data_files"):
                splits[name] = Dataset.load_from_disk(str(path / name))
            else:  # an empty split saved with zero shards by an earlier build: no rows, same columns
                splits[name] = Dataset.from_dict({c: [] for c in COLUMNS}, features=_features())
        return DatasetDict(splits)
    except Exception as error:  # noqa: BLE001 - any unreadable folder becomes one typed error with the fix
        raise DatasetError(
            f"The dataset in {path} cannot be read ({cause_words(error)}); rebuild it with "
            f"`python -m pipeline build --workspace {shlex.quote(str(ws.root))}`."
        ) from error


def load_build_report(workspace: Workspace | str | os.PathLike) -> dict:
    """The `build_report.json` of the built dataset (a `BuildReport.to_dict()`); `DatasetError` if missing."""
    ws = workspace if isinstance(workspace, Workspace) else Workspace(Path(workspace))
    path = ws.dataset_dir / BUILD_REPORT_NAME
    if not path.exists():
        _recover_interrupted_swap(ws)
    if not path.exists():
        raise DatasetError(f"No build report at {path}; build the dataset first with `python -m pipeline build`.")
    return json.loads(path.read_text(encoding="utf-8"))


# --------------------------------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------------------------------
