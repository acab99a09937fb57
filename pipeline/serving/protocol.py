"""The OpenAI chat-completions wire format, both ways: a request body -> `TutorRequest`, an answer ->
the response body, a refusal -> OpenAI's error body. Pure Python (no web framework, no torch).

A request is an OpenAI `POST /v1/chat/completions` body. What this tutor reads of it:

- `model`: the served name (a run, or `base`); `max_tokens` / `max_completion_tokens`: the longest
  answer (default `DEFAULT_MAX_NEW_TOKENS`, at most `MAX_TOKENS_LIMIT`); `n` must be 1. Decoding is
  greedy, as `python -m pipeline evaluate` judges the tutor: `temperature`, `top_p`, `seed` and the
  other sampling fields are accepted and ignored.
- `stream`: true sends the answer as it is generated, as OpenAI's server-sent events
  (`chat.completion.chunk` objects, `chat_completion_chunk`, then `data: [DONE]`);
  `stream_options.include_usage` adds a last chunk with `usage`.
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
    An assistant message is read without a thought channel (`<|channel>...<channel|>`, or unclosed to
    its end: `pipeline.conversation.feedback.without_thought_text`), which Gemma 4 is reported to leak
    into answers and a client may send back as it got it (from llama.cpp or Ollama).
- `system` / `developer` messages are dropped: the tutor is asked exactly as it was trained, with
  its kind's own instruction (`pipeline.conversation.messages`), whatever a client sends.
- `input_audio` parts are `{"type": "input_audio", "input_audio": {"data": BASE64, "format": "wav"}}`
  (a `data:audio/...;base64,` prefix is tolerated); the bytes are decoded and checked by
  `pipeline.data.audio.load_audio` (any format it reads, 0.3-30 s, not silent, not clipped).

Bounds before work (`RequestLimits`, each a setting of `python -m pipeline serve`): at most
`max_clips` clips and `max_text_chars` characters of text are checked from the JSON alone, before
anything is decoded (`parse_chat_request(..., decode=False)`), so the server can admit the request to
its queue first (429 when full) and decode after; then `decode_clips` decodes the clips in order,
each at most 30 s and all together at most `max_audio_s` seconds, never decoding past what is left
(`load_audio`'s `max_duration_s`: the container's stated length is checked before decoding, and a
file that states none, as browsers record, is decoded no further than the cap).

It deliberately does not call tools or take images: a request asking for them is refused with the
reason.

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

from pipeline.conversation.feedback import without_thought_text
from pipeline.conversation.messages import KINDS, LEARNER, TUTOR
from pipeline.errors import ConfigError, PipelineError
from pipeline.tutor.infer import DEFAULT_MAX_NEW_TOKENS

MAX_TOKENS_LIMIT = 1024
"""Longest answer a request may ask for, in tokens (the feedback template is ~40-120 tokens)."""
AUDIO_FORMATS = frozenset({"wav", "mp3", "flac", "ogg", "oga", "opus", "m4a", "aac", "mp4", "webm", "weba"})
"""`input_audio.format` values accepted (what `pipeline.data.audio.load_audio` decodes; it reads the
bytes themselves, so the name is only checked for sense)."""
IGNORED_ROLES = ("system", "developer")
"""Messages dropped: each kind is asked with its own trained instruction."""
_DATA_URL = re.compile(r"^data:[\w/.+-]*;base64,", re.I)
DEFAULT_MAX_CLIPS = 8
"""Clips one request may hold (a dialogue's learner turns): 8 clips of Gemma 3n are 1,504 audio positions."""
DEFAULT_MAX_AUDIO_S = 120.0
"""Seconds of audio one request may hold in all (four 30 s clips)."""
DEFAULT_MAX_TEXT_CHARS = 8000
"""Characters of text one request may hold in all (about 2,000 tokens; a feedback answer is 40-120 tokens)."""


@dataclass(frozen=True)
class RequestLimits:
    """How much work one request may ask for, checked before its audio is decoded.

    Attributes:
        max_clips: `input_audio` parts in all messages (default `DEFAULT_MAX_CLIPS`).
        max_audio_s: seconds of audio in all clips together (default `DEFAULT_MAX_AUDIO_S`; each clip
            is at most 30 s anyway, `pipeline.data.audio.MAX_DURATION_S`).
        max_text_chars: characters of text in all messages together (default `DEFAULT_MAX_TEXT_CHARS`).

    Raises:
        ConfigError: a bound below 1 (below 0.3 s for `max_audio_s`, the shortest clip), naming the flag.
    """

    max_clips: int = DEFAULT_MAX_CLIPS
    max_audio_s: float = DEFAULT_MAX_AUDIO_S
    max_text_chars: int = DEFAULT_MAX_TEXT_CHARS

    def __post_init__(self):
        from pipeline.data.audio import MIN_DURATION_S

        if not isinstance(self.max_clips, int) or self.max_clips < 1:
            raise ConfigError(f"`--max-clips` must be a whole number >= 1, got {self.max_clips!r}; "
                              f"{DEFAULT_MAX_CLIPS} is the default.")
        if not self.max_audio_s >= MIN_DURATION_S:
            raise ConfigError(f"`--max-audio-seconds` must be at least {MIN_DURATION_S} s (the shortest clip), got "
                              f"{self.max_audio_s!r}; {DEFAULT_MAX_AUDIO_S:g} is the default.")
        if not isinstance(self.max_text_chars, int) or self.max_text_chars < 1:
            raise ConfigError(f"`--max-text-chars` must be a whole number >= 1, got {self.max_text_chars!r}; "
                              f"{DEFAULT_MAX_TEXT_CHARS} is the default.")


class ApiError(PipelineError):
    """A refused request: `status` (HTTP), OpenAI's `type`, the `param` at fault (a JSON path such as
    `messages[1].content[0].input_audio.data`, or None) and a machine-readable `code`; the message
    names the value, what was expected and the fix.

    Types and statuses used: `invalid_request_error` (400, 404 `model_not_found`, 413
    `request_too_large`), `authentication_error` (401 `invalid_api_key`), `rate_limit_error` (429
    `queue_full`), `server_error` (500, and 503 `shutting_down` while the server stops). The bounds
    of `RequestLimits` are 400s with codes `too_many_clips`, `request_audio_too_long`, `text_too_long`.
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
    (`pipeline.data.audio.Audio`, 16 kHz mono float32); empty until `decode_clips`, while
    `audio_parts` holds the parts still to decode (`(input_audio part, its JSON path)`, in order).
    `turns`: for a dialogue, the turns as `Tutor.dialogue_reply` takes them, `{"role": "learner",
    "clip": index into clips, "text": str?}` or `{"role": "tutor", "text": str}`. `max_new_tokens`:
    the longest answer in tokens. `stream`: send the answer as server-sent events;
    `include_usage`: with `stream`, end with a `usage` chunk (`stream_options.include_usage`).
    """

    model: str
    kind: str
    clips: list[Any]
    text: str | None = None
    turns: list[dict] = field(default_factory=list)
    max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS
    audio_parts: list[tuple[dict, str]] = field(default_factory=list)
    stream: bool = False
    include_usage: bool = False

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
             f"`model` is missing: name the run to ask (GET /v1/models lists them), e.g. \"model\": \"{served[0] if served else 'base'}\".",
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


def _check_audio_part(part: dict, where: str) -> None:
    """`ApiError` naming `where` when an `input_audio` part is not `{"data": non-empty str, "format": known}`
    (checked from the JSON alone, before anything is decoded)."""
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


def _decode_audio(part: dict, where: str, max_s: float | None = None, limits: RequestLimits | None = None) -> Any:
    """The `Audio` of one `input_audio` part, decoded no further than `max_s` seconds (default 30 s;
    less when the request's audio budget, `limits.max_audio_s`, has less left); `ApiError` naming
    `where` when it is missing, not base64, fails `load_audio`'s checks (too short/long, silent,
    clipped, not audio), or passes what is left of the budget (`request_audio_too_long`)."""
    from pipeline.data.audio import MAX_DURATION_S, load_audio
    from pipeline.errors import AudioError, ClipTooLongError

    _check_audio_part(part, where)
    data = part["input_audio"]["data"]
    max_s = MAX_DURATION_S if max_s is None else min(max_s, MAX_DURATION_S)
    try:
        raw = base64.b64decode(_DATA_URL.sub("", data.strip()), validate=True)
    except (binascii.Error, ValueError):
        raise ApiError(f"`{where}.input_audio.data` is not valid base64; encode the audio file's bytes "
                       "with base64 (Python: base64.b64encode(open(path, 'rb').read()).decode()).",
                       param=f"{where}.input_audio.data", code="invalid_base64") from None
    try:
        return load_audio(raw, name=where, max_duration_s=max_s)
    except ClipTooLongError as error:
        if max_s < MAX_DURATION_S and limits is not None:
            raise ApiError(f"The request's clips last more than {limits.max_audio_s:g} s in all (this server's "
                           f"`--max-audio-seconds`): `{where}` does not fit in the {max_s:.1f} s left. Send fewer "
                           "or shorter clips, or several requests.",
                           param=f"{where}.input_audio.data", code="request_audio_too_long") from None
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


def parse_chat_request(body: Any, served: list[str], limits: RequestLimits | None = None, *,
                       decode: bool = True) -> TutorRequest:
    """Check a chat-completions body and decode its audio (see the module docstring for the shape).

    Args:
        body: the parsed JSON body.
        served: the names this server answers as (`GET /v1/models`).
        limits: the request's bounds (default `RequestLimits()`).
        decode: False checks everything the JSON alone tells (the bounds on clips and text
            included) and leaves the audio undecoded in `audio_parts`, for `decode_clips`.

    Returns:
        `TutorRequest`, with every clip decoded and checked unless `decode` is False.

    Raises:
        ApiError: 404 unknown model; 400 for everything else at fault, with `param` naming it: no
            messages, a role or part this tutor does not take, `stream` not a boolean, `n` > 1, no
            audio (code `missing_audio`), more clips than `limits.max_clips` (`too_many_clips`), more
            text than `limits.max_text_chars` (`text_too_long`), audio that is not base64
            (`invalid_base64`), does not decode or fails a check (`invalid_audio`), is longer than
            30 s (`audio_too_long`) or than what is left of `limits.max_audio_s`
            (`request_audio_too_long`), an empty sentence or prompt, a dialogue that does not end
            with the learner.
    """
    limits = limits or RequestLimits()
    model = check_model(body, served)
    stream = body.get("stream")
    _require(stream in (None, True, False), f"`stream` must be true or false, got {stream!r}.", "stream")
    options = body.get("stream_options")
    _require(options is None or isinstance(options, dict),
             "`stream_options` must be an object such as {\"include_usage\": true}.", "stream_options")
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
    _check_bounds(kept, limits)
    request = _dialogue(model, kept, max_new_tokens) if kind == "dialogue" else _single(model, kind, kept, max_new_tokens)
    request.stream = bool(stream)
    request.include_usage = bool(stream) and bool((options or {}).get("include_usage"))
    if decode:
        decode_clips(request, limits)
    return request


def _check_bounds(kept: list[tuple[int, str, Any]], limits: RequestLimits) -> None:
    """`ApiError` 400 when the messages hold more clips than `limits.max_clips` (`too_many_clips`) or more
    text than `limits.max_text_chars` (`text_too_long`); counted from the JSON, nothing decoded."""
    clips = chars = 0
    for _, _, content in kept:
        parts = content if isinstance(content, list) else [content]
        for part in parts:
            if isinstance(part, str):
                chars += len(part)
            elif isinstance(part, dict):
                clips += part.get("type") == "input_audio"
                chars += len(part["text"]) if isinstance(part.get("text"), str) else 0
    _require(clips <= limits.max_clips, f"The request holds {clips} clips; this server takes at most {limits.max_clips} "
             "per request (its `--max-clips`). Send the last turns only, or several requests.", "messages",
             "too_many_clips")
    _require(chars <= limits.max_text_chars, f"The request holds {chars:,} characters of text; this server takes at "
             f"most {limits.max_text_chars:,} per request (its `--max-text-chars`). Shorten the conversation.",
             "messages", "text_too_long")


def decode_clips(request: TutorRequest, limits: RequestLimits | None = None) -> TutorRequest:
    """Decode `request.audio_parts` into `request.clips`, in order, within `limits.max_audio_s` in all
    (each clip decoded no further than what is left). Returns `request`.

    Raises:
        ApiError: 400 as `parse_chat_request` for the audio (`invalid_base64`, `invalid_audio`,
            `audio_too_long`, `request_audio_too_long`).
    """
    limits = limits or RequestLimits()
    left = limits.max_audio_s
    clips = []
    for part, path in request.audio_parts:
        clip = _decode_audio(part, path, max_s=left, limits=limits)
        left -= clip.duration_s
        clips.append(clip)
    request.clips, request.audio_parts = clips, []
    return request


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
    _check_audio_part(*audios[0])
    return TutorRequest(model=model, kind=kind, clips=[], text=text, max_new_tokens=max_new_tokens,
                        audio_parts=[audios[0]])


def _dialogue(model: str, kept: list[tuple[int, str, Any]], max_new_tokens: int) -> TutorRequest:
    """A dialogue: every user message a learner turn (one turn per clip, the text with the last), every
    assistant message a tutor turn; ends with the learner."""
    _require(kept[0][1] == "user", f"The dialogue starts with an assistant message (`messages[{kept[0][0]}]`); "
             "it must start with the learner (a user message).", f"messages[{kept[0][0]}]")
    _require(kept[-1][1] == "user", f"The dialogue ends with an assistant message (`messages[{kept[-1][0]}]`); "
             "end it with the learner's turn for the tutor to answer.", f"messages[{kept[-1][0]}]")
    clips: list[tuple[dict, str]] = []
    turns = []
    for i, role, content in kept:
        parts = _read_content(content, f"messages[{i}]", role)
        texts = [value for kind_, value, _ in parts if kind_ == "text"]
        if role == "assistant":  # the tutor's own earlier answer, maybe from a runtime that leaked its thought channel
            texts = [without_thought_text("\n".join(texts))]
        text = _joined(texts, f"messages[{i}]")
        if role == "assistant":
            _require(text != "", f"`messages[{i}]` (a tutor turn) is empty.", f"messages[{i}].content")
            turns.append({"role": TUTOR, "text": text})
            continue
        audios = [(part, path) for kind_, part, path in parts if kind_ == "audio"]
        for number, (part, path) in enumerate(audios):
            _check_audio_part(part, path)
            clips.append((part, path))
            turn = {"role": LEARNER, "clip": len(clips) - 1}
            if number == len(audios) - 1 and text:
                turn["text"] = text
            turns.append(turn)
        if not audios:
            _require(text != "", f"`messages[{i}]` (a learner turn) has neither audio nor text.", f"messages[{i}].content")
            turns.append({"role": LEARNER, "text": text})
    _require(clips != [], "The dialogue holds no audio: add the learner's recording to a user message as an "
             "`input_audio` part; the tutor judges what it hears.", "messages", "missing_audio")
    return TutorRequest(model=model, kind="dialogue", clips=[], turns=turns, max_new_tokens=max_new_tokens,
                        audio_parts=clips)


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
                    tutor: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
    """The response body of one answer, as OpenAI's `chat.completion` object.

    `usage` counts tokens as the model saw them (`prompt_tokens` includes each clip's ~192 audio
    positions). `finish_reason` is the one given (the engine knows it), else "length" when the answer
    used all `max_new_tokens`, else "stop". Two extra fields: `tutor_feedback` (`tutor_feedback(text)`,
    or None) and `tutor` (which run answered, the kind asked, timing; `tutor` is given by the caller).
    """
    return {
        "id": completion_id(),
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{
            "index": 0,
            "message": {"role": "assistant", "content": text},
            "finish_reason": finish_reason or ("length" if completion_tokens >= max_new_tokens else "stop"),
            "logprobs": None,
        }],
        "usage": usage(prompt_tokens, completion_tokens),
        "tutor_feedback": tutor_feedback(text),
        "tutor": tutor,
    }


def completion_id() -> str:
    """A new `chatcmpl-...` id (one per answer; every chunk of a streamed answer carries it)."""
    return f"chatcmpl-{uuid.uuid4().hex}"


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    """OpenAI's `usage` object."""
    return {"prompt_tokens": int(prompt_tokens), "completion_tokens": int(completion_tokens),
            "total_tokens": int(prompt_tokens) + int(completion_tokens)}


def chat_completion_chunk(*, id: str, created: int, model: str, content: str | None = None, role: bool = False,
                          finish_reason: str | None = None, usage_: dict[str, int] | None = None,
                          extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """One server-sent event of a streamed answer, as OpenAI's `chat.completion.chunk` object.

    The stream is: a first chunk with `role=True` (`delta: {"role": "assistant", "content": ""}`), one
    chunk per piece of text (`delta: {"content": ...}`), a last chunk with `finish_reason` (an empty
    delta; `extra` adds this tutor's `tutor_feedback` and `tutor` fields there), and, when the client
    asked for `stream_options.include_usage`, a chunk with no choices and `usage_`. The caller sends
    each as `data: JSON` and ends with `data: [DONE]` (`pipeline.serving.app`).
    """
    delta: dict[str, Any] = {}
    if role:
        delta["role"] = "assistant"
        delta["content"] = ""
    if content is not None:
        delta["content"] = content
    chunk: dict[str, Any] = {"id": id, "object": "chat.completion.chunk", "created": int(created), "model": model,
                             "choices": [] if usage_ is not None else [
                                 {"index": 0, "delta": delta, "finish_reason": finish_reason, "logprobs": None}]}
    if usage_ is not None:
        chunk["usage"] = usage_
    if extra:
        chunk.update(extra)
    return chunk
