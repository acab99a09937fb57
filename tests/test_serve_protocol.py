"""The serve API's wire format without a model: what a request asks, what is refused and why, the
parsed feedback in the response, and the CPU threads shared between loaded models."""

from __future__ import annotations

import base64

import pytest

from pipeline.serving.protocol import ApiError, chat_completion, parse_chat_request, tutor_feedback

SERVED = ["run-a", "base"]
CLIP = "WAVE/SPEAKER0001/000010011.WAV"


@pytest.fixture(scope="module")
def audio(speechocean_dir) -> dict:
    data = base64.b64encode((speechocean_dir / CLIP).read_bytes()).decode()
    return {"type": "input_audio", "input_audio": {"data": data, "format": "wav"}}


def text(value: str) -> dict:
    return {"type": "text", "text": value}


def test_the_kind_defaults_to_read_aloud_or_dialogue_and_the_fields_land_where_training_puts_them(audio):
    single = parse_chat_request({"model": "run-a", "messages": [
        {"role": "system", "content": "anything"}, {"role": "user", "content": [audio, text("WE CALL IT"), text("BEAR")]}]}, SERVED)
    assert (single.kind, single.text, len(single.clips), single.max_new_tokens) == ("read_aloud", "WE CALL IT\nBEAR", 1, 256)
    free = parse_chat_request({"model": "base", "kind": "free_speech", "max_tokens": 40, "messages": [
        {"role": "user", "content": [text("Describe your town."), {**audio, "input_audio": {**audio["input_audio"],
         "data": "data:audio/wav;base64," + audio["input_audio"]["data"]}}]}]}, SERVED)
    assert (free.kind, free.text, free.max_new_tokens) == ("free_speech", "Describe your town.", 40)
    dialogue = parse_chat_request({"model": "run-a", "messages": [
        {"role": "user", "content": [audio, audio, text("Like this?")]}, {"role": "assistant", "content": [text("Yes.")]},
        {"role": "user", "content": "And now?"}]}, SERVED)
    assert dialogue.kind == "dialogue" and len(dialogue.clips) == 2
    assert dialogue.turns == [{"role": "learner", "clip": 0}, {"role": "learner", "clip": 1, "text": "Like this?"},
                              {"role": "tutor", "text": "Yes."}, {"role": "learner", "text": "And now?"}]
    assert dialogue.dialogue_turns()[1]["audio"] is dialogue.clips[1]


REFUSED = [
    # (what, body without model, status, param, code)
    ("no messages", {"messages": []}, 400, "messages", "missing_required_parameter"),
    ("a tool message", {"messages": [{"role": "tool", "content": "x"}]}, 400, "messages[0].role", "invalid_value"),
    ("an image", {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]},
     400, "messages[0].content[0].type", "unsupported_content"),
    ("two clips read aloud", {"messages": [{"role": "user", "content": ["AUDIO", "AUDIO", text("x")]}]},
     400, "messages[0].content", "invalid_value"),
    ("only a system message", {"messages": [{"role": "system", "content": "x"}]}, 400, "messages", "missing_audio"),
    ("a dialogue ending with the tutor", {"kind": "dialogue", "messages": [
        {"role": "user", "content": ["AUDIO"]}, {"role": "assistant", "content": "x"}]}, 400, "messages[1]", "invalid_value"),
    ("a dialogue without audio", {"messages": [
        {"role": "user", "content": "hi"}, {"role": "assistant", "content": "x"}, {"role": "user", "content": "again"}]},
     400, "messages", "missing_audio"),
    ("audio from the tutor", {"messages": [
        {"role": "user", "content": ["AUDIO"]}, {"role": "assistant", "content": ["AUDIO"]}, {"role": "user", "content": ["AUDIO"]}]},
     400, "messages[1].content[0]", None),
    ("too many tokens", {"max_tokens": 100000, "messages": [{"role": "user", "content": ["AUDIO", text("x")]}]},
     400, "max_tokens", "invalid_value"),
    ("n above 1", {"n": 2, "messages": [{"role": "user", "content": ["AUDIO", text("x")]}]}, 400, "n", "invalid_value"),
    ("a bad format", {"messages": [{"role": "user", "content": [
        {"type": "input_audio", "input_audio": {"data": "UklGRg==", "format": "exe"}}, text("x")]}]},
     400, "messages[0].content[0].input_audio.format", "invalid_value"),
    ("a control token in the sentence", {"messages": [{"role": "user", "content": ["AUDIO", text("BEAR <end_of_turn>")]}]},
     400, "messages[0].content", "control_token"),
]


@pytest.mark.parametrize("what, body, status, param, code", REFUSED, ids=[r[0] for r in REFUSED])
def test_refusals_name_the_field_at_fault(audio, what, body, status, param, code):
    def fill(value):
        if value == "AUDIO":
            return audio
        if isinstance(value, list):
            return [fill(v) for v in value]
        if isinstance(value, dict):
            return {k: fill(v) for k, v in value.items()}
        return value

    with pytest.raises(ApiError) as caught:
        parse_chat_request({"model": "run-a", **fill(body)}, SERVED)
    error = caught.value
    assert (error.status, error.param, error.code) == (status, param, code), str(error)
    assert error.body()["error"]["message"] == str(error) and str(error)


def test_unknown_model_is_404_and_lists_the_served_ones():
    with pytest.raises(ApiError) as caught:
        parse_chat_request({"model": "run-z", "messages": []}, SERVED)
    assert caught.value.status == 404 and caught.value.code == "model_not_found"
    assert "run-a, base" in str(caught.value)


def test_feedback_in_the_template_is_parsed_into_the_response():
    from pipeline.conversation.feedback import feedback_from_scores

    scores = {"accuracy": 6, "fluency": 7, "prosodic": 7, "total": 5, "words": [
        {"text": "GREY", "accuracy": 0, "phones": ["G", "R", "EY"], "phones-accuracy": [0, 0.5, 0.6],
         "mispronunciations": [{"canonical-phone": "G", "index": 0, "pronounced-phone": "F"}]}]}
    answer = feedback_from_scores("GREY", scores)
    body = chat_completion(model="run-a", text=answer, prompt_tokens=300, completion_tokens=40, max_new_tokens=256, tutor={})
    parsed = body["tutor_feedback"]
    assert parsed["scores"] == {"accuracy": 6.0, "fluency": 7.0, "prosody": 7.0, "total": 5.0}
    assert parsed["complete"] is True and parsed["words"][0]["word"] == "GREY" and parsed["words"][0]["score"] == 0.0
    assert {"phone": "G", "heard": "F"} in parsed["words"][0]["phones"]
    assert body["usage"] == {"prompt_tokens": 300, "completion_tokens": 40, "total_tokens": 340}
    assert body["choices"][0]["finish_reason"] == "stop"
    free = chat_completion(model="run-a", text="Nice holiday story! Say 'beach' longer.", prompt_tokens=1,
                           completion_tokens=256, max_new_tokens=256, tutor={})
    assert free["tutor_feedback"] is None and free["choices"][0]["finish_reason"] == "length"
    partial = tutor_feedback("Scores (0-10): accuracy 8")
    assert partial["complete"] is False and partial["scores"]["accuracy"] == 8.0


def test_several_loaded_models_share_the_inference_threads(monkeypatch):
    from pipeline.host.cpu_threads import INFER_THREADS_ENV, available_cores
    from pipeline.serving.models import share_threads

    monkeypatch.delenv(INFER_THREADS_ENV, raising=False)
    assert share_threads(1) is None and INFER_THREADS_ENV not in __import__("os").environ
    expected = max(1, (available_cores() - 1) // 2)
    assert share_threads(2) == expected and __import__("os").environ[INFER_THREADS_ENV] == str(expected)
    monkeypatch.setenv(INFER_THREADS_ENV, "3")
    assert share_threads(4) is None  # a person's override stays


@pytest.mark.parametrize("args, says", [
    ([], "Nothing to serve"),
    (["--run", "nope"], "Run `nope` does not exist"),
    (["--run", "a", "--run", "a"], "given twice"),
    (["--run", "base"], "`base` is the name of the base model"),
    (["--run", "a", "--api-key", "short"], "has 5 characters; it must be at least 8"),
    (["--run", "a", "--queue-size", "0"], "`--queue-size` must be >= 1"),
    (["--run", "a", "--port", "70000"], "`--port` must be 0-65535"),
])
def test_serve_refuses_what_it_cannot_serve_with_a_message(tmp_path, capsys, args, says):
    from pipeline.__main__ import main

    assert main(["serve", "--workspace", str(tmp_path), "--port", "0", *args]) == 1
    assert says in capsys.readouterr().err


def test_serve_says_when_the_port_is_taken():
    from pipeline.errors import ConfigError
    from pipeline.serving.cli import bind, is_loopback

    taken = bind("127.0.0.1", 0)
    try:
        with pytest.raises(ConfigError, match="pick another `--port`"):
            bind("127.0.0.1", taken.getsockname()[1])
    finally:
        taken.close()
    assert is_loopback("127.0.0.1") and is_loopback("localhost") and not is_loopback("0.0.0.0")


def test_a_key_given_is_taken_from_a_file_or_the_environment_and_never_echoed(tmp_path, capsys):
    """Issue 31 #5: a key on the command line shows in `ps`; the file and the variable keep it out."""
    from pipeline.serving.cli import given_api_key

    (tmp_path / "key").write_text("file-key-123456\nignored\n")
    assert given_api_key(tmp_path / "key", "argv-key-123456", {"TUTOR_API_KEY": "env-key-123456"}) == (
        "file-key-123456", f"the file {tmp_path / 'key'}")
    assert given_api_key(None, "argv-key-123456", {"TUTOR_API_KEY": "env-key-123456"}) == (
        "env-key-123456", "$TUTOR_API_KEY")
    assert given_api_key(None, None, {}) == (None, "generated")
    assert given_api_key(None, "argv-key-123456", {})[0] == "argv-key-123456"
    err = capsys.readouterr().err
    assert "`ps`" in err and "argv-key-123456" not in err


def test_json_nested_deep_is_a_400_not_a_500():
    """Issue 31 #5: JSON 1,000 deep gave a 500 and a traceback; it is refused as invalid JSON, naming the limit."""
    from pipeline.serving.app import MAX_JSON_DEPTH, parse_json_body

    for body in (b"[" * 1000 + b"]" * 1000, b'{"a":' * 1000 + b"1" + b"}" * 1000, b"[" * 100_000):
        with pytest.raises(ApiError) as refused:
            parse_json_body(body)
        assert refused.value.status == 400 and f"more than {MAX_JSON_DEPTH} deep" in str(refused.value)
    # brackets inside strings are text, not nesting; a real request parses
    assert parse_json_body(b'{"messages": [{"role": "user", "content": "' + b"[[[{" * 50 + b'\\" ]]"}]}')["messages"]
    with pytest.raises(ApiError, match="not valid JSON"):
        parse_json_body(b'{"messages": [}')


def test_models_are_named_without_the_servers_folders(tmp_path):
    """Issue 31 #5: `/v1/models` disclosed the model folder; a local folder is named by its last part only."""
    from pipeline.serving.models import public_model_name

    folder = tmp_path / "private" / "gemma-3n-E2B-it"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text("{}")
    assert public_model_name(str(folder)) == "gemma-3n-E2B-it"
    assert public_model_name("google/gemma-3n-E2B-it") == "google/gemma-3n-E2B-it"
