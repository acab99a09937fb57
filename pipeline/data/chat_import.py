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
  (`pipeline.conversation.messages.system_prompt`), so what it learns matches how it is asked in the app.

Other tools' layouts are read too (`normalize_row` turns each into the messages above): the
multimodal layout of LLaMA-Factory and ms-swift (`messages` whose string content holds `<audio>`
placeholders, plus an `audios` list of paths filling them in order), its sharegpt variant
(`conversations` of `from`/`value`, roles `human`/`gpt`/`system`), alpaca (`instruction`, `input`,
`output`, optional `history`) and ms-swift's `query`/`response`/`history`, each with `audios`; and
OpenAI-style audio parts (`{"type": "input_audio", "input_audio": {"data": BASE64, "format": "wav"}}`,
the audio embedded). A file may be JSON Lines (`.jsonl`, or `.json` holding one object per line) or
one JSON array of such objects (`.json`, as LLaMA-Factory keeps its datasets). A line in a layout
that is not imported (text only, images, another tool's keys) is skipped with the layout named and
how to convert it.

Every clip goes through the sample library's checks; a dialogue with one bad clip is skipped whole,
naming the clip. This module only reads the file; `pipeline.data.importers.import_folder` stores.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from pathlib import Path
from typing import Any

from pipeline.errors import ImportFormatError, shorten
from pipeline.fileio import jsonl_lines, read_person_text
from pipeline.units import plural

_READ_ALOUD = re.compile(r'^The learner was asked to read: "(?P<text>.*)"$', re.S)
_FREE_SPEECH = re.compile(r'^The learner was asked: "(?P<text>.*)"$', re.S)
ROLES = ("user", "assistant", "system")
AUDIO_PLACEHOLDER = "<audio>"
"""Where a clip of the row's `audios` list goes in a message's text (LLaMA-Factory's and ms-swift's tag)."""
_OTHER_MEDIA = ("images", "videos")
_ROLE_NAMES = {"user": "user", "human": "user", "assistant": "assistant", "gpt": "assistant", "model": "assistant",
               "bot": "assistant", "system": "system", "developer": "system"}
"""Role names of the chat layouts read here (OpenAI, sharegpt's `from`, Gemma's `model`) -> ours."""
CONVERT_HINT = ('Write each line as {"messages": [{"role": "user", "content": "<audio>..."}, {"role": "assistant", '
                '"content": "..."}], "audios": ["clip.wav"]} (LLaMA-Factory/ms-swift) or in the chat format of the '
                "README (audio parts with a `path`).")
"""How to convert a layout that is not imported: the two layouts that are."""


def _input_audio(part: dict, where: str) -> dict:
    """An OpenAI `input_audio` part -> an audio part holding the decoded bytes (`data`) and a `name`."""
    spec = part.get("input_audio")
    data = spec.get("data") if isinstance(spec, dict) else None
    if not isinstance(data, str) or not data.strip():
        raise ValueError(f"{where} has an `input_audio` part without base64 `data`; expected "
                         '{"type": "input_audio", "input_audio": {"data": BASE64, "format": "wav"}}')
    try:
        decoded = base64.b64decode(data.split(",", 1)[-1] if data.startswith("data:") else data, validate=False)
    except (binascii.Error, ValueError):
        raise ValueError(f"{where}: the `input_audio` data is not base64 ({shorten(data)})") from None
    fmt = str(spec.get("format") or "audio")
    return {"type": "audio", "data": decoded, "name": f"{where} input_audio.{shorten(fmt, 10)}"}


def _parts(message: dict, where: str) -> list[dict]:
    content = message.get("content")
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if not isinstance(content, list):
        raise ValueError(f"{where} has `content` of type {type(content).__name__}; expected a list of parts or a string")
    parts = []
    for part in content:
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "input_audio":
            parts.append(_input_audio(part, where))
        elif kind in ("audio", "text"):
            parts.append(part)
        elif isinstance(kind, str) and kind.startswith(("image", "video")):
            raise ValueError(f"{where} holds a `{shorten(kind, 20)}` part: this file is for an image or video model, "
                             "and the tutor listens to recordings. " + CONVERT_HINT)
        else:
            raise ValueError(f"{where} has a part {shorten(part)}; expected {{\"type\": \"audio\", \"path\": ...}}, "
                             "{\"type\": \"input_audio\", ...} or {\"type\": \"text\", \"text\": ...}")
    return parts


def _audio_path(part: dict, base: Path, where: str) -> Path | bytes:
    """The file an audio part names (resolved against `base`), or the bytes it embeds."""
    if isinstance(part.get("data"), bytes):
        return part["data"]
    value = part.get("path") or part.get("audio") or part.get("url")
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{where} has an audio part without a `path` (relative to the .jsonl file)")
    if re.match(r"^[a-z][a-z0-9+.-]*://", value.strip(), re.I) and not value.strip().lower().startswith("file:"):
        raise ValueError(f"{where}: audio `{shorten(value)}` is a web address; download the file next to the "
                         "JSON file and name it by its path")
    from pipeline.data.paths import PathResolver

    path = PathResolver([base]).resolve(value.strip())  # Windows separators, case, another machine's paths
    if path is None:
        raise ValueError(f"{where}: audio file `{shorten(value)}` not found (paths are relative to the JSON file's "
                         "folder)")
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
            turns.append({"role": "learner", "audio": path, "file": part.get("name") if isinstance(path, bytes) else path.name,
                          "text": text if index == len(clips) - 1 else None,
                          "transcript": part.get("transcript")})
        if not clips:
            turns.append({"role": "learner", "text": text})
    return turns


def _unwrap(text: str, pattern: re.Pattern) -> str | None:
    match = pattern.match(text.strip())
    return match.group("text").strip() if match else None


def _text_of(value: Any, where: str) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise ValueError(f"{where} is a {type(value).__name__}; expected text")
    return value


def _pairs(history: Any, where: str) -> list[tuple[str, str]]:
    """alpaca / ms-swift `history`: [[query, response], ...] -> pairs of texts."""
    if history is None:
        return []
    if not isinstance(history, list) or not all(isinstance(p, (list, tuple)) and len(p) == 2 for p in history):
        raise ValueError(f"`{where}` is {shorten(history)}; expected a list of [query, response] pairs")
    return [(_text_of(q, where), _text_of(r, where)) for q, r in history]


def _layout_messages(row: dict) -> tuple[str, list[dict]]:
    """The layout a row is in and its messages as role + content (a string or a list of parts)."""
    if "messages" in row:
        messages = row["messages"]
        if not isinstance(messages, list) or not messages:
            raise ValueError(f"`messages` is {shorten(messages)}; expected a list of {{role, content}} messages")
        return ("chat" if "audios" not in row else "LLaMA-Factory/ms-swift messages"), messages
    if "conversations" in row:  # sharegpt (LLaMA-Factory's `formatting: sharegpt`)
        conversation = row["conversations"]
        if not isinstance(conversation, list) or not conversation:
            raise ValueError(f"`conversations` is {shorten(conversation)}; expected a list of {{from, value}} messages")
        messages = [{"role": "system", "content": _text_of(row.get("system"), "`system`")}] if row.get("system") else []
        for number, turn in enumerate(conversation, start=1):
            if not isinstance(turn, dict) or "from" not in turn:
                raise ValueError(f"sharegpt `conversations` item {number} is {shorten(turn)}; expected {{\"from\": "
                                 "\"human\", \"value\": ...}}")
            role = _ROLE_NAMES.get(str(turn["from"]).lower())
            if role is None:
                raise ValueError(f"sharegpt `conversations` item {number} is from `{shorten(turn['from'], 30)}`; only "
                                 "human, gpt and system turns are imported (tool calls and observations are not). "
                                 + CONVERT_HINT)
            messages.append({"role": role, "content": turn.get("value")})
        return "sharegpt", messages
    for layout, query, response in (("alpaca", "instruction", "output"), ("ms-swift query/response", "query", "response")):
        if query in row and response in row:
            messages = [{"role": "system", "content": _text_of(row.get("system"), "`system`")}] if row.get("system") else []
            for past_query, past_response in _pairs(row.get("history"), "history"):
                messages += [{"role": "user", "content": past_query}, {"role": "assistant", "content": past_response}]
            text = _text_of(row[query], f"`{query}`")
            if layout == "alpaca" and str(row.get("input") or "").strip():
                text = f"{text}\n{_text_of(row['input'], '`input`')}"
            messages += [{"role": "user", "content": text}, {"role": "assistant", "content": _text_of(row[response], f"`{response}`")}]
            return layout, messages
    keys = ", ".join(f"`{shorten(k, 30)}`" for k in list(row)[:8])
    named = next((name for test, name in (
        (lambda r: "prompt" in r and ("completion" in r or "chosen" in r), "the TRL prompt/completion (or preference) layout"),
        (lambda r: "text" in r and len(r) <= 2, "plain text for language-model training"),
        (lambda r: "input" in r and "output" in r, "an input/output text layout"),
    ) if test(row)), None)
    what = f"is in {named}, text only" if named else "is in no chat layout this app reads"
    raise ValueError(f"this line {what} (keys {keys}); expected `messages` (chat, LLaMA-Factory, ms-swift), "
                     "`conversations` (sharegpt), `instruction`/`output` (alpaca) or `query`/`response` (ms-swift), "
                     "with the learner's recordings. " + CONVERT_HINT)


def _fill_placeholders(messages: list[dict], audios: list, layout: str) -> list[dict]:
    """Messages whose string content holds `<audio>` tags -> content parts, the tags filled from
    `audios` in order (LLaMA-Factory's `mm_plugin` and ms-swift do the same)."""
    tags = sum(str(m.get("content")).count(AUDIO_PLACEHOLDER) for m in messages
               if isinstance(m, dict) and isinstance(m.get("content"), str))
    users = [m for m in messages if isinstance(m, dict) and _ROLE_NAMES.get(str(m.get("role")).lower()) == "user"]
    if tags == 0 and audios and len(users) == 1 and isinstance(users[0].get("content"), str):
        # One user message and no tag: its clips come first (ms-swift's reading of an untagged row).
        messages = [dict(m, content=AUDIO_PLACEHOLDER * len(audios) + m["content"]) if m is users[0] else m
                    for m in messages]
        tags = len(audios)
    if tags != len(audios):
        raise ValueError(f"this {layout} line has {plural(tags, f'`{AUDIO_PLACEHOLDER}` placeholder')} but {plural(len(audios), 'path')} "
                         f"in `audios`; each `{AUDIO_PLACEHOLDER}` in a message takes the next path of `audios`, so the "
                         "two counts must match")
    remaining = list(audios)
    out = []
    for message in messages:
        content = message.get("content") if isinstance(message, dict) else None
        if not isinstance(content, str) or AUDIO_PLACEHOLDER not in content:
            out.append(message)
            continue
        parts: list[dict] = []
        for index, piece in enumerate(content.split(AUDIO_PLACEHOLDER)):
            if index:
                value = remaining.pop(0)
                if isinstance(value, dict):
                    value = value.get("path") or value.get("audio")
                if not isinstance(value, str):
                    raise ValueError(f"`audios` holds {shorten(value)}; expected a file path")
                parts.append({"type": "audio", "path": value})
            if piece.strip():
                parts.append({"type": "text", "text": piece.strip()})
        out.append(dict(message, content=parts))
    return out


def normalize_row(row: dict) -> list[dict]:
    """Messages in this module's chat format (roles user/assistant/system, content parts) from a row
    in any layout read here (see the module docstring).

    Raises:
        ValueError: the row is in another layout (named, with how to convert it), holds images or
            video instead of audio, or its `<audio>` placeholders and `audios` paths do not match.
    """
    media = [key for key in _OTHER_MEDIA if row.get(key)]
    if media:
        raise ValueError(f"this line holds {' and '.join(f'`{k}`' for k in media)} (image or video training data), "
                         "not the learner's recording the tutor listens to. " + CONVERT_HINT)
    layout, messages = _layout_messages(row)
    audios = row.get("audios")
    if audios is not None and not isinstance(audios, list):
        raise ValueError(f"`audios` is {shorten(audios)}; expected a list of paths")
    normalized = []
    for number, message in enumerate(messages, start=1):
        role = _ROLE_NAMES.get(str(message.get("role")).lower()) if isinstance(message, dict) else None
        if role is None:
            shown = message.get("role") if isinstance(message, dict) else message
            raise ValueError(f"message {number} has role {shorten(shown, 40)!r}; expected one of {', '.join(ROLES)}")
        normalized.append(dict(message, role=role))
    if audios is not None or any(isinstance(m, dict) and isinstance(m.get("content"), str) and AUDIO_PLACEHOLDER in m["content"]
                                 for m in normalized):
        normalized = _fill_placeholders(normalized, list(audios or []), layout)
    has_audio = any(isinstance(m, dict) and isinstance(m.get("content"), list)
                    and any(isinstance(p, dict) and p.get("type") in ("audio", "input_audio") for p in m["content"])
                    for m in normalized)
    if not has_audio:
        shown = "chat `messages` (OpenAI style)" if layout == "chat" else layout
        raise ValueError(f"this {shown} line is text only (no audio part, no `audios` list and no "
                         f"`{AUDIO_PLACEHOLDER}`): the tutor needs the learner's recording. Add `\"audios\": "
                         f"[\"clip.wav\"]` and put `{AUDIO_PLACEHOLDER}` in the user message where the learner speaks, "
                         'or give the user message an audio part {"type": "audio", "path": "clip.wav"}.')
    return normalized


def row_to_item(row: dict, base: Path, label: str) -> dict[str, Any]:
    """One JSONL object -> an item for `SampleLibrary.add_many`. Raises `ValueError` with the reason
    (the caller reports the line as skipped)."""
    from pipeline.conversation.messages import check_kind
    from pipeline.errors import DatasetError

    messages = normalize_row(row)
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
                         f"{plural(user_messages, 'user message')}, {plural(len(clips), 'clip')} and {plural(len(tutor), 'answer')} "
                         "(use kind dialogue)")
    text = (clips[0].get("text") or "").strip()
    feedback = tutor[0]["text"] if tutor else ""
    item = dict(common, kind=kind, audio=clips[0]["audio"], feedback=feedback, transcript=clips[0].get("transcript"),
                file=f"{label} ({clips[0]['file']})")
    if kind == "read_aloud":
        return dict(item, target_text=_unwrap(text, _READ_ALOUD) or text)
    return dict(item, prompt=_unwrap(text, _FREE_SPEECH) or text)


def read_chat(path: Path, root: Path) -> tuple[list[dict[str, Any]], list[dict[str, str]]]:
    """Items (for `SampleLibrary.add_many`) and skipped lines (`{file, reason}`) of a chat file: JSON
    Lines, or a JSON array of conversations (`_rows`), in any layout `normalize_row` reads.

    Args:
        path: the `.jsonl` / `.json` file; audio paths in it are relative to its folder.
        root: the folder labels are written relative to.

    Raises:
        ImportFormatError: the file cannot be read as UTF-8 text.
    """
    items: list[dict[str, Any]] = []
    skipped: list[dict[str, str]] = []
    text = read_person_text(path, ImportFormatError, name=f"`{path}`", kind="JSON Lines")
    name = path.relative_to(root).as_posix() if path.is_relative_to(root) else path.name
    for number, row in _rows(text, path):
        label = f"{name}:{number}"
        try:
            if isinstance(row, json.JSONDecodeError):
                raise row
            if not isinstance(row, dict):
                raise ValueError(f"the {'item' if text.lstrip().startswith('[') else 'line'} is not a JSON object")
            items.append(row_to_item(row, path.parent, label))
        except json.JSONDecodeError as error:
            skipped.append({"file": label, "reason": f"not valid JSON ({error})"})
        except ValueError as error:
            skipped.append({"file": label, "reason": shorten(str(error), 600)})
    if not items and not skipped:
        raise ImportFormatError(f"`{path}` has no lines; expected one chat conversation (`messages`) per line.")
    return items, skipped


def _rows(text: str, path: Path) -> list[tuple[int, Any]]:
    """(number, parsed value or its `JSONDecodeError`) per conversation: the items of a JSON array
    (a `.json` file as LLaMA-Factory keeps its datasets), else the lines of JSON Lines (split on "\n"
    only: `pipeline.fileio.jsonl_lines`)."""
    if text.lstrip().startswith("["):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as error:
            raise ImportFormatError(f"`{path}` starts as a JSON array but is not valid JSON ({error}); fix the file "
                                    "and import again.") from None
        return list(enumerate(data, start=1))
    if path.suffix.lower() == ".json" and text.lstrip().startswith("{"):
        try:  # one conversation written over several lines (a pretty-printed object)
            return [(1, json.loads(text))]
        except json.JSONDecodeError:
            pass  # JSON Lines under a .json name
    rows = []
    for number, line in jsonl_lines(text):
        try:
            rows.append((number, json.loads(line)))
        except json.JSONDecodeError as error:
            rows.append((number, error))
    return rows


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
    return isinstance(row, dict) and any(key in row for key in CHAT_KEYS)


CHAT_KEYS = ("messages", "conversations")
"""A `metadata.jsonl` whose first row has one of these keys is read as chat conversations."""


def read_chat_source(root: Path) -> tuple[list[dict[str, Any]], list[dict[str, str]]]:
    """`read_chat` of an import source: a `.jsonl` file, or a folder's chat-format `metadata.jsonl`."""
    return read_chat(root if root.is_file() else root / "metadata.jsonl", root if root.is_dir() else root.parent)
