"""The whole tutoring dataset through every command on the tiny model: a chat-format JSONL of 3 dialogues
and 4 free-speech rows (real speechocean762 clips) -> `import --json` (each row's kind) -> `build`
(per-kind counts) -> `train` 4 steps -> `infer --kind free_speech` and a two-turn dialogue through the
Python API -> `evaluate` (every metric by kind)."""

from __future__ import annotations

import json

import pytest

from tests.kinds_data import write_tutoring_jsonl

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def trained(tmp_path_factory, speechocean_dir, tiny_model_dir):
    """(workspace, source folder, import --json result, build report) after a 4-step run `kinds`."""
    import contextlib
    import io

    from pipeline.data.cli import import_main
    from pipeline.data.dataset import build_dataset
    from pipeline.training.cli import train_main

    root = tmp_path_factory.mktemp("kinds")
    source = write_tutoring_jsonl(root / "src", speechocean_dir)
    ws = root / "ws"
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert import_main(["--workspace", str(ws), "--source", str(source), "--json"]) == 0
    imported = json.loads(out.getvalue())
    report = build_dataset(ws, str(tiny_model_dir), eval_fraction=0.3, seed=1, max_length=1024)
    with contextlib.redirect_stdout(io.StringIO()):
        code = train_main(["--workspace", str(ws), "--run", "kinds", "--model", str(tiny_model_dir), "--max-steps", "4",
                           "--grad-accum", "1", "--quantization", "none", "--max-length", "1024", "--device", "cpu",
                           "--eval-steps", "4", "--save-steps", "4"])
    assert code == 0
    return ws, source, imported, report


def test_import_reports_each_rows_kind_and_build_counts_per_kind(trained):
    ws, source, imported, report = trained
    assert imported["format"] == "chat" and imported["imported"] == 7 and imported["skipped"] == []
    assert [r["kind"] for r in imported["rows"]] == ["dialogue"] * 3 + ["free_speech"] * 4
    assert [r["source"] for r in imported["rows"]] == [f"tutoring.jsonl:{n}" for n in range(1, 8)]
    assert imported["kinds"] == {"dialogue": 3, "free_speech": 4}
    kinds = report.kinds
    assert {k: v["rows"] for k, v in kinds.items()} == {"free_speech": 4, "dialogue": 3}
    assert all(v["train"] + v["eval"] == v["rows"] and v["excluded"] == 0 for v in kinds.values())
    # a row's length counts every clip's audio positions: the 3-clip dialogue is the longest row
    assert kinds["dialogue"]["tokens"]["max"] > 3 * 188 > kinds["free_speech"]["tokens"]["max"]
    assert "dialogue: 3 rows" in report.summary() and "free_speech: 4 rows" in report.summary()
    stats = json.loads((ws / "dataset" / "build_report.json").read_text())["length_stats"]
    assert stats["max_clips"] == max(stats["row_clips"]) >= 1 and len(stats["row_clips"]) == len(stats["row_tokens"])


def test_four_training_steps_complete(trained):
    ws = trained[0]
    result = json.loads((ws / "runs" / "kinds" / "result.json").read_text())
    assert result["status"] == "completed" and result["steps"] == 4
    assert result["preflight"]["loss"] > 0
    lines = [json.loads(line) for line in (ws / "runs" / "kinds" / "progress.jsonl").read_text().splitlines()]
    assert all(line["loss"] == line["loss"] for line in lines if line.get("kind") == "train")  # no NaN


def test_infer_free_speech_on_the_command_line_and_a_two_turn_dialogue_in_python(trained, capsys):
    from pipeline.tutor.cli import infer_main
    from pipeline.tutor.infer import load_tutor

    ws, source, _, _ = trained
    clip = source.parent / "clips" / "000010089.wav"
    assert infer_main(["--workspace", str(ws), "--run", "kinds", "--kind", "free_speech", "--prompt",
                       "Describe your favourite animal.", "--audio", str(clip), "--max-new-tokens", "6", "--json"]) == 0
    answer = json.loads(capsys.readouterr().out)
    assert answer["text"] and answer["run"] == "kinds" and answer["tiny_random_model"]
    tutor = load_tutor(run="kinds", workspace=ws)
    turns = [{"role": "learner", "audio": str(source.parent / "clips" / "000010063.wav")},
             {"role": "tutor", "text": "Good sentence. Which animal do you like?"},
             {"role": "learner", "audio": str(source.parent / "clips" / "000010069.wav"), "text": "This one."}]
    reply = tutor.dialogue_reply(turns, max_new_tokens=6)
    assert reply.text and reply.new_tokens > 0 and reply.audio_duration_s > 4
    base = tutor.dialogue_reply(turns, max_new_tokens=6, use_adapter=False)
    assert base.run is None
    with pytest.raises(Exception, match="must end with a learner turn"):
        tutor.dialogue_reply(turns[:2])


def test_evaluation_splits_every_metric_by_kind(trained):
    from pipeline.tutor.evaluate import evaluate_tutor

    ws = trained[0]
    result = evaluate_tutor(ws, run="kinds", split="train", max_new_tokens=2)
    by_kind = result["by_kind"]
    assert set(by_kind) == {"free_speech", "dialogue"} & {a["kind"] for a in result["answers"]}
    tutor_turns = {a["id"]: a for a in result["answers"] if a["kind"] == "dialogue"}
    assert all(a["turn"] is not None and a["reference_feedback"] for a in tutor_turns.values())
    for metrics in by_kind.values():
        assert metrics["answers"] == metrics["chrf"]["n"] and 0 <= metrics["chrf"]["chrf"] <= 100
    assert result["clips"] == 0  # the expert-score metrics cover read-aloud rows only


def test_the_try_tab_answers_free_speech_and_keeps_a_voice_conversation(trained):
    from ui.tutor_app import TutorApp

    ws, source, _, _ = trained
    ui = TutorApp(ws)
    clips = source.parent / "clips"
    tuned, note, base = ui.try_feedback(str(clips / "000010089.wav"), "Describe your favourite animal.", "kinds", 16,
                                        "Free speech")
    assert tuned and base and "random" in note
    history, chat, audio, text, note = ui.try_dialogue_send(str(clips / "000010063.wav"), "", [], "kinds", 16)
    assert [t["role"] for t in history] == ["learner", "tutor"] and audio is None and text == ""
    history, chat, *_ = ui.try_dialogue_send(str(clips / "000010069.wav"), "Is this right?", history, "kinds", 16)
    # the history is kept the way training saw a dialogue: learner clips (and text), tutor replies
    assert [t["role"] for t in history] == ["learner", "tutor", "learner", "tutor"]
    assert history[2]["text"] == "Is this right?" and history[0]["audio"].endswith("000010063.wav")
    assert [m["role"] for m in chat] == ["user", "assistant", "user", "user", "assistant"]
    assert ui.try_dialogue_start_over()[:2] == ([], [])
