"""The serve queue: a full queue answers 429 at once, and a model that is busy generating does not hold
up `GET /v1/models`.

The server runs in this test's process (uvicorn in a thread, on a free loopback port) so the test can
keep the model busy deterministically: it holds the loaded `Tutor`'s own generation lock (the lock
every answer takes from tokenizing to decoding, as a second caller of the same model would), instead
of relying on an answer being slow. The `openai` client is the caller. The base tiny model is served
alone (`--model` without `--run`).
"""

from __future__ import annotations

import base64
import threading
import time

import pytest

openai = pytest.importorskip("openai")

KEY = "queue-key-0123456789"
CLIP = "WAVE/SPEAKER0001/000010011.WAV"


def wait_until(condition, what: str, timeout_s: float = 300.0) -> None:
    """Poll `condition()` until it holds; fail naming `what` after `timeout_s` (a hang guard, not a timing check)."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.05)


@pytest.fixture()
def serving(tiny_model_dir, tmp_path):
    """`(served, url)`: the tiny base model with a queue of 1, served by uvicorn in a thread; stopped at teardown."""
    import uvicorn

    from pipeline.serving.app import create_app
    from pipeline.serving.cli import bind
    from pipeline.serving.models import load_served

    served = load_served(tmp_path, [], model=str(tiny_model_dir), device="cpu", queue_size=1)
    sock = bind("127.0.0.1", 0)
    server = uvicorn.Server(uvicorn.Config(create_app(served, api_key=KEY, max_body_bytes=2_000_000), log_level="warning"))
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


def test_a_full_queue_is_refused_and_models_answer_while_a_model_is_busy(serving, speechocean_dir):
    served, url = serving
    worker = served["base"].worker
    client = openai.OpenAI(base_url=url, api_key=KEY, max_retries=0, timeout=600)
    audio = base64.b64encode((speechocean_dir / CLIP).read_bytes()).decode()
    messages = [{"role": "user", "content": [{"type": "input_audio", "input_audio": {"data": audio, "format": "wav"}},
                                             {"type": "text", "text": "WE CALL IT BEAR"}]}]
    results: list = []

    def ask() -> None:
        try:
            results.append(client.chat.completions.create(model="base", messages=messages, max_tokens=3))
        except Exception as error:  # noqa: BLE001 - collected and checked below
            results.append(error)

    held = worker.tutor._lock  # the model's generation lock: while held, the worker cannot finish an answer
    held.acquire()
    try:
        first = threading.Thread(target=ask)
        first.start()
        wait_until(lambda: worker.busy and worker.waiting == 0, "the worker to start the first answer")
        second = threading.Thread(target=ask)
        second.start()
        wait_until(lambda: worker.waiting == 1, "the second answer to queue")

        with pytest.raises(openai.RateLimitError) as caught:  # queue of 1 already full
            client.chat.completions.create(model="base", messages=messages, max_tokens=3)
        assert caught.value.status_code == 429 and caught.value.code == "queue_full"
        assert caught.value.type == "rate_limit_error" and caught.value.response.headers["retry-after"]
        assert "busy" in caught.value.body["message"]

        # The model is still busy, and the API still answers what it serves.
        assert [m.id for m in client.models.list()] == ["base"]
        assert worker.busy and first.is_alive() and second.is_alive()
    finally:
        held.release()
    first.join(timeout=600)
    second.join(timeout=600)
    assert len(results) == 2 and all(not isinstance(r, Exception) for r in results), results
    assert all(r.model == "base" and r.usage.completion_tokens >= 1 for r in results)
