"""Chat-format JSON Lines -> sample library items (read-aloud, free speech, tutoring dialogues).

The format is the one transformers' processors take in `apply_chat_template`, one conversation per
line:

    {"messages": [
        {"role": "system", "content": [{"type": "text", "text": "..."}]},
        {"role": "user", "content": [{"type": "audio", "path": "clips/a.wav"}, {"type": "text", "text": "..."}]},
        {"role": "assistant", "content": [{"type": "text", "text": "..."}]}],
     "speaker": "kate", "kind": "dialogue", "id": "kate-holiday"}

`content` may also be a plain string (text only). Audio paths are relative to the JSONL file (or
absolute); an audio part may carry a `transcript`. Optional per line: `speaker`, `kind`
(`read_aloud`, `free_speech`, `dialogue`), `id`.

How a line becomes a sample (the kind is inferred when the line names none):
- user messages become learner turns (one per audio part; the text parts go with the message's
  last clip, or make a typed turn), assistant messages become tutor turns;
- one user message with one clip, a text and at most one answer is a single-clip sample:
  `read_aloud` when the text is this product's read-aloud prompt (`The learner was asked to read:
  "..."`, as the dataset exports write it), else `free_speech` with the text as the prompt (this
  product's `The learner was asked: "..."` is unwrapped); every other line (several clips or
  answers, or a lone clip without a prompt) is a `dialogue`;
- `system` messages are not kept: the tutor is trained and asked with one instruction per kind
  (`pipeline.conversation.system_prompt`), so what it learns matches how it is asked in the app.

Every clip goes through the sample library's checks; a dialogue with one bad clip is skipped whole,
naming the clip. This module only reads the file; `pipeline.data.importers.import_folder` stores.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from pipeline.errors import ImportFormatError
from pipeline.fileio import read_text, where_not_utf8

_READ_ALOUD = re.compile(r'^The learner was asked to read: "(?P<text>.*)"$', re.S)
_FREE_SPEECH = re.compile(r'^The learner was asked: "(?P<text>.*)"$', re.S)
ROLES = ("user", "assistant", "system")


def _parts(message: dict, where: str) -> list[dict]:
    content = message.get("content")
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if not isinstance(content, list):
        raise ValueError(f"{where} has `content` of type {type(content).__name__}; expected a list of parts or a string")
    for part in content:
        if not isinstance(part, dict) or part.get("type") not in ("audio", "text"):
            raise ValueError(f"{where} has a part {part!r:.80}; expected {{\"type\": \"audio\", \"path\": ...}} "
                             "or {\"type\": \"text\", \"text\": ...}")
    return content


def _audio_path(part: dict, base: Path, where: str) -> Path:
    value = part.get("path") or part.get("audio") or part.get("url")
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{where} has an audio part without a `path` (relative to the .jsonl file)")
    from pipeline.data.paths import PathResolver

    path = PathResolver([base]).resolve(value.strip())  # Windows separators, case, another machine's paths
    if path is None:
        raise ValueError(f"{where}: audio file `{value}` not found (paths are relative to the .jsonl file's folder)")
    return path


def _turns(messages: list, base: Path) -> list[dict]:
    """Learner and tutor turns of a conversation (`SampleLibrary.add` dialogue turns, audio as paths)."""
    turns: list[dict] = []
    for number, message in enumerate(messages, start=1):
        where = f"message {number}"
        if not isinstance(message, dict) or message.get("role") not in ROLES:
            role = message.get("role") if isinstance(message, dict) else message
            raise ValueError(f"{where} has role {role!r:.40}; expected one of {', '.join(ROLES)}")
        parts = _parts(message, where)
        text = "\n".join(str(p.get("text") or "").strip() for p in parts if p["type"] == "text").strip()
        if message["role"] == "system":
            continue
        if message["role"] == "assistant":
            if any(p["type"] == "audio" for p in parts):
                raise ValueError(f"{where}: an assistant (tutor) message holds audio; the tutor answers in text")
            turns.append({"role": "tutor", "text": text})
            continue
        clips = [p for p in parts if p["type"] == "audio"]
        for index, part in enumerate(clips):
            path = _audio_path(part, base, where)
            turns.append({"role": "learner", "audio": path, "file": path.name,
                          "text": text if index == len(clips) - 1 else None,
                          "transcript": part.get("transcript")})
        if not clips:
            turns.append({"role": "learner", "text": text})
    return turns


def _unwrap(text: str, pattern: re.Pattern) -> str | None:
    match = pattern.match(text.strip())
    return match.group("text").strip() if match else None


def row_to_item(row: dict, base: Path, label: str) -> dict[str, Any]:
    """One JSONL object -> an item for `SampleLibrary.add_many`. Raises `ValueError` with the reason
    (the caller reports the line as skipped)."""
    from pipeline.conversation import check_kind
    from pipeline.errors import DatasetError

    messages = row.get("messages")
    if not isinstance(messages, list) or not messages:
        raise ValueError("no `messages` list (the chat format: role + content parts per message)")
    try:
        kind = check_kind(row["kind"]) if row.get("kind") else None
    except DatasetError as error:
        raise ValueError(str(error)) from None
    turns = _turns(messages, base)
    learner = [t for t in turns if t["role"] == "learner"]
    tutor = [t for t in turns if t["role"] == "tutor"]
    clips = [t for t in learner if t.get("audio") is not None]
    user_messages = sum(1 for m in messages if m.get("role") == "user")
    common = dict(file=label, speaker=str(row["speaker"]).strip() if row.get("speaker") else None,
                  sample_id=str(row["id"]) if row.get("id") else None, source=label)
    single = user_messages == 1 and len(clips) == 1 and len(tutor) <= 1 and (not tutor or turns[-1]["role"] == "tutor")
    if kind is None:
        said = (clips[0].get("text") or "").strip() if single else ""
        kind = "dialogue" if not said else (
            "read_aloud" if _unwrap(said, _READ_ALOUD) is not None else "free_speech")
    if kind == "dialogue":
        return dict(common, kind=kind, turns=turns)
    if not single:
        raise ValueError(f"`kind` {kind} needs one user message with one clip and at most one answer; this line has "
                         f"{user_messages} user message(s), {len(clips)} clip(s) and {len(tutor)} answer(s) "
                         "(use kind dialogue)")
    text = (clips[0].get("text") or "").strip()
    feedback = tutor[0]["text"] if tutor else ""
    item = dict(common, kind=kind, audio=clips[0]["audio"], feedback=feedback, transcript=clips[0].get("transcript"),
                file=f"{label} ({clips[0]['file']})")
    if kind == "read_aloud":
        return dict(item, target_text=_unwrap(text, _READ_ALOUD) or text)
    return dict(item, prompt=_unwrap(text, _FREE_SPEECH) or text)


def read_chat(path: Path, root: Path) -> tuple[list[dict[str, Any]], list[dict[str, str]]]:
    """Items (for `SampleLibrary.add_many`) and skipped lines (`{file, reason}`) of a chat JSONL file.

    Args:
        path: the `.jsonl` file; audio paths in it are relative to its folder.
        root: the folder labels are written relative to.

    Raises:
        ImportFormatError: the file cannot be read as UTF-8 text.
    """
    items: list[dict[str, Any]] = []
    skipped: list[dict[str, str]] = []
    try:
        lines = read_text(path).splitlines()
    except UnicodeDecodeError as error:
        raise ImportFormatError(f"`{path}` is not UTF-8 JSON Lines (from {where_not_utf8(path, error)}); "
                                "save it as UTF-8 and import again.") from None
    except OSError as error:
        raise ImportFormatError(f"`{path}` cannot be read ({error.strerror or error}); check the file.") from None
    name = path.relative_to(root).as_posix() if path.is_relative_to(root) else path.name
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        label = f"{name}:{number}"
        try:
            row = json.loads(line)
            if not isinstance(row, dict):
                raise ValueError("the line is not a JSON object")
            items.append(row_to_item(row, path.parent, label))
        except json.JSONDecodeError as error:
            skipped.append({"file": label, "reason": f"not valid JSON ({error})"})
        except ValueError as error:
            skipped.append({"file": label, "reason": str(error)})
    if not items and not skipped:
        raise ImportFormatError(f"`{path}` has no lines; expected one chat conversation (`messages`) per line.")
    return items, skipped


def is_chat_metadata(root: Path) -> bool:
    """Whether `root/metadata.jsonl` is in the chat format (its first row has `messages`)."""
    path = root / "metadata.jsonl"
    if not path.is_file():
        return False
    with open(path, encoding="utf-8-sig", errors="replace") as handle:
        first = next((line for line in handle if line.strip()), "")
    try:
        row = json.loads(first)
    except json.JSONDecodeError:
        return False
    return isinstance(row, dict) and "messages" in row


def read_chat_source(root: Path) -> tuple[list[dict[str, Any]], list[dict[str, str]]]:
    """`read_chat` of an import source: a `.jsonl` file, or a folder's chat-format `metadata.jsonl`."""
    return read_chat(root if root.is_file() else root / "metadata.jsonl", root if root.is_dir() else root.parent)
