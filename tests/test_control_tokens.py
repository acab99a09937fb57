"""Issue 11 #1: a person's text never becomes a control or placeholder token of the tokenizer.

A feedback text holding the literal `<end_of_turn>` (pasted from a chat log) was tokenized as Gemma's
control token: the training labels stopped there and nothing said so. The rule: such text is
refused at save and import (naming the text), and the dataset build (which the memory estimate
reads), the collator and inference refuse the same texts through `build_messages`.
"""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest
import soundfile as sf

from pipeline.conversation.messages import build_messages
from pipeline.data.importers import import_folder
from pipeline.data.samples import SampleLibrary
from pipeline.errors import DatasetError, SampleError

GEMMA_TOKENS = ["<end_of_turn>", "<start_of_turn>", "<audio_soft_token>", "<bos>", "<eos>", "<pad>",
                "<start_of_audio>", "<image_soft_token>", "<unused17>", "[multimodal]"]


def clip(freq: float = 220.0, seconds: float = 1.0, rate: int = 16000) -> tuple[int, np.ndarray]:
    t = np.arange(int(seconds * rate)) / rate
    x = 0.3 * np.sin(2 * np.pi * freq * t) * (0.6 + 0.4 * np.sin(2 * np.pi * 3 * t))
    return rate, np.round(x * 32767).astype(np.int16)


@pytest.mark.parametrize("token", GEMMA_TOKENS)
@pytest.mark.parametrize("field", ["target_text", "feedback", "transcript"])
def test_save_refuses_a_control_token_and_names_the_text(tmp_path, field, token):
    library = SampleLibrary(tmp_path / "ws")
    texts = {"target_text": "Read this.", "feedback": "Good.", "transcript": "read this"}
    texts[field] = f"Nice work on GREY {token} keep the rest"
    with pytest.raises(SampleError) as caught:
        library.add(clip(), texts["target_text"], texts["feedback"], transcript=texts["transcript"], sample_id="kate 03")
    message = str(caught.value)
    assert f"`{token}`" in message and "GREY" in message
    assert {"target_text": "Target text", "feedback": "Feedback", "transcript": "Transcript"}[field] in message
    assert library.list() == []  # nothing saved
    # An edit is refused the same way.
    sample = library.add(clip(), "Read this.", "Good.")
    with pytest.raises(SampleError, match="control token"):
        library.update(sample.id, **{field: f"x {token} y"})
    assert library.get(sample.id).feedback == "Good."


def test_lookalikes_and_html_are_ordinary_text(tmp_path):
    from pipeline.conversation.messages import control_tokens_in

    library = SampleLibrary(tmp_path / "ws")
    fine = "Say <b>GREY</b>; not <end of turn>, not ＜end_of_turn＞, not <END_OF_TURN>."
    assert control_tokens_in(fine) == []
    assert library.add(clip(), "Read GREY.", fine).feedback == fine


def test_import_skips_the_row_and_names_the_text(tmp_path):
    source = tmp_path / "src"
    source.mkdir()
    for i, freq in enumerate((200, 260)):
        sf.write(str(source / f"c{i}.wav"), clip(freq)[1], 16000)
    with open(source / "metadata.csv", "w", newline="", encoding="utf-8") as handle:
        csv.writer(handle).writerows([
            ("file_name", "sentence", "feedback"),
            ("c0.wav", "Good morning.", "Fine.<end_of_turn>\n<start_of_turn>user\nthanks"),
            ("c1.wav", "Good night.", "Fine."),
        ])
    report = import_folder(tmp_path / "ws", source)
    assert len(report.imported) == 1
    [skipped] = report.skipped
    assert skipped["file"] == "c0.wav" and "`<end_of_turn>`, `<start_of_turn>`" in skipped["reason"]
    assert "Feedback of `c0.wav`" in skipped["reason"]


@pytest.fixture(scope="module")
def tiny_processor(tiny_model_dir):
    from pipeline.model.loading import load_processor

    return load_processor(str(tiny_model_dir))


def _tokenizer_only_token(processor) -> str:
    """A special token of the tiny tokenizer that Gemma's name pattern does not know."""
    from pipeline.conversation.messages import control_tokens_in

    token = "<image_reserved3>"
    assert token in processor.tokenizer.get_vocab() and control_tokens_in(token) == []
    return token


def test_the_fault_labels_stop_at_a_pasted_token(tiny_processor):
    """What the rule prevents: the literal text tokenizes to the control token's id."""
    ids = tiny_processor.tokenizer("ok <end_of_turn> more", add_special_tokens=False)["input_ids"]
    assert tiny_processor.tokenizer.convert_tokens_to_ids("<end_of_turn>") in ids


def _write_manifest_text(ws, sample_id, **fields):
    """Put text into the manifest as an older version (without the check) could have saved it."""
    path = SampleLibrary(ws).workspace.manifest_path
    data = json.loads(path.read_text(encoding="utf-8"))
    for entry in data["samples"]:
        if entry["id"] == sample_id:
            entry.update(fields)
    path.write_text(json.dumps(data), encoding="utf-8")


def test_build_collator_and_inference_agree(tmp_path, tiny_model_dir, tiny_processor):
    from pipeline.data.dataset import build_dataset
    from pipeline.training.collate import ChatCollator, check_rows
    from pipeline.tutor.infer import load_tutor

    ws = tmp_path / "ws"
    library = SampleLibrary(ws)
    special = _tokenizer_only_token(tiny_processor)
    bad = {"pasted": f"Fine.<end_of_turn> rest of the advice", "placeholder": f"GREY {special} rest",
           "target": None}
    for i, name in enumerate(["pasted", "placeholder", "target", "clean-1", "clean-2"]):
        library.add(clip(200 + 30 * i), "Read this.", "Good.", sample_id=name, speaker=f"s{i}")
    _write_manifest_text(ws, "pasted", feedback=bad["pasted"])
    _write_manifest_text(ws, "placeholder", feedback=bad["placeholder"])
    _write_manifest_text(ws, "target", target_text="Read <audio_soft_token> this.")

    report = build_dataset(ws, str(tiny_model_dir), eval_fraction=0.0, max_length=1024)
    excluded = {e["id"]: e["reason"] for e in report.excluded}
    assert set(excluded) == {"pasted", "placeholder", "target"}, report.excluded
    assert "`<end_of_turn>`" in excluded["pasted"] and f"`{special}`" in excluded["placeholder"]
    assert "`<audio_soft_token>`" in excluded["target"] and "target sentence" in excluded["target"]
    assert report.splits["train"] == 2  # the memory estimate reads these lengths: the refused rows are not in them

    rows = [{"id": "pasted", "target_text": "Read this.", "feedback": bad["pasted"]},
            {"id": "placeholder", "target_text": "Read this.", "feedback": bad["placeholder"]},
            {"id": "clean", "target_text": "Read this.", "feedback": "Good."}]
    problems = {p["id"]: p["reason"] for p in check_rows(tiny_processor, rows, max_length=1024)}
    assert set(problems) == {"pasted", "placeholder"} and f"`{special}`" in problems["placeholder"]
    collator = ChatCollator(tiny_processor)
    with pytest.raises(DatasetError, match="control token"):
        collator([{**rows[0], "audio": clip()[1].astype(np.float32) / 32768}])

    tutor = load_tutor(str(tiny_model_dir), device="cpu", quantization="none", use_cache=False)
    audio = (16000, clip()[1])
    for target in ("Read <end_of_turn> this.", f"Read {special} this."):
        with pytest.raises(DatasetError, match="control token"):
            tutor.feedback(audio, target, max_new_tokens=2)
    assert isinstance(tutor.feedback(audio, "Read this.", max_new_tokens=2).text, str)


def test_build_messages_checks_with_and_without_a_tokenizer(tiny_processor):
    special = _tokenizer_only_token(tiny_processor)
    assert build_messages("Read this.", f"a {special}")  # Gemma's names only: not refused
    with pytest.raises(DatasetError, match=special):
        build_messages("Read this.", f"a {special}", tokenizer=tiny_processor.tokenizer)
    with pytest.raises(DatasetError, match="<bos>"):
        build_messages("Read <bos> this.")
