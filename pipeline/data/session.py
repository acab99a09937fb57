"""Recording sessions: a list of sentences (read-aloud) or prompts (free speech) recorded one by one.

A teacher sitting with a learner pastes or imports the list once, sets the speaker once, then goes
through it: record, automatic check, save, next, without retyping. Every saved clip is at once an
ordinary sample of the library (`SampleLibrary.add`), and the session itself (the list, where the
teacher is, which items are saved) is kept in `WS/samples/session.json`, written atomically after
every step: closing the tab or the app loses nothing, and reopening continues at the same item.

Skip moves on without saving; going back to a saved item and saving it again replaces that item's
sample (re-record). It deliberately does not check audio itself: the library does, on save.
"""

from __future__ import annotations

import csv
import functools
import io
import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from pipeline.errors import SampleError
from pipeline.fileio import atomic_write_json, locked, read_person_text
from pipeline.workspace import Workspace

SESSION_FILE = "session.json"
SESSION_KINDS = ("read_aloud", "free_speech")
_ITEM_COLUMNS = ("sentence", "target_text", "text", "prompt", "question")


@dataclass
class RecordingSession:
    """Where a recording session stands.

    Attributes:
        kind: `read_aloud` (items are sentences to read) or `free_speech` (items are prompts).
        items: the sentences or prompts, in order (NFC, non-empty).
        speaker: the learner, set once for every clip of the session (None: unknown).
        position: index of the current item; `len(items)` when the list is done.
        saved: item index (as a string, JSON keys) -> id of the sample saved for it.
        skipped: indices skipped without a recording.
        started_at: unix seconds.
    """

    kind: str
    items: list[str]
    speaker: str | None = None
    position: int = 0
    saved: dict[str, str] = field(default_factory=dict)
    skipped: list[int] = field(default_factory=list)
    started_at: float = 0.0

    @property
    def done(self) -> bool:
        """True when the position is past the last item."""
        return self.position >= len(self.items)

    @property
    def current(self) -> str | None:
        """The sentence or prompt to record now (None when done)."""
        return None if self.done else self.items[self.position]

    def progress(self) -> str:
        """E.g. "12 of 30 · 11 saved, 1 skipped" (or "done: 30 of 30 saved")."""
        total = len(self.items)
        counts = f"{len(self.saved)} saved" + (f", {len(set(self.skipped) - {int(k) for k in self.saved})} skipped"
                                               if self.skipped else "")
        if self.done:
            return f"done: {counts} of {total}"
        return f"{self.position + 1} of {total} · {counts}"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def parse_items(text: str | None = None, file: str | Path | None = None) -> list[str]:
    """The sentences or prompts of a pasted list and/or an imported file, in order.

    `text`: one item per line; blank lines and lines starting with `#` are ignored. `file`: a `.txt`
    (one per line, the same rules) or a `.csv`/`.tsv` whose `sentence`/`target_text`/`text`/`prompt`
    /`question` column (else its first column) holds the items. Raises `SampleError` when the file
    cannot be read as UTF-8.
    """
    import unicodedata

    lines: list[str] = []
    if file:
        path = Path(file)
        content = read_person_text(path, SampleError, name=f"The list `{path.name}`",
                                   fix="save it as UTF-8 (a text editor's or Excel's 'UTF-8' option) and import it again")
        if path.suffix.lower() in (".csv", ".tsv"):
            rows = list(csv.reader(io.StringIO(content), delimiter="\t" if path.suffix.lower() == ".tsv" else ","))
            header = [h.strip().lower() for h in rows[0]] if rows else []
            column = next((header.index(c) for c in _ITEM_COLUMNS if c in header), None)
            body = rows[1:] if column is not None else rows
            lines += [r[column or 0] for r in body if len(r) > (column or 0)]
        else:
            lines += content.splitlines()
    if text:
        lines += str(text).splitlines()
    items = [unicodedata.normalize("NFC", line).strip() for line in lines]
    return [item for item in items if item and not item.startswith("#")]


def _same_audio(library: Any, sample_id: str, audio: Any, trim: bool) -> bool:
    """Whether `audio` (as the library would store it) is the audio of sample `sample_id` (False when that
    sample is gone, or the clip cannot be read: the library's own add then says why)."""
    from pipeline.data.audio import load_audio
    from pipeline.data.samples import audio_sha256
    from pipeline.errors import PipelineError

    try:
        stored = library.get(sample_id)
        return bool(stored.audio_sha256) and audio_sha256(load_audio(audio, trim=trim).samples) == stored.audio_sha256
    except PipelineError:
        return False


def _under_lock(method):
    """Run a `SessionStore` method that reads, changes and writes the session under the session file's lock
    (`pipeline.fileio.locked`: across threads and processes), so two pages on one session lose no step."""
    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        with locked(self.path):
            return method(self, *args, **kwargs)

    return wrapper


class SessionStore:
    """The recording session of one workspace (`WS/samples/session.json`)."""

    def __init__(self, workspace: Workspace | str | Path):
        self.workspace = workspace if isinstance(workspace, Workspace) else Workspace(workspace)
        self.path = self.workspace.samples_dir / SESSION_FILE

    def load(self) -> RecordingSession | None:
        """The saved session, or None when there is none (or it cannot be read: a new one replaces it)."""
        if not self.path.exists():
            return None
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
            return RecordingSession(**{k: data[k] for k in RecordingSession.__dataclass_fields__ if k in data})
        except (OSError, ValueError, TypeError):
            return None

    def _save(self, session: RecordingSession) -> RecordingSession:
        atomic_write_json(self.path, session.to_dict())
        return session

    @_under_lock
    def start(self, items: list[str], kind: str = "read_aloud", speaker: str | None = None) -> RecordingSession:
        """A new session over `items` (replacing any previous one; saved samples stay in the library).

        Starting the same list of the same kind for the same speaker again while that session is
        unfinished (Start pressed twice, or again after reopening the page) continues it where it was,
        with its saved and skipped items, instead of starting over at item 1 (where re-recording the
        items already saved would add them twice). Another speaker on the same list is a new session.

        Raises `SampleError` for an empty list or a kind other than read_aloud / free_speech.
        """
        if kind not in SESSION_KINDS:
            raise SampleError(f"A recording session records {' or '.join(SESSION_KINDS)} clips, not `{kind}`; "
                              "record dialogues in the dialogue editor.")
        items = [i for i in (s.strip() for s in items) if i]
        if not items:
            what = "sentences" if kind == "read_aloud" else "prompts"
            raise SampleError(f"The list is empty: paste the {what}, one per line, or import a .txt/.csv file.")
        speaker = (speaker or "").strip() or None
        current = self.load()
        if (current is not None and not current.done and current.kind == kind and current.items == items
                and current.speaker == speaker):
            return current
        return self._save(RecordingSession(kind=kind, items=items, speaker=speaker, started_at=time.time()))

    def _current(self) -> RecordingSession:
        session = self.load()
        if session is None:
            raise SampleError("No recording session: paste a list of sentences or prompts and start one.")
        return session

    @_under_lock
    def save_current(self, audio: Any, feedback: str | None = "", *, trim: bool = False) -> tuple[RecordingSession, Any]:
        """Save `audio` as the sample of the current item and move to the next unsaved item.

        The sample is `SampleLibrary.add(audio, kind, sentence or prompt, feedback, speaker)`; an
        item saved before (re-record) has its earlier sample replaced. Returns (session, Sample).

        Raises:
            SampleError: no session, the list is done, or the library refuses the sample.
            AudioError: the clip fails a check (nothing is saved, the position stays).
        """
        from pipeline.data.samples import SampleLibrary

        session = self._current()
        if session.done:
            raise SampleError("The session is done: every item was saved or skipped. Start a new one, or go back.")
        library = SampleLibrary(self.workspace)
        key = str(session.position)
        item = session.current
        text = dict(target_text=item) if session.kind == "read_aloud" else dict(prompt=item)
        previous = session.saved.get(key)
        if previous and _same_audio(library, previous, audio, trim):
            # the same take saved again (e.g. to change its feedback): update it; adding it would be refused
            # as a duplicate of itself and leave the teacher stuck on this item
            sample = library.update(previous, feedback=feedback or "", speaker=session.speaker, **text)
        else:
            sample = library.add(audio, feedback=feedback or "", speaker=session.speaker, kind=session.kind, trim=trim,
                                 source="microphone" if isinstance(audio, tuple) else None, **text)
            if previous:
                try:
                    library.delete(previous)
                except SampleError:
                    pass  # deleted meanwhile in the library view
        session.saved[key] = sample.id
        session.skipped = [i for i in session.skipped if i != session.position]
        session.position = self._next_open(session, session.position + 1)
        return self._save(session), sample

    @_under_lock
    def skip(self) -> RecordingSession:
        """Move to the next item without saving (the skipped item can be recorded later with Back)."""
        session = self._current()
        if not session.done:
            if str(session.position) not in session.saved and session.position not in session.skipped:
                session.skipped.append(session.position)
            session.position += 1
        return self._save(session)

    @_under_lock
    def back(self) -> RecordingSession:
        """Go to the previous item (to re-record it: saving again replaces its sample)."""
        session = self._current()
        session.position = max(0, session.position - 1)
        return self._save(session)

    @staticmethod
    def _next_open(session: RecordingSession, start: int) -> int:
        """The first item at or after `start` not saved yet (skipped ones are passed too), else the end."""
        for index in range(start, len(session.items)):
            if str(index) not in session.saved and index not in session.skipped:
                return index
        return len(session.items)
