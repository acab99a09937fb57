"""The sample library: clips with their target text and tutor feedback, kept in a workspace folder.

Three kinds of sample (`pipeline.conversation.messages.KINDS`): `read_aloud` (a clip, the sentence read, the
feedback), `free_speech` (a clip, the prompt answered, an optional transcript, the feedback) and
`dialogue` (turns: learner clips or text, tutor text). Manifests written before kinds existed load
as read-aloud.

On disk (see `pipeline.workspace`):
    WS/samples/manifest.json    {"version": 1, "samples": [Sample.to_dict(), ...]}, written atomically
    WS/samples/audio/<id>.wav   the clip after `pipeline.data.audio.load_audio`: 16 kHz mono PCM16
                                (a dialogue's first clip; its clip k >= 2 is `audio/<id>.<k>.wav`)

Every change re-reads the manifest, applies the change and writes the whole manifest once with
`pipeline.fileio.atomic_write_json`, so a crash or a failed import leaves either the old or the new
manifest, never a half-written one. Text fields are stored NFC-normalized (macOS file names and some
spreadsheets give NFD). Duplicate audio is found by the SHA-256 of the normalized PCM16 samples (per kind:
one recording may be a read-aloud and a free-speech sample; a dialogue by all its clips in order).
A sentence, prompt, feedback, transcript or dialogue turn that spells a control token (`<end_of_turn>`,
`<bos>`, `<audio_soft_token>`, ...) is refused at save, edit and import with a message naming the text
(`pipeline.conversation.messages.check_user_text`): the model would read it as a command, not as text.

It deliberately does not build datasets (`pipeline.data.dataset`) or parse folders (`pipeline.data.importers`).
Every change is made under the manifest's lock (`pipeline.fileio.locked`: held across threads and
processes), so the app, `inbox --accept`, an import from the command line and a second app adding at
the same moment each find the others' samples: nothing is lost, nothing is added twice.
"""

from __future__ import annotations

import hashlib
import json
import re
import unicodedata
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

import numpy as np

from pipeline.conversation.messages import check_user_text, is_blank
from pipeline.errors import ClipTooLongError, PipelineError, SampleError, in_words
from pipeline.fileio import atomic_write_bytes, atomic_write_json, hold_point, locked, pending_files, undo_pending
from pipeline.workspace import Workspace
from pipeline.units import plural

MANIFEST_VERSION = 1
EDITABLE_FIELDS = ("target_text", "prompt", "feedback", "transcript", "speaker", "scores", "source")
"""Fields `SampleLibrary.update` may change; audio is replaced by deleting and adding again."""
_ID_CHARS = re.compile(r"[^A-Za-z0-9_.-]+")


def nfc(text: str | None) -> str | None:
    """NFC-normalize and strip `text`; `None` stays `None`."""
    if text is None:
        return None
    return unicodedata.normalize("NFC", str(text)).strip()


def make_sample_id(name: str) -> str:
    """A file-name-safe id from `name` (letters, digits, `-`, `_`, `.`; at most 80 characters).

    E.g. "Kate 03 (take 2)" -> "Kate-03-take-2". Non-ASCII letters are reduced to their ASCII base
    where possible ("Zoë" -> "Zoe"); an empty result gives "sample".
    """
    ascii_name = unicodedata.normalize("NFKD", str(name)).encode("ascii", "ignore").decode("ascii")
    slug = _ID_CHARS.sub("-", ascii_name).strip("-.")[:80].strip("-.")
    return slug or "sample"


def audio_sha256(samples: np.ndarray) -> str:
    """SHA-256 hex digest of the PCM16 form of 16 kHz mono float32 `samples` (what is stored)."""
    from pipeline.data.audio import pcm16

    return hashlib.sha256(pcm16(samples).tobytes()).hexdigest()


def text_problems(target_text: str | None, feedback: str | None, *, name: str | None = None,
                  require_feedback: bool = True) -> list[str]:
    """What stops a sample's texts from being saved, one sentence per field ([] when none): the target
    sentence must show something, and so must the feedback when `require_feedback` (blank = only
    spaces, line breaks or invisible characters, `pipeline.conversation.messages.is_blank`)."""
    clip = f" of {name}" if name else ""
    problems = []
    if is_blank(target_text):
        what = "is empty" if not (target_text or "") else "holds only spaces or invisible characters"
        problems.append(f"The target sentence{clip} {what}; type the sentence the learner was asked to read.")
    if require_feedback and is_blank(feedback):
        what = "is empty" if not (feedback or "") else "holds only spaces or invisible characters"
        problems.append(f"The tutor feedback{clip} {what}; write what a good tutor would say about this "
                        "recording (a sample without feedback is left out of training).")
    return problems


def check_texts(target_text: str | None, feedback: str | None, *, name: str | None = None,
                require_feedback: bool = True) -> None:
    """Raise `SampleError` with every `text_problems` sentence (the blank field, what it should hold)."""
    problems = text_problems(target_text, feedback, name=name, require_feedback=require_feedback)
    if problems:
        raise SampleError(" ".join(problems))


@dataclass
class Sample:
    """One clip in the library.

    Attributes:
        id: unique, file-name-safe id (also the audio file's stem).
        audio_file: path of the 16 kHz mono PCM16 WAV relative to `WS/samples/` (`audio/<id>.wav`).
        target_text: the sentence the learner was asked to read (NFC, never empty).
        feedback: the tutor's answer to train on (NFC; may be "" until written: such samples are
            listed as excluded when the dataset is built).
        transcript: what was actually said, when known.
        speaker: learner id (used for speaker-disjoint splits).
        scores: structured expert scores (speechocean762 layout: accuracy, fluency, prosodic, total,
            completeness, words[...]) when the sample came with them.
        source: where it came from (file path or "microphone").
        checks: `AudioReport.to_dict()` of the clip.
        audio_sha256: SHA-256 of the stored PCM16 samples (duplicate detection); for a dialogue,
            the SHA-256 of its clips' digests in order.
        duration_s: clip length in seconds (a dialogue: all its clips together).
        kind: `read_aloud`, `free_speech` or `dialogue` (`pipeline.conversation.messages.KINDS`).
        prompt: free speech: the question the learner answered (NFC, never empty); else None.
        turns: dialogue: `[{"role": "learner", "audio_file", "clip", "text", "transcript", "checks",
            "audio_sha256", "duration_s"} | {"role": "tutor", "text"}]` in order, `clip` the index of
            the turn's clip (None for a typed learner turn); else None. `audio_file` above is the
            first clip's.
    """

    id: str
    audio_file: str
    target_text: str
    feedback: str = ""
    transcript: str | None = None
    speaker: str | None = None
    scores: dict | None = None
    source: str | None = None
    checks: dict = field(default_factory=dict)
    audio_sha256: str = ""
    duration_s: float = 0.0
    kind: str = "read_aloud"
    prompt: str | None = None
    turns: list[dict] | None = None

    @property
    def clip_files(self) -> list[str]:
        """Paths of the sample's clips relative to `WS/samples/`, in order (one unless a dialogue)."""
        if self.kind == "dialogue" and self.turns:
            return [t["audio_file"] for t in self.turns if t.get("audio_file")]
        return [self.audio_file]

    @property
    def has_answer(self) -> bool:
        """Whether there is something to train on: feedback, or a dialogue's tutor turn."""
        if self.kind == "dialogue":
            return any(t.get("role") == "tutor" and (t.get("text") or "").strip() for t in self.turns or [])
        return bool(self.feedback)

    @property
    def title(self) -> str:
        """What the sample is about, in a line: the sentence, the prompt, or the dialogue's first words."""
        if self.kind == "free_speech":
            return self.prompt or ""
        if self.kind == "dialogue":
            turns = self.turns or []
            said = [t.get("text") or t.get("transcript") for t in turns if t.get("role") == "learner"]
            first = next((x for x in said if x), "")
            clips = sum(1 for t in turns if t.get("audio_file"))
            return f"dialogue, {len(turns)} turns, {plural(clips, 'clip')}" + (f": {first}" if first else "")
        return self.target_text

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe dict (the manifest entry)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Sample":
        """Inverse of `to_dict`; unknown keys (from newer versions) are ignored."""
        known = {name: data[name] for name in cls.__dataclass_fields__ if name in data}
        missing = [name for name in ("id", "audio_file", "target_text") if name not in known]
        if missing:
            raise SampleError(f"Manifest entry {data!r:.120} lacks {in_words(missing)}; the manifest is damaged.")
        if known.get("kind") in (None, ""):
            known["kind"] = "read_aloud"  # manifests written before kinds existed
        return cls(**known)


def infer_kind(item: dict[str, Any]) -> str:
    """The kind of an item for `SampleLibrary.add_many` when it names none: `dialogue` with `turns`,
    `free_speech` with a `prompt` and no `target_text`, else `read_aloud`. A given `kind` is checked
    (`SampleError` for an unknown one)."""
    from pipeline.conversation.messages import check_kind
    from pipeline.errors import DatasetError

    if item.get("kind"):
        try:
            return check_kind(item["kind"])
        except DatasetError as error:
            raise SampleError(str(error)) from None
    if item.get("turns"):
        return "dialogue"
    if nfc(item.get("prompt")) and not nfc(item.get("target_text")):
        return "free_speech"
    return "read_aloud"


def _duplicate_key(kind: str, digest: str) -> str:
    """What makes two samples the same: the audio and the kind (one recording may be both a
    read-aloud sample and a free-speech one; a dialogue's digest already covers all its clips)."""
    return digest if kind in ("read_aloud", "dialogue") else f"{kind}:{digest}"


def _free_id(base: str, taken_ids: set[str]) -> str:
    """`base`, or `base-2`, `base-3`... whichever is not taken."""
    new_id, counter = base, 2
    while new_id in taken_ids:
        new_id, counter = f"{base}-{counter}", counter + 1
    return new_id
_USER_TEXTS = {"target_text": "Target text", "prompt": "Prompt", "feedback": "Feedback", "transcript": "Transcript"}


def _check_texts(name: str, **texts: str | None) -> None:
    """Refuse a sample whose sentence, feedback or transcript spells a control token such as
    `<end_of_turn>` (`pipeline.conversation.messages.check_user_text`); raises `SampleError` naming the field,
    the clip and the text."""
    for key, text in texts.items():
        check_user_text(text, f"{_USER_TEXTS[key]} of `{name}`", error=SampleError)


PREDECODE_ITEMS = 8
"""`add_many` decodes up to this many clips before it takes the manifest's lock (an app's save, an inbox
accept: the lock is then held for milliseconds); a larger import decodes clip by clip under the lock, so
its memory stays one clip's, and other writers wait for it (`pipeline.fileio.LOCK_TIMEOUT_S`)."""


def _predecoded(item: dict[str, Any]) -> dict[str, Any]:
    """`item` with its clip decoded (`load_audio`), named as `add_many` would name it; a clip that fails to
    decode is left as it was, for `add_many` to refuse with its message. Dialogues are left as they are."""
    from pipeline.data.audio import load_audio

    item = dict(item)
    audio = item.get("audio")
    if audio is None or item.get("turns") is not None or item.get("kind") == "dialogue":
        return item
    if isinstance(audio, (str, Path)):
        item["file"] = Path(audio).name if item.get("file") is None else item["file"]
        item["source"] = str(audio) if item.get("source") is None else item["source"]
    try:
        item["audio"] = load_audio(audio, name=None if item.get("file") is None else str(item["file"]),
                                   trim=bool(item.get("trim", False)))
    except PipelineError:
        pass
    return item


class SampleLibrary:
    """Add, edit, delete and list the samples of one workspace.

    Args:
        workspace: a `Workspace` or the path of its folder (created on first write).
    """

    def __init__(self, workspace: Workspace | str | Path):
        self.workspace = workspace if isinstance(workspace, Workspace) else Workspace(workspace)

    # ----------------------------------------------------------------- manifest
    def locked(self):
        """`with library.locked():` holds the manifest's lock (across processes, re-entrant in a thread)
        for a read-check-change sequence of several calls (e.g. `Inbox.accept`)."""
        return locked(self.workspace.manifest_path)

    def _read(self) -> list[Sample]:
        path = self.workspace.manifest_path
        if not path.exists():
            return []
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
            raise SampleError(
                f"The sample manifest `{path}` cannot be read ({error}). Restore it from a backup or "
                "move it away to start an empty library (the audio stays in samples/audio/)."
            ) from None
        entries = data.get("samples") if isinstance(data, dict) else None
        if not isinstance(entries, list):
            raise SampleError(
                f"The sample manifest `{path}` has no `samples` list; expected "
                '{"version": 1, "samples": [...]}. Restore it from a backup or move it away.'
            )
        return [Sample.from_dict(entry) for entry in entries]

    def _undo_killed_writes(self, samples: list[Sample]) -> None:
        """Remove the clips an import killed before its manifest write left (`pipeline.fileio.undo_pending`:
        noted in its journal, listed by no sample of `samples`, the manifest just read under the lock)."""
        listed = {(self.workspace.samples_dir / name).resolve() for sample in samples for name in sample.clip_files}
        undo_pending(self.workspace.samples_dir, keep=lambda path: path in listed)

    def _write(self, samples: list[Sample]) -> None:
        atomic_write_json(
            self.workspace.manifest_path,
            {"version": MANIFEST_VERSION, "samples": [sample.to_dict() for sample in samples]},
        )

    # ----------------------------------------------------------------- reading
    def list(self) -> list[Sample]:
        """All samples in the order they were added. Raises `SampleError` on a damaged manifest."""
        return self._read()

    def get(self, sample_id: str) -> Sample:
        """The sample with `sample_id`; raises `SampleError` naming the id when there is none."""
        for sample in self._read():
            if sample.id == sample_id:
                return sample
        raise SampleError(
            f"No sample with id `{sample_id}` in `{self.workspace.root}`; "
            "`python -m pipeline samples --workspace WS` lists the ids."
        )

    def audio_path(self, sample: Sample | str) -> Path:
        """Absolute path of the sample's stored 16 kHz WAV (`sample` is a `Sample` or an id)."""
        if isinstance(sample, str):
            sample = self.get(sample)
        return self.workspace.samples_dir / sample.audio_file

    def clip_paths(self, sample: Sample | str) -> list[Path]:
        """Absolute paths of the sample's stored clips, in order (a dialogue has one per spoken turn)."""
        if isinstance(sample, str):
            sample = self.get(sample)
        return [self.workspace.samples_dir / name for name in sample.clip_files]

    def load_clips(self, sample: Sample | str) -> list[np.ndarray]:
        """Every clip of the sample as float32 (n,) at 16 kHz, in order. `SampleError` if a file is gone."""
        import soundfile as sf

        clips = []
        for path in self.clip_paths(sample):
            if not path.exists():
                raise SampleError(f"Audio `{path.name}` of sample `{getattr(sample, 'id', sample)}` is missing (`{path}`); "
                                  "delete the sample and add it again.")
            samples, _ = sf.read(str(path), dtype="float32", always_2d=False)
            clips.append(np.ascontiguousarray(samples, dtype=np.float32))
        return clips

    # ----------------------------------------------------------------- writing
    def _prepare(
        self,
        audio: Any,
        target_text: str,
        feedback: str | None,
        *,
        transcript: str | None,
        speaker: str | None,
        scores: dict | None,
        source: str | None,
        sample_id: str | None,
        trim: bool,
        require_feedback: bool,
        name: str | None,
        taken_ids: set[str],
        hashes: dict[str, str],
        kind: str = "read_aloud",
        prompt: str | None = None,
        turns: list[dict] | None = None,
    ) -> tuple[Sample, list[tuple[str, bytes]]]:
        """Validate and decode one sample; returns the Sample and its clips as (relative path, WAV
        bytes), nothing written. Every audio check applies to every clip; a dialogue with one bad
        clip fails whole, naming the clip."""
        from pipeline.data.audio import load_audio, wav_bytes

        label = name or "the clip"
        try:
            if kind == "read_aloud":
                check_texts(target_text, feedback, name=label, require_feedback=require_feedback)
            elif kind == "free_speech" and is_blank(prompt):
                raise SampleError(f"Prompt of {label} is empty; type the question the learner answered "
                                  "(e.g. `Describe your last holiday.`).")
            elif kind == "free_speech" and require_feedback and is_blank(feedback):
                raise SampleError(f"The tutor feedback of {label} is empty; write what a good tutor would say about "
                                  "this answer (a sample without feedback is left out of training).")
        except SampleError as error:  # with no audio either, say everything that is missing at once
            raise (SampleError(f"{error} No audio was received either: record or upload it.") if audio is None else error) from None
        target = nfc(target_text) or ""
        if scores is not None and not isinstance(scores, dict):
            raise SampleError(f"`scores` must be a dict (e.g. speechocean762 scores), got {type(scores).__name__}.")
        if kind == "dialogue":
            return self._prepare_dialogue(turns, feedback, speaker=speaker, scores=scores, source=source,
                                          sample_id=sample_id, trim=trim, name=name, taken_ids=taken_ids,
                                          hashes=hashes)
        if isinstance(audio, (str, Path)) and name is None:
            name = Path(audio).name
        _check_texts(name or "the clip", target_text=target, prompt=prompt, feedback=feedback, transcript=transcript)
        clip = load_audio(audio, name=name, trim=trim)
        digest = audio_sha256(clip.samples)
        key = _duplicate_key(kind, digest)
        if key in hashes:
            raise SampleError(
                f"{name or 'This clip'} has the same audio as sample `{hashes[key]}`; it was not added twice. "
                "To change that sample's sentence, prompt or feedback, edit it (in the app: click it in the Saved "
                "samples table)."
            )
        new_id = _free_id(make_sample_id(sample_id) if sample_id else f"s-{digest[:10]}", taken_ids)
        sample = Sample(
            id=new_id,
            audio_file=f"audio/{new_id}.wav",
            target_text=target,
            feedback="" if is_blank(feedback) else nfc(feedback),
            transcript=nfc(transcript) or None,
            speaker=nfc(speaker) or None,
            scores=scores,
            source=str(source) if source is not None else (str(audio) if isinstance(audio, (str, Path)) else None),
            checks=clip.report.to_dict(),
            audio_sha256=digest,
            duration_s=round(clip.duration_s, 3),
            kind=kind,
            prompt=nfc(prompt) or None if kind == "free_speech" else None,
        )
        return sample, [(sample.audio_file, wav_bytes(clip.samples))]

    def _prepare_dialogue(self, turns: Any, feedback: str | None, *, speaker, scores, source, sample_id, trim,
                          name, taken_ids, hashes) -> tuple[Sample, list[tuple[str, bytes]]]:
        """A dialogue's Sample and clips. `turns`: `[{"role": "learner", "audio"?, "text"?, "transcript"?}
        | {"role": "tutor", "text"}]`; `audio` is anything `load_audio` takes."""
        from pipeline.conversation.messages import build_dialogue_messages
        from pipeline.data.audio import load_audio, wav_bytes
        from pipeline.errors import DatasetError

        label = name or "the dialogue"
        if not isinstance(turns, (list, tuple)) or not turns:
            raise SampleError(f"{label} has no turns; a dialogue needs learner turns (a recording or text) and tutor turns.")
        if feedback:
            raise SampleError(f"{label} is a dialogue: its tutor turns are the answers, so it takes no separate feedback.")
        clips, stored, digests = [], [], []
        for number, turn in enumerate(turns, start=1):
            if not isinstance(turn, dict):
                raise SampleError(f"Turn {number} of {label} is a {type(turn).__name__}; expected a dict with `role`.")
            role = str(turn.get("role", "")).strip().lower()
            for key in ("text", "transcript"):
                check_user_text(turn.get(key), f"{key.capitalize()} of turn {number} of {label}", error=SampleError)
            entry: dict[str, Any] = {"role": role, "text": None if is_blank(turn.get("text")) else nfc(turn.get("text"))}
            if role == "learner":
                entry["transcript"] = None if is_blank(turn.get("transcript")) else nfc(turn.get("transcript"))
                entry["clip"] = None
                audio = turn.get("audio")
                if audio is not None:
                    clip_name = turn.get("file") or (Path(audio).name if isinstance(audio, (str, Path)) else None)
                    where = f"clip {len(clips) + 1} of {label} (turn {number}" + (f", `{clip_name}`)" if clip_name else ")")
                    try:
                        clip = load_audio(audio, name=clip_name, trim=trim)
                    except PipelineError as error:
                        raise type(error)(f"{where}: {error}") from None
                    entry["clip"] = len(clips)
                    clips.append(clip)
                    digests.append(audio_sha256(clip.samples))
            stored.append(entry)
        try:
            build_dialogue_messages(stored)  # roles, empty turns, first turn by the learner
        except DatasetError as error:
            raise SampleError(f"{label}: {error}") from None
        if not clips:
            raise SampleError(f"{label} has no recording; at least one learner turn must be a clip (the tutor listens).")
        if not any(t["role"] == "tutor" for t in stored):
            raise SampleError(f"{label} has no tutor turn; add the tutor's answer to the learner.")
        digest = hashlib.sha256(("dialogue:" + ":".join(digests)).encode()).hexdigest()
        if digest in hashes:
            raise SampleError(f"{label} has the same clips as sample `{hashes[digest]}`; it was not added twice.")
        new_id = _free_id(make_sample_id(sample_id) if sample_id else f"d-{digest[:10]}", taken_ids)
        files = [f"audio/{new_id}.wav"] + [f"audio/{new_id}.{k}.wav" for k in range(2, len(clips) + 1)]
        warnings = []
        for entry in stored:
            if entry.get("clip") is not None:
                k = entry["clip"]
                report = clips[k].report.to_dict()
                entry.update(audio_file=files[k], checks=report, audio_sha256=digests[k],
                             duration_s=round(clips[k].duration_s, 3))
                warnings += [f"clip {k + 1}: {w}" for w in report.get("warnings", [])]
        checks = dict(stored[next(i for i, t in enumerate(stored) if t.get("clip") == 0)]["checks"], warnings=warnings)
        sample = Sample(
            id=new_id, audio_file=files[0], target_text="", feedback="", speaker=nfc(speaker) or None,
            scores=scores, source=str(source) if source is not None else None, checks=checks,
            audio_sha256=digest, duration_s=round(sum(c.duration_s for c in clips), 3), kind="dialogue",
            turns=stored,
        )
        return sample, [(f, wav_bytes(c.samples)) for f, c in zip(files, clips)]

    def add(
        self,
        audio: Any,
        target_text: str = "",
        feedback: str | None = "",
        *,
        transcript: str | None = None,
        speaker: str | None = None,
        scores: dict | None = None,
        source: str | None = None,
        sample_id: str | None = None,
        trim: bool = False,
        require_feedback: bool = False,
        kind: str | None = None,
        prompt: str | None = None,
        turns: list[dict] | None = None,
    ) -> Sample:
        """Check, normalize and store one sample; returns the new `Sample`.

        Args:
            audio: anything `pipeline.data.audio.load_audio` accepts (path, bytes, microphone tuple,
                Audio); None for a dialogue (its clips are in `turns`).
            target_text: read-aloud: the sentence to read; NFC-normalized, must not be empty.
            feedback: the tutor's answer; may be empty (then the sample is excluded from training)
                unless `require_feedback`. Blank text (only spaces or invisible characters,
                `pipeline.conversation.messages.is_blank`) counts as empty and is stored as "". A dialogue
                takes none (its tutor turns are the answers).
            sample_id: preferred id (made file-name-safe; `-2`, `-3`... appended if taken);
                default `s-` (`d-` for a dialogue) + the first 10 hex digits of the audio hash.
            trim: keep the first 30 s of a longer clip instead of refusing it.
            require_feedback: refuse a blank `feedback` (the app's "Add a recording" form).
            kind: `read_aloud`, `free_speech` or `dialogue`; None infers it (`infer_kind`).
            prompt: free speech: the question the learner answered (must not be empty).
            turns: dialogue: `[{"role": "learner", "audio"?, "text"?, "transcript"?} |
                {"role": "tutor", "text"}]`, starting with the learner, at least one clip and one
                tutor turn.

        Raises:
            SampleError: blank target text or prompt (or feedback with `require_feedback`), a text
                that spells a control token such as `<end_of_turn>`, a dialogue that breaks the rules
                above, duplicate audio (names the existing id), bad manifest.
            AudioError: a clip fails a check in `load_audio` (for a dialogue the message names the clip).
        """
        added, skipped = self.add_many(
            [
                dict(
                    audio=audio, target_text=target_text, feedback=feedback, transcript=transcript,
                    speaker=speaker, scores=scores, source=source, sample_id=sample_id, trim=trim,
                    require_feedback=require_feedback, kind=kind, prompt=prompt, turns=turns,
                )
            ],
            _raise=True,
        )
        return added[0]

    def add_many(
        self,
        items: Iterable[dict[str, Any]],
        progress: Callable[[int, int], None] | None = None,
        *,
        _raise: bool = False,
    ) -> tuple[list[Sample], list[dict[str, str]]]:
        """Add several clips with ONE manifest write at the end.

        Args:
            items: dicts with the keyword arguments of `add` (`audio`, `target_text`, `feedback`,
                `transcript`, `speaker`, `scores`, `source`, `sample_id`, `trim`, `require_feedback`,
                `kind`, `prompt`, `turns`) plus an optional `file` (how the item is named in the
                report; default: the audio path) and an optional `too_long_hint` (added to the reason
                of a clip refused as longer than 30 s, e.g. how the caller's trim option keeps its
                first 30 s). Without `kind` the kind is inferred (`infer_kind`).
            progress: called as `progress(done, total)` after each item.

        Returns:
            `(added, skipped)`: the new Samples, and `{"file", "reason"}` for each item that failed
            a check (bad audio, empty text, duplicate). One bad item never stops the others.

        If writing fails (disk full, interrupted), the audio files written by this call are removed
        and the manifest is unchanged; if the process is killed before the manifest is written, the
        next change removes them (`_undo_killed_writes`). When nothing is added the manifest is not rewritten.
        """
        items = list(items)
        if len(items) <= PREDECODE_ITEMS:  # decoded before the lock: other writers wait only for the writes
            items = [_predecoded(item) for item in items]
        added: list[Sample] = []
        skipped: list[dict[str, str]] = []
        with self.locked():
            existing = self._read()
            self._undo_killed_writes(existing)
            taken = {sample.id for sample in existing}
            hashes = {_duplicate_key(s.kind, s.audio_sha256): s.id for s in existing if s.audio_sha256}
            with pending_files(self.workspace.samples_dir) as note:
                for index, item in enumerate(items):
                    item = dict(item)
                    label = item.pop("file", None)
                    too_long_hint = item.pop("too_long_hint", None)
                    audio = item.get("audio")
                    if label is None and isinstance(audio, (str, Path)):
                        label = Path(audio).name
                    try:
                        kind = infer_kind(item)
                        sample, clips = self._prepare(
                            audio,
                            item.get("target_text"),
                            item.get("feedback"),
                            transcript=item.get("transcript"),
                            speaker=item.get("speaker"),
                            scores=item.get("scores"),
                            source=item.get("source"),
                            sample_id=item.get("sample_id"),
                            trim=bool(item.get("trim", False)),
                            require_feedback=bool(item.get("require_feedback", False)),
                            name=None if label is None else str(label),
                            taken_ids=taken,
                            hashes=hashes,
                            kind=kind,
                            prompt=item.get("prompt"),
                            turns=item.get("turns"),
                        )
                    except PipelineError as error:
                        if _raise:
                            raise
                        reason = str(error)
                        if too_long_hint and isinstance(error, ClipTooLongError):
                            reason += f" {too_long_hint}"
                        skipped.append({"file": str(label or f"item {index + 1}"), "reason": reason})
                    else:
                        for relative, data in clips:
                            atomic_write_bytes(note(self.workspace.samples_dir / relative), data)
                        taken.add(sample.id)
                        hashes[_duplicate_key(sample.kind, sample.audio_sha256)] = sample.id
                        added.append(sample)
                    if progress is not None:
                        progress(index + 1, len(items))
                    hold_point("import:clip")
                if added:
                    self._write(existing + added)
        return added, skipped

    def same_recording(self, audio: Any, kind: str = "read_aloud") -> Sample | None:
        """The sample of `kind` whose recording is `audio` (a path or a decoded clip, as `add` takes it), the
        one `add` would refuse it as a duplicate of; None when there is none."""
        from pipeline.data.audio import load_audio

        key = _duplicate_key(kind, audio_sha256(load_audio(audio).samples))
        return next((s for s in self.list() if s.audio_sha256 and _duplicate_key(s.kind, s.audio_sha256) == key), None)

    def update(self, sample_id: str, **fields: Any) -> Sample:
        """Change text fields or scores of one sample (see `EDITABLE_FIELDS`); returns the updated Sample.

        Raises:
            SampleError: unknown id, a field that cannot be edited, or a blank `target_text`
                (`pipeline.conversation.messages.is_blank`). A blank `feedback` is stored as "".
        """
        unknown = sorted(set(fields) - set(EDITABLE_FIELDS))
        if unknown:
            raise SampleError(
                f"Cannot edit {in_words(unknown)} of a sample; editable fields are {in_words(EDITABLE_FIELDS)}. "
                "To replace the audio, delete the sample and add it again."
            )
        for key in ("target_text", "feedback", "transcript", "speaker"):
            if key in fields:
                fields[key] = nfc(fields[key])
        if "prompt" in fields:
            fields["prompt"] = nfc(fields["prompt"]) or None
        _check_texts(f"sample `{sample_id}`", **{k: fields[k] for k in _USER_TEXTS if k in fields})
        if "feedback" in fields and is_blank(fields["feedback"]):
            fields["feedback"] = ""
        for key in ("transcript", "speaker"):
            if key in fields and not fields[key]:
                fields[key] = None
        if "scores" in fields and fields["scores"] is not None and not isinstance(fields["scores"], dict):
            raise SampleError(f"`scores` must be a dict, got {type(fields['scores']).__name__}.")
        with self.locked():
            samples = self._read()
            for index, sample in enumerate(samples):
                if sample.id == sample_id:
                    if sample.kind == "read_aloud" and "target_text" in fields and is_blank(fields["target_text"]):
                        raise SampleError(f"Target text of sample `{sample_id}` cannot be empty; type the sentence to read.")
                    if sample.kind == "free_speech" and "prompt" in fields and is_blank(fields["prompt"]):
                        raise SampleError(f"Prompt of sample `{sample_id}` cannot be empty; type the question answered.")
                    updated = Sample.from_dict({**sample.to_dict(), **fields})
                    samples[index] = updated
                    self._write(samples)
                    return updated
        raise SampleError(
            f"No sample with id `{sample_id}`; `python -m pipeline samples --workspace WS` lists the ids."
        )

    def delete(self, sample_id: str) -> Sample:
        """Remove a sample and its audio file; returns the removed Sample. Raises `SampleError` on unknown id."""
        with self.locked():
            samples = self._read()
            keep = [sample for sample in samples if sample.id != sample_id]
            if len(keep) == len(samples):
                raise SampleError(
                    f"No sample with id `{sample_id}`; `python -m pipeline samples --workspace WS` lists the ids."
                )
            removed = next(sample for sample in samples if sample.id == sample_id)
            self._write(keep)
            for name in removed.clip_files:
                (self.workspace.samples_dir / name).unlink(missing_ok=True)
        return removed
