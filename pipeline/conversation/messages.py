"""The conversation the tutor sees: one place that the dataset, the collator, the memory estimate
and inference all read, so the prompt and the supervised span cannot drift between them.

- `SYSTEM_PROMPT`, `user_prompt`, `build_messages`: the Gemma 3n chat conversation of one
  read-aloud clip.
- `KINDS`: the three sample kinds. `build_free_speech_messages` (a clip answering a prompt) and
  `build_dialogue_messages` (a tutoring dialogue: learner clips or text, tutor text) build the
  other two; `conversation_messages` picks the builder for a kind, `prompt_messages` gives the part
  before the first answer.
- Token lengths and the supervised spans are the model family's (`pipeline.model.tokens`).

- `control_tokens_in`, `check_user_text`: the rule that a person's text (sentence, feedback,
  transcript) never turns into a control or placeholder token. Text holding one (e.g. a literal
  `<end_of_turn>` pasted from a chat log) is refused, never escaped: at save and import by the
  sample library (`CONTROL_TOKEN_PATTERN`, Gemma's reserved names), and by `build_messages` with the
  tokenizer's own special tokens, so the dataset build (and with it the memory estimate), the
  collator and inference refuse the same texts. The same holds for prompts and dialogue turns.

A clip's transcript is kept with the sample but never shown to the model: at inference time there
is no transcript, so training must not lean on one.

Torch-free: importing this module loads no model library.
"""

from __future__ import annotations

import re
import unicodedata
import weakref
from typing import Any, Sequence

from pipeline.errors import DatasetError
from pipeline.units import plural


# --------------------------------------------------------------------------------------------------
# The conversation
# --------------------------------------------------------------------------------------------------

_TASK = (
    "You are a pronunciation tutor. You hear a learner read a sentence aloud. Compare how each word "
    "was pronounced with the sentence and answer in three lines, like this example:"
)


def _answer_format() -> str:
    """The answer template of `pipeline.conversation.feedback`, its example lines written by its own writer.

    `feedback.render_feedback` writes the example, so the format asked for is exactly the one
    `feedback.parse_feedback` reads back and the one expert-score imports train on. Kept short:
    the system prompt is repeated in every row and costs activation memory per token.
    """
    from pipeline.conversation.feedback import FlaggedWord, ParsedFeedback, PhoneError, render_feedback

    example = render_feedback(
        ParsedFeedback(
            accuracy=6.0,
            fluency=7.0,
            prosody=7.0,
            total=5.0,
            words=[FlaggedWord("GREY", 3.0, [PhoneError("G", "K"), PhoneError("R", "<unk>")])],
            advice="one concrete piece of advice.",
        )
    )
    return (
        f"{example}\n"
        "List each mispronounced word with its score and wrong ARPAbet sounds (`G as K`, `R unclear`, "
        "`T missing`), separated by `; `, or write `Words to practise: none`."
    )


def _system_prompt() -> str:
    return f"{_TASK}\n{_answer_format()}"


SYSTEM_PROMPT = _system_prompt()
"""System instruction of every conversation: the tutor's job and the answer template of
`pipeline.conversation.feedback` (Gemma 3n's chat template folds it into the first user turn)."""

KINDS = ("read_aloud", "free_speech", "dialogue")
"""The sample kinds: a sentence read aloud, free speech answering a prompt, a tutoring dialogue."""

KIND_LABELS = {"read_aloud": "read-aloud", "free_speech": "free speech", "dialogue": "tutoring dialogue"}
"""How each kind is named to a person."""

LEARNER, TUTOR = "learner", "tutor"
"""Roles of dialogue turns (rendered as Gemma 3n's `user` and `model`)."""

FREE_SPEECH_SYSTEM_PROMPT = (
    "You are a language tutor. You hear a learner answer a question in their own words. Give feedback "
    "on pronunciation, fluency, grammar and vocabulary: name each mispronounced word and the wrong sounds, "
    "correct each grammar or word-choice mistake, and end with one concrete piece of advice."
)
"""System instruction of a free-speech conversation (there is no target sentence to compare with)."""

DIALOGUE_SYSTEM_PROMPT = (
    "You are a friendly language tutor talking with a learner, who speaks (you hear the audio) or types. "
    "Answer the learner's last turn as a tutor: briefly correct mistakes of pronunciation, grammar or "
    "vocabulary, then keep the conversation going."
)
"""System instruction of a tutoring dialogue."""


def check_kind(kind: str | None) -> str:
    """`kind` if it is one of `KINDS` ("" or None -> "read_aloud", what manifests without a kind hold).

    Raises `DatasetError` naming the value and the kinds.
    """
    if not kind:
        return "read_aloud"
    value = str(kind).strip().lower().replace("-", "_").replace(" ", "_")
    if value not in KINDS:
        raise DatasetError(f"Unknown sample kind `{kind}`; expected one of {', '.join(KINDS)}.")
    return value


def system_prompt(kind: str) -> str:
    """The system instruction of a conversation of `kind` (one of `KINDS`)."""
    return {"read_aloud": SYSTEM_PROMPT, "free_speech": FREE_SPEECH_SYSTEM_PROMPT,
            "dialogue": DIALOGUE_SYSTEM_PROMPT}[check_kind(kind)]


def normalize_text(text: str | None) -> str:
    """`text` NFC-normalized and stripped ("" for None): how every user text is stored and shown to the model."""
    return unicodedata.normalize("NFC", text or "").strip()


_BLANK_CATEGORIES = frozenset({"Cc", "Cf", "Zs", "Zl", "Zp"})
_BLANK_LOOKALIKES = frozenset("\u115f\u1160\u2800\u3164\uffa0")  # Hangul fillers, braille blank


def is_blank(text: str | None) -> bool:
    """True when `text` shows nothing: empty, None, or only spaces, line breaks, tabs, invisible
    format characters (zero-width space U+200B, byte-order mark U+FEFF, ...) and blank look-alikes
    (braille blank U+2800, Hangul fillers). Such a sentence or feedback is treated as missing
    everywhere: the sample checks, the sample library and the dataset build."""
    return all(
        ch.isspace() or unicodedata.category(ch) in _BLANK_CATEGORIES or ch in _BLANK_LOOKALIKES
        for ch in unicodedata.normalize("NFC", text or "")
    )


CONTROL_TOKEN_PATTERN = re.compile(
    r"<(?:bos|eos|pad|unk|mask|start_of_turn|end_of_turn|start_of_image|end_of_image|image_soft_token"
    r"|start_of_audio|end_of_audio|audio_soft_token|unused\d+)>|\[multimodal\]|\[@BOS@\]"
)
"""Gemma's control and placeholder tokens by name, known without loading a tokenizer (used at save
and import). `control_tokens_in(text, tokenizer)` adds every special token of the tokenizer itself."""

_TOKENIZER_PATTERNS: "weakref.WeakKeyDictionary[Any, re.Pattern]" = weakref.WeakKeyDictionary()


def _special_tokens(tokenizer: Any) -> list[str]:
    """Every token string `tokenizer` matches atomically in text AND treats as special: its named
    specials (`all_special_tokens`), its added tokens flagged special, and the processor's
    multimodal placeholders (audio/image soft tokens and their start/end markers)."""
    tokens = set(getattr(tokenizer, "all_special_tokens", []) or [])
    for added in (getattr(tokenizer, "added_tokens_decoder", None) or {}).values():
        if getattr(added, "special", False):
            tokens.add(str(getattr(added, "content", added)))
    for name in ("audio_token", "boa_token", "eoa_token", "image_token", "boi_token", "eoi_token"):
        value = getattr(tokenizer, name, None)
        if isinstance(value, str):
            tokens.add(value)
    return sorted((t for t in tokens if t and t.strip()), key=len, reverse=True)


def _tokenizer_pattern(tokenizer: Any) -> re.Pattern | None:
    try:
        cached = _TOKENIZER_PATTERNS.get(tokenizer)
    except TypeError:  # not weak-referenceable: build each time
        cached = None
    if cached is None:
        tokens = _special_tokens(tokenizer)
        cached = re.compile("|".join(re.escape(t) for t in tokens)) if tokens else re.compile(r"(?!x)x")
        try:
            _TOKENIZER_PATTERNS[tokenizer] = cached
        except TypeError:
            pass
    return cached


def control_tokens_in(text: str | None, tokenizer: Any = None) -> list[str]:
    """The control or placeholder tokens that `text` spells literally, in order of appearance.

    Matches `CONTROL_TOKEN_PATTERN` (Gemma's reserved names) and, when `tokenizer` is given, every
    special token it knows (see `_special_tokens`): exactly the strings the tokenizer would turn
    into a control token instead of text. The text is NFC-normalized first, as it is stored.
    """
    text = normalize_text(text)
    if not text:
        return []
    found = [(m.start(), m.group()) for m in CONTROL_TOKEN_PATTERN.finditer(text)]
    if tokenizer is not None:
        found += [(m.start(), m.group()) for m in _tokenizer_pattern(tokenizer).finditer(text)]
    seen: list[str] = []
    for _, token in sorted(found):
        if token not in seen:
            seen.append(token)
    return seen


def check_user_text(text: str | None, what: str, tokenizer: Any = None, *, error: type = DatasetError) -> None:
    """Raise `error` (default `DatasetError`) when a person's `text` spells a control token.

    Args:
        text: a sentence, feedback or transcript as typed or imported.
        what: how to name it in the message, e.g. "Feedback of `kate_03.wav`".
        tokenizer: adds the tokenizer's own special tokens to Gemma's reserved names.
        error: the `PipelineError` subclass to raise (the sample library raises `SampleError`).

    The message quotes the text around the first token and says why and how to fix it: the model
    would read e.g. `<end_of_turn>` as the end of its answer, so the training labels would stop
    there and the rest would never be learned.
    """
    tokens = control_tokens_in(text, tokenizer)
    if not tokens:
        return
    clean = normalize_text(text)
    at = clean.find(tokens[0])
    excerpt = ("..." if at > 30 else "") + clean[max(0, at - 30): at + len(tokens[0]) + 30] + (
        "..." if at + len(tokens[0]) + 30 < len(clean) else "")
    listed = ", ".join(f"`{t}`" for t in tokens)
    raise error(
        f"{what} contains {listed} (in \"{excerpt}\"): {'these are' if len(tokens) > 1 else 'this is'} one of "
        "Gemma's control tokens, which the model would read as a command (e.g. the end of its answer) instead of "
        "text, so the rest would never be learned. Remove it or write it another way (e.g. `end of turn`)."
    )


def user_prompt(target_text: str) -> str:
    """The text of the user turn that follows the audio: the sentence the learner was asked to read.

    `target_text` is NFC-normalized and stripped. Raises `DatasetError` when it is empty.
    """
    text = normalize_text(target_text)
    if is_blank(text):
        raise DatasetError(
            "The target text is empty; give the sentence the learner was asked to read "
            "(e.g. `The cat sat on the mat.`)."
        )
    return f'The learner was asked to read: "{text}"'


def build_messages(target_text: str, feedback: str | None = None, audio: Any = None, *, tokenizer: Any = None) -> list[dict]:
    """The Gemma 3n chat conversation for one clip.

    Args:
        target_text: the sentence the learner was asked to read (NFC-normalized here).
        feedback: the tutor's answer; when given (training), it becomes the assistant turn; when
            None (inference, prompt length), the conversation ends with the user turn.
        audio: float32 numpy array of shape (n,), 16 kHz mono in [-1, 1]. When None the user turn
            holds a bare `{"type": "audio"}` placeholder: rendering to text (`tokenize=False`) works
            and shows the audio token, while `apply_chat_template(tokenize=True)` needs the array.
        tokenizer: the tokenizer that will read the conversation; its special tokens join Gemma's
            reserved names in the control-token check (`check_user_text`). Every caller that has
            one passes it (dataset build, collator, inference), so they refuse the same texts.

    Returns:
        `[{"role": "system", ...}, {"role": "user", "content": [audio, text]}, ({"role": "assistant",
        ...})]`, each content a list of `{"type": "text", "text": ...}` / `{"type": "audio", ...}`
        blocks as `processor.apply_chat_template` expects.

    Raises:
        DatasetError: empty target text, `feedback` given but empty, or either spells a control
            token (`check_user_text`).
    """
    check_user_text(target_text, "The target sentence", tokenizer)
    if feedback is not None:
        check_user_text(feedback, "The feedback", tokenizer)
    audio_block: dict[str, Any] = {"type": "audio"}
    if audio is not None:
        audio_block["audio"] = audio
    messages: list[dict] = [
        {"role": "system", "content": [{"type": "text", "text": SYSTEM_PROMPT}]},
        {"role": "user", "content": [audio_block, {"type": "text", "text": user_prompt(target_text)}]},
    ]
    if feedback is not None:
        answer = normalize_text(feedback)
        if not answer:
            raise DatasetError("The feedback is empty; write the tutor's answer for this clip before training on it.")
        messages.append({"role": "assistant", "content": [{"type": "text", "text": answer}]})
    return messages


def _plain(text: str | None, what: str, tokenizer: Any = None) -> str:
    """`text` NFC-normalized ("" when blank, `is_blank`); `DatasetError` naming `what` when it spells
    a control token (`check_user_text`: a typed `<start_of_turn>model` would fake a tutor turn)."""
    check_user_text(text, f"The {what}", tokenizer)
    return "" if is_blank(text) else normalize_text(text)


def free_speech_prompt(prompt: str, tokenizer: Any = None) -> str:
    """The text of the user turn that follows a free-speech clip: the question the learner answered.

    Raises `DatasetError` when `prompt` is empty.
    """
    text = _plain(prompt, "prompt", tokenizer)
    if not text:
        raise DatasetError(
            "The prompt is empty; give the question the learner was answering (e.g. `Describe your last holiday.`)."
        )
    return f'The learner was asked: "{text}"'


def _answer(feedback: str, what: str, tokenizer: Any = None) -> dict:
    answer = _plain(feedback, what, tokenizer)
    if not answer:
        raise DatasetError(f"The {what} is empty; write the tutor's answer before training on it.")
    return {"role": "assistant", "content": [{"type": "text", "text": answer}]}


def build_free_speech_messages(prompt: str, feedback: str | None = None, audio: Any = None, *,
                               tokenizer: Any = None) -> list[dict]:
    """The Gemma 3n chat conversation of one free-speech clip: system, user (audio + the prompt), answer.

    Args and result as `build_messages`, with `prompt` (the question answered) in place of the
    target sentence and `FREE_SPEECH_SYSTEM_PROMPT` as the instruction.

    Raises:
        DatasetError: empty prompt, `feedback` given but empty, or a text that spells a control token.
    """
    audio_block: dict[str, Any] = {"type": "audio"}
    if audio is not None:
        audio_block["audio"] = audio
    messages: list[dict] = [
        {"role": "system", "content": [{"type": "text", "text": FREE_SPEECH_SYSTEM_PROMPT}]},
        {"role": "user", "content": [audio_block, {"type": "text", "text": free_speech_prompt(prompt, tokenizer)}]},
    ]
    if feedback is not None:
        messages.append(_answer(feedback, "feedback", tokenizer))
    return messages


def build_dialogue_messages(turns: Sequence[dict], audios: Sequence[Any] | None = None, *,
                            tokenizer: Any = None) -> list[dict]:
    """The Gemma 3n chat conversation of a tutoring dialogue.

    Args:
        turns: in order, dicts with `role` "learner" or "tutor". A learner turn has `clip` (an index
            into `audios`, or into the sample's clips) and/or `text`; a tutor turn has `text`. Other
            keys (`transcript`, `audio_file`, checks) are ignored: the model hears the clip.
            Consecutive turns of one role become one message (Gemma 3n's roles must alternate).
        audios: float32 (n,) 16 kHz arrays, one per clip index; None gives bare `{"type": "audio"}`
            placeholders (text rendering and token counts).
        tokenizer: adds its special tokens to the control-token check of every text (`check_user_text`).

    Returns:
        `[system, user, assistant, user, ...]` as `build_messages`; each tutor turn is an assistant
        message (every one is supervised in training, `all_answer_spans`). A conversation that ends
        with a learner turn is a prompt for the tutor's next answer.

    Raises:
        DatasetError: no turns, a turn with an unknown role, a learner turn with neither clip nor
            text, an empty tutor turn, a clip index outside `audios`, a first turn by the tutor, or a
            text that spells a control token.
    """
    if not turns:
        raise DatasetError("The dialogue has no turns; add a learner turn (a recording or text) first.")
    messages: list[dict] = [{"role": "system", "content": [{"type": "text", "text": DIALOGUE_SYSTEM_PROMPT}]}]
    for number, turn in enumerate(turns, start=1):
        role = str(turn.get("role", "")).strip().lower()
        if role not in (LEARNER, TUTOR):
            raise DatasetError(f"Turn {number} of the dialogue has role `{turn.get('role')}`; expected learner or tutor.")
        if role == TUTOR:
            if len(messages) == 1:
                raise DatasetError("The dialogue starts with a tutor turn; it must start with the learner (a recording or text).")
            blocks = [_answer(turn.get("text") or "", f"tutor turn {number}", tokenizer)["content"][0]]
            chat_role = "assistant"
        else:
            blocks = []
            clip = turn.get("clip")
            if clip is not None:
                block: dict[str, Any] = {"type": "audio"}
                if audios is not None:
                    if not isinstance(clip, int) or not 0 <= clip < len(audios):
                        raise DatasetError(f"Turn {number} of the dialogue names clip {clip!r}, but it has {plural(len(audios), 'clip')}.")
                    block["audio"] = audios[clip]
                blocks.append(block)
            text = _plain(turn.get("text"), f"learner turn {number}", tokenizer)
            if text:
                blocks.append({"type": "text", "text": text})
            if not blocks:
                raise DatasetError(f"Learner turn {number} of the dialogue has neither a recording nor text; add one or remove the turn.")
            chat_role = "user"
        if messages[-1]["role"] == chat_role:
            if chat_role == "assistant":  # two tutor turns in a row: one answer
                previous = messages[-1]["content"][0]
                previous["text"] = previous["text"] + "\n\n" + blocks[0]["text"]
            else:
                messages[-1]["content"].extend(blocks)
        else:
            messages.append({"role": chat_role, "content": blocks})
    return messages


def conversation_messages(
    kind: str,
    *,
    target_text: str | None = None,
    prompt: str | None = None,
    feedback: str | None = None,
    turns: Sequence[dict] | None = None,
    audios: Sequence[Any] | None = None,
    tokenizer: Any = None,
) -> list[dict]:
    """The conversation of one sample of any kind (`KINDS`), with the answer(s) when given.

    read_aloud: `build_messages(target_text, feedback, audios[0])`; free_speech:
    `build_free_speech_messages(prompt, feedback, audios[0])`; dialogue:
    `build_dialogue_messages(turns, audios)` (its tutor turns are the answers; `feedback` is unused).
    `audios` None gives audio placeholders (text rendering, token counts); `tokenizer` joins the
    control-token check (`check_user_text`).

    Raises `DatasetError` as the builders do, and for an unknown kind.
    """
    kind = check_kind(kind)
    first = audios[0] if audios else None
    if kind == "read_aloud":
        return build_messages(target_text or "", feedback, first, tokenizer=tokenizer)
    if kind == "free_speech":
        return build_free_speech_messages(prompt or "", feedback, first, tokenizer=tokenizer)
    return build_dialogue_messages(list(turns or []), audios, tokenizer=tokenizer)


def prompt_messages(kind: str, **fields: Any) -> list[dict]:
    """The conversation up to the first answer (what the model reads before it first answers), to be
    rendered with `add_generation_prompt=True`. Arguments as `conversation_messages`."""
    kind = check_kind(kind)
    if kind != "dialogue":
        return conversation_messages(kind, **{**fields, "feedback": None})
    turns = list(fields.get("turns") or [])
    first_tutor = next((i for i, t in enumerate(turns) if str(t.get("role", "")).lower() == TUTOR), len(turns))
    return build_dialogue_messages(turns[:first_tutor], fields.get("audios"), tokenizer=fields.get("tokenizer"))
