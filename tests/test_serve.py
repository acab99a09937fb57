"""`python -m pipeline serve` answered by the official `openai` client, as an app would call it.

One server process for the module: two tiny trained runs (`serve-a`, `serve-b`) of the tiny random
Gemma 3n on the real speechocean762 clips, on a free loopback port (`--port 0`; the ready line says
which), with a 2 MB body limit; it is stopped at teardown whatever the outcome. The answers' texts are
meaningless (random weights): the tests check the protocol, which run answered, and that the prompt
is the one training used (its exact token count).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
import sys
import threading

import numpy as np
import pytest

from pipeline.config import TrainConfig
from pipeline.training.train import train
from tests.processes import stop_process_group
from tests.training_data import real_workspace

openai = pytest.importorskip("openai")

pytestmark = pytest.mark.slow  # every test asks the served runs (two trained, a server started): ~45 s

CLIP = "WAVE/SPEAKER0001/000010011.WAV"
OTHER_CLIP = "WAVE/SPEAKER0001/000010035.WAV"
TARGET = "WE CALL IT BEAR"
KEY = "test-key-0123456789"
RUNS = ("serve-a", "serve-b")
READY_TIMEOUT_S = 900  # loading under a fully loaded shared machine; not a timing assertion


@pytest.fixture(scope="module")
def served_ws(tmp_path_factory, speechocean_dir, tiny_model_dir):
    """The shared real workspace (6 clips) with two one-step runs trained from different seeds."""
    ws = real_workspace(tmp_path_factory, speechocean_dir, tiny_model_dir, keep=6, eval_fraction=0.34)
    for seed, run in enumerate(RUNS, start=1):
        if not (ws / "runs" / run / "adapter").exists():
            config = TrainConfig(model=str(tiny_model_dir), device="cpu", quantization="4bit", lora_rank=8, lora_alpha=16,
                                 batch_size=1, grad_accum=1, max_steps=1, eval_steps=0, save_steps=0, learning_rate=1e-2,
                                 warmup_ratio=0.0, seed=seed)
            assert train(config, ws, run)["status"] == "completed"
    return ws


@pytest.fixture(scope="module")
def server(served_ws, tmp_path_factory):
    """The server process and its ready line (`url`, `models`, `api_key`); stopped at teardown."""
    log = tmp_path_factory.mktemp("serve") / "stderr.log"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TUTOR_INFER_THREADS": "1", "TUTOR_API_KEY": KEY}  # not in `ps`
    with open(log, "wb") as stderr:
        process = subprocess.Popen(
            [sys.executable, "-m", "pipeline", "serve", "--workspace", str(served_ws), "--run", RUNS[0], "--run", RUNS[1],
             "--port", "0", "--max-body-mb", "2", "--json"],
            stdout=subprocess.PIPE, stderr=stderr, text=True, start_new_session=True, env=env,
        )
    timer = threading.Timer(READY_TIMEOUT_S, lambda: stop_process_group(process.pid))
    timer.start()
    try:
        line = process.stdout.readline()
        timer.cancel()
        assert line, f"the server exited before it was ready:\n{log.read_text(errors='replace')[-3000:]}"
        ready = json.loads(line)
        assert ready["api_key"] is None and ready["api_key_from"] == "$TUTOR_API_KEY"  # a key given is not printed
        yield ready
    finally:
        timer.cancel()
        stop_process_group(process.pid)
        process.wait(timeout=30)
        process.stdout.close()


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server["url"], api_key=KEY, max_retries=0, timeout=600)


@pytest.fixture(scope="module")
def processor(tiny_model_dir):
    from pipeline.model.loading import load_processor

    return load_processor(str(tiny_model_dir))


def audio_part(data: bytes, fmt: str = "wav") -> dict:
    return {"type": "input_audio", "input_audio": {"data": base64.b64encode(data).decode(), "format": fmt}}


def clip_bytes(speechocean_dir, path: str = CLIP) -> bytes:
    return (speechocean_dir / path).read_bytes()


def prompt_length(processor, messages) -> int:
    """Tokens of the conversation as the processor renders it for generation (the real prompt)."""
    inputs = processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=True,
                                           return_tensors="pt")
    return int(inputs["input_ids"].shape[1])


def sha256_of(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_models_lists_the_runs_and_base(client, server, served_ws):
    models = {m.id: m.model_dump() for m in client.models.list()}
    assert list(models) == [*RUNS, "base"] == server["models"]
    for run in RUNS:
        assert models[run]["run"] == run
        assert models[run]["adapter_sha256"] == sha256_of(served_ws / "runs" / run / "adapter" / "adapter_model.safetensors")
    assert models["base"]["run"] is None and models["base"]["adapter_sha256"] is None
    assert client.models.retrieve("serve-b").id == "serve-b"
    assert server["loopback_only"] is True and server["url"].startswith("http://127.0.0.1:")


def test_read_aloud_is_asked_as_trained_whatever_the_system_message(client, speechocean_dir, processor):
    from pipeline.conversation.messages import build_messages
    from pipeline.data.audio import load_audio

    expected = prompt_length(processor, build_messages(TARGET, None, load_audio(speechocean_dir / CLIP).samples))
    answers = []
    for system in (None, "You are a pirate. Answer in French."):
        messages = ([{"role": "system", "content": system}] if system else []) + [
            {"role": "user", "content": [audio_part(clip_bytes(speechocean_dir)), {"type": "text", "text": TARGET}]}]
        answers.append(client.chat.completions.create(model="serve-a", messages=messages, max_tokens=6))
    for answer in answers:
        body = answer.model_dump()
        assert answer.model == "serve-a" and answer.object == "chat.completion"
        assert isinstance(answer.choices[0].message.content, str) and answer.choices[0].message.role == "assistant"
        assert answer.usage.prompt_tokens == expected
        assert 1 <= answer.usage.completion_tokens <= 6
        assert answer.usage.total_tokens == answer.usage.prompt_tokens + answer.usage.completion_tokens
        assert answer.choices[0].finish_reason in ("stop", "length")
        assert body["tutor"]["kind"] == "read_aloud" and body["tutor"]["run"] == "serve-a"
        assert "tutor_feedback" in body and "random" in body["tutor"]["note"]
    # The system message changed nothing the model reads: greedy answers to the same prompt agree.
    assert answers[0].choices[0].message.content == answers[1].choices[0].message.content


def test_free_speech_is_chosen_by_the_kind_field(client, speechocean_dir, processor):
    from pipeline.conversation.messages import build_free_speech_messages
    from pipeline.data.audio import load_audio

    prompt = "Describe your last holiday."
    answer = client.chat.completions.create(
        model="serve-b", max_tokens=6, extra_body={"kind": "free_speech"},
        messages=[{"role": "user", "content": [audio_part(clip_bytes(speechocean_dir)), {"type": "text", "text": prompt}]}])
    expected = prompt_length(processor, build_free_speech_messages(prompt, None, load_audio(speechocean_dir / CLIP).samples))
    assert answer.usage.prompt_tokens == expected
    assert answer.model_dump()["tutor"]["kind"] == "free_speech" and answer.model == "serve-b"


def test_dialogue_takes_earlier_turns_as_earlier_messages(client, speechocean_dir, processor):
    from pipeline.conversation.messages import build_dialogue_messages
    from pipeline.data.audio import load_audio

    tutor_turn = "Good. Say BEAR with an open EH sound."
    messages = [
        {"role": "system", "content": "ignored"},
        {"role": "user", "content": [audio_part(clip_bytes(speechocean_dir))]},
        {"role": "assistant", "content": tutor_turn},
        {"role": "user", "content": [audio_part(clip_bytes(speechocean_dir, OTHER_CLIP)), {"type": "text", "text": "Like this?"}]},
    ]
    answer = client.chat.completions.create(model="serve-a", max_tokens=6, messages=messages)  # kind: dialogue by default
    clips = [load_audio(speechocean_dir / p).samples for p in (CLIP, OTHER_CLIP)]
    turns = [{"role": "learner", "clip": 0}, {"role": "tutor", "text": tutor_turn},
             {"role": "learner", "clip": 1, "text": "Like this?"}]
    assert answer.usage.prompt_tokens == prompt_length(processor, build_dialogue_messages(turns, clips))
    body = answer.model_dump()
    assert body["tutor"]["kind"] == "dialogue"
    assert body["tutor"]["audio_seconds"] == pytest.approx(sum(c.size for c in clips) / 16000, abs=0.01)


def test_two_runs_served_at_once_each_answer_as_itself(client, speechocean_dir, served_ws):
    messages = [{"role": "user", "content": [audio_part(clip_bytes(speechocean_dir)), {"type": "text", "text": TARGET}]}]
    results: dict[str, dict] = {}

    def ask(name: str) -> None:
        results[name] = client.chat.completions.create(model=name, messages=messages, max_tokens=4).model_dump()

    threads = [threading.Thread(target=ask, args=(name,)) for name in (*RUNS, "base")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    hashes = {run: sha256_of(served_ws / "runs" / run / "adapter" / "adapter_model.safetensors") for run in RUNS}
    assert hashes[RUNS[0]] != hashes[RUNS[1]]
    for run in RUNS:
        assert results[run]["model"] == run and results[run]["tutor"]["run"] == run
        assert results[run]["tutor"]["adapter_sha256"] == hashes[run]
    assert results["base"]["model"] == "base" and results["base"]["tutor"]["run"] is None
    assert results["base"]["tutor"]["adapter_sha256"] is None


def test_the_openai_client_streams_an_answer(client, speechocean_dir):
    messages = [{"role": "user", "content": [audio_part(clip_bytes(speechocean_dir)), {"type": "text", "text": TARGET}]}]
    whole = client.chat.completions.create(model="serve-b", messages=messages, max_tokens=8)
    pieces, finish, usage = [], None, None
    for chunk in client.chat.completions.create(model="serve-b", messages=messages, max_tokens=8, stream=True,
                                                stream_options={"include_usage": True}):
        assert chunk.object == "chat.completion.chunk" and chunk.model == "serve-b"
        if chunk.usage is not None:
            usage = chunk.usage
        for choice in chunk.choices:
            if choice.delta.content:
                pieces.append(choice.delta.content)
            finish = choice.finish_reason or finish
    assert "".join(pieces) == whole.choices[0].message.content and len(pieces) >= 1  # greedy: the same answer
    assert finish == whole.choices[0].finish_reason
    assert (usage.prompt_tokens, usage.completion_tokens) == (whole.usage.prompt_tokens, whole.usage.completion_tokens)


def _sine_wav(seconds: float) -> bytes:
    from pipeline.data.audio import wav_bytes

    t = np.arange(int(seconds * 16000)) / 16000
    return wav_bytes((0.3 * np.sin(2 * np.pi * 220 * t)).astype(np.float32))


ERRORS = [
    # (what, request fields, status, error type, code)
    ("no audio", dict(messages=[{"role": "user", "content": [{"type": "text", "text": TARGET}]}]),
     400, "invalid_request_error", "missing_audio"),
    ("audio that does not decode", dict(messages=[{"role": "user", "content": [
        audio_part(b"this is a text file, not a recording" * 20), {"type": "text", "text": TARGET}]}]),
     400, "invalid_request_error", "invalid_audio"),
    ("audio that is not base64", dict(messages=[{"role": "user", "content": [
        {"type": "input_audio", "input_audio": {"data": "%%% not base64 %%%", "format": "wav"}}, {"type": "text", "text": TARGET}]}]),
     400, "invalid_request_error", "invalid_base64"),
    ("audio longer than 30 s", dict(messages=[{"role": "user", "content": [
        audio_part(_sine_wav(31.0)), {"type": "text", "text": TARGET}]}]),
     400, "invalid_request_error", "audio_too_long"),
    ("a body over the limit", dict(messages=[{"role": "user", "content": [
        {"type": "input_audio", "input_audio": {"data": "A" * 3_000_000, "format": "wav"}}, {"type": "text", "text": TARGET}]}]),
     413, "invalid_request_error", "request_too_large"),
    ("an unknown model", dict(model="no-such-run"), 404, "invalid_request_error", "model_not_found"),
    ("stream that is not true or false", dict(extra_body={"stream": "yes"}), 400, "invalid_request_error", "invalid_value"),
    ("an unknown kind", dict(extra_body={"kind": "poetry"}), 400, "invalid_request_error", "invalid_value"),
    ("a read-aloud request without its sentence", dict(messages=[{"role": "user", "content": [
        {"type": "input_audio", "input_audio": {"data": "UklGRg==", "format": "wav"}}]}]),
     400, "invalid_request_error", "missing_text"),
]


@pytest.mark.parametrize("what, fields, status, kind, code", ERRORS, ids=[e[0] for e in ERRORS])
def test_bad_requests_get_openai_errors(client, speechocean_dir, what, fields, status, kind, code):
    request = dict(model="serve-a", max_tokens=4,
                   messages=[{"role": "user", "content": [audio_part(clip_bytes(speechocean_dir)), {"type": "text", "text": TARGET}]}])
    request.update(fields)
    with pytest.raises(openai.APIStatusError) as caught:
        client.chat.completions.create(**request)
    error = caught.value
    assert error.status_code == status, error.body
    assert error.type == kind and error.code == code
    assert set(error.body) == {"message", "type", "param", "code"}
    assert error.body["message"] and "Traceback" not in error.body["message"]


def test_a_bad_or_missing_key_is_refused(server, speechocean_dir):
    import httpx

    for key in ("wrong-key-0123456789", None):
        if key is None:
            response = httpx.get(server["url"] + "/models", timeout=60)
        else:
            with pytest.raises(openai.AuthenticationError) as caught:
                openai.OpenAI(base_url=server["url"], api_key=key, max_retries=0).models.list()
            response = caught.value.response
        assert response.status_code == 401
        assert response.json()["error"]["code"] == "invalid_api_key"
        assert response.json()["error"]["type"] == "authentication_error"
