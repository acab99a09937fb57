"""Fit the classical scorer's map on expert-scored clips: a workspace build's TRAIN split only, or a folder.

`fit_workspace(WS)` reads the built dataset's `train` rows that carry expert scores (never a row of the
eval split: the ids are checked against the build's eval ids before anything is aligned, and the map
records the ids it saw), aligns each clip (`pipeline.scoring.engine`), and fits `ScoreMap` with
cross-validation across speakers, together with weak readings made from the same train clips
(`pipeline.scoring.augment`: words of the sentence replaced, so the map learns what a wrong word sounds
like even from readers who read well); it is saved to `WS/scoring/map.json` with the build's fingerprint.
With fewer than `MIN_FIT_CLIPS` scored train clips it refuses (the scorer then keeps the shipped
default map, fitted on the sample data, and says so).

Expert words are matched to the prompt's words in order (a clip whose word count differs gives no word
rows), and expert phones to the aligned phones only where both spell the same phones.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Callable, Iterable

from pipeline.errors import DatasetError, ScoringError
from pipeline.scoring import engine
from pipeline.scoring.augment import weak_entries
from pipeline.scoring.features import phone_features, sentence_features, word_features
from pipeline.scoring.score_map import ScoreMap, fit_map
from pipeline.workspace import Workspace
from pipeline.units import plural

MIN_FIT_CLIPS = 20
"""Fewest expert-scored train clips a workspace's own map is fitted on (a ridge map of 4 features
cross-validated over speakers needs a few dozen); below it the shipped default map is used."""


def clip_item(samples, text: str, scores: dict, speaker: str, lexicon: dict) -> dict | None:
    """One scored clip as `fit_map` takes it (features and expert scores), or None when it cannot be aligned.

    Args:
        samples: 16 kHz mono float32 (n,).
        scores: speechocean762 layout (`accuracy`, `fluency`, `prosodic`, `total`, `words[]`)."""
    words = engine.prompt_words(text)
    pronunciations = engine.pronounce(words, lexicon)
    try:
        alignment = engine.align(samples, pronunciations)
    except engine.NotAlignable:
        return None
    experts = scores.get("words") or []
    word_rows, phone_rows = [], []
    if len(experts) == len(alignment.words):
        for aligned, expert in zip(alignment.words, experts):
            if not aligned.scored or expert.get("accuracy") is None:
                continue
            word_rows.append((word_features(aligned), float(expert["accuracy"])))
            phones = [re.sub(r"\d", "", p).upper() for p in expert.get("phones") or []]
            if phones == [p.phone for p in aligned.phones] and len(expert.get("phones-accuracy") or []) == len(phones):
                phone_rows += [(phone_features(p), float(y)) for p, y in zip(aligned.phones, expert["phones-accuracy"])]
    sentence = {"accuracy": scores.get("accuracy"), "fluency": scores.get("fluency"),
                "prosody": scores.get("prosodic", scores.get("prosody")), "total": scores.get("total")}
    return {"speaker": speaker or "?", "sentence": sentence_features(alignment),
            "scores": {k: None if v is None else float(v) for k, v in sentence.items()},
            "words": word_rows, "phones": phone_rows}


def fit_items(entries: Iterable[tuple], lexicon: dict, progress: Callable[[int, str], None] | None = None) -> list[dict]:
    """`clip_item` of every `(id, samples, text, scores, speaker)`; clips that cannot be aligned are left out."""
    items = []
    for index, (clip_id, samples, text, scores, speaker) in enumerate(entries):
        item = clip_item(samples, text, scores, speaker, lexicon)
        if item is not None:
            item["id"] = clip_id
            items.append(item)
        if progress is not None:
            progress(index + 1, str(clip_id))
    return items


def _train_entries(ws: Workspace) -> tuple[list[tuple], dict]:
    """The build's scored read-aloud train rows as `(id, samples, text, scores, speaker)`, and the build's identity.

    Raises:
        DatasetError: no built dataset.
        ScoringError: a train row is also an eval row (a damaged build; never fitted on)."""
    from pipeline.data.audio import load_audio
    from pipeline.data.dataset import build_identity, load_built_dataset

    identity = build_identity(ws)
    eval_ids = set(identity["row_ids"].get("eval") or [])
    train = load_built_dataset(ws)["train"]
    entries = []
    for row in train:
        if str(row["id"]) in eval_ids:
            raise ScoringError(f"Clip `{row['id']}` is in both the train and the eval split of the build in "
                               f"{ws.dataset_dir}; rebuild the dataset before fitting the scorer.")
        if (row.get("kind") or "read_aloud") != "read_aloud" or not row.get("scores"):
            continue
        try:
            scores = json.loads(row["scores"])
        except json.JSONDecodeError:
            continue
        if isinstance(scores, dict) and scores.get("accuracy") is not None:
            entries.append((str(row["id"]), load_audio(bytes(row["audio_wav"])).samples, row["target_text"], scores,
                            row.get("speaker") or ""))
    return entries, identity


def fit_workspace(workspace: Workspace | str | os.PathLike,
                  progress: Callable[[int, str], None] | None = None) -> ScoreMap:
    """Fit the workspace's map on its build's scored train clips and save it (`WS/scoring/map.json`).

    Returns:
        the saved `ScoreMap` (its `build`: the build's `fingerprint`, `built_at` and the `clip_ids` fitted on).

    Raises:
        DatasetError: no built dataset.
        ScoringError: fewer than `MIN_FIT_CLIPS` scored train clips that align (the default map stays in use).
    """
    from pipeline.fileio import atomic_write_json

    ws = workspace if isinstance(workspace, Workspace) else Workspace(Path(workspace))
    entries, identity = _train_entries(ws)
    lexicon = engine.read_lexicon(ws.lexicon_path)
    items = fit_items(entries, lexicon, progress)
    if len(items) < MIN_FIT_CLIPS:
        raise ScoringError(
            f"Only {plural(len(items), 'expert-scored training clip')} could be aligned in the build in {ws.dataset_dir}; "
            f"fitting the scorer needs at least {MIN_FIT_CLIPS}. It keeps using the default map fitted on the sample "
            "data; import more clips that have expert scores, rebuild, and fit again.")
    speakers = sorted({i["speaker"] for i in items})
    note = (f"Classical scorer map fitted on this workspace's training split: {plural(len(items), 'clip')} of "
            f"{plural(len(speakers), 'learner')}")
    build = {"fingerprint": identity["fingerprint"], "built_at": identity.get("built_at"),
             "clip_ids": sorted(i["id"] for i in items), "eval_ids": sorted(identity["row_ids"].get("eval") or [])}
    weak = fit_items(weak_entries(entries), lexicon)  # the same train clips with words replaced: weak readings
    note += f", and {plural(len(weak), 'weak reading')} made from them (words replaced)"
    score_map = fit_map(items + weak, note, build)
    ws.scoring_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_json(ws.scorer_map_path, score_map.to_dict())
    return score_map


def clips_seen_by_map(workspace: Workspace | str | os.PathLike, clip_ids: Iterable[str]) -> list[str]:
    """The ids among `clip_ids` (dataset row ids) that the workspace's saved map was fitted on (its
    `build.clip_ids`), in order: what a judgement of those clips with that map would grade on its own training
    data. [] when there is no saved map, or it cannot be read."""
    fitted = set(_saved_build(workspace).get("clip_ids") or [])
    return [str(i) for i in clip_ids if str(i) in fitted]


def _saved_build(workspace: Workspace | str | os.PathLike) -> dict:
    """The saved map's `build` record (fingerprint, clip ids...); {} without a saved map or one that cannot be read."""
    ws = workspace if isinstance(workspace, Workspace) else Workspace(Path(workspace))
    try:
        build = json.loads(ws.scorer_map_path.read_text(encoding="utf-8")).get("build") or {}
    except (OSError, ValueError, AttributeError):
        return {}
    return build if isinstance(build, dict) else {}


def stale_map_warning(workspace: Workspace | str | os.PathLike) -> str | None:
    """One sentence when the workspace's saved map (`WS/scoring/map.json`) was fitted on another build of the
    dataset than the one built now (its recorded `build.fingerprint` differs), else None (no saved map, no build,
    a map that cannot be read: nothing to compare)."""
    from pipeline.data.dataset import build_identity

    ws = workspace if isinstance(workspace, Workspace) else Workspace(Path(workspace))
    saved = _saved_build(ws)
    try:
        current = build_identity(ws)
    except (OSError, ValueError, DatasetError):
        return None
    if not saved.get("fingerprint") or saved["fingerprint"] == current["fingerprint"]:
        return None
    return (f"The saved scorer map {ws.scorer_map_path} was fitted on an older build of the dataset "
            f"({plural(len(saved.get('clip_ids') or []), 'clip')}; the dataset was rebuilt since), so its scores may "
            "not match the clips trained and judged now.")


def kaldi_entries(folder: str | os.PathLike, speakers: Iterable[str] | None = None) -> list[tuple]:
    """`(id, samples, text, scores, speaker)` of a speechocean762-layout folder's scored clips (every data
    folder with `wav.scp`; `speakers`: only these), for the default map and the benchmark."""
    from pipeline.data.audio import load_audio

    root = Path(folder)
    scores = json.loads((root / "resource" / "scores.json").read_text(encoding="utf-8"))
    wanted = set(speakers) if speakers is not None else None
    entries = []
    for scp in sorted(root.glob("*/wav.scp")):
        spk = dict(line.split(maxsplit=1) for line in (scp.parent / "utt2spk").read_text().splitlines() if line.strip())
        for line in scp.read_text().splitlines():
            if not line.strip():
                continue
            utt, path = line.split(maxsplit=1)
            if utt in scores and (wanted is None or spk.get(utt, "").strip() in wanted):
                entries.append((utt, load_audio(root / path.strip()).samples, scores[utt]["text"], scores[utt],
                                spk.get(utt, "").strip()))
    return entries
