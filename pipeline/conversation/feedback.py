"""The tutor's feedback template: written from expert scores, and read back from any answer.

The template has three lines, each with a fixed prefix (this text is also the training target, so
it is short; `parse_feedback` reads it back, which is how a tuned tutor is judged):

    Scores (0-10): accuracy 6, fluency 7, prosody 7, total 5
    Words to practise: GREY 0/10 (G as F, R unclear, EY as IH)
    Advice: In "GREY", say the G sound of "green", not the F sound of "fee".

Line by line:
- `Scores (0-10):` the sentence-level expert scores: `accuracy`, `fluency`, `prosody` (speechocean762
  calls it `prosodic`) and `total`, each 0-10, integers or one decimal.
- `Words to practise:` the words scored low, in reading order, separated by `; `, or `none`. Each is
  `WORD SCORE/10`, SCORE being the word's expert `accuracy` (0-10), optionally followed by its
  mispronounced phones in parentheses, separated by `, `. Phones are ARPAbet without the stress
  digit (CMUdict's 39 phones) and each one reads:
    `G as F`     the experts heard F instead of G
    `R unclear`  mispronounced, the sound heard could not be recognised (`<unk>` in speechocean762)
    `T missing`  the phone was dropped (`<DEL>`)
    `Z weak`     scored wrong (below 1 of 2) but no annotation of what was heard
- `Advice:` one concrete piece of advice: for the worst word, the first mispronounced phone with the
  CMUdict example word of the right sound (and of the sound heard instead); with no word to
  practise, the weakest of fluency, prosody or an accented phone; otherwise encouragement.

"Scored low" (the rule that flags a word): its expert `accuracy` is below `LOW_WORD_ACCURACY` (7;
the corpus scale says 7-9 is "mostly right with an accent", below 7 means phones are wrong), or one
of its phones scores below `LOW_PHONE_SCORE` (1 of 2; 1 is "right but heavy accent", 0 is "wrong or
missing"), or the experts annotated a mispronunciation in it. Phones listed for a flagged word are
those scored below 1 or annotated.

Scores follow speechocean762's `resource/scores.json` layout (Zhang et al., Interspeech 2021,
arXiv:2104.01378): sentence `accuracy/fluency/prosodic/total`, `words[]` with `text`, `accuracy`,
`phones`, `phones-accuracy` and optional `mispronunciations[]` of `{canonical-phone, index,
pronounced-phone}`. This module does no scoring of audio; it only writes and reads the template.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any

from pipeline.errors import SampleError

LOW_WORD_ACCURACY = 7.0
"""A word whose expert accuracy (0-10) is below this is flagged."""
LOW_PHONE_SCORE = 1.0
"""A phone whose expert score (0-2) is below this counts as mispronounced."""
ACCENTED_PHONE_SCORE = 1.5
"""With nothing flagged, a phone below this (accented) is what the advice polishes."""
LOW_SENTENCE_SCORE = 7.0
"""Fluency or prosody below this gets the advice when no word is flagged."""

UNCLEAR = "<unk>"
MISSING = "<DEL>"

# CMUdict's phone set with its example words (http://www.speech.cs.cmu.edu/cgi-bin/cmudict).
ARPABET_EXAMPLES = {
    "AA": "odd", "AE": "at", "AH": "hut", "AO": "ought", "AW": "cow", "AY": "hide", "B": "be",
    "CH": "cheese", "D": "dee", "DH": "thee", "EH": "Ed", "ER": "hurt", "EY": "ate", "F": "fee",
    "G": "green", "HH": "he", "IH": "it", "IY": "eat", "JH": "gee", "K": "key", "L": "lee", "M": "me",
    "N": "knee", "NG": "ping", "OW": "oat", "OY": "toy", "P": "pee", "R": "read", "S": "sea",
    "SH": "she", "T": "tea", "TH": "theta", "UH": "hood", "UW": "two", "V": "vee", "W": "we",
    "Y": "yield", "Z": "zee", "ZH": "seizure",
}
SENTENCE_KEYS = ("accuracy", "fluency", "prosody", "total")
"""Sentence scores in template order; `prosody` is read from speechocean762's `prosodic`."""


@dataclass
class PhoneError:
    """A mispronounced phone: `phone` (ARPAbet, no stress digit) and `heard` (a phone, `"<unk>"`
    for unclear, `"<DEL>"` for missing, or None when the experts did not annotate it)."""

    phone: str
    heard: str | None = None


@dataclass
class FlaggedWord:
    """A word scored low: its text as written, its accuracy 0-10 (None if absent) and phone errors."""

    word: str
    score: float | None = None
    phones: list[PhoneError] = field(default_factory=list)


@dataclass
class ParsedFeedback:
    """What the template carries. Sentence scores are 0-10 floats or None when absent."""

    accuracy: float | None = None
    fluency: float | None = None
    prosody: float | None = None
    total: float | None = None
    words: list[FlaggedWord] = field(default_factory=list)
    advice: str | None = None

    @property
    def scores(self) -> dict[str, float | None]:
        """`{"accuracy", "fluency", "prosody", "total"}` -> value or None."""
        return {key: getattr(self, key) for key in SENTENCE_KEYS}

    @property
    def flagged_words(self) -> list[str]:
        """Upper-cased texts of the flagged words, in order (for comparing with expert flags)."""
        return [word.word.upper() for word in self.words]

    @property
    def phone_errors(self) -> list[tuple[str, str, str | None]]:
        """`(WORD, phone, heard)` for every listed phone error."""
        return [(word.word.upper(), error.phone, error.heard) for word in self.words for error in word.phones]

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-safe dict."""
        return asdict(self)


# ----------------------------------------------------------------------------- writing
def _number(value: float) -> str:
    """6 -> "6", 7.5 -> "7.5", 7.25 -> "7.2" (one decimal at most)."""
    rounded = round(float(value), 1)
    return str(int(rounded)) if rounded == int(rounded) else f"{rounded:.1f}"


def _base_phone(phone: str) -> str:
    return re.sub(r"\d+$", "", str(phone).strip()).upper()


def _as_float(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if number == number else None  # NaN -> None


def _word_errors(word: dict) -> list[PhoneError]:
    phones = [_base_phone(p) for p in word.get("phones") or []]
    phone_scores = [_as_float(s) for s in word.get("phones-accuracy") or []]
    annotated: dict[int, PhoneError] = {}
    for item in word.get("mispronunciations") or []:
        index = item.get("index")
        canonical = _base_phone(item.get("canonical-phone", ""))
        if isinstance(index, int) and 0 <= index < len(phones):
            canonical = phones[index]
        heard = str(item.get("pronounced-phone", "")).strip()
        heard = heard if heard in (UNCLEAR, MISSING) else (_base_phone(heard) or UNCLEAR)
        if canonical:
            annotated[index if isinstance(index, int) else -1 - len(annotated)] = PhoneError(canonical, heard)
    errors = []
    for index, phone in enumerate(phones):
        if index in annotated:
            errors.append(annotated.pop(index))
        elif index < len(phone_scores) and phone_scores[index] is not None and phone_scores[index] < LOW_PHONE_SCORE:
            errors.append(PhoneError(phone, None))
    errors.extend(annotated.values())  # annotations whose index did not match a phone
    return errors


def _advice(target_text: str, parsed: ParsedFeedback, words: list[dict]) -> str:
    """One concrete piece of advice; see the module docstring for the order of preference."""
    if parsed.words:
        worst = min(parsed.words, key=lambda w: 99.0 if w.score is None else w.score)
        if not worst.phones:
            raw = next((w for w in words if str(w.get("text", "")).strip() == worst.word), {})
            scored = [
                (score, _base_phone(phone))
                for phone, score in zip(raw.get("phones") or [], map(_as_float, raw.get("phones-accuracy") or []))
                if score is not None and score < 2.0
            ]
            if scored:
                phone = min(scored)[1]
                example = ARPABET_EXAMPLES.get(phone)
                sound = f'the {phone} sound of "{example}"' if example else f"the {phone} sound"
                return f'In "{worst.word}", say {sound} more clearly.'
            return f'Say "{worst.word}" slowly, sound by sound, then again at normal speed.'
        error = worst.phones[0]
        right = ARPABET_EXAMPLES.get(error.phone)
        right_text = f'the {error.phone} sound of "{right}"' if right else f"the {error.phone} sound"
        if error.heard == MISSING:
            return f'In "{worst.word}", do not drop {right_text}.'
        if error.heard in (None, UNCLEAR):
            return f'In "{worst.word}", say {right_text} clearly.'
        wrong = ARPABET_EXAMPLES.get(error.heard)
        wrong_text = f'the {error.heard} sound of "{wrong}"' if wrong else f"the {error.heard} sound"
        return f'In "{worst.word}", say {right_text}, not {wrong_text}.'
    sentence = target_text.strip() or "the sentence"
    if parsed.fluency is not None and parsed.fluency < LOW_SENTENCE_SCORE and (
        parsed.prosody is None or parsed.fluency <= parsed.prosody
    ):
        return f'Read "{sentence}" again in one smooth go, without stopping between words.'
    if parsed.prosody is not None and parsed.prosody < LOW_SENTENCE_SCORE:
        return f'Read "{sentence}" again with a natural rhythm: stress the key words, keep small words short.'
    weakest = None
    for word in words:
        phones = [_base_phone(p) for p in word.get("phones") or []]
        for phone, score in zip(phones, word.get("phones-accuracy") or []):
            score = _as_float(score)
            if score is not None and score < ACCENTED_PHONE_SCORE and (weakest is None or score < weakest[0]):
                weakest = (score, phone, str(word.get("text", "")).strip())
    if weakest is not None:
        _, phone, word_text = weakest
        example = ARPABET_EXAMPLES.get(phone)
        sound = f'the {phone} sound of "{example}"' if example else f"the {phone} sound"
        return f'Good reading. To sound clearer, polish {sound} in "{word_text}".'
    return "Excellent reading. Keep this clear, steady pace."


def summarize_scores(target_text: str, scores: dict) -> ParsedFeedback:
    """The structured content of the feedback for expert `scores` (what `parse_feedback` should recover).

    Args:
        target_text: the sentence read (used in the advice).
        scores: speechocean762-style dict (see the module docstring); sentence keys may be missing.

    Raises:
        SampleError: `scores` is not a dict or has neither sentence scores nor words.
    """
    if not isinstance(scores, dict):
        raise SampleError(f"Expert scores must be a dict (speechocean762 layout), got {type(scores).__name__}.")
    sentence = {
        "accuracy": _as_float(scores.get("accuracy")),
        "fluency": _as_float(scores.get("fluency")),
        "prosody": _as_float(scores.get("prosodic", scores.get("prosody"))),
        "total": _as_float(scores.get("total")),
    }
    words = [w for w in scores.get("words") or [] if isinstance(w, dict)]
    if all(v is None for v in sentence.values()) and not words:
        raise SampleError(
            f"Expert scores {sorted(scores)!r} have none of accuracy/fluency/prosodic/total and no words; "
            "expected speechocean762's scores.json layout."
        )
    # Rounded as written, so that parsing the text gives back exactly these numbers.
    parsed = ParsedFeedback(**{k: None if v is None else float(_number(v)) for k, v in sentence.items()})
    for word in words:
        accuracy = _as_float(word.get("accuracy"))
        errors = _word_errors(word)
        if (accuracy is not None and accuracy < LOW_WORD_ACCURACY) or errors:
            text = str(word.get("text", "")).strip() or "?"
            parsed.words.append(
                FlaggedWord(text, None if accuracy is None else float(_number(accuracy)), errors)
            )
    parsed.advice = _advice(target_text, parsed, words)
    return parsed


def render_feedback(parsed: ParsedFeedback) -> str:
    """Write `parsed` in the template (module docstring); lines with no content are left out."""
    lines = []
    parts = [f"{key} {_number(value)}" for key, value in parsed.scores.items() if value is not None]
    if parts:
        lines.append("Scores (0-10): " + ", ".join(parts))
    items = []
    for word in parsed.words:
        item = word.word if word.score is None else f"{word.word} {_number(word.score)}/10"
        if word.phones:
            described = []
            for error in word.phones:
                if error.heard == UNCLEAR:
                    described.append(f"{error.phone} unclear")
                elif error.heard == MISSING:
                    described.append(f"{error.phone} missing")
                elif error.heard is None:
                    described.append(f"{error.phone} weak")
                else:
                    described.append(f"{error.phone} as {error.heard}")
            item += " (" + ", ".join(described) + ")"
        items.append(item)
    lines.append("Words to practise: " + ("; ".join(items) if items else "none"))
    if parsed.advice:
        lines.append(f"Advice: {parsed.advice}")
    return "\n".join(lines)


def feedback_from_scores(target_text: str, scores: dict) -> str:
    """The tutor feedback text for expert `scores`, in the template of the module docstring.

    E.g. for speechocean762 utterance 000050083 ("KATE'S GOT SOME GREY"):
        Scores (0-10): accuracy 6, fluency 7, prosody 7, total 5
        Words to practise: GREY 0/10 (G as F, R unclear, EY as IH)
        Advice: In "GREY", say the G sound of "green", not the F sound of "fee".

    Raises:
        SampleError: `scores` is not a dict or carries no scores (see `summarize_scores`).
    """
    return render_feedback(summarize_scores(target_text, scores))


NOT_SCORED_PREFIX = "Not scored:"
"""How an answer that holds no feedback begins: the classical scorer's one sentence why a clip could not be scored
(`pipeline.scoring.scorer`). Never a sample's feedback (`is_not_scored`)."""


def is_not_scored(text: str | None) -> bool:
    """Whether `text` is a "Not scored: ..." answer rather than feedback (a draft, a practice attempt's answer)."""
    return (text or "").strip().startswith(NOT_SCORED_PREFIX)


# ----------------------------------------------------------------------------- reading
_NUMBER = r"(\d+(?:[.,]\d+)?)"
_SCORE_PATTERNS = {
    "accuracy": re.compile(r"\baccuracy\b\W{0,3}" + _NUMBER, re.I),
    "fluency": re.compile(r"\bfluency\b\W{0,3}" + _NUMBER, re.I),
    "prosody": re.compile(r"\bprosod(?:y|ic)\b\W{0,3}" + _NUMBER, re.I),
    "total": re.compile(r"\b(?:total|overall)\b\W{0,3}" + _NUMBER, re.I),
}
_LINE_PREFIX = r"^[\s>*_#-]*"
_SCORES_LINE = re.compile(_LINE_PREFIX + r"scores?\b[^:\n]*:(.*)$", re.I | re.M)
_WORDS_LINE = re.compile(_LINE_PREFIX + r"words?\s+to\s+(?:practi[sc]e|work\s+on)[*_\s]*:(.*)$", re.I | re.M)
_ADVICE_LINE = re.compile(_LINE_PREFIX + r"(?:advice|tip)[*_\s]*:(.*)$", re.I | re.M)
_WORD_ITEM = re.compile(
    r"^(?P<word>[^()]*?)\s*(?:\(?\s*(?P<score>\d+(?:[.,]\d+)?)\s*(?:/\s*10|out\s+of\s+10)?\s*\)?)?\s*"
    r"(?:[(\[:]\s*(?P<phones>[^)\]]*)[)\]]?)?\s*$"
)
_PHONE_ITEM = re.compile(
    r"^(?P<phone>[A-Za-z]{1,2})\d?\s*(?:(?:as|->|→|=>|heard\s+as)\s*(?P<heard>[A-Za-z]{1,2}|<unk>|<del>)\d?"
    r"|(?P<state>unclear|missing|weak|dropped|deleted|<unk>|<del>))$",
    re.I,
)
_NONE_WORDS = {"", "none", "nothing", "no", "-", "n/a", "none.", "all good"}


def _to_number(text: str) -> float | None:
    value = _as_float(text.replace(",", "."))
    return None if value is None or value > 10 else value


def _split_top_level(text: str, separators: str) -> list[str]:
    """Split on any of `separators` outside parentheses/brackets."""
    parts, depth, current = [], 0, []
    for char in text:
        if char in "([":
            depth += 1
        elif char in ")]":
            depth = max(0, depth - 1)
        if char in separators and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    parts.append("".join(current))
    return [part.strip() for part in parts if part.strip()]


def _parse_phone(text: str) -> PhoneError | None:
    match = _PHONE_ITEM.match(text.strip().strip("*_`'\"."))
    if not match:
        return None
    phone = match.group("phone").upper()
    heard = match.group("heard")
    state = (match.group("state") or "").lower()
    if heard:
        heard = heard.upper()
        heard = {"<UNK>": UNCLEAR, "<DEL>": MISSING}.get(heard, heard)
    elif state in ("unclear", "<unk>"):
        heard = UNCLEAR
    elif state in ("missing", "dropped", "deleted", "<del>"):
        heard = MISSING
    return PhoneError(phone, heard)


def _parse_words(text: str) -> list[FlaggedWord]:
    text = text.strip().strip("*_ ").rstrip(".")
    if text.lower() in _NONE_WORDS:
        return []
    words = []
    separators = ";" if ";" in text else ","
    for item in _split_top_level(text, separators):
        as_phone = _parse_phone(item) if words else None
        if as_phone is not None:  # "GREY: G -> F, R unclear": the comma split a word's phone list
            words[-1].phones.append(as_phone)
            continue
        match = _WORD_ITEM.match(item.strip("*_`"))
        if not match or not match.group("word").strip(" \"'*_`:-"):
            continue
        word = match.group("word").strip(" \"'*_`:-")
        score = _to_number(match.group("score")) if match.group("score") else None
        phones = []
        for part in re.split(r"[,;]", match.group("phones") or ""):
            parsed = _parse_phone(part) if part.strip() else None
            if parsed is not None:
                phones.append(parsed)
        words.append(FlaggedWord(word, score, phones))
    return words


_THOUGHT = re.compile(r"<\|channel>.*?(?:<channel\|>|\Z)", re.S)


def without_thought_text(text: str) -> str:
    """`text` without a thought channel written out as text: `<|channel>...<channel|>`, or an unclosed
    `<|channel>...` to the end (Gemma 4 is reported to leak one into answers; llama.cpp or a client may
    hand it back with the control tokens spelled). Decoded answers are cleaned token by token first
    (`pipeline.model.tokens.answer_text`); this is the text-side rule, which the parser applies too."""
    return _THOUGHT.sub("", text)


def parse_feedback(text: str | None) -> ParsedFeedback:
    """Read the template back from a tutor's answer (ours or a model's); never raises.

    Tolerant of small deviations: markdown bullets or bold, upper/lower case, `prosodic`/`overall`,
    `6/10` or `6 out of 10`, `,` instead of `;` between words, `->` instead of `as`. A missing line
    gives None (scores, advice) or [] (words); numbers above 10 are ignored as malformed.

    Returns:
        `ParsedFeedback`; `parse_feedback(feedback_from_scores(t, s)) == summarize_scores(t, s)`.
    """
    result = ParsedFeedback()
    if not text or not isinstance(text, str):
        return result
    text = without_thought_text(text)
    scores_line = _SCORES_LINE.search(text)
    scope = scores_line.group(1) if scores_line else text
    for key, pattern in _SCORE_PATTERNS.items():
        match = pattern.search(scope) or (pattern.search(text) if scores_line else None)
        if match:
            setattr(result, key, _to_number(match.group(1)))
    words_line = _WORDS_LINE.search(text)
    if words_line:
        content = words_line.group(1)
        if not content.strip(" *_"):  # the words as a bulleted list under the heading
            bullets = []
            for line in text[words_line.end():].splitlines()[1:]:
                match = re.match(r"^\s*(?:[-*•]|\d+[.)])\s+(.*)$", line)
                if not match:
                    break
                bullets.append(match.group(1))
            content = "; ".join(bullets)
        result.words = _parse_words(content)
    advice_line = _ADVICE_LINE.search(text)
    if advice_line and advice_line.group(1).strip():
        result.advice = advice_line.group(1).strip()
    return result


def has_words_line(text: str | None) -> bool:
    """Whether `text` has the template's `Words to practise:` line (with a list, or `none`), as
    `parse_feedback` reads it; a missing line is not the same as `none` (nothing flagged)."""
    return bool(text and isinstance(text, str) and _WORDS_LINE.search(text))
