"""A Gemma 4 run answers everywhere a Gemma 3n run does (issue 30): Try, Judge (evaluate, by kind), the
grounding probes, `pipeline serve` and the students' practice page, for all three sample kinds.

One workspace for the module: real speechocean762 clips as read-aloud samples (two learners reading the same
sentences, so grounding has pairs: `tests/test_grounding.py`'s corpus) and the tutoring JSONL's dialogues and
free-speech rows (`tests/kinds_data.py`), built for the tiny random Gemma 4 and trained 2 steps. The answers'
texts are meaningless (random weights): the tests check that each path answers, and that a served prompt is
the one training rendered (its exact token count, which for Gemma 4 grows with the clip's length).
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import threading

import pytest

from tests.kinds_data import write_tutoring_jsonl
from tests.processes import stop_process_group
from tests.test_grounding import _two_learners_one_sentence_each

pytestmark = pytest.mark.slow

RUN = "g4"
KEY = "test-key-0123456789"


@pytest.fixture(scope="module")
def g4_ws(tmp_path_factory, speechocean_dir, tiny_gemma4_dir):
    """(workspace, tutoring source folder) with every kind built for the tiny Gemma 4 and run `g4` trained."""
    from pipeline.config import TrainConfig
    from pipeline.data.dataset import build_dataset
    from pipeline.data.importers import import_folder
    from pipeline.training.train import train

    root = tmp_path_factory.mktemp("g4-kinds")
    ws = root / "ws"
    import_folder(ws, _two_learners_one_sentence_each(speechocean_dir, root / "corpus"), format="kaldi")
    source = write_tutoring_jsonl(root / "src", speechocean_dir)
    import_folder(ws, source, format="auto")
    report = build_dataset(ws, str(tiny_gemma4_dir), eval_fraction=0.5, seed=0, max_length=2048)
    assert set(report.kinds) == {"read_aloud", "free_speech", "dialogue"}, report.kinds
    config = TrainConfig(model=str(tiny_gemma4_dir), device="cpu", quantization="none", lora_rank=4, lora_alpha=8,
                         batch_size=1, grad_accum=1, max_steps=2, eval_steps=0, save_steps=0, warmup_ratio=0.0,
                         max_length=2048, seed=1)
    assert train(config, ws, RUN)["status"] == "completed"
    return ws, source


def test_try_answers_read_aloud_free_speech_and_a_dialogue(g4_ws):
    from ui.tutor_app import TutorApp

    ws, source = g4_ws
    ui = TutorApp(ws)
    clips = source.parent / "clips"
    for kind, prompt in (("Read aloud", "WE CALL IT BEAR"), ("Free speech", "Describe your favourite animal.")):
        tuned, note, base = ui.try_feedback(str(clips / "000010089.wav"), prompt, RUN, 16, kind)
        assert tuned and base and "random" in note, (kind, tuned, note)
    history, chat, *_ = ui.try_dialogue_send(str(clips / "000010063.wav"), "", [], RUN, 16)
    history, chat, *_ = ui.try_dialogue_send(str(clips / "000010069.wav"), "Is this right?", history, RUN, 16)
    assert [t["role"] for t in history] == ["learner", "tutor", "learner", "tutor"] and history[3]["text"]


def test_judge_answers_every_kind_and_the_grounding_probes_are_asked(g4_ws, capsys):
    from pipeline.tutor.cli import evaluate_main

    ws, _ = g4_ws
    kinds, grounded = set(), []
    for split in ("train", "eval"):  # the split puts each learner on one side: every kind is in one of them
        assert evaluate_main(["--workspace", str(ws), "--run", RUN, "--split", split, "--max-new-tokens", "2",
                              "--grounding", "--json", "--no-save"]) == 0
        result = json.loads(capsys.readouterr().out)
        kinds |= set(result["by_kind"])
        assert all(answer["answer"] is not None for answer in result["answers"])
        if result["clips"]:
            grounded.append(result)
    assert kinds == {"read_aloud", "free_speech", "dialogue"}, kinds
    assert grounded and all(r["grounding"]["silence"]["n"] == r["grounding"]["other_clip"]["n"] == r["clips"]
                            for r in grounded)


@pytest.fixture(scope="module")
def server(g4_ws, tmp_path_factory):
    """`python -m pipeline serve` of run `g4`; its ready line. Stopped at teardown."""
    ws, _ = g4_ws
    log = tmp_path_factory.mktemp("serve-g4") / "stderr.log"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TUTOR_INFER_THREADS": "1", "TUTOR_API_KEY": KEY}
    with open(log, "wb") as stderr:
        process = subprocess.Popen([sys.executable, "-m", "pipeline", "serve", "--workspace", str(ws), "--run", RUN,
                                    "--port", "0", "--json"], stdout=subprocess.PIPE, stderr=stderr, text=True,
                                   start_new_session=True, env=env)
    timer = threading.Timer(900, lambda: stop_process_group(process.pid))
    timer.start()
    try:
        line = process.stdout.readline()
        timer.cancel()
        assert line, f"the server exited before it was ready:\n{log.read_text(errors='replace')[-3000:]}"
        yield json.loads(line)
    finally:
        timer.cancel()
        stop_process_group(process.pid)
        process.wait(timeout=30)
        process.stdout.close()


def test_serve_answers_every_kind_with_the_prompt_training_rendered(server, g4_ws, speechocean_dir, tiny_gemma4_dir):
    openai = pytest.importorskip("openai")
    from pipeline.conversation.messages import build_dialogue_messages, build_free_speech_messages, build_messages
    from pipeline.data.audio import load_audio
    from pipeline.model.loading import load_processor

    processor = load_processor(str(tiny_gemma4_dir))
    clip_paths = [speechocean_dir / "WAVE/SPEAKER0001/000010011.WAV", speechocean_dir / "WAVE/SPEAKER0001/000010035.WAV"]
    clips = [load_audio(path).samples for path in clip_paths]

    def part(i: int) -> dict:
        return {"type": "input_audio", "input_audio": {"data": base64.b64encode(clip_paths[i].read_bytes()).decode(),
                                                       "format": "wav"}}

    def length(messages) -> int:
        inputs = processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=True,
                                               return_tensors="pt")
        return int(inputs["input_ids"].shape[1])

    client = openai.OpenAI(base_url=server["url"], api_key=KEY, max_retries=0, timeout=600)
    asks = [
        ("read_aloud", [{"role": "user", "content": [part(0), {"type": "text", "text": "WE CALL IT BEAR"}]}],
         build_messages("WE CALL IT BEAR", None, clips[0])),
        ("free_speech", [{"role": "user", "content": [part(1), {"type": "text", "text": "Describe your home."}]}],
         build_free_speech_messages("Describe your home.", None, clips[1])),
        ("dialogue", [{"role": "user", "content": [part(0)]}, {"role": "assistant", "content": "Good. Say BEAR again."},
                      {"role": "user", "content": [part(1), {"type": "text", "text": "Like this?"}]}],
         build_dialogue_messages([{"role": "learner", "clip": 0}, {"role": "tutor", "text": "Good. Say BEAR again."},
                                  {"role": "learner", "clip": 1, "text": "Like this?"}], clips)),
    ]
    seen = set()
    for kind, messages, trained_as in asks:
        extra = {"kind": kind} if kind != "dialogue" else {}
        answer = client.chat.completions.create(model=RUN, messages=messages, max_tokens=4, extra_body=extra)
        body = answer.model_dump()
        assert body["tutor"]["kind"] == kind and answer.model == RUN
        assert answer.usage.prompt_tokens == length(trained_as), kind
        seen.add(answer.usage.prompt_tokens)
    assert len(seen) == 3  # the two clips' lengths differ, and so do their Gemma 4 token counts


def test_the_practice_page_answers_a_student_with_the_gemma4_run(g4_ws, speechocean_dir):
    from pipeline.inbox.practice import save_setup
    from pipeline.inbox.store import Inbox
    from ui.practice_page import PracticeHandlers

    ws, _ = g4_ws
    save_setup(ws, RUN, ["WE CALL IT BEAR", "ZERO THREE FIVE ONE"])
    from pipeline.workspace import Workspace

    handlers = PracticeHandlers(Workspace(ws))
    _name, exercises, note, _consent = handlers.on_load(None, None)
    assert len(exercises["choices"]) == 2 and "test tutor" in note and "random" in note
    updates = list(handlers.answer(str(speechocean_dir / "WAVE/SPEAKER0001/000010011.WAV"), 0, "lee", True))
    text, status = updates[-1]
    assert text and "Kept for your teacher" in status
    assert Inbox(ws).list()[-1].run == RUN
