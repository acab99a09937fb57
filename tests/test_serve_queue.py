"""The serve queue and the API's bounds: a full model answers 429 before decoding anything, each bound
on a request is a 400 naming its limit, a streamed answer is OpenAI's server-sent events, and a client
that leaves stops its answer.

The server runs in this test's process (uvicorn in a thread, on a free loopback port) so the test can
keep the model busy deterministically: it holds the loaded `Tutor`'s own lock (the lock every forward
of its batch engine takes), instead of relying on an answer being slow. The tiny base model is served
alone (`--model` without `--run`) with one answer generated at a time and one waiting (capacity 2),
and small bounds (2 clips, 6 s of audio, 400 characters of text). Callers: the `openai` client, and
`httpx` where the raw stream is read.
"""

from __future__ import annotations

import base64
import io
import json
import threading
import time

import numpy as np
import pytest

openai = pytest.importorskip("openai")

KEY = "queue-key-0123456789"
CLIP = "WAVE/SPEAKER0001/000010011.WAV"
TARGET = "WE CALL IT BEAR"


def wait_until(condition, what: str, timeout_s: float = 300.0) -> None:
    """Poll `condition()` until it holds; fail naming `what` after `timeout_s` (a hang guard, not a timing check)."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.05)


@pytest.fixture(scope="module")
def serving(tiny_model_dir, tmp_path_factory):
    """`(served, url)`: the tiny base model (max batch 1, queue 1, small bounds), served by uvicorn in a
    thread; stopped at teardown."""
    import uvicorn

    from pipeline.serving.app import create_app
    from pipeline.serving.cli import bind
    from pipeline.serving.models import load_served
    from pipeline.serving.protocol import RequestLimits

    served = load_served(tmp_path_factory.mktemp("ws"), [], model=str(tiny_model_dir), device="cpu", queue_size=1,
                         max_batch=1)
    limits = RequestLimits(max_clips=2, max_audio_s=6.0, max_text_chars=400)
    sock = bind("127.0.0.1", 0)
    server = uvicorn.Server(uvicorn.Config(create_app(served, api_key=KEY, max_body_bytes=4_000_000, limits=limits),
                                           log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    wait_until(lambda: server.started, "the server to start")
    try:
        yield served, f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        served["base"].worker.close(timeout_s=30)
        sock.close()


@pytest.fixture(scope="module")
def client(serving):
    return openai.OpenAI(base_url=serving[1], api_key=KEY, max_retries=0, timeout=600)


def audio_part(data: bytes, fmt: str = "wav") -> dict:
    return {"type": "input_audio", "input_audio": {"data": base64.b64encode(data).decode(), "format": fmt}}


def read_aloud(speechocean_dir) -> list[dict]:
    return [{"role": "user", "content": [audio_part((speechocean_dir / CLIP).read_bytes()), {"type": "text", "text": TARGET}]}]


def tone(seconds: float) -> bytes:
    from pipeline.data.audio import wav_bytes

    t = np.arange(int(seconds * 16000)) / 16000
    return wav_bytes((0.3 * np.sin(2 * np.pi * 220 * t)).astype(np.float32))


def webm_without_length(seconds: float) -> bytes:
    """What a browser's MediaRecorder sends: Opus in WebM written live, so no duration is stated."""
    import av

    buffer = io.BytesIO()
    with av.open(buffer, mode="w", format="webm", options={"live": "1"}) as out:
        stream = out.add_stream("libopus", rate=48000)
        stream.layout = "mono"
        t = np.arange(int(seconds * 48000)) / 48000
        frame = av.AudioFrame.from_ndarray((0.3 * np.sin(2 * np.pi * 220 * t) * 32767).astype(np.int16)[None, :],
                                           format="s16", layout="mono")
        frame.sample_rate = 48000
        for packet in [*stream.encode(frame), *stream.encode(None)]:
            out.mux(packet)
    return buffer.getvalue()


def test_a_full_model_is_refused_before_its_audio_is_decoded(serving, client, speechocean_dir):
    served, _ = serving
    worker = served["base"].worker
    assert (worker.max_batch, worker.capacity) == (1, 2)
    results: list = []

    def ask() -> None:
        try:
            results.append(client.chat.completions.create(model="base", messages=read_aloud(speechocean_dir), max_tokens=3))
        except Exception as error:  # noqa: BLE001 - collected and checked below
            results.append(error)

    held = worker.tutor._lock  # every forward takes it: while held, no answer can be read or generated
    held.acquire()
    try:
        first, second = threading.Thread(target=ask), threading.Thread(target=ask)
        first.start()
        second.start()
        wait_until(lambda: worker.in_flight == 2, "two requests to be admitted")
        # Full: refused at once, before decoding. Audio that would be a 400 gets the 429 instead.
        broken = [{"role": "user", "content": [audio_part(b"not a recording at all" * 50), {"type": "text", "text": TARGET}]}]
        with pytest.raises(openai.RateLimitError) as caught:
            client.chat.completions.create(model="base", messages=broken, max_tokens=3)
        assert caught.value.status_code == 429 and caught.value.code == "queue_full"
        assert caught.value.type == "rate_limit_error" and caught.value.response.headers["retry-after"]
        assert "busy" in caught.value.body["message"]
        # The model is busy, and the API still answers what it serves.
        assert [m.id for m in client.models.list()] == ["base"]
        assert first.is_alive() and second.is_alive()
    finally:
        held.release()
    first.join(timeout=600)
    second.join(timeout=600)
    assert len(results) == 2 and all(not isinstance(r, Exception) for r in results), results
    assert all(r.model == "base" and r.usage.completion_tokens >= 1 for r in results)
    wait_until(lambda: worker.in_flight == 0, "the places to be given back")


BOUNDS = [
    # (what, messages, param, code, the limit the message names)
    ("three clips", lambda sd: [{"role": "user", "content": [audio_part(tone(1.0))]}, {"role": "assistant", "content": "Again."},
                                {"role": "user", "content": [audio_part(tone(1.0)), audio_part(tone(1.0))]}],
     "messages", "too_many_clips", "at most 2"),
    ("more audio than the request may hold", lambda sd: [
        {"role": "user", "content": [audio_part(tone(4.0))]}, {"role": "assistant", "content": "Again."},
        {"role": "user", "content": [audio_part(tone(4.0))]}], "messages[2].content[0].input_audio.data",
     "request_audio_too_long", "6 s"),
    ("a browser's WebM (no stated length) over the audio left", lambda sd: [{"role": "user", "content": [
        audio_part(webm_without_length(40.0), "webm"), {"type": "text", "text": TARGET}]}],
     "messages[0].content[0].input_audio.data", "request_audio_too_long", "6 s"),
    ("too much text", lambda sd: [{"role": "user", "content": [audio_part((sd / CLIP).read_bytes()),
                                                                {"type": "text", "text": "BEAR " * 100}]}],
     "messages", "text_too_long", "at most 400"),
]


@pytest.mark.parametrize("what, messages, param, code, limit", BOUNDS, ids=[b[0] for b in BOUNDS])
def test_each_bound_is_a_400_naming_its_limit(client, speechocean_dir, what, messages, param, code, limit):
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model="base", messages=messages(speechocean_dir), max_tokens=3)
    error = caught.value
    assert (error.status_code, error.body["param"], error.code) == (400, param, code), error.body
    assert limit in error.body["message"]


def test_a_streamed_answer_is_server_sent_events_that_make_the_whole_answer(serving, client, speechocean_dir):
    import httpx

    _, url = serving
    whole = client.chat.completions.create(model="base", messages=read_aloud(speechocean_dir), max_tokens=8)
    body = {"model": "base", "messages": read_aloud(speechocean_dir), "max_tokens": 8, "stream": True,
            "stream_options": {"include_usage": True}}
    with httpx.stream("POST", f"{url}/chat/completions", json=body, headers={"Authorization": f"Bearer {KEY}"},
                      timeout=600) as response:
        assert response.status_code == 200 and response.headers["content-type"].startswith("text/event-stream")
        events = [line[len("data: "):] for line in response.iter_lines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert {c["object"] for c in chunks} == {"chat.completion.chunk"} and len({c["id"] for c in chunks}) == 1
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])
    assert text == whole.choices[0].message.content  # greedy: the same answer, in pieces
    last = [c for c in chunks if c["choices"]][-1]
    assert last["choices"][0]["finish_reason"] == whole.choices[0].finish_reason and "tutor" in last
    usage = whole.usage
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"] == {
        "prompt_tokens": usage.prompt_tokens, "completion_tokens": usage.completion_tokens, "total_tokens": usage.total_tokens}


def test_a_client_that_leaves_stops_its_answer(serving, client, speechocean_dir, monkeypatch):
    import httpx

    served, url = serving
    worker = served["base"].worker
    whole = client.chat.completions.create(model="base", messages=read_aloud(speechocean_dir), max_tokens=60)
    assert whole.usage.completion_tokens > 10, "the answer must be long enough for leaving early to show"
    asked = []
    real_ask = worker.ask
    monkeypatch.setattr(worker, "ask", lambda *a, **k: asked.append(real_ask(*a, **k)) or asked[-1])
    body = {"model": "base", "messages": read_aloud(speechocean_dir), "max_tokens": 60, "stream": True}
    with httpx.stream("POST", f"{url}/chat/completions", json=body, headers={"Authorization": f"Bearer {KEY}"},
                      timeout=600) as response:
        assert next(response.iter_lines()).startswith("data: ")  # the answer has started; leave
    result = asked[0].answer.result(timeout=600)
    assert result.finish_reason == "stop" and result.new_tokens < whole.usage.completion_tokens  # greedy: cut short
    wait_until(lambda: worker.in_flight == 0, "the place to be given back")
