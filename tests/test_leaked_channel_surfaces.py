"""No leaked thought channel on any surface (issue 43, item 3), surface by surface.

`tests/test_thought_channel.py` proves the shared decoders drop a channel; here each surface's own code
path runs for real (its prompt, the batch engine or `generate`, its decoding, parsing, streaming and
storing) on the tiny Gemma 4 with a run's adapter, while a forward hook on the model forces what it
writes: the family's thought channel (`ModelFamily.thought_channel`) with the answer, closed
(`<|channel>thought ...<channel|>ANSWER<turn|>`) or unclosed (`ANSWER<|channel>thought ...` to the token
limit). Every text a surface shows, streams, judges or stores must be the clean answer.
"""

from __future__ import annotations

import json

import pytest

from tests.test_grounding import _two_learners_one_sentence_each

ANSWER = "Scores (0-10): accuracy 7, fluency 8, prosody 8, total 7\nWords to practise: none\nAdvice: slow down."
RUN = "leaky"
MAX_NEW = 64
LEAKS = ("closed", "unclosed")
CLIP = "WAVE/SPEAKER0001/000010011.WAV"
KEY = "test-key-0123456789"
SHOWN_LEAK = ("<|channel>", "<channel|>", "thought", "think")


class Script:
    """The tokens the model is made to write: `tape` from each answer's first token on, then `filler` for
    ever (an unclosed channel never ends). Each row of a step finds its place in the tape from its position
    (`position_ids`, or `cache_position` in `generate`) less the length of the prompt last read: the rows
    answered together here (Try's tuned and base answers) share one prompt."""

    def __init__(self):
        self.tape: list[int] = []
        self.filler: int | None = None
        self.prompt_len = 0

    def token(self, at: int) -> int:
        return self.tape[at] if at < len(self.tape) else self.filler

    def tokens(self, kwargs: dict, rows: int) -> list[int]:
        """The next token of each of `rows` rows, for a forward called with `kwargs`."""
        ids, mask = kwargs.get("input_ids"), kwargs.get("attention_mask")
        if ids is not None and ids.shape[1] > 1:  # a prompt read (whole, or the rest after a kept start)
            self.prompt_len = int(mask.shape[-1]) if mask is not None else int(ids.shape[1])
            return [self.token(0)] * rows
        positions = kwargs.get("position_ids")
        if positions is None:
            positions = kwargs["cache_position"].reshape(1, -1).expand(rows, -1)
        return [self.token(int(p) - self.prompt_len + 1) for p in positions.reshape(rows, -1)[:, -1]]


def _force(model, script: Script) -> None:
    """Make `model` (a PeftModel or a base) write `script`'s tokens: its logits, whatever the input."""
    import torch

    inner = model.get_base_model() if hasattr(model, "get_base_model") else model

    def hook(module, args, kwargs, output):
        logits = torch.full_like(output.logits, -1e4)
        for row, token in enumerate(script.tokens(kwargs, logits.shape[0])):
            logits[row, :, token] = 1e4
        output.logits = logits
        return output

    inner.register_forward_hook(hook, with_kwargs=True)


@pytest.fixture(scope="module")
def leaky(tmp_path_factory, speechocean_dir, tiny_gemma4_dir):
    """(workspace, script, served API models): read-aloud clips of two learners built for the tiny Gemma 4,
    a run whose adapter is an untrained LoRA (saved as training saves one), and the model forced by `script`."""
    from pipeline.config import TrainConfig
    from pipeline.data.dataset import build_dataset
    from pipeline.data.importers import import_folder
    from pipeline.fileio import atomic_write_json
    from pipeline.model.base_identity import describe_base
    from pipeline.model.loading import attach_lora, load_model, load_processor
    from pipeline.serving.models import load_served
    from pipeline.training.checkpoints import save_adapter
    from pipeline.tutor.infer import load_tutor
    from pipeline.workspace import Workspace

    root = tmp_path_factory.mktemp("leaky")
    ws = Workspace(root / "ws")
    import_folder(ws.root, _two_learners_one_sentence_each(speechocean_dir, root / "corpus", per_speaker=2), format="kaldi")
    build_dataset(ws.root, str(tiny_gemma4_dir), eval_fraction=0.5, seed=0, max_length=2048)
    base, _ = load_model(str(tiny_gemma4_dir), device="cpu", quantization="none")
    identity = describe_base(base, str(tiny_gemma4_dir))
    config = TrainConfig(model=str(tiny_gemma4_dir), device="cpu", quantization="none", lora_rank=2, lora_alpha=4,
                         gradient_checkpointing=False)
    peft_model, _ = attach_lora(base, config)
    run_dir = ws.run_dir(RUN)
    run_dir.mkdir(parents=True)
    save_adapter(peft_model, load_processor(str(tiny_gemma4_dir)), identity, run_dir / "adapter")
    atomic_write_json(run_dir / "config.json", {"model": str(tiny_gemma4_dir), "device": "cpu", "quantization": "none"})
    del base, peft_model

    script = Script()
    tutor = load_tutor(None, run=RUN, workspace=ws)  # kept: Try, Judge and the practice page reuse it
    _force(tutor.model, script)
    served = load_served(ws.root, [RUN], device="cpu")
    _force(served[RUN].worker.tutor.model, script)
    yield ws, script, served
    for model in served.values():
        model.worker.close()


@pytest.fixture(params=LEAKS)
def leak(request, leaky):
    """The model leaks a channel, closed or unclosed, in this test; yields (workspace, served API models)."""
    from pipeline.model.tokens import family_of_tokenizer

    ws, script, served = leaky
    tok = served[RUN].worker.tutor.processor.tokenizer
    opening, closing = family_of_tokenizer(tok).thought_channel
    turn_end = family_of_tokenizer(tok).turn_end
    ids = lambda text: tok(text, add_special_tokens=False)["input_ids"]  # noqa: E731
    script.filler = None
    if request.param == "closed":
        script.tape = ids(f"{opening}thought\nThe learner said bear.{closing}{ANSWER}{turn_end}")
    else:  # never closed, never ended: the answer stops at its token limit
        script.tape = ids(f"{ANSWER}{opening}thought\nand now I")
        script.filler = ids(" think")[-1]
    assert tok.convert_tokens_to_ids(opening) in script.tape  # the control token itself, as the model writes it
    yield ws, served, script


def written(script: Script) -> int:
    """How many tokens the model writes for one answer: the whole tape with its end of turn (closed), or
    up to the limit (unclosed): the channel itself was written, not only the answer."""
    return len(script.tape) if script.filler is None else MAX_NEW


def assert_clean(text, where: str) -> None:
    """`text` is the clean answer (a growing one: a start of it)."""
    assert isinstance(text, str), (where, text)
    assert not any(mark in text for mark in SHOWN_LEAK), (where, text)
    assert ANSWER.startswith(text), (where, text)


def test_try_shows_the_clean_answer_as_it_grows(leak, speechocean_dir):
    from pipeline.tutor.infer import load_tutor
    from ui.tutor_app import TutorApp

    ws, _, script = leak
    ui = TutorApp(ws.root)
    clip = str(speechocean_dir / CLIP)
    for kind in ("Read aloud", "Free speech"):
        updates = list(ui.tryout.try_feedback(clip, "WE CALL IT BEAR", RUN, MAX_NEW, kind))
        for tuned, _note, base in updates:
            assert_clean(tuned, f"Try {kind}, tuned"), assert_clean(base, f"Try {kind}, base")
        assert updates[-1][0] == updates[-1][2] == ANSWER, updates[-1]
    history, *_ = ui.try_dialogue_send(clip, "Is this right?", [], RUN, MAX_NEW)
    assert history[-1]["role"] == "tutor" and history[-1]["text"] == ANSWER, history
    tutor = load_tutor(None, run=RUN, workspace=ws)  # `infer --sample`: alone, through `generate`
    sampled = tutor.feedback(clip, "WE CALL IT BEAR", max_new_tokens=MAX_NEW, do_sample=True)
    assert sampled.text == ANSWER and sampled.new_tokens == written(script), sampled


def test_judge_and_the_grounding_checks_read_the_clean_answer(leak):
    from pipeline.tutor.evaluate import evaluate_tutor, save_evaluation

    ws, _, _ = leak
    result = evaluate_tutor(ws.root, run=RUN, split="eval", max_new_tokens=MAX_NEW, grounding=True)
    assert result["answers"] and all(a["answer"] == ANSWER for a in result["answers"]), result["answers"]
    records = result["grounding_clips"]
    probes = [r["silence"]["answer"] for r in records]
    probes += [r[k]["answer"] for r in records for k in ("other_clip", "other_sentence") if r[k]]
    assert probes and all(p == ANSWER for p in probes), probes
    stored = save_evaluation(ws.root, result).read_text(encoding="utf-8")
    assert "channel" not in stored and "thought" not in stored
    grounding = result["grounding"]
    assert grounding["silence"]["changed_fraction"] == 0.0, grounding  # the same clean answer, read the same


def test_the_practice_page_shows_and_the_inbox_keeps_the_clean_answer(leak, speechocean_dir):
    from pipeline.inbox.practice import save_setup
    from pipeline.inbox.store import Inbox
    from ui.practice_page import PracticeHandlers
    from ui.tutor_app import TutorApp

    ws, _, _ = leak
    save_setup(ws.root, RUN, ["WE CALL IT BEAR"])
    before = {a.id for a in Inbox(ws.root).list()}
    clip = ws.root.parent / "attempt.wav"  # the page deletes its upload once answered
    clip.write_bytes((speechocean_dir / CLIP).read_bytes())
    updates = list(PracticeHandlers(ws).answer(str(clip), 0, "kim", True))
    for text, _status in updates:
        assert_clean(text, "practice page")
    assert updates[-1][0] == ANSWER, updates[-1]
    kept = [a for a in Inbox(ws.root).list() if a.id not in before]
    assert len(kept) == 1 and kept[0].answer == ANSWER, kept  # the stored draft
    shown = TutorApp(ws.root).inbox.show()  # the teacher's inbox: the draft in the feedback box
    assert shown[1] in {a.id for a in Inbox(ws.root).list("pending")}
    assert_clean(shown[4]["value"], "inbox draft")


def test_the_api_answers_and_streams_the_clean_answer(leak, speechocean_dir):
    import base64

    from fastapi.testclient import TestClient

    from pipeline.serving.app import create_app

    ws, served, script = leak
    wav = base64.b64encode((speechocean_dir / CLIP).read_bytes()).decode()
    messages = [{"role": "user", "content": [{"type": "input_audio", "input_audio": {"data": wav, "format": "wav"}},
                                             {"type": "text", "text": "WE CALL IT BEAR"}]}]
    headers = {"Authorization": f"Bearer {KEY}"}
    with TestClient(create_app(served, api_key=KEY, max_body_bytes=4_000_000)) as client:
        for name in served:  # the run's adapter, and the base beside it
            body = {"model": name, "messages": messages, "max_tokens": MAX_NEW}
            answer = client.post("/v1/chat/completions", json=body, headers=headers)
            assert answer.status_code == 200, answer.text
            assert answer.json()["choices"][0]["message"]["content"] == ANSWER, answer.json()
            assert answer.json()["usage"]["completion_tokens"] == written(script), answer.json()
            pieces = []
            with client.stream("POST", "/v1/chat/completions", json=body | {"stream": True}, headers=headers) as stream:
                for line in stream.iter_lines():
                    if line.startswith("data: {"):
                        delta = json.loads(line[6:])["choices"]
                        pieces += [c["delta"].get("content") or "" for c in delta]
            assert not any(mark in p for p in pieces for mark in SHOWN_LEAK), pieces
            assert "".join(pieces) == ANSWER, pieces


def test_the_api_reads_a_tutor_turn_that_leaked_as_the_clean_one(leak, speechocean_dir):
    """A dialogue's earlier tutor turn, sent back by a client that got it from a runtime that leaks (llama.cpp,
    Ollama): the turn is cleaned before the prompt is built, so the prompt is the clean history's."""
    import base64

    from fastapi.testclient import TestClient

    from pipeline.serving.app import create_app

    _, served, script = leak
    closed = script.filler is None
    earlier = f"<|channel>thought\nhm<channel|>{ANSWER}" if closed else f"{ANSWER}<|channel>thought\nand now I"
    wav = base64.b64encode((speechocean_dir / CLIP).read_bytes()).decode()
    clip = {"type": "input_audio", "input_audio": {"data": wav, "format": "wav"}}

    def ask(tutor_turn: str) -> dict:
        messages = [{"role": "user", "content": [clip]}, {"role": "assistant", "content": tutor_turn},
                    {"role": "user", "content": [clip, {"type": "text", "text": "Is this right?"}]}]
        with TestClient(create_app(served, api_key=KEY, max_body_bytes=4_000_000)) as client:
            answer = client.post("/v1/chat/completions", json={"model": RUN, "messages": messages, "max_tokens": MAX_NEW},
                                 headers={"Authorization": f"Bearer {KEY}"})
        assert answer.status_code == 200, answer.text
        return answer.json()

    leaked, clean = ask(earlier), ask(ANSWER)
    assert leaked["choices"][0]["message"]["content"] == ANSWER, leaked
    assert leaked["usage"]["prompt_tokens"] == clean["usage"]["prompt_tokens"], (leaked["usage"], clean["usage"])
