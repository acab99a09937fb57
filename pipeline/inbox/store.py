"""The inbox: students' practice attempts, waiting for the teacher to accept, edit or reject them.

Layout (`WS/inbox/`):
    attempts/<id>.json   one attempt (`Attempt`), written atomically; its status changes in place
    audio/<id>.wav       the student's clip, 16 kHz mono PCM16 (as the sample library stores clips)
    practice.json        what the practice page offers (`pipeline.inbox.practice`)

One file per attempt (no shared manifest): students answering at the same moment never overwrite
each other's attempts, and a crash loses at most the attempt being written; a write that fails (a
full disk) removes what it had written, so no clip is left without its record. Accepting an attempt
adds an ordinary sample to the library (`SampleLibrary.add`: the student as speaker, the exercise's
sentence or prompt, the teacher's feedback) and only then marks the attempt accepted; accepting it
again finds that sample (its `source` is `inbox/<id>`) instead of adding it twice. Rejecting keeps
the attempt and its clip (status `rejected`), so nothing is lost: it can still be accepted later.
Deleting removes the attempt, its clip and the sample made from it (a student withdrawing consent, or
a teacher clearing the inbox).

Every decision (accept, reject, delete) is made under the inbox's lock (`pipeline.fileio.locked`,
held across processes: the app, `python -m pipeline inbox` and a second app), and the sample under
the manifest's, so attempts accepted from many processes at once all become samples, once each. A
decision names the status the teacher saw (`expected_status`): when another teacher decided the
attempt meanwhile, it is refused with who decided what, instead of the last click silently winning.

It deliberately does not run the tutor: `pipeline.inbox.practice` asks it, then calls `Inbox.add`.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from pipeline.errors import SampleError
from pipeline.fileio import atomic_write_bytes, atomic_write_json, disk_room, hold_point, locked, pending_files, undo_pending
from pipeline.units import format_bytes
from pipeline.workspace import Workspace

INBOX_DIR = "inbox"
STATUSES = ("pending", "accepted", "rejected")
RECORD_BYTES = 4096
"""Room an attempt's JSON record takes on disk at most (bytes), added to the clip's size in the free-disk check."""


@dataclass
class Attempt:
    """One student attempt.

    Attributes:
        id: `a-<unix ms>-<6 hex>`: sortable by time, file-name-safe.
        student: the student's name (the login name when the page has accounts).
        kind: `read_aloud` (exercise is a sentence) or `free_speech` (exercise is a prompt).
        exercise: the sentence read or the prompt answered.
        answer: the tutor's answer as the student saw it (the draft feedback).
        run: the run that answered; model: its base model; tiny_random_model: True when the answer
            came from the random stand-in (meaningless text).
        created_at: unix seconds of the attempt.
        duration_s: clip length in seconds.
        status: `pending`, `accepted` or `rejected`.
        feedback: the feedback the teacher accepted (the answer, edited or not); None until accepted.
        sample_id: the library sample made from it (accepted only).
        decided_at: unix seconds of the teacher's decision (None while pending).
        decided_by: who decided (the teacher's login name; None from the command line or without accounts).
        same_as: the library sample whose recording this attempt's already was when it was accepted: nothing was
            added (`sample_id` is that sample, which keeps its own feedback); None otherwise.
    """

    id: str
    student: str
    kind: str
    exercise: str
    answer: str
    run: str | None
    model: str | None
    tiny_random_model: bool
    created_at: float
    duration_s: float
    status: str = "pending"
    feedback: str | None = None
    sample_id: str | None = None
    decided_at: float | None = None
    decided_by: str | None = None
    same_as: str | None = None

    @property
    def audio_file(self) -> str:
        """The clip's path relative to `WS/inbox/`."""
        return f"audio/{self.id}.wav"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _decision_words(attempt: Attempt) -> str:
    """`accepted by ms-lee at 14:02` (who and when an attempt was decided), for a refusal's message."""
    who = f" by {attempt.decided_by}" if attempt.decided_by else ""
    when = time.strftime(" at %H:%M", time.localtime(attempt.decided_at)) if attempt.decided_at else ""
    return f"{attempt.status}{who}{when}"


class Inbox:
    """The attempts of one workspace (`WS/inbox/`)."""

    def __init__(self, workspace: Workspace | str | Path):
        self.workspace = workspace if isinstance(workspace, Workspace) else Workspace(workspace)
        self.root = self.workspace.root / INBOX_DIR

    def audio_path(self, attempt: Attempt) -> Path:
        """Absolute path of an attempt's clip."""
        return self.root / attempt.audio_file

    def _path(self, attempt_id: str) -> Path:
        if not attempt_id or not all(c.isalnum() or c == "-" for c in attempt_id):
            raise SampleError(f"`{attempt_id}` is not an attempt id (e.g. `a-1764600000000-1a2b3c`); "
                              "`python -m pipeline inbox --workspace WS` lists them.")
        return self.root / "attempts" / f"{attempt_id}.json"

    def locked(self):
        """`with inbox.locked():` holds the inbox's lock (every decision takes it; across processes)."""
        return locked(self.root / "attempts")

    def undo_killed_writes(self, remove_upload=None) -> list[Path]:
        """Remove the clips of attempts whose process was killed between the clip and its record
        (`pipeline.fileio.undo_pending`: a clip without `attempts/ID.json`), and with `remove_upload` (the
        practice page's `discard_upload`) the uploads an attempt being answered noted in `uploads_journal`
        when its app was killed; returns the files removed. `add` calls it, and the practice page as it starts."""
        removed = undo_pending(self.root, keep=lambda clip: self._path(clip.stem).is_file())
        if remove_upload is not None:
            removed += undo_pending(self.uploads_journal, keep=lambda upload: False, remove=remove_upload)
        return removed

    @property
    def uploads_journal(self) -> Path:
        """`WS/inbox/.uploads-pending/`: the journals (`pipeline.fileio.pending_files`) of the uploads being
        answered, so a recording a killed app was answering is deleted at its next start, consent or not."""
        return self.root / ".uploads-pending"

    def add(self, audio: Any, *, student: str, kind: str, exercise: str, answer: str, run: str | None = None,
            model: str | None = None, tiny_random_model: bool = False) -> Attempt:
        """Keep one attempt: the clip (decoded and checked by `load_audio`, stored as 16 kHz PCM16 WAV) and
        its record. The clip is written before the record, so a listed attempt always has its audio; when
        either write fails, both are removed (no clip is left without its record), and a clip whose process
        was killed before its record is removed by the next `add` (`undo_killed_writes`).

        Raises:
            SampleError: empty student name, exercise or kind other than read_aloud / free_speech; the disk
                has no room for the clip and its record, or a write failed (names the folder, the free bytes
                and the fix; nothing is stored).
            AudioError: the clip fails a check (nothing is stored).
        """
        from pipeline.data.audio import load_audio, wav_bytes

        student, exercise = (student or "").strip(), (exercise or "").strip()
        if not student:
            raise SampleError("The student's name is empty; type your name before practising.")
        if not exercise:
            raise SampleError("The exercise is empty; pick a sentence or prompt to practise.")
        if kind not in ("read_aloud", "free_speech"):
            raise SampleError(f"A practice attempt is read_aloud or free_speech, not `{kind}`.")
        clip = load_audio(audio)
        attempt = Attempt(id=f"a-{int(time.time() * 1000)}-{uuid.uuid4().hex[:6]}", student=student, kind=kind,
                          exercise=exercise, answer=answer or "", run=run, model=model,
                          tiny_random_model=bool(tiny_random_model), created_at=round(time.time(), 3),
                          duration_s=round(clip.duration_s, 3))
        data = wav_bytes(clip.samples)
        free, wanted = disk_room(self.root, len(data) + RECORD_BYTES)
        if free < wanted:
            raise SampleError(f"The attempt was not kept: the disk holding {self.root} has {format_bytes(free)} free "
                              f"and the clip needs {format_bytes(wanted)}. Free some space (old runs' checkpoints, "
                              "exports) and record again.")
        paths = (self.audio_path(attempt), self._path(attempt.id))
        self.undo_killed_writes()
        try:
            with pending_files(self.root) as note:
                atomic_write_bytes(note(paths[0]), data)
                hold_point("inbox:clip")
                atomic_write_json(paths[1], attempt.to_dict())
        except OSError as error:
            for path in paths:
                path.unlink(missing_ok=True)
            raise SampleError(f"The attempt was not kept: writing it into {self.root} failed "
                              f"({error.strerror or error}). Nothing of it was stored; free some disk space or fix "
                              "the folder's permissions, then record again.") from None
        return attempt

    def get(self, attempt_id: str) -> Attempt:
        """The attempt `attempt_id`. Raises `SampleError` for an unknown or unreadable one."""
        path = self._path(attempt_id)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            return Attempt(**{k: data[k] for k in Attempt.__dataclass_fields__ if k in data})
        except FileNotFoundError:
            raise SampleError(f"No attempt `{attempt_id}` in {self.root} (deleted, or never kept); "
                              "`python -m pipeline inbox --workspace WS` lists them.") from None
        except (OSError, ValueError, TypeError) as error:
            raise SampleError(f"Attempt `{attempt_id}` cannot be read ({error}); its file is {path}.") from None

    def list(self, status: str | None = None, *, student: str | None = None) -> list[Attempt]:
        """Attempts, oldest first; only those with `status` and of `student` when given (unreadable files
        are skipped)."""
        if status is not None and status not in STATUSES:
            raise SampleError(f"Status `{status}` is unknown; use one of {', '.join(STATUSES)}.")
        folder = self.root / "attempts"
        attempts = []
        for path in sorted(folder.glob("a-*.json")) if folder.is_dir() else []:
            try:
                attempt = self.get(path.stem)
            except SampleError:
                continue
            if (status is None or attempt.status == status) and (student is None or attempt.student == student):
                attempts.append(attempt)
        return sorted(attempts, key=lambda a: (a.created_at, a.id))

    def _check_seen(self, attempt: Attempt, expected_status: str | None, doing: str) -> None:
        """Refuse a decision made on a stale view: the attempt is no longer `expected_status`."""
        if expected_status is not None and attempt.status != expected_status:
            now = _decision_words(attempt)
            kept = f" with the feedback {attempt.feedback!r:.120}" if attempt.status == "accepted" else ""
            raise SampleError(f"Attempt `{attempt.id}` ({attempt.student}) was {now}{kept} while you had it open, "
                              f"so it was not {doing}. Refresh the inbox to see it as it is now.")

    def accept(self, attempt_id: str, feedback: str | None = None, *, expected_status: str | None = None,
               by: str | None = None) -> tuple[Attempt, Any]:
        """Make the attempt a sample of its kind: the student as speaker, the exercise as the sentence
        (read aloud) or prompt (free speech), `feedback` (default: the tutor's answer) as its feedback.

        Args:
            expected_status: the status the teacher saw (the Inbox tab shows `pending` attempts); when the
                attempt has another one now (a second teacher decided it meanwhile), nothing changes and
                `SampleError` says who decided what. None: no check (the command line names the attempt).
            by: who accepts (the teacher's login name), recorded as `decided_by`.

        Returns (attempt, Sample). Accepting an accepted attempt again changes its sample's feedback to
        `feedback` when given (an edit after accepting), else returns it unchanged. An attempt whose recording
        is a sample of the library already (`same_recording`: a student sent a clip that was already there) is
        marked done instead: accepted, `same_as` and `sample_id` that sample, which keeps its own feedback
        (nothing is added or changed; `feedback` is not applied).

        Raises:
            SampleError: unknown attempt, blank feedback, decided meanwhile (see `expected_status`), or the
                library refuses the sample (the message says why).
            AudioError: the stored clip fails a check.
        """
        from pipeline.conversation.feedback import is_not_scored
        from pipeline.data.audio import load_audio
        from pipeline.data.samples import SampleLibrary
        from pipeline.errors import PipelineError, shorten

        try:  # decoded before the locks are taken: the other accepts wait only for the writes
            clip = load_audio(self.root / "audio" / f"{self._path(attempt_id).stem}.wav")
        except PipelineError:
            clip = None  # refused below with the attempt's own message
        with self.locked():
            attempt = self.get(attempt_id)
            self._check_seen(attempt, expected_status, "accepted again")
            text = (attempt.answer if feedback is None else feedback).strip()
            if not text:
                raise SampleError(f"The feedback of attempt `{attempt_id}` is empty; type the feedback to keep, "
                                  "or reject the attempt.")
            if is_not_scored(text):
                raise SampleError(f"The answer to attempt `{attempt_id}` is not feedback ({shorten(text, 160)}); type "
                                  "the feedback to keep, or reject the attempt.")
            library = SampleLibrary(self.workspace)
            source = f"{INBOX_DIR}/{attempt.id}"
            with library.locked():
                existing = next((s for s in library.list() if s.source == source), None)
                if existing is not None:  # accepted before (maybe the status write was interrupted)
                    sample = library.update(existing.id, feedback=text) if text != existing.feedback else existing
                elif clip is not None and (same := library.same_recording(clip, attempt.kind)) is not None:
                    sample, attempt.same_as, text = same, same.id, same.feedback  # already there: marked done
                else:
                    texts = (dict(target_text=attempt.exercise) if attempt.kind == "read_aloud"
                             else dict(prompt=attempt.exercise))
                    sample = library.add(clip or self.audio_path(attempt), feedback=text, speaker=attempt.student,
                                         kind=attempt.kind, source=source, require_feedback=True, **texts)
            attempt.status, attempt.feedback, attempt.sample_id = "accepted", text, sample.id
            attempt.decided_at, attempt.decided_by = round(time.time(), 3), by
            atomic_write_json(self._path(attempt.id), attempt.to_dict())
            return attempt, sample

    def same_recording(self, attempt: Attempt) -> Any:
        """The library sample whose recording `attempt`'s already is (of its kind), which accepting it would not
        add again (`accept` marks it done); None when there is none, or its clip cannot be read."""
        from pipeline.data.samples import SampleLibrary
        from pipeline.errors import PipelineError

        try:
            return SampleLibrary(self.workspace).same_recording(self.audio_path(attempt), attempt.kind)
        except PipelineError:
            return None

    def reject(self, attempt_id: str, *, expected_status: str | None = None, by: str | None = None) -> Attempt:
        """Mark the attempt rejected (kept with its clip; it can still be accepted later).

        Raises `SampleError` for an unknown attempt, one decided meanwhile (`expected_status`, as in
        `accept`), or one already accepted (delete its sample in the library instead)."""
        with self.locked():
            attempt = self.get(attempt_id)
            self._check_seen(attempt, expected_status, "rejected")
            if attempt.status == "accepted" and attempt.same_as:
                raise SampleError(f"Attempt `{attempt_id}` was marked done: its recording is sample `{attempt.same_as}` "
                                  "of the library already, so there is nothing to reject.")
            if attempt.status == "accepted":
                raise SampleError(f"Attempt `{attempt_id}` is already sample `{attempt.sample_id}`; delete that sample "
                                  "in the library to drop it.")
            attempt.status, attempt.decided_at, attempt.decided_by = "rejected", round(time.time(), 3), by
            atomic_write_json(self._path(attempt.id), attempt.to_dict())
            return attempt

    def delete(self, attempt_id: str, *, student: str | None = None) -> Attempt:
        """Delete the attempt: its record, its clip, and the library sample made from it when it was accepted
        (consent withdrawn: nothing of it stays in the workspace). Returns the deleted attempt.

        Args:
            student: the student asking (their own attempts only); None: a teacher (any attempt).

        Raises:
            SampleError: unknown attempt, or an attempt of another student than `student`.
        """
        from pipeline.data.samples import SampleLibrary

        with self.locked():
            attempt = self.get(attempt_id)
            if student is not None and attempt.student != student:
                raise SampleError(f"Attempt `{attempt_id}` is not yours; you can delete only your own attempts.")
            library = SampleLibrary(self.workspace)
            with library.locked():
                source = f"{INBOX_DIR}/{attempt.id}"
                for sample in [s for s in library.list() if s.source == source]:
                    library.delete(sample.id)
            self._path(attempt.id).unlink(missing_ok=True)  # the record first: a listed attempt has its clip
            self.audio_path(attempt).unlink(missing_ok=True)
            return attempt
