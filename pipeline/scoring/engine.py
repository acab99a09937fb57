"""pocketsphinx under the classical scorer: force-align a clip to its sentence, and the free phone loop.

Everything comes from the pocketsphinx wheel (BSD; `pocketsphinx.get_model_path()`): the en-US acoustic
model, CMUdict (`cmudict-en-us.dict`, 134,860 words) and the phone language model
(`en-us-phone.lm.bin`); nothing is downloaded. How it is driven (FIELD_NOTES, "pocketsphinx"):

- forced alignment: `Decoder(hmm, dict, samprate=16000, bestpath=False)`, `set_align_text`, decode the
  16-bit PCM, `set_alignment()`, decode again, `get_alignment()`: words -> phones with `start`,
  `duration` (frames of 10 ms) and `score` (log domain, the acoustic score of the phone's frames);
  the alignment's iterators are read in one pass while the decoder is unchanged (else it crashes);
- free phone loop: `Decoder(hmm, allphone=en-us-phone.lm.bin)`; its `seg()` items have `word`,
  `start_frame`, `end_frame` and a linear `ascore` (`logmath.log` puts it on the alignment's scale).

GOP (goodness of pronunciation, Witt & Young 2000) of a phone here: (its forced score - the phone loop's
score over the same frames) / frames; 0 or above means nothing fitted those frames better than the
phone the sentence asks for, and very negative means another sound fitted much better.

A word is pronounced from CMUdict, else from the workspace's lexicon (`Pronouncer`), else it is aligned
as spoken noise (`+SPN+`, pocketsphinx's filler phone) and left unscored ("not in the dictionary"):
never a crash, never a silent skip. No letter-to-sound library is used: the best-known one on PyPI,
g2p_en, fetches NLTK data on its first import, so it does not run offline as installed (not tried here).
This module knows nothing about scores 0-10 (`pipeline.scoring.features`, `score_map`).
"""

from __future__ import annotations

import functools
import os
import re
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

FRAME_S = 0.01
"""pocketsphinx's frame: 10 ms (its default `-frate 100`)."""
SAMPLE_RATE_HZ = 16000
"""The acoustic model's rate (en-us is a 16 kHz model); the product decodes every clip to it."""
SPOKEN_NOISE = "+SPN+"
"""pocketsphinx's filler phone for speech that is no word; a word outside every dictionary is aligned as it."""
NOT_IN_DICTIONARY = "not scored: not in the dictionary"
"""A word no dictionary pronounces: the word's note in every answer."""
_SILENCES = {"<sil>", "<s>", "</s>", "sil", "SIL"}


def _model_path() -> Path:
    from pocketsphinx import get_model_path

    return Path(get_model_path()) / "en-us"


@functools.lru_cache(maxsize=1)
def _aligner():
    """The forced-alignment decoder (loaded once per process: 0.4 s, about 40 MiB)."""
    from pocketsphinx import Decoder

    root = _model_path()
    return Decoder(hmm=str(root / "en-us"), dict=str(root / "cmudict-en-us.dict"), samprate=SAMPLE_RATE_HZ,
                   bestpath=False, cmn="batch", loglevel="FATAL")


@functools.lru_cache(maxsize=1)
def _phone_loop():
    """The free phone-loop decoder (loaded once per process)."""
    from pocketsphinx import Decoder

    root = _model_path()
    return Decoder(hmm=str(root / "en-us"), allphone=str(root / "en-us-phone.lm.bin"), samprate=SAMPLE_RATE_HZ,
                   cmn="batch", loglevel="FATAL")


_WORD = re.compile(r"[^\W_]+(?:['’][^\W_]+)*")


def prompt_words(text: str) -> list[str]:
    """The words of a prompt as written, in order: `"We call it 'bear'."` -> `["We", "call", "it", "bear"]`;
    `"Un café, s'il vous plaît"` -> `["Un", "café", "s'il", "vous", "plaît"]` (letters of any alphabet, digits and
    inner apostrophes; punctuation and hyphens divide words)."""
    return _WORD.findall(str(text or ""))


_FOLDED_LETTERS = str.maketrans({"ß": "ss", "æ": "ae", "œ": "oe", "ø": "o", "đ": "d", "ð": "d", "þ": "th",
                                 "ł": "l", "ı": "i"})
"""Letters that Unicode does not decompose into a Latin letter and a mark, as English spells them."""


def _key(word: str) -> str:
    """How a word is looked up: lower case, the curly apostrophe straight, accents folded ("Café" -> "cafe",
    "Straße" -> "strasse", as CMUdict spells borrowed words)."""
    folded = unicodedata.normalize("NFKD", word.lower().replace("’", "'").translate(_FOLDED_LETTERS))
    return "".join(char for char in folded if not unicodedata.combining(char))


def is_number(word: str) -> bool:
    """Whether a prompt word is written with digits ("3", "1999", "2nd"): no dictionary says how it is read."""
    return any(char.isdigit() for char in word)


@functools.lru_cache(maxsize=1)
def arpabet_phones() -> frozenset[str]:
    """The 39 ARPAbet phones (no stress digits) the acoustic model knows: those of the CMUdict it ships with
    (`cmudict-en-us.dict`), AA ... ZH."""
    phones: set[str] = set()
    with open(_model_path() / "cmudict-en-us.dict", encoding="utf-8") as dictionary:
        for line in dictionary:
            phones.update(re.sub(r"\d", "", phone) for phone in line.split()[1:])
    return frozenset(phones)


def read_lexicon(path: str | os.PathLike, problems: list[str] | None = None) -> dict[str, list[str]]:
    """A lexicon file (speechocean762's `resource/lexicon.txt`: `WORD<tab or space>PH1 PH2 ...` per line,
    ARPAbet with or without stress digits, `WORD(2)` for a second pronunciation, `#` comments) -> the word's
    lookup key (`_key`: "CAFÉ" -> "cafe") -> phones without stress digits (the first pronunciation wins).

    Read as UTF-8 (or UTF-16 with a byte-order mark), else in the Western code page its letters read as
    (`pipeline.data.metadata_table.decode_legacy`: a file saved by an "ANSI" editor). A line that is no entry
    (one word alone, a phone the acoustic model does not know: `arpabet_phones`) is left out and named in
    `problems` ("lexicon.txt line 3: `QQ` is not an ARPAbet phone ..."), as is a file that cannot be read; a
    missing file gives {} with no problem. Never raises.
    """
    from pipeline.data.metadata_table import decode_legacy
    from pipeline.fileio import read_text

    problems = problems if problems is not None else []
    path = Path(path)
    lexicon: dict[str, list[str]] = {}
    try:
        text = read_text(path)
    except FileNotFoundError:
        return lexicon
    except UnicodeDecodeError:
        decoded = decode_legacy(path.read_bytes())
        if decoded is None:
            problems.append(f"The lexicon {path} is not UTF-8 text and was left out; save it as UTF-8.")
            return lexicon
        text = decoded[0]
    except OSError as error:
        problems.append(f"The lexicon {path} cannot be read ({error.strerror or error}) and was left out.")
        return lexicon
    known = arpabet_phones()
    for number, line in enumerate(text.splitlines(), start=1):
        parts = line.split("#", 1)[0].split()
        if not parts:
            continue
        phones = [re.sub(r"[0-2]$", "", p).upper() for p in parts[1:]]
        unknown = [p for p, phone in zip(parts[1:], phones) if phone not in known]
        if len(parts) < 2 or unknown:
            why = (f"`{unknown[0]}` is not an ARPAbet phone (AA, AE, ... ZH)" if unknown
                   else "a word needs its phones after it")
            problems.append(f"{path.name} line {number} (`{' '.join(parts)[:60]}`) was left out: {why}.")
            continue
        lexicon.setdefault(_key(re.sub(r"\(\d+\)$", "", parts[0])), phones)
    return lexicon


@dataclass
class Pronunciation:
    """How one prompt word is aligned: `phones` (ARPAbet, no stress digits) and where they came from
    (`"cmudict"`, `"lexicon"`, or `"none"`: aligned as spoken noise and not scored)."""

    word: str
    phones: list[str]
    source: str

    @property
    def scored(self) -> bool:
        """Whether a dictionary pronounces the word (else it is aligned as spoken noise, unscored)."""
        return self.source != "none"


def pronounce(words: list[str], lexicon: dict[str, list[str]] | None = None) -> list[Pronunciation]:
    """Each word's pronunciation: CMUdict (the first one), else `lexicon` (`read_lexicon`), else none."""
    decoder = _aligner()
    out = []
    for word in words:
        key = _key(word)
        found = decoder.lookup_word(key)
        if found:
            out.append(Pronunciation(word, [re.sub(r"\d", "", p).upper() for p in found.split()], "cmudict"))
        elif lexicon and key in lexicon:
            out.append(Pronunciation(word, list(lexicon[key]), "lexicon"))
        else:
            out.append(Pronunciation(word, [], "none"))
    return out


@dataclass
class AlignedPhone:
    """One aligned phone: ARPAbet `phone`, `start_s` and `duration_s` (seconds, 10 ms steps), `frames`,
    the forced acoustic `score` (log domain, pocketsphinx's scale) and `loop_score` (the free phone
    loop's over the same frames); `gop` is their difference per frame (see the module docstring)."""

    phone: str
    start_s: float
    duration_s: float
    frames: int
    score: float
    loop_score: float

    @property
    def gop(self) -> float:
        """(forced score - phone loop's score) / frames: 0 or more fits; very negative, another sound fitted better."""
        return (self.score - self.loop_score) / max(1, self.frames)

    @property
    def score_per_frame(self) -> float:
        """The forced acoustic score per 10 ms frame (pocketsphinx's log scale)."""
        return self.score / max(1, self.frames)


@dataclass
class AlignedWord:
    """One prompt word as aligned: its text as written, `scored` (False: no dictionary had it), its phones,
    start and duration in seconds."""

    word: str
    scored: bool
    start_s: float
    duration_s: float
    phones: list[AlignedPhone] = field(default_factory=list)


@dataclass
class Alignment:
    """A clip aligned to its prompt: the words in reading order, the silences between and around them
    (`pauses_s`: each internal silence, seconds), the clip's length in seconds, and the speech heard outside
    the words."""

    words: list[AlignedWord]
    pauses_s: list[float]
    leading_s: float
    trailing_s: float
    duration_s: float
    speech_outside_s: float = 0.0
    """Seconds of speech the phone loop heard outside every word of the sentence (`_speech_outside_s`)."""


class NotAlignable(Exception):
    """The clip cannot be aligned to the prompt; `str(error)` is one sentence saying why (shown as is)."""


def _loop_segments(pcm: np.ndarray) -> list[tuple[int, int, float, bool]]:
    """The free phone loop over the clip: `(first_frame, last_frame, log score, is_speech)` per segment
    (`is_speech`: a phone, not a silence or a filler such as `+NSN+`)."""
    decoder = _phone_loop()
    decoder.reinit_feat()  # the noise and CMN estimates start afresh: the same clip always scores the same
    decoder.start_utt()
    decoder.process_raw(pcm.tobytes(), full_utt=True)
    decoder.end_utt()
    log = decoder.logmath.log
    return [(s.start_frame, s.end_frame, float(log(s.ascore)) if s.ascore > 0 else 0.0,
             s.word not in _SILENCES and not s.word.startswith("+")) for s in decoder.seg()]


def _speech_outside_s(segments: list[tuple[int, int, float, bool]], words: list[AlignedWord], total_frames: int) -> float:
    """Seconds the phone loop heard speech where the alignment put no word of the sentence (before, between or
    after them): words said that the sentence does not hold."""
    outside = np.zeros(total_frames + 1, dtype=bool)
    for first, last, _score, is_speech in segments:
        outside[first:last + 1] |= is_speech
    for word in words:
        outside[round(word.start_s / FRAME_S):round((word.start_s + word.duration_s) / FRAME_S)] = False
    return float(outside.sum()) * FRAME_S


def _loop_score(segments: list[tuple[int, int, float, bool]], start: int, frames: int) -> float:
    """The phone loop's score over frames [start, start + frames): each overlapping segment's score,
    pro rata of the frames it shares."""
    end = start + frames
    total = 0.0
    for first, last, score, _is_speech in segments:
        overlap = min(end, last + 1) - max(start, first)
        if overlap > 0:
            total += score * overlap / max(1, last + 1 - first)
    return total


def _force_align(pcm: np.ndarray, text: str) -> list[tuple[str, int, int, list[tuple[str, int, int, float]]]]:
    """pocketsphinx's forced alignment of `pcm` to `text` (lower-case dictionary words): per aligned word
    (silences included) `(name, start, duration, [(phone, start, duration, score)])`, frames.

    Raises:
        NotAlignable: the decoder finds no path through the sentence in the clip."""
    decoder = _aligner()
    try:
        decoder.reinit_feat()
        decoder.set_align_text(text)
        decoder.start_utt()
        decoder.process_raw(pcm.tobytes(), full_utt=True)
        decoder.end_utt()
        if decoder.hyp() is None:
            raise RuntimeError("no hypothesis")
        decoder.set_alignment()
        decoder.start_utt()
        decoder.process_raw(pcm.tobytes(), full_utt=True)
        decoder.end_utt()
        alignment = decoder.get_alignment()
        if alignment is None:
            raise RuntimeError("no alignment")
        return [(w.name, int(w.start), int(w.duration), [(p.name, int(p.start), int(p.duration), float(p.score)) for p in w])
                for w in alignment]  # read in one pass while the decoder is unchanged
    except RuntimeError:
        raise NotAlignable("The recording does not fit the sentence: no way to read the whole sentence in it "
                           "was found (another sentence, or words left out).") from None


def _spoken_noise_word(decoder) -> str:
    """The decoder's private word aligned as spoken noise (`SPOKEN_NOISE`), added once."""
    if not decoder.lookup_word("x__spn"):
        decoder.add_word("x__spn", SPOKEN_NOISE, True)
    return "x__spn"


def align(samples: np.ndarray, pronunciations: list[Pronunciation]) -> Alignment:
    """Force-align 16 kHz mono float32 `samples` (n,) in [-1, 1] to the words of `pronunciations`.

    Words without a pronunciation are aligned as spoken noise (`+SPN+`) and come back `scored=False`.

    Returns:
        `Alignment` with one `AlignedWord` per pronunciation, in order.

    Raises:
        NotAlignable: no word at all to align, or the decoder finds no path (one sentence says why).
    """
    if not pronunciations:
        raise NotAlignable("The sentence has no words to listen for; type the sentence the learner read.")
    decoder = _aligner()
    names = []
    pronunciations = list(pronunciations)
    for index, item in enumerate(pronunciations):
        if item.source == "cmudict":
            names.append(_key(item.word))
        else:  # a word of the lexicon, or none: a private entry in the decoder's dictionary
            phones = " ".join(item.phones) if item.phones else SPOKEN_NOISE
            name = f"{re.sub(r'[^a-z0-9]', '', _key(item.word)) or 'x'}__{re.sub(r'[^a-z]+', '_', phones.lower()).strip('_')}"
            if not decoder.lookup_word(name):  # the name carries the phones: one entry per pronunciation
                try:
                    decoder.add_word(name, phones, True)
                except RuntimeError:  # a phone the model lacks (read_lexicon leaves such lines out): unscored
                    name = _spoken_noise_word(decoder)
                    pronunciations[index] = Pronunciation(item.word, [], "none")
            names.append(name)
    pcm = np.clip(np.round(np.asarray(samples, dtype=np.float64) * 32768.0), -32768, 32767).astype(np.int16)
    aligned = _force_align(pcm, " ".join(names))
    loop = _loop_segments(pcm)
    words, pauses, silences = [], [], []
    spoken = iter(pronunciations)
    for name, start, frames, phones in aligned:
        if name in _SILENCES or (name.startswith("+") and name.endswith("+")):
            silences.append((start, frames, len(words)))
            continue
        item = next(spoken)
        words.append(AlignedWord(item.word, item.scored, start * FRAME_S, frames * FRAME_S, [
            AlignedPhone(phone, p_start * FRAME_S, p_frames * FRAME_S, p_frames, score, _loop_score(loop, p_start, p_frames))
            for phone, p_start, p_frames, score in phones] if item.scored else []))
    total_frames = len(pcm) // (SAMPLE_RATE_HZ // 100)
    leading = sum(f for _, f, before in silences if before == 0) * FRAME_S
    trailing = sum(f for _, f, before in silences if before == len(words)) * FRAME_S
    pauses = [f * FRAME_S for _, f, before in silences if 0 < before < len(words)]
    return Alignment(words, pauses, leading, trailing, total_frames * FRAME_S,
                     _speech_outside_s(loop, words, total_frames))
