"""Grounding: do the figures tell a tutor that listens from one that does not? Constructed answers
first (a tutor ignoring the audio, one copying the experts, one blaming TH everywhere), then the
probes asked through `evaluate` (a scripted tutor, then the tiny random Gemma 3n end to end)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from pipeline.conversation.feedback import feedback_from_scores
from pipeline.tutor import evaluate as ev
from pipeline.tutor.cli import evaluate_main
from pipeline.tutor import grounding as gr


def scores(total, words=()):
    """Expert scores in speechocean762's layout: a sentence total and flagged words [(text, accuracy, phones)]."""
    return {"accuracy": total, "fluency": 8, "prosodic": 8, "total": total,
            "words": [{"text": text, "accuracy": acc, "phones": " ".join(phones), "phones-accuracy": [0] * len(phones)}
                      for text, acc, phones in words]}


SENTENCES = ["WE CALL IT BEAR", "THE BUS IS LATE", "I LIKE RED APPLES", "THANK YOU", "ZERO ONE TWO", "SHE SELLS FISH"]
# Two learners per sentence; the experts score them differently (pairs 0/1, 2/3, ...).
CLIPS = [{"id": f"c{i}", "target_text": SENTENCES[i // 2], "speaker": "ann" if i % 2 == 0 else "bob",
          "reference": scores(3 + (i % 2) * 4 + (i // 2) % 2, [(SENTENCES[i // 2].split()[0], 4, ("W",))])}
         for i in range(12)]


def records(answer_for):
    """Grounding records for every clip when the tutor answers `answer_for(clip, sentence, heard)` where
    `heard` is the clip whose audio it got (None for noise)."""
    out = []
    for index, clip in enumerate(CLIPS):
        partner = CLIPS[index ^ 1]
        other = CLIPS[(index + 2) % len(CLIPS)]["target_text"]
        out.append({
            "id": clip["id"], "target_text": clip["target_text"], "reference": clip["reference"],
            "answer": answer_for(clip, clip["target_text"], clip),
            "silence": {"answer": answer_for(clip, clip["target_text"], None)},
            "other_clip": {"id": partner["id"], "reference": partner["reference"],
                           "answer": answer_for(clip, clip["target_text"], partner)},
            "other_sentence": {"target_text": other, "answer": answer_for(clip, other, clip)},
        })
    return out


def deaf_tutor(clip, sentence, heard):
    """Answers from the sentence alone: the same words whatever it hears."""
    first = sentence.split()[0]
    return f"Scores (0-10): accuracy 6, fluency 7, prosody 7, total 6\nWords to practise: {first} 5/10\nAdvice: slow down."


def expert_copying_tutor(clip, sentence, heard):
    """Says exactly what the experts said about the clip it heard; noise gets the lowest score."""
    if heard is None:
        return "Scores (0-10): accuracy 0, fluency 0, prosody 0, total 0\nWords to practise: none\nAdvice: I hear no speech."
    return feedback_from_scores(sentence, heard["reference"])


def test_a_tutor_that_ignores_the_audio_changes_nothing_and_is_at_chance():
    result = gr.grounding_metrics(records(deaf_tutor))
    assert result["silence"] == {"n": 12, "changed_fraction": 0.0}
    assert result["other_clip"]["n"] == 12 and result["other_clip"]["changed_fraction"] == 0.0
    assert result["other_clip"]["score_pairs"] == 12  # every pair's experts disagree
    assert result["other_clip"]["score_sign_agreement"] == gr.CHANCE
    assert result["other_clip"]["score_sign_agreement_ci"] == [0.5, 0.5]
    # Given another sentence it flags that sentence's own first word: nothing invented.
    assert result["other_sentence"]["flagged_not_in_sentence"] == 0.0
    assert "not yet told apart from chance" in gr.grounding_text(result)


def test_nothing_read_gives_no_agreement_and_no_invented_words_figure():
    """Issue 32 leftovers (no figure for missing data): a tutor none of whose answers could be read showed "its
    scores follow the experts' differences in 50 % of 12 pairs" and "named a word that is not in it in 0 % of
    answers". Neither is measured: both are None and the words leave them out."""
    result = gr.grounding_metrics(records(lambda clip, sentence, heard: "zzz"))
    assert result["other_clip"]["score_sign_agreement"] is None and result["other_clip"]["score_pairs"] == 0
    assert result["other_clip"]["score_sign_agreement_ci"] is None
    assert result["other_sentence"]["flagged_not_in_sentence"] is None
    text = gr.grounding_text(result) or ""
    assert "50 %" not in text and "named a word" not in text and "0 %" in text  # answers unchanged: that was read


def test_a_tutor_that_copies_the_experts_follows_every_difference():
    result = gr.grounding_metrics(records(expert_copying_tutor))
    assert result["silence"]["changed_fraction"] == 1.0
    assert result["other_clip"]["changed_fraction"] == 1.0
    assert result["other_clip"]["score_sign_agreement"] == 1.0
    assert result["other_clip"]["score_sign_agreement_ci"] == [1.0, 1.0]
    # Its flagged word comes from the clip it heard: with another sentence it names a word not in it.
    assert result["other_sentence"]["flagged_not_in_sentence"] == 1.0
    text = gr.grounding_text(result)
    assert "change with the recording in 100 % of clips" in text and "100 % of 12 pairs" in text
    assert "chance" in text and "not yet told apart" not in text


def test_a_tutor_that_moves_the_wrong_way_scores_zero_and_ties_count_half():
    assert gr.sign_agreement(5, 7, +2) == 1.0
    assert gr.sign_agreement(7, 5, +2) == 0.0
    assert gr.sign_agreement(6, 6, -3) == 0.5
    assert gr.sign_agreement(None, 6, -3) == 0.5  # an unparsed answer gives no direction

    def contrary(clip, sentence, heard):
        """Scores each clip 10 - the experts' total: the better reading gets the lower score."""
        if heard is None:
            return deaf_tutor(clip, sentence, heard)
        reference = heard["reference"]
        return feedback_from_scores(sentence, dict(reference, total=10 - reference["total"]))

    assert gr.grounding_metrics(records(contrary))["other_clip"]["score_sign_agreement"] == 0.0


def test_pairs_the_experts_score_alike_are_left_out_of_the_sign_agreement():
    same = [dict(r, reference=scores(6)) for r in records(expert_copying_tutor)]
    for r in same:
        r["other_clip"] = dict(r["other_clip"], reference=scores(6))
    result = gr.grounding_metrics(same)
    assert result["other_clip"]["score_pairs"] == 0 and result["other_clip"]["score_sign_agreement"] is None
    assert result["other_clip"]["score_sign_agreement_ci"] is None


def test_a_tutor_flagging_th_everywhere_shows_in_the_per_phone_table():
    items = []
    for clip in CLIPS:
        answer = ("Scores (0-10): accuracy 6, fluency 7, prosody 7, total 6\n"
                  f"Words to practise: {clip['target_text'].split()[0]} 3/10 (TH as D)\nAdvice: tongue between the teeth.")
        items.append({"answer": answer, "reference": clip["reference"], "target_text": clip["target_text"]})
    table = gr.phone_table(items)
    th = next(row for row in table if row["phone"] == "TH")
    assert table[0]["phone"] == "TH"
    assert th["tutor_clips"] == 12 and th["expert_clips"] == 0 and th["precision"] == 0.0 and th["recall"] is None
    w = next(row for row in table if row["phone"] == "W")
    assert w["expert_flags"] == 12 and w["tutor_flags"] == 0 and w["recall"] == 0.0
    assert [row["phone"] for row in gr.overblamed_phones(table)] == ["TH"]
    assert "TH is flagged in 12 clips, the experts flag it in 0" in gr.blame_summary({"per_phone": table})
    unflagged = [dict(row, tutor_clips=0) for row in table]  # a tutor that flags nothing lists no phone as "flagged most"
    assert "phones the tutor flags: none" in gr.blame_summary({"per_phone": unflagged})
    assert "flags most" not in gr.blame_summary({"per_phone": unflagged})


def test_the_phone_table_counts_agreement_per_clip():
    items = [{"answer": feedback_from_scores(c["target_text"], c["reference"]), "reference": c["reference"],
              "target_text": c["target_text"]} for c in CLIPS]
    (w,) = gr.phone_table(items)
    assert (w["phone"], w["tutor_flags"], w["expert_flags"], w["agreed"], w["precision"], w["recall"]) == ("W", 12, 12, 12, 1.0, 1.0)
    unparsed = [dict(i, answer="I could not hear you.") for i in items]
    assert gr.phone_table(unparsed)[0]["tutor_flags"] == 0  # an unparsed answer flags nothing


def test_learners_judged_worst_come_first():
    from pipeline.tutor.metrics import evaluate_answers

    items = []
    for clip in CLIPS:
        told = 9 if clip["speaker"] == "bob" else clip["reference"]["total"]  # lenient with bob, exact with ann
        items.append({"id": clip["id"], "target_text": clip["target_text"], "reference": clip["reference"],
                      "answer": feedback_from_scores(clip["target_text"], dict(clip["reference"], total=told))})
    per_clip = evaluate_answers(items)["per_clip"]
    table = gr.learner_table(per_clip, {c["id"]: c["speaker"] for c in CLIPS})
    assert [row["speaker"] for row in table] == ["bob", "ann"]
    assert table[1]["total_mae"] == 0.0 and table[0]["total_mae"] > 0 and table[0]["total_bias"] > 0
    assert table[0]["clips"] == 6 and table[0]["unparsed"] == 0


def test_probes_pair_another_learner_of_the_same_sentence_and_another_sentence():
    eval_rows = [{"id": "a1", "speaker": "ann", "target_text": "We call it bear."},
                 {"id": "a2", "speaker": "ann", "target_text": "Thank you"}]
    pool = eval_rows + [{"id": "b1", "speaker": "bob", "target_text": "WE CALL IT BEAR", "split": "train"},
                        {"id": "a3", "speaker": "ann", "target_text": "thank you", "split": "train"}]
    plan = gr.plan_probes(eval_rows, [dict(r, split=r.get("split", "eval")) for r in pool])
    assert plan["a1"] == {"other_clip": "b1", "other_sentence": "Thank you"}
    assert plan["a2"] == {"other_clip": None, "other_sentence": "We call it bear."}  # only ann read it


def test_probe_noise_has_the_level_and_length_and_passes_the_audio_checks():
    from pipeline.data.audio import load_audio

    noise = gr.probe_noise(16000)
    assert noise.dtype == np.float32 and noise.size == 16000
    assert 20 * np.log10(np.sqrt(np.mean(noise.astype(np.float64) ** 2))) == pytest.approx(gr.PROBE_NOISE_DBFS, abs=0.01)
    assert load_audio((16000, noise)).duration_s == pytest.approx(1.0)


# ----------------------------------------------------------------------------- through evaluate


def _two_learners_one_sentence_each(speechocean_dir: Path, dest: Path, per_speaker: int = 3) -> Path:
    """A Kaldi folder of real clips where speaker 0001's i-th clip reads speaker 0003's i-th sentence
    (the mini subset has no sentence read twice); expert scores are each clip's own."""
    dest.mkdir(parents=True)
    (dest / "WAVE").symlink_to(speechocean_dir / "WAVE")
    shutil.copytree(speechocean_dir / "resource", dest / "resource")
    lines = {}
    for split in ("train", "test"):
        ids = [line.split("\t")[0] for line in (speechocean_dir / split / "text").read_text().splitlines()][:per_speaker]
        texts = dict(line.split("\t", 1) for line in (speechocean_dir / split / "text").read_text().splitlines())
        wavs = dict(line.split("\t", 1) for line in (speechocean_dir / split / "wav.scp").read_text().splitlines())
        lines[split] = [(utt, texts[utt], wavs[utt]) for utt in ids]
    mix = dest / "mix"
    mix.mkdir()
    rows = [(utt, test_text, wav, "0001") for (utt, _, wav), (_, test_text, _) in zip(lines["train"], lines["test"])]
    rows += [(utt, text, wav, "0003") for utt, text, wav in lines["test"]]
    (mix / "text").write_text("".join(f"{u}\t{t}\n" for u, t, _, _ in rows))
    (mix / "wav.scp").write_text("".join(f"{u}\t{w}\n" for u, _, w, _ in rows))
    (mix / "utt2spk").write_text("".join(f"{u} {s}\n" for u, _, _, s in rows))
    return mix


@pytest.fixture()
def paired_workspace(tmp_path, speechocean_dir, tiny_model_dir):
    from pipeline.data.dataset import build_dataset
    from pipeline.data.importers import import_folder
    from pipeline.workspace import Workspace

    ws = Workspace(tmp_path / "ws")
    import_folder(ws, _two_learners_one_sentence_each(speechocean_dir, tmp_path / "corpus"), format="kaldi")
    build_dataset(ws, str(tiny_model_dir), eval_fraction=0.5, seed=0, max_length=2048)
    return ws


class ScriptedTutor:
    """Stands in for `pipeline.tutor.infer.Tutor` in `evaluate`: answers what the experts said about
    the clip it actually receives (recognised by its samples), or a fixed answer for anything else."""

    model_id, device, quantization, tiny_random_model = "scripted", "cpu", "none", False

    def __init__(self, ws, listens: bool):
        from pipeline.data.audio import load_audio
        from pipeline.data.dataset import load_built_dataset

        self.listens, self.asked = listens, []
        self.by_audio = {}
        data = load_built_dataset(ws)
        for name in data:
            for row in data[name]:
                self.by_audio[load_audio(row["audio_wav"]).samples.tobytes()] = json.loads(row["scores"])

    def feedback(self, audio, target_text, *, max_new_tokens, stop=None):
        from types import SimpleNamespace

        from pipeline.data.audio import load_audio

        heard = self.by_audio.get(load_audio(audio).samples.tobytes())
        self.asked.append((target_text, heard is not None))
        if self.listens and heard is not None:
            return SimpleNamespace(text=feedback_from_scores(target_text, heard))
        return SimpleNamespace(text="Scores (0-10): accuracy 5, fluency 5, prosody 5, total 5\nWords to practise: none")


@pytest.mark.parametrize("listens", [True, False])
def test_evaluate_asks_every_probe_and_tells_a_listening_tutor_from_a_deaf_one(paired_workspace, monkeypatch, listens):
    from pipeline.tutor import infer

    tutor = ScriptedTutor(paired_workspace, listens)
    monkeypatch.setattr(infer, "load_tutor", lambda *a, **k: tutor)
    seen = []
    result = ev.evaluate_tutor(paired_workspace, "scripted", grounding=True,
                               progress=lambda done, total, message, checks: seen.append((done, total, *checks)))
    g = result["grounding"]
    clips = result["clips"]
    assert clips == 3 and g["silence"]["n"] == 3 and g["other_clip"]["n"] == 3 and g["other_sentence"]["n"] == 3
    assert len(tutor.asked) == 3 + 3 * 3  # the answers, then noise, the other learner, another sentence per clip
    # The recordings and the listening checks counted apart (issue 32 leftovers: "88 answered" beside 22
    # recordings), planned from the start so a bar over both never reaches 100 % early or falls back.
    assert seen[-1] == (3, 3, 9, 9) and all(total == 3 for _, total, _, _ in seen)
    assert all(checks_total == 9 for *_, checks_total in seen)
    work = [done + checks for done, _, checks, _ in seen]
    assert work == sorted(work) and all(w < 12 for w in work[:-1]), "100 % before the last answer"
    if listens:
        assert g["silence"]["changed_fraction"] == 1.0 and g["other_clip"]["changed_fraction"] > 0
        assert g["other_clip"]["score_sign_agreement"] == 1.0
    else:
        assert g["silence"]["changed_fraction"] == 0.0 and g["other_clip"]["changed_fraction"] == 0.0
        assert g["other_clip"]["score_sign_agreement"] == gr.CHANCE
    assert g["other_clip"]["score_pairs"] >= 1
    assert [c["other_clip"]["speaker"] for c in result["grounding_clips"]] == ["0001"] * 3 or \
        [c["other_clip"]["speaker"] for c in result["grounding_clips"]] == ["0003"] * 3
    assert result["per_phone"] is not None and {r["speaker"] for r in result["per_learner"]} <= {"0001", "0003"}


@pytest.mark.slow
def test_evaluate_grounding_end_to_end_on_the_tiny_model(paired_workspace, tiny_model_dir, capsys):
    """The real tutor path (tiny random Gemma 3n, CPU): `evaluate --grounding --json` has every figure."""
    code = evaluate_main(["--workspace", str(paired_workspace.root), "--model", str(tiny_model_dir), "--device", "cpu",
                    "--quantization", "none", "--max-new-tokens", "4", "--grounding", "--json", "--no-save"])
    assert code == 0
    result = json.loads(capsys.readouterr().out)
    g = result["grounding"]
    assert set(g) == {"silence", "other_clip", "other_sentence"}
    assert set(g["silence"]) == {"n", "changed_fraction"}
    assert {"n", "changed_fraction", "score_sign_agreement", "score_sign_agreement_ci"} <= set(g["other_clip"])
    assert set(g["other_sentence"]) == {"n", "changed_fraction", "flagged_not_in_sentence"}
    assert g["silence"]["n"] == g["other_clip"]["n"] == g["other_sentence"]["n"] == result["clips"] == 3
    assert 0.0 <= g["silence"]["changed_fraction"] <= 1.0
    # The random model's answers never parse: no scores, every pair a tie, exactly chance.
    assert g["other_clip"]["score_sign_agreement"] in (gr.CHANCE, None)
    assert isinstance(result["per_phone"], list) and len(result["per_learner"]) == 1


def test_a_judge_job_asks_the_probes_and_the_judge_tab_says_it_in_words(paired_workspace, monkeypatch):
    """The Judge tab's tick box reaches the job (job.json), the job process's `run_job` asks the probes,
    and the tab's words name what the figures say."""
    from ui import judge_view
    from pipeline import jobs
    from pipeline.tutor import eval_jobs, infer

    started = eval_jobs.start_job(paired_workspace, [{"model": "scripted"}], grounding=True, python="/bin/true")
    jobs._CHILDREN[started["pid"]].wait(timeout=30)  # the stand-in process exits at once; run it here
    job = json.loads((Path(started["job_dir"]) / "job.json").read_text())
    assert job["grounding"] is True
    monkeypatch.setattr(infer, "load_tutor", lambda *a, **k: ScriptedTutor(paired_workspace, listens=False))
    assert eval_jobs.run_job(paired_workspace, started["job"])["status"] == "completed"
    (saved,) = ev.saved_evaluations(paired_workspace)
    assert saved["grounding"]["silence"]["changed_fraction"] == 0.0
    words = judge_view.hearing_markdown([saved])
    assert "Does the tutor hear the learner?" in words and "change with the recording in 0 % of clips" in words
    assert judge_view.hearing_markdown([{**saved, "grounding": None, "per_phone": [], "per_learner": []}]) == ""


def test_the_judge_words_point_at_a_phone_blamed_everywhere_and_the_learner_judged_worst():
    from ui import judge_view

    table = [{"phone": "TH", "tutor_flags": 12, "expert_flags": 0, "agreed": 0, "precision": 0.0, "recall": None,
              "tutor_clips": 12, "expert_clips": 0, "clips": 12}]
    learners = [{"speaker": "bob", "clips": 6, "unparsed": 0, "total_mae": 2.5, "total_bias": 2.5, "words_f1": None},
                {"speaker": "ann", "clips": 6, "unparsed": 0, "total_mae": 0.0, "total_bias": 0.0, "words_f1": None}]
    words = judge_view.hearing_markdown([{"model": "m", "run": "r1", "per_phone": table, "per_learner": learners}])
    assert "**TH** in 12 of 12 clips, the experts in 0" in words
    assert "learner **bob** least like the experts: too kind, by 2.5 points" in words
