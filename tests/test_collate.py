"""The training collator: answer-only labels on real rendered examples, mixed-length clip batches."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from pipeline.model.tokens import IGNORE_INDEX, answer_spans
from pipeline.training.collate import ChatCollator, check_rows
from pipeline.errors import DatasetError

RATE = 16000


@pytest.fixture(scope="module")
def processor(tiny_model_dir):
    from pipeline.model.loading import load_processor

    return load_processor(str(tiny_model_dir))


def _real_row(speechocean_dir, utt="000050083", split="train"):
    """A dataset-style row for a real speechocean762 clip with expert-score feedback."""
    from pipeline.data.audio import load_audio, wav_bytes
    from pipeline.conversation.feedback import feedback_from_scores

    scores = json.loads((speechocean_dir / "resource" / "scores.json").read_text())[utt]
    text = dict(line.split(maxsplit=1) for line in (speechocean_dir / split / "text").read_text().splitlines())[utt]
    speaker = utt[1:5]
    clip = load_audio(speechocean_dir / "WAVE" / f"SPEAKER{speaker}" / f"{utt}.WAV")
    return {"id": utt, "target_text": text, "feedback": feedback_from_scores(text, scores), "audio_wav": wav_bytes(clip.samples)}


def test_label_mask_supervises_only_the_answer_on_a_real_example(processor, speechocean_dir):
    row = _real_row(speechocean_dir)
    assert "GREY" in row["feedback"]
    batch = ChatCollator(processor, max_length=1024)([row])
    tok = processor.tokenizer
    ids, labels = batch["input_ids"][0], batch["labels"][0]
    assert ids.tolist().count(tok.bos_token_id) == 1
    assert ids.tolist().count(tok.audio_token_id) == 188
    supervised = (labels != IGNORE_INDEX).nonzero().flatten()
    start, end = supervised.min().item(), supervised.max().item() + 1
    assert supervised.numel() == end - start  # one contiguous span
    assert tok.decode(ids[start:end]) == row["feedback"] + "<end_of_turn>"
    assert tok.decode(ids[:start]).endswith("<start_of_turn>model\n")
    assert "<start_of_turn>model\n" not in tok.decode(ids[:start])[:-len("<start_of_turn>model\n")]
    # nothing of the system prompt, the audio or the target sentence is supervised
    assert (labels[:start] == IGNORE_INDEX).all() and (labels[end:] == IGNORE_INDEX).all()
    assert torch.equal(labels[start:end], ids[start:end])


def test_mixed_length_clips_batch_like_single_rows(processor, speechocean_dir, tiny_model_dir):
    from pipeline.data.audio import wav_bytes
    from pipeline.data.audio import decode_wav
    from transformers import Gemma3nForConditionalGeneration

    real = _real_row(speechocean_dir)
    samples = decode_wav(real["audio_wav"])
    short = dict(real, id="short", audio_wav=wav_bytes(samples[: int(0.5 * RATE)]), feedback="Scores (0-10): total 9")
    long = dict(real, id="long", audio_wav=wav_bytes(np.tile(samples, 3)[: int(9 * RATE)]))
    rows = [short, real, long]
    collator = ChatCollator(processor, max_length=1024)
    batch = collator(rows)
    frames = batch["input_features_mask"].sum(dim=1).tolist()
    assert frames[0] < frames[1] < frames[2] == batch["input_features"].shape[1]
    assert batch["input_features"].shape[-1] == 128
    lengths = batch["attention_mask"].sum(dim=1)
    assert lengths[0] < lengths[2] or lengths[0] < lengths[1]
    assert processor.tokenizer.padding_side == "right"
    assert processor.feature_extractor.padding_side == "right"  # padding side never leaks into the audio
    for i, row in enumerate(rows):
        supervised = batch["labels"][i][batch["labels"][i] != IGNORE_INDEX]
        assert processor.tokenizer.decode(supervised) == row["feedback"] + "<end_of_turn>"
        assert (batch["labels"][i][batch["attention_mask"][i] == 0] == IGNORE_INDEX).all()
    # Padding the clips to the longest one changes no clip's features: its mel frames and its frame
    # mask equal the row's alone (the feature extractor alone counts 256 valid frames where, padded in a
    # batch, it counted 258), so the audio encoder gives it the same number of valid audio tokens.
    model = Gemma3nForConditionalGeneration.from_pretrained(tiny_model_dir, dtype=torch.float32, attn_implementation="eager").eval()
    with torch.no_grad():
        batched_audio = model.model.get_audio_features(batch["input_features"], ~batch["input_features_mask"], return_dict=True)
        for i, row in enumerate(rows):
            single = collator([row])
            k = single["input_features_mask"].shape[1]
            assert torch.equal(single["input_features"][0], batch["input_features"][i, :k]), row["id"]
            assert torch.equal(single["input_features_mask"][0], batch["input_features_mask"][i, :k]), row["id"]
            assert not batch["input_features_mask"][i, k:].any(), f"{row['id']}: padding frames marked valid"
            alone = model.model.get_audio_features(single["input_features"], ~single["input_features_mask"], return_dict=True)
            valid = int((~alone.audio_mel_mask[0]).sum())
            assert valid > 1
            assert int((~batched_audio.audio_mel_mask[i]).sum()) == valid, row["id"]
            # Every valid token, the last one included: the encoder's first convolution looks ahead
            # past the clip (reverse-causal padding) and must find zeros there in a batch as alone
            # (issue 21 #9: the padding frames held the log-mel floor, 0.53 off on the last token).
            assert (batch["input_features"][i, k:] == 0).all(), row["id"]
            # equal up to float32 rounding (one unit in the last place of values ~10 is 1e-6)
            gap = (alone.pooler_output[0, :valid] - batched_audio.pooler_output[i, :valid]).abs().max().item()
            assert torch.allclose(alone.pooler_output[0, :valid], batched_audio.pooler_output[i, :valid],
                                  rtol=1e-6, atol=1e-6), (row["id"], gap)
        out = model(**batch)
    assert torch.isfinite(out.loss)


def test_rows_without_a_supervised_token_or_too_long_are_refused(processor, speechocean_dir):
    row = _real_row(speechocean_dir)
    assert check_rows(processor, [row], max_length=1024) == []
    too_long = check_rows(processor, [row], max_length=256)
    assert too_long and "--max-length 256" in too_long[0]["reason"] and too_long[0]["too_long"]
    empty = check_rows(processor, [dict(row, feedback="")], max_length=1024)
    assert empty and empty[0]["id"] == row["id"]
    with pytest.raises(DatasetError, match="longer than --max-length 256"):
        ChatCollator(processor, max_length=256)([row])


def test_a_prompt_without_answer_has_no_span(processor, speechocean_dir):
    from pipeline.conversation.messages import build_messages
    from pipeline.data.audio import decode_wav

    row = _real_row(speechocean_dir)
    prompt = processor.apply_chat_template(
        build_messages(row["target_text"], None, decode_wav(row["audio_wav"])),
        add_generation_prompt=False, tokenize=True, return_dict=True, return_tensors="pt",
    )
    assert answer_spans(prompt["input_ids"][0].tolist(), processor.tokenizer) is None


def test_a_dialogue_reply_hears_each_clip_as_the_training_collator_does(processor, speechocean_dir, tiny_model_dir):
    """Issue 21 #9b: a dialogue's clips reach the model at inference with the frame masks and padding
    frames the training collator gives them (a short clip beside a long one: 211 valid frames in
    training, 213 when answering, before one function aligned both)."""
    from pipeline.data.audio import load_audio
    from pipeline.tutor.infer import Tutor, load_tutor

    paths = [speechocean_dir / "WAVE/SPEAKER0001/000010011.WAV", speechocean_dir / "WAVE/SPEAKER0001/000010063.WAV"]
    clips = [load_audio(p).samples for p in paths]
    assert clips[0].size < clips[1].size
    tutor = load_tutor(str(tiny_model_dir), device="cpu", quantization="none", use_cache=False)
    seen = {}

    class Captured(Exception):
        pass

    def capture(make_messages, clips):  # what the model is given: every answer's inputs come from Tutor._inputs
        seen.update(Tutor._inputs(tutor, make_messages, clips))
        raise Captured

    tutor._inputs = capture
    with pytest.raises(Captured):
        tutor.dialogue_reply([{"role": "learner", "audio": str(paths[0])}, {"role": "tutor", "text": "Say it again."},
                              {"role": "learner", "audio": str(paths[1])}])
    turns = [{"role": "learner", "clip": 0}, {"role": "tutor", "text": "Say it again."},
             {"role": "learner", "clip": 1}, {"role": "tutor", "text": "Better."}]
    trained = ChatCollator(processor)([{"id": "d", "kind": "dialogue", "turns": json.dumps(turns), "audio": clips}])
    assert torch.equal(seen["input_features_mask"], trained["input_features_mask"])
    assert torch.equal(seen["input_features"], trained["input_features"])
    alone = processor.feature_extractor([clips[0]], return_tensors="np")["input_features_mask"][0]
    assert int(seen["input_features_mask"][0].sum()) == int(alone.sum())
