"""Dataset rows of every sample kind: the columns, a sample -> row, and a row -> its clips and conversation.

A row is one training example. Read-aloud and free-speech rows hold one clip; a dialogue row holds
every clip of the dialogue: its first in `audio_wav` (the column single-clip code has always read)
and the others, in order, in `extra_audio_wavs`. `turns` (JSON) gives each learner turn's clip as an
index into that order. The conversation itself always comes from `pipeline.conversation.messages`
(`conversation_messages`), so the dataset, the collator, the memory estimate, inference and
evaluation render a row the same way.

Datasets built before kinds existed lack `kind`, `prompt`, `turns`, `extra_audio_wavs` and `clips`;
every function here reads such rows as read-aloud with one clip.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.conversation.messages import check_kind, conversation_messages, is_blank, normalize_text, prompt_messages
from pipeline.errors import PipelineError

COLUMNS = ("id", "speaker", "target_text", "feedback", "scores", "audio_wav", "num_tokens", "duration_s",
           "kind", "prompt", "turns", "extra_audio_wavs", "clips")
"""The columns of every split, in this order (also the Parquet / JSONL export columns)."""

TEXT_COLUMNS = ("id", "kind", "target_text", "prompt", "feedback", "turns")
"""What rendering a row's conversation needs (no audio)."""


def features():
    """The `datasets.Features` of a split (`COLUMNS`)."""
    from datasets import Features, List, Value

    return Features(
        {
            "id": Value("string"),
            "speaker": Value("string"),
            "target_text": Value("string"),
            "feedback": Value("string"),
            "scores": Value("string"),
            "audio_wav": Value("binary"),
            "num_tokens": Value("int32"),
            "duration_s": Value("float32"),
            "kind": Value("string"),
            "prompt": Value("string"),
            "turns": Value("string"),
            "extra_audio_wavs": List(Value("binary")),
            "clips": Value("int32"),
        }
    )


def row_kind(row: dict) -> str:
    """The row's kind ("read_aloud" for rows of datasets built before kinds existed)."""
    return check_kind(row.get("kind") or "read_aloud")


def row_turns(row: dict) -> list[dict]:
    """A dialogue row's turns (`[]` for other kinds)."""
    turns = row.get("turns")
    if not turns:
        return []
    return json.loads(turns) if isinstance(turns, str) else list(turns)


def row_messages(row: dict, audios: list[np.ndarray] | None = None, *, answers: bool = True,
                 tokenizer: Any = None) -> list[dict]:
    """The row's conversation (`pipeline.conversation.messages.conversation_messages`), with its answers
    (`answers=True`: training, token counts) or up to the first answer (`answers=False`, to render
    with `add_generation_prompt=True`). `audios` None gives audio placeholders; `tokenizer` joins the
    control-token check of every text.

    Raises `DatasetError` when the row cannot make a conversation (empty text, bad turns).
    """
    fields = dict(target_text=row.get("target_text") or "", prompt=row.get("prompt") or "",
                  feedback=row.get("feedback") or "", turns=row_turns(row), audios=audios, tokenizer=tokenizer)
    kind = row_kind(row)
    return conversation_messages(kind, **fields) if answers else prompt_messages(kind, **fields)


def row_clip_lengths(row: dict) -> list | None:
    """Each clip's length (`pipeline.model.tokens.ClipLength`, in clip order) without decoding the audio:
    from `clip_seconds` when the row has it (a row being built), else from each WAV's header. What the
    token count of a family whose audio cost grows with the clip (Gemma 4) needs
    (`row_messages(row, row_clip_lengths(row))`). None when the row carries none of these (its text
    columns only): `row_messages` then puts audio placeholders, one per clip its turns name."""
    import io

    import soundfile

    from pipeline.model.tokens import ClipLength

    if row.get("clip_seconds"):
        return [ClipLength(float(s)) for s in row["clip_seconds"]]
    if row.get("audio") is not None:
        return [ClipLength(len(a) / 16000) for a in row_clips(row)]
    wavs = [w for w in [row.get("audio_wav")] + list(row.get("extra_audio_wavs") or []) if w]
    if not wavs:
        return None
    return [ClipLength(float(soundfile.info(io.BytesIO(w)).duration)) for w in wavs]


def row_clips(row: dict) -> list[np.ndarray]:
    """The row's clips as 16 kHz mono float32 arrays of shape (n,), in order.

    Reads `audio` (arrays, or one array) when present, else `audio_wav` + `extra_audio_wavs` (WAV bytes).
    Raises `DatasetError` when the row has no audio.
    """
    from pipeline.data.audio import decode_wav
    from pipeline.errors import DatasetError

    if row.get("audio") is not None:
        audio = row["audio"]
        if isinstance(audio, (list, tuple)) and audio and not np.isscalar(audio[0]):
            return [np.asarray(a, dtype=np.float32) for a in audio]
        return [np.asarray(audio, dtype=np.float32)]
    first = row.get("audio_wav")
    if not first:
        raise DatasetError(f"Row `{row.get('id', '?')}` has no audio; rebuild the dataset with `python -m pipeline build`.")
    return [decode_wav(first)] + [decode_wav(data) for data in row.get("extra_audio_wavs") or []]


def _read_wav(path: Path) -> tuple[bytes, float]:
    """A stored clip as 16 kHz mono PCM16 WAV bytes (re-encoded through our ingest if not) and its seconds."""
    import soundfile

    info = soundfile.info(str(path))
    if info.samplerate == 16000 and info.channels == 1 and info.subtype == "PCM_16" and info.format == "WAV":
        return path.read_bytes(), info.frames / 16000
    from pipeline.data.audio import load_audio, wav_bytes

    clip = load_audio(path)
    return wav_bytes(clip.samples), clip.samples.size / 16000


def sample_row(sample: Any, library: Any, max_clip_s: float) -> tuple[dict | None, str | None]:
    """A library `Sample` -> `(row, None)`, or `(None, reason)` when it cannot be trained on.

    The row has every column of `COLUMNS` except `num_tokens` (counted later, in one batch), plus
    `longest_clip_s` (build report only). Reasons name what to fix: empty target text / prompt /
    feedback, a dialogue without a tutor turn, a missing or unreadable clip, a clip over `max_clip_s`.
    """
    kind = sample.kind or "read_aloud"
    target = normalize_text(sample.target_text)
    answer = normalize_text(sample.feedback)
    prompt = normalize_text(sample.prompt)
    if kind == "read_aloud" and is_blank(target):
        return None, "target text is empty; enter the sentence the learner read"
    if kind == "free_speech" and is_blank(prompt):
        return None, "prompt is empty; enter the question the learner answered"
    if kind != "dialogue" and is_blank(answer):
        return None, "feedback is empty; write the tutor's answer for this clip (Samples tab) or import expert scores"
    if kind == "dialogue" and not sample.has_answer:
        return None, "the dialogue has no tutor turn; add the tutor's answer"
    wavs, seconds = [], []
    for path in library.clip_paths(sample):
        try:
            wav, duration_s = _read_wav(path)
        except PipelineError as error:
            return None, f"audio cannot be used: {error}"
        except (OSError, RuntimeError) as error:
            return None, f"audio file {path} cannot be read ({error}); re-add the clip"
        if duration_s > max_clip_s + 1e-3:
            return None, (f"clip `{path.name}` is {duration_s:.1f} s; Gemma hears at most {max_clip_s:.0f} s (3n and 4 alike): "
                          "trim or split it")
        wavs.append(wav)
        seconds.append(duration_s)
    turns = [{k: t.get(k) for k in ("role", "clip", "text", "transcript")} for t in sample.turns or []]
    row = {
        "id": sample.id,
        "speaker": (sample.speaker or "").strip(),
        "target_text": target,
        "feedback": answer if kind != "dialogue" else "",
        "scores": json.dumps(sample.scores, ensure_ascii=False, sort_keys=True) if sample.scores else "",
        "audio_wav": wavs[0],
        "duration_s": round(sum(seconds), 3),
        "kind": kind,
        "prompt": prompt,
        "turns": json.dumps(turns, ensure_ascii=False) if kind == "dialogue" else "",
        "extra_audio_wavs": wavs[1:],
        "clips": len(wavs),
        "longest_clip_s": round(max(seconds), 3),
        "clip_seconds": [round(x, 4) for x in seconds],
    }
    return row, None


def export_record(row: dict, clip_paths: list[str]) -> dict:
    """One line of `WS/exports/{split}.jsonl`: the row's texts and its conversation in the chat format
    with audio `path`s (which `python -m pipeline import` reads back, see `pipeline.data.chat_import`)."""
    messages = row_messages(row)
    paths = iter(clip_paths)
    for message in messages:
        for block in message["content"]:
            if block["type"] == "audio":
                block["path"] = next(paths, "")
    return {
        "id": row["id"],
        "kind": row_kind(row),
        "speaker": row["speaker"],
        "target_text": row["target_text"],
        "prompt": row.get("prompt") or "",
        "feedback": row["feedback"],
        "scores": json.loads(row["scores"]) if row["scores"] else None,
        "num_tokens": row["num_tokens"],
        "duration_s": row["duration_s"],
        "audio_path": clip_paths[0] if clip_paths else "",
        "messages": messages,
    }
