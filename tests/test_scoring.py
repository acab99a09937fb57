"""The classical scorer (pipeline/scoring/): real clips align and score, the template round-trips, every bad
input gets its documented outcome, the map stays monotone, and a fitted map never sees an eval-split clip.

One default scorer is shared by the module (pocketsphinx loads once, each clip aligns in about 0.15 s)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from pipeline.conversation.feedback import parse_feedback, render_feedback
from pipeline.errors import SampleError, ScoringError
from pipeline.scoring import engine
from pipeline.scoring.scorer import SCORER_MODEL_ID, Scorer, ScorerTutor, load_default_map, load_scorer

PACK = Path(__file__).resolve().parent.parent / "sample_data" / "speechocean762-pack"


def _pack_clips() -> list[tuple[Path, str]]:
    texts = dict(line.split("\t", 1) for line in (PACK / "text").read_text(encoding="utf-8").splitlines() if line.strip())
    return [(PACK / "WAVE" / f"SPEAKER{utt[1:5]}" / f"{utt}.WAV", text.strip()) for utt, text in sorted(texts.items())]


@pytest.fixture(scope="module")
def scorer() -> Scorer:
    return load_scorer(None)


@pytest.fixture(scope="module")
def pack_scores(scorer):
    return [(text, scorer.score(path, text)) for path, text in _pack_clips()]


def test_every_real_clip_of_the_sample_pack_aligns_and_scores(pack_scores):
    assert len(pack_scores) == 8
    for text, clip in pack_scores:
        assert clip.scored, (text, clip.reason)
        assert set(clip.scores) == {"accuracy", "fluency", "prosody", "total"}
        assert all(0 <= v <= 10 for v in clip.scores.values())
        assert [w["word"].upper() for w in clip.words] == engine.prompt_words(text)
        for word in clip.words:
            assert word["scored"] and 0 <= word["accuracy"] <= 10 and word["phones"]
            assert all(0 <= p["accuracy"] <= 2 and p["duration_s"] > 0 for p in word["phones"])
            starts = [p["start_s"] for p in word["phones"]]
            assert starts == sorted(starts) and starts[0] == pytest.approx(word["start_s"])
        assert "Default map fitted on the sample data" in clip.notes[0]  # the map's provenance goes with it


def test_the_answer_is_the_template_and_parse_feedback_reads_it_back_unchanged(pack_scores):
    for _, clip in pack_scores:
        parsed = parse_feedback(clip.text)
        assert render_feedback(parsed) == clip.text
        assert parsed.scores == {k: float(v) for k, v in clip.scores.items()}
        flagged = {w["word"].upper() for w in clip.words if w["accuracy"] < 7 or any(p["weak"] for p in w["phones"])}
        assert set(parsed.flagged_words) == flagged
        # Only "weak" phone notes (a low GOP), never "X as Y": the phone loop names the sound heard ~1 in 12.
        assert all(heard is None for _, _, heard in parsed.phone_errors)
        assert " as " not in clip.text.splitlines()[1]


def test_a_phone_is_written_weak_only_for_a_low_gop(scorer, pack_scores):
    from pipeline.scoring.scorer import WEAK_GOP

    for _, clip in pack_scores:
        written = {(word.upper(), phone) for word, phone, _ in parse_feedback(clip.text).phone_errors}
        low = {(w["word"].upper(), p["phone"]) for w in clip.words for p in w["phones"] if p["gop"] < WEAK_GOP}
        assert written == low
    clip = dict(pack_scores)["SO TINA WENT ON TO WASHROOM"]  # its N of WENT is hardly there (GOP about -187)
    assert "WENT" in clip.text and "N weak" in clip.text
    phones = [p for w in clip.words for p in w["phones"]]
    worst, best = min(phones, key=lambda p: p["gop"]), max(phones, key=lambda p: p["gop"])
    assert worst["accuracy"] <= best["accuracy"]  # the phone map is monotone in GOP


def test_a_word_outside_every_dictionary_is_named_not_scored_and_a_lexicon_word_is_scored(scorer):
    path, _ = _pack_clips()[0]  # "WE CALL IT BEAR"
    clip = scorer.score(path, "We call it zorbleck bear")
    assert clip.scored
    missing = [w for w in clip.words if w["word"] == "zorbleck"]
    assert missing and not missing[0]["scored"] and missing[0]["note"] == "not scored: not in the dictionary"
    assert missing[0]["accuracy"] is None and not missing[0]["phones"]
    assert '"zorbleck": not scored: not in the dictionary' in clip.notes
    assert "ZORBLECK" not in parse_feedback(clip.text).flagged_words, "never a word to practise"
    assert clip.text.splitlines()[-1] == "Not checked: ZORBLECK (not in the dictionary)", "said where it is read"
    assert parse_feedback(clip.text) == parse_feedback("\n".join(clip.text.splitlines()[:-1]))
    with_lexicon = Scorer(scorer.score_map, {"zorbleck": ["IH"]}).score(path, "We call it zorbleck bear")
    word = next(w for w in with_lexicon.words if w["word"] == "zorbleck")
    assert word["scored"] and [p["phone"] for p in word["phones"]] == ["IH"]


def test_read_lexicon_takes_speechocean762s_file(speechocean_dir):
    lexicon = engine.read_lexicon(speechocean_dir / "resource" / "lexicon.txt")
    assert lexicon["ability"] == ["AH", "B", "IH", "L", "AH", "T", "IY"] and lexicon["a"] == ["AH"]
    assert engine.read_lexicon(speechocean_dir / "no-such-file.txt") == {}


@pytest.mark.parametrize("make, words", [
    (lambda: (16000, np.zeros(32000, np.int16)), "silent"),
    (lambda: (16000, (np.sin(np.arange(3200) / 5) * 8000).astype(np.int16)), "0.20 s long"),
    (lambda: (16000, (np.sin(np.arange(16000 * 31) / 5) * 8000).astype(np.int16)), "30 s"),
])
def test_a_clip_the_product_refuses_gets_one_sentence_why(scorer, make, words):
    clip = scorer.score(make(), "We call it bear")
    assert not clip.scored and words in clip.reason and clip.text == f"Not scored: {clip.reason}"
    assert clip.reason.count(". ") == 0  # one sentence
    assert "Gemma" not in clip.reason, "the limit is the product's; the scorer is no Gemma"


@pytest.mark.parametrize("text, words", [
    ("the government announced new economic policies yesterday", "does not fit the sentence"),
    ("I like apples", "does not sound like the sentence"),
])
def test_the_wrong_sentence_gets_one_sentence_why(scorer, text, words):
    path, _ = _pack_clips()[0]
    clip = scorer.score(path, text)
    assert not clip.scored and words in clip.reason and not clip.scores


def test_the_map_drops_a_feature_of_the_wrong_sign_and_clips_to_the_scale():
    from pipeline.scoring.score_map import fit_linear

    rng = np.random.default_rng(0)
    good = rng.normal(size=40)
    rows = [{"score_per_frame": g, "pause_per_word_s": g} for g in good]  # a pause feature that rises with the score
    targets = list(np.clip(7 + 2 * good, 0, 10))
    linear = fit_linear(rows, targets, [str(i % 4) for i in range(40)], ("score_per_frame", "pause_per_word_s"), (1, -1), 0, 10)
    assert linear.dropped == ["pause_per_word_s"] and linear.features == ["score_per_frame"]
    assert linear.weight[0] > 0 and linear.cv["n"] == 40 and linear.cv["mae"] < linear.cv["mean_mae"]
    assert linear.predict({"score_per_frame": 100.0}) == 10 and linear.predict({"score_per_frame": -100.0}) == 0


def test_a_weak_reading_replaces_words_of_about_the_same_length_and_lowers_the_labels():
    from pipeline.scoring.augment import REPLACED_WORD_ACCURACY, _vocabulary, replace_words, weak_scores

    text = "MARK IS GOING TO SEE ELEPHANT"
    vocabulary = _vocabulary([text, "WE CALL IT BEAR", "KATE LOVES HER COAT", "THE BUS IS COMING"])
    made = replace_words(text, 2, vocabulary, seed=3)
    assert made == replace_words(text, 2, vocabulary, seed=3)  # the same seed, the same sentence
    new_text, replaced = made
    old_words, new_words = engine.prompt_words(text), engine.prompt_words(new_text)
    assert len(replaced) == 2 and len(new_words) == len(old_words)
    assert [i for i, (a, b) in enumerate(zip(old_words, new_words)) if a != b] == replaced
    for i in replaced:
        old, new = (engine.pronounce([w])[0].phones for w in (old_words[i], new_words[i]))
        assert abs(len(old) - len(new)) <= 1 and old[0] != new[0]
    experts = {"accuracy": 9, "fluency": 8, "prosodic": 8, "total": 9,
               "words": [{"text": w, "accuracy": 10, "phones": [], "phones-accuracy": []} for w in old_words]}
    labels = weak_scores(experts, new_text, replaced)
    assert labels["accuracy"] == pytest.approx(9 - (9 - REPLACED_WORD_ACCURACY) * 2 / len(old_words), abs=0.01)
    assert labels["fluency"] is None and labels["prosodic"] is None  # pace and pauses did not change
    assert [w["accuracy"] for w in labels["words"]].count(REPLACED_WORD_ACCURACY) == 2
    assert replace_words("WE CALL", 2, vocabulary, seed=0) is None  # never a whole sentence replaced


def test_a_wholly_wrong_word_is_flagged_and_lowers_the_sentence(scorer, pack_scores):
    """Each sample clip scored against its sentence with one word replaced (what a wholly wrong word sounds like):
    the template's rule (a word below 7 is flagged) flags the replaced word in most clips, and the sentence
    accuracy never rises (measured with the shipped map: 5 of 8 flagged, 6 of 8 lower)."""
    from pipeline.conversation.feedback import LOW_WORD_ACCURACY
    from pipeline.scoring.augment import _vocabulary, replace_words

    clips = _pack_clips()
    vocabulary = _vocabulary([text for _, text in clips])
    flagged = lower = 0
    for (path, text), (_, real) in zip(clips, pack_scores):
        new_text, (index,) = replace_words(text, 1, vocabulary, seed=0)
        weak = scorer.score(path, new_text)
        assert weak.scored and weak.scores["accuracy"] <= real.scores["accuracy"], (text, new_text)
        flagged += weak.words[index]["accuracy"] < LOW_WORD_ACCURACY
        lower += weak.scores["accuracy"] < real.scores["accuracy"]
    assert flagged >= 4 and lower >= 4, (flagged, lower)


def test_the_shipped_default_map_is_labelled_and_monotone():
    score_map = load_default_map()
    assert score_map.default and "sample data" in score_map.note
    from pipeline.scoring.features import ASPECT_FEATURES

    for key, linear in score_map.sentence.items():
        signs = dict(zip(*ASPECT_FEATURES[key]))
        assert all(w * signs[f] >= 0 for f, w in zip(linear.features, linear.weight)), key
    from pipeline.scoring.features import PHONE_FEATURES, PHONE_SIGNS, WORD_FEATURES, WORD_SIGNS

    for linear, names, signs in ((score_map.word, WORD_FEATURES, WORD_SIGNS), (score_map.phone, PHONE_FEATURES, PHONE_SIGNS)):
        signs = dict(zip(names, signs))
        assert all(w * signs[f] >= 0 for f, w in zip(linear.features, linear.weight))
    # Fitted with weak readings too, the accuracy map has real slopes: a reading whose sounds match a whole
    # spread (score per frame and GOP) worse scores at least 1 point lower.
    accuracy = score_map.sentence["accuracy"]
    mean = dict(zip(accuracy.features, accuracy.mean))
    worse = {f: m - s for f, m, s in zip(accuracy.features, accuracy.mean, accuracy.scale)}
    assert accuracy.predict(mean) - accuracy.predict(worse) >= 1.0


def test_a_saved_map_with_a_wrong_sign_is_refused_and_an_old_one_is_named(tmp_path):
    from pipeline.errors import SampleError, ScoringError
    from pipeline.workspace import Workspace

    ws = Workspace(tmp_path / "ws")
    ws.scoring_dir.mkdir(parents=True)
    saved = load_default_map().to_dict() | {"default": False, "version": 1, "note": "Fitted here"}
    ws.scorer_map_path.write_text(json.dumps(saved), encoding="utf-8")
    assert "older version of the scorer, without weak readings" in load_scorer(ws).note
    saved["sentence"]["fluency"]["weight"][1] = 0.5  # more pauses, a higher fluency
    ws.scorer_map_path.write_text(json.dumps(saved), encoding="utf-8")
    with pytest.raises(ScoringError, match="wrong sign.*fluency: pause_per_word_s"):
        load_scorer(ws)


def test_the_scorer_answers_like_a_tutor(scorer):
    tutor = ScorerTutor(scorer)
    path, text = _pack_clips()[0]
    answer = tutor.feedback(str(path), text, max_new_tokens=8)
    assert answer.text.startswith("Scores (0-10):") and tutor.model_id == SCORER_MODEL_ID
    assert tutor.free_speech_feedback(str(path), "What do you like?").text.startswith("Not scored:")


def test_score_command_prints_json_with_words_phones_and_the_template(tmp_path, capsys):
    from pipeline.scoring.cli import score_main

    path, text = _pack_clips()[1]
    (tmp_path / "ws").mkdir()
    assert score_main(["--workspace", str(tmp_path / "ws"), "--audio", str(path), "--text", text, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert {"scores", "words", "text", "scored", "notes"} <= set(out) and out["scored"]
    assert out["words"][0]["phones"][0].keys() >= {"phone", "start_s", "duration_s", "accuracy", "gop"}
    assert parse_feedback(out["text"]).total == out["scores"]["total"]


@pytest.fixture(scope="module")
def built_ws(tmp_path_factory, tiny_model_dir, speechocean_dir):
    """Speaker 0003's 20 clips imported (with the corpus lexicon) and built half and half, sample by sample."""
    from pipeline.data.dataset import build_dataset
    from pipeline.data.importers import import_folder
    from pipeline.workspace import Workspace

    ws = Workspace(tmp_path_factory.mktemp("scoring") / "ws")
    import_folder(ws, speechocean_dir / "test", format="kaldi")
    build_dataset(ws, str(tiny_model_dir), eval_fraction=0.5, seed=0, max_length=2048)
    return ws


def test_the_import_keeps_the_corpus_lexicon_for_the_scorer(built_ws):
    assert "ABILITY" in built_ws.lexicon_path.read_text(encoding="utf-8")
    assert load_scorer(built_ws).lexicon["ability"]


def test_the_fitted_map_never_sees_an_eval_clip(built_ws, monkeypatch):
    from pipeline.data.dataset import build_identity
    from pipeline.errors import SampleError, ScoringError
    from pipeline.scoring import fit

    with pytest.raises(ScoringError, match="needs at least 20"):  # 10 train clips: too few, the default stays
        fit.fit_workspace(built_ws)
    assert not built_ws.scorer_map_path.exists() and load_scorer(built_ws).score_map.default
    seen = []
    real_items = fit.fit_items
    monkeypatch.setattr(fit, "fit_items", lambda entries, *a, **k: real_items([seen.append(e[0]) or e for e in entries], *a, **k))
    monkeypatch.setattr(fit, "MIN_FIT_CLIPS", 5)
    score_map = fit.fit_workspace(built_ws)
    identity = build_identity(built_ws)
    train, evals = set(identity["row_ids"]["train"]), set(identity["row_ids"]["eval"])
    seen = {clip_id.split("~")[0] for clip_id in seen}  # a weak reading `ID~wN` is made from train clip ID
    assert seen and seen <= train and not seen & evals
    assert set(score_map.build["clip_ids"]) <= train and score_map.build["fingerprint"] == identity["fingerprint"]
    assert load_scorer(built_ws).note.startswith("Classical scorer map fitted on this workspace's training split")
    # A build that lists a train clip among the eval ids is refused before anything is aligned.
    damaged = dict(identity, row_ids={"train": identity["row_ids"]["train"], "eval": [*evals, sorted(train)[0]]})
    monkeypatch.setattr("pipeline.data.dataset.build_identity", lambda ws: damaged)
    with pytest.raises(ScoringError, match="both the train and the eval split"):
        fit.fit_workspace(built_ws)


def test_score_fit_warns_when_the_saved_map_was_fitted_on_an_older_build(built_ws, capsys):
    from pipeline.errors import SampleError, ScoringError
    from pipeline.scoring.cli import score_main
    from pipeline.scoring.fit import stale_map_warning

    saved = built_ws.scorer_map_path.read_text(encoding="utf-8") if built_ws.scorer_map_path.exists() else None
    old = load_default_map().to_dict() | {"default": False, "build": {"fingerprint": "0" * 64, "clip_ids": ["a", "b"]}}
    built_ws.scoring_dir.mkdir(parents=True, exist_ok=True)
    built_ws.scorer_map_path.write_text(json.dumps(old), encoding="utf-8")
    try:
        assert "older build of the dataset" in stale_map_warning(built_ws)
        with pytest.raises(ScoringError, match="keeps the saved map fitted on the older build"):
            score_main(["--workspace", str(built_ws.root), "--fit"])  # 10 train clips: too few to refit
        assert "warning: The saved scorer map" in capsys.readouterr().err
    finally:
        if saved is None:
            built_ws.scorer_map_path.unlink()
        else:
            built_ws.scorer_map_path.write_text(saved, encoding="utf-8")
    assert saved is None or stale_map_warning(built_ws) is None  # a map fitted on this build: no warning


def test_evaluate_judges_the_scorer_like_a_model_and_the_verdict_names_it(built_ws, capsys):
    from pipeline.tutor import evaluate as ev
    from pipeline.tutor.cli import evaluate_main
    from pipeline.tutor.verdict import against_scorer, scorer_for

    assert evaluate_main(["--workspace", str(built_ws.root), "--scorer", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["model"] == SCORER_MODEL_ID and result["run"] is None and result["clips"] == 10
    assert result["unparsed"] == 0 and result["scores"]["total"]["n"] == 10 and "map" in result["note"]
    assert result["saved"] == [str(ev.evaluation_path(built_ws, result["dataset_key"], model=SCORER_MODEL_ID))]
    run = dict(result, run="r1", model="google/gemma-3n-E2B-it")
    found = scorer_for(run, ev.saved_evaluations(built_ws))
    assert found is not None and found["model"] == SCORER_MODEL_ID
    line = against_scorer(run, found)["line"]
    assert "classical scorer" in line and line.startswith("can't tell yet")  # the same figures: no difference
    assert against_scorer(run, None)["outcome"] == "no_scorer"


def test_draft_writes_feedback_for_clips_without_any_never_trained_on_until_accepted(tmp_path, tiny_model_dir):
    from pipeline.data.dataset import build_dataset
    from pipeline.data.samples import SampleLibrary
    from pipeline.scoring.drafts import accept_draft, draft_all
    from pipeline.workspace import Workspace

    ws = Workspace(tmp_path / "ws")
    (path, text), (other, other_text) = _pack_clips()[:2]
    library = SampleLibrary(ws)
    sample = library.add(path, target_text=text, feedback="", speaker="a")
    library.add(other, target_text=other_text, feedback="Scores (0-10): accuracy 8, fluency 8, prosody 8, total 8",
                speaker="b")
    result = draft_all(ws)
    assert result["drafted"] == [sample.id]
    drafts = json.loads(ws.drafts_path.read_text(encoding="utf-8"))
    assert parse_feedback(drafts[sample.id]["text"]).total is not None
    assert SampleLibrary(ws).get(sample.id).feedback == ""  # a draft is not the sample's feedback until accepted
    report = build_dataset(ws, str(tiny_model_dir), eval_fraction=0.0, max_length=2048)
    assert report.drafts == 1 and "1 draft of feedback waiting" in report.summary()
    from ui.dataset_view import summary_markdown

    assert "**Drafts:** 1 recording with draft feedback waiting" in summary_markdown(report.to_dict())
    assert sample.id not in report.row_ids["train"] + report.row_ids["eval"]  # never trained on
    edited = drafts[sample.id]["text"].replace("Advice:", "Advice: Well read.", 1)
    with pytest.raises(SampleError, match="is empty; type the feedback"):  # the box cleared: not "no draft"
        accept_draft(ws, sample.id, "  ")
    from pipeline.scoring.cli import score_main

    assert score_main(["--workspace", str(ws.root), "--accept", sample.id, "--feedback", edited]) == 0  # the CLI
    assert SampleLibrary(ws).get(sample.id).feedback == edited
    assert json.loads(ws.drafts_path.read_text(encoding="utf-8")) == {}  # accepted: no longer a draft


def test_try_answers_with_the_scorer_picked_and_labels_it(tmp_path):
    from ui.try_view import SCORER_CHOICE
    from ui.tutor_app import TutorApp

    app = TutorApp(tmp_path / "ws")
    path, text = _pack_clips()[0]
    tuned, note, base = app.try_feedback(str(path), text, SCORER_CHOICE, 16)
    assert tuned.startswith("Scores (0-10):") and render_feedback(parse_feedback(tuned)) == tuned
    assert "Classical scorer (no fine-tuning)" in note and "sample data" in note and "no base model" in base
    lists = app.train._run_lists()
    assert lists[2].choices[-1][0] == SCORER_CHOICE  # the Try tab's tutor list offers it without any run
    note = app.try_dialogue_send(str(path), "", [], SCORER_CHOICE, 16)[4]
    assert "holds no conversation" in note  # a conversation needs a trained run: said, not "no such run"
    note = app.export.export(SCORER_CHOICE, "adapter")[0]
    assert "has nothing to export" in note and "does not exist" not in note  # said, not "no such run"


def test_the_practice_page_answers_with_the_scorer_chosen(tmp_path):
    from pipeline.inbox.practice import answer_attempt, load_setup, save_setup
    from pipeline.inbox.store import Inbox
    from pipeline.workspace import Workspace

    ws = Workspace(tmp_path / "ws")
    path, text = _pack_clips()[0]
    save_setup(ws, SCORER_MODEL_ID, [text])
    assert load_setup(ws).run == SCORER_MODEL_ID
    grown = []
    answer = answer_attempt(ws, str(path), 0, student="kim", consent=True, on_text=grown.append)
    assert answer["text"].startswith("Scores (0-10):") and grown == [answer["text"]]
    assert "sample data" in answer["note"] and not answer["tiny_random_model"]
    kept = Inbox(ws).get(answer["attempt"])
    assert kept.model == SCORER_MODEL_ID and kept.answer == answer["text"]


def test_the_dataset_tab_drafts_shows_and_accepts_feedback(tmp_path):
    from pipeline.data.samples import SampleLibrary
    from ui.tutor_app import TutorApp

    app = TutorApp(tmp_path / "ws")
    path, text = _pack_clips()[0]
    sample = SampleLibrary(app.ws).add(path, target_text=text, feedback="")
    handlers = app.dataset.drafts
    assert "No draft picked" in handlers.accept(None, "x")[0]
    status, pick = handlers.draft()
    assert "Drafted feedback for 1 recording" in status and "**draft**" in status and "sample data" in status
    assert pick["value"] == sample.id and pick["choices"][0][1] == sample.id
    draft, audio, sentence = handlers.show(sample.id)
    assert draft.startswith("Scores (0-10):") and audio.endswith(".wav") and text in sentence
    status, pick = handlers.accept(sample.id, draft + " Well done.")
    assert status.startswith("✓ Accepted") and pick["choices"] == [] and pick["value"] is None
    assert SampleLibrary(app.ws).get(sample.id).feedback.endswith("Well done.")
    assert "nothing to draft" in handlers.draft()[0]


def test_the_api_lists_and_answers_with_the_scorer(tmp_path):
    """`serve --scorer`: the Classical scorer (no fine-tuning) in the model list, labelled, answering a clip."""
    import base64
    import threading

    import openai
    import uvicorn

    from pipeline.serving.app import create_app
    from pipeline.serving.cli import bind
    from pipeline.serving.models import load_served
    from pipeline.serving.protocol import RequestLimits
    from tests.processes import wait_until

    served = load_served(tmp_path / "ws", [], scorer=True, queue_size=1)
    assert list(served) == [SCORER_MODEL_ID]
    sock = bind("127.0.0.1", 0)
    app = create_app(served, api_key="k" * 24, max_body_bytes=4_000_000,
                     limits=RequestLimits(max_clips=2, max_audio_s=30.0, max_text_chars=400))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        wait_until(lambda: server.started, timeout_s=60)
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{sock.getsockname()[1]}/v1", api_key="k" * 24, max_retries=0)
        card = client.models.list().data[0].model_dump()
        assert card["id"] == SCORER_MODEL_ID and card["label"] == "Classical scorer (no fine-tuning)"
        path, text = _pack_clips()[0]
        audio = {"type": "input_audio", "input_audio": {"data": base64.b64encode(path.read_bytes()).decode(), "format": "wav"}}
        reply = client.chat.completions.create(model=SCORER_MODEL_ID, messages=[
            {"role": "user", "content": [audio, {"type": "text", "text": text}]}])
        answer = reply.choices[0].message.content
        assert answer.startswith("Scores (0-10):") and render_feedback(parse_feedback(answer)) == answer
        assert "sample data" in reply.model_dump()["tutor"]["note"]
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        served[SCORER_MODEL_ID].worker.close(timeout_s=10)
        sock.close()


def test_accented_words_stay_whole_and_are_found_folded(scorer):
    """A new user's finding: "résumé" was scored as the words R and SUM, "café" looked up as "caf"."""
    assert engine.prompt_words("Un café, s'il vous plaît: résumé Straße naïve Zoë 3 cats") == [
        "Un", "café", "s'il", "vous", "plaît", "résumé", "Straße", "naïve", "Zoë", "3", "cats"]
    found = engine.pronounce(["café", "RÉSUMÉ", "naïve", "Zoë"], {})
    assert all(p.source == "cmudict" for p in found), found
    assert engine.pronounce(["Ærøskøbing"], {"aeroskobing": ["EH", "R"]})[0].source == "lexicon"
    path, _ = _pack_clips()[0]  # "WE CALL IT BEAR"
    clip = scorer.score(path, "We call it café")
    assert [w["word"] for w in clip.words] == ["We", "call", "it", "café"] and all(w["scored"] for w in clip.words)


def test_a_bad_lexicon_line_is_named_and_left_out_never_a_crash(tmp_path, scorer):
    """A new user's finding: a phone typo (`QQ`) crashed scoring, drafting and the app with a RuntimeError."""
    lexicon_path = tmp_path / "lexicon.txt"
    lexicon_path.write_bytes("ZORBLAX Z QQ R B L AE K S\nGLORP G L AO1 R P  # a teacher's word\nLONELY\n"
                             "CAFÉ K AE F EY\n".encode("cp1252"))  # saved by an "ANSI" editor
    problems = []
    lexicon = engine.read_lexicon(lexicon_path, problems)
    assert lexicon == {"glorp": ["G", "L", "AO", "R", "P"], "cafe": ["K", "AE", "F", "EY"]}, lexicon
    assert len(problems) == 2 and "line 1" in problems[0] and "`QQ` is not an ARPAbet phone" in problems[0], problems
    assert "line 3" in problems[1] and "needs its phones" in problems[1]
    broken = Scorer(scorer.score_map, {"zorblax": ["Z", "QQ", "R"]}, problems)  # a lexicon not read by read_lexicon
    path, _ = _pack_clips()[0]
    clip = broken.score(path, "We call it zorblax")
    assert clip.scored and not next(w for w in clip.words if w["word"] == "zorblax")["scored"]
    assert problems[0] in clip.notes
    (tmp_path / "utf16.txt").write_bytes(b"\xff\xfe" + "GLORP G L AO R P\n".encode("utf-16-le"))
    assert engine.read_lexicon(tmp_path / "utf16.txt") == {"glorp": ["G", "L", "AO", "R", "P"]}


def test_numbers_are_named_not_scored_with_the_fix(scorer):
    path, _ = _pack_clips()[0]
    clip = scorer.score(path, "We call it bear 2")
    assert clip.text.splitlines()[-1] == "Not checked: 2 (a number: write it in words)"
    digits = scorer.score(path, "0 3 5 1")
    assert not digits.scored and "write numbers in words (three, not 3)" in digits.text


def test_the_score_command_fails_for_what_it_cannot_score_and_for_a_mistyped_workspace(tmp_path, capsys):
    from pipeline.scoring.cli import score_main

    (tmp_path / "ws").mkdir()
    assert score_main(["--workspace", str(tmp_path / "ws"), "--audio", str(tmp_path / "nope.wav"), "--text", "hi"]) == 1
    assert capsys.readouterr().out.startswith("Not scored:")
    path, text = _pack_clips()[0]
    with pytest.raises(ScoringError, match="There is no workspace at .*wsx"):
        score_main(["--workspace", str(tmp_path / "wsx"), "--audio", str(path), "--text", text])


def test_judging_never_grades_the_scorer_on_clips_its_map_was_fitted_on(built_ws, monkeypatch):
    """A new user's finding: after a rebuild moved learners between the splits, the Judge scored the eval split
    with a map fitted on some of those very clips, and said nothing."""
    from pipeline.data.dataset import build_identity
    from pipeline.errors import SampleError, ScoringError
    from pipeline.scoring import fit
    from pipeline.tutor.evaluate import evaluate_tutor

    saved = built_ws.scorer_map_path.read_text(encoding="utf-8") if built_ws.scorer_map_path.exists() else None
    evals = build_identity(built_ws)["row_ids"]["eval"]
    leaked = load_default_map().to_dict() | {"default": False, "build": {"fingerprint": "0" * 64, "clip_ids": evals[:3]}}
    built_ws.scoring_dir.mkdir(parents=True, exist_ok=True)
    try:
        built_ws.scorer_map_path.write_text(json.dumps(leaked), encoding="utf-8")
        with pytest.raises(ScoringError, match=r"fitted on 3 clips judged here .* fitting it again failed: Only"):
            evaluate_tutor(built_ws, scorer=True)  # 10 train clips: too few to fit again
        monkeypatch.setattr(fit, "MIN_FIT_CLIPS", 5)
        result = evaluate_tutor(built_ws, scorer=True, limit=2)
        assert "fitted again before this judgement: the saved map had been fitted on 2 clips judged here" in result["note"]
        assert fit.clips_seen_by_map(built_ws, evals) == []
    finally:
        if saved is None:
            built_ws.scorer_map_path.unlink(missing_ok=True)
        else:
            built_ws.scorer_map_path.write_text(saved, encoding="utf-8")


@pytest.mark.parametrize("text", ["A", "We", "bear"])
def test_a_sentence_that_is_only_part_of_what_was_said_is_not_scored(scorer, text):
    """A new user's finding: "A" or "We" typed for a clip of "WE CALL IT BEAR" scored "Excellent reading"."""
    path, full = _pack_clips()[0]
    clip = scorer.score(path, text)
    assert not clip.scored and "holds more than the sentence" in clip.reason and "whole sentence" in clip.reason
    assert scorer.score(path, full).scored
