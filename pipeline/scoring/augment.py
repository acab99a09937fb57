"""Weak readings made from good ones: a clip scored against its sentence with words replaced.

The sample data's readers (speechocean762-mini: 6-year-old boys who mostly read well) give a map almost no
evidence of what a weak reading sounds like: 221 of its 250 expert word scores are 10, and its sentence
accuracies lie between 6 and 10. A word the learner did not say at all sounds to the aligner like a wholly
mispronounced word, so a clip aligned to its sentence with a word swapped for another word of about the same
length (`replace_words`) is a reading in which that word is wholly wrong. Its expert-like labels
(`weak_scores`):

- the replaced word's accuracy is `REPLACED_WORD_ACCURACY` (speechocean762's rubric gives 0-2 to a word
  "totally wrong or not read"), each of its phones `REPLACED_PHONE_ACCURACY` (0 of 2: wrong or missing);
- the sentence accuracy and total drop by the replaced words' share of the sentence, towards the replaced
  words' accuracy: `new = old - (old - REPLACED_WORD_ACCURACY) * replaced / words`;
- fluency and prosody are left unlabelled (None): the learner's pace and pauses did not change, so the
  fluency and prosody maps are fitted on the real clips only.

Limits: a replaced word is a whole-word error; partial errors (one phone wrong) and a slow, halting reading
are not simulated, and the labels are a rule, not an expert's ear. `docs/judging.md` says so where the
default map's figures are.
"""

from __future__ import annotations

import random
import zlib
from typing import Iterable

from pipeline.scoring import engine

REPLACED_WORD_ACCURACY = 1.0
"""A replaced word's label (0-10): the middle of speechocean762's 0-2 band for a word totally wrong or not read."""
REPLACED_PHONE_ACCURACY = 0.0
"""Each phone of a replaced word (0-2): wrong or missing."""

WEAK_MARK = "~w"
"""A weak reading's id is its clip's id, this mark and the number of words replaced (`ID~w2`)."""


def is_weak(item: dict) -> bool:
    """Whether a fitting item (`pipeline.scoring.fit.clip_item` with its `id`) is a weak reading made here."""
    return WEAK_MARK in str(item.get("id", ""))


def _vocabulary(texts: Iterable[str]) -> dict[str, list[str]]:
    """Lower-cased word -> CMUdict phones of every dictionary word in `texts` (words of 2 phones or more)."""
    words = sorted({w.lower() for text in texts for w in engine.prompt_words(text)})
    return {p.word: p.phones for p in engine.pronounce(words) if p.scored and len(p.phones) >= 2}


def replace_words(text: str, count: int, vocabulary: dict[str, list[str]], seed: int) -> tuple[str, list[int]] | None:
    """`text` with `count` of its dictionary words replaced by words of `vocabulary` of about the same length
    (phone count within 1) that share no phone at the same place and start with another phone.

    Returns:
        (the new sentence, the replaced words' indices into `engine.prompt_words(text)`), or None when the
        sentence has fewer than `count` + 1 words that can be replaced (a sentence is never replaced whole).
    The choice is seeded by `seed` (the same clip and seed always give the same sentence)."""
    rng = random.Random(seed)
    words = engine.prompt_words(text)
    pronounced = engine.pronounce(words)
    candidates = [i for i, p in enumerate(pronounced) if p.scored and len(p.phones) >= 2]
    if len(candidates) < count + 1:
        return None
    out = list(words)
    chosen = sorted(rng.sample(candidates, count))
    for index in chosen:
        phones = pronounced[index].phones
        options = [w for w, ph in vocabulary.items() if w != words[index].lower() and abs(len(ph) - len(phones)) <= 1
                   and ph[0] != phones[0] and not any(a == b for a, b in zip(ph, phones))]
        if not options:
            return None
        out[index] = rng.choice(options).upper()
    return " ".join(out), chosen


def weak_scores(scores: dict, new_text: str, replaced: list[int]) -> dict:
    """The labels of a clip aligned to `new_text` (module docstring): a copy of the expert `scores`
    (speechocean762 layout) with the replaced words' and phones' scores, accuracy and total lowered,
    fluency and prosody None."""
    words = engine.prompt_words(new_text)
    experts = [dict(w) for w in scores.get("words") or []]
    share = len(replaced) / max(1, len(words))
    out = {key: None for key in ("fluency", "prosodic")}
    for key in ("accuracy", "total"):
        if scores.get(key) is not None:
            out[key] = round(float(scores[key]) - (float(scores[key]) - REPLACED_WORD_ACCURACY) * share, 2)
    if len(experts) == len(words):
        for index, pron in zip(replaced, engine.pronounce([words[i] for i in replaced])):
            experts[index] = {"text": words[index].upper(), "accuracy": REPLACED_WORD_ACCURACY, "phones": pron.phones,
                              "phones-accuracy": [REPLACED_PHONE_ACCURACY] * len(pron.phones)}
    out["words"] = experts
    return out


def weak_entries(entries: list[tuple], counts: tuple[int, ...] = (1, 2), seed: int = 0) -> list[tuple]:
    """Weak readings of `entries` (`(id, samples, text, scores, speaker)`, as `pipeline.scoring.fit.fit_items`
    takes them): per clip and per number of words in `counts`, the clip with that many words replaced
    (`replace_words`, words drawn from all the entries' sentences), labelled by `weak_scores`. Ids are
    `ID~wN` (N words replaced); the speaker stays, so cross-validation over speakers holds both out together."""
    vocabulary = _vocabulary(e[2] for e in entries)
    out = []
    for clip_id, samples, text, scores, speaker in entries:
        for count in counts:
            made = replace_words(text, count, vocabulary, zlib.crc32(f"{clip_id}/{count}/{seed}".encode()))
            if made is not None:
                out.append((f"{clip_id}{WEAK_MARK}{count}", samples, made[0], weak_scores(scores, made[0], made[1]), speaker))
    return out
