"""Importers: turn a folder of recordings in a common layout into samples of the library.

Formats (`detect_format` picks one; `--format` forces it):
- `kaldi`: Kaldi data folder(s) with `wav.scp`, `text`, optional `utt2spk`, e.g. speechocean762
  (the source itself, or its subfolders such as `train/` and `test/`); a `lexicon.txt` beside the
  scores is added to the workspace's lexicon for the classical scorer. Expert scores are read from
  `resource/scores.json` (or `scores.json`) in the data folder or any folder above it, up to two
  folders above the source; a scored utterance gets `feedback.feedback_from_scores` as its feedback and keeps
  the scores structured in `Sample.scores`. `wav.scp` paths are resolved against the data folder,
  then each folder above it up to the same limit (Kaldi recipes use paths relative to the recipe root).
- `audiofolder`: Hugging Face audiofolder, `metadata.csv` / `metadata.jsonl` / `metadata.parquet`
  (in the source or its split subfolders) with a file-name column (`file_name`, relative to the
  metadata file; Windows `\\` separators, `./`, another machine's absolute paths and case differences
  resolve, see `pipeline.data.paths`) and a target-text column (`target_text`, `sentence`, `text`,
  `transcription` ...; see `COLUMN_ALIASES`) for read-aloud rows, or a `prompt` column (the question
  answered) for free-speech rows; optional `feedback`, `speaker`, `transcript`, `scores` (JSON) and
  `kind` columns. A row with a prompt and no sentence is free speech. Spreadsheet CSVs work as Excel,
  LibreOffice Calc, Google Sheets and Numbers write them: UTF-8 with or without a BOM, UTF-16 with one, the
  Windows-1252 / Mac OS Roman / DOS code pages (`metadata_table.read_spreadsheet_text`), CR, LF or CRLF line
  ends, `,` `;` tab or `|` delimiters (sniffed from the header), quoted cells, spaces and case in headers.
- `chat`: a JSON Lines file or a JSON array (`.jsonl` / `.json`, the source itself, or `metadata.jsonl`
  rows with `messages` or `conversations`) in the chat format of transformers' processors, or the
  layouts of LLaMA-Factory, ms-swift, sharegpt, alpaca (with `audios`) and OpenAI `input_audio`
  parts: read by `pipeline.data.chat_import` (read-aloud, free speech and tutoring dialogues; the
  kind is inferred when a row names none).
- `ljspeech`: `metadata.csv`, `|`-separated, no header (`id|transcription|normalized`), `wavs/<id>.wav`.
- `commonvoice`: Common Voice TSVs (`path`, `sentence`, `client_id` read by name) and `clips/`;
  train/dev/test TSVs when present, else `validated.tsv`, else every TSV with those columns.
- `folder`: audio files (any depth) with a same-named `.txt` sidecar holding the sentence read, and
  optionally `<name>.feedback.txt` holding the feedback. A first-level subfolder names the speaker
  (`kate/01.wav` -> speaker `kate`).

The report says which kind (`read_aloud`, `free_speech`, `dialogue`) each imported sample became.
Formats without feedback import with feedback "" (such samples are listed as excluded when the
dataset is built until their feedback is written). Every file is reported as imported or skipped
with a reason; one bad file (or metadata row: a value no file system takes as a name, an audio cell
of another type) never stops the rest. An audiofolder's audio column may hold file names or
embedded audio: `bytes`, or the `{"bytes", "path"}` structs `datasets` writes to Parquet (imported
from the bytes; the path only when there are none). Messages show values shortened
(`pipeline.errors.shorten`). All samples are added with one manifest write at
the end (`SampleLibrary.add_many`), so a failing import leaves the existing manifest unchanged.
"""

from __future__ import annotations

import csv
import glob
import io
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from pipeline.data.audio_decode import AUDIO_SUFFIXES
from pipeline.data.chat_import import is_chat_metadata, read_chat_source
from pipeline.data.metadata_table import (
    COLUMN_ALIASES,
    cell_text,
    decode_legacy,
    metadata_row_item,
    norm_header,
    pick_column,
    read_spreadsheet_text,
    read_table,
    rel_path,
    unread_columns,
)
from pipeline.data.paths import PathResolver
from pipeline.errors import ImportFormatError, PipelineError, in_words, shorten
from pipeline.fileio import read_person_text
from pipeline.workspace import Workspace

FORMATS = ("kaldi", "audiofolder", "ljspeech", "commonvoice", "folder", "chat")

_CV_SKIP_TSVS = {"invalidated.tsv", "reported.tsv", "other.tsv", "validated_sentences.tsv",
                 "unvalidated_sentences.tsv", "clip_durations.tsv", "times.tsv"}
_CV_SPLITS = ("train.tsv", "dev.tsv", "test.tsv")
LEVELS_ABOVE_SOURCE = 2
"""How many folders above the source are searched for `scores.json` and relative `wav.scp` paths
(e.g. source `corpus/data/test`, scores in `corpus/resource/scores.json`)."""


@dataclass
class ImportReport:
    """Result of `import_folder`: ids added, the kind each became, `{file, reason}` for each file skipped."""

    source: str
    format: str
    imported: list[str] = field(default_factory=list)
    skipped: list[dict[str, str]] = field(default_factory=list)
    rows: list[dict[str, str]] = field(default_factory=list)
    """One `{"id", "kind", "source"}` per imported sample, in order."""
    notes: list[str] = field(default_factory=list)
    """What the teacher should know about the import as a whole (e.g. metadata columns that were not read)."""

    @property
    def total(self) -> int:
        """Files seen: imported + skipped."""
        return len(self.imported) + len(self.skipped)

    def to_dict(self) -> dict[str, Any]:
        """The `--json` object: `imported` (count), `ids`, `rows` [{id, kind, source}], `kinds` (count
        per kind), `skipped` [{file, reason}], `source`, `format`."""
        return {
            "source": self.source,
            "format": self.format,
            "imported": len(self.imported),
            "ids": list(self.imported),
            "rows": list(self.rows),
            "kinds": self.kind_counts(),
            "skipped": list(self.skipped),
            "notes": list(self.notes),
            "total": self.total,
        }

    def kind_counts(self) -> dict[str, int]:
        """Imported samples per kind (only kinds that occur)."""
        counts: dict[str, int] = {}
        for row in self.rows:
            counts[row["kind"]] = counts.get(row["kind"], 0) + 1
        return counts


# ----------------------------------------------------------------------------- helpers
def _read_kaldi_table(path: Path) -> dict[str, str]:
    """A Kaldi `key value...` table: first whitespace-separated field -> the rest of the line.

    This is Kaldi's own table format (not CSV: values contain spaces and no quoting); parsed the way
    Kaldi's `utils/` scripts do, with `str.split(maxsplit=1)`.
    """
    table: dict[str, str] = {}
    with open(path, encoding="utf-8-sig") as handle:
        for line in handle:
            parts = line.strip().split(maxsplit=1)
            if parts:
                table[parts[0]] = parts[1].strip() if len(parts) > 1 else ""
    return table


def _audio_files(root: Path) -> list[Path]:
    return sorted(
        p for p in root.rglob("*")
        if p.is_file() and p.suffix.lower() in AUDIO_SUFFIXES and not p.name.startswith((".", "._"))
        and not any(part.startswith(".") for part in p.relative_to(root).parts[:-1])
    )


def _found(root: Path) -> str:
    names = sorted(p.name + ("/" if p.is_dir() else "") for p in root.iterdir())
    shown = ", ".join(names[:15]) + (f" ... ({len(names)} entries)" if len(names) > 15 else "")
    return shown or "nothing (the folder is empty)"


# ----------------------------------------------------------------------------- detection
def _kaldi_dirs(source: Path) -> list[Path]:
    candidates = [source] + sorted(source.glob("*/")) + sorted(source.glob("*/*/"))
    return [d for d in candidates if (d / "wav.scp").is_file()]


def _metadata_files(source: Path) -> list[Path]:
    """`metadata.csv/.jsonl/.parquet` in the source and its subfolders; without any, the Parquet files
    of a Hugging Face dataset download (`data/train-00000-of-00001.parquet`, audio embedded)."""
    out = []
    for folder in [source] + sorted(p for p in source.iterdir() if p.is_dir()):
        by_name = {p.name.lower(): p for p in sorted(folder.iterdir()) if p.is_file()}  # `Metadata.CSV` from Windows
        out += [by_name[name] for name in ("metadata.csv", "metadata.jsonl", "metadata.parquet") if name in by_name]
    return out or [path for path in sorted(source.glob("*.parquet")) + sorted(source.glob("*/*.parquet"))
                   if _has_audio_column(path)]


def _has_audio_column(parquet: Path) -> bool:
    """Whether a Parquet file's schema names an audio column (`COLUMN_ALIASES["file"]`)."""
    import pyarrow.parquet as pq

    try:
        names = pq.read_schema(parquet).names
    except Exception:  # noqa: BLE001 - not a readable Parquet file: not a dataset shard
        return False
    return any(norm_header(name) in COLUMN_ALIASES["file"] for name in names)


def _looks_like_ljspeech(source: Path) -> bool:
    metadata = source / "metadata.csv"
    if not metadata.is_file() or not (source / "wavs").is_dir():
        return False
    with open(metadata, encoding="utf-8-sig", errors="replace") as handle:
        first = handle.readline()
    fields = first.rstrip("\r\n").split("|")
    return len(fields) >= 2 and norm_header(fields[0]) not in COLUMN_ALIASES["file"]


def _cv_tsvs(source: Path) -> list[Path]:
    usable = []
    for tsv in sorted(source.glob("*.tsv")):
        if tsv.name in _CV_SKIP_TSVS:
            continue
        with open(tsv, encoding="utf-8-sig", errors="replace") as handle:
            header = [norm_header(h) for h in handle.readline().rstrip("\r\n").split("\t")]
        if "path" in header and "sentence" in header:
            usable.append(tsv)
    splits = [t for t in usable if t.name in _CV_SPLITS]
    if splits:
        return splits
    validated = [t for t in usable if t.name == "validated.tsv"]
    return validated or usable


SPREADSHEET_SUFFIXES = (".xlsx", ".xls", ".xlsm", ".ods", ".numbers")
"""A spreadsheet program's own files: a `metadata` one is named as the reason no metadata was read."""


def detect_format(source: str | Path) -> str:
    """Which of `FORMATS` the folder `source` is in.

    Order: a `.jsonl` or `.json` file, or a `metadata.jsonl` whose rows have `messages` or
    `conversations` -> chat; `wav.scp` (here
    or in a subfolder) -> kaldi; a TSV with `path`+`sentence` -> commonvoice;
    headerless `|` metadata.csv with `wavs/` -> ljspeech; `metadata.csv/.jsonl/.parquet` ->
    audiofolder; any audio files -> folder.

    Raises:
        ImportFormatError: `source` is missing, not a folder, or holds none of these (lists what it holds).
    """
    root = _check_source(source)
    if root.is_file() or is_chat_metadata(root):
        return "chat"
    if _kaldi_dirs(root):
        return "kaldi"
    if _cv_tsvs(root):
        return "commonvoice"
    if _looks_like_ljspeech(root):
        return "ljspeech"
    if _metadata_files(root):
        return "audiofolder"
    spreadsheet = next((p for p in sorted(root.iterdir()) if p.is_file() and p.stem.lower() == "metadata"
                        and p.suffix.lower() in SPREADSHEET_SUFFIXES), None)
    if spreadsheet is not None:
        raise ImportFormatError(f"`{spreadsheet.name}` is a spreadsheet program's own file, which the import does not "
                                "read: save it as CSV named metadata.csv beside it (Excel: File > Save As > 'CSV UTF-8'; "
                                "LibreOffice: 'Text CSV'; Numbers: File > Export To > CSV), then import again.")
    if _audio_files(root):
        return "folder"
    conversations = sorted(p.name for p in root.iterdir() if p.is_file() and p.suffix.lower() in CHAT_SUFFIXES)
    hint = (f" If `{conversations[0]}` holds conversations (chat, LLaMA-Factory, ms-swift, sharegpt), pass that "
            "file itself as the source." if conversations else "")
    raise ImportFormatError(
        f"`{root}` is in no known layout: it has no wav.scp (Kaldi), no Common Voice TSV, no "
        f"metadata.csv/.jsonl/.parquet (audiofolder, LJSpeech) and no audio files. Found: {_found(root)}.{hint}"
    )


CHAT_SUFFIXES = (".jsonl", ".json")
"""A source file with one of these endings is read as chat conversations (`pipeline.data.chat_import`:
JSON Lines, or a JSON array as LLaMA-Factory keeps its datasets)."""


def _check_source(source: str | Path) -> Path:
    root = Path(source).expanduser()
    if not root.exists():
        raise ImportFormatError(f"Source folder `{root}` does not exist; check the path.")
    if not root.is_dir():
        if root.suffix.lower() in CHAT_SUFFIXES:
            return root.resolve()  # chat conversations: JSON Lines or a JSON array
        raise ImportFormatError(
            f"Source `{root}` is a file; pass the folder that holds the recordings and their metadata "
            f"(e.g. `{root.parent}`), or a chat-format `.jsonl` / `.json` file (also LLaMA-Factory, ms-swift, "
            "sharegpt)."
        )
    return root.resolve()


# ----------------------------------------------------------------------------- readers
Items = tuple  # (items for SampleLibrary.add_many, skipped [{file, reason}]), and optionally notes [str]


def _top(root: Path) -> Path:
    """The highest folder searched: `LEVELS_ABOVE_SOURCE` above the source."""
    top = root
    for _ in range(LEVELS_ABOVE_SOURCE):
        top = top.parent
    return top


def _find_scores(data_dir: Path, root: Path) -> Path | None:
    folder = data_dir
    stop = _top(root)
    while True:
        for candidate in (folder / "resource" / "scores.json", folder / "scores.json"):
            if candidate.is_file():
                return candidate
        if folder == stop or folder.parent == folder:
            return None
        folder = folder.parent


def _load_scores(path: Path | None) -> dict[str, Any]:
    if path is None:
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8-sig"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ImportFormatError(
            f"Expert scores `{path}` cannot be read ({error}); fix or remove the file and import again."
        ) from None
    if not isinstance(data, dict):
        raise ImportFormatError(
            f"Expert scores `{path}` hold a {type(data).__name__}; expected an object keyed by utterance id "
            "(speechocean762's resource/scores.json layout)."
        )
    return data


def _kaldi_resolver(data_dir: Path, root: Path) -> PathResolver:
    """Resolves `wav.scp` paths against the data folder, then each folder above it up to `_top(root)`."""
    folders = [data_dir]
    while folders[-1] != _top(root) and folders[-1].parent != folders[-1]:
        folders.append(folders[-1].parent)
    return PathResolver(folders)


def _read_kaldi(root: Path) -> Items:
    from pipeline.conversation.feedback import feedback_from_scores

    dirs = _kaldi_dirs(root)
    if not dirs:
        raise ImportFormatError(f"No Kaldi data folder (with wav.scp) in `{root}`. Found: {_found(root)}.")
    items, skipped = [], []
    for data_dir in dirs:
        if (data_dir / "segments").is_file():
            raise ImportFormatError(
                f"`{rel_path(data_dir / 'segments', root)}` cuts recordings into segments, which this importer "
                "does not do; export one audio file per utterance and import again."
            )
        if not (data_dir / "text").is_file():
            raise ImportFormatError(
                f"Kaldi folder `{data_dir}` has wav.scp but no `text` file (utterance id + sentence per line). "
                f"Found: {_found(data_dir)}."
            )
        wavs = _read_kaldi_table(data_dir / "wav.scp")
        texts = _read_kaldi_table(data_dir / "text")
        utt2spk = _read_kaldi_table(data_dir / "utt2spk") if (data_dir / "utt2spk").is_file() else {}
        scores_path = _find_scores(data_dir, root)
        all_scores = _load_scores(scores_path)
        resolver = _kaldi_resolver(data_dir, root)
        for utt, entry in wavs.items():
            label = f"{rel_path(data_dir, root)}/wav.scp:{utt}".lstrip("./") if data_dir != root else f"wav.scp:{utt}"
            if entry.endswith("|"):
                skipped.append({"file": label, "reason": f"wav.scp entry `{entry}` is a command pipe; "
                                "write the audio to a file and list the file instead."})
                continue
            try:
                path = resolver.resolve(entry)
            except ValueError as error:
                skipped.append({"file": shorten(label, 160), "reason": f"wav.scp entry is not a file name: {error}"})
                continue
            if path is None:
                skipped.append({"file": shorten(label, 160), "reason": f"audio file `{shorten(entry)}` listed in wav.scp was not found "
                                f"(looked relative to `{rel_path(data_dir, root) or '.'}` and the folders above)."})
                continue
            label = rel_path(path, root)
            text = texts.get(utt)
            if not text:
                skipped.append({"file": label, "reason": f"utterance `{utt}` has no line in `text`; add "
                                f"`{utt} <sentence>` to {rel_path(data_dir / 'text', root)}."})
                continue
            scores = all_scores.get(utt)
            feedback = ""
            if isinstance(scores, dict):
                try:
                    feedback = feedback_from_scores(text, scores)
                except PipelineError as error:
                    skipped.append({"file": label, "reason": f"expert scores of `{utt}`: {error}"})
                    continue
            else:
                scores = None
            items.append(dict(
                audio=path, file=label, target_text=text, feedback=feedback, speaker=utt2spk.get(utt),
                scores=scores, source=str(path), sample_id=utt,
            ))
    return items, skipped


def _read_audiofolder(root: Path) -> Items:
    metadata_files = _metadata_files(root)
    if not metadata_files:
        raise ImportFormatError(
            f"No metadata.csv, metadata.jsonl or metadata.parquet in `{root}` or its subfolders. Found: {_found(root)}."
        )
    items, skipped, notes = [], [], []
    for metadata in metadata_files:
        rows, columns, bad = read_table(metadata)
        skipped.extend(bad)
        unread = unread_columns(rows, columns)
        if unread:
            notes.append(f"`{rel_path(metadata, root)}`: the column{'s' if len(unread) > 1 else ''} "
                         f"{in_words([f'`{c}`' for c in unread], limit=8)} {'were' if len(unread) > 1 else 'was'} not "
                         f"read. Feedback is read from a column named feedback, the learner from speaker, the sentence "
                         f"from sentence: rename the column and import again before the clips are in the library.")
        resolver = PathResolver([metadata.parent, root])
        shown = [c.replace("\ufeff", "").strip() for c in columns]
        file_col = pick_column(columns, "file")
        target_col = pick_column(columns, "target_text") or pick_column(columns, "prompt")
        if file_col is None or target_col is None:
            role = "the audio file name" if file_col is None else "the target text"
            expected = COLUMN_ALIASES["file" if file_col is None else "target_text"]
            extra = "" if file_col is None else " (or `prompt` for free speech: the question the learner answered)"
            raise ImportFormatError(
                f"`{rel_path(metadata, root)}` has no column for {role}: expected one of {', '.join(expected)}{extra}; "
                f"columns found: {in_words(shown, limit=20)}. Rename that column in the header row (and delete any "
                "title line above it), then import again."
            )
        where = rel_path(metadata, root)
        for number, row in enumerate(rows, start=2 if metadata.suffix.lower() == ".csv" else 1):
            # One bad row (a value no file system takes as a name, a cell of another type) is skipped
            # with its reason and never stops the rows after it; values are shown shortened.
            if not any(cell_text(value) for value in row.values()):
                continue  # a row with nothing in it: Excel writes ",,," for rows whose cells were only formatted
            try:
                item = metadata_row_item(row, number, metadata, root, resolver, file_col)
            except (ValueError, TypeError, OSError, PipelineError) as error:
                item = {"skip": shorten(str(error) or type(error).__name__, 400)}
            if "skip" in item:
                label = item.get("file") or f"{where}:{number}"
                skipped.append({"file": shorten(label, 160), "reason": item["skip"]})
            else:
                items.append(item)
    return items, skipped, notes


def _read_ljspeech(root: Path) -> Items:
    metadata = root / "metadata.csv"
    if not metadata.is_file():
        raise ImportFormatError(f"LJSpeech layout needs `metadata.csv` in `{root}`. Found: {_found(root)}.")
    items, skipped = [], []
    resolver = PathResolver([root / "wavs", root])
    with open(metadata, encoding="utf-8-sig", newline="") as handle:
        # LJSpeech text contains unbalanced quotes: read with quoting off.
        for number, fields in enumerate(csv.reader(handle, delimiter="|", quoting=csv.QUOTE_NONE), start=1):
            if not fields or not fields[0].strip():
                continue
            clip_id = fields[0].strip()
            if len(fields) < 2:
                skipped.append({"file": f"metadata.csv:{number}", "reason": "expected `id|transcription[|normalized]`"})
                continue
            text = fields[2].strip() if len(fields) > 2 and fields[2].strip() else fields[1].strip()
            try:
                path = resolver.resolve(f"{clip_id}.wav") or root / "wavs" / f"{clip_id}.wav"
                if not path.is_file():
                    matches = sorted((root / "wavs").glob(f"{glob.escape(clip_id)}.*"))
                    path = next((m for m in matches if m.suffix.lower() in AUDIO_SUFFIXES), path)
                found = path.is_file()
            except (ValueError, OSError) as error:
                skipped.append({"file": f"metadata.csv:{number}", "reason": f"the id is not a file name: {error}"})
                continue
            if not found:
                skipped.append({"file": shorten(f"wavs/{clip_id}.wav", 160), "reason": "audio file not found"})
                continue
            items.append(dict(audio=path, file=rel_path(path, root), target_text=text, feedback="",
                              source=str(path), sample_id=clip_id))
    return items, skipped


def _read_commonvoice(root: Path) -> Items:
    import pandas as pd

    tsvs = _cv_tsvs(root)
    if not tsvs:
        raise ImportFormatError(
            f"No Common Voice TSV (with `path` and `sentence` columns) in `{root}`. Found: {_found(root)}."
        )
    clips = root / "clips" if (root / "clips").is_dir() else root
    resolver = PathResolver([clips, root])
    items, skipped, seen = [], [], set()
    for tsv in tsvs:
        try:
            frame = pd.read_csv(tsv, sep="\t", dtype=str, keep_default_na=False, quoting=csv.QUOTE_NONE,
                                encoding="utf-8-sig")
        except UnicodeDecodeError:  # saved again from a spreadsheet program in its code page
            frame = pd.read_csv(io.StringIO(read_spreadsheet_text(tsv)), sep="\t", dtype=str, keep_default_na=False,
                                quoting=csv.QUOTE_NONE)
        frame.columns = [norm_header(c) for c in frame.columns]
        for row in frame.to_dict(orient="records"):
            name = cell_text(row.get("path"))
            if not name or name in seen:
                continue
            seen.add(name)
            try:
                path = resolver.resolve(name)
                if path is None and not Path(name.replace("\\", "/")).suffix:
                    path = resolver.resolve(f"{name}.mp3")
            except ValueError as error:
                skipped.append({"file": f"{tsv.name}: {shorten(name, 60)}", "reason": f"`path` is not a file name: {error}"})
                continue
            if path is None:
                skipped.append({"file": shorten(rel_path(clips / name, root), 160), "reason": f"audio file not found (listed in {tsv.name})"})
                continue
            items.append(dict(
                audio=path, file=rel_path(path, root), target_text=cell_text(row.get("sentence")), feedback="",
                speaker=cell_text(row.get("client_id")) or None, source=str(path), sample_id=path.stem,
            ))
    return items, skipped


def _read_sidecar(path: Path) -> str:
    """A `.txt` beside a clip (its sentence or feedback), as a person's editor saved it: UTF-8 (or UTF-16 with a
    byte-order mark), else the code page its letters read as (`decode_legacy`, as for a CSV: Notepad's "ANSI").

    Raises:
        ImportFormatError: in no readable encoding (the setting that writes UTF-8), or cannot be read.
    """
    try:
        return read_person_text(path, ImportFormatError, name=f"`{path.name}`").strip()
    except ImportFormatError:
        decoded = decode_legacy(path.read_bytes()) if path.is_file() else None
        if decoded is None:
            raise
        return decoded[0].strip()


def _read_folder(root: Path) -> Items:
    files = _audio_files(root)
    if not files:
        raise ImportFormatError(f"No audio files in `{root}`. Found: {_found(root)}.")
    items, skipped = [], []
    resolver = PathResolver([root])
    for path in files:
        label = rel_path(path, root)
        # Sidecars are found whatever their case (`W0.TXT` beside `w0.wav`, as Windows and macOS allow).
        sidecar = resolver.find(path.parent, [path.stem + ".txt"]) or path.with_suffix(".txt")
        if not sidecar.is_file():
            skipped.append({"file": label, "reason": f"no `{sidecar.name}` next to it; create it with the sentence "
                            "that was read."})
            continue
        try:
            text = _read_sidecar(sidecar)
            feedback_file = resolver.find(path.parent, [path.stem + ".feedback.txt"])
            feedback = _read_sidecar(feedback_file) if feedback_file is not None else ""
        except ImportFormatError as error:
            skipped.append({"file": label, "reason": str(error)})
            continue
        parts = path.relative_to(root).parts
        items.append(dict(
            audio=path, file=label, target_text=text, feedback=feedback,
            speaker=parts[0] if len(parts) > 1 else None, source=str(path),
            sample_id=path.relative_to(root).with_suffix("").as_posix(),
        ))
    return items, skipped


_READERS: dict[str, Callable[[Path], Items]] = {
    "chat": read_chat_source,
    "kaldi": _read_kaldi,
    "audiofolder": _read_audiofolder,
    "ljspeech": _read_ljspeech,
    "commonvoice": _read_commonvoice,
    "folder": _read_folder,
}


def _keep_lexicon(workspace: Workspace | str | Path, root: Path) -> None:
    """Add the corpus's `resource/lexicon.txt` (speechocean762; searched like `scores.json`) to the workspace's
    lexicon `WS/scoring/lexicon.txt`, which the classical scorer reads for words outside CMUdict: lines
    it lacks are appended (atomically, under its lock), a teacher's own lines are kept."""
    from pipeline.fileio import atomic_write_text, locked

    found = None
    for data_dir in _kaldi_dirs(root) or [root]:
        scores = _find_scores(data_dir, root)
        if scores is not None and (scores.parent / "lexicon.txt").is_file():
            found = scores.parent / "lexicon.txt"
            break
    if found is None:
        return
    try:
        new = [line.rstrip() for line in found.read_text(encoding="utf-8-sig").splitlines() if line.strip()]
    except (OSError, UnicodeDecodeError):
        return
    ws = workspace if isinstance(workspace, Workspace) else Workspace(Path(workspace))
    ws.scoring_dir.mkdir(parents=True, exist_ok=True)
    with locked(ws.lexicon_path):
        old = ws.lexicon_path.read_text(encoding="utf-8").splitlines() if ws.lexicon_path.is_file() else []
        have = set(old)
        lines = old + [line for line in new if line not in have]
        if len(lines) > len(old):
            atomic_write_text(ws.lexicon_path, "\n".join(lines) + "\n")


TOO_LONG_IMPORT_HINT = "Or import again with `--trim` to keep its first 30 s."
"""Added to the reason of a clip skipped as longer than 30 s (the import's own way to keep it)."""


def _confined(items: list[dict], skipped: list[dict], folder: Path) -> tuple[list[dict], list[dict]]:
    """`items` whose audio file lies inside `folder` (embedded audio always), and the others added to `skipped`."""
    inside = folder.resolve()
    kept = []
    for item in items:
        audio = item.get("audio")
        if isinstance(audio, (str, Path)) and not Path(audio).resolve().is_relative_to(inside):
            skipped.append({"file": str(item.get("file") or audio),
                            "reason": f"it names a file outside the workspace `{folder}`; a shared studio reads "
                                      f"only files inside it: copy the file into the folder you import"})
        else:
            kept.append(item)
    return kept, skipped


def import_folder(
    workspace: Workspace | str | Path,
    source: str | Path,
    format: str = "auto",
    progress: Callable[[int, int], None] | None = None,
    *,
    trim: bool = False,
    confine_to: str | Path | None = None,
) -> ImportReport:
    """Import every clip of the folder `source` into the workspace's sample library.

    Args:
        workspace: the workspace (or its folder) whose library receives the samples.
        source: the folder to import (see the module docstring for the layouts).
        format: one of `FORMATS`, or "auto" (`detect_format`).
        progress: called as `progress(done, total)` while clips are checked and stored.
        trim: keep the first 30 s of longer clips instead of skipping them.
        confine_to: a folder (the workspace of a studio shared beyond this computer) outside which no file is read:
            a row of the metadata naming a file elsewhere (`/abs/path.wav`, `../../x.wav`) is skipped with the
            reason, whether that file exists or not. None: metadata may name files anywhere.

    Returns:
        `ImportReport` with the ids added and `{file, reason}` for every file skipped (missing
        file or text, failed audio check, duplicate audio, ...).

    Raises:
        ImportFormatError: unknown format, missing folder, or metadata in the wrong layout (e.g. a
            missing column; the message lists the columns found). Nothing is changed then.
    """
    from pipeline.data.samples import SampleLibrary

    root = _check_source(source)
    if format == "auto":
        format = detect_format(root)
    if format not in _READERS:
        raise ImportFormatError(f"Unknown import format `{format}`; expected auto or one of {', '.join(FORMATS)}.")
    items, skipped, *notes = _READERS[format](root)  # a reader may add notes about the import as a whole
    if confine_to is not None:
        items, skipped = _confined(items, skipped, Path(confine_to))
    if format == "kaldi":
        _keep_lexicon(workspace, root)
    for item in items:
        item["trim"] = trim
        if not trim:
            item["too_long_hint"] = TOO_LONG_IMPORT_HINT
    library = SampleLibrary(workspace)
    added, failed = library.add_many(items, progress=progress) if items else ([], [])
    if not items and progress is not None:
        progress(0, 0)
    # Every reason is bounded, whoever wrote it: a message never prints a value of unbounded size.
    skipped = [{"file": shorten(str(s["file"]), 200), "reason": shorten(str(s["reason"]), 800)} for s in skipped + failed]
    return ImportReport(source=str(root), format=format, imported=[s.id for s in added], skipped=skipped,
                        rows=[{"id": s.id, "kind": s.kind, "source": s.source or ""} for s in added],
                        notes=list(notes[0]) if notes else [])
