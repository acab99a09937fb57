"""Benchmark: the classical scorer's speed, memory and agreement with the experts (issue 41).

Data: speechocean762-mini (`shared/data/speechocean762-mini` beside the checkout, or `$SPEECHOCEAN_DIR`).
The map is fitted on one fixed group of speakers, printed (`FIT_SPEAKERS`: the corpus's train speakers
0001 and 0005, 40 clips, and their weak readings: the same clips scored against their sentence with 1 or 2
words replaced, `pipeline.scoring.augment`), and scores the others (0003, the corpus's test speaker, 20
clips): the same fit as the shipped default map (`--write-default` rewrites
`assets/scorer_default_map.json` from it). Beside it: leave one speaker out over all 60 clips, and how
the map scores speaker 0003's weak readings (below the real ones? the replaced words flagged?).

- Speed and memory: every clip of the held-out group scored once more after a warm-up, in this
  process pinned to one CPU core (`os.sched_setaffinity`); seconds per clip, the real-time factor
  (seconds of work per second of audio) and the process's peak resident memory (`ru_maxrss`, MiB).
  Goal: at most 0.2x real time on one core, at most 300 MiB.
- Quality on the held-out speakers: PCC, SCC, MAE per sentence aspect beside the mean predictor's MAE
  (predicting the fitting group's mean); word accuracy PCC and flagged-word F1 (a word flagged when its
  accuracy is below 7, the template's rule, on both sides); phone PCC; the published anchors beside them
  (GOPT on the whole speechocean762 test set: phone 0.616, sentence accuracy 0.742; Gong et al., ICASSP 2022).
  20 clips of one 6-year-old who reads well are few: the figures are wide, and say little about adults
  or weak readers.

    .venv/bin/python benchmarks/scorer.py [--json] [--write-default]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

FIT_SPEAKERS = ("0001", "0005")
HELD_OUT_SPEAKERS = ("0003",)
ANCHORS = {"phone PCC": 0.616, "sentence accuracy PCC": 0.742}
DEFAULT_NOTE = ("Default map fitted on the sample data (speechocean762-mini, learners 0001 and 0005: 40 clips of two "
                "6-year-old boys who mostly read well, and the same clips scored against their sentence with 1 or 2 "
                "words replaced, as weak readings), not on this workspace's clips")


def _data_dir() -> Path:
    override = os.environ.get("SPEECHOCEAN_DIR")
    if override:
        return Path(override)
    for folder in ROOT.parents:
        candidate = folder / "shared" / "data" / "speechocean762-mini"
        if (candidate / "resource" / "scores.json").exists():
            return candidate
    raise SystemExit("speechocean762-mini not found: put shared/ beside the checkout or set SPEECHOCEAN_DIR")


def _stats(predicted: list[float], expert: list[float]) -> dict:
    from pipeline.tutor.metrics import pearson, spearman

    mae = sum(abs(p - e) for p, e in zip(predicted, expert)) / len(expert)
    return {"pcc": pearson(predicted, expert), "scc": spearman(predicted, expert), "mae": mae, "n": len(expert)}


def quality(score_map, items, of: int, fit_items_list) -> dict:
    """Agreement of `score_map` with the experts on the aligned `items` of `of` clips (module docstring)."""
    from pipeline.conversation.feedback import LOW_WORD_ACCURACY
    from pipeline.tutor.metrics import pearson, precision_recall_f1

    out = {"clips": len(items), "of": of, "sentence": {}}
    for key, linear in score_map.sentence.items():
        kept = [i for i in items if i["scores"][key] is not None]
        predicted = [round(linear.predict(i["sentence"])) for i in kept]
        expert = [i["scores"][key] for i in kept]
        fitted = [i["scores"][key] for i in fit_items_list if i["scores"][key] is not None]
        train_mean = sum(fitted) / len(fitted)
        out["sentence"][key] = _stats(predicted, expert) | {
            "mean_mae": sum(abs(train_mean - e) for e in expert) / len(expert)}
    words = [(round(score_map.word.predict(f)), y) for i in items for f, y in i["words"]]
    flagged = sum(1 for p, y in words if p < LOW_WORD_ACCURACY and y < LOW_WORD_ACCURACY)
    out["word"] = {"pcc": pearson([p for p, _ in words], [y for _, y in words]), "n": len(words),
                   "flagged": precision_recall_f1(flagged, sum(p < LOW_WORD_ACCURACY for p, _ in words),
                                                  sum(y < LOW_WORD_ACCURACY for _, y in words))}
    phones = [(score_map.phone.predict(f), y) for i in items for f, y in i["phones"]]
    out["phone"] = {"pcc": pearson([p for p, _ in phones], [y for _, y in phones]), "n": len(phones)}
    return out


def leave_one_speaker_out(real: list[dict], weak: list[dict]) -> dict:
    """Per sentence aspect over every real clip: each speaker scored by a map fitted on the other speakers'
    real and weak clips (`fit_map` as for the default). `pcc`: over all clips pooled (a speaker's offset
    from the others' mean weighs in it); `within`: the mean of the PCCs inside each speaker; `mae` beside
    `mean_mae` (predicting the other speakers' mean)."""
    from pipeline.scoring.score_map import fit_map
    from pipeline.tutor.metrics import pearson

    speakers = sorted({i["speaker"] for i in real})
    maps = {s: fit_map([i for i in real + weak if i["speaker"] != s], "loso") for s in speakers}
    out = {}
    for key in maps[speakers[0]].sentence:
        rows = []  # (speaker, predicted, expert, the others' mean)
        for s in speakers:
            others = [i["scores"][key] for i in real if i["speaker"] != s]
            rows += [(s, round(maps[s].sentence[key].predict(i["sentence"])), i["scores"][key], sum(others) / len(others))
                     for i in real if i["speaker"] == s]
        within = [pearson([r[1] for r in rows if r[0] == s], [r[2] for r in rows if r[0] == s]) for s in speakers]
        within = [w for w in within if w is not None]
        out[key] = {"pcc": pearson([r[1] for r in rows], [r[2] for r in rows]),
                    "within": sum(within) / len(within) if within else None,
                    "mae": sum(abs(r[1] - r[2]) for r in rows) / len(rows),
                    "mean_mae": sum(abs(r[3] - r[2]) for r in rows) / len(rows), "n": len(rows)}
    return out


def weak_readings(score_map, real: list[dict], weak: list[dict]) -> dict:
    """How `score_map` scores the weak readings (`pipeline.scoring.augment`) of held-out clips: the share of
    them scored below their own real reading (accuracy, total), the mean score beside the mean label, the
    PCC over real and weak clips together, the clips the scorer would refuse as not the sentence, and the
    replaced words flagged (< 7) beside the real words flagged."""
    from pipeline.conversation.feedback import LOW_WORD_ACCURACY
    from pipeline.scoring.augment import REPLACED_WORD_ACCURACY, WEAK_MARK
    from pipeline.scoring.scorer import WRONG_TEXT_GOP
    from pipeline.tutor.metrics import pearson

    by_id = {i["id"]: i for i in real}
    pairs = [(w, by_id[w["id"].split(WEAK_MARK)[0]]) for w in weak if w["id"].split(WEAK_MARK)[0] in by_id]
    out = {"clips": len(pairs), "refused": sum(w["sentence"]["gop"] < WRONG_TEXT_GOP for w, _ in pairs)}
    for key in ("accuracy", "total"):
        linear = score_map.sentence[key]
        both = [(linear.predict(i["sentence"]), i["scores"][key]) for i in [*real, *(w for w, _ in pairs)]]
        out[key] = {"below_real": sum(linear.predict(w["sentence"]) < linear.predict(r["sentence"]) for w, r in pairs),
                    "mean": sum(linear.predict(w["sentence"]) for w, _ in pairs) / len(pairs),
                    "label": sum(w["scores"][key] for w, _ in pairs) / len(pairs),
                    "pcc_with_real": pearson([b[0] for b in both], [b[1] for b in both])}
    replaced = [round(score_map.word.predict(f)) for w, _ in pairs for f, y in w["words"] if y == REPLACED_WORD_ACCURACY]
    kept = [round(score_map.word.predict(f)) for i in real for f, y in i["words"] if y >= LOW_WORD_ACCURACY]
    out["replaced_flagged"] = (sum(p < LOW_WORD_ACCURACY for p in replaced), len(replaced))
    out["good_flagged"] = (sum(p < LOW_WORD_ACCURACY for p in kept), len(kept))
    return out


def speed(scorer, entries) -> dict:
    """Seconds per clip and real-time factor of `scorer.score` on one core, after one warm-up clip."""
    try:
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
    except (AttributeError, OSError):
        pass
    scorer.score((16000, entries[0][1]), entries[0][2])
    audio_s = work_s = 0.0
    for _, samples, text, _, _ in entries:
        started = time.process_time()
        scorer.score((16000, samples), text)
        work_s += time.process_time() - started
        audio_s += len(samples) / 16000
    return {"clips": len(entries), "seconds_per_clip": work_s / len(entries), "real_time_factor": work_s / audio_s,
            "audio_s": audio_s, "peak_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def _fmt(value) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def report(result: dict) -> str:
    """The printed table."""
    s, q = result["speed"], result["quality"]
    lines = [f"fitted on speakers {', '.join(FIT_SPEAKERS)} ({result['fit_clips']} clips); scored speakers "
             f"{', '.join(HELD_OUT_SPEAKERS)} ({q['clips']} of {q['of']} clips aligned)",
             f"speed (one core): {s['seconds_per_clip']:.3f} s/clip, real-time factor {s['real_time_factor']:.3f}x "
             f"over {s['audio_s']:.1f} s of audio; peak memory {s['peak_mib']:.0f} MiB",
             "sentence aspect   PCC     SCC     MAE    (mean predictor's MAE)"]
    for key, m in q["sentence"].items():
        lines.append(f"  {key:<14} {_fmt(m['pcc']):>7} {_fmt(m['scc']):>7} {m['mae']:6.2f}   ({m['mean_mae']:.2f})")
    flag = q["word"]["flagged"]
    lines += [f"word accuracy PCC {_fmt(q['word']['pcc'])} (n={q['word']['n']}); flagged words (< 7) F1 {_fmt(flag['f1'])} "
              f"(precision {_fmt(flag['precision'])}, recall {_fmt(flag['recall'])}; {flag['expected']} flagged by the experts)",
              f"phone PCC {_fmt(q['phone']['pcc'])} (n={q['phone']['n']})",
              "published anchors (GOPT, whole speechocean762 test set): " + ", ".join(f"{k} {v}" for k, v in ANCHORS.items()),
              f"leave one speaker out over all {next(iter(result['loso'].values()))['n']} real clips (map fitted on the "
              "other speakers' real and weak clips):",
              "sentence aspect   PCC  (within each speaker)  MAE    (mean predictor's MAE)"]
    for key, m in result["loso"].items():
        lines.append(f"  {key:<14} {_fmt(m['pcc']):>7} ({_fmt(m['within'])})           {m['mae']:6.2f}   ({m['mean_mae']:.2f})")
    w = result["weak"]
    lines.append(f"weak readings of speakers {', '.join(HELD_OUT_SPEAKERS)} (1 or 2 words replaced; {w['clips']} clips, "
                 f"{w['refused']} of them refused as not the sentence):")
    for key in ("accuracy", "total"):
        m = w[key]
        lines.append(f"  {key:<14} scored below the real reading {m['below_real']}/{w['clips']}; mean {m['mean']:.2f} "
                     f"(label {m['label']:.2f}); PCC over real and weak clips {_fmt(m['pcc_with_real'])}")
    lines.append(f"  replaced words flagged (< 7): {w['replaced_flagged'][0]}/{w['replaced_flagged'][1]}; "
                 f"real words the experts scored 7 or more flagged: {w['good_flagged'][0]}/{w['good_flagged'][1]}")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--write-default", action="store_true", help="rewrite assets/scorer_default_map.json from this fit")
    args = parser.parse_args()
    from pipeline.fileio import atomic_write_json
    from pipeline.scoring import engine
    from pipeline.scoring.augment import is_weak, weak_entries
    from pipeline.scoring.fit import fit_items, kaldi_entries
    from pipeline.scoring.score_map import fit_map
    from pipeline.scoring.scorer import DEFAULT_MAP_PATH, Scorer

    data = _data_dir()
    lexicon = engine.read_lexicon(data / "resource" / "lexicon.txt")
    entries = kaldi_entries(data)
    real, weak = fit_items(entries, lexicon), fit_items(weak_entries(entries), lexicon)
    fitting = [i for i in real + weak if i["speaker"] in FIT_SPEAKERS]
    held = [i for i in real if i["speaker"] in HELD_OUT_SPEAKERS]
    score_map = fit_map(fitting, DEFAULT_NOTE, default=True)
    if args.write_default:
        atomic_write_json(DEFAULT_MAP_PATH, score_map.to_dict())
    result = {"fit_clips": len(fitting),
              "quality": quality(score_map, held, sum(e[4] in HELD_OUT_SPEAKERS for e in entries),
                                 [i for i in fitting if not is_weak(i)]),
              "loso": leave_one_speaker_out(real, weak),
              "weak": weak_readings(score_map, held, [w for w in weak if w["speaker"] in HELD_OUT_SPEAKERS]),
              "speed": speed(Scorer(score_map, lexicon), [e for e in entries if e[4] in HELD_OUT_SPEAKERS]),
              "cv": score_map.cv_summary()}
    print(json.dumps(result, default=str) if args.json else report(result) + "\ncross-validated on the fitting group:\n"
          + result["cv"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
