"""The classical scorer: one clip and its sentence in, the feedback template (or one sentence why not) out.

`Scorer(score_map, lexicon).score(audio, text)`:

1. the audio goes through the product's own decoding and checks (`pipeline.data.audio.load_audio`:
   any format the product reads, 16 kHz mono; silence, a clip under 0.3 s or over the product's 30 s
   limit are refused there, and the first sentence of that refusal is the reason given);
2. each word is pronounced (CMUdict, the workspace lexicon, else "not scored: not in the dictionary")
   and the clip is force-aligned (`pipeline.scoring.engine`); no path through the sentence, or a mean
   GOP below `WRONG_TEXT_GOP`, gives "does not fit / does not sound like the sentence";
3. the features (`pipeline.scoring.features`) go through the map (`pipeline.scoring.score_map`):
   sentence accuracy, fluency, prosody, total (0-10), each word's accuracy (0-10), each phone's (0-2);
4. the answer is the product's feedback template, written by `pipeline.conversation.feedback` from
   those scores exactly as from an expert's, so `parse_feedback` reads it back unchanged. A phone is written
   `X weak` only when its GOP is below `WEAK_GOP`; the scorer never writes `X as Y`: measured on
   speechocean762, pocketsphinx's phone loop named the phone actually heard in about 1 substitution
   of 12, so such claims would be wrong far more often than right.

`WRONG_TEXT_GOP`: on speechocean762-mini every one of the 60 clips read against its own sentence had a
mean GOP above -36, while 21 of the 40 clips that aligned to another clip's sentence fell below -45
(the other 20 found no path at all); below -45 is refused as not the sentence.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from pipeline.conversation.feedback import NOT_SCORED_PREFIX, SENTENCE_KEYS, feedback_from_scores
from pipeline.errors import AudioError, ClipTooLongError, ScoringError
from pipeline.scoring import engine
from pipeline.scoring.features import phone_features, sentence_features, word_features
from pipeline.scoring.score_map import MAP_VERSION, ScoreMap
from pipeline.workspace import Workspace

WEAK_GOP = -150.0
"""A phone whose GOP (per frame) is below this is written `X weak` in the template, and only such a phone: the
phone loop fitted its frames far better than the phone asked for. Measured on speechocean762-mini's fitting
speakers (0001, 0005; the 443 phones whose experts' phones match CMUdict's, 9 scored below 1 by the experts):
below -150, 1 phone, scored wrong by the experts; below -120, 2 (1 wrong); below -100, 6 (2 wrong). Over all 60
clips the template says `weak` twice: the N of WENT in 000050122 (experts: 0.8 of 2, the word 2/10) and the V
of SEVEN in 000050028 (experts: 1.8, right with an accent), so right 1 time of 2; rare on children who read well."""
WRONG_TEXT_GOP = -45.0
"""A clip whose phones' mean GOP is below this does not sound like its sentence (module docstring)."""
EXTRA_SPEECH_S = 0.8
"""A clip is refused as holding more than its sentence when the phone loop hears more speech outside the
sentence's aligned words than this many seconds and than the words themselves take. Measured on
speechocean762-mini: read against its own sentence, no clip of the 60 had more than 0.63 s outside (the most
beside its words' length: 0.37 s beside 0.73 s, a one-word clip); read against its first word only, 52 of the 57
clips of several words were refused, and "A" or "We" on "WE CALL IT BEAR" no longer scores "Excellent"."""
SCORER_NAME = "Classical scorer (no fine-tuning)"
"""How every surface names the scorer as a tutor."""
SCORER_MODEL_ID = "classical-scorer"
"""The scorer's id where a model id goes (a saved evaluation's `model`, the API's model list)."""
DEFAULT_MAP_PATH = Path(__file__).resolve().parents[2] / "assets" / "scorer_default_map.json"
"""The shipped map, fitted on the sample data (speechocean762-mini's train speakers); its `note` says so."""


def _first_sentence(message: str) -> str:
    text = str(message).strip()
    end = text.find(". ")
    return text if end < 0 else text[: end + 1]


@dataclass
class ScoredClip:
    """The scorer's answer for one clip.

    `scored`: False when the clip could not be scored, `reason` then says why in one sentence and
    `text` is "Not scored: REASON". Otherwise `text` is the feedback template; `scores` the sentence
    scores 0-10 (`accuracy`, `fluency`, `prosody`, `total`); `words` per prompt word `{word, scored,
    note, accuracy (0-10 or None), start_s, duration_s, phones: [{phone, start_s, duration_s, accuracy
    (0-2, the map's), gop, weak (written `X weak`: GOP below `WEAK_GOP`)}]}`; `notes` what a reader should know (the map's provenance, words not scored)."""

    text: str
    scored: bool
    reason: str | None = None
    scores: dict[str, float] = field(default_factory=dict)
    words: list[dict] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    duration_s: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-safe dict (what `score --json` prints)."""
        return asdict(self)


def _not_scored(reason: str, notes: list[str], duration_s: float = 0.0) -> ScoredClip:
    return ScoredClip(text=f"{NOT_SCORED_PREFIX} {reason}", scored=False, reason=reason, notes=notes, duration_s=duration_s)


class Scorer:
    """Scores clips with one map and one lexicon (see the module docstring)."""

    def __init__(self, score_map: ScoreMap, lexicon: dict[str, list[str]] | None = None,
                 lexicon_problems: list[str] | None = None):
        self.score_map = score_map
        self.lexicon = lexicon or {}
        self.lexicon_problems = list(lexicon_problems or [])
        """What `engine.read_lexicon` left out of the workspace lexicon (a line each): in every answer's notes."""

    @property
    def note(self) -> str:
        """What the map was fitted on (shown with every answer)."""
        return self.score_map.note

    def score(self, audio: Any, text: str) -> ScoredClip:
        """Score one clip read from `text`.

        Args:
            audio: anything `pipeline.data.audio.load_audio` takes (a path, file bytes, `(rate, samples)`, `Audio`).
            text: the sentence the learner read.

        Returns:
            `ScoredClip`; never raises for a bad clip or text (the reason is in the answer).
        """
        from pipeline.data.audio import load_audio
        from pipeline.data.audio_decode import MAX_DURATION_S

        notes = [self.note] + self.lexicon_problems[:3] + (
            [f"... and {len(self.lexicon_problems) - 3} more lexicon lines left out."] if len(self.lexicon_problems) > 3 else [])
        try:
            clip = load_audio(audio)
        except ClipTooLongError as error:  # the limit is the product's, not the scorer's own hearing
            return _not_scored(f"The clip is {error.duration_s:.1f} s; the product takes clips of at most "
                               f"{MAX_DURATION_S:.0f} s: trim it or split it into shorter clips.", notes)
        except AudioError as error:
            return _not_scored(_first_sentence(str(error)), notes)
        words = engine.prompt_words(text)
        pronunciations = engine.pronounce(words, self.lexicon)
        missing = [p.word for p in pronunciations if not p.scored]
        notes += [f'"{word}": not scored: {unscored_reason(word)}' for word in missing]
        if words and not any(p.scored for p in pronunciations):
            fix = ("write numbers in words (three, not 3)" if all(engine.is_number(word) for word in missing) else
                   "add their pronunciations to the workspace lexicon (WS/scoring/lexicon.txt)")
            return _not_scored(f"None of the sentence's words is in the dictionary, so none can be scored; {fix}.",
                               notes, clip.duration_s)
        try:
            alignment = engine.align(clip.samples, pronunciations)
        except engine.NotAlignable as error:
            return _not_scored(str(error), notes, clip.duration_s)
        sentence = sentence_features(alignment)
        spoken_s = sum(word.duration_s for word in alignment.words)
        if alignment.speech_outside_s > max(EXTRA_SPEECH_S, spoken_s):
            return _not_scored(f"The recording holds more than the sentence: about {alignment.speech_outside_s:.1f} s of "
                               f"speech lies outside its words (the sentence's words take {spoken_s:.1f} s); type the "
                               "whole sentence the learner read.", notes, clip.duration_s)
        if sentence["gop"] < WRONG_TEXT_GOP:
            return _not_scored("The recording does not sound like the sentence (its sounds match the sentence's far "
                               "less than any clip read right); check the sentence typed, or record it again.",
                               notes, clip.duration_s)
        return self._answer(text, alignment, sentence, notes, clip.duration_s)

    def _answer(self, text: str, alignment: engine.Alignment, sentence: dict, notes: list[str],
                duration_s: float) -> ScoredClip:
        """The scored answer: map the features, then write the template from the scores."""
        scores = {key: round(self.score_map.sentence[key].predict(sentence)) for key in SENTENCE_KEYS}
        words, template_words = [], []
        for word in alignment.words:
            entry = {"word": word.word, "scored": word.scored, "note": None if word.scored else engine.NOT_IN_DICTIONARY,
                     "accuracy": None, "start_s": round(word.start_s, 2), "duration_s": round(word.duration_s, 2),
                     "phones": []}
            if word.scored:
                entry["accuracy"] = round(self.score_map.word.predict(word_features(word)))
                entry["phones"] = [{"phone": p.phone, "start_s": round(p.start_s, 2), "duration_s": round(p.duration_s, 2),
                                    "accuracy": round(self.score_map.phone.predict(phone_features(p)), 2),
                                    "gop": round(p.gop, 2), "weak": p.gop < WEAK_GOP} for p in word.phones]
                # The template names a phone only on the engine's evidence: weak (below 1 of 2) iff its GOP is low.
                template_words.append({"text": word.word.upper(), "accuracy": entry["accuracy"],
                                       "phones": [p["phone"] for p in entry["phones"]],
                                       "phones-accuracy": [min(p["accuracy"], 0.5) if p["weak"] else max(p["accuracy"], 1.0)
                                                           for p in entry["phones"]]})
            words.append(entry)
        expert_layout = {"accuracy": scores["accuracy"], "fluency": scores["fluency"], "prosodic": scores["prosody"],
                         "total": scores["total"], "words": template_words}
        answer = feedback_from_scores(text, expert_layout)
        unscored = [word.word for word in alignment.words if not word.scored]
        if unscored:  # said on every surface, not only in the notes: these scores leave the words out
            answer += f"\n{NOT_CHECKED_PREFIX} " + ", ".join(f"{word.upper()} ({unscored_reason(word)})" for word in unscored)
        return ScoredClip(text=answer, scored=True, scores=scores, words=words, notes=notes, duration_s=duration_s)


NOT_CHECKED_PREFIX = "Not checked:"
"""The answer's last line when words of the sentence could not be scored: `Not checked: CAFÉ (not in the
dictionary), 3 (a number: write it in words)`; `parse_feedback` passes over it."""


def unscored_reason(word: str) -> str:
    """Why a prompt word is not scored: a number written with digits, or a word no dictionary pronounces."""
    return "a number: write it in words" if engine.is_number(word) else "not in the dictionary"


def load_default_map() -> ScoreMap:
    """The map shipped in `assets/scorer_default_map.json` (fitted on the sample data; its `note` says so).

    Raises:
        ScoringError: the file is missing or not a map (a damaged checkout)."""
    return _read_map(DEFAULT_MAP_PATH)


def _read_map(path: Path) -> ScoreMap:
    fix = ("restore it from the repository (`git checkout -- assets/`)" if path == DEFAULT_MAP_PATH else
           "fit it again with `python -m pipeline score --workspace WS --fit`")
    try:
        score_map = ScoreMap.from_dict(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise ScoringError(f"The scorer map `{path}` cannot be read ({type(error).__name__}: {error}); {fix}.") from None
    wrong = score_map.wrong_signs()
    if wrong:  # a better sound scoring lower: never used (fit_map drops such weights; this file was edited)
        raise ScoringError(f"The scorer map `{path}` has weights of the wrong sign or unknown features ({', '.join(wrong)}): "
                           f"a reader who sounds better would score lower; {fix}.")
    return score_map


def load_scorer(workspace: Workspace | str | os.PathLike | None = None) -> Scorer:
    """The scorer of a workspace: its fitted map (`WS/scoring/map.json`) when there is one (a map of an older
    `MAP_VERSION` says so in its note), else the shipped default (its note says so, and that it was fitted on
    the sample data); its lexicon (`WS/scoring/lexicon.txt`).

    Raises:
        ScoringError: a map file that cannot be read, or with a weight of the wrong sign."""
    if workspace is None:
        return Scorer(load_default_map())
    ws = workspace if isinstance(workspace, Workspace) else Workspace(Path(workspace))
    if ws.scorer_map_path.is_file():
        score_map = _read_map(ws.scorer_map_path)
        if score_map.version < MAP_VERSION:
            score_map.note += (" (fitted by an older version of the scorer, without weak readings, so it scores weak "
                               "readers too high; fit it again: `python -m pipeline score --fit`)")
    else:
        score_map = load_default_map()
        score_map.note += " (this workspace has no map of its own yet: `python -m pipeline score --fit`)"
    problems: list[str] = []
    lexicon = engine.read_lexicon(ws.lexicon_path, problems)
    return Scorer(score_map, lexicon, problems)


@dataclass
class ScorerAnswer:
    """An answer of the scorer where a tutor's answer goes (`pipeline.tutor.infer.Feedback`'s fields that
    callers read): its `text` (the template, or "Not scored: ..."), `note` (the map's provenance), `model`
    (`SCORER_MODEL_ID`); `scored` the full `ScoredClip` for a read-aloud clip."""

    text: str
    note: str | None = None
    scored: ScoredClip | None = None
    model: str = SCORER_MODEL_ID
    run: str | None = None
    tiny_random_model: bool = False


class ScorerTutor:
    """The scorer behind a tutor's interface (`pipeline.tutor.infer.Tutor`'s `feedback`,
    `free_speech_feedback`, `dialogue_reply`, `model_id`...), so Judge, Try, the practice page and the API
    ask it like a model. Only read-aloud clips are scored (the scorer needs the sentence read); a free-speech
    clip or a dialogue gets a one-sentence "Not scored" answer."""

    model_id = SCORER_MODEL_ID
    run = None
    adapter_dir = None
    device = "cpu"
    quantization = "none"
    tiny_random_model = False

    def __init__(self, scorer: Scorer):
        self.scorer = scorer

    def feedback(self, audio: Any, target_text: str, *, on_text: Any = None, **_: Any) -> ScorerAnswer:
        """The template for a read-aloud clip (generation options such as `max_new_tokens` are ignored;
        `on_text(text)`, when given, is called once with the whole answer)."""
        clip = self.scorer.score(audio, target_text)
        if on_text is not None:
            on_text(clip.text)
        return ScorerAnswer(clip.text, self.scorer.note, clip)

    def free_speech_feedback(self, audio: Any, prompt: str, **_: Any) -> ScorerAnswer:
        """A one-sentence "Not scored" answer: a free answer has no sentence to align to."""
        return ScorerAnswer("Not scored: the classical scorer scores clips read aloud from a sentence, not free answers.",
                            self.scorer.note)

    def dialogue_reply(self, turns: list, **_: Any) -> ScorerAnswer:
        """A one-sentence "Not scored" answer: a dialogue has no sentence to align to."""
        return ScorerAnswer("Not scored: the classical scorer scores clips read aloud from a sentence, not dialogues.",
                            self.scorer.note)
