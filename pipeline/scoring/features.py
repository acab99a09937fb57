"""The few features the classical scorer scores from, read off a pocketsphinx alignment.

Few and robust on purpose (FIELD_NOTES, "pocketsphinx"): a map of many features fitted on 60 children
who read well carried over worse to poor readers than a map of a few (the silence share even changed
sign), so the sentence, word and phone maps each read a handful of features whose direction is plain:

- sentence (`SENTENCE_FEATURES`, a few per aspect in `ASPECT_FEATURES`): `score_per_frame` (the forced acoustic score per frame of the scored
  phones: how well the sounds match the model, the one that followed the experts' accuracy best),
  `gop` (the phones' mean GOP, `pipeline.scoring.engine`), `pause_per_word_s` (seconds of silence
  inside the sentence per word: hesitation) and `phones_per_s` (phones per second of speech: a slow,
  sound-by-sound reading is slower);
- word (`WORD_FEATURES`): its phones' mean and lowest GOP, and its score per frame;
- phone (`PHONE_FEATURES`): its GOP and score per frame.

Each feature's expected direction (`*_SIGNS`: +1 more is better, -1 more is worse) is what keeps a
fitted map monotone-sane (`pipeline.scoring.score_map`). Units: seconds, phones per second, and
pocketsphinx's log-score units per 10 ms frame (large negative numbers; only differences matter).
"""

from __future__ import annotations

from pipeline.scoring.engine import Alignment, AlignedWord

SENTENCE_FEATURES = ("score_per_frame", "gop", "pause_per_word_s", "phones_per_s")
SENTENCE_SIGNS = (1, 1, -1, 1)
ASPECT_FEATURES = {
    "accuracy": (("score_per_frame", "gop"), (1, 1)),
    "total": (("score_per_frame", "gop", "pause_per_word_s"), (1, 1, -1)),
    "fluency": (("score_per_frame", "pause_per_word_s"), (1, -1)),
    "prosody": (("score_per_frame", "pause_per_word_s"), (1, -1)),
}
"""Each sentence aspect's features and their directions: accuracy is how the sounds match; fluency and
prosody add pauses; the total adds pauses to accuracy's. `phones_per_s` is in no map: on speechocean762-mini
its correlation with the experts' fluency inside each speaker changed sign (-0.67, -0.25, +0.14 for speakers
0001, 0003, 0005), and its positive weight, learnt from the slower speaker 0005 being less fluent, made the
first map's fluency anti-correlated on speaker 0003 (PCC -0.38): pace follows the sentence's words more than
the reader here, so it is reported but not scored."""
WORD_FEATURES = ("gop", "min_gop", "score_per_frame")
WORD_SIGNS = (1, 1, 1)
PHONE_FEATURES = ("gop", "score_per_frame")
PHONE_SIGNS = (1, 1)
GOP_FLOOR = -200.0
"""A phone's GOP is floored here (per frame): a phone squeezed into 3 frames of the wrong sound can reach
-1000 and would outweigh a whole sentence in a mean."""


def _gop(value: float) -> float:
    return max(GOP_FLOOR, value)


def sentence_features(alignment: Alignment) -> dict[str, float]:
    """`SENTENCE_FEATURES` of a clip's alignment (floats; see the module docstring). A clip whose words
    are all unscored gives the features of its timing only, with 0 for the acoustic ones."""
    phones = [p for w in alignment.words if w.scored for p in w.phones]
    frames = sum(p.frames for p in phones)
    speech_s = sum(w.duration_s for w in alignment.words) or 0.01
    return {
        "score_per_frame": sum(p.score for p in phones) / frames if frames else 0.0,
        "gop": sum(_gop(p.gop) for p in phones) / len(phones) if phones else 0.0,
        "pause_per_word_s": sum(alignment.pauses_s) / max(1, len(alignment.words)),
        "phones_per_s": sum(len(w.phones) for w in alignment.words) / speech_s,
    }


def word_features(word: AlignedWord) -> dict[str, float]:
    """`WORD_FEATURES` of one scored word (its phones' mean and lowest GOP, its score per frame)."""
    gops = [_gop(p.gop) for p in word.phones] or [0.0]
    frames = sum(p.frames for p in word.phones)
    return {"gop": sum(gops) / len(gops), "min_gop": min(gops),
            "score_per_frame": sum(p.score for p in word.phones) / frames if frames else 0.0}


def phone_features(phone) -> dict[str, float]:
    """`PHONE_FEATURES` of one aligned phone (`pipeline.scoring.engine.AlignedPhone`)."""
    return {"gop": _gop(phone.gop), "score_per_frame": max(GOP_FLOOR, phone.score_per_frame)}
