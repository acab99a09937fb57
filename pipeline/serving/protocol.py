"""The OpenAI chat-completions wire format, both ways: a request body -> `TutorRequest`, an answer ->
the response body, a refusal -> OpenAI's error body. Pure Python (no web framework, no torch).

A request is an OpenAI `POST /v1/chat/completions` body. What this tutor reads of it:

- `model`: the served name (a run, or `base`); `max_tokens` / `max_completion_tokens`: the longest
  answer (default `DEFAULT_MAX_NEW_TOKENS`, at most `MAX_TOKENS_LIMIT`); `stream` must be false and
  `n` 1. Decoding is greedy, as `python -m pipeline evaluate` judges the tutor: `temperature`,
  `top_p`, `seed` and the other sampling fields are accepted and ignored.
- `kind` (an extra top-level field; with the `openai` package `extra_body={"kind": ...}`): which of
  the three questions the tutor was trained on (`pipeline.conversation.messages.KINDS`) is asked:
  * `read_aloud` (the default when no message is the assistant's): one user message with one
    `input_audio` part (the learner reading) and text parts holding the sentence they were asked
    to read;
  * `free_speech`: the same shape, the text being the question the learner answered
    (e.g. "Describe your last holiday.");
  * `dialogue` (the default when an `assistant` message is present): the conversation so far, user
    messages being the learner's turns (each `input_audio` part a clip, text parts what they typed)
    and assistant messages the tutor's earlier turns, ending with a user message; at least one clip.
- `system` / `developer` messages are dropped: the tutor is asked exactly as it was trained, with
  its kind's own instruction (`pipeline.conversation.messages`), whatever a client sends.
- `input_audio` parts are `{"type": "input_audio", "input_audio": {"data": BASE64, "format": "wav"}}`
  (a `data:audio/...;base64,` prefix is tolerated); the bytes are decoded and checked by
  `pipeline.data.audio.load_audio` (any format it reads, 0.3-30 s, not silent, not clipped).

It deliberately does not stream, call tools, or take images: a request asking for them is refused
with the reason.

Errors follow OpenAI's shape, `{"error": {"message", "type", "param", "code"}}`, with the HTTP
status in `ApiError.status` (400 bad request, 401 bad key, 404 unknown model, 413 too large, 429 queue
full); see `ApiError`.
"""

from __future__ import annotations

import base64
import binascii
import re
import shlex
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from pipeline.conversation.messages import KINDS, LEARNER, TUTOR
from pipeline.errors import PipelineError
from pipeline.tutor.infer import DEFAULT_MAX_NEW_TOKENS

MAX_TOKENS_LIMIT = 1024
"""Longest answer a request may ask for, in tokens (the feedback template is ~40-120 tokens)."""
AUDIO_FORMATS = frozenset({"wav", "mp3", "flac", "ogg", "oga", "opus", "m4a", "aac", "mp4", "webm", "weba"})
"""`input_audio.format` values accepted (what `pipeline.data.audio.load_audio` decodes; it reads the
bytes themselves, so the name is only checked for sense)."""
IGNORED_ROLES = ("system", "developer")
"""Messages dropped: each kind is asked with its own trained instruction."""
_DATA_URL = re.compile(r"^data:[\w/.+-]*;base64,", re.I)


class ApiError(PipelineError):
    """A refused request: `status` (HTTP), OpenAI's `type`, the `param` at fault (a JSON path such as
    `messages[1].content[0].input_audio.data`, or None) and a machine-readable `code`; the message
    names the value, what was expected and the fix.

    Types and statuses used: `invalid_request_error` (400, 404 `model_not_found`, 413
    `request_too_large`), `authentication_error` (401 `invalid_api_key`), `rate_limit_error` (429
    `queue_full`), `server_error` (500, and 503 `shutting_down` while the server stops).
    """

    def __init__(self, message: str, *, status: int = 400, type: str = "invalid_request_error",
                 param: str | None = None, code: str | None = None):
        super().__init__(message)
        self.status = int(status)
        self.type = type
        self.param = param
        self.code = code

    def body(self) -> dict[str, Any]:
        """`{"error": {"message", "type", "param", "code"}}` as OpenAI sends it."""
        return error_body(str(self), type=self.type, param=self.param, code=self.code)


def error_body(message: str, *, type: str = "invalid_request_error", param: str | None = None,
               code: str | None = None) -> dict[str, Any]:
    """OpenAI's error body: `{"error": {"message", "type", "param", "code"}}`."""
    return {"error": {"message": message, "type": type, "param": param, "code": code}}


@dataclass
class TutorRequest:
    """One question for the tutor, parsed from a chat-completions body.

    `kind`: one of `pipeline.conversation.messages.KINDS`. `text`: the target sentence (read_aloud) or the
    prompt (free_speech); None for a dialogue. `clips`: the decoded clips, in order
    (`pipeline.data.audio.Audio`, 16 kHz mono float32). `turns`: for a dialogue, the turns as
    `Tutor.dialogue_reply` takes them, `{"role": "learner", "clip": index into clips, "text": str?}`
    or `{"role": "tutor", "text": str}`. `max_new_tokens`: the longest answer in tokens.
    """

    model: str
    kind: str
    clips: list[Any]
    text: str | None = None
    turns: list[dict] = field(default_factory=list)
    max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS

    def dialogue_turns(self) -> list[dict]:
        """The turns with each clip index replaced by its `Audio` (what `Tutor.dialogue_reply` takes)."""
        return [{**{k: v for k, v in turn.items() if k != "clip"}, "audio": self.clips[turn["clip"]]}
                if "clip" in turn else dict(turn) for turn in self.turns]

    @property
    def audio_seconds(self) -> float:
        """Total length of the clips, in seconds."""
        return sum(clip.duration_s for clip in self.clips)


def _require(condition: bool, message: str, param: str | None, code: str = "invalid_value") -> None:
    if not condition:
        raise ApiError(message, param=param, code=code)


def check_model(body: Any, served: list[str]) -> str:
    """The `model` of a request body, checked against the `served` names.

    Raises `ApiError` 400 when the body is not a JSON object or `model` is missing, 404
    `model_not_found` when no served model has that name (the message lists them).
    """
    _require(isinstance(body, dict), "The request body must be a JSON object (a chat-completions request).", None)
    model = body.get("model")
    _require(isinstance(model, str) and model.strip() != "",
             "`model` is missing: name the run to ask (GET /v1/models lists them), e.g. \"model\": \"base\".",
             "model", "missing_required_parameter")
    if model not in served:
        shown = model if len(model) <= 80 else model[:80] + "..."
        raise ApiError(f"The model `{shown}` is not served here; this server serves {', '.join(served)} "
                       "(GET /v1/models lists them). Use one of those names, or serve that run too "
                       f"(`python -m pipeline serve ... --run {shlex.quote(shown)}`).",
                       status=404, param="model", code="model_not_found")
    return model


def _max_tokens(body: dict) -> int:
    for name in ("max_completion_tokens", "max_tokens"):
        value = body.get(name)
        if value is None:
            continue
        _require(isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= MAX_TOKENS_LIMIT,
                 f"`{name}` must be a whole number from 1 to {MAX_TOKENS_LIMIT}, got {value!r}; the tutor's "
                 "feedback takes 40-120 tokens.", name)
        return value
    return DEFAULT_MAX_NEW_TOKENS


def _decode_audio(part: dict, where: str) -> Any:
    """The `Audio` of one `input_audio` part; `ApiError` naming `where` when it is missing, not
    base64, or fails `load_audio`'s checks (too short/long, silent, clipped, not audio)."""
    from pipeline.data.audio import load_audio
    from pipeline.errors import AudioError, ClipTooLongError

    inner = part.get("input_audio")
    _require(isinstance(inner, dict), f"`{where}.input_audio` must be an object "
             '{"data": BASE64, "format": "wav"}.', f"{where}.input_audio")
    data, fmt = inner.get("data"), inner.get("format")
    _require(isinstance(data, str) and data.strip() != "",
             f"`{where}.input_audio.data` is empty: put the recording there, base64-encoded.",
             f"{where}.input_audio.data", "missing_audio")
    if fmt is not None:
        _require(isinstance(fmt, str) and fmt.lower() in AUDIO_FORMATS,
                 f"`{where}.input_audio.format` is {fmt!r}; expected one of {', '.join(sorted(AUDIO_FORMATS))}.",
                 f"{where}.input_audio.format")
    try:
        raw = base64.b64decode(_DATA_URL.sub("", data.strip()), validate=True)
    except (binascii.Error, ValueError):
        raise ApiError(f"`{where}.input_audio.data` is not valid base64; encode the audio file's bytes "
                       "with base64 (Python: base64.b64encode(open(path, 'rb').read()).decode()).",
                       param=f"{where}.input_audio.data", code="invalid_base64") from None
    try:
        return load_audio(raw, name=f"The audio of {where}")
    except ClipTooLongError as error:
        raise ApiError(f"{error} This API does not trim: send at most 30 s per clip.",
                       param=f"{where}.input_audio.data", code="audio_too_long") from None
    except AudioError as error:
        raise ApiError(str(error), param=f"{where}.input_audio.data", code="invalid_audio") from None


def _read_content(content: Any, where: str, role: str) -> list[tuple[str, Any, str]]:
    """A message's parts as `("text", str, path)` / `("audio", part dict, path)`."""
    if isinstance(content, str):
        return [("text", content, f"{where}.content")]
    _require(isinstance(content, list) and content != [],
             f"`{where}.content` must be a string or a list of parts, got {type(content).__name__ if content is not None else 'null'}.",
             f"{where}.content")
    parts = []
    for j, part in enumerate(content):
        path = f"{where}.content[{j}]"
        _require(isinstance(part, dict), f"`{path}` must be an object with a `type`.", path)
        kind = part.get("type")
        if kind == "text":
            _require(isinstance(part.get("text"), str), f"`{path}.text` must be a string.", f"{path}.text")
            parts.append(("text", part["text"], path))
        elif kind == "input_audio" and role == "user":
            parts.append(("audio", part, path))
        elif kind == "input_audio":
            raise ApiError(f"`{path}` is audio in an {role} message; only the learner's (user) messages hold "
                           "recordings, the tutor's (assistant) turns are text.", param=path)
        else:
            raise ApiError(f"`{path}` has type {kind!r}; this tutor takes `input_audio` (the learner's recording) "
                           "and `text` parts only.", param=f"{path}.type", code="unsupported_content")
    return parts


def _joined(texts: list[str], where: str) -> str:
    """The text parts of one message, one per line; `ApiError` (`control_token`) when one spells a
    Gemma control token such as `<end_of_turn>` (`pipeline.conversation.messages.check_user_text`)."""
    from pipeline.conversation.messages import check_user_text
    from pipeline.errors import DatasetError

    joined = "\n".join(t.strip() for t in texts if t.strip())
    try:
        check_user_text(joined, f"The text of `{where}`")
    except DatasetError as error:
        raise ApiError(str(error), param=f"{where}.content", code="control_token") from None
    return joined


def parse_chat_request(body: Any, served: list[str]) -> TutorRequest:
    """Check a chat-completions body and decode its audio (see the module docstring for the shape).

    Args:
        body: the parsed JSON body.
        served: the names this server answers as (`GET /v1/models`).

    Returns:
        `TutorRequest` with every clip decoded and checked.

    Raises:
        ApiError: 404 unknown model; 400 for everything else at fault, with `param` naming it: no
            messages, a role or part this tutor does not take, `stream`, `n` > 1, no audio (code
            `missing_audio`), audio that is not base64 (`invalid_base64`), does not decode or fails a
            check (`invalid_audio`), or is longer than 30 s (`audio_too_long`), an empty sentence or
            prompt, a dialogue that does not end with the learner.
    """
    model = check_model(body, served)
    _require(not body.get("stream"), "`stream` is not supported: the tutor answers in one piece; "
             "send \"stream\": false (the default).", "stream", "unsupported_parameter")
    _require(body.get("n") in (None, 1), f"`n` must be 1 (one answer per request), got {body.get('n')!r}.", "n")
    _require(not body.get("tools") and not body.get("functions"),
             "`tools` are not supported: the tutor answers in text.", "tools", "unsupported_parameter")
    max_new_tokens = _max_tokens(body)
    messages = body.get("messages")
    _require(isinstance(messages, list) and messages != [],
             "`messages` must be a non-empty list holding the learner's message (an `input_audio` part and "
             "a text part).", "messages", "missing_required_parameter")
    kept: list[tuple[int, str, Any]] = []
    for i, message in enumerate(messages):
        _require(isinstance(message, dict), f"`messages[{i}]` must be an object with `role` and `content`.", f"messages[{i}]")
        role = message.get("role")
        if role in IGNORED_ROLES:
            continue
        _require(role in ("user", "assistant"),
                 f"`messages[{i}].role` is {role!r}; this tutor takes `user` (the learner) and `assistant` "
                 "(the tutor's earlier turns) messages (`system` ones are ignored).", f"messages[{i}].role")
        kept.append((i, role, message.get("content")))
    _require(kept != [], "`messages` holds no user message; add the learner's message (an `input_audio` part "
             "and a text part).", "messages", "missing_audio")
    kind = body.get("kind")
    if kind is None:
        kind = "dialogue" if any(role == "assistant" for _, role, _ in kept) else "read_aloud"
    _require(kind in KINDS, f"`kind` is {kind!r}; expected one of {', '.join(KINDS)} (read_aloud: the text is "
             "the sentence read; free_speech: the question answered; dialogue: earlier turns as messages).", "kind")
    if kind == "dialogue":
        return _dialogue(model, kept, max_new_tokens)
    return _single(model, kind, kept, max_new_tokens)


def _single(model: str, kind: str, kept: list[tuple[int, str, Any]], max_new_tokens: int) -> TutorRequest:
    """A read-aloud or free-speech question: one user message, one clip, the text."""
    what = "the sentence the learner was asked to read" if kind == "read_aloud" else "the question the learner answered"
    _require(len(kept) == 1 and kept[0][1] == "user",
             f"A `{kind}` request holds one user message (the clip and {what}), got {len(kept)} user/assistant "
             "messages; for a conversation send \"kind\": \"dialogue\".", "messages")
    i, role, content = kept[0]
    parts = _read_content(content, f"messages[{i}]", role)
    audios = [(part, path) for kind_, part, path in parts if kind_ == "audio"]
    _require(audios != [], f"`messages[{i}]` holds no audio: add the learner's recording as an `input_audio` part "
             '({"type": "input_audio", "input_audio": {"data": BASE64, "format": "wav"}}).',
             f"messages[{i}].content", "missing_audio")
    _require(len(audios) == 1, f"`messages[{i}]` holds {len(audios)} clips; a `{kind}` request takes one "
             "(send several requests, or \"kind\": \"dialogue\").", f"messages[{i}].content")
    text = _joined([value for kind_, value, _ in parts if kind_ == "text"], f"messages[{i}]")
    _require(text != "", f"`messages[{i}]` has no text: add a text part holding {what}.",
             f"messages[{i}].content", "missing_text")
    clip = _decode_audio(audios[0][0], audios[0][1])
    return TutorRequest(model=model, kind=kind, clips=[clip], text=text, max_new_tokens=max_new_tokens)


def _dialogue(model: str, kept: list[tuple[int, str, Any]], max_new_tokens: int) -> TutorRequest:
    """A dialogue: every user message a learner turn (one turn per clip, the text with the last), every
    assistant message a tutor turn; ends with the learner."""
    _require(kept[0][1] == "user", f"The dialogue starts with an assistant message (`messages[{kept[0][0]}]`); "
             "it must start with the learner (a user message).", f"messages[{kept[0][0]}]")
    _require(kept[-1][1] == "user", f"The dialogue ends with an assistant message (`messages[{kept[-1][0]}]`); "
             "end it with the learner's turn for the tutor to answer.", f"messages[{kept[-1][0]}]")
    clips, turns = [], []
    for i, role, content in kept:
        parts = _read_content(content, f"messages[{i}]", role)
        text = _joined([value for kind_, value, _ in parts if kind_ == "text"], f"messages[{i}]")
        if role == "assistant":
            _require(text != "", f"`messages[{i}]` (a tutor turn) is empty.", f"messages[{i}].content")
            turns.append({"role": TUTOR, "text": text})
            continue
        audios = [(part, path) for kind_, part, path in parts if kind_ == "audio"]
        for number, (part, path) in enumerate(audios):
            clips.append(_decode_audio(part, path))
            turn = {"role": LEARNER, "clip": len(clips) - 1}
            if number == len(audios) - 1 and text:
                turn["text"] = text
            turns.append(turn)
        if not audios:
            _require(text != "", f"`messages[{i}]` (a learner turn) has neither audio nor text.", f"messages[{i}].content")
            turns.append({"role": LEARNER, "text": text})
    _require(clips != [], "The dialogue holds no audio: add the learner's recording to a user message as an "
             "`input_audio` part; the tutor judges what it hears.", "messages", "missing_audio")
    return TutorRequest(model=model, kind="dialogue", clips=clips, turns=turns, max_new_tokens=max_new_tokens)


def tutor_feedback(text: str) -> dict[str, Any] | None:
    """The scores and flagged words of an answer that follows the feedback template
    (`pipeline.conversation.feedback.parse_feedback`), or None when it has no score and no `Words to practise:` line.

    Returns `{"scores": {"accuracy", "fluency", "prosody", "total"} (0-10 or None), "words": [{"word",
    "score", "phones": [{"phone", "heard"}]}], "advice", "complete"}`; `complete` is True when all four
    scores and the words line are there (what `evaluate` counts as parsed).
    """
    from pipeline.conversation.feedback import has_words_line, parse_feedback

    parsed = parse_feedback(text)
    has_words = has_words_line(text)
    scores = parsed.scores
    if not has_words and all(value is None for value in scores.values()):
        return None
    return {
        "scores": scores,
        "words": parsed.to_dict()["words"],
        "advice": parsed.advice,
        "complete": has_words and all(value is not None for value in scores.values()),
    }


def chat_completion(*, model: str, text: str, prompt_tokens: int, completion_tokens: int, max_new_tokens: int,
                    tutor: dict[str, Any]) -> dict[str, Any]:
    """The response body of one answer, as OpenAI's `chat.completion` object.

    `usage` counts tokens as the model saw them (`prompt_tokens` includes each clip's ~192 audio
    positions). `finish_reason` is "length" when the answer used all `max_new_tokens`, else "stop".
    Two extra fields: `tutor_feedback` (`tutor_feedback(text)`, or None) and `tutor` (which run
    answered, the kind asked, timing; `tutor` is given by the caller).
    """
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{
            "index": 0,
            "message": {"role": "assistant", "content": text},
            "finish_reason": "length" if completion_tokens >= max_new_tokens else "stop",
            "logprobs": None,
        }],
        "usage": {"prompt_tokens": int(prompt_tokens), "completion_tokens": int(completion_tokens),
                  "total_tokens": int(prompt_tokens) + int(completion_tokens)},
        "tutor_feedback": tutor_feedback(text),
        "tutor": tutor,
    }
